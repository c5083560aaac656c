"""Interrupts during training: the first SIGINT or SIGTERM becomes a request to stop after the
current step (and save); a second one exits at once."""

from __future__ import annotations

import signal
from typing import Any

from minigpt.runtime.device import log


class StopRequest:
    """Turns the first SIGINT/SIGTERM into a flag the loop checks between steps (so a step is never
    cut in half); a second signal exits at once (checkpoints are written atomically, so nothing on
    disk can be left half-written)."""

    def __init__(self, hard_exit: bool = True) -> None:
        # under torchrun the launcher itself follows a Ctrl-C with SIGTERM to every worker and
        # kills them after its own timeout: there, further signals only keep the stop request
        self.hard_exit = hard_exit
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            if not self.hard_exit:
                return
            log("second interrupt: exiting now without saving")
            raise SystemExit(128 + signum)
        self.signum = signum
        log(f"{signal.Signals(signum).name}: finishing this step, then saving last.pt (interrupt again to quit now)")

    def __enter__(self) -> StopRequest:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (e.g. inside a test runner thread)
                pass
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

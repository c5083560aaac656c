"""Interrupts during training: the first SIGINT, SIGTERM or SIGUSR1 (SLURM's warning, docs/distributed.md)
becomes a request to stop after the current step and save; a second one exits at once."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

from minigpt.runtime.device import log

# the signals that stop a training (SIGUSR1 does not exist on Windows)
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR1") if hasattr(signal, name))


class StopNow(Exception):
    """A stop signal arrived inside `StopRequest.at_once()`: the work there is abandoned."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopRequest:
    """The first stop signal as a flag the loop checks between steps, so a step is never cut in half; a
    second exits at once. Inside `at_once()` (work that changes no state) the first stops that work."""

    def __init__(self, hard_exit: bool = True) -> None:
        # False under torchrun: its launcher kills the workers after its own timeout; more signals keep the request
        self.hard_exit = hard_exit
        self.signum: int | None = None
        self._at_once = False
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            if not self.hard_exit:
                return
            log("second interrupt: exiting now without saving")
            raise SystemExit(128 + signum)
        self.signum = signum
        if self._at_once:
            raise StopNow(signum)
        log(f"{signal.Signals(signum).name}: finishing this step, then saving last.pt (interrupt again to quit now)")

    @contextlib.contextmanager
    def at_once(self) -> Iterator[None]:
        """A block the first stop signal interrupts (StopNow), or that does not start after one."""
        if self.signum is not None:
            raise StopNow(self.signum)
        self._at_once = True
        try:
            yield
        finally:
            self._at_once = False

    def __enter__(self) -> StopRequest:
        for sig in STOP_SIGNALS:
            with contextlib.suppress(ValueError):  # not the main thread (e.g. inside a test runner thread)
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

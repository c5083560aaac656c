"""The minigpt process's start and end, around the command line: what must be in the environment
before typer builds the command, and an exit that skips the interpreter's slow teardown. Standard
library only."""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from typing import NoReturn


def honour_named_shell(args: list[str]) -> None:
    """`--install-completion zsh`, `--show-completion fish`: typer's two options act for the shell
    they detect and take no value, so a shell named after them would be ignored (zsh's script
    installed from a bash prompt would be bash's; `tcsh` would install bash's). Typer's switch for
    this (meant for its tests) makes them take the name, and refuse one it does not support."""
    for flag, shell in zip(args, args[1:]):
        if flag in ("--install-completion", "--show-completion") and not shell.startswith("-"):
            os.environ["_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION"] = "1"


def exit_fast(code: int) -> NoReturn:
    """End the process with `code`, without the interpreter's slow teardown: gc.freeze() leaves
    torch's objects to the OS (files are closed by then; atexit handlers still run). Speed trick:
    every command ends sooner; benchmark `scripts/bench.py tricks`.

    Once triton is loaded (a compiled run), nanobind's exit hook would report every frozen type as
    "nanobind: leaked ..." (their reference cycles are freed only by the teardown's last collection,
    which skips frozen objects), so such a process ends with `_exit_without_teardown` instead."""
    if nanobind_loaded():
        _exit_without_teardown(code)
    gc.freeze()
    sys.exit(code)


def nanobind_loaded() -> bool:
    """Whether an extension built with nanobind is loaded (triton's is, once torch.compile has run).
    nanobind gives its types metaclasses of its own, direct subclasses of `type`: a quick look."""
    return any(meta.__module__ == "nanobind" for meta in type.__subclasses__(type))


def _exit_without_teardown(code: int) -> NoReturn:
    """What Py_FinalizeEx does before its teardown, then os._exit: threading's shutdown (its own
    exit hooks, which tell thread pools such as the compiler's to stop, then a wait for every
    non-daemon thread; joining them by hand hangs on the pool's idle workers), the atexit handlers
    (logging, torch's compile workers, temporary folders), flushing stdout and stderr. Skipped: the
    teardown's collection and __del__ methods (training has closed its files by now) and the C-level
    exit hooks, nanobind's leak report among them."""
    shutdown_threads = getattr(threading, "_shutdown", None)
    if shutdown_threads is None:  # not the CPython this was written against: the interpreter's own exit
        sys.exit(code)
    shutdown_threads()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(code)

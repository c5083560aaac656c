"""The process around the command line: the environment typer needs, and a fast exit. Standard library only."""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from typing import NoReturn


def honour_named_shell(args: list[str]) -> None:
    """Make `--install-completion zsh` and `--show-completion fish` act for the shell named (typer's own
    detection would ignore it), refusing one typer does not support."""
    for flag, shell in zip(args, args[1:]):
        if flag in ("--install-completion", "--show-completion") and not shell.startswith("-"):
            os.environ["_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION"] = "1"


def exit_fast(code: int) -> NoReturn:
    """End the process with `code` without the interpreter's slow teardown (atexit handlers still run;
    once nanobind is loaded, `_exit_without_teardown`: docs/design.md#decisions).
    Speed trick: every command ends sooner; benchmark `scripts/bench.py tricks`."""
    if nanobind_loaded():
        _exit_without_teardown(code)
    gc.freeze()
    sys.exit(code)


def nanobind_loaded() -> bool:
    """Whether a nanobind extension (triton's, after torch.compile) is loaded, from `type`'s subclasses."""
    return any(meta.__module__ == "nanobind" for meta in type.__subclasses__(type))


def _exit_without_teardown(code: int) -> NoReturn:
    """What Py_FinalizeEx does before its teardown (threading's shutdown, the atexit handlers, flushing
    stdout and stderr), then os._exit: no last collection, no __del__, no C-level exit hooks."""
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

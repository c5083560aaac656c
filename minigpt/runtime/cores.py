"""The minigpt process's start and end, around the command line: what must be in the environment
before torch loads or typer builds the command, and an exit that skips the interpreter's slow
teardown. Standard library only."""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from typing import NoReturn


def _cpu_ticks(cpus: set[int] | None) -> int | None:
    """Busy clock ticks so far of the given CPUs (all when None), from /proc/stat; None elsewhere."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    busy = 0
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or (cpus is not None and int(name[3:]) not in cpus):
            continue
        values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
        busy += sum(values) - values[3] - values[4]
    return busy


def _own_ticks() -> float:
    t = os.times()
    return (t.user + t.system) * os.sysconf("SC_CLK_TCK")


def allowed_cores() -> int:
    """The cores this process may run on (os.sched_getaffinity: `taskset`, container CPU sets)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cores_left(cores: int, busy: float) -> int:
    """Threads to run when other processes keep `busy` of our `cores` busy: one per core they
    leave (a core counts as taken from half of it on), and never none."""
    return max(1, cores - int(busy + 0.5))


class CoreLoad:
    """How many of this process's cores other processes keep busy, measured over the time between
    the start of the command (before torch loads: ~2-3 s on 2 cores) and `others()`, less this
    process's own CPU time. Zero added latency: the interval is time the command spends anyway."""

    def __init__(self) -> None:
        self.cpus = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        self.t0, self.busy0, self.own0 = _monotonic(), _cpu_ticks(self.cpus), _own_ticks()

    def others(self) -> float | None:
        busy = _cpu_ticks(self.cpus)
        seconds = _monotonic() - self.t0
        if busy is None or self.busy0 is None or seconds < 0.2:
            return None
        hz = os.sysconf("SC_CLK_TCK")
        return max(0.0, (busy - self.busy0 - (_own_ticks() - self.own0)) / hz / seconds)


def _monotonic() -> float:
    import time

    return time.monotonic()


class CoreShare:
    """A CPU training's thread count, kept to the cores other processes leave it.

    libgomp's idle threads spin before they sleep. Alone, that is what a training wants: this
    machine's small operations ran 15-45% slower with OMP_WAIT_POLICY=PASSIVE (sleeping threads
    wake late). Beside another busy process, two spinning thread teams take each other's cores and
    both collapse (two trainings ran at 0.27 of one alone each). So a training keeps the default
    and, every `every` seconds, measures how many of its cores other processes keep busy: with
    one thread per core left to it, no thread waits on a core that someone else holds."""

    def __init__(self, threads: int, cores: int, every: float = 5.0) -> None:
        self.threads, self.cores, self.every = threads, cores, every
        self.window = CoreLoad()

    def check(self) -> tuple[int, float] | None:
        """(the new thread count, the other processes' busy cores) when the count should change;
        None otherwise, and between measurements."""
        if _monotonic() - self.window.t0 < self.every:
            return None
        busy = self.window.others()
        self.window = CoreLoad()
        if busy is None:
            return None
        want = cores_left(self.cores, busy)
        if want == self.threads:
            return None
        self.threads = want
        return want, busy


START_LOAD = CoreLoad()  # taken when the command line is imported, before torch; again by each command


def measure_load_from_now() -> None:
    """Start the interval over which the next command measures the load (`minigpt` is one command
    a process; the tests and the Python API run several in one process)."""
    global START_LOAD
    START_LOAD = CoreLoad()


def honour_named_shell(args: list[str]) -> None:
    """`--install-completion zsh`, `--show-completion fish`: typer's two options act for the shell
    they detect and take no value, so a shell named after them would be ignored (zsh's script
    installed from a bash prompt would be bash's; `tcsh` would install bash's). Typer's switch for
    this (meant for its tests) makes them take the name, and refuse one it does not support."""
    for flag, shell in zip(args, args[1:]):
        if flag in ("--install-completion", "--show-completion") and not shell.startswith("-"):
            os.environ["_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION"] = "1"


def exit_fast(code: int) -> NoReturn:
    """End the process with `code`, without the interpreter's slow teardown.

    The teardown walks every object torch's import created (~0.3 s of the 0.45 s exit on a 2-core
    machine, a few percent of a short `sample`): gc.freeze() leaves them to the OS; files are closed
    by then and atexit handlers still run.

    That is not enough once triton is loaded (a compiled training run). nanobind, its bindings
    library, checks from a C exit hook after the teardown that every type, function and object it
    made was freed, and prints "nanobind: leaked ..." for each one that was not. Types sit in
    reference cycles (each refers to itself through its __mro__), which only the teardown's last
    collection frees, and that collection skips frozen objects: after gc.freeze() every nanobind
    type is reported, though none leaked. Without the freeze the report goes away, but the
    collection then walks the compiler's objects too (1.6 s instead of 0.25 s after a compiled run
    here), so such a process ends with os._exit after the shutdown steps that matter.
    """
    if nanobind_loaded():
        _exit_without_teardown(code)
    gc.freeze()
    sys.exit(code)


def nanobind_loaded() -> bool:
    """Whether an extension built with nanobind is loaded (triton's is, once torch.compile has run).
    nanobind gives its types metaclasses of its own, direct subclasses of `type`: ~40 us to look."""
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

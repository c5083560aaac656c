"""The cores this process may use, how busy other processes keep them, and the thread count that leaves
them their share (decided once, at the start: a count that changes mid-run changes the numbers); what
the CPU is (`cpu_model_and_flags`)."""

from __future__ import annotations

import os
import platform
import time

BF16_FLAGS = ("amx_bf16", "avx512_bf16", "avx512f")  # the /proc/cpuinfo flags that decide how fast bf16 multiplies


def cpu_model_and_flags() -> tuple[str, tuple[str, ...]]:
    """The CPU's model name and which of `BF16_FLAGS` it has, from /proc/cpuinfo (its first 64 KiB: the
    first core's entry); elsewhere platform.processor() and no flags."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            info = f.read(1 << 16)
    except OSError:
        return platform.processor(), ()
    words = info.split()
    flags = tuple(flag for flag in BF16_FLAGS if flag in words)
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    return model, flags


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
    """Threads to run when others keep `busy` of our `cores` busy: one a core left (taken from half on), never none."""
    return max(1, cores - int(busy + 0.5))


class CoreLoad:
    """How many of this process's cores other processes keep busy since the command started (less its own CPU)."""

    def __init__(self) -> None:
        self.cpus = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        self.t0, self.busy0, self.own0 = time.monotonic(), _cpu_ticks(self.cpus), _own_ticks()

    def others(self) -> float | None:
        busy = _cpu_ticks(self.cpus)
        seconds = time.monotonic() - self.t0
        if busy is None or self.busy0 is None or seconds < 0.2:
            return None
        return max(0.0, (busy - self.busy0 - (_own_ticks() - self.own0)) / os.sysconf("SC_CLK_TCK") / seconds)

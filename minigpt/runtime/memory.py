"""What memory a process has (RAM, a cgroup's limit, free GPU memory) and holds; giving back mapped pages,
and keeping the memory a CPU training frees for its next step."""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
from pathlib import Path
from typing import Any

import torch


def available_bytes(device: torch.device) -> tuple[int | None, str]:
    """Memory this process may still use on `device`, and where the figure came from."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        # the driver counts the blocks PyTorch caches for reuse as used: to this process they are
        # free (a sweep's earlier run in the same process leaves its memory there)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return free + cached, f"free on {torch.cuda.get_device_name(device)}"
    if device.type == "mps":  # Metal's recommended working set, less what this process's driver holds
        recommended = getattr(torch.mps, "recommended_max_memory", None)
        if recommended is None:
            return None, "not reported by this torch release"
        return recommended() - torch.mps.driver_allocated_memory(), "recommended for Metal on this Mac"
    if device.type != "cpu":
        return None, "not reported for this device"
    limit, avail = _cgroup_room(), None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
                break
    if limit is not None and (avail is None or limit < avail):
        return limit, "left under this container's memory limit"
    return avail, "MemAvailable"


def _cgroup_room() -> int | None:
    """cgroup v2 memory.max - memory.current for this process's group (None when unlimited)."""
    try:
        group = Path("/proc/self/cgroup").read_text().strip().split("::", 1)[1]
        base = Path("/sys/fs/cgroup") / group.lstrip("/")
        limit = (base / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((base / "memory.current").read_text()))
    except (OSError, ValueError, IndexError):
        return None


def out_of_memory(e: BaseException) -> bool:
    """Whether `e` is a device out of memory: torch.OutOfMemoryError (CUDA), or the plain RuntimeError
    that MPS ("MPS backend out of memory") and older CUDA releases ("CUDA out of memory") raise."""
    if isinstance(e, getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)):
        return True
    return isinstance(e, RuntimeError) and ("MPS backend out of memory" in str(e) or "CUDA out of memory" in str(e))


def free_cached(device: torch.device) -> None:
    """Give the blocks PyTorch caches on a GPU or a Mac back to the device (after an out-of-memory error)."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "mps":
        torch.mps.empty_cache()


def gb(n: float) -> str:
    return f"{n / 2**30:.1f} GB"


def process_rss() -> int:
    """This process's resident memory now, in bytes (0 where /proc is missing)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def release_pages(ids: Any) -> None:
    """Unmap the pages of a memory-mapped array that reading has mapped into this process (the page cache
    keeps them), so resident memory stays below the corpus's size; benchmark `scripts/bench.py data`."""
    mapping = getattr(ids, "_mmap", None)
    if mapping is not None and hasattr(mapping, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        mapping.madvise(mmap.MADV_DONTNEED)


def keep_freed_memory() -> bool:
    """Have glibc keep the memory a CPU training frees for its next step (False, nothing done, without glibc).
    Speed trick: no page faults on each step's fresh activations; benchmark scripts/step_levers.py."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's <malloc.h>
    return bool(mallopt(m_mmap_threshold, 32 << 20)) and bool(mallopt(m_trim_threshold, 2**31 - 1))

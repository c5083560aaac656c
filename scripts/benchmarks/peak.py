"""peak: this machine's matrix-multiply peak, the denominator of a CPU's MFU. Other figures quote
it beside them, and `speed --only big` measures it for its MFU figure."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from benchmarks.harness import machine_info

PEAK_SIZES = (1024, 2048, 3072)
PEAK_EMULATED_SIZES = (512,)  # bfloat16 on a CPU without bf16 instructions: bigger products take minutes


def gflops(n: int, dtype_name: str, seconds: float = 1.5) -> float:
    """The best of several timed products of two n x n matrices, in GFLOP/s (2 n^3 FLOPs each)."""
    import torch

    dtype = getattr(torch, dtype_name)
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    for _ in range(2):
        a @ b  # warm-up: thread pool, packing buffers
    best = float("inf")
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9


def measure_peak(threads: int = 0) -> dict[str, Any]:
    """The best GFLOP/s of square products (n = 1024, 2048, 3072) in bfloat16 and float32."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    from minigpt.runtime.device import cpu_has_native_bf16

    result: dict[str, Any] = {"threads": torch.get_num_threads(), "native_bf16": cpu_has_native_bf16()}
    for dtype in ("bfloat16", "float32"):
        sizes = PEAK_SIZES if dtype == "float32" or result["native_bf16"] else PEAK_EMULATED_SIZES
        per_size = {n: round(gflops(n, dtype), 1) for n in sizes}
        result[dtype] = {"peak_gflops": max(per_size.values()), "by_size": per_size}
    return result


def run(a: argparse.Namespace) -> int:
    """This machine's matrix-multiply peak, measured: the denominator of a CPU's MFU.

    Square products (n = 1024, 2048, 3072) in bfloat16 and float32 on the threads torch uses (all
    allowed cores unless OMP_NUM_THREADS or --threads says otherwise); the best GFLOP/s of each. On
    a CPU with native bf16 (AVX512-BF16 or AMX) bfloat16 runs about 4x float32; elsewhere it is
    emulated and measured at 512 only. `speed --only big` measures it for its MFU figure."""
    result = measure_peak(a.threads)
    if not a.json_only:
        for dtype in ("bfloat16", "float32"):
            r = result[dtype]
            emulated = dtype == "bfloat16" and not result["native_bf16"]
            note = " (emulated: this CPU has no bf16 instructions)" if emulated else ""
            print(f"{dtype}: {r['peak_gflops']:.0f} GFLOP/s peak on {result['threads']} threads ({r['by_size']}){note}")
    print(json.dumps({**result, "machine": machine_info()}))
    return 0


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--json-only", action="store_true", help="print only the JSON line")

"""The ceiling of a training step on a CPU's matrix engine: every matrix product one step of a model
does (forward and backward, attention's included), at the step's own shapes, in bfloat16, back to
back, with nothing else in between. No step can beat its products alone; issue 51 asks for the whole
6x384 step at 45% of the bf16 peak, so this says whether its products alone reach that.

    uv run python scripts/step_ceiling.py                 # 6x384, context 256, batch 16 (the default)
    uv run python scripts/step_ceiling.py 3 128 4 128 16  # layers width heads context batch

Prints the products' GFLOP/s, their share of this run's bf16 peak (`bench.py peak`'s measurement,
made in the same process) and the tokens/s a step made of these products alone would reach.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from benchmarks.peak import measure_peak  # noqa: E402


def step_products(layers: int, width: int, heads: int, context: int, batch: int, vocab: int = 65):
    """(batch count, m, k, n) of every product of one step: y = x W^T and its two gradients for each
    Linear; q k^T and p v and their two gradients each for attention; the tied head."""
    rows = batch * context
    linears = [(width, 3 * width), (width, width), (width, 4 * width), (4 * width, width)]
    out = []
    for _ in range(layers):
        for fan_in, fan_out in linears:
            out += [(1, rows, fan_in, fan_out), (1, rows, fan_out, fan_in), (1, fan_out, rows, fan_in)]
        hs, bh = width // heads, batch * heads
        out += [(bh, context, hs, context), (bh, context, context, hs), (bh, hs, context, context)] * 2
    out += [(1, rows, width, vocab), (1, rows, vocab, width), (1, vocab, rows, width)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shape", nargs="*", type=int, default=[6, 384, 6, 256, 16], help="layers width heads context batch")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(2)
    shapes = step_products(*a.shape)
    mats = [
        (torch.randn(b, m, k, dtype=torch.bfloat16), torch.randn(b, k, n, dtype=torch.bfloat16))
        for b, m, k, n in shapes
    ]
    flops = sum(2 * b * m * k * n for b, m, k, n in shapes)
    best = float("inf")
    for _ in range(a.rounds + 1):  # the first round warms the kernels up
        start = time.perf_counter()
        for x, w in mats:
            torch.bmm(x, w)
        best = min(best, time.perf_counter() - start)
    peak = measure_peak(2)["bfloat16"]["peak_gflops"]
    rate = flops / best / 1e9
    tokens = a.shape[3] * a.shape[4]
    print(f"shape {a.shape}: {len(shapes)} products, {flops / 1e9:.1f} GFLOP a step")
    print(f"best of {a.rounds} rounds: {best * 1e3:.1f} ms")
    print(f"products alone: {rate:,.0f} GFLOP/s = {100 * rate / peak:.0f}% of this run's bf16 peak ({peak:,.0f})")
    print(f"a step of these products alone: {tokens / best:,.0f} tokens/s")


if __name__ == "__main__":
    main()

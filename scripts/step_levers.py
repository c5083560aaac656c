"""Time one training step of a shape under each lever of issue 51 (docs/benchmarks.md, "The matrix
engine's levers"), one variant a process; run the variants alternately, on a quiet machine.

    uv run python scripts/step_levers.py 6 384 6 256 16 base          # layers width heads context batch variant
    uv run python scripts/step_levers.py 6 384 6 256 16 compile_products --profile

Variants: base (bf16 autocast, attention in float32 as minigpt trains), flash16 (attention in bf16
through the flash kernel), products (attention as explicit bf16 products), compile, compile_products,
fp32. flash16 replaces minigpt.model.causal_attention in this process only; the products variants
turn on the model's own switch, as the trainer does where it measures them faster.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time
from dataclasses import replace

import torch
import torch.nn.functional as F

import minigpt.model as M
from minigpt.config.schema import Config
from minigpt.runtime.device import autocast
from minigpt.runtime.memory import keep_freed_memory
from minigpt.training.optim import build_optimizer


def attend_in_bf16(q, k, v, dropout_p=0.0, mask=None, products=False):
    causal = mask is None and k.size(2) == q.size(2)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal)


def category(name: str) -> str:
    if name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"):
        return "matrix products"
    if "flash_attention" in name or "softmax" in name:
        return "attention kernels"
    if name in ("aten::copy_", "aten::_to_copy"):
        return "casts and copies"
    if "adam" in name.lower() or "_foreach" in name:
        return "optimizer"
    return "elementwise, norms, GELU, views"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shape", nargs=5, type=int, metavar="N", help="layers width heads context batch")
    ap.add_argument("variant", choices=["base", "flash16", "products", "compile", "compile_products", "fp32"])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--profile", action="store_true", help="also print the step's time by operator group")
    a = ap.parse_args()
    layers, width, heads, context, batch = a.shape
    torch.set_num_threads(2)
    keep_freed_memory()  # as minigpt's CPU training does
    if a.variant == "flash16":
        M.causal_attention = attend_in_bf16
    m = replace(Config().model, n_layer=layers, n_embd=width, n_head=heads, block_size=context, dropout=0.0)
    torch.manual_seed(0)
    model = M.GPT(m, 65)
    model.attend_by_products("products" in a.variant)  # the trainer's switch (model.attention_by_products)
    opt = build_optimizer(model, Config().replace(**{"optim.optimizer": "adamw"}), torch.device("cpu"))
    forward = torch.compile(model) if a.variant.startswith("compile") else model
    x = torch.randint(65, (batch, context + 1))
    dtype = torch.float32 if a.variant == "fp32" else torch.bfloat16

    def step() -> None:
        with autocast(torch.device("cpu"), dtype):
            _, loss = forward(x[:, :-1], x[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    start = time.perf_counter()
    step(), step()
    warm = time.perf_counter() - start
    times = []
    for _ in range(a.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    med = statistics.median(times)
    rate = batch * context / med
    print(f"{a.variant}: {med * 1e3:.1f} ms a step ({rate:,.0f} tokens/s), first two steps {warm:.1f} s")
    if a.profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                step()
        groups = collections.Counter()
        for event in prof.key_averages():
            groups[category(event.key)] += event.self_cpu_time_total
        total = sum(groups.values())
        for name, t in groups.most_common():
            print(f"  {name:34s} {100 * t / total:5.1f}%")


if __name__ == "__main__":
    main()

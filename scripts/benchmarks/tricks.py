"""tricks: issue 36's kept speed tricks, each on and off, alternating, medians. Each trick is
turned off by a public switch (a call left out, torch's own optimizer, plain sys.exit), never by
patching minigpt. The trial's other verdicts (linear()/norm() bypassing nn.Module.__call__, the
lazily built help epilog) are recorded in docs/lab/benchmarks.md, "Speed tricks on trial"."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from benchmarks.harness import add_repeats_arg, child, child_env, machine_info, run_timed


def decoding(repeats: int) -> dict[str, float]:
    """Characters/s of a 6x384 context-256 model, with and without column-major weights."""
    import torch

    from minigpt.config.schema import ModelConfig
    from minigpt.infer.decode import generate
    from minigpt.infer.loading import column_major_for_decoding
    from minigpt.model import GPT

    def rate(model, n: int) -> float:
        t = time.perf_counter()
        generate(model, [1, 2, 3], n, temperature=1.0, generator=torch.Generator().manual_seed(0))
        return n / (time.perf_counter() - t)

    rates: dict[str, list[float]] = {"tricks on": [], "row-major weights": []}
    for _ in range(repeats):
        for name, runs in rates.items():
            torch.manual_seed(0)
            model = GPT(ModelConfig(n_layer=6, n_head=6, n_embd=384, block_size=256), 65).eval()
            if name == "tricks on":
                column_major_for_decoding(model)
            rate(model, 20)
            runs.append(rate(model, 300))
    return {k: statistics.median(v) for k, v in rates.items()}


def training(repeats: int, steps: int = 35) -> dict[str, float]:
    """Milliseconds a step of the default model with minigpt's AdamW or torch.optim.AdamW(fused=True)."""
    import torch

    from minigpt.config.schema import ModelConfig
    from minigpt.model import GPT
    from minigpt.training.optim import AdamW

    x, y = torch.randint(0, 65, (32, 64)), torch.randint(0, 65, (32, 64))
    res: dict[str, list[float]] = {"tricks on": [], "torch AdamW fused": []}
    for _ in range(repeats):
        for name, runs in res.items():
            torch.manual_seed(0)
            model = GPT(ModelConfig(), 65)
            params = list(model.parameters())
            if name == "torch AdamW fused":
                opt = torch.optim.AdamW(params, lr=1e-3, fused=True)
            else:
                opt = AdamW([{"params": params, "weight_decay": 0.1}], lr=1e-3, betas=(0.9, 0.99))
            times = []
            for i in range(steps):
                t = time.perf_counter()
                model(x, y)[1].backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                if i >= min(5, steps // 2):
                    times.append(time.perf_counter() - t)
            runs.append(1000 * statistics.median(times))
    return {k: statistics.median(v) for k, v in res.items()}


def in_fresh_processes(program: str, variants: dict[str, str], repeats: int, timed: bool) -> dict[str, float]:
    """children/PROGRAM VARIANT in a new interpreter for each variant, alternating: the number it
    printed, or (timed) its wall time."""
    res: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(repeats):
        for name, arg in variants.items():
            proc = run_timed([child(program), arg], child_env())
            res[name].append(proc.wall_s if timed else float(proc.stdout.split()[-1]))
    return {k: statistics.median(v) for k, v in res.items()}


def run(a: argparse.Namespace) -> int:
    """Issue 36's kept speed tricks, each on and off, alternating, medians (docs/lab/benchmarks.md).

    decoding: chars/s of a 6x384 context-256 model with column-major weights (on) or row-major.
    training: ms per step of the default model with minigpt's AdamW or torch.optim.AdamW(fused=True).
    first-step: seconds from creating an optimizer to its first step in a fresh process. exit:
    whole-process seconds of a process that imports torch and exits through exit_fast or sys.exit."""
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    figures = {
        "decoding chars/s": decoding(a.repeats),
        "training ms/step": training(a.repeats, a.steps),
        "first optimizer step s": in_fresh_processes(
            "first_step.py", {"minigpt AdamW": "minigpt", "torch AdamW fused": "fused"}, a.repeats, timed=False
        ),
        "exit process s": in_fresh_processes(
            "exit.py", {"exit_fast": "exit_fast", "sys.exit": "sys.exit"}, a.repeats, timed=True
        ),
    }
    for figure, values in figures.items():
        print(f"{figure:<24} " + "  ".join(f"{k}: {v:.4g}" for k, v in values.items()))
    print(json.dumps({"tricks": figures, "repeats": a.repeats, "machine": machine_info()}))
    return 0


def add_args(ap: argparse.ArgumentParser) -> None:
    add_repeats_arg(ap, default=5)
    ap.add_argument("--steps", type=int, default=35, help="training steps timed per measurement")

#!/usr/bin/env python3
"""The GPU recipe's model on the CPU: 6 layers, 384 wide, context 256, batch 16, side by side.

The reference runs `--layers 6 --heads 6 --embd 384 --ctx 256 --batch 16` and reports its median
step time (steps 20 on, evaluations excluded). minigpt trains the same model (the model section of
configs/shakespeare_char.yaml with dropout 0, as the reference has none) at batch 16 and reports
tokens/s every log.interval steps; the steady state is the median after the first three logs. The
MFU figure counts FLOPs as minigpt/runtime/mfu.py does and divides by this machine's matrix-multiply
peak in the precision minigpt trains in, measured by scripts/bench_peak.py in the same run: bf16 on a
CPU that multiplies it natively, float32 elsewhere (where minigpt falls back to float32 and bf16 is
emulated, dividing by the bf16 figure would give more than 100%). The reference, always float32, is
given as a fraction of the float32 peak.

    uv run python scripts/bench_big.py                 # one pair
    uv run python scripts/bench_big.py --repeats 3     # medians
    uv run python scripts/bench.py --only big          # the same, inside the whole bench

About 3 minutes per repeat on 2 cores. Run it with nothing else on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import (  # noqa: E402
    REPO,
    add_pair_args,
    child_env,
    last_json,
    medians,
    minigpt_train,
    pair_args_problem,
    progress,
    read_tokens_per_sec,
    run_reference,
    run_timed,
    scratch,
    steady_state,
    yes_no,
)

MODEL = ["--layers", "6", "--heads", "6", "--embd", "384", "--ctx", "256", "--batch", "16"]
RECIPE = REPO / "configs" / "shakespeare_char.yaml"
OVERRIDES = ["model.dropout=0.0", "train.batch_size=16", "train.eval_interval=100000", "train.eval_steps=1",
             "train.final_eval=false", "log.sample_length=0", "log.attention_probe=", "log.interval=5"]  # fmt: skip
TARGET_RATIO = 3.0
STEPS = 60


def flops_per_token() -> int:
    sys.path.insert(0, str(REPO))
    from minigpt.config.schema import ModelConfig
    from minigpt.runtime.mfu import flops_per_token as count

    return count(ModelConfig(n_layer=6, n_head=6, n_embd=384, block_size=256), 65)


def big_once(
    ref: Path, data: Path, env: dict[str, str], tmp: Path, rep: int, steps: int, compile_: bool
) -> dict[str, Any]:
    progress(f"6x384 [{rep}]: reference ({steps} steps)")
    _, ref_out = run_reference(ref, data, env, "--steps", str(steps), *MODEL)
    run_dir = tmp / f"big-{rep}"
    progress(f"6x384 [{rep}]: minigpt train ({steps} steps, train.compile={str(compile_).lower()})")
    args = [*OVERRIDES, f"train.max_steps={steps}", f"train.compile={str(compile_).lower()}"]
    run_timed(minigpt_train(data, run_dir, *args, config=RECIPE), env)
    tps = statistics.median(steady_state(read_tokens_per_sec(run_dir)))
    return {"minigpt_tokens_per_s": tps, "reference_tokens_per_s": float(ref_out["tokens_per_s"]),
            "ratio": tps / float(ref_out["tokens_per_s"])}  # fmt: skip


def peak_gflops(env: dict[str, str]) -> dict[str, Any]:
    """bench_peak's figures: {"native_bf16": bool, "bfloat16": GFLOP/s, "float32": GFLOP/s}."""
    progress("6x384: this machine's matrix-multiply peaks (scripts/bench_peak.py)")
    out = last_json(run_timed([str(REPO / "scripts" / "bench_peak.py"), "--json-only"], env), "bench_peak")
    return {"native_bf16": bool(out["native_bf16"]), "bfloat16": float(out["bfloat16"]["peak_gflops"]),
            "float32": float(out["float32"]["peak_gflops"])}  # fmt: skip


def run(ref: Path, data: Path, tmp: Path, repeats: int, steps: int, compile_: bool) -> dict[str, Any]:
    env = child_env(tmp / "cache")
    runs = [big_once(ref.resolve(), data.resolve(), env, tmp, i, steps, compile_) for i in range(repeats)]
    peaks = peak_gflops(env)
    peak_dtype = "bfloat16" if peaks["native_bf16"] else "float32"  # what minigpt's dtype auto trains in
    med = medians(runs)  # minigpt_tokens_per_s, reference_tokens_per_s, ratio
    flops = flops_per_token()
    return {
        "repeats": repeats, "steps": steps, "compile": compile_, "runs": runs, **med, "target_ratio": TARGET_RATIO,
        "flops_per_token": flops, "peak_dtype": peak_dtype, "peak_gflops": peaks[peak_dtype],
        "bf16_peak_gflops": peaks["bfloat16"], "fp32_peak_gflops": peaks["float32"],
        "native_bf16": peaks["native_bf16"],
        "fraction_of_peak": med["minigpt_tokens_per_s"] * flops / (peaks[peak_dtype] * 1e9),
        "reference_fraction_of_fp32_peak": med["reference_tokens_per_s"] * flops / (peaks["float32"] * 1e9),
    }  # fmt: skip


def describe(s: dict[str, Any]) -> str:
    met = yes_no(s["ratio"] >= TARGET_RATIO)
    return (f"6x384, context 256, batch 16: minigpt {s['minigpt_tokens_per_s']:,.0f} tokens/s, reference "
            f"{s['reference_tokens_per_s']:,.0f}: {s['ratio']:.2f}x (target >= {TARGET_RATIO:g}x: {met}); "
            f"{100 * s['fraction_of_peak']:.0f}% of the measured {s['peak_dtype']} peak ({s['peak_gflops']:.0f} "
            f"GFLOP/s; the reference {100 * s['reference_fraction_of_fp32_peak']:.0f}% of the float32 peak, "
            f"{s['fp32_peak_gflops']:.0f}), {s['flops_per_token'] / 1e6:.1f} MFLOP per token")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_pair_args(ap)
    ap.add_argument("--steps", type=int, default=STEPS, help="training steps of each side")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True, help="minigpt's train.compile")
    a = ap.parse_args(argv)
    if problem := pair_args_problem(a):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    with scratch("minigpt-big-") as tmp:
        summary = run(a.reference, a.data, tmp, a.repeats, a.steps, a.compile)
    print(describe(summary))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

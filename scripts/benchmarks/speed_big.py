"""speed, its big part: the GPU recipe's 6x384 model on the CPU, tokens/s against the reference's,
and the fraction of this machine's measured matrix-multiply peak (the peak benchmark, in a child)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.harness import (
    BENCH,
    REPO,
    last_json,
    medians,
    minigpt_train,
    progress,
    run_reference,
    run_timed,
    steady_tokens_per_s,
    targets,
)

BIG_MODEL = ["--layers", "6", "--heads", "6", "--embd", "384", "--ctx", "256", "--batch", "16"]
BIG_RECIPE = REPO / "configs" / "shakespeare_char.yaml"
BIG_OVERRIDES = [
    "model.dropout=0.0",
    "train.batch_size=16",
    "train.eval_interval=100000",
    "train.eval_steps=1",
    "train.final_eval=false",
    "log.sample_length=0",
    "log.attention_probe=",
    "log.interval=5",
]
BIG_TARGET_RATIO = targets()["speed"]["big"]["ratio"]
BIG_STEPS = 60


def big_once(
    ref: Path, data: Path, env: dict[str, str], tmp: Path, rep: int, steps: int, compile_: bool
) -> dict[str, Any]:
    """The GPU recipe's model on the CPU (6x384, ctx 256, batch 16; dropout 0, as the reference has
    none): minigpt's steady-state tokens/s against the reference's (its steps 20 on)."""
    progress(f"6x384 [{rep}]: reference ({steps} steps)")
    _, ref_out = run_reference(ref, data, env, "--steps", str(steps), *BIG_MODEL)
    run_dir = tmp / f"big-{rep}"
    progress(f"6x384 [{rep}]: minigpt train ({steps} steps, train.compile={str(compile_).lower()})")
    args = [*BIG_OVERRIDES, f"train.max_steps={steps}", f"train.compile={str(compile_).lower()}"]
    run_timed(minigpt_train(data, run_dir, *args, config=BIG_RECIPE), env)
    tps = steady_tokens_per_s(run_dir)
    return {
        "minigpt_tokens_per_s": tps,
        "reference_tokens_per_s": float(ref_out["tokens_per_s"]),
        "ratio": tps / float(ref_out["tokens_per_s"]),
    }


def big(
    ref: Path, data: Path, env: dict[str, str], tmp: Path, repeats: int, steps: int, compile_: bool
) -> dict[str, Any]:
    """big_once's medians, and MFU: FLOPs counted as minigpt/runtime/mfu.py does, over this machine's
    peak (the `peak` subcommand, in a child) in the precision minigpt trains in: bf16 where the CPU
    multiplies it natively, float32 elsewhere (dividing by emulated bf16's figure would give > 100%).
    The reference, always float32, is given as a fraction of the float32 peak."""
    from minigpt.config.schema import ModelConfig
    from minigpt.runtime.mfu import flops_per_token

    runs = [big_once(ref, data, env, tmp, i, steps, compile_) for i in range(repeats)]
    progress("6x384: this machine's matrix-multiply peaks (bench.py peak)")
    peaks = last_json(run_timed([str(BENCH), "peak", "--json-only"], env), "bench.py peak")
    peak_dtype = "bfloat16" if peaks["native_bf16"] else "float32"  # what minigpt's dtype auto trains in
    peak, fp32_peak = float(peaks[peak_dtype]["peak_gflops"]), float(peaks["float32"]["peak_gflops"])
    med = medians(runs)  # minigpt_tokens_per_s, reference_tokens_per_s, ratio
    flops = flops_per_token(ModelConfig(n_layer=6, n_head=6, n_embd=384, block_size=256), 65)
    return {
        "repeats": repeats,
        "steps": steps,
        "compile": compile_,
        "runs": runs,
        **med,
        "target_ratio": BIG_TARGET_RATIO,
        "flops_per_token": flops,
        "peak_dtype": peak_dtype,
        "peak_gflops": peak,
        "bf16_peak_gflops": float(peaks["bfloat16"]["peak_gflops"]),
        "fp32_peak_gflops": fp32_peak,
        "native_bf16": bool(peaks["native_bf16"]),
        "fraction_of_peak": med["minigpt_tokens_per_s"] * flops / (peak * 1e9),
        "reference_fraction_of_fp32_peak": med["reference_tokens_per_s"] * flops / (fp32_peak * 1e9),
    }


# ---------------------------------------------------------------------------------------- speed: report

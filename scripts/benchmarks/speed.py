"""speed: minigpt against the reference baseline (../shared/bench/reference_gpt.py), side by side,
each a whole process. Its parts' targets are in targets.yaml; the budget, big and report parts
have their own modules."""

from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    DEFAULT_REFERENCE,
    REPO,
    Proc,
    add_data_arg,
    add_repeats_arg,
    child,
    child_env,
    last_json,
    machine_info,
    minigpt,
    minigpt_train,
    missing_file,
    progress,
    run_reference,
    run_timed,
    scratch,
    steady_tokens_per_s,
    targets,
)
from benchmarks.speed_big import BIG_STEPS, big
from benchmarks.speed_budget import BUDGET_S, budget_once, budget_table, plot_budget, summarize_budget
from benchmarks.speed_report import (
    collect,
    format_table,
    summarize_batch_sampling,
    summarize_quality,
    summarize_speedup,
    table_rows,
)

SPEED_PARTS = ("batch-sampling", "quality", "throughput", "budget", "big", "sampling")  # in the order they run
REFERENCE_CONFIG = REPO / "configs" / "reference_cpu.yaml"
SAMPLE_MODEL = ["model.n_layer=6", "model.n_head=6", "model.n_embd=384", "model.block_size=256"]
SAMPLE_REFERENCE_MODEL = ["--layers", "6", "--heads", "6", "--embd", "384", "--ctx", "256"]
# a checkpoint made by 1 training step (decoding speed does not depend on the weights)
ONE_STEP = ["train.max_steps=1", "train.eval_steps=1", "log.sample_length=0", "log.tensorboard=false"]


@dataclass(frozen=True)
class Plan:
    """Step and character counts: the real benchmark, or tiny ones for --quick."""

    quality_ref_steps: int | None  # None: the reference's own default (2000)
    quality_minigpt_steps: int | None  # None: minigpt's default config
    throughput_steps: int
    ref_gen_chars: int
    minigpt_gen_chars: int


FULL_PLAN = Plan(None, None, 300, 1000, 3000)
QUICK_PLAN = Plan(30, 30, 30, 100, 100)
TARGETS = targets()["speed"]


def compile_seconds(train: Proc) -> float:
    """torch.compile's time as `minigpt train` reports it ("compiled the model in 41.2s"); 0 if eager."""
    found = re.search(r"compiled the model in ([0-9.]+)s", train.stderr)
    return float(found.group(1)) if found else 0.0


def train_dtype(train: Proc) -> str:
    """The compute dtype `minigpt train` chose ("model: ... | dtype bfloat16")."""
    found = re.search(r"\| dtype (\w+)", train.stderr)
    return found.group(1) if found else "?"


def tokens_per_step(run_dir: Path) -> int:
    """train.batch_size x model.block_size from the run's resolved config.yaml."""
    import yaml

    cfg = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    return int(cfg["train"]["batch_size"]) * int(cfg["model"]["block_size"])


# ---------------------------------------------------------------------------------------- speed: quality, throughput


def quality_once(ref: Path, data: Path, plan: Plan, env: dict[str, str], tmp: Path, rep: int) -> dict[str, Any]:
    """Time to quality: the reference's default run (2000 steps) against `minigpt train` with the
    default config, each a whole process; minigpt's loss from `minigpt eval --json` (whole val split)."""
    steps = [] if plan.quality_ref_steps is None else ["--steps", str(plan.quality_ref_steps)]
    progress(f"time to quality [{rep}]: reference ({plan.quality_ref_steps or 'default'} steps)")
    ref_proc, ref_out = run_reference(ref, data, env, *steps)

    run_dir = tmp / f"quality-{rep}"
    overrides = [] if plan.quality_minigpt_steps is None else [f"train.max_steps={plan.quality_minigpt_steps}"]
    progress(f"time to quality [{rep}]: minigpt train (default config{', ' if overrides else ''}{' '.join(overrides)})")
    train = run_timed(minigpt_train(data, run_dir, *overrides), env)
    progress(f"time to quality [{rep}]: minigpt eval")
    ev = run_timed(minigpt("eval", str(run_dir), "--json", "--device", "cpu"), env)
    ev_out = last_json(ev, "minigpt eval")
    return {
        "minigpt_wall_s": train.wall_s,
        "minigpt_compile_s": compile_seconds(train),
        "minigpt_dtype": train_dtype(train),
        "minigpt_eval_wall_s": ev.wall_s,
        "minigpt_val_loss": float(ev_out["loss"]),
        "reference_wall_s": ref_proc.wall_s,
        "reference_reported_wall_s": float(ref_out["wall_s"]),
        "reference_val_loss": float(ref_out["val_loss"]),
    }


def throughput_once(ref: Path, data: Path, plan: Plan, env: dict[str, str], tmp: Path, rep: int) -> dict[str, Any]:
    """Training throughput on the reference's recipe (configs/reference_cpu.yaml), 300 steps each:
    minigpt's steady-state tokens/s from its TensorBoard scalars against the reference's own."""
    steps = plan.throughput_steps
    progress(f"train throughput [{rep}]: reference ({steps} steps)")
    ref_proc, ref_out = run_reference(ref, data, env, "--steps", str(steps))

    run_dir = tmp / f"throughput-{rep}"
    progress(f"train throughput [{rep}]: minigpt train (configs/reference_cpu.yaml)")
    train = run_timed(minigpt_train(data, run_dir, f"train.max_steps={steps}", config=REFERENCE_CONFIG), env)
    tps = steady_tokens_per_s(run_dir)
    per_step = tokens_per_step(run_dir)
    return {
        "minigpt_tokens_per_s": tps,
        "minigpt_ms_per_step": per_step / tps * 1000,
        "minigpt_tokens_per_step": per_step,
        "minigpt_wall_s": train.wall_s,
        "minigpt_compile_s": compile_seconds(train),
        "minigpt_dtype": train_dtype(train),
        "reference_tokens_per_s": float(ref_out["tokens_per_s"]),
        "reference_ms_per_step": float(ref_out["ms_per_step_median"]),
        "reference_wall_s": ref_proc.wall_s,
    }


# ---------------------------------------------------------------------------------------- speed: sampling


def make_checkpoint(data: Path, env: dict[str, str], run_dir: Path, *overrides: str) -> Path:
    """A checkpoint of the model that `overrides` describe, made by training 1 step."""
    run_timed(minigpt_train(data, run_dir, *overrides, *ONE_STEP), env)
    return run_dir


def make_sample_checkpoint(data: Path, env: dict[str, str], tmp: Path) -> Path:
    """A 6-layer, 6-head, 384-channel, context-256 checkpoint."""
    progress("sampling: making a 6x384 ctx-256 checkpoint (1 training step)")
    return make_checkpoint(data, env, tmp / "sample-model", *SAMPLE_MODEL, "train.batch_size=2")


def sampling_once(ref: Path, data: Path, plan: Plan, env: dict[str, str], run_dir: Path, rep: int) -> dict[str, Any]:
    """The reference's `--generate 1000` (6x384, ctx 256; it times only its generation loop) against
    the whole `minigpt sample --max-new-tokens 3000` process, start-up included."""
    progress(f"sampling [{rep}]: reference --generate {plan.ref_gen_chars}")
    ref_proc, ref_out = run_reference(
        ref, data, env, "--generate", str(plan.ref_gen_chars), *SAMPLE_REFERENCE_MODEL, what="reference --generate"
    )
    n = plan.minigpt_gen_chars
    progress(f"sampling [{rep}]: minigpt sample --max-new-tokens {n}")
    proc = run_timed(minigpt("sample", str(run_dir), "--max-new-tokens", str(n), "--device", "cpu"), env)
    return {
        "minigpt_chars_per_s": n / proc.wall_s,
        "minigpt_wall_s": proc.wall_s,
        "minigpt_stdout_chars": len(proc.stdout),
        "reference_chars_per_s": float(ref_out["gen_tokens_per_s"]),
        "reference_wall_s": ref_proc.wall_s,
    }


BATCH_SAMPLES, BATCH_CHARS = 32, 500


def batch_sampling_once(models: dict[str, Path], plan: Plan, env: dict[str, str], rep: int) -> dict[str, float]:
    """32 samples of 500 characters as one batch (`minigpt sample -n 32`) against the batch-1 path,
    whole processes, for the default model and the 6x384 one."""
    n, chars = (4, 50) if plan.throughput_steps < 100 else (BATCH_SAMPLES, BATCH_CHARS)
    out: dict[str, float] = {"samples": n}
    for name, run_dir in models.items():
        progress(f"batched sampling [{rep}]: {name}, {n} samples of {chars} characters, batched then one by one")
        batched = run_timed(
            minigpt("sample", str(run_dir), "-n", str(n), "--max-new-tokens", str(chars), "--device", "cpu"), env
        )
        one = run_timed([child("batch_one.py"), str(run_dir), str(n), str(chars)], env)
        out[f"{name}_batched_chars_per_s"] = n * chars / batched.wall_s
        out[f"{name}_batch1_chars_per_s"] = n * chars / one.wall_s
        out[f"{name}_ratio"] = one.wall_s / batched.wall_s
    return out


def run_speed(a: argparse.Namespace, plan: Plan, tmp: Path) -> dict[str, Any]:
    env = child_env(tmp / "cache")
    ref, data = a.reference.resolve(), a.data.resolve()
    results: dict[str, Any] = {}
    parts = set(a.only)
    if "batch-sampling" in parts:
        models = {
            "default": make_checkpoint(data, env, tmp / "default-model"),
            "6x384": make_sample_checkpoint(data, env, tmp),
        }
        batch = [batch_sampling_once(models, plan, env, i) for i in range(a.repeats)]
        results["batch_sampling"] = summarize_batch_sampling(collect(batch))
    if "quality" in parts:
        quality = [quality_once(ref, data, plan, env, tmp, i) for i in range(a.repeats)]
        results["time_to_quality"] = summarize_quality(collect(quality))
    if "throughput" in parts:
        throughput = [throughput_once(ref, data, plan, env, tmp, i) for i in range(a.repeats)]
        results["train_throughput"] = summarize_speedup(
            collect(throughput), "tokens_per_s", TARGETS["throughput"]["ratio"], recipe="configs/reference_cpu.yaml"
        )
    if "budget" in parts:
        budget = 40.0 if a.quick else BUDGET_S
        runs = [budget_once(ref, data, env, tmp, i, 1337 + i, budget) for i in range(a.repeats)]
        results["budget"] = summarize_budget(runs, budget)
        plot_budget(runs, a.plot or tmp / "budget_curve.png")  # drawn in any case: a broken plot shows
    if "big" in parts:
        steps = 25 if a.quick else BIG_STEPS  # the reference times its steps from the 20th on
        results["big"] = big(ref, data, env, tmp, a.repeats, steps, not (a.quick or a.eager))
    if "sampling" in parts:
        run_dir = tmp / "sample-model"
        if not run_dir.exists():  # made by the batch-sampling part when that ran
            make_sample_checkpoint(data, env, tmp)
        sampling = [sampling_once(ref, data, plan, env, run_dir, i) for i in range(a.repeats)]
        results["sampling"] = summarize_speedup(collect(sampling), "chars_per_s", TARGETS["sampling"]["ratio"])
    return results


def run(a: argparse.Namespace) -> int:
    """minigpt against the reference baseline (../shared/bench/reference_gpt.py), side by side.

    Parts (--only picks some; the default runs all six, about 20 minutes on 2 cores per repeat):
      batch-sampling  32 samples of 500 characters as one batch against the batch-1 path
      quality         time to the reference's loss: default config against its 2000 steps
      throughput      tokens/s on the reference's recipe, configs/reference_cpu.yaml
      budget          configs/cpu_4min.yaml against the reference in the same 240 s: loss at 30, 60,
                      120 and 240 s; with --plot, the curves as a PNG
      big             the GPU recipe's 6x384 model, batch 16: tokens/s and the fraction of this
                      machine's measured peak in the precision minigpt trains in
      sampling        `minigpt sample` of 3000 characters, whole process, against the reference's
                      generation loop, 6x384 ctx 256
    Each part's targets are in scripts/benchmarks/targets.yaml. Prints a table (metric | minigpt |
    reference | ratio | target | met?) and one JSON line."""
    if missing_file(("reference script", a.reference), ("data file", a.data)):
        return 2
    plan = QUICK_PLAN if a.quick else FULL_PLAN
    t0 = time.perf_counter()
    with scratch("minigpt-bench-") as tmp:
        results = run_speed(a, plan, tmp)
    settings = {
        "quick": a.quick,
        "repeats": a.repeats,
        "reference": str(a.reference.resolve()),
        "data": str(a.data.resolve()),
        "plan": asdict(plan),
    }
    report = {"machine": machine_info(), "settings": settings, **results, "bench_wall_s": time.perf_counter() - t0}
    if a.quick:
        print("quick mode: tiny step counts, a smoke test of this script; the numbers mean nothing")
    print(format_table(table_rows(results)))
    if "budget" in results:
        print(budget_table(results["budget"]))
    print(json.dumps(report))
    return 0


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE, help="reference_gpt.py to compare with")
    add_data_arg(ap)
    add_repeats_arg(ap)
    ap.add_argument(
        "--only",
        nargs="+",
        choices=SPEED_PARTS,
        default=list(SPEED_PARTS),
        metavar="PART",
        help=f"run only these parts ({', '.join(SPEED_PARTS)}); the default runs them all",
    )
    ap.add_argument("--quick", action="store_true", help="tiny step counts: a smoke test of this script")
    ap.add_argument("--eager", action="store_true", help="big: train the 6x384 model without torch.compile")
    ap.add_argument("--plot", type=Path, default=None, help="where to write the budget part's curves as a PNG")

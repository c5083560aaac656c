#!/usr/bin/env python3
"""Benchmark minigpt against the reference baseline script, side by side, on this machine.

Every measurement runs as its own subprocess, one after another (never in parallel), with the
same Python interpreter, so both programs see the same machine, the same threads and the same
start-up costs. Three comparisons, all on the CPU:

1. Time to quality. The reference with its defaults (4 layers, 128 channels, context 64,
   batch 12, 2000 steps) against `minigpt train` with the built-in default config, each timed as
   a whole process. minigpt's loss comes from `minigpt eval RUN --json` (the whole val split,
   every position scored, like the reference's val_loss). Targets: minigpt's loss <= the
   reference's, and minigpt_wall / reference_wall <= 0.5.
2. Training throughput on the reference recipe (configs/reference_cpu.yaml, or the equivalent
   overrides while that file does not exist), 300 steps each. minigpt's tokens/s is the median
   of its TensorBoard `tokens_per_sec` scalars after the first few (steady state); the
   reference's is its own tokens_per_s. Target: minigpt / reference >= 1.5.
3. Sampling. The reference's `--generate 1000` (6 layers, 6 heads, 384 channels, context 256;
   it times only its generation loop) against the whole `minigpt sample RUN
   --max-new-tokens 3000` process, start-up included, on a checkpoint of the same size made by
   a 1-step training run. Target: minigpt chars/s / reference chars/s >= 10.
4. Four minutes (`budget`, scripts/bench_budget.py): configs/cpu_4min.yaml against the reference
   recipe run for as many steps as fit in the same 240 s; loss against wall time at 30, 60, 120
   and 240 s, and a PNG of both curves (docs/img/budget_curve.png). Targets: minigpt at or below
   the reference at every point, whole process <= 240 s, whole-split loss <= 1.50.
5. The GPU recipe's model on the CPU (`big`, scripts/bench_big.py): 6x384, context 256, batch 16
   training tokens/s against the reference's, and the fraction of this machine's measured bf16
   matrix-multiply peak in the precision it trains in (scripts/bench_peak.py; bf16 where the CPU has
   it, else float32). Targets: >= 60% of that peak (about 3x the reference on a bf16 host).
The batched-sampling comparison (`batch-sampling`) runs first. `--only PART ...` runs some parts:
    uv run python scripts/bench.py --only budget big

Run it from the repository root:

    uv run python scripts/bench.py --data data/tinyshakespeare.txt
    uv run python scripts/bench.py --quick        # smoke test of this script (~1-2 min)

It prints a table (metric | minigpt | reference | ratio | target | met?) and then one line of
JSON with every number (per-repeat raw values and their medians) and the machine. With the
defaults and --repeats 1 it takes about 20 minutes on 2 cores (budget 9, big 3). Child processes get a
temporary MINIGPT_CACHE_DIR and PYTHONPATH=<repo root>; all run directories are temporary.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_big  # noqa: E402
import bench_budget  # noqa: E402
from bench_common import (  # noqa: E402
    REPO,
    BenchError,
    Proc,
    add_pair_args,
    child_env,
    last_json,
    minigpt,
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

REFERENCE_CONFIG = REPO / "configs" / "reference_cpu.yaml"
# the reference's default recipe as minigpt overrides (used while configs/reference_cpu.yaml is missing)
REFERENCE_OVERRIDES = [
    "model.n_layer=4", "model.n_head=4", "model.n_embd=128", "model.block_size=64", "model.dropout=0.0",
    "train.batch_size=12", "optim.lr=1e-3", "optim.min_lr=1e-4", "optim.warmup_steps=100",
    "train.eval_interval=1000", "train.eval_steps=5", "log.sample_length=0",
]  # fmt: skip
SAMPLE_MODEL = ["model.n_layer=6", "model.n_head=6", "model.n_embd=384", "model.block_size=256"]
SAMPLE_REFERENCE_MODEL = ["--layers", "6", "--heads", "6", "--embd", "384", "--ctx", "256"]
# a checkpoint made by 1 training step (decoding speed does not depend on the weights)
ONE_STEP = ["train.max_steps=1", "train.eval_steps=1", "log.sample_length=0", "log.tensorboard=false"]

TARGET_WALL_RATIO = 0.5
TARGET_TRAIN_RATIO = 1.5
TARGET_SAMPLE_RATIO = 10.0
# every comparison, in the order the bench runs them (--only picks some)
PARTS = ("batch-sampling", "quality", "throughput", "budget", "big", "sampling")


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


@dataclass
class Series:
    """One metric over the repeats (numbers; or labels such as a dtype, summed up by the most common)."""

    runs: list[Any] = field(default_factory=list)

    @property
    def median(self) -> Any:
        if all(isinstance(r, int | float) for r in self.runs):
            return statistics.median(self.runs)
        return max(self.runs, key=self.runs.count)

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "median": self.median}


@dataclass
class Row:
    """One line of the table."""

    metric: str
    minigpt: str
    reference: str
    ratio: str
    target: str
    met: str


# ---------------------------------------------------------------------------------------- readers


def compile_seconds(train: Proc) -> float:
    """torch.compile's time as `minigpt train` reports it ("compiled the model in 41.2s"); 0 if eager."""
    found = re.search(r"compiled the model in ([0-9.]+)s", train.stderr)
    return float(found.group(1)) if found else 0.0


def train_dtype(train: Proc) -> str:
    """The compute dtype `minigpt train` chose ("model: ... | dtype bfloat16")."""
    found = re.search(r"\| dtype (\w+)", train.stderr)
    return found.group(1) if found else "?"


def read_run_config_int(run_dir: Path, section: str, key: str) -> int:
    """An integer from the run's resolved config.yaml (flat two-level YAML; no YAML library needed)."""
    current = None
    for line in (run_dir / "config.yaml").read_text(encoding="utf-8").splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith(":"):
            current = line.strip()[:-1]
        elif current == section and line.strip().startswith(f"{key}:"):
            return int(line.split(":", 1)[1].split("#")[0].strip())
    raise BenchError(f"{section}.{key} not found in {run_dir / 'config.yaml'}")


# ---------------------------------------------------------------------------------------- comparisons


def quality_once(ref: Path, data: Path, plan: Plan, env: dict[str, str], tmp: Path, rep: int) -> dict[str, float]:
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


def reference_recipe() -> tuple[str, Path | None, list[str]]:
    """(what it is, the config file, the overrides) of minigpt's reference recipe."""
    if REFERENCE_CONFIG.is_file():
        return "configs/reference_cpu.yaml", REFERENCE_CONFIG, []
    return "overrides (configs/reference_cpu.yaml is missing)", None, REFERENCE_OVERRIDES


def throughput_once(ref: Path, data: Path, plan: Plan, env: dict[str, str], tmp: Path, rep: int) -> dict[str, float]:
    steps = plan.throughput_steps
    progress(f"train throughput [{rep}]: reference ({steps} steps)")
    ref_proc, ref_out = run_reference(ref, data, env, "--steps", str(steps))

    run_dir = tmp / f"throughput-{rep}"
    name, config, overrides = reference_recipe()
    progress(f"train throughput [{rep}]: minigpt train ({name})")
    train = run_timed(minigpt_train(data, run_dir, *overrides, f"train.max_steps={steps}", config=config), env)
    values = read_tokens_per_sec(run_dir)
    tps = statistics.median(steady_state(values))
    tokens_per_step = read_run_config_int(run_dir, "train", "batch_size") * read_run_config_int(
        run_dir, "model", "block_size"
    )
    return {
        "minigpt_tokens_per_s": tps,
        "minigpt_ms_per_step": tokens_per_step / tps * 1000,
        "minigpt_tokens_per_step": tokens_per_step,
        "minigpt_wall_s": train.wall_s,
        "minigpt_compile_s": compile_seconds(train),
        "minigpt_dtype": train_dtype(train),
        "reference_tokens_per_s": float(ref_out["tokens_per_s"]),
        "reference_ms_per_step": float(ref_out["ms_per_step_median"]),
        "reference_wall_s": ref_proc.wall_s,
    }


def make_checkpoint(data: Path, env: dict[str, str], run_dir: Path, *overrides: str) -> Path:
    """A checkpoint of the model that `overrides` describe, made by training 1 step."""
    run_timed(minigpt_train(data, run_dir, *overrides, *ONE_STEP), env)
    return run_dir


def make_sample_checkpoint(data: Path, env: dict[str, str], tmp: Path) -> Path:
    """A 6-layer, 6-head, 384-channel, context-256 checkpoint."""
    progress("sampling: making a 6x384 ctx-256 checkpoint (1 training step)")
    return make_checkpoint(data, env, tmp / "sample-model", *SAMPLE_MODEL, "train.batch_size=2")


def sampling_once(ref: Path, data: Path, plan: Plan, env: dict[str, str], run_dir: Path, rep: int) -> dict[str, float]:
    progress(f"sampling [{rep}]: reference --generate {plan.ref_gen_chars}")
    ref_proc, ref_out = run_reference(ref, data, env, "--generate", str(plan.ref_gen_chars), *SAMPLE_REFERENCE_MODEL,
                                      what="reference --generate")  # fmt: skip

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
TARGET_BATCH_RATIO = 5.0
# the batch-1 path in one whole process: the same loading and dtype as `minigpt sample`, then one
# sample after another (seeds seed + k, as `-n N` numbers them)
BATCH_ONE_CODE = """
import sys, torch
from pathlib import Path
from minigpt.config.schema import SampleOptions
from minigpt.infer.loading import cast_for_sampling, load_model
from minigpt.infer.sample import sample_records
loaded = load_model(Path(sys.argv[1]), torch.device("cpu"))
cast_for_sampling(loaded, "auto", "cpu")
n, chars = int(sys.argv[2]), int(sys.argv[3])
out = [sample_records(loaded, "", SampleOptions(max_new_tokens=chars, seed=1337 + k))[0].text for k in range(n)]
print(sum(len(t) for t in out))
"""


def batch_sampling_once(models: dict[str, Path], plan: Plan, env: dict[str, str], rep: int) -> dict[str, float]:
    """N samples as one batch (`minigpt sample -n N`) against the batch-1 path, whole processes."""
    n, chars = (4, 50) if plan.throughput_steps < 100 else (BATCH_SAMPLES, BATCH_CHARS)
    out: dict[str, float] = {}
    for name, run_dir in models.items():
        progress(f"batched sampling [{rep}]: {name}, {n} samples of {chars} characters, batched then one by one")
        batched = run_timed(minigpt("sample", str(run_dir), "-n", str(n), "--max-new-tokens", str(chars),
                                    "--device", "cpu"), env)  # fmt: skip
        one = run_timed(["-c", BATCH_ONE_CODE, str(run_dir), str(n), str(chars)], env)
        out[f"{name}_batched_chars_per_s"] = n * chars / batched.wall_s
        out[f"{name}_batch1_chars_per_s"] = n * chars / one.wall_s
        out[f"{name}_ratio"] = one.wall_s / batched.wall_s
    return out


def summarize_batch_sampling(s: dict[str, Series]) -> dict[str, Any]:
    ratio = s["default_ratio"].median
    return {**{k: v.to_dict() for k, v in s.items()}, "target": TARGET_BATCH_RATIO, "met": ratio >= TARGET_BATCH_RATIO}


def collect(runs: list[dict[str, float]]) -> dict[str, Series]:
    return {key: Series([r[key] for r in runs]) for key in runs[0]}


# ---------------------------------------------------------------------------------------- report


def summarize_quality(s: dict[str, Series]) -> dict[str, Any]:
    ratio = s["minigpt_wall_s"].median / s["reference_wall_s"].median
    loss_ok = s["minigpt_val_loss"].median <= s["reference_val_loss"].median
    return {
        **{k: v.to_dict() for k, v in s.items()},
        "loss_ok": loss_ok,
        "wall_ratio": ratio,
        "wall_ratio_target": TARGET_WALL_RATIO,
        "wall_ratio_met": ratio <= TARGET_WALL_RATIO,
        "met": loss_ok and ratio <= TARGET_WALL_RATIO,
    }


def summarize_speedup(s: dict[str, Series], metric: str, target: float, **extra: Any) -> dict[str, Any]:
    """Every series, then minigpt's median `metric` over the reference's, met when it is >= target."""
    ratio = s[f"minigpt_{metric}"].median / s[f"reference_{metric}"].median
    return {**{k: v.to_dict() for k, v in s.items()}, **extra, "ratio": ratio, "target": target, "met": ratio >= target}


def compile_row(metric: str, part: dict[str, Any]) -> Row:
    """minigpt's compile time and dtype in a training comparison (the reference: eager float32)."""
    mg = f"{part['minigpt_compile_s']['median']:.1f}, {part['minigpt_dtype']['median']}"
    return Row(metric, mg, "0, float32", "", "", "")


def table_rows(results: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    if q := results.get("time_to_quality"):
        mg, ref = q["minigpt_val_loss"]["median"], q["reference_val_loss"]["median"]
        rows.append(Row("val loss (whole val split, nats)", f"{mg:.4f}", f"{ref:.4f}", f"{mg - ref:+.4f}",
                        "<= ref", yes_no(q["loss_ok"])))  # fmt: skip
        mg, ref = q["minigpt_wall_s"]["median"], q["reference_wall_s"]["median"]
        rows.append(Row("time to quality: process wall (s)", f"{mg:.1f}", f"{ref:.1f}", f"{q['wall_ratio']:.2f}x",
                        f"<= {TARGET_WALL_RATIO}x", yes_no(q["wall_ratio_met"])))  # fmt: skip
        rows.append(Row("  reference's own wall_s", "", f"{q['reference_reported_wall_s']['median']:.1f}", "", "", ""))
        rows.append(Row("  minigpt eval process wall (s)", f"{q['minigpt_eval_wall_s']['median']:.1f}", "", "", "", ""))
        rows.append(compile_row("  of which compile (s), dtype", q))
    if t := results.get("train_throughput"):
        mg, ref = t["minigpt_tokens_per_s"]["median"], t["reference_tokens_per_s"]["median"]
        rows.append(Row("train tokens/s (reference recipe)", f"{mg:,.0f}", f"{ref:,.0f}", f"{t['ratio']:.2f}x",
                        f">= {TARGET_TRAIN_RATIO}x", yes_no(t["met"])))  # fmt: skip
        mg, ref = t["minigpt_ms_per_step"]["median"], t["reference_ms_per_step"]["median"]
        rows.append(Row("  ms/step", f"{mg:.2f}", f"{ref:.2f}", f"{mg / ref:.2f}x", "", ""))
        rows.append(compile_row("  compile (s, not in tokens/s), dtype", t))
    if s := results.get("sampling"):
        mg, ref = s["minigpt_chars_per_s"]["median"], s["reference_chars_per_s"]["median"]
        rows.append(Row("sampling chars/s (6x384, ctx 256)", f"{mg:,.1f}", f"{ref:,.1f}", f"{s['ratio']:.2f}x",
                        f">= {TARGET_SAMPLE_RATIO:g}x", yes_no(s["met"])))  # fmt: skip
    if b := results.get("batch_sampling"):
        for name, label in (("default", "default model"), ("6x384", "6x384 ctx 256")):
            mg, one = b[f"{name}_batched_chars_per_s"]["median"], b[f"{name}_batch1_chars_per_s"]["median"]
            ok = yes_no(b["met"]) if name == "default" else ""
            target = f">= {TARGET_BATCH_RATIO:g}x" if ok else ""
            rows.append(Row(f"{BATCH_SAMPLES} samples chars/s, {label}", f"{mg:,.0f}", f"{one:,.0f} (batch 1)",
                            f"{b[f'{name}_ratio']['median']:.2f}x", target, ok))  # fmt: skip
    if g := results.get("budget"):
        for sec, row in g["at_seconds"].items():
            mg, ref = row["minigpt"], row["reference"]
            if mg is None or ref is None:
                continue
            final = sec == str(int(max(float(k) for k in g["at_seconds"])))
            what = f"cpu_4min.yaml val loss at {sec} s (whole split)" if final else f"  curve val loss at {sec} s"
            rows.append(Row(what,
                            f"{mg:.4f}", f"{ref:.4f}", f"{mg - ref:+.4f}", "<= 1.50" if final else "<= ref",
                            yes_no(mg <= ref and (mg <= 1.50 or not final))))  # fmt: skip
        rows.append(Row("  whole process (s)", f"{g['minigpt_wall_s']:.1f}", f"{g['reference_wall_s']:.1f}", "",
                        "<= 240", yes_no(g["minigpt_wall_s"] <= 240)))  # fmt: skip
    if big := results.get("big"):
        rows.append(Row("train tokens/s (6x384, ctx 256, batch 16)", f"{big['minigpt_tokens_per_s']:,.0f}",
                        f"{big['reference_tokens_per_s']:,.0f}", f"{big['ratio']:.2f}x", f">= {big['target_ratio']:g}x",
                        yes_no(big["ratio"] >= big["target_ratio"])))  # fmt: skip
        frac = big["fraction_of_peak"]
        rows.append(Row(f"  fraction of the measured {big['peak_dtype']} peak", f"{100 * frac:.0f}%",
                        f"{100 * big['reference_fraction_of_fp32_peak']:.0f}% of float32's",
                        f"({big['peak_gflops']:.0f} GFLOP/s)", ">= 60%", yes_no(frac >= 0.6)))  # fmt: skip
    return rows


def format_table(rows: list[Row]) -> str:
    header = Row("metric", "minigpt", "reference", "ratio", "target", "met?")
    cells = [[r.metric, r.minigpt, r.reference, r.ratio, r.target, r.met] for r in [header, *rows]]
    widths = [max(len(c[i]) for c in cells) for i in range(6)]

    def line(c: list[str]) -> str:
        return " | ".join(c[0].ljust(widths[0]) if i == 0 else c[i].rjust(widths[i]) for i in range(6)).rstrip()

    sep = "-+-".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep, *(line(c) for c in cells[1:])])


def machine_info() -> dict[str, Any]:
    import torch

    return {
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
    }


# ---------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_pair_args(ap)
    ap.add_argument("--quick", action="store_true", help="tiny step counts: a smoke test of this script")
    ap.add_argument("--skip-train", action="store_true", help="skip the two training comparisons")
    ap.add_argument("--skip-sample", action="store_true", help="skip the sampling comparison")
    ap.add_argument("--json-only", action="store_true", help="print only the JSON line on stdout")
    ap.add_argument("--only-batch-sampling", action="store_true", help="only the batched-sampling comparison")
    ap.add_argument("--only", nargs="+", choices=PARTS, metavar="PART",
                    help=f"run only these parts ({', '.join(PARTS)}); the default runs them all")  # fmt: skip
    a = ap.parse_args(argv)
    if a.only_batch_sampling:
        a.only = ["batch-sampling"]
    parts = set(a.only or PARTS)
    if a.skip_train:
        parts -= {"quality", "throughput", "budget", "big"}
    if a.skip_sample:
        parts -= {"sampling", "batch-sampling"}
    a.parts = parts
    return a


def run_all(a: argparse.Namespace, plan: Plan, tmp: Path) -> dict[str, Any]:
    env = child_env(tmp / "cache")
    ref, data = a.reference.resolve(), a.data.resolve()
    results: dict[str, Any] = {}
    parts = a.parts
    if "batch-sampling" in parts:
        models = {"default": make_checkpoint(data, env, tmp / "default-model"),
                  "6x384": make_sample_checkpoint(data, env, tmp)}  # fmt: skip
        batch = [batch_sampling_once(models, plan, env, i) for i in range(a.repeats)]
        results["batch_sampling"] = summarize_batch_sampling(collect(batch))
    if "quality" in parts:
        quality = [quality_once(ref, data, plan, env, tmp, i) for i in range(a.repeats)]
        results["time_to_quality"] = summarize_quality(collect(quality))
    if "throughput" in parts:
        throughput = [throughput_once(ref, data, plan, env, tmp, i) for i in range(a.repeats)]
        results["train_throughput"] = summarize_speedup(collect(throughput), "tokens_per_s", TARGET_TRAIN_RATIO,
                                                        recipe=reference_recipe()[0])  # fmt: skip
    if "budget" in parts:
        results["budget"] = bench_budget.run(ref, data, tmp, a.repeats, 40.0 if a.quick else bench_budget.BUDGET_S)
        plot = tmp / "budget_curve.png" if a.quick else bench_budget.PLOT
        bench_budget.plot(results["budget"]["runs"], plot)
    if "big" in parts:
        steps = 25 if a.quick else bench_big.STEPS  # the reference times its steps from the 20th on
        results["big"] = bench_big.run(ref, data, tmp, a.repeats, steps, not a.quick)
    if "sampling" in parts:
        run_dir = tmp / "sample-model"
        if not run_dir.exists():  # made by the batch-sampling part when that ran
            make_sample_checkpoint(data, env, tmp)
        sampling = [sampling_once(ref, data, plan, env, run_dir, i) for i in range(a.repeats)]
        results["sampling"] = summarize_speedup(collect(sampling), "chars_per_s", TARGET_SAMPLE_RATIO)
    return results


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if problem := pair_args_problem(a):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    plan = QUICK_PLAN if a.quick else FULL_PLAN
    t0 = time.perf_counter()
    with scratch("minigpt-bench-") as tmp:
        results = run_all(a, plan, tmp)
    report = {
        "machine": machine_info(),
        "settings": {
            "quick": a.quick,
            "repeats": a.repeats,
            "reference": str(a.reference.resolve()),
            "data": str(a.data.resolve()),
            "plan": asdict(plan),
        },
        **results,
        "bench_wall_s": time.perf_counter() - t0,
    }
    if not a.json_only:
        if a.quick:
            print("quick mode: tiny step counts, a smoke test of this script; the numbers mean nothing")
        print(format_table(table_rows(results)))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

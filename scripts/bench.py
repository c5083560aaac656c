#!/usr/bin/env python3
"""minigpt's benchmarks, one subcommand each. Every figure docs/performance.md and docs/benchmarks.md
quote as current comes from one of them, so each can be measured again:

    uv run python scripts/bench.py speed --repeats 3        # against ../shared/bench/reference_gpt.py
    uv run python scripts/bench.py speed --only budget big  # some parts: see `speed --help`
    uv run python scripts/bench.py peak         # this machine's matrix-multiply peak: print it beside any speed
    uv run python scripts/bench.py data         # large corpora: peak RSS, encoding MB/s, time to the first step
    uv run python scripts/bench.py memory       # the memory preflight's estimate against the measured peak
    uv run python scripts/bench.py share        # two trainings, or a sampler and a training, on one machine
    uv run python scripts/bench.py playground   # the playground page's speed in headless Chromium
    uv run python scripts/bench.py startup      # whole-process start-up: this tree against a git ref
    uv run python scripts/bench.py auto --data DIR --budget 2m  # --auto against hand-picked shapes

Every measurement is a child process, run one after another (never in parallel) with this Python,
children get PYTHONPATH=<repo root> and a temporary MINIGPT_CACHE_DIR, and every run directory is
temporary. Each subcommand prints its table or lines and then one JSON line with every number and
the machine. Run it with nothing else on the machine: two processes on two cores distort every figure.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCE = REPO.parent / "shared" / "bench" / "reference_gpt.py"
DEFAULT_DATA = REPO / "data" / "tinyshakespeare.txt"
# overrides for a run measured for itself: no final whole-split evaluation, no sample after
# training, no attention probe, no TensorBoard events
BARE_RUN = ["train.final_eval=false", "log.sample_length=0", "log.attention_probe=", "log.tensorboard=false"]
STEADY_SKIP = 3  # tokens_per_sec logs dropped as warm-up (each covers log.interval steps)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


# ======================================================================================== shared


class BenchError(Exception):
    """A child process failed or printed something unexpected."""


@dataclass
class Proc:
    """A finished child process: its output and its wall time measured from the outside."""

    stdout: str
    stderr: str
    wall_s: float
    returncode: int = 0


def progress(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def child_env(cache_dir: Path | None = None, *, drop: Iterable[str] = (), **extra: str) -> dict[str, str]:
    """The environment of a child: this one less the names in `drop`, the repo first on PYTHONPATH,
    its own encoding cache where `cache_dir` is given (made here), then `extra` on top."""
    dropped = set(drop)
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    if cache_dir is not None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        env["MINIGPT_CACHE_DIR"] = str(cache_dir)
    env.update(extra)
    return env


def run_timed(args: list[str], env: dict[str, str], *, cwd: Path = REPO, check: bool = True) -> Proc:
    """Run `python ARGS` in `cwd` (the repo root); unless check is off, raise BenchError (with its
    stderr tail) if it fails."""
    cmd = [sys.executable, *args]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, encoding="utf-8", errors="replace")
    wall = time.perf_counter() - t0
    if check and done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise BenchError(f"{' '.join(cmd)} exited with {done.returncode}:\n{tail}")
    return Proc(done.stdout, done.stderr, wall, done.returncode)


def last_json(proc: Proc, what: str) -> dict[str, Any]:
    """The last line of stdout that parses as a JSON object."""
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                break
    raise BenchError(f"{what} printed no JSON line; stdout ends with: {proc.stdout[-300:]!r}")


def minigpt(*args: str) -> list[str]:
    """`python -m minigpt ARGS`, less the interpreter (run_timed adds it)."""
    return ["-m", "minigpt", *args]


def minigpt_train(
    data: Path, out: Path, *overrides: str, config: Path | None = None, device: str | None = "cpu"
) -> list[str]:
    """`minigpt train [CONFIG] --data DATA --out OUT [--device DEVICE] OVERRIDES...` (device None: minigpt's own)."""
    return minigpt(
        "train",
        *([str(config)] if config else []),
        "--data",
        str(data),
        "--out",
        str(out),
        *(["--device", device] if device else []),
        *overrides,
    )


def run_reference(
    ref: Path, data: Path, env: dict[str, str], *args: str, what: str = "reference"
) -> tuple[Proc, dict[str, Any]]:
    """The reference script on the CPU with ARGS: the process and the JSON line it printed."""
    proc = run_timed([str(ref), "--data", str(data), "--device", "cpu", *args], env)
    return proc, last_json(proc, what)


def missing_file(*checks: tuple[str, Path]) -> str | None:
    """A one-line problem for the first (what, path) that is not a file, or None."""
    for what, path in checks:
        if not path.is_file():
            return f"{what} not found: {path}"
    return None


@contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A temporary folder for the children's runs and caches. A BenchError inside ends the script:
    its message on stderr and exit status 1."""
    try:
        with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
            yield Path(tmp)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(1) from None


def read_scalars(run_dir: Path, tag: str) -> list[Any]:
    """A run's TensorBoard scalar events of `tag` (each with .step, .wall_time and .value), in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    if tag not in acc.Tags().get("scalars", []):
        raise BenchError(f"no {tag} scalars in {run_dir}")
    return sorted(acc.Scalars(tag), key=lambda e: e.step)


def steady_tokens_per_s(run_dir: Path) -> float:
    """The median of a run's `tokens_per_sec` scalars after the first few (warm-up; at least half kept)."""
    values = [e.value for e in read_scalars(run_dir, "tokens_per_sec")]
    skip = STEADY_SKIP if len(values) > 2 * STEADY_SKIP else len(values) // 2
    return statistics.median(values[skip:])


def medians(runs: list[dict[str, Any]], keys: Iterable[str] | None = None) -> dict[str, float]:
    """Each key's median over the repeats (by default every key of the first run)."""
    return {k: statistics.median(r[k] for r in runs) for k in (runs[0] if keys is None else keys)}


def yes_no(ok: bool) -> str:
    return "yes" if ok else "NO"


def cpu_model() -> str:
    """The CPU's name as /proc/cpuinfo gives it (elsewhere: what platform knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    """What the figures were measured on, for every JSON line."""
    import torch

    return {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def add_data_arg(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="text file to train on")


def add_repeats_arg(ap: argparse.ArgumentParser, default: int = 1) -> None:
    ap.add_argument("--repeats", type=int, default=default, help="repeat each measurement N times; report medians")


# ======================================================================================== peak


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


def cmd_peak(a: argparse.Namespace) -> int:
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


def add_peak_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--json-only", action="store_true", help="print only the JSON line")


# ======================================================================================== speed

SPEED_PARTS = ("batch-sampling", "quality", "throughput", "budget", "big", "sampling")  # in the order they run
REFERENCE_CONFIG = REPO / "configs" / "reference_cpu.yaml"
SAMPLE_MODEL = ["model.n_layer=6", "model.n_head=6", "model.n_embd=384", "model.block_size=256"]
SAMPLE_REFERENCE_MODEL = ["--layers", "6", "--heads", "6", "--embd", "384", "--ctx", "256"]
# a checkpoint made by 1 training step (decoding speed does not depend on the weights)
ONE_STEP = ["train.max_steps=1", "train.eval_steps=1", "log.sample_length=0", "log.tensorboard=false"]
TARGET_WALL_RATIO = 0.5
TARGET_TRAIN_RATIO = 1.5
TARGET_SAMPLE_RATIO = 10.0


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


def collect(runs: list[dict[str, float]]) -> dict[str, Series]:
    return {key: Series([r[key] for r in runs]) for key in runs[0]}


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
    """32 samples of 500 characters as one batch (`minigpt sample -n 32`) against the batch-1 path,
    whole processes, for the default model and the 6x384 one."""
    n, chars = (4, 50) if plan.throughput_steps < 100 else (BATCH_SAMPLES, BATCH_CHARS)
    out: dict[str, float] = {}
    for name, run_dir in models.items():
        progress(f"batched sampling [{rep}]: {name}, {n} samples of {chars} characters, batched then one by one")
        batched = run_timed(
            minigpt("sample", str(run_dir), "-n", str(n), "--max-new-tokens", str(chars), "--device", "cpu"), env
        )
        one = run_timed(["-c", BATCH_ONE_CODE, str(run_dir), str(n), str(chars)], env)
        out[f"{name}_batched_chars_per_s"] = n * chars / batched.wall_s
        out[f"{name}_batch1_chars_per_s"] = n * chars / one.wall_s
        out[f"{name}_ratio"] = one.wall_s / batched.wall_s
    return out


# ---------------------------------------------------------------------------------------- speed: budget

BUDGET_RECIPE = REPO / "configs" / "cpu_4min.yaml"
BUDGET_S = 240.0
CHECKPOINTS_S = (30, 60, 120, 240)
CALIBRATION_STEPS = 500
BUDGET_PLOT = REPO / "docs" / "img" / "budget_curve.png"


def loss_at(curve: list[list[float]], seconds: float) -> float | None:
    """The latest evaluation at or before `seconds` of a [[step, wall_s, loss], ...] curve."""
    before = [loss for _, t, loss in curve if t <= seconds]
    return before[-1] if before else None


def reference_steps(ref: Path, data: Path, env: dict[str, str], budget: float) -> tuple[int, dict[str, Any]]:
    """How many reference steps fit in `budget` seconds of whole-process time, from a calibration run."""
    progress(f"budget: reference calibration ({CALIBRATION_STEPS} steps)")
    _, out = run_reference(ref, data, env, "--steps", str(CALIBRATION_STEPS))
    startup = out["curve"][0][1]  # process start to the end of the step-0 evaluation
    per_step = (out["wall_s"] - startup) / CALIBRATION_STEPS  # evaluations every 250 steps included
    return int((budget - startup) / per_step), out


def budget_once(
    ref: Path, data: Path, env: dict[str, str], tmp: Path, rep: int, seed: int, budget: float = BUDGET_S
) -> dict[str, Any]:
    """The four-minute recipe (configs/cpu_4min.yaml) against the reference's recipe run for as many
    steps as fit in the same 240 s: both loss curves against wall time since launch. minigpt's points
    are its run's fixed-batch estimates, its last the whole split; the reference's are whole-split."""
    run_dir = tmp / f"budget-{rep}"
    # a shorter budget (a smoke test) keeps the recipe's 8 s for start-up, final evaluation and exit
    shorter = [] if budget == BUDGET_S else [f"train.max_time={budget - 8:g}s"]
    progress(f"budget [{rep}]: minigpt train configs/cpu_4min.yaml (train.seed={seed} {' '.join(shorter)})")
    launched = time.time()
    train = run_timed(minigpt_train(data, run_dir, f"train.seed={seed}", *shorter, config=BUDGET_RECIPE), env)
    results = json.loads((run_dir / "results.json").read_text())
    curve = [[e.step, round(e.wall_time - launched, 2), round(e.value, 4)] for e in read_scalars(run_dir, "val/loss")]
    curve.append([results["steps"], round(train.wall_s, 2), round(results["val_loss_full"], 4)])
    steps, calibration = reference_steps(ref, data, env, budget)
    progress(f"budget [{rep}]: reference, {steps} steps (about {budget:.0f} s)")
    ref_proc, ref_out = run_reference(ref, data, env, "--steps", str(steps), "--seed", str(seed))
    # the reference times its curve from after its imports; shift it to time since launch, as minigpt's
    offset = ref_proc.wall_s - ref_out["wall_s"]
    ref_curve = [[step, round(t + offset, 2), loss] for step, t, loss in ref_out["curve"]]
    return {
        "minigpt_wall_s": train.wall_s,
        "minigpt_steps": results["steps"],
        "minigpt_val_loss": results["val_loss_full"],
        "minigpt_tokens_per_s": results["tokens_per_s"],
        "minigpt_curve": curve,
        "reference_wall_s": ref_proc.wall_s,
        "reference_steps": steps,
        "reference_val_loss": ref_out["val_loss"],
        "reference_curve": ref_curve,
        "reference_calibration_ms_per_step": calibration["ms_per_step_median"],
    }


def summarize_budget(runs: list[dict[str, Any]], budget: float = BUDGET_S) -> dict[str, Any]:
    """Medians over the repeats, and each curve read at 30, 60, 120 and 240 s."""
    med = medians(
        runs,
        (
            "minigpt_wall_s",
            "minigpt_val_loss",
            "minigpt_steps",
            "reference_wall_s",
            "reference_val_loss",
            "reference_steps",
        ),
    )
    at: dict[str, dict[str, float | None]] = {}
    for s in [c for c in CHECKPOINTS_S if c < budget] + [int(budget)]:
        row = {}
        for who in ("minigpt", "reference"):
            # the 240 s point is the final whole-split score, wherever the run ended near the budget
            vals = [r[f"{who}_val_loss"] if s == int(budget) else loss_at(r[f"{who}_curve"], s) for r in runs]
            row[who] = statistics.median(vals) if all(v is not None for v in vals) else None
        at[str(s)] = row
    return {
        "repeats": len(runs),
        "minigpt_wall_s": med["minigpt_wall_s"],
        "minigpt_val_loss": med["minigpt_val_loss"],
        "minigpt_val_losses": [r["minigpt_val_loss"] for r in runs],
        "minigpt_steps": med["minigpt_steps"],
        "reference_wall_s": med["reference_wall_s"],
        "reference_val_loss": med["reference_val_loss"],
        "reference_steps": med["reference_steps"],
        "gap": med["reference_val_loss"] - med["minigpt_val_loss"],
        "at_seconds": at,
        "runs": runs,
    }


def budget_table(summary: dict[str, Any]) -> str:
    """The curves at 30, 60, 120 and 240 s as the Markdown table docs/benchmarks.md shows."""
    lines = ["| wall time | minigpt | reference | minigpt at or below? |", "| --- | --- | --- | --- |"]
    for s, row in summary["at_seconds"].items():
        m, r = row["minigpt"], row["reference"]
        ok = "-" if m is None or r is None else yes_no(m <= r)
        fmt = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
        lines.append(f"| {s} s | {fmt(m)} | {fmt(r)} | {ok} |")
    lines.append(
        f"\nwhole process: minigpt {summary['minigpt_wall_s']:.1f} s ({summary['minigpt_steps']:.0f} steps), "
        f"reference {summary['reference_wall_s']:.1f} s ({summary['reference_steps']:.0f} steps); "
        f"final whole-split losses {summary['minigpt_val_losses']}"
    )
    return "\n".join(lines)


def plot_budget(runs: list[dict[str, Any]], path: Path) -> None:
    """Both curves of every repeat, loss against wall time, as a PNG (docs/img/budget_curve.png)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    names = {
        "minigpt": "minigpt, configs/cpu_4min.yaml (last point: whole split)",
        "reference": "reference recipe (whole split at every point)",
    }
    for i, r in enumerate(runs):
        for who, colour in (("minigpt", "tab:blue"), ("reference", "tab:orange")):
            curve = [(t, loss) for _, t, loss in r[f"{who}_curve"] if loss < 3.0]
            label = names[who] if i == 0 else None
            ax.plot(*zip(*curve), color=colour, alpha=0.9 if i == 0 else 0.5, marker=".", label=label)
    for s in CHECKPOINTS_S:
        ax.axvline(s, color="grey", lw=0.6, ls=":")
    ax.axhline(1.4697, color="tab:green", lw=0.8, ls="--", label="GPU recipe, published (1.4697)")
    ax.set(
        xlabel="wall time since the process started (s)",
        ylabel="validation loss (nats)",
        title="Loss against wall time, 2 CPU cores, tiny Shakespeare",
        ylim=(1.4, 2.6),
        xlim=(0, 250),
    )
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


# ---------------------------------------------------------------------------------------- speed: big

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
BIG_TARGET_RATIO = 3.0
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
    peaks = last_json(run_timed([__file__, "peak", "--json-only"], env), "bench.py peak")
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


def summarize_batch_sampling(s: dict[str, Series]) -> dict[str, Any]:
    ratio = s["default_ratio"].median
    return {**{k: v.to_dict() for k, v in s.items()}, "target": TARGET_BATCH_RATIO, "met": ratio >= TARGET_BATCH_RATIO}


def compile_row(metric: str, part: dict[str, Any]) -> Row:
    """minigpt's compile time and dtype in a training comparison (the reference: eager float32)."""
    mg = f"{part['minigpt_compile_s']['median']:.1f}, {part['minigpt_dtype']['median']}"
    return Row(metric, mg, "0, float32", "", "", "")


def table_rows(results: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    if q := results.get("time_to_quality"):
        mg, ref = q["minigpt_val_loss"]["median"], q["reference_val_loss"]["median"]
        rows.append(
            Row(
                "val loss (whole val split, nats)",
                f"{mg:.4f}",
                f"{ref:.4f}",
                f"{mg - ref:+.4f}",
                "<= ref",
                yes_no(q["loss_ok"]),
            )
        )
        mg, ref = q["minigpt_wall_s"]["median"], q["reference_wall_s"]["median"]
        rows.append(
            Row(
                "time to quality: process wall (s)",
                f"{mg:.1f}",
                f"{ref:.1f}",
                f"{q['wall_ratio']:.2f}x",
                f"<= {TARGET_WALL_RATIO}x",
                yes_no(q["wall_ratio_met"]),
            )
        )
        rows.append(Row("  reference's own wall_s", "", f"{q['reference_reported_wall_s']['median']:.1f}", "", "", ""))
        rows.append(Row("  minigpt eval process wall (s)", f"{q['minigpt_eval_wall_s']['median']:.1f}", "", "", "", ""))
        rows.append(compile_row("  of which compile (s), dtype", q))
    if t := results.get("train_throughput"):
        mg, ref = t["minigpt_tokens_per_s"]["median"], t["reference_tokens_per_s"]["median"]
        rows.append(
            Row(
                "train tokens/s (reference recipe)",
                f"{mg:,.0f}",
                f"{ref:,.0f}",
                f"{t['ratio']:.2f}x",
                f">= {TARGET_TRAIN_RATIO}x",
                yes_no(t["met"]),
            )
        )
        mg, ref = t["minigpt_ms_per_step"]["median"], t["reference_ms_per_step"]["median"]
        rows.append(Row("  ms/step", f"{mg:.2f}", f"{ref:.2f}", f"{mg / ref:.2f}x", "", ""))
        rows.append(compile_row("  compile (s, not in tokens/s), dtype", t))
    if s := results.get("sampling"):
        mg, ref = s["minigpt_chars_per_s"]["median"], s["reference_chars_per_s"]["median"]
        rows.append(
            Row(
                "sampling chars/s (6x384, ctx 256)",
                f"{mg:,.1f}",
                f"{ref:,.1f}",
                f"{s['ratio']:.2f}x",
                f">= {TARGET_SAMPLE_RATIO:g}x",
                yes_no(s["met"]),
            )
        )
    if b := results.get("batch_sampling"):
        for name, label in (("default", "default model"), ("6x384", "6x384 ctx 256")):
            mg, one = b[f"{name}_batched_chars_per_s"]["median"], b[f"{name}_batch1_chars_per_s"]["median"]
            ok = yes_no(b["met"]) if name == "default" else ""
            target = f">= {TARGET_BATCH_RATIO:g}x" if ok else ""
            rows.append(
                Row(
                    f"{BATCH_SAMPLES} samples chars/s, {label}",
                    f"{mg:,.0f}",
                    f"{one:,.0f} (batch 1)",
                    f"{b[f'{name}_ratio']['median']:.2f}x",
                    target,
                    ok,
                )
            )
    if g := results.get("budget"):
        for sec, row in g["at_seconds"].items():
            mg, ref = row["minigpt"], row["reference"]
            if mg is None or ref is None:
                continue
            final = sec == str(int(max(float(k) for k in g["at_seconds"])))
            what = f"cpu_4min.yaml val loss at {sec} s (whole split)" if final else f"  curve val loss at {sec} s"
            rows.append(
                Row(
                    what,
                    f"{mg:.4f}",
                    f"{ref:.4f}",
                    f"{mg - ref:+.4f}",
                    "<= 1.50" if final else "<= ref",
                    yes_no(mg <= ref and (mg <= 1.50 or not final)),
                )
            )
        rows.append(
            Row(
                "  whole process (s)",
                f"{g['minigpt_wall_s']:.1f}",
                f"{g['reference_wall_s']:.1f}",
                "",
                "<= 240",
                yes_no(g["minigpt_wall_s"] <= 240),
            )
        )
    if big_ := results.get("big"):
        rows.append(
            Row(
                "train tokens/s (6x384, ctx 256, batch 16)",
                f"{big_['minigpt_tokens_per_s']:,.0f}",
                f"{big_['reference_tokens_per_s']:,.0f}",
                f"{big_['ratio']:.2f}x",
                f">= {big_['target_ratio']:g}x",
                yes_no(big_["ratio"] >= big_["target_ratio"]),
            )
        )
        frac = big_["fraction_of_peak"]
        rows.append(
            Row(
                f"  fraction of the measured {big_['peak_dtype']} peak",
                f"{100 * frac:.0f}%",
                f"{100 * big_['reference_fraction_of_fp32_peak']:.0f}% of float32's",
                f"({big_['peak_gflops']:.0f} GFLOP/s)",
                ">= 60%",
                yes_no(frac >= 0.6),
            )
        )
    return rows


def format_table(rows: list[Row]) -> str:
    header = Row("metric", "minigpt", "reference", "ratio", "target", "met?")
    cells = [[r.metric, r.minigpt, r.reference, r.ratio, r.target, r.met] for r in [header, *rows]]
    widths = [max(len(c[i]) for c in cells) for i in range(6)]

    def line(c: list[str]) -> str:
        return " | ".join(c[0].ljust(widths[0]) if i == 0 else c[i].rjust(widths[i]) for i in range(6)).rstrip()

    sep = "-+-".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep, *(line(c) for c in cells[1:])])


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
            collect(throughput), "tokens_per_s", TARGET_TRAIN_RATIO, recipe="configs/reference_cpu.yaml"
        )
    if "budget" in parts:
        budget = 40.0 if a.quick else BUDGET_S
        runs = [budget_once(ref, data, env, tmp, i, 1337 + i, budget) for i in range(a.repeats)]
        results["budget"] = summarize_budget(runs, budget)
        plot_budget(runs, tmp / "budget_curve.png" if a.quick else a.plot)
    if "big" in parts:
        steps = 25 if a.quick else BIG_STEPS  # the reference times its steps from the 20th on
        results["big"] = big(ref, data, env, tmp, a.repeats, steps, not a.quick)
    if "sampling" in parts:
        run_dir = tmp / "sample-model"
        if not run_dir.exists():  # made by the batch-sampling part when that ran
            make_sample_checkpoint(data, env, tmp)
        sampling = [sampling_once(ref, data, plan, env, run_dir, i) for i in range(a.repeats)]
        results["sampling"] = summarize_speedup(collect(sampling), "chars_per_s", TARGET_SAMPLE_RATIO)
    return results


def cmd_speed(a: argparse.Namespace) -> int:
    """minigpt against the reference baseline (../shared/bench/reference_gpt.py), side by side.

    Parts (--only picks some; the default runs all six, about 20 minutes on 2 cores per repeat):
      batch-sampling  32 samples of 500 characters as one batch against the batch-1 path (target 5x)
      quality         time to the reference's loss: default config against its 2000 steps (target 0.5x)
      throughput      tokens/s on the reference's recipe, configs/reference_cpu.yaml (target 1.5x)
      budget          configs/cpu_4min.yaml against the reference in the same 240 s: loss at 30, 60,
                      120 and 240 s (target: below it everywhere, <= 1.50, <= 240 s); writes --plot
      big             the GPU recipe's 6x384 model, batch 16: tokens/s and the fraction of this
                      machine's measured peak in the precision minigpt trains in (targets 3x, 60%)
      sampling        `minigpt sample` of 3000 characters, whole process, against the reference's
                      generation loop, 6x384 ctx 256 (target 10x)
    Prints a table (metric | minigpt | reference | ratio | target | met?) and one JSON line."""
    if problem := missing_file(("reference script", a.reference), ("data file", a.data)):
        print(f"error: {problem}", file=sys.stderr)
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
    if not a.json_only:
        if a.quick:
            print("quick mode: tiny step counts, a smoke test of this script; the numbers mean nothing")
        print(format_table(table_rows(results)))
        if "budget" in results:
            print(budget_table(results["budget"]))
    print(json.dumps(report))
    return 0


def add_speed_args(ap: argparse.ArgumentParser) -> None:
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
    ap.add_argument("--plot", type=Path, default=BUDGET_PLOT, help="the budget part's PNG (not written with --quick)")
    ap.add_argument("--json-only", action="store_true", help="print only the JSON line on stdout")


# ======================================================================================== data

DATA_STEPS = 100  # enough random windows that pages left mapped would show in the peak
DATA_TRAIN_ARGS = [
    f"train.max_steps={DATA_STEPS}",
    f"train.eval_interval={DATA_STEPS}",
    "train.eval_steps=2",
    *BARE_RUN,
    "log.interval=1",
    "log.progress=lines",
    "log.progress_seconds=0.001",
]
# code points a real tree's comments and strings hold: accents, Greek, Cyrillic, CJK, symbols, emoji
FOREIGN = [
    *range(0xC0, 0x180),
    *range(0x391, 0x3CA),
    *range(0x410, 0x450),
    *range(0x2010, 0x2030),
    *range(0x2190, 0x21A0),
    *range(0x4E00, 0x4E00 + 2900),
    *range(0x1F600, 0x1F640),
]


def build_file(path: Path, mb: int) -> int:
    """One file of `mb` MB: tiny Shakespeare rotated by a different amount each time it repeats."""
    text = DEFAULT_DATA.read_text(encoding="utf-8")
    target = mb * 1_000_000
    with open(path, "w", encoding="utf-8") as f:
        written, i = 0, 0
        while written < target:
            k = (i * 7919) % len(text)
            chunk = (text[k:] + text[:k])[: target - written]
            f.write(chunk)
            written += len(chunk.encode("utf-8"))
            i += 1
    return path.stat().st_size


def build_jsonl(path: Path, mb: int) -> int:
    """JSON Lines of `mb` MB: tiny Shakespeare's paragraphs as records {"id", "title", "text"}, the
    play rotated each time it repeats, as a dataset tool writes them."""
    paragraphs = DEFAULT_DATA.read_text(encoding="utf-8").split("\n\n")
    target = mb * 1_000_000
    with open(path, "w", encoding="utf-8") as f:
        written, i = 0, 0
        while written < target:
            k = (i * 7919) % len(paragraphs)
            for n, text in enumerate(paragraphs[k:] + paragraphs[:k]):
                line = json.dumps({"id": i * len(paragraphs) + n, "title": text[:20], "text": text}) + "\n"
                f.write(line)
                written += len(line.encode("utf-8"))
                if written >= target:
                    break
            i += 1
    return path.stat().st_size


def build_folder(root: Path, mb: int, files: int) -> int:
    """`files` files of equal size, each a different slice of tiny Shakespeare, 1,000 to a folder."""
    text = DEFAULT_DATA.read_text(encoding="utf-8")
    each = mb * 1_000_000 // files
    for i in range(files):
        folder = root / f"{i // 1000:03d}"
        if i % 1000 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        start = (i * 104_729) % (len(text) - each)
        (folder / f"doc{i:06d}.txt").write_text(text[start : start + each], encoding="utf-8")
    return sum(p.stat().st_size for p in root.rglob("*.txt"))


def build_tree(root: Path, mb: int, files: int, seed: int = 0) -> int:
    """A source tree as a user brings one: many small files of uneven size in nested folders, about
    a third with non-ASCII comments (~3,500 distinct characters in all), and one file in 2,000 in
    Latin-1 (not UTF-8: char mode skips it with a warning)."""
    import random

    rng = random.Random(seed)
    text = DEFAULT_DATA.read_text(encoding="utf-8")
    mean = mb * 1_000_000 / files
    for i in range(files):
        folder = root / f"pkg{i // 2000:02d}" / f"mod{i // 100 % 20:02d}"
        if i % 100 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        size = max(64, min(int(rng.lognormvariate(0, 0.8) * mean * 0.73), len(text) // 2))
        start = rng.randrange(len(text) - size)
        body = text[start : start + size]
        if i % 2000 == 1999:
            (folder / f"legacy{i:06d}.txt").write_bytes(body.encode("ascii", "replace") + b"\n# caf\xe9\n")
            continue
        if i % 3 == 0:  # comments with foreign characters, every ~40 lines
            lines = body.split("\n")
            for k in range(0, len(lines), 40):
                lines[k] += "  # " + "".join(chr(rng.choice(FOREIGN)) for _ in range(rng.randint(3, 20)))
            body = "\n".join(lines)
        (folder / f"file{i:06d}.py").write_text(body, encoding="utf-8")
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def read_once(root: Path) -> str:
    """Read every file of a corpus (into the page cache): how long it took, as a line."""
    start, size = time.perf_counter(), 0
    for p in [root] if root.is_file() else sorted(root.rglob("*")):
        if p.is_file():
            with open(p, "rb", buffering=0) as f:
                while chunk := f.read(16 << 20):
                    size += len(chunk)
    took = time.perf_counter() - start
    return f"read once beforehand: {size / 1e6:,.0f} MB in {took:.2f} s ({size / 1e6 / max(took, 1e-9):,.0f} MB/s)"


def torch_import_seconds() -> float:
    code = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"
    runs = [float(subprocess.check_output([sys.executable, "-c", code], text=True)) for _ in range(3)]
    return statistics.median(runs)


def train_on_corpus(data: Path, out: Path, cache: Path) -> dict[str, Any]:
    """One `minigpt train`: peak RSS (ru_maxrss from wait4), the hashing and encoding seconds it
    reports, and the time from process start to its first step's progress line."""
    env = child_env(cache, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, *minigpt_train(data, out, *DATA_TRAIN_ARGS, device=None)]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    first_step, lines, prep_s = None, [], 0.0
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append(line.rstrip())
        if first_step is None and line.startswith("step 1/"):
            first_step = time.perf_counter() - start
        m = re.match(r"(hashing|encoding|reading the records of) .*: ([\d,]+) MB in ([\d.]+) s", line)
        if m:
            prep_s += float(m.group(3))
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0 or first_step is None:
        print("\n".join(lines[-20:]), file=sys.stderr)
        raise SystemExit(f"minigpt train failed on {data}")
    return {
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "first_step_s": first_step,
        "prep_s": prep_s,
        "wall_s": wall,
        "log": [ln for ln in lines if ln.startswith(("data:", "hashing", "encoding", "reading", "warning"))],
    }


def cmd_data(a: argparse.Namespace) -> int:
    """Data at scale: peak memory, encoding throughput and time to the first step on large corpora.

    Builds the corpora (from tiny Shakespeare, shifted so no two files are identical): by default a
    2 GB file, a 1 GB folder of 50,000 files, a 1.4 GB source tree of 80,000 files and 2 GB of
    JSON Lines (--file-mb sets both single files' size). Then runs
    `minigpt train` for 100 steps on each, twice: with an empty encoding cache, then cached. Each run:
    the child's peak RSS, the encoding throughput (the corpus's bytes over the hashing and encoding
    time train reports), and the time from process start to the first step less `import torch`'s.
    Before a corpus's first run its files are read once, so that run finds them in the page cache,
    as right after building or copying them (the read's rate is printed; --cold skips it)."""
    work = a.workdir or Path(tempfile.mkdtemp(prefix="minigpt-bench-data-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        t = time.perf_counter()
        builders = {
            "file": lambda: build_file(work / "big.txt", a.file_mb),
            "folder": lambda: build_folder(work / "folder", a.folder_mb, a.files),
            "tree": lambda: build_tree(work / "tree", a.tree_mb, a.tree_files),
            "jsonl": lambda: build_jsonl(work / "big.jsonl", a.file_mb),
        }
        corpora = {
            "file": work / "big.txt",
            "folder": work / "folder",
            "tree": work / "tree",
            "jsonl": work / "big.jsonl",
        }

        def size_of(name: str) -> int:
            path = corpora[name]
            if not (a.reuse and path.exists()):
                return builders[name]()
            return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*.*"))

        sizes = {name: size_of(name) for name in a.only}
        progress(
            f"built {', '.join(f'{n} {sizes[n] / 1e6:,.0f} MB' for n in a.only)} in {time.perf_counter() - t:.0f} s"
        )
        torch_s = torch_import_seconds()
        print(f"import torch: {torch_s:.2f} s (median of 3; subtracted from the time to the first step)")
        results: dict[str, Any] = {"torch_import_s": torch_s}
        for name, size in sizes.items():
            data, cache = corpora[name], work / f"cache-{name}"
            shutil.rmtree(cache, ignore_errors=True)
            if not a.cold:
                print(f"{name:6s} {read_once(data)}")
            for phase in ("first", "cached"):
                out = work / f"run-{name}-{phase}"
                shutil.rmtree(out, ignore_errors=True)
                r = train_on_corpus(data, out, cache)
                r["encode_mb_s"] = size / 1e6 / r["prep_s"] if phase == "first" and r["prep_s"] else None
                r["first_step_less_torch_s"] = r["first_step_s"] - torch_s
                r["corpus_mb"] = size / 1e6
                results[f"{name}_{phase}"] = r
                enc = f" | encode {r['encode_mb_s']:,.0f} MB/s" if r["encode_mb_s"] else ""
                print(
                    f"{name:6s} {phase:6s} | {size / 1e6:7,.0f} MB | peak RSS {r['peak_rss_mb']:7,.0f} MB{enc} | "
                    f"first step at {r['first_step_s']:6.2f} s ({r['first_step_less_torch_s']:.2f} s without "
                    f"torch's import) | wall {r['wall_s']:.1f} s"
                )
                for line in r.pop("log"):
                    print(f"    {line}")
        print(json.dumps({**results, "machine": machine_info()}))
    finally:
        if not a.keep and a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def add_data_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--file-mb", type=int, default=2000, help="size of the single file (MB)")
    ap.add_argument("--folder-mb", type=int, default=1000, help="size of the folder (MB)")
    ap.add_argument("--files", type=int, default=50_000, help="files in the folder")
    ap.add_argument("--tree-mb", type=int, default=1400, help="size of the source tree (MB)")
    ap.add_argument("--tree-files", type=int, default=80_000, help="files in the source tree")
    ap.add_argument(
        "--only", nargs="+", choices=["file", "folder", "tree", "jsonl"], default=["file", "folder", "tree", "jsonl"]
    )
    ap.add_argument("--workdir", type=Path, default=None, help="where to build (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the corpora and caches")
    ap.add_argument("--reuse", action="store_true", help="with --workdir: use the corpora already built there")
    ap.add_argument("--cold", action="store_true", help="do not read a corpus once before its first run")


# ======================================================================================== memory

MEMORY_CONFIGS = [
    "train.batch_size=64",
    "train.batch_size=256",
    "model.n_layer=6 model.n_head=6 model.n_embd=384 model.block_size=256 train.batch_size=32",
    "model.n_embd=512 model.n_head=8 model.block_size=256 train.batch_size=32 train.dtype=float32",
    "model.n_layer=4 model.n_embd=256 model.block_size=512 train.batch_size=16 model.dropout=0.2",
]
MEMORY_CHILD = r"""
import json, resource, sys, tempfile
from pathlib import Path
import torch
from minigpt.config.files import load_config
from minigpt.data.corpus import load_corpus
from minigpt.model import parameter_count
from minigpt.runtime.memory import process_rss
from minigpt.train.preflight import estimate
from minigpt.runtime.device import configure_threads, resolve_dtype
from minigpt.train.trainer import Trainer

cfg = load_config(None, [f"data.path={sys.argv[1]}", "train.device=cpu", "log.tensorboard=false", *sys.argv[2:]])
configure_threads(cfg.train.threads)
corpus = load_corpus(cfg.data, cfg.model.block_size)
dtype = resolve_dtype(cfg.train.dtype, torch.device("cpu"))
trainer = Trainer(cfg, corpus, corpus.tokenizer, torch.device("cpu"), dtype, Path(tempfile.mkdtemp()))
before = process_rss()
for _ in range(3):
    trainer.train_step()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
n_params = parameter_count(cfg.model, corpus.tokenizer.vocab_size)
micro = cfg.train.batch_size // cfg.train.grad_accum_steps
est = estimate(cfg, corpus.tokenizer.vocab_size, n_params, dtype).total(micro) - 4 * n_params
print(json.dumps({"measured": peak - before, "estimated": est}))
"""


def measure_memory(data: Path, overrides: list[str]) -> dict[str, float]:
    """What three training steps add to a child's resident memory (its peak less what it held once
    the trainer was built), beside `minigpt.train.preflight`'s estimate less the weights."""
    result = last_json(run_timed(["-c", MEMORY_CHILD, str(data), *overrides], child_env()), "the measuring child")
    result["ratio"] = result["estimated"] / result["measured"]
    return result


def cmd_memory(a: argparse.Namespace) -> int:
    """The memory preflight's estimate beside the memory training really takes, on the CPU.

    The estimate should be within 30% of the measured figure (tests/test_slow.py holds it there)."""
    rows = []
    for config in a.configs or MEMORY_CONFIGS:
        try:
            r = measure_memory(a.data, config.split())
        except BenchError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        rows.append({"config": config, **r})
        print(
            f"{r['measured'] / 2**20:8.0f} MB measured  {r['estimated'] / 2**20:8.0f} MB estimated  "
            f"ratio {r['ratio']:.2f}  {config}",
            flush=True,
        )
    print(json.dumps({"configs": rows, "machine": machine_info()}))
    return 0


def add_memory_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "configs",
        nargs="*",
        metavar="CONFIG",
        help="space-separated overrides of one config, quoted (default: five built-in ones)",
    )
    add_data_arg(ap)


# ======================================================================================== share

SAMPLER = r"""
import sys, time
from minigpt.runtime.cores import CoreLoad
START = CoreLoad()  # as `minigpt sample` does: before torch loads
import torch
from pathlib import Path
from minigpt.infer.loading import cast_for_sampling, load_model
from minigpt.runtime.device import configure_threads
from minigpt.infer.decode import generate

configure_threads(0, START.others())
loaded = load_model(Path(sys.argv[1]), torch.device("cpu"))
cast_for_sampling(loaded, "auto", "cpu")
gen = torch.Generator().manual_seed(1)
generate(loaded.model, [0], 100, 0.8, generator=gen)  # warm-up
t0 = time.perf_counter()
generate(loaded.model, [0], int(sys.argv[2]), 0.8, generator=gen)
print(int(sys.argv[2]) / (time.perf_counter() - t0))
"""


def start_child(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, *args], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(proc: subprocess.Popen) -> tuple[str, str]:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise BenchError(f"{proc.args} failed:\n{err[-2000:]}")
    return out, err


def train_tokens_per_s(proc: subprocess.Popen) -> float:
    """The tokens/s of a finished `minigpt train`'s "done:" line."""
    _, err = finish(proc)
    found = re.search(r"done: \d+ steps in [0-9.]+s, ([0-9,]+) tokens/s", err)
    if not found:
        raise BenchError(f"no done line in:\n{err[-2000:]}")
    return float(found.group(1).replace(",", ""))


def share_once(data: Path, tmp: Path, steps: int, chars: int) -> dict[str, float]:
    # what minigpt chooses by itself: a user's OpenMP settings would measure something else
    env = child_env(tmp / "cache", drop=("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"))

    def train(name: str, n: int = steps) -> subprocess.Popen:
        return start_child(
            minigpt_train(data, tmp / name, f"train.max_steps={n}", "train.final_eval=false", "log.progress=off"), env
        )

    def sample() -> float:
        """Characters/s of generation alone (timed inside the process: start-up does not count)."""
        out, _ = finish(start_child(["-c", SAMPLER, str(tmp / "solo"), str(chars)], env))
        return float(out.strip().splitlines()[-1])

    solo = train_tokens_per_s(train("solo"))
    a, b = train("pair-a"), train("pair-b")
    pair = [train_tokens_per_s(a), train_tokens_per_s(b)]
    sample_solo = sample()
    beside = train("beside", steps * 4)
    time.sleep(10)  # let the training get past its start-up
    sample_busy = sample()
    beside.kill()
    beside.communicate()
    return {
        "train_solo": solo,
        "train_pair_a": pair[0],
        "train_pair_b": pair[1],
        "pair_fraction": min(pair) / solo,
        "sample_solo": sample_solo,
        "sample_beside_training": sample_busy,
        "sample_fraction": sample_busy / sample_solo,
    }


def cmd_share(a: argparse.Namespace) -> int:
    """Two minigpt processes on one machine: do they share it, or collapse?

    With the thread counts minigpt chooses by itself: one default-config training alone (tokens/s
    from its "done:" line); two such trainings started together, each one's tokens/s; the trained
    default model decoding --chars characters alone (characters/s of generation, timed in the
    process); and the same beside a training. Targets (issue 12): paired trainings each >= 40% of
    solo; a sampler beside a training keeps >= 50% of its solo characters/s."""
    runs = []
    with scratch("minigpt-share-") as tmp:
        for rep in range(a.repeats):
            progress(f"[{rep + 1}/{a.repeats}] a training alone, two together, a sampler alone and beside one")
            runs.append(share_once(a.data, tmp / f"r{rep}", a.steps, a.chars))
    med = medians(runs)
    for k, v in med.items():
        print(f"{k:<24}{v:>12,.2f}")
    print(
        json.dumps(
            {
                "repeats": a.repeats,
                "steps": a.steps,
                "chars": a.chars,
                "runs": runs,
                "medians": med,
                "machine": machine_info(),
            }
        )
    )
    return 0


def add_share_args(ap: argparse.ArgumentParser) -> None:
    add_data_arg(ap)
    add_repeats_arg(ap)
    ap.add_argument("--steps", type=int, default=480, help="steps of each training (the default config's)")
    ap.add_argument("--chars", type=int, default=4000, help="characters the sampler generates")


# ======================================================================================== playground

PLAYGROUND_MODELS = {  # name: model overrides of the default config
    "default (3x128, context 64)": {},
    "6x384, context 256": {"n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256},
}


def random_model(overrides: dict[str, int], name: str) -> Any:
    """A LoadedModel with the default config (and `overrides`), random weights, tiny Shakespeare's 65 characters."""
    import dataclasses
    from types import SimpleNamespace

    import torch

    from minigpt.config.schema import config_from_dict
    from minigpt.data.tokenizer import CharTokenizer
    from minigpt.infer.loading import LoadedModel
    from minigpt.model import GPT

    cfg = config_from_dict({}, "defaults")
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **overrides))
    tok = CharTokenizer.from_text(DEFAULT_DATA.read_text(encoding="utf-8"))
    torch.manual_seed(0)
    model = GPT(cfg.model, tok.vocab_size).eval()
    ckpt = SimpleNamespace(step=0, val_loss=None)
    return LoadedModel(model, tok, cfg, Path(f"random-{name.split()[0]}.pt"), ckpt)


def page_speed(browser: Any, page_path: Path, chars: int, repeats: int) -> tuple[float, float]:
    """Median characters/s and median open seconds over `repeats` fresh pages."""
    rates, opens = [], []
    for _ in range(repeats):
        context = browser.new_context(offline=True)
        pg = context.new_page()
        start = time.perf_counter()
        pg.goto(page_path.as_uri())
        pg.wait_for_function("window.playground && window.playground.ready")
        opens.append(time.perf_counter() - start)
        pg.fill("#prompt", "ROMEO:")
        pg.fill("#length", str(chars))
        pg.fill("#temperature", "0.8")
        pg.click("#generate")
        pg.wait_for_function("!window.playground.run.active && window.playground.run.chars > 0", timeout=600_000)
        run = pg.evaluate("({chars: window.playground.run.chars, ms: window.playground.run.ms})")
        rates.append(run["chars"] / (run["ms"] / 1000))
        context.close()
    return statistics.median(rates), statistics.median(opens)


def cmd_playground(a: argparse.Namespace) -> int:
    """How fast the playground page runs, in headless Chromium.

    Characters per second generated in the page (after its prompt is read) and the time from
    navigation to the model ready (weights decoded), for the default model and a 6x384 context-256
    one. Speed does not depend on the weights, so random ones are measured unless --run is given.
    Needs /usr/bin/chromium and the dev dependencies (playwright)."""
    from playwright.sync_api import sync_playwright

    from minigpt.export.playground import playground_page

    rows = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=a.chromium, args=CHROMIUM_ARGS)
        for name, overrides in PLAYGROUND_MODELS.items():
            if a.run and not overrides:
                import minigpt

                loaded = minigpt.load(a.run, device="cpu").loaded
            else:
                loaded = random_model(overrides, name)
            path = Path(tmp) / "page.html"
            playground_page(loaded, "float32").save(path)
            rate, opened = page_speed(browser, path, a.chars, a.repeats)
            rows.append({"model": name, "page_mb": path.stat().st_size / 1e6, "chars_per_s": rate, "open_s": opened})
            progress(f"{name}: {rate:,.0f} chars/s, opens in {opened:.2f} s, page {rows[-1]['page_mb']:.1f} MB")
        browser.close()
    print("| model | page | characters/s | page opens in |")
    print("|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['page_mb']:.1f} MB | {r['chars_per_s']:,.0f} | {r['open_s']:.2f} s |")
    print(json.dumps({"repeats": a.repeats, "chars": a.chars, "models": rows, "machine": machine_info()}))
    return 0


def add_playground_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--run", help="a trained run or checkpoint to measure as the default model")
    ap.add_argument("--chars", type=int, default=1000, help="characters generated per measurement")
    add_repeats_arg(ap, default=3)
    ap.add_argument("--chromium", default="/usr/bin/chromium")


# ======================================================================================== startup

TINY = [
    "model.n_layer=2",
    "model.n_head=2",
    "model.n_embd=32",
    "model.block_size=16",
    "train.batch_size=8",
    "train.max_steps=5",
    "train.eval_interval=5",
    "train.eval_steps=2",
    *BARE_RUN,
    "log.progress=off",
]
# `minigpt --help` in-process, then how many modules it imported (printed to stderr)
MODULE_COUNT = "import sys\nfrom {cli} import main\nmain(['--help'])\nprint(len(sys.modules), file=sys.stderr)"


def module_count_code(code: Path) -> str:
    """MODULE_COUNT for the tree at `code`: `main` is in minigpt/cli/app.py since the move into
    subpackages (6fc6243), in minigpt/cli.py before it."""
    new_layout = (code / "minigpt" / "cli" / "app.py").is_file()
    return MODULE_COUNT.format(cli="minigpt.cli.app" if new_layout else "minigpt.cli")


def unpack(ref: str, dest: Path) -> Path:
    """The tree of `ref` (its minigpt package is all that is used) in `dest`."""
    import tarfile
    from io import BytesIO

    archive = subprocess.run(["git", "archive", ref, "minigpt"], cwd=REPO, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def tiny_text(n_chars: int = 20_000) -> str:
    words = ["the", "king", "queen", "speak", "hear", "me", "now", "good", "lord", "what", "say", "you"]
    lines = [f"KING:\n{' '.join(words[(i * 7 + j) % len(words)] for j in range(6))}.\n" for i in range(n_chars // 30)]
    return "".join(lines)[:n_chars]


def measure_startup(before_ref: str, repeats: int) -> tuple[dict[str, dict[str, list[float]]], dict[str, int]]:
    """Seconds of each command for each variant, alternating, and the modules `minigpt --help` imports."""
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp_name:
        tmp = Path(tmp_name)
        trees = {"before": unpack(before_ref, tmp / "before"), "after": REPO}
        # only its own copy on PYTHONPATH; run from the temporary folder, since the current directory
        # comes first on sys.path and the repository's would import its minigpt whatever PYTHONPATH says
        drop = [k for k in os.environ if k.startswith("_MINIGPT")]
        variants = {
            name: child_env(tmp / "cache", drop=drop, PYTHONPATH=str(code), COLUMNS="100")
            for name, code in trees.items()
        }

        def run(args: list[str], env: dict[str, str], check: bool = True) -> Proc:
            return run_timed(args, env, cwd=tmp, check=check)

        for name, env in variants.items():
            progress(f"{name}: {run(['-c', 'import minigpt; print(minigpt.__file__)'], env).stdout.strip()}")
        text = tmp / "text.txt"
        text.write_text(tiny_text(), encoding="utf-8")
        run_dir = tmp / "run"
        run(minigpt_train(text, run_dir, *TINY), variants["after"])

        commands = {
            "--help": ["--help"],
            "sample 1 char": ["sample", str(run_dir), "--max-new-tokens", "1", "--device", "cpu"],
        }
        if run(minigpt("--version"), variants["after"], check=False).returncode == 0:
            commands["--version"] = ["--version"]
        times: dict[str, dict[str, list[float]]] = {c: {v: [] for v in variants} for c in commands}
        for i in range(repeats):
            order = list(variants) if i % 2 == 0 else list(reversed(variants))
            for command, args in commands.items():
                for name in order:
                    if command == "--version" and name == "before":
                        continue  # the old code may not have it
                    times[command][name].append(run(minigpt(*args), variants[name]).wall_s)
        counts = {name: run(["-c", module_count_code(trees[name])], env) for name, env in variants.items()}
    return times, {name: int(proc.stderr.split()[-1]) for name, proc in counts.items()}


def cmd_startup(a: argparse.Namespace) -> int:
    """Whole-process start-up and exit time of the command line, this working tree against a git ref.

    The "before" code is the tree of --before, unpacked with `git archive`; both run with this
    interpreter as `python -m minigpt ...`, alternating (A B B A ...) so drift hits both alike.
    Commands: `minigpt --help`, `minigpt sample RUN --max-new-tokens 1` (RUN: a tiny model trained
    first) and `minigpt --version`. Prints each one's medians and ratio, and the number of modules
    `minigpt --help` imports (noise-free)."""
    try:
        times, modules = measure_startup(a.before, a.repeats)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"\nwhole-process seconds, medians of {a.repeats} (before = {a.before}, after = working tree)")
    print(f"{'command':<16} {'before':>8} {'after':>8} {'after/before':>13}   (max - min: before, after)")
    result: dict[str, Any] = {"repeats": a.repeats, "before_ref": a.before}
    for command, by_variant in times.items():
        med = {n: statistics.median(ts) if ts else float("nan") for n, ts in by_variant.items()}
        ratio = med["after"] / med["before"] if by_variant["before"] else float("nan")
        spread = "  ".join(f"{max(ts) - min(ts):.3f}" if ts else "-" for ts in by_variant.values())
        print(f"{command:<16} {med['before']:>8.3f} {med['after']:>8.3f} {ratio:>13.3f}   ({spread})")
        result[command] = {n: (round(med[n], 4) if ts else None) for n, ts in by_variant.items()} | {
            f"spread_{n}": round(max(ts) - min(ts), 4) for n, ts in by_variant.items() if ts
        }
    print(f"modules imported by `minigpt --help`: before {modules['before']}, after {modules['after']}")
    print(json.dumps({**result, "help_modules": modules, "machine": machine_info()}))
    return 0


def add_startup_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--before", default="HEAD", help="git ref of the code to compare against (default HEAD)")
    add_repeats_arg(ap, default=9)


# ======================================================================================== tricks

TRICK_FIRST_STEP = """
import time, torch
t = time.perf_counter()
p = torch.nn.Parameter(torch.randn(100, 100)); p.grad = torch.randn(100, 100)
{make}
opt.step()
print(time.perf_counter() - t)
"""
TRICK_OPTIMIZERS = {
    "minigpt AdamW": "from minigpt.train.optim import AdamW; "
    "opt = AdamW([{'params': [p], 'weight_decay': 0.1}], lr=1e-3, betas=(0.9, 0.99))",
    "torch AdamW fused": "opt = torch.optim.AdamW([p], lr=1e-3, fused=True)",
}
TRICK_EXIT = "import sys, torch\nfrom minigpt.cli.process import exit_fast\n{how}\n"


def _module_calls(on: bool) -> None:
    """model.linear()/norm() through nn.Module.__call__ (on) or functionally (minigpt's trick)."""
    import torch.nn.functional as F

    import minigpt.model as mm

    if on:
        mm.linear = lambda m, x: m(x)
        mm.norm = lambda m, x: m(x)
    else:
        mm.linear = lambda m, x: F.linear(x, m.weight, m.bias)
        mm.norm = lambda m, x: F.layer_norm(x, m.normalized_shape, m.weight, m.bias, m.eps)


def _trick_decoding(repeats: int) -> dict[str, float]:
    import torch

    from minigpt.config.schema import ModelConfig
    from minigpt.infer.decode import generate
    from minigpt.infer.loading import column_major_for_decoding
    from minigpt.model import GPT

    def rate(model, n: int) -> float:
        t = time.perf_counter()
        generate(model, [1, 2, 3], n, temperature=1.0, generator=torch.Generator().manual_seed(0))
        return n / (time.perf_counter() - t)

    rates: dict[str, list[float]] = {"tricks on": [], "row-major weights": [], "module calls": []}
    for _ in range(repeats):
        for name, runs in rates.items():
            torch.manual_seed(0)
            model = GPT(ModelConfig(n_layer=6, n_head=6, n_embd=384, block_size=256), 65).eval()
            if name != "row-major weights":
                column_major_for_decoding(model)
            _module_calls(name == "module calls")
            rate(model, 20)
            runs.append(rate(model, 300))
    _module_calls(False)
    return {k: statistics.median(v) for k, v in rates.items()}


def _trick_training(repeats: int) -> dict[str, float]:
    import torch

    from minigpt.config.schema import ModelConfig
    from minigpt.model import GPT
    from minigpt.train.optim import AdamW

    x, y = torch.randint(0, 65, (32, 64)), torch.randint(0, 65, (32, 64))
    res: dict[str, list[float]] = {"tricks on": [], "module calls": [], "torch AdamW fused": []}
    for _ in range(repeats):
        for name, runs in res.items():
            torch.manual_seed(0)
            model = GPT(ModelConfig(), 65)
            _module_calls(name == "module calls")
            params = list(model.parameters())
            if name == "torch AdamW fused":
                opt = torch.optim.AdamW(params, lr=1e-3, fused=True)
            else:
                opt = AdamW([{"params": params, "weight_decay": 0.1}], lr=1e-3, betas=(0.9, 0.99))
            times = []
            for i in range(35):
                t = time.perf_counter()
                model(x, y)[1].backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                if i >= 5:
                    times.append(time.perf_counter() - t)
            runs.append(1000 * statistics.median(times))
    _module_calls(False)
    return {k: statistics.median(v) for k, v in res.items()}


def _in_fresh_processes(codes: dict[str, str], repeats: int, timed: bool) -> dict[str, float]:
    """Each code in a new interpreter, alternating: its printed number, or (timed) its wall time."""
    res: dict[str, list[float]] = {k: [] for k in codes}
    for _ in range(repeats):
        for name, code in codes.items():
            t = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            res[name].append(time.perf_counter() - t if timed else float(out.stdout.split()[-1]))
    return {k: statistics.median(v) for k, v in res.items()}


def cmd_tricks(a: argparse.Namespace) -> int:
    """Issue 36's speed tricks, each on and off, alternating, medians (docs/benchmarks.md).

    decoding: chars/s of a 6x384 context-256 model, with column-major weights and functional
    linear()/norm() (on), row-major weights, or module calls. training: ms per step of the default
    model with minigpt's AdamW, module calls, or torch.optim.AdamW(fused=True). first-step: seconds
    from creating an optimizer to its first step in a fresh process. exit: whole-process seconds
    of a process that imports torch and exits through exit_fast or sys.exit."""
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    figures = {
        "decoding chars/s": _trick_decoding(a.repeats),
        "training ms/step": _trick_training(a.repeats),
        "first optimizer step s": _in_fresh_processes(
            {k: TRICK_FIRST_STEP.format(make=v) for k, v in TRICK_OPTIMIZERS.items()}, a.repeats, timed=False
        ),
        "exit process s": _in_fresh_processes(
            {k: TRICK_EXIT.format(how=v) for k, v in {"exit_fast": "exit_fast(0)", "sys.exit": "sys.exit(0)"}.items()},
            a.repeats,
            timed=True,
        ),
    }
    for figure, values in figures.items():
        print(f"{figure:<24} " + "  ".join(f"{k}: {v:.4g}" for k, v in values.items()))
    print(json.dumps({"tricks": figures, "repeats": a.repeats, "machine": machine_info()}))
    return 0


def add_tricks_args(ap: argparse.ArgumentParser) -> None:
    add_repeats_arg(ap, default=5)


# ======================================================================================== auto

HEADS = {64: 4, 96: 4, 128: 4, 192: 6, 256: 8, 384: 6}  # heads for a width (32-wide heads or so)


def cmd_auto(a: argparse.Namespace) -> int:
    """--auto against hand-picked shapes and the default config, one after another on one text
    and budget (issue 38; docs/auto.md): whole-split loss and steps of each.

    auto: `train --auto train.max_time=BUDGET`. default: the default config with
    optim.schedule_by=time and no step cap. Each LxW shape: configs/cpu_4min.yaml with the budget and that shape."""
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",") if s]
    runs: dict[str, list[str]] = {"auto": ["--auto"]}
    if not a.no_default:
        runs["default"] = ["optim.schedule_by=time", "train.max_steps=1000000"]  # its 480 steps would end it early
    for layers, width in shapes:
        runs[f"{layers}x{width}"] = [
            str(BUDGET_RECIPE),
            f"model.n_layer={layers}",
            f"model.n_embd={width}",
            f"model.n_head={HEADS[width]}",
        ]
    results = {}
    with scratch("minigpt-auto-") as tmp:
        env = child_env(tmp / "cache")
        for name, args in runs.items():
            progress(f"{name}: {a.budget} on {a.data}")
            config = Path(args[0]) if args[0].endswith(".yaml") else None
            overrides = args[1:] if config else args
            out = tmp / name
            run_timed(
                minigpt_train(a.data, out, f"train.max_time={a.budget}", *overrides, config=config, device=None), env
            )
            r = json.loads((out / "results.json").read_text())
            results[name] = {"steps": r["steps"], "val_loss_full": round(r["val_loss_full"], 4)}
            print(f"{name:<8} {r['steps']:>7,} steps  whole-split loss {r['val_loss_full']:.4f}", flush=True)
    hand = [v["val_loss_full"] for k, v in results.items() if k not in ("auto", "default")]
    auto = results["auto"]["val_loss_full"]
    summary = {"auto_minus_best_hand": round(auto - min(hand), 4) if hand else None}
    if "default" in results:
        summary["default_minus_auto"] = round(results["default"]["val_loss_full"] - auto, 4)
    print(" ".join(f"{k}: {v}" for k, v in summary.items()))
    print(json.dumps({"auto": results, **summary, "data": str(a.data), "budget": a.budget, "machine": machine_info()}))
    return 0


def add_auto_args(ap: argparse.ArgumentParser) -> None:
    add_data_arg(ap)
    ap.add_argument("--budget", default="2m", help="train.max_time of every run")
    ap.add_argument("--shapes", default="2x96,3x96,3x128,3x192", help="hand-picked LAYERSxWIDTH shapes")
    ap.add_argument("--no-default", action="store_true", help="leave out the default config's run")


# ======================================================================================== main

COMMANDS = {  # name: (what adds its options, what runs it)
    "speed": (add_speed_args, cmd_speed),
    "peak": (add_peak_args, cmd_peak),
    "data": (add_data_args, cmd_data),
    "memory": (add_memory_args, cmd_memory),
    "share": (add_share_args, cmd_share),
    "playground": (add_playground_args, cmd_playground),
    "startup": (add_startup_args, cmd_startup),
    "tricks": (add_tricks_args, cmd_tricks),
    "auto": (add_auto_args, cmd_auto),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (add_args, cmd) in COMMANDS.items():
        doc = inspect.cleandoc(cmd.__doc__ or "")
        p = sub.add_parser(
            name, help=doc.splitlines()[0], description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        add_args(p)
        p.set_defaults(func=cmd)
    a = ap.parse_args(argv)
    if getattr(a, "repeats", 1) < 1:
        ap.error(f"--repeats must be >= 1, got {a.repeats}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    return a.func(a)


if __name__ == "__main__":
    sys.exit(main())

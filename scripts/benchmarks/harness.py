"""What every benchmark shares: child processes (timed from the outside, with their own encoding
cache), the reference script, TensorBoard scalars, medians, the machine's description, and the
targets kept as data beside the benchmarks (targets.yaml).

Every measurement is a child process, run one after another (never in parallel) with this Python;
children get PYTHONPATH=<repo root> and a temporary MINIGPT_CACHE_DIR, and every run directory is
temporary. Each benchmark prints its table or lines and then one JSON line with every number and
the machine."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BENCH = REPO / "scripts" / "bench.py"  # the command line every benchmark runs under
CHILDREN = HERE / "children"  # the programs a benchmark runs in a fresh interpreter
DEFAULT_REFERENCE = REPO.parent / "shared" / "bench" / "reference_gpt.py"
DEFAULT_DATA = REPO / "data" / "tinyshakespeare.txt"
# overrides for a run measured for itself: no final whole-split evaluation, no sample after
# training, no attention probe, no TensorBoard events
BARE_RUN = ["train.final_eval=false", "log.sample_length=0", "log.attention_probe=", "log.tensorboard=false"]
STEADY_SKIP = 3  # tokens_per_sec logs dropped as warm-up (each covers log.interval steps)


@cache
def targets() -> dict[str, Any]:
    """targets.yaml: each benchmark's pass/fail targets, by benchmark name."""
    import yaml

    return yaml.safe_load((HERE / "targets.yaml").read_text(encoding="utf-8"))


def child(name: str) -> str:
    """The path of a child program in children/, as an argument of run_timed."""
    return str(CHILDREN / name)


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

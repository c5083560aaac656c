"""What every benchmark shares: child processes timed from the outside, the reference script,
TensorBoard scalars, medians, the machine's description, and the targets (targets.yaml).

Every measurement is a child process of this Python, run one after another, never in parallel,
with PYTHONPATH=<repo root>; run directories and encoding caches are temporary."""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
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
BENCH = REPO / "scripts" / "bench.py"
DEFAULT_REFERENCE = REPO.parent / "shared" / "bench" / "reference_gpt.py"
DEFAULT_DATA = REPO / "data" / "tinyshakespeare.txt"
# a run measured for itself: no final whole-split evaluation, sample, attention probe or TensorBoard
BARE_RUN = ["train.final_eval=false", "log.sample_length=0", "log.attention_probe=", "log.tensorboard=false"]
STEADY_SKIP = 3  # tokens_per_sec logs dropped as warm-up (each covers log.interval steps)


@cache
def targets() -> dict[str, Any]:
    """targets.yaml: each benchmark's pass/fail targets, by benchmark name."""
    import yaml

    return yaml.safe_load((HERE / "targets.yaml").read_text(encoding="utf-8"))


def child(name: str) -> str:
    """The path of a program in children/, run in a fresh interpreter."""
    return str(HERE / "children" / name)


class BenchError(Exception):
    """A child process failed or printed something unexpected; bench.py prints it and exits 1."""


@dataclass
class Proc:
    """A finished child process: its output and its wall time measured from the outside."""

    stdout: str
    stderr: str
    wall_s: float


def progress(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def child_env(cache_dir: Path | None = None, *, drop: Iterable[str] = (), **extra: str) -> dict[str, str]:
    """This environment less `drop`, the repo first on PYTHONPATH, its own encoding cache where
    `cache_dir` is given, then `extra` on top."""
    env = {k: v for k, v in os.environ.items() if k not in set(drop)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    if cache_dir is not None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        env["MINIGPT_CACHE_DIR"] = str(cache_dir)
    return env | extra


def two_trees(before: str, tmp: Path, **extra: str) -> dict[str, dict[str, str]]:
    """The environments of two trees of minigpt, each alone on PYTHONPATH: "before", the package at
    git ref `before` unpacked under `tmp`, and "after", this working tree. Run their children with
    cwd=tmp: the current directory comes first on sys.path, and the repo's would win."""
    archive = subprocess.run(["git", "archive", before, "minigpt"], cwd=REPO, capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tmp / "before", filter="data")
    drop = [k for k in os.environ if k.startswith("_MINIGPT")]
    code = {"before": tmp / "before", "after": REPO}
    return {name: child_env(tmp / "cache", drop=drop, PYTHONPATH=str(path), **extra) for name, path in code.items()}


def run_timed(args: list[str], env: dict[str, str], *, cwd: Path = REPO) -> Proc:
    """`python ARGS` in `cwd`, timed; a BenchError with its stderr's tail if it fails."""
    cmd = [sys.executable, *args]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, encoding="utf-8", errors="replace")
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise BenchError(f"{' '.join(cmd)} exited with {done.returncode}:\n{tail}")
    return Proc(done.stdout, done.stderr, wall)


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
    config_arg, device_arg = [str(config)] if config else [], ["--device", device] if device else []
    return minigpt("train", *config_arg, "--data", str(data), "--out", str(out), *device_arg, *overrides)


def run_reference(
    ref: Path, data: Path, env: dict[str, str], *args: str, what: str = "reference"
) -> tuple[Proc, dict[str, Any]]:
    """The reference script on the CPU with ARGS: the process and the JSON line it printed."""
    proc = run_timed([str(ref), "--data", str(data), "--device", "cpu", *args], env)
    return proc, last_json(proc, what)


def missing_file(*checks: tuple[str, Path]) -> bool:
    """Whether a (what, path) is not a file; the first such is printed as an error."""
    for what, path in checks:
        if not path.is_file():
            print(f"error: {what} not found: {path}", file=sys.stderr)
            return True
    return False


@contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A temporary folder for the children's runs and caches."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp)


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


def machine_info() -> dict[str, Any]:
    """What the figures were measured on, for every JSON line."""
    import torch

    from minigpt.runtime.cores import cpu_model_and_flags

    cpu, flags = cpu_model_and_flags()  # the host a target run's results.json names, read the same way
    return {
        "cpu": cpu or platform.machine(),
        "cpu_flags": list(flags),
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

"""What the benchmark scripts share: paths, child processes and their environment, the reference
runner, the JSON line a child prints, TensorBoard scalars and medians. No benchmark runs here.

Imports go one way: bench.py imports bench_big.py and bench_budget.py; they and the other scripts
import this module, and this module imports none of them. A script that imports it puts its own
folder on sys.path first (as running `python scripts/NAME.py` does anyway):

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_common import REPO, child_env, run_timed  # noqa: E402
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCE = REPO.parent / "shared" / "bench" / "reference_gpt.py"
DEFAULT_DATA = REPO / "data" / "tinyshakespeare.txt"
# overrides for a run measured for itself: no final whole-split evaluation, no sample after
# training, no attention probe, no TensorBoard events
BARE_RUN = ["train.final_eval=false", "log.sample_length=0", "log.attention_probe=", "log.tensorboard=false"]
STEADY_SKIP = 3  # tokens_per_sec logs dropped as warm-up (each covers log.interval steps)


class BenchError(Exception):
    """A child process failed or printed something unexpected."""


@dataclass
class Proc:
    """A finished child process: its output and its wall time measured from the outside."""

    stdout: str
    stderr: str
    wall_s: float
    returncode: int = 0


# ---------------------------------------------------------------------------------------- processes


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


def minigpt_train(data: Path, out: Path, *overrides: str, config: Path | None = None,
                  device: str | None = "cpu") -> list[str]:  # fmt: skip
    """`minigpt train [CONFIG] --data DATA --out OUT [--device DEVICE] OVERRIDES...` (device None: minigpt's own)."""
    return minigpt("train", *([str(config)] if config else []), "--data", str(data), "--out", str(out),
                   *(["--device", device] if device else []), *overrides)  # fmt: skip


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


def add_pair_args(ap: argparse.ArgumentParser, repeats: str = "") -> None:
    """--reference, --data and --repeats: what every comparison with the reference takes."""
    repeats = repeats or "repeat each measurement N times; report medians"
    ap.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE, help="reference_gpt.py to compare with")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="text file to train on")
    ap.add_argument("--repeats", type=int, default=1, help=repeats)


def pair_args_problem(a: argparse.Namespace) -> str | None:
    """A one-line problem with the arguments of add_pair_args, or None."""
    if problem := missing_file(("reference script", a.reference), ("data file", a.data)):
        return problem
    if a.repeats < 1:
        return f"--repeats must be >= 1, got {a.repeats}"
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


# ---------------------------------------------------------------------------------------- numbers


def read_scalars(run_dir: Path, tag: str) -> list[Any]:
    """A run's TensorBoard scalar events of `tag` (each with .step, .wall_time and .value), in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    if tag not in acc.Tags().get("scalars", []):
        raise BenchError(f"no {tag} scalars in {run_dir}")
    return sorted(acc.Scalars(tag), key=lambda e: e.step)


def read_tokens_per_sec(run_dir: Path) -> list[float]:
    """The `tokens_per_sec` TensorBoard scalars of a run, in step order."""
    return [e.value for e in read_scalars(run_dir, "tokens_per_sec")]


def steady_state(values: list[float]) -> list[float]:
    """Drop the first few (warm-up) values; keep at least half of a short list."""
    skip = STEADY_SKIP if len(values) > 2 * STEADY_SKIP else len(values) // 2
    return values[skip:]


def medians(runs: list[dict[str, Any]], keys: Iterable[str] | None = None) -> dict[str, float]:
    """Each key's median over the repeats (by default every key of the first run)."""
    return {k: statistics.median(r[k] for r in runs) for k in (runs[0] if keys is None else keys)}


def yes_no(ok: bool) -> str:
    return "yes" if ok else "NO"

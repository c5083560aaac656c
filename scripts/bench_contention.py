#!/usr/bin/env python3
"""Two minigpt processes on one machine: do they share it, or collapse?

For each OpenMP wait policy (minigpt's default PASSIVE, and ACTIVE, what libgomp does when nothing
is set), it measures:

1. one default-config training alone (tokens/s, the median `minigpt train` reports);
2. two such trainings started together, each one's tokens/s;
3. `minigpt sample` alone (characters/s over the generation, from its own timing line);
4. the same sample while a training runs beside it.

Run it from the repository root with nothing else running:

    uv run python scripts/bench_contention.py --data data/tinyshakespeare.txt
    uv run python scripts/bench_contention.py --policies PASSIVE --repeats 3

It prints a table and one JSON line. Targets (issue 12): paired trainings each reach >= 40% of the
solo tokens/s; a sampler beside a training keeps >= 50% of its solo characters/s; solo figures
lose nothing beyond noise against ACTIVE.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import DEFAULT_DATA, REPO, child_env, medians, minigpt_train  # noqa: E402

TRAIN_STEPS = 480


def env_for(variant: str, cache: Path) -> dict[str, str]:
    """PASSIVE / ACTIVE: OMP_WAIT_POLICY; SPIN=N: GOMP_SPINCOUNT=N (how long idle threads spin
    before sleeping; libgomp's own default is 300000); MINIGPT: what minigpt sets by itself."""
    env = child_env(cache, drop=("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"))
    if variant.startswith("SPIN="):
        env["GOMP_SPINCOUNT"] = variant[5:]
    elif variant != "MINIGPT":
        env["OMP_WAIT_POLICY"] = variant
    return env


def train_cmd(data: Path, out: Path, steps: int) -> list[str]:
    return [sys.executable, *minigpt_train(data, out, f"train.max_steps={steps}", "train.final_eval=false",
                                           "log.progress=off")]  # fmt: skip


def tokens_per_s(stderr: str) -> float:
    found = re.search(r"done: \d+ steps in [0-9.]+s, ([0-9,]+) tokens/s", stderr)
    if not found:
        raise SystemExit(f"no done line in:\n{stderr[-2000:]}")
    return float(found.group(1).replace(",", ""))


def start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> tuple[str, str]:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{proc.args} failed:\n{err[-2000:]}")
    return out, err


SAMPLER = r"""
import sys, time
from minigpt.runtime.cores import START_LOAD  # as `minigpt sample` does: before torch loads
import torch
from pathlib import Path
from minigpt.infer.loading import cast_for_sampling, load_model
from minigpt.runtime.device import configure_threads
from minigpt.infer.decode import generate

configure_threads(int(sys.argv[3]) if len(sys.argv) > 3 else 0, START_LOAD.others())
loaded = load_model(Path(sys.argv[1]), torch.device("cpu"))
cast_for_sampling(loaded, "auto", "cpu")
gen = torch.Generator().manual_seed(1)
generate(loaded.model, [0], 100, 0.8, generator=gen)  # warm-up
t0 = time.perf_counter()
generate(loaded.model, [0], int(sys.argv[2]), 0.8, generator=gen)
print(int(sys.argv[2]) / (time.perf_counter() - t0))
"""


def sample_rate(run: Path, env: dict[str, str], chars: int) -> float:
    """Characters/s of generation alone (timed inside the process: start-up does not count)."""
    out, _ = finish(start([sys.executable, "-c", SAMPLER, str(run), str(chars)], env))
    return float(out.strip().splitlines()[-1])


def measure(policy: str, data: Path, tmp: Path, steps: int, chars: int) -> dict[str, float]:
    env = env_for(policy, tmp / "cache")
    solo = tokens_per_s(finish(start(train_cmd(data, tmp / f"solo-{policy}", steps), env))[1])
    a = start(train_cmd(data, tmp / f"pair-a-{policy}", steps), env)
    b = start(train_cmd(data, tmp / f"pair-b-{policy}", steps), env)
    pair = [tokens_per_s(finish(a)[1]), tokens_per_s(finish(b)[1])]
    run = tmp / f"solo-{policy}"
    sample_solo = sample_rate(run, env, chars)
    beside = start(train_cmd(data, tmp / f"beside-{policy}", steps * 4), env)
    time.sleep(10)  # let the training get past its start-up
    sample_busy = sample_rate(run, env, chars)
    beside.kill()
    beside.communicate()
    return {"train_solo": solo, "train_pair_a": pair[0], "train_pair_b": pair[1],
            "pair_fraction": min(pair) / solo, "sample_solo": sample_solo, "sample_beside_training": sample_busy,
            "sample_fraction": sample_busy / sample_solo}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--policies", nargs="+", default=["MINIGPT", "SPIN=300000", "PASSIVE"])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--steps", type=int, default=TRAIN_STEPS)
    ap.add_argument("--chars", type=int, default=4000)
    a = ap.parse_args(argv)
    results: dict[str, list[dict[str, float]]] = {p: [] for p in a.policies}
    with tempfile.TemporaryDirectory() as tmp_name:
        for rep in range(a.repeats):
            for policy in a.policies:
                print(f"[{rep + 1}/{a.repeats}] OMP_WAIT_POLICY={policy} ...", file=sys.stderr, flush=True)
                results[policy].append(measure(policy, a.data, Path(tmp_name) / f"r{rep}", a.steps, a.chars))
    med = {p: medians(runs) for p, runs in results.items()}
    keys = list(next(iter(med.values())))
    print(f"{'metric (medians)':<24}" + "".join(f"{p:>12}" for p in med))
    for k in keys:
        print(f"{k:<24}" + "".join(f"{m[k]:>12,.2f}" for m in med.values()))
    print(json.dumps({"repeats": a.repeats, "steps": a.steps, "chars": a.chars, "runs": results, "medians": med}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

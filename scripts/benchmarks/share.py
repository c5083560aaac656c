"""share: two minigpt processes on one machine, with the thread counts minigpt chooses by itself
(the timed sampler is children/sampler.py)."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import (
    REPO,
    BenchError,
    add_data_arg,
    add_repeats_arg,
    child,
    child_env,
    machine_info,
    medians,
    minigpt_train,
    progress,
    scratch,
    targets,
    yes_no,
)


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
        out, _ = finish(start_child([child("sampler.py"), str(tmp / "solo"), str(chars)], env))
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


def run(a: argparse.Namespace) -> int:
    """Two minigpt processes on one machine: do they share it, or collapse?

    With the thread counts minigpt chooses by itself: one default-config training alone (tokens/s
    from its "done:" line); two such trainings started together, each one's tokens/s; the trained
    default model decoding --chars characters alone (characters/s of generation, timed in the
    process); and the same beside a training. The fractions' targets (issue 12) are in targets.yaml."""
    runs = []
    with scratch("minigpt-share-") as tmp:
        for rep in range(a.repeats):
            progress(f"[{rep + 1}/{a.repeats}] a training alone, two together, a sampler alone and beside one")
            runs.append(share_once(a.data, tmp / f"r{rep}", a.steps, a.chars))
    med = medians(runs)
    for k, v in med.items():
        target = targets()["share"].get(k)
        print(f"{k:<24}{v:>12,.2f}" + ("" if target is None else f"   target >= {target}: {yes_no(v >= target)}"))
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


def add_args(ap: argparse.ArgumentParser) -> None:
    add_data_arg(ap)
    add_repeats_arg(ap)
    ap.add_argument("--steps", type=int, default=480, help="steps of each training (the default config's)")
    ap.add_argument("--chars", type=int, default=4000, help="characters the sampler generates")

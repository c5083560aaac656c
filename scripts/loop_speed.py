"""Old against new: the same `minigpt train` run on two source trees (a git ref, default main, and
this working tree), alternating, each run's median tokens/s (results.json) and wall time side by
side. For the training loop's per-step cost (issue 47's callbacks); run it on a quiet machine.

    uv run python scripts/loop_speed.py --runs 5
    uv run python scripts/loop_speed.py --old main --runs 7 -- train.max_steps=400 model.n_layer=4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# a small model, so that Python's share of a step (what the loop adds) shows
RUN = ["model.n_layer=2", "model.n_head=2", "model.n_embd=64", "model.block_size=64", "train.batch_size=16"]
RUN += ["train.max_steps=300", "train.eval_interval=100", "log.interval=10", "train.device=cpu"]
RUN += ["train.dtype=float32", "train.compile=false", "log.progress=off"]


def train(tree: Path, data: Path, out: Path, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "minigpt", "train", "--data", str(data), "--out", str(out), *RUN, *extra]
    subprocess.run(cmd, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, check=True, capture_output=True)
    return json.loads((out / "results.json").read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default="main", help="git ref of the old tree")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--data", type=Path, default=ROOT / "data" / "tinyshakespeare.txt")
    ap.add_argument("extra", nargs="*", help="KEY=VALUE overrides for both")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "old"
        old.mkdir()
        archive = subprocess.run(["git", "archive", a.old, "minigpt"], cwd=ROOT, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        trees = {"old": old, "new": ROOT}
        seen: dict[str, list[tuple[float, float]]] = {"old": [], "new": []}
        for i in range(a.runs):
            for name in ("old", "new") if i % 2 == 0 else ("new", "old"):
                r = train(trees[name], a.data.resolve(), Path(tmp) / f"{name}{i}", a.extra)
                seen[name].append((r["tokens_per_s"], r["wall_s"]))
                print(f"run {i + 1} {name}: {r['tokens_per_s']:,.0f} tokens/s, {r['wall_s']:.1f} s", flush=True)
    med = {k: (statistics.median(t for t, _ in v), statistics.median(w for _, w in v)) for k, v in seen.items()}
    for k, (tps, wall) in med.items():
        print(f"{k} ({a.old if k == 'old' else 'working tree'}): median {tps:,.0f} tokens/s, {wall:.1f} s")
    print(f"new / old tokens/s: {med['new'][0] / med['old'][0]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""How often does `minigpt heads`' ablation estimate miss a head that matters? For each run: every
head's estimate (one forward and backward pass) and its exact mean ablation, the Spearman rank
correlation of the two, and which of the exact top three heads the estimate's top three missed.

    uv run python scripts/heads_estimate_check.py runs/default runs/other ...

Each run is measured on its own validation split. Prints a table and one JSON line per run.
The figures in docs/heads.md come from this script.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from minigpt.infer.evaluate import eval_ids_for
from minigpt.infer.loading import load_model
from minigpt.inspect.heads import ablate_heads


def ranks(values: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(values)).astype(float)


def check(run: Path) -> dict:
    loaded = load_model(run, torch.device("cpu"))
    model = loaded.model.float()
    ids, table, _ = eval_ids_for(loaded, None)
    estimated, _, _ = ablate_heads(model, ids, table, "mean", exact=0)
    exact, _, _ = ablate_heads(model, ids, table, "mean", exact=None)
    est = np.array([[h["loss_delta"] for h in row] for row in estimated]).ravel()
    ext = np.array([[h["loss_delta"] for h in row] for row in exact]).ravel()
    nh = len(estimated[0])
    name = [f"L{i // nh}H{i % nh}" for i in range(len(est))]
    top_est, top_ext = list(np.argsort(-est)[:3]), list(np.argsort(-ext)[:3])
    return {
        "run": str(run),
        "heads": len(est),
        "spearman": float(np.corrcoef(ranks(est), ranks(ext))[0, 1]),
        "top3_estimate": [name[i] for i in top_est],
        "top3_exact": [name[i] for i in top_ext],
        "missed": [name[i] for i in top_ext if i not in top_est],
        "largest_exact": float(ext.max()),
        "its_estimate": float(est[int(np.argmax(ext))]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args()
    print(f"{'run':<32} {'heads':>5} {'spearman':>8}  {'missed of the exact top 3':<26} largest exact (its estimate)")
    for run in args.runs:
        r = check(run)
        missed = ", ".join(r["missed"]) or "none"
        print(
            f"{r['run']:<32} {r['heads']:>5} {r['spearman']:>8.3f}  {missed:<26} "
            f"{r['largest_exact']:+.3f} ({r['its_estimate']:+.3f})"
        )
        print(json.dumps(r))


if __name__ == "__main__":
    main()

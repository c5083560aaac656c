"""loop: the training loop's speed, this working tree against a git ref."""

from __future__ import annotations

import argparse
import json

from benchmarks.harness import (
    add_data_arg,
    add_repeats_arg,
    machine_info,
    medians,
    minigpt_train,
    progress,
    run_timed,
    scratch,
    two_trees,
)

# a small model, so that Python's share of a step (what the loop adds) shows
RUN = ["model.n_layer=2", "model.n_head=2", "model.n_embd=64", "model.block_size=64", "train.batch_size=16"]
RUN += ["train.max_steps=300", "train.eval_interval=100", "log.interval=10", "train.dtype=float32"]
RUN += ["train.compile=false", "log.progress=off"]


def run(a: argparse.Namespace) -> int:
    """The training loop's speed, this working tree against a git ref.

    The same small `minigpt train` (2x64, 300 steps, float32, eager; KEY=VALUE arguments change
    both) on the tree of --before and on this one, alternating; each run's tokens/s and wall time
    from its results.json, their medians and after/before. Run it on a quiet machine."""
    seen: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with scratch("minigpt-loop-") as tmp:
        trees = two_trees(a.before, tmp)
        for i in range(a.repeats):
            for name in list(trees) if i % 2 == 0 else list(reversed(trees)):
                out = tmp / f"{name}{i}"
                run_timed(minigpt_train(a.data.resolve(), out, *RUN, *a.overrides), trees[name], cwd=tmp)
                r = json.loads((out / "results.json").read_text())
                seen[name].append({"tokens_per_s": r["tokens_per_s"], "wall_s": r["wall_s"]})
                progress(f"run {i + 1} {name}: {r['tokens_per_s']:,.0f} tokens/s, {r['wall_s']:.1f} s")
    med = {name: medians(runs) for name, runs in seen.items()}
    for name, m in med.items():
        print(f"{name} ({a.before if name == 'before' else 'working tree'}): ", end="")
        print(f"median {m['tokens_per_s']:,.0f} tokens/s, {m['wall_s']:.1f} s")
    ratio = med["after"]["tokens_per_s"] / med["before"]["tokens_per_s"]
    print(f"after / before tokens/s: {ratio:.3f}")
    print(json.dumps({"before_ref": a.before, "runs": seen, "medians": med, "ratio": ratio, "machine": machine_info()}))
    return 0


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--before", default="main", help="git ref of the code to compare against (default main)")
    add_data_arg(ap)
    add_repeats_arg(ap, default=5)
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="overrides for both runs")

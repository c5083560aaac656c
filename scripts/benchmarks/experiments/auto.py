"""auto: --auto against hand-picked shapes and the default config on one text and budget (issue
38; its conclusions are in docs/auto.md and docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.harness import add_data_arg, child_env, machine_info, minigpt_train, progress, run_timed, scratch
from benchmarks.speed_budget import BUDGET_RECIPE

HEADS = {64: 4, 96: 4, 128: 4, 192: 6, 256: 8, 384: 6}  # heads for a width (32-wide heads or so)


def run(a: argparse.Namespace) -> int:
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


def add_args(ap: argparse.ArgumentParser) -> None:
    add_data_arg(ap)
    ap.add_argument("--budget", default="2m", help="train.max_time of every run")
    ap.add_argument("--shapes", default="2x96,3x96,3x128,3x192", help="hand-picked LAYERSxWIDTH shapes")
    ap.add_argument("--no-default", action="store_true", help="leave out the default config's run")


# ======================================================================================== main

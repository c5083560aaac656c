#!/usr/bin/env python3
"""Do the model options learn more per step, and what does a step of each cost?

The four-minute recipe (configs/cpu_4min.yaml) is trained a fixed number of steps (the step-based
schedule, so every run sees the same batches and the same learning-rate curve) with each option
on, on several seeds, and each run is scored on the whole validation split. A fixed step count
measures learning per step on any host; the ms per step say what a time budget would make of it.

    uv run python scripts/bench_options.py --steps 1000 --seeds 1337 1338
    uv run python scripts/bench_options.py --only baseline qk_norm --steps 300 --seeds 1

Prints, per option: the median whole-split loss, its change against the baseline (negative is
better), the spread over seeds, the median ms per step and its ratio to the baseline's. One JSON
line at the end holds every run. Run it alone: anything else on the two cores distorts the times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import DEFAULT_DATA, REPO, child_env, minigpt_train, missing_file, progress, run_timed, scratch  # noqa: E402

CONFIG = REPO / "configs" / "cpu_4min.yaml"
# each option as the overrides that turn it on; the baseline is the recipe as it is
OPTIONS = {
    "baseline": [],
    "qk_norm": ["model.qk_norm=true"],
    "relu2": ["model.mlp_act=relu2"],
    "zero_init_proj": ["model.zero_init_proj=true"],
    "value_embeds": ["model.value_embeds=true"],
    "logit_softcap": ["model.logit_softcap=15"],
}
OPTIONS["all"] = [o for name, ovs in OPTIONS.items() if name != "baseline" for o in ovs]


def fixed_steps(steps: int, seed: int) -> list[str]:
    return [
        f"train.max_steps={steps}", "optim.schedule_by=steps", "train.max_time=null", f"train.seed={seed}",
        f"train.eval_interval={steps}", "train.eval_steps=2", "train.final_eval_tokens=0",
        "log.tensorboard=false", "log.progress=off", "log.sample_length=0",
    ]  # fmt: skip


def one_run(name: str, steps: int, seed: int, data: Path, tmp: Path, env: dict[str, str]) -> dict:
    run_dir = tmp / f"{name}-{seed}"
    progress(f"{name}, seed {seed}: {steps} steps")
    run_timed(minigpt_train(data, run_dir, *OPTIONS[name], *fixed_steps(steps, seed), config=CONFIG), env)
    res = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    ms = 1000 * res["wall_s"] / res["steps"]
    return {"option": name, "seed": seed, "val_loss": res["val_loss_full"], "ms_per_step": ms}


def summarize(runs: list[dict]) -> dict[str, dict[str, float]]:
    """Per option: median loss and ms per step, the loss's spread over seeds, and both against the baseline."""
    by: dict[str, list[dict]] = {}
    for r in runs:
        by.setdefault(r["option"], []).append(r)
    out = {}
    for name, rs in by.items():
        losses = [r["val_loss"] for r in rs]
        out[name] = {
            "val_loss": statistics.median(losses), "spread": max(losses) - min(losses),
            "ms_per_step": statistics.median(r["ms_per_step"] for r in rs), "seeds": len(rs),
        }  # fmt: skip
    if base := out.get("baseline"):
        for s in out.values():
            s["loss_change"] = s["val_loss"] - base["val_loss"]
            s["step_ratio"] = s["ms_per_step"] / base["ms_per_step"]
    return out


def table(summary: dict[str, dict[str, float]], steps: int) -> str:
    lines = [f"| option ({steps} steps) | whole-split loss | change | seed spread | ms / step | step cost |",
             "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for name, s in summary.items():
        change = f"{s['loss_change']:+.4f}" if "loss_change" in s else ""
        ratio = f"{s['step_ratio']:.2f}x" if "step_ratio" in s else ""
        cells = [name, f"{s['val_loss']:.4f}", change, f"{s['spread']:.4f}", f"{s['ms_per_step']:.1f}", ratio]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1337, 1338])
    ap.add_argument("--only", nargs="+", choices=list(OPTIONS), default=list(OPTIONS))
    a = ap.parse_args(argv)
    if problem := missing_file(("--data", a.data)):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    runs = []
    with scratch("minigpt-options-") as tmp:
        env = child_env(tmp / "cache")
        for seed in a.seeds:  # seeds outermost: a drift in the host's speed touches every option alike
            runs += [one_run(name, a.steps, seed, a.data, tmp, env) for name in a.only]
    summary = summarize(runs)
    print(table(summary, a.steps))
    print(json.dumps({"steps": a.steps, "seeds": a.seeds, "summary": summary, "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

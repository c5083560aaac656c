"""speed, its budget part: the four-minute recipe against the reference in the same 240 s, both
loss curves against wall time since launch, read at 30, 60, 120 and 240 s."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    REPO,
    medians,
    minigpt_train,
    progress,
    read_scalars,
    run_reference,
    run_timed,
    yes_no,
)

BUDGET_RECIPE = REPO / "configs" / "cpu_4min.yaml"
BUDGET_S = 240.0
CHECKPOINTS_S = (30, 60, 120, 240)
CALIBRATION_STEPS = 500


def loss_at(curve: list[list[float]], seconds: float) -> float | None:
    """The latest evaluation at or before `seconds` of a [[step, wall_s, loss], ...] curve."""
    before = [loss for _, t, loss in curve if t <= seconds]
    return before[-1] if before else None


def reference_steps(ref: Path, data: Path, env: dict[str, str], budget: float) -> tuple[int, dict[str, Any]]:
    """How many reference steps fit in `budget` seconds of whole-process time, from a calibration run."""
    progress(f"budget: reference calibration ({CALIBRATION_STEPS} steps)")
    _, out = run_reference(ref, data, env, "--steps", str(CALIBRATION_STEPS))
    startup = out["curve"][0][1]  # process start to the end of the step-0 evaluation
    per_step = (out["wall_s"] - startup) / CALIBRATION_STEPS  # evaluations every 250 steps included
    return int((budget - startup) / per_step), out


def budget_once(
    ref: Path, data: Path, env: dict[str, str], tmp: Path, rep: int, seed: int, budget: float = BUDGET_S
) -> dict[str, Any]:
    """The four-minute recipe (configs/cpu_4min.yaml) against the reference's recipe run for as many
    steps as fit in the same 240 s: both loss curves against wall time since launch. minigpt's points
    are its run's fixed-batch estimates, its last the whole split; the reference's are whole-split."""
    run_dir = tmp / f"budget-{rep}"
    # a shorter budget (a smoke test) keeps the recipe's 8 s for start-up, final evaluation and exit
    shorter = [] if budget == BUDGET_S else [f"train.max_time={budget - 8:g}s"]
    progress(f"budget [{rep}]: minigpt train configs/cpu_4min.yaml (train.seed={seed} {' '.join(shorter)})")
    launched = time.time()
    train = run_timed(minigpt_train(data, run_dir, f"train.seed={seed}", *shorter, config=BUDGET_RECIPE), env)
    results = json.loads((run_dir / "results.json").read_text())
    estimates = read_scalars(run_dir, "val/loss_est")
    curve = [[e.step, round(e.wall_time - launched, 2), round(e.value, 4)] for e in estimates]
    curve.append([results["steps"], round(train.wall_s, 2), round(results["val_loss_full"], 4)])
    steps, calibration = reference_steps(ref, data, env, budget)
    progress(f"budget [{rep}]: reference, {steps} steps (about {budget:.0f} s)")
    ref_proc, ref_out = run_reference(ref, data, env, "--steps", str(steps), "--seed", str(seed))
    # the reference times its curve from after its imports; shift it to time since launch, as minigpt's
    offset = ref_proc.wall_s - ref_out["wall_s"]
    ref_curve = [[step, round(t + offset, 2), loss] for step, t, loss in ref_out["curve"]]
    return {
        "minigpt_wall_s": train.wall_s,
        "minigpt_steps": results["steps"],
        "minigpt_val_loss": results["val_loss_full"],
        "minigpt_tokens_per_s": results["tokens_per_s"],
        "minigpt_curve": curve,
        "reference_wall_s": ref_proc.wall_s,
        "reference_steps": steps,
        "reference_val_loss": ref_out["val_loss"],
        "reference_curve": ref_curve,
        "reference_calibration_ms_per_step": calibration["ms_per_step_median"],
    }


def summarize_budget(runs: list[dict[str, Any]], budget: float = BUDGET_S) -> dict[str, Any]:
    """Medians over the repeats, and each curve read at 30, 60, 120 and 240 s."""
    med = medians(runs, [f"{who}_{k}" for who in ("minigpt", "reference") for k in ("wall_s", "val_loss", "steps")])
    at: dict[str, dict[str, float | None]] = {}
    for s in [c for c in CHECKPOINTS_S if c < budget] + [int(budget)]:
        row = {}
        for who in ("minigpt", "reference"):
            # the 240 s point is the final whole-split score, wherever the run ended near the budget
            vals = [r[f"{who}_val_loss"] if s == int(budget) else loss_at(r[f"{who}_curve"], s) for r in runs]
            row[who] = statistics.median(vals) if all(v is not None for v in vals) else None
        at[str(s)] = row
    return {
        "repeats": len(runs),
        **med,
        "minigpt_val_losses": [r["minigpt_val_loss"] for r in runs],
        "gap": med["reference_val_loss"] - med["minigpt_val_loss"],
        "at_seconds": at,
        "runs": runs,
    }


def budget_table(summary: dict[str, Any]) -> str:
    """The curves at 30, 60, 120 and 240 s as the Markdown table docs/lab/benchmarks.md shows."""
    lines = ["| wall time | minigpt | reference | minigpt at or below? |", "| --- | --- | --- | --- |"]
    for s, row in summary["at_seconds"].items():
        m, r = row["minigpt"], row["reference"]
        ok = "-" if m is None or r is None else yes_no(m <= r)
        fmt = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
        lines.append(f"| {s} s | {fmt(m)} | {fmt(r)} | {ok} |")
    lines.append(
        f"\nwhole process: minigpt {summary['minigpt_wall_s']:.1f} s ({summary['minigpt_steps']:.0f} steps), "
        f"reference {summary['reference_wall_s']:.1f} s ({summary['reference_steps']:.0f} steps); "
        f"final whole-split losses {summary['minigpt_val_losses']}"
    )
    return "\n".join(lines)


def plot_budget(runs: list[dict[str, Any]], path: Path) -> None:
    """Both curves of every repeat, loss against wall time, as a PNG (docs/lab/benchmarks.md shows one)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    names = {
        "minigpt": "minigpt, configs/cpu_4min.yaml (last point: whole split)",
        "reference": "reference recipe (whole split at every point)",
    }
    for i, r in enumerate(runs):
        for who, colour in (("minigpt", "tab:blue"), ("reference", "tab:orange")):
            curve = [(t, loss) for _, t, loss in r[f"{who}_curve"] if loss < 3.0]
            label = names[who] if i == 0 else None
            ax.plot(*zip(*curve), color=colour, alpha=0.9 if i == 0 else 0.5, marker=".", label=label)
    for s in CHECKPOINTS_S:
        ax.axvline(s, color="grey", lw=0.6, ls=":")
    ax.axhline(1.4697, color="tab:green", lw=0.8, ls="--", label="GPU recipe, published (1.4697)")
    ax.set(
        xlabel="wall time since the process started (s)",
        ylabel="validation loss (nats)",
        title="Loss against wall time, 2 CPU cores, tiny Shakespeare",
        ylim=(1.4, 2.6),
        xlim=(0, 250),
    )
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


# ---------------------------------------------------------------------------------------- speed: big

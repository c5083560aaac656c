"""Induction heads forming over training: every checkpoint of a run scored in step order on the same
fixed validation sample, as the trainer scores its model at each evaluation (docs/inside.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from minigpt.checkpoint import BEST, LAST, SNAPSHOT, list_snapshots, load_checkpoint
from minigpt.errors import UserError
from minigpt.infer.evaluate import icl_score, loss_by_position
from minigpt.infer.windows import spread_starts
from minigpt.inspect.heads import ROLE_MIN, score_text
from minigpt.model import GPT

ICL_TOKENS = 16_384  # the fixed, evenly spread validation sample the ICL score reads: cheap at every evaluation
NO_SNAPSHOTS = "{run} has no snapshots to follow over training; train with train.keep_every=N"


@dataclass
class HeadPoint:
    """One model's scores: the ICL score, the sample's mean loss, and every head's induction and
    previous-token scores (n_layer lists of n_head)."""

    icl_score: float
    sample_loss: float
    induction: list[list[float]]
    previous: list[list[float]]
    induction_uniform: float = 0.0  # what a head spreading its weight evenly scores on the same text (a perfect one: 1)
    step: int = 0
    files: list[str] = field(default_factory=list)  # the checkpoints of this step
    val_loss: float | None = None  # the checkpoint's own estimate (train.eval_steps batches), when evaluated

    def strongest(self) -> tuple[int, int, float] | None:
        """(layer, head, score) of the highest induction score."""
        flat = [(s, la, h) for la, row in enumerate(self.induction) for h, s in enumerate(row)]
        if not flat:
            return None
        score, layer, head = max(flat)
        return layer, head, score

    def to_dict(self) -> dict:
        best = self.strongest()
        heads = [
            {"layer": la, "head": h, "induction": s, "previous": self.previous[la][h]}
            for la, row in enumerate(self.induction)
            for h, s in enumerate(row)
        ]
        record = {"step": self.step, "files": self.files, "val_loss": self.val_loss, "sample_loss": self.sample_loss}
        induction = dict(zip(("layer", "head", "score"), best)) if best else None
        return {**record, "icl_score": self.icl_score, "induction": induction, "heads": heads}


def score_point(model: GPT, ids: np.ndarray, table: np.ndarray | None, max_tokens: int = ICL_TOKENS) -> HeadPoint:
    """The ICL score over a spread sample of `max_tokens` predictions of `ids` and the heads' pattern
    scores on the same text (`score_text`); the model's mode is left as it was."""
    by_position = loss_by_position(model, ids, table, max_tokens)
    icl, _, _ = icl_score(by_position)
    text = score_text(model, ids, table)
    induction, previous = text.scores["induction"], text.scores["previous"]
    return HeadPoint(icl, float(by_position.mean()), induction, previous, induction_uniform=text.uniform["induction"])


def follow_run(target: Path, device: torch.device, max_tokens: int = ICL_TOKENS) -> tuple[list[HeadPoint], str]:
    """Every checkpoint of the run scored, one point per step in step order, and a line saying what was measured."""
    from minigpt.infer.evaluate import eval_ids_for
    from minigpt.infer.loading import load_model

    if not target.exists():
        raise UserError(f"{target} does not exist (give a run directory)")
    run_dir = target if target.is_dir() else target.parent
    snapshots = list_snapshots(run_dir)
    others = [run_dir / name for name in (BEST, LAST) if (run_dir / name).is_file()]
    if not snapshots or len(snapshots) + len(others) < 2:
        raise UserError(NO_SNAPSHOTS.format(run=run_dir))
    by_step: dict[int, list[Path]] = {}
    for path in snapshots + others:
        named = SNAPSHOT.match(path.name)  # a snapshot's name holds its step: no need to read it twice
        step = int(named.group(1)) if named else int(load_checkpoint(path).get("step") or 0)
        by_step.setdefault(step, []).append(path)
    if len(by_step) < 2:
        raise UserError(NO_SNAPSHOTS.format(run=run_dir))
    points: list[HeadPoint] = []
    ids = table = None
    what = ""
    for step in sorted(by_step):
        loaded = load_model(by_step[step][0], device)
        if ids is None:
            ids, table, what = eval_ids_for(loaded, None)
        point = score_point(loaded.model.float(), ids, table, max_tokens)
        point.step, point.files = step, [p.name for p in by_step[step]]
        val = loaded.checkpoint.val_loss
        point.val_loss = float(val) if isinstance(val, float) else None
        points.append(point)
    block = loaded.config.model.block_size
    _, late, early = icl_score(np.zeros(block))
    starts = spread_starts(len(ids) - 1, block, max_tokens)
    sample = f"{len(starts)} spread windows of {block}" if starts else f"every whole window of {block}"
    about = (
        f"{run_dir}: ICL score = loss at context position {late + 1} minus position {early + 1}, over {sample} "
        f"in the {what}"
    )
    return points, about


def phase_change(points: list[HeadPoint]) -> tuple[int, int, float] | None:
    """(step before, step after, rise) where the strongest induction score rises fastest per step between
    consecutive checkpoints; None until some head has `formed` (else every small wobble would be marked)."""
    best: tuple[float, int, int, float] | None = None
    strongest = [p.strongest() for p in points]
    if all(s is None or s[2] < formed(points[0]) for s in strongest):
        return None
    for a, b, sa, sb in zip(points, points[1:], strongest, strongest[1:]):
        if sa is None or sb is None or b.step <= a.step:
            continue
        rise = sb[2] - sa[2]
        rate = rise / (b.step - a.step)
        if rise > 0 and (best is None or rate > best[0]):
            best = (rate, a.step, b.step, rise)
    return best[1:] if best else None


def formed(point: HeadPoint) -> float:
    """The induction score of a formed head: ROLE_MIN of the way from a uniform head's to a perfect head's."""
    return point.induction_uniform + ROLE_MIN * (1.0 - point.induction_uniform)


def formation_table(points: list[HeadPoint], about: str) -> str:
    """One row per checkpoint: step, val loss, the sample's loss, the ICL score and the strongest induction head."""
    p0 = points[0]
    lines = [
        about,
        f"induction: the share of a head's attention on the character after an earlier copy of the current one, "
        f"on the same text (a perfect head scores 1.00, a uniform one {p0.induction_uniform:.2f})",
        "",
        f"{'step':>8}  {'val loss':>8}  {'sample':>8}  {'ICL':>7}  {'induction':<12}  files",
    ]
    for p in points:
        best = p.strongest()
        head = f"L{best[0]}H{best[1]} {best[2]:.3f}" if best else "-"
        val = f"{p.val_loss:.4f}" if p.val_loss is not None else "-"
        lines.append(
            f"{p.step:>8}  {val:>8}  {p.sample_loss:>8.4f}  {p.icl_score:>+7.3f}  {head:<12}  {', '.join(p.files)}"
        )
    phase = phase_change(points)
    lines.append("")
    if phase:
        lines.append(
            f"phase change: the strongest induction score rises fastest between steps {phase[0]} and "
            f"{phase[1]} ({phase[2]:+.3f})"
        )
    else:
        lines.append(
            f"no phase change yet: no induction score reaches {formed(p0):.2f} (half way from a uniform head's to "
            "a perfect head's)"
        )
    return "\n".join(lines)


def draw_formation(points: list[HeadPoint], about: str, path: Path) -> None:
    """The formation chart (docs/inside.md): each head's induction score above, the losses and ICL score
    below, the phase change shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [p.step for p in points]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.4), dpi=120, sharex=True, height_ratios=(3, 2))
    layers = len(points[0].induction)
    colours = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, max(layers, 1)))
    styles = ["-", "--", ":", "-."]
    for la in range(layers):
        for h in range(len(points[0].induction[la])):
            values = [p.induction[la][h] for p in points]
            top.plot(steps, values, color=colours[la], ls=styles[h % len(styles)], marker=".", label=f"L{la}H{h}")
    for level, text in ((1.0, "perfect head"), (points[0].induction_uniform, "uniform head")):
        top.axhline(level, color="0.5", lw=0.8, ls=":")
        top.annotate(text, (steps[0], level), fontsize=7, color="0.4", textcoords="offset points", xytext=(2, -10))
    top.set_ylabel("induction score")
    top.legend(
        fontsize=7,
        ncol=max(1, layers),
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        title="layer/head",
        title_fontsize=7,
    )
    top.set_title(about, fontsize=7, wrap=True)
    bottom.plot(steps, [p.sample_loss for p in points], color="#4e79a7", marker=".", label="loss on the sample")
    evaluated = [(p.step, p.val_loss) for p in points if p.val_loss is not None]
    if evaluated:
        bottom.plot(*zip(*evaluated), ls="none", marker="o", mfc="none", color="#4e79a7", label="val loss (checkpoint)")
    bottom.set_ylabel("loss (nats)")
    bottom.set_xlabel("step")
    icl = bottom.twinx()
    icl.plot(steps, [p.icl_score for p in points], color="#e15759", marker=".", label="ICL score")
    icl.set_ylabel("ICL score (late - early loss)", color="#e15759")
    handles = bottom.get_legend_handles_labels()[0] + icl.get_legend_handles_labels()[0]
    bottom.legend(handles=handles, fontsize=7, loc="upper right")
    phase = phase_change(points)
    if phase:
        for ax in (top, bottom):
            ax.axvspan(phase[0], phase[1], color="#f28e2b", alpha=0.15, lw=0)
        top.annotate(
            "phase change",
            (phase[0], 1.0),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            color="#c06000",
            textcoords="offset points",
            xytext=(3, -20),
        )
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    try:
        fig.savefig(path)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot write {path}: {e}") from None
    finally:
        plt.close(fig)

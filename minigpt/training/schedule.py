"""Around the learning-rate schedule (`loop.lr_at`): a time budget's progress, and the note that
a resume which re-plans the schedule prints."""

from __future__ import annotations

import time

from minigpt.config.schema import Config
from minigpt.training.loop import lr_at

# the rates a resume may change: the way on from a run that diverged is its last good checkpoint at a lower rate
RATE_KEYS = ("optim.lr", "optim.min_lr", "optim.muon_lr", "optim.grad_clip")


def time_progress(start: float, progress_then: float, deadline: float) -> float:
    """optim.schedule_by=time: the share of the decay done now, `progress_then` done at `start` (0, or a
    resumed run's) and the rest spread until `deadline` (perf_counter seconds)."""
    return progress_then + (1 - progress_then) * (time.perf_counter() - start) / max(deadline - start, 1e-9)


def replanned_schedule_note(saved: Config, cfg: Config, step: int, changed: list[str]) -> str:
    """The note of a resume that re-plans the schedule: which change did it and how the rates jump at `step`."""
    flat_saved, flat = saved.flat(), cfg.flat()
    rates = [f"{k} {flat_saved[k]:g} -> {flat[k]:g}" for k in changed if k != "train.max_steps"]
    why = f" ({', '.join(rates)})" if rates else ""

    def rate(c: Config, at: int, muon: bool = False) -> float:
        lr = lr_at(at, c.optim, c.train.max_steps)
        return lr * c.optim.muon_lr / c.optim.lr if muon else lr

    before = rate(saved, step - 1) if step else 0.0
    note = (
        f"note: the {cfg.optim.schedule} schedule is re-planned over {cfg.train.max_steps} steps{why}: "
        f"the learning rate goes from {before:.3g} to {rate(cfg, step):.3g} at step {step}"
    )
    if cfg.optim.optimizer == "muon" and rates:
        muon_before = rate(saved, step - 1, muon=True) if step else 0.0
        note += f" (Muon's from {muon_before:.3g} to {rate(cfg, step, muon=True):.3g})"
    return note

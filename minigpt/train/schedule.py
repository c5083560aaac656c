"""Learning-rate schedule: linear warm-up, then cosine / linear / constant decay to min_lr."""

from __future__ import annotations

import math
import time

from minigpt.config.schema import OptimConfig


def lr_at(step: int, cfg: OptimConfig, max_steps: int, progress: float | None = None) -> float:
    """Learning rate for optimizer step `step` (0-based) of a `max_steps` run.

    Warm-up rises linearly to `lr` at step `warmup_steps` (never exactly 0 at step 0);
    the decay then reaches `min_lr` at the last step and stays there. With `progress` (0 to 1,
    optim.schedule_by=time: the fraction of the time budget used) the decay follows it instead.
    """
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / (cfg.warmup_steps + 1)
    if cfg.schedule == "constant":
        return cfg.lr
    if progress is None:
        decay_steps = max(1, max_steps - 1 - cfg.warmup_steps)
        progress = (step - cfg.warmup_steps) / decay_steps
    progress = min(1.0, max(0.0, progress))
    if cfg.schedule == "linear":
        coeff = 1.0 - progress
    else:  # cosine
        coeff = 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.min_lr + coeff * (cfg.lr - cfg.min_lr)


def time_progress(start: float, progress_then: float, deadline: float) -> float:
    """optim.schedule_by=time: the share of the decay done now (perf_counter seconds), when the
    command started at `start` with `progress_then` of it done (0, or a resumed run's) and the
    rest is spread over the time until `deadline`."""
    return progress_then + (1 - progress_then) * (time.perf_counter() - start) / max(deadline - start, 1e-9)

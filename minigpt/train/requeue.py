"""`minigpt train --resume auto`: one command a job script can run again and again. It starts the
run when the directory holds no checkpoint, resumes it when it holds one, and says the run is
finished, doing nothing, when it already ended: results.json records the checkpoint's step and
max_steps, patience or the time budget was reached (with the command's config, so raising
train.max_steps on the command line trains on)."""

from __future__ import annotations

import json
from pathlib import Path

from minigpt.checkpoint import BEST, Checkpoint, resolve_checkpoint
from minigpt.config.schema import Config
from minigpt.errors import UserError

RESULTS = "results.json"


def finished(out_dir: Path, ckpt: Checkpoint, cfg: Config) -> str | None:
    """Why the run in `out_dir` (its newest checkpoint `ckpt`, continued with `cfg`) has nothing
    left to do, or None. Without a results.json of that step, the training or its final evaluation
    was cut short: it is resumed."""
    try:
        results = json.loads((out_dir / RESULTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(results, dict) or results.get("steps") != ckpt.step:
        return None
    t, step = cfg.train, ckpt.step or 0
    if step >= t.max_steps:
        return f"it reached train.max_steps ({t.max_steps})"
    if t.patience and (ckpt.evals_since_best or 0) >= t.patience:
        return f"it stopped early (train.patience {t.patience}; the best was at step {ckpt.best_step})"
    stopped = str(results.get("stopped") or "")
    if t.max_time and "train.max_time" in stopped:
        return f"its time budget, train.max_time {t.max_time}, ran out"
    return None


def same_start(saved: Config, cfg: Config) -> Config:
    """`cfg` with train.init_from as the run saved it (the resolved file) when it names the same
    checkpoint: the command that started a fine-tuning run can then resume it unchanged."""
    given, kept = cfg.train.init_from, saved.train.init_from
    if given is None or kept is None or given == kept:
        return cfg
    try:
        same = resolve_checkpoint(Path(given).expanduser(), prefer=BEST).resolve() == Path(kept).resolve()
    except (UserError, OSError):  # a path that no longer exists: the usual refusal follows
        return cfg
    return cfg.replace(**{"train.init_from": kept}) if same else cfg

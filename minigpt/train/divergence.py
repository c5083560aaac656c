"""After a divergence (a NaN or infinite loss): the one command that continues the run from its last
good checkpoint at a lower rate. A resume may change the rates (`schedule.RATE_KEYS`), so the way on
is the checkpoint, not a new run."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from minigpt.checkpoint import LAST, Checkpoint, find_checkpoint
from minigpt.config.schema import Config, config_from_dict
from minigpt.errors import UserError


def _override(key: str, value: Any) -> str:
    """KEY=VALUE as the command line reads it back (a text key is taken as written)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null"
    elif isinstance(value, str) and (not value.isprintable() or value != value.strip()):
        text = json.dumps(value)  # YAML's double-quoted form: "\n" stays a newline
    else:
        text = str(value)
    return shlex.quote(f"{key}={text}")


def lower_rate_command(out_dir: Path, cfg: Config, good: Path) -> str:
    """`minigpt train --out RUN --resume ...`: the settings this process ran with where they differ
    from those saved in the last good checkpoint `good` (a longer train.max_steps, say), and the
    whole schedule at half the rate (Muon's too), gradient clipping on if it was off."""
    o = cfg.optim
    rates = {"optim.lr": f"{o.lr / 2:g}"}
    if o.min_lr > 0:
        rates["optim.min_lr"] = f"{o.min_lr / 2:g}"
    if o.optimizer == "muon":
        rates["optim.muon_lr"] = f"{o.muon_lr / 2:g}"
    if o.grad_clip == 0:
        rates["optim.grad_clip"] = "1"
    try:
        saved = config_from_dict(Checkpoint.load(good).config, str(good)).flat()
    except UserError:
        saved = {}
    now = cfg.flat()
    kept = [_override(k, v) for k, v in now.items() if k in saved and saved[k] != v and k not in rates]
    lowered = [shlex.quote(f"{k}={v}") for k, v in rates.items()]
    return " ".join(["minigpt", "train", "--out", shlex.quote(str(out_dir)), "--resume", *kept, *lowered])


def diverged_error(out_dir: Path, cfg: Config, step: int, quantity: str, value: float) -> UserError:
    """The error a non-finite loss or gradient ends a run with: where the last good checkpoint is,
    and the command that continues from it at half the rate."""
    good = find_checkpoint(out_dir, prefer=LAST)
    o, where = cfg.optim, f"training diverged: the {quantity} became {value} at step {step}"
    if good is None:
        return UserError(f"{where} (no checkpoint was written); start again with a lower optim.lr (now {o.lr:g}), "
                         "keep optim.grad_clip on, or check the data")  # fmt: skip
    return UserError(
        f"{where} (the last good checkpoint is kept: {good}); continue from it at half the learning rate with: "
        f"{lower_rate_command(out_dir, cfg, good)} (halve it again if it diverges again), or check the data"
    )

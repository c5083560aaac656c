"""`minigpt runs`: what the run directories under a folder hold, one row each, read from their
checkpoints (memory-mapped: no weights are read) and results.json."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from minigpt.checkpoint import BEST, LAST, Checkpoint, find_checkpoint, list_snapshots
from minigpt.config.schema import config_from_dict
from minigpt.errors import UserError
from minigpt.model import parameter_count


@dataclass
class RunInfo:
    run: str  # the directory, relative to the folder listed
    steps: int | None
    best_val_loss: float | None  # the final evaluation's number when results.json has it, else the estimate
    best_val_loss_is_full: bool
    params: int | None
    wall_s: float | None
    started_from: str | None  # a fine-tuned run's starting checkpoint
    problem: str | None = None  # why the run could not be read
    snapshots: int = 0  # weights-only step_NNNNNNN.pt files (train.keep_every)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_run(run_dir: Path, name: str) -> RunInfo:
    results: dict[str, Any] = {}
    try:
        results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    try:
        ckpt = Checkpoint.load(find_checkpoint(run_dir, prefer=LAST))
        params = parameter_count(config_from_dict(ckpt.config, name).model, ckpt.model["wte.weight"].shape[0])
    except UserError as e:
        return RunInfo(name, None, None, False, None, None, None, problem=str(e))
    full = results.get("val_loss_full")
    best = full if isinstance(full, (int, float)) else ckpt.best_val_loss
    if best is not None and not math.isfinite(best):
        best = None
    started = (ckpt.init_from or {}).get("path")
    # a final evaluation past train.final_eval_tokens scored a sample: an estimate too (marked ~)
    exact = isinstance(full, (int, float)) and results.get("val_tokens_scored") == results.get("val_tokens")
    return RunInfo(
        name, ckpt.step, best, exact, params, results.get("wall_s"), started, snapshots=len(list_snapshots(run_dir))
    )


def list_runs(root: Path) -> list[RunInfo]:
    """Every run directory under `root` (at any depth; `root` itself too), in path order."""
    if not root.is_dir():
        raise UserError(f"{root} is not a directory of runs (train one with: minigpt train --out {root}/NAME)")
    dirs = sorted({p.parent for name in (LAST, BEST) for p in root.rglob(name)})
    return [read_run(d, str(d.relative_to(root)) if d != root else ".") for d in dirs]


def format_runs(runs: list[RunInfo]) -> str:
    rows = [("run", "steps", "best val", "params", "wall", "snapshots", "started from")]
    for r in runs:
        if r.problem:
            rows.append((r.run, "-", "-", "-", "-", "-", f"unreadable: {r.problem}"))
            continue
        val = "-" if r.best_val_loss is None else f"{r.best_val_loss:.4f}" + ("" if r.best_val_loss_is_full else "~")
        params = "-" if r.params is None else f"{r.params / 1e6:.2f}M"
        wall = "-" if r.wall_s is None else f"{r.wall_s:.0f}s"
        rows.append((r.run, str(r.steps), val, params, wall, str(r.snapshots), r.started_from or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:6], widths)) + "  " + row[6] for row in rows]
    return "\n".join(line.rstrip() for line in lines)

"""Self-describing checkpoints, written atomically and loaded without running code.

A checkpoint is a dict of tensors and plain data only (weights, optimizer, step, resolved config,
tokenizer vocabulary, RNG states), so `torch.load(weights_only=True)` reads it and
`minigpt sample RUN` needs nothing else. Writes go to a temporary file in the same directory,
are flushed and fsynced, then renamed over the old file: a crash at any moment leaves either the
old checkpoint or the new one, never a partial file.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any

import torch

from minigpt.atomic import atomic_write
from minigpt.errors import UserError

FORMAT = "minigpt-checkpoint"
VERSION = 1
LAST, BEST = "last.pt", "best.pt"


def save_checkpoint(payload: dict[str, Any], path: Path) -> None:
    """Atomically write `payload` to `path` (tmp file + fsync + rename + directory fsync)."""
    payload = {"format": FORMAT, "version": VERSION, **payload}
    atomic_write(path, lambda f: torch.save(payload, f))


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a minigpt checkpoint on the CPU with `weights_only=True`; refuse anything else."""
    if not path.exists():
        raise UserError(f"checkpoint {path} does not exist")
    if path.is_dir():
        raise UserError(f"{path} is a directory, not a checkpoint file")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != b"PK\x03\x04":  # torch.save writes a zip archive
        raise UserError(f"{path} is not a minigpt checkpoint (not a PyTorch checkpoint file at all)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. torch's note on a foreign pickle protocol: we refuse or load anyway
            # mmap: tensors are paged in when used, so sampling does not read the optimizer state
            ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else "unsupported content"
        raise UserError(
            f"refusing to load {path}: it holds objects that would run code when loaded ({first}); "
            "minigpt checkpoints hold only tensors and plain data"
        ) from None
    except Exception as e:  # truncated zip, a text file, a legacy pickle: torch raises many kinds
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(
            f"{path} is not a readable minigpt checkpoint (truncated or another format): {reason}"
        ) from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise UserError(f"{path} is not a minigpt checkpoint (no '{FORMAT}' marker)")
    if ckpt.get("version") != VERSION:
        raise UserError(f"{path} is a version {ckpt.get('version')} checkpoint; this minigpt reads version {VERSION}")
    return ckpt


def resolve_checkpoint(target: Path, prefer: str = BEST) -> Path:
    """A checkpoint file, or a run directory's `prefer` checkpoint (falling back to the other one)."""
    if not target.exists():
        raise UserError(f"{target} does not exist (give a run directory or a .pt checkpoint)")
    if target.is_file():
        return target
    order = [prefer, LAST if prefer == BEST else BEST]
    for name in order:
        if (target / name).is_file():
            return target / name
    raise UserError(f"run directory {target} holds no checkpoint ({' or '.join(order)}); train into it first")

"""Weights-only snapshots (`train.keep_every: N`): a small `step_NNNNNNN.pt` kept every N steps
beside `last.pt` and `best.pt`, so a person can sample, evaluate or look at the attention of a
model as it was at step N. A snapshot is a checkpoint without the optimizer, the random streams
or the scaler (model, config, tokenizer, data, step, val loss): every command that takes a
checkpoint file takes one, and none resumes from it. Written atomically like every checkpoint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from minigpt.config.schema import Config
from minigpt.infer.checkpoint import Checkpoint
from minigpt.model import parameter_count

PATTERN = re.compile(r"^step_(\d{7,})\.pt$")
# what a snapshot holds beside the weights: the zip's headers (~1 KB a tensor), the config and
# the pickled dicts; 32 KB plus a generous share per tensor and per vocabulary entry is an upper
# bound on what tiny to default models measured (docs/benchmarks.md)
OVERHEAD_BYTES = 32 << 10
PER_TENSOR_BYTES = 1536
PER_VOCAB_ENTRY_BYTES = 16


def snapshot_name(step: int) -> str:
    """`step_0000100.pt`: seven digits, so that names sort by step up to ten million steps."""
    return f"step_{step:07d}.pt"


def list_snapshots(run_dir: Path) -> list[Path]:
    """The run directory's snapshots, in step order (temporary files of a write in progress are not
    snapshots: they start with a dot)."""
    if not run_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in run_dir.iterdir() if (m := PATTERN.match(p.name)) and p.is_file()]
    return [p for _, p in sorted(found)]


def weights_only(ckpt: Checkpoint) -> Checkpoint:
    """The snapshot of a full checkpoint: what sampling, evaluation and export read, no more."""
    return Checkpoint(model=ckpt.model, config=ckpt.config, tokenizer=ckpt.tokenizer, data=ckpt.data,
                      step=ckpt.step, tokens_seen=ckpt.tokens_seen, val_loss=ckpt.val_loss,
                      init_from=ckpt.init_from)  # fmt: skip


def save_snapshot(run_dir: Path, ckpt: Checkpoint) -> Path:
    """Write `ckpt`'s weights-only snapshot for its step (atomically, like every checkpoint)."""
    path = run_dir / snapshot_name(int(ckpt.step or 0))
    weights_only(ckpt).save(path)
    return path


@dataclass(frozen=True)
class SnapshotPlan:
    """The snapshots a run will write from its start (or resume) step to train.max_steps."""

    count: int
    bytes_each: int  # an upper estimate of one file's size

    @property
    def total_bytes(self) -> int:
        return self.count * self.bytes_each


def snapshot_plan(cfg: Config, vocab_size: int, from_step: int = 0) -> SnapshotPlan:
    """How many snapshot files a run of `cfg` will write after `from_step` (the resume step; 0 for
    a new run) and how large each is: the float32 weights (tied embedding counted once) plus an
    upper bound on the rest. For a disk preflight: snapshots are kept, never replaced."""
    every, last = cfg.train.keep_every, cfg.train.max_steps
    count = 0 if not every else max(0, last // every - from_step // every)
    m = cfg.model
    tensors = 4 + m.n_layer * (6 + 6 * int(m.bias)) + 2 + (1 if m.pos_emb == "learned" else 0)
    size = (4 * parameter_count(m, vocab_size) + OVERHEAD_BYTES + PER_TENSOR_BYTES * tensors
            + PER_VOCAB_ENTRY_BYTES * vocab_size)  # fmt: skip
    return SnapshotPlan(count, size)

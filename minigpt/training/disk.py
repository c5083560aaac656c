"""Will the run's files fit on its disk? Checked before the first step, so a run that cannot save is refused
in one line (docs/distributed.md, "Disks"); each size is an upper bound."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from minigpt.checkpoint import BEST, LAST
from minigpt.config.schema import Config
from minigpt.errors import WriteError
from minigpt.io.atomic import atomic_write
from minigpt.io.diskspace import free_bytes, size_text, write_errors
from minigpt.model import parameter_count

_FIXED = 64 * 1024  # random-number states, config, vocabulary, the archive's records
_SMALL_FILES = 256 * 1024  # config.yaml, results.json, TensorBoard events: room for them too
# an upper bound on what a snapshot holds beside the weights (zip headers, config, pickled dicts)
OVERHEAD_BYTES = 32 << 10
PER_TENSOR_BYTES = 1536
PER_VOCAB_ENTRY_BYTES = 16


@dataclass(frozen=True)
class Need:
    """Room one kind of file needs: `count` files of `each` bytes; `names` will be replaced (room already taken)."""

    label: str
    each: int
    count: int = 1
    names: tuple[str, ...] = ()


def snapshot_plan(cfg: Config, vocab_size: int, from_step: int = 0) -> Need:
    """The snapshots (train.keep_every) a run of `cfg` will write after `from_step` (the resume step; 0 for
    a new run): how many, and an upper bound on each one's size. Snapshots are kept, never replaced."""
    every, last = cfg.train.keep_every, cfg.train.max_steps
    count = 0 if not every else max(0, last // every - from_step // every)
    m = cfg.model
    tensors = 4 + m.n_layer * (6 + 6 * int(m.bias)) + 2 + (1 if m.pos_emb == "learned" else 0)
    size = 4 * parameter_count(m, vocab_size) + OVERHEAD_BYTES + PER_TENSOR_BYTES * tensors
    size += PER_VOCAB_ENTRY_BYTES * vocab_size
    return Need("snapshots (train.keep_every)", size, count)


def preflight(cfg: Config, out_dir: Path, n_params: int, writes: bool = True, extra: Sequence[Need] = ()) -> None:
    """Refuse a run whose files will not fit (only the process that `writes` them checks): last.pt, best.pt, a
    temporary copy while one is written, and `extra`."""
    free = free_bytes(out_dir) if writes else None
    if free is None:
        return
    positions = cfg.model.block_size * cfg.model.n_embd * 4  # a buffer saved with the weights
    each = 12 * n_params + positions + _FIXED  # float32 weights and AdamW's two moments (Muon: one), at most
    needs = [Need("checkpoints (last.pt, best.pt)", each, 2, (LAST, BEST)), Need("a temporary copy", each)]
    needs += [n for n in extra if n.count]
    total = sum(n.each * n.count for n in needs) + _SMALL_FILES
    there = sum((out_dir / name).stat().st_size for n in needs for name in n.names if (out_dir / name).is_file())
    if free + there >= total:
        return
    fewer = ", or keep fewer snapshots (a larger train.keep_every, or 0)" if len(needs) > 2 else ""
    parts = ", ".join(
        f"{n.label} {n.count} x {size_text(n.each)}" if n.count > 1 else f"{n.label} {size_text(n.each)}" for n in needs
    )
    raise WriteError(
        f"not enough disk space for {out_dir}: the run needs about {size_text(total - there)} more ({parts}) "
        f"but {size_text(free)} is free there; train into another --out or free space{fewer}"
    )


def write_run_file(path: Path, text: str, after: str = "") -> None:
    """A small file of the run (config.yaml, results.json), written atomically; a failure is one `WriteError` line."""
    data = text.encode("utf-8")
    with write_errors(path, len(data), after):
        atomic_write(path, lambda f: f.write(data))

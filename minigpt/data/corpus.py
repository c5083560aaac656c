"""Text in, batches out: resolve the sources (sources.py), encode them once into a memory-mapped
cache entry (encoding.py), split train/val, and draw random windows from a seeded generator."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from minigpt.config.schema import DataConfig
from minigpt.data.encoding import Encoded, HashIndex, Layout, ProgressFactory, load_or_encode
from minigpt.data.passes import hashes_and_vocabulary
from minigpt.data.records import text_files
from minigpt.data.sources import Skipped, SourceFile, absolute_spec, choose_val_files, describe, resolve_sources
from minigpt.data.tokenizer import Tokenizer
from minigpt.errors import UserError
from minigpt.io import default_cache_dir
from minigpt.runtime.memory import release_pages


@dataclass
class Corpus:
    """An encoded corpus and its split. `ids` is the whole joined text (a read-only memory map of
    the cache entry); `train` and `val` are views of it, never copies; `id_map` applies to each batch drawn."""

    description: str
    sha256: str  # the content key: a single file's SHA-256, else the hash of the manifest
    tokenizer: Tokenizer
    ids: np.ndarray
    split: int
    documents: int = 1
    id_map: np.ndarray | None = None  # the text's ids -> the model's (a fine-tuned vocabulary), or None

    @property
    def train(self) -> np.ndarray:
        return self.ids[: self.split]

    @property
    def val(self) -> np.ndarray:
        return self.ids[self.split :]

    def in_vocabulary(self, tok: Tokenizer) -> Corpus:
        """The same text with ids of `tok` (a model's vocabulary, which may order the characters
        differently or hold more of them); itself when the vocabularies are equal."""
        if tok.same_as(self.tokenizer):
            return self
        return dataclasses.replace(self, tokenizer=tok, id_map=tok.ids_of(self.tokenizer))


def _layout(
    cfg: DataConfig, index: HashIndex, progress: ProgressFactory | None, cache: Path, whole: bool = False
) -> tuple[Layout, str]:
    """The documents in the order they are encoded (training files, then validation files; record
    files as their extracted text) and a description of the corpus for messages."""
    skipped = Skipped()
    files = resolve_sources(cfg.path, "data.path", skipped)
    desc = describe(cfg.path) + (f" ({len(files):,} files)" if len(files) > 1 else "")
    if cfg.val_path is not None:
        val_skipped = Skipped()
        val = resolve_sources(cfg.val_path, "data.val_path", val_skipped)
        if note := val_skipped.summary("data.val_path"):
            print(note, file=sys.stderr)
        val_paths = {f.path for f in val}
        files = [f for f in files if f.path not in val_paths]
        if not files:
            raise UserError(
                f"data.path: every file of {describe(cfg.path)} is also in data.val_path; nothing is left to train on"
            )
        desc += f", validation {describe(cfg.val_path)}" + (f" ({len(val):,} files)" if len(val) > 1 else "")
        files, n_train = files + val, len(files)
    else:
        chosen = choose_val_files(files, cfg.val_fraction)
        n_train = None
        if chosen is not None:
            files = [f for f, v in zip(files, chosen) if not v] + [f for f, v in zip(files, chosen) if v]
            n_train = chosen.count(False)
    split_last = cfg.val_path is None and n_train is None and not whole
    files, n_train = text_files(files, n_train, cfg, index.sha256, cache / "records", split_last, progress)
    hashes, vocab = _hashes(files, index, cfg.tokenizer, progress, desc)
    layout = Layout(files, hashes, n_train, cfg.doc_separator, cfg.tokenizer, vocab)
    if cfg.format != "text":
        layout = _without_binary(layout, index, skipped)
    if note := skipped.summary("data.path"):
        print(note, file=sys.stderr)
    return layout, desc


def _without_binary(layout: Layout, index: HashIndex, skipped: Skipped) -> Layout:
    """The layout less the binary files a folder walk met, by the hashing pass's look at their start (named
    files, and a glob's, are kept: the non-UTF-8 rule then speaks for them)."""
    files = layout.files
    drop = {i for i, f in enumerate(files) if f.found == "walked" and index.binary(f)}
    skipped.binary += [files[i].name for i in sorted(drop)]
    keep = [i for i in range(len(files)) if i not in drop]
    if not drop or not keep:
        return layout  # with nothing but binary files, the non-UTF-8 rule's error names them
    n_train = layout.n_train
    if n_train is not None:
        n_train -= sum(1 for i in drop if i < n_train)
        n_train = n_train if 0 < n_train < len(keep) else None  # no whole file left on one side: the tail
    vocab = layout.vocabulary
    if vocab is not None:
        chars, bad = vocab
        if any(i not in bad for i in drop):
            vocab = None  # a dropped file's characters were counted: count again without it
        else:
            where = {old: new for new, old in enumerate(keep)}
            vocab = (chars, {where[i]: why for i, why in bad.items() if i in where})
    return Layout(
        [files[i] for i in keep], [layout.hashes[i] for i in keep], n_train, layout.separator, layout.kind, vocab
    )


def _hashes(
    files: list[SourceFile], index: HashIndex, kind: str, progress: ProgressFactory | None, desc: str
) -> tuple[list[str], tuple[set[str], dict[int, str]] | None]:
    """The files' SHA-256s: from the index where it knows them. On a first run (none known) in char
    mode the same read also finds the vocabulary, which encoding then need not read again."""
    unhashed = sum(f.size for f in files if not index.knows(f))
    bar = progress(unhashed, f"hashing {desc}") if progress and unhashed else None
    tick = bar.update if bar else (lambda n: None)
    vocab = None
    try:
        if kind == "char" and unhashed and not any(index.knows(f) for f in files):
            hashes, chars, bad, binary = hashes_and_vocabulary(files, tick)
            for i, (f, sha) in enumerate(zip(files, hashes)):
                index.record(f, sha, i in binary)
            vocab = (chars, bad)
        else:
            hashes = [index.sha256(f, tick) for f in files]
    finally:
        if bar:
            bar.close()
    index.save()
    return hashes, vocab


def encode_corpus(
    cfg: DataConfig,
    progress: ProgressFactory | None = None,
    check_vocab: Callable[[int], None] | None = None,
    whole: bool = False,
) -> tuple[Encoded, Layout, str]:
    """Resolve, hash and encode (through the cache) the configured sources. `whole`: all of it is
    wanted (evaluation), so a record file is not split into training and validation records."""
    cache = Path(cfg.cache_dir).expanduser() if cfg.cache_dir else default_cache_dir()
    index = HashIndex(cache, [absolute_spec(cfg.path), cfg.val_path and absolute_spec(cfg.val_path)])
    layout, desc = _layout(cfg, index, progress, cache, whole)
    return load_or_encode(layout, cache, progress, desc, "data.path", check_vocab), layout, desc


def load_corpus(
    cfg: DataConfig,
    block_size: int,
    progress: ProgressFactory | None = None,
    check_vocab: Callable[[int], None] | None = None,
) -> Corpus:
    """The configured corpus, encoded (cached), memory-mapped and split."""
    enc, layout, desc = encode_corpus(cfg, progress, check_vocab)
    n = len(enc.ids)
    split = enc.split if enc.split is not None else int(n * (1.0 - cfg.val_fraction))  # the last val_fraction
    need = block_size + 2
    if split < need or n - split < need:
        unit = enc.tokenizer.unit + "s"
        raise UserError(
            f"data {desc} is too short: {n} {unit} give {split} for training and {n - split} for "
            f"validation, each needs at least {need} (model.block_size + 2); use a longer text or lower "
            f"model.block_size"
        )
    return Corpus(desc, layout.identity(), enc.tokenizer, enc.ids, split, enc.documents)


class Batcher:
    """Random windows of `block_size + 1` tokens from one split (a memory map: only drawn windows are
    read), from its own seeded generator, saved and restored for exact resume. Every rank draws the
    same window starts and keeps its contiguous share: together, one process's batches."""

    def __init__(
        self,
        data: np.ndarray | torch.Tensor,
        block_size: int,
        batch_size: int,
        seed: int,
        device: torch.device,
        rank: int = 0,
        world_size: int = 1,
        id_map: np.ndarray | None = None,
    ):
        if len(data) < block_size + 2:
            raise ValueError(f"split of {len(data)} tokens is too short for block_size {block_size}")
        self.data = data.numpy() if isinstance(data, torch.Tensor) else data
        self.id_map = id_map
        self.batch_size = batch_size
        self.share = slice(rank * batch_size // world_size, (rank + 1) * batch_size // world_size)
        self.device = device
        self.offsets = np.arange(block_size + 1)
        self.high = len(data) - block_size  # exclusive bound on window starts
        self.generator = torch.Generator().manual_seed(seed)
        self.pin = device.type == "cuda"

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """x, y of shape (B, T) on the device, y being x shifted left by one."""
        starts = torch.randint(self.high, (self.batch_size,), generator=self.generator)[self.share]
        rows = self.data[starts.numpy()[:, None] + self.offsets]  # (B, T+1), read from the map
        release_pages(self.data)  # the windows are copied out: keep no page of the corpus mapped
        rows = self.id_map[rows] if self.id_map is not None else rows.astype(np.int64)
        window = torch.from_numpy(rows)
        if self.pin:
            window = window.pin_memory()
        # non_blocking only from pinned memory (CUDA): from an ordinary temporary it may read memory
        # that is already released by the time the copy runs (reported for CPU -> MPS copies)
        window = window.to(self.device, non_blocking=self.pin)
        return window[:, :-1], window[:, 1:]

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.generator.set_state(state["generator"])

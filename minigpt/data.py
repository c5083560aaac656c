"""Text in, batches out: read and check the text, encode it once (cached by content
hash), split it into train/val, and draw random windows from a seeded generator."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from minigpt.atomic import atomic_write
from minigpt.config import DEFAULT_DATA_PATH, DataConfig
from minigpt.errors import UserError
from minigpt.tokenizer import CharTokenizer

TINY_SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
CACHE_VERSION = 1


def default_cache_dir() -> Path:
    """$MINIGPT_CACHE_DIR, else $XDG_CACHE_HOME/minigpt, else ~/.cache/minigpt."""
    if os.environ.get("MINIGPT_CACHE_DIR"):
        return Path(os.environ["MINIGPT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "minigpt"


def fetch_tiny_shakespeare(dest: Path, url: str | None = None) -> None:
    """Download tiny Shakespeare to `dest` and verify its SHA-256 (atomic: no partial file)."""
    url = url or TINY_SHAKESPEARE_URL
    how = f"put the file at {dest} yourself, or train on your own text with --data FILE"
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            payload = response.read()
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise UserError(f"{dest} is missing and downloading it from {url} failed ({reason}): {how}") from None
    digest = hashlib.sha256(payload).hexdigest()
    if digest != TINY_SHAKESPEARE_SHA256:
        raise UserError(f"the download from {url} has SHA-256 {digest}, expected {TINY_SHAKESPEARE_SHA256}: {how}")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(dest, lambda f: f.write(payload))
    except OSError as e:
        raise UserError(f"cannot write {dest}: {e.strerror}: {how}") from None


def read_text_bytes(path: Path) -> bytes:
    """The raw bytes of a training text, with a clear error for each way it can be wrong."""
    if not path.exists():
        raise UserError(f"data file {path} does not exist (pass --data FILE or set data.path)")
    if path.is_dir():
        raise UserError(f"data file {path} is a directory; point --data at a text file inside it")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read data file {path}: {e.strerror}") from None
    if not raw:
        raise UserError(f"data file {path} is empty; give it some text to learn from")
    return raw


def decode_utf8(raw: bytes, path: Path) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise UserError(
            f"data file {path} is not UTF-8 text: byte 0x{raw[e.start]:02x} at offset {e.start} "
            f"(line {line}, column {column}); convert it, e.g. iconv -f latin1 -t utf-8"
        ) from None


@dataclass
class Corpus:
    """An encoded text and its split. `train` and `val` are 1-D integer tensors."""

    path: Path
    sha256: str
    tokenizer: CharTokenizer
    train: torch.Tensor
    val: torch.Tensor

    def in_vocabulary(self, tok: CharTokenizer) -> Corpus:
        """The same text with ids of `tok` (a model's vocabulary, which may order the characters
        differently or hold more of them); itself when the vocabularies are equal."""
        if tok.chars == self.tokenizer.chars:
            return self
        table = torch.from_numpy(tok.ids_of(self.tokenizer))
        return dataclasses.replace(self, tokenizer=tok, train=table[self.train.long()], val=table[self.val.long()])


def _storage_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint8) if vocab_size <= 256 else np.dtype(np.int32)


class DamagedCache(Exception):
    """A cache entry whose content cannot be what was stored (a bad length, type or id)."""


def _load_cached(cache_dir: Path, sha: str) -> tuple[CharTokenizer, np.ndarray] | None:
    """The cached (tokenizer, ids) of a text, or None when there is no usable entry. An entry is
    checked on every load at memory speed (length, integer type, no id past the vocabulary);
    a bad one raises DamagedCache."""
    meta_path, ids_path = cache_dir / f"{sha}.json", cache_dir / f"{sha}.npy"
    if not meta_path.exists() or not ids_path.exists():
        return None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("version") != CACHE_VERSION:
            return None
        ids = np.load(ids_path, mmap_mode="r", allow_pickle=False)
        tok = CharTokenizer(meta["chars"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DamagedCache(f"unreadable ({e.__class__.__name__})") from None
    if ids.ndim != 1 or len(ids) != meta.get("length"):
        raise DamagedCache(f"holds {ids.shape} ids where {meta.get('length')} were stored")
    if ids.dtype != _storage_dtype(tok.vocab_size):
        raise DamagedCache(f"holds {ids.dtype} ids, not {_storage_dtype(tok.vocab_size)}")
    if len(ids) and int(ids.max()) >= tok.vocab_size:
        raise DamagedCache(f"holds id {int(ids.max())} for a vocabulary of {tok.vocab_size} characters")
    return tok, ids


def _store_cached(cache_dir: Path, sha: str, tok: CharTokenizer, ids: np.ndarray) -> OSError | None:
    """Best effort: a read-only or full cache directory only costs re-encoding next time (the
    error is returned for the caller that must repair an entry)."""
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(cache_dir / f"{sha}.npy", lambda f: np.save(f, ids, allow_pickle=False))
        meta = json.dumps({"version": CACHE_VERSION, "chars": tok.chars, "length": len(ids)})
        atomic_write(cache_dir / f"{sha}.json", lambda f: f.write(meta.encode("utf-8")))
    except OSError as e:
        return e
    return None


def encode_file(path: Path, cache_dir: Path | None) -> tuple[str, CharTokenizer, np.ndarray]:
    """(sha256, tokenizer, ids) of a text file, through the encoding cache."""
    raw = read_text_bytes(path)
    sha = hashlib.sha256(raw).hexdigest()
    damaged = None
    if cache_dir is not None:
        try:
            hit = _load_cached(cache_dir, sha)
        except DamagedCache as e:
            damaged, hit = str(e), None
            print(f"warning: the encoding cache entry {cache_dir / sha}.npy {damaged}; re-encoding {path}",
                  file=sys.stderr)  # fmt: skip
        if hit is not None:
            return sha, hit[0], hit[1]
    text = decode_utf8(raw, path)
    tok = CharTokenizer.from_text(text)
    ids = tok.encode_array(text).astype(_storage_dtype(tok.vocab_size))
    if cache_dir is not None:
        failed = _store_cached(cache_dir, sha, tok, ids)
        if failed is not None and damaged is not None:
            raise UserError(
                f"the encoding cache entry {cache_dir / sha}.npy is damaged and cannot be rewritten "
                f"({failed.strerror}); delete {cache_dir / sha}.npy and {cache_dir / sha}.json (or the whole "
                f"cache, {cache_dir}) and run again"
            )
    return sha, tok, ids


def cache_dir_for(cfg: DataConfig) -> Path:
    return Path(cfg.cache_dir).expanduser() if cfg.cache_dir else default_cache_dir()


def split_index(n: int, val_fraction: float) -> int:
    """Where validation starts: the split is contiguous, the last val_fraction is validation."""
    return int(n * (1.0 - val_fraction))


def load_corpus(cfg: DataConfig, block_size: int) -> Corpus:
    """Read, encode (cached) and split the configured text; fetch tiny Shakespeare if it is the default."""
    path = Path(cfg.path).expanduser()
    if not path.exists() and Path(cfg.path) == Path(DEFAULT_DATA_PATH):
        fetch_tiny_shakespeare(path)
    sha, tok, ids = encode_file(path, cache_dir_for(cfg))
    n = len(ids)
    split = split_index(n, cfg.val_fraction)
    need = block_size + 2
    if split < need or n - split < need:
        raise UserError(
            f"data file {path} is too short: {n} characters give {split} for training and {n - split} for "
            f"validation, each needs at least {need} (model.block_size + 2); use a longer text or lower "
            f"model.block_size"
        )
    data = torch.from_numpy(np.array(ids))  # a private, writable copy (the cache may be a read-only memmap)
    return Corpus(path=path, sha256=sha, tokenizer=tok, train=data[:split], val=data[split:])


class Batcher:
    """Random windows of `block_size + 1` tokens from one split, drawn from its own seeded generator,
    so the sequence of batches depends only on the seed (and is saved/restored for exact resume).

    With several ranks, every rank draws the same `batch_size` window starts and keeps its own
    contiguous share of them: the ranks see different data, and together exactly the batches a
    single process with the same seed would see. (That the batch splits evenly over the ranks is
    config.batch_split_error's rule, checked before training starts.)
    """

    def __init__(
        self, data: torch.Tensor, block_size: int, batch_size: int, seed: int, device: torch.device,
        rank: int = 0, world_size: int = 1,
    ):  # fmt: skip
        if len(data) < block_size + 2:
            raise ValueError(f"split of {len(data)} tokens is too short for block_size {block_size}")
        self.data = data
        self.batch_size = batch_size
        self.share = slice(rank * batch_size // world_size, (rank + 1) * batch_size // world_size)
        self.device = device
        self.offsets = torch.arange(block_size + 1)
        self.high = len(data) - block_size  # exclusive bound on window starts
        self.generator = torch.Generator().manual_seed(seed)
        self.pin = device.type == "cuda"

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """x, y of shape (B, T) on the device, y being x shifted left by one."""
        starts = torch.randint(self.high, (self.batch_size,), generator=self.generator)[self.share]
        window = self.data[starts[:, None] + self.offsets].long()  # (B, T+1)
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

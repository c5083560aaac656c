"""Encoding a corpus once, in bounded memory, into a flat binary cache read back as a memory map,
keyed by the content and the tokenizer, locked while made and checked on load (docs/training.md#the-cache)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

import numpy as np

from minigpt.data.passes import BINARY_HEAD, CHUNK, chunks, looks_binary, storage_dtype, vocabulary, write_ids
from minigpt.data.sources import SourceFile, shown
from minigpt.data.tokenizer import ByteTokenizer, CharTokenizer, Tokenizer, tokenizer_from_dict
from minigpt.errors import UserError
from minigpt.io import atomic
from minigpt.io.lock import FileLock
from minigpt.io.textfiles import read_json_dict

CACHE_VERSION = 2
RACY_NS = 2_000_000_000  # a file modified this close to when it was hashed is hashed again (racy mtime)
MAX_SKIPPED_SHARE = 0.1  # in a folder, up to this share of non-UTF-8 files is skipped with a warning


class Progress(Protocol):
    def update(self, n: int) -> Any: ...
    def close(self) -> Any: ...


ProgressFactory = Callable[[int, str], Progress]


def file_sha256(path: str | Path, expect: int | None = None, head: list[bytes] | None = None) -> str:
    """The file's SHA-256; `head`, when given, receives its first bytes (for `looks_binary`)."""
    h = hashlib.sha256()
    for chunk in chunks(path, expect=expect):
        if head is not None and not head:
            head.append(chunk[:BINARY_HEAD])
        h.update(chunk)
    return h.hexdigest()


class HashIndex:
    """Content hashes of the files of one data.path, by (size, mtime): a file whose size and mtime
    are those recorded is not re-hashed, unless it was modified within RACY_NS of the recording."""

    def __init__(self, cache_dir: Path | None, spec: Any) -> None:
        key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode("utf-8")).hexdigest()[:32]
        self.path = cache_dir / "index" / f"{key}.json" if cache_dir is not None else None
        self.entries: dict[str, list] = read_json_dict(self.path).get("files", {}) if self.path is not None else {}
        self.changed = False

    def knows(self, f: SourceFile) -> bool:
        known = self.entries.get(f.path) or []
        return len(known) > 4 and known[:2] == [f.size, f.mtime_ns] and known[3] - f.mtime_ns > RACY_NS

    def sha256(self, f: SourceFile, on_read: Callable[[int], None] | None = None) -> str:
        if self.knows(f):
            return self.entries[f.path][2]
        head: list[bytes] = []
        sha = file_sha256(f.path, f.size, head)
        self.record(f, sha, looks_binary(head[0] if head else b""))
        if on_read:
            on_read(f.size)
        return sha

    def record(self, f: SourceFile, sha: str, binary: bool) -> None:
        self.entries[f.path] = [f.size, f.mtime_ns, sha, time.time_ns(), binary]
        self.changed = True

    def binary(self, f: SourceFile) -> bool:
        """Whether a file hashed (or recorded) in this index starts like a binary file."""
        return bool(self.entries[f.path][4])

    def save(self) -> None:
        if self.path is None or not self.changed:
            return
        with contextlib.suppress(OSError):  # best effort: without it the next start re-hashes
            self.path.parent.mkdir(parents=True, exist_ok=True)
            payload = json.dumps({"files": self.entries}).encode("utf-8")
            atomic.atomic_write(self.path, lambda fh: fh.write(payload))


@dataclass
class Layout:
    """What an encoded corpus is: its documents in order and how they are joined and split."""

    files: list[SourceFile]
    hashes: list[str]
    n_train: int | None  # documents before validation starts; None: the tail of the joined text is validation
    separator: str
    kind: str  # tokenizer kind
    # char mode: the characters and the non-UTF-8 files (index -> why), when the hashing pass found them
    vocabulary: tuple[set[str], dict[int, str]] | None = field(default=None, repr=False)
    _identity: str | None = field(default=None, repr=False)

    def identity(self) -> str:
        """The corpus's content key: a single file's SHA-256, else a hash of everything that decides the ids."""
        if self._identity is None and len(self.files) == 1 and self.n_train is None:
            self._identity = self.hashes[0]
        elif self._identity is None:
            files = [[f.name, h] for f, h in zip(self.files, self.hashes)]
            manifest = {"files": files, "n_train": self.n_train, "separator": self.separator}
            self._identity = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode("utf-8")).hexdigest()
        return self._identity


@dataclass
class Encoded:
    tokenizer: Tokenizer
    ids: np.ndarray  # 1-D, read-only memory map (or an in-memory array for tiny texts)
    split: int | None  # where validation starts when whole files were held out
    documents: int
    skipped: list[str]  # non-UTF-8 files left out (char mode)


def _check_utf8(files: Sequence[SourceFile], bad: dict[int, str], key: str) -> list[str]:
    """Non-UTF-8 files in char mode: an error, unless a few in a folder of many (skipped, and said so)."""
    if not bad:
        return []
    first = files[min(bad)]
    hint = "convert it (e.g. iconv -f latin1 -t utf-8) or train on bytes with data.tokenizer=byte"
    if len(files) == 1:
        raise UserError(f"data file {first.path} is not UTF-8 text: {bad[min(bad)]}; {hint}")
    if len(bad) == len(files) or len(bad) > MAX_SKIPPED_SHARE * len(files):
        raise UserError(
            f"{key}: {len(bad)} of {len(files)} files are not UTF-8 text (the first: {first.path}, "
            f"{bad[min(bad)]}); {hint}"
        )
    return [files[i].name for i in sorted(bad)]


def warn_skipped(skipped: Sequence[str], where: str) -> None:
    if skipped:
        print(
            f"warning: {where}: skipped {len(skipped)} file(s) that are not UTF-8 text: {shown(skipped)} "
            "(data.tokenizer=byte reads them)",
            file=sys.stderr,
        )


def encode(
    layout: Layout,
    out: IO[bytes],
    progress: ProgressFactory | None,
    desc: str,
    check_vocab: Callable[[int], None] | None,
    key: str,
) -> tuple[Tokenizer, dict]:
    """Stream the layout's documents into `out`: (tokenizer, the entry's metadata)."""
    files, skipped, n_train = list(layout.files), [], layout.n_train
    total = sum(f.size for f in files)
    passes = 2 if layout.kind == "char" and layout.vocabulary is None else 1
    bar = progress(total, f"encoding {desc}") if progress else None
    tick = (lambda n: bar.update(n / passes)) if bar else (lambda n: None)  # char mode reads it all twice
    try:
        if layout.kind == "byte":
            tok = ByteTokenizer()
        else:
            chars, bad = layout.vocabulary or vocabulary(files, tick)
            skipped = _check_utf8(files, bad, key)
            if n_train is not None:
                n_train -= sum(1 for i in bad if i < n_train)
            files = [f for i, f in enumerate(files) if i not in bad]
            if not chars:
                raise UserError(f"{key}: {desc} holds no text; give it some text to learn from")
            if len(files) > 1:
                chars |= set(layout.separator)
            tok = CharTokenizer(sorted(chars))
            if check_vocab is not None:
                check_vocab(tok.vocab_size)
        length, split = write_ids(out, files, tok, layout.separator, tick, n_train)
    finally:
        if bar:
            bar.close()
    if not length:
        raise UserError(f"{key}: {desc} holds no text; give it some text to learn from")
    meta = {
        "version": CACHE_VERSION,
        "tokenizer": tok.to_dict(),
        "dtype": storage_dtype(tok.vocab_size).name,
        "length": length,
        "split": split,
        "documents": sum(f.documents for f in files),
        "skipped": skipped,
    }
    return tok, meta


class DamagedCache(Exception):
    """A cache entry whose content cannot be what was stored (a bad length, type or id)."""


def _open_entry(bin_path: Path, meta: dict) -> Encoded:
    """A checked memory map of an entry; DamagedCache if it cannot be what was stored."""
    try:
        tok = tokenizer_from_dict(meta["tokenizer"])
        dtype = np.dtype(meta["dtype"])
        length = int(meta["length"])
    except (KeyError, TypeError, ValueError) as e:
        raise DamagedCache(f"has unreadable metadata ({e.__class__.__name__})") from None
    if dtype != storage_dtype(tok.vocab_size):
        raise DamagedCache(f"holds {dtype} ids, not {storage_dtype(tok.vocab_size)}")
    size = bin_path.stat().st_size
    if size != length * dtype.itemsize:
        raise DamagedCache(f"holds {size // dtype.itemsize} ids where {length} were stored")
    ids = np.memmap(bin_path, dtype=dtype, mode="r") if length else np.zeros(0, dtype)
    if tok.vocab_size < np.iinfo(dtype).max + 1:  # a byte model's uint8 ids are all valid
        top = 0  # the largest id, read in chunks: no page of the entry stays mapped into this process
        with open(bin_path, "rb") as f:
            while chunk := f.read(CHUNK - CHUNK % dtype.itemsize):
                top = max(top, int(np.frombuffer(chunk, dtype).max()))
        if top >= tok.vocab_size:
            raise DamagedCache(f"holds id {top} for a vocabulary of {tok.vocab_size}")
    return Encoded(tok, ids, meta.get("split"), int(meta.get("documents", 1)), list(meta.get("skipped", [])))


def load_or_encode(
    layout: Layout,
    cache_dir: Path | None,
    progress: ProgressFactory | None,
    desc: str,
    key: str,
    check_vocab: Callable[[int], None] | None = None,
) -> Encoded:
    """The corpus from the cache, else encoded into it (a damaged entry re-encoded); no cache: a temporary file."""
    if cache_dir is None:
        return _encode_to_temp(layout, progress, desc, key, check_vocab)
    name = f"{layout.identity()}.{layout.kind}"
    bin_path, meta_path = cache_dir / f"{name}.bin", cache_dir / f"{name}.json"
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(
            f"warning: cannot use the encoding cache {cache_dir} ({e.strerror}); encoding into a temporary file",
            file=sys.stderr,
        )
        return _encode_to_temp(layout, progress, desc, key, check_vocab)
    lock = FileLock(cache_dir / f"{name}.lock")  # one process encodes a new entry while others wait and read it
    with contextlib.suppress(OSError):  # unlocked where the lock cannot be made
        lock.acquire()
    try:
        damaged = None
        if bin_path.exists() and meta_path.exists():
            try:
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
                if meta.get("version") == CACHE_VERSION:
                    hit = _open_entry(bin_path, meta)
                    if check_vocab is not None:
                        check_vocab(hit.tokenizer.vocab_size)
                    warn_skipped(hit.skipped, desc)
                    return hit
            except (OSError, ValueError, DamagedCache) as e:
                damaged = str(e) if isinstance(e, DamagedCache) else f"is unreadable ({e.__class__.__name__})"
                print(f"warning: the encoding cache entry {bin_path} {damaged}; re-encoding {desc}", file=sys.stderr)
        try:
            # not durable (no fsync of gigabytes): an entry torn by a crash fails the length check
            with atomic.atomic_open(bin_path, fsync=False) as out:
                tok, meta = encode(layout, out, progress, desc, check_vocab, key)
            payload = json.dumps(meta).encode("utf-8")
            atomic.atomic_write(meta_path, lambda f: f.write(payload))
        except OSError as e:
            if damaged is not None:
                raise UserError(
                    f"the encoding cache entry {bin_path} is damaged and cannot be rewritten ({e.strerror}); delete "
                    f"{bin_path} and {meta_path} (or the whole cache, {cache_dir}) and run again"
                ) from None
            print(
                f"warning: cannot write the encoding cache {cache_dir} ({e.strerror}); using a temporary file",
                file=sys.stderr,
            )
            return _encode_to_temp(layout, progress, desc, key, check_vocab)
        warn_skipped(meta["skipped"], desc)
        return _open_entry(bin_path, meta)
    finally:
        lock.release()


def _encode_to_temp(
    layout: Layout, progress: ProgressFactory | None, desc: str, key: str, check_vocab: Callable[[int], None] | None
) -> Encoded:
    with tempfile.TemporaryFile() as out:  # unlinked: the map keeps it alive, the OS removes it at exit
        tok, meta = encode(layout, out, progress, desc, check_vocab, key)
        out.flush()
        dtype = np.dtype(meta["dtype"])
        ids = np.memmap(out, dtype=dtype, mode="r") if meta["length"] else np.zeros(0, dtype)
    warn_skipped(meta["skipped"], desc)
    return Encoded(tok, ids, meta["split"], meta["documents"], meta["skipped"])

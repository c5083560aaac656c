"""Encoding a corpus once, in bounded memory: stream its files in chunks, write the ids to a flat
binary file of the smallest fitting integer type, and hand back a read-only memory map of it.

A cache entry is named by the corpus's content (for one file its SHA-256; for several, a hash of
their relative names and content hashes, in order, with the separator and the validation choice)
and the tokenizer. Content hashes are kept in a stat index (size and mtime per file, as version
control tools do), so an unchanged corpus is not re-read in full at every start. Every entry is
checked on load at memory speed (length, integer type, no id past the vocabulary)."""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

import numpy as np

from minigpt.data.sources import SourceFile
from minigpt.data.tokenizer import ByteTokenizer, CharTokenizer, Tokenizer
from minigpt.errors import UserError
from minigpt.io.atomic import atomic_write

CACHE_VERSION = 2
CHUNK = 16 << 20  # bytes read at a time: memory stays flat whatever the corpus size
RACY_NS = 2_000_000_000  # a file modified this close to when it was hashed is hashed again (racy mtime)
MAX_SKIPPED_SHARE = 0.1  # in a folder, up to this share of non-UTF-8 files is skipped with a warning


class Progress(Protocol):
    def update(self, n: int) -> Any: ...
    def close(self) -> Any: ...


ProgressFactory = Callable[[int, str], Progress]


def storage_dtype(vocab_size: int) -> np.dtype:
    """The smallest integer type that holds every id."""
    if vocab_size <= 256:
        return np.dtype(np.uint8)
    return np.dtype(np.uint16) if vocab_size <= 65536 else np.dtype(np.int32)


def _chunks(path: str | Path, size: int = CHUNK) -> Iterator[bytes]:
    try:
        with open(path, "rb") as f:
            while chunk := f.read(size):
                yield chunk
    except OSError as e:
        raise UserError(f"cannot read data file {path}: {e.strerror}") from None


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    for chunk in _chunks(path):
        h.update(chunk)
    return h.hexdigest()


class HashIndex:
    """Content hashes of the files of one data.path, by (size, mtime): a file whose size and mtime
    are those recorded is not re-hashed, unless it was modified within RACY_NS of the recording."""

    def __init__(self, cache_dir: Path | None, spec: Any) -> None:
        key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode("utf-8")).hexdigest()[:32]
        self.path = cache_dir / "index" / f"{key}.json" if cache_dir is not None else None
        self.entries: dict[str, list] = {}
        self.changed = False
        if self.path is not None and self.path.exists():
            with contextlib.suppress(OSError, ValueError):
                self.entries = json.loads(self.path.read_text(encoding="utf-8")).get("files", {})

    def knows(self, f: SourceFile) -> bool:
        known = self.entries.get(f.path)
        return bool(known) and known[0] == f.size and known[1] == f.mtime_ns and known[3] - f.mtime_ns > RACY_NS

    def sha256(self, f: SourceFile, on_read: Callable[[int], None] | None = None) -> str:
        if self.knows(f):
            return self.entries[f.path][2]
        sha = file_sha256(f.path)
        self.entries[f.path] = [f.size, f.mtime_ns, sha, time.time_ns()]
        self.changed = True
        if on_read:
            on_read(f.size)
        return sha

    def save(self) -> None:
        if self.path is None or not self.changed:
            return
        with contextlib.suppress(OSError):  # best effort: without it the next start re-hashes
            self.path.parent.mkdir(parents=True, exist_ok=True)
            payload = json.dumps({"files": self.entries}).encode("utf-8")
            atomic_write(self.path, lambda fh: fh.write(payload))


@dataclass
class Layout:
    """What an encoded corpus is: its documents in order and how they are joined and split."""

    files: list[SourceFile]
    hashes: list[str]
    n_train: int | None  # documents before validation starts; None: the tail of the joined text is validation
    separator: str
    kind: str  # tokenizer kind
    _identity: str | None = field(default=None, repr=False)

    def identity(self) -> str:
        """The corpus's content key: a single file's own SHA-256 (as checkpoints have always
        recorded it), else a hash of everything that decides the ids."""
        if self._identity is None:
            self._identity = self._key()
        return self._identity

    def _key(self) -> str:
        if len(self.files) == 1 and self.n_train is None:
            return self.hashes[0]
        manifest = {
            "files": [[f.name, h] for f, h in zip(self.files, self.hashes)],
            "n_train": self.n_train,
            "separator": self.separator,
        }
        return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode("utf-8")).hexdigest()


@dataclass
class Encoded:
    tokenizer: Tokenizer
    ids: np.ndarray  # 1-D, read-only memory map (or an in-memory array for tiny texts)
    split: int | None  # where validation starts when whole files were held out
    documents: int
    skipped: list[str]  # non-UTF-8 files left out (char mode)


# ---- the streaming passes -------------------------------------------------------------------


def _utf8_error(e: UnicodeDecodeError, offset: int, raw: bytes) -> str:
    pos = offset + e.start
    line = raw.count(b"\n", 0, e.start) + 1  # within the chunk: exact for the first chunk, a hint after
    return f"byte 0x{raw[e.start]:02x} at offset {pos}" + (f" (line {line})" if offset == 0 else "")


def _vocabulary(files: Sequence[SourceFile], tick: Callable[[int], None]) -> tuple[set[str], dict[int, str]]:
    """The distinct characters of the UTF-8 files, and the files that are not UTF-8 (index -> why)."""
    seen = b""  # the ASCII bytes met so far
    points = np.zeros(0x110000, dtype=bool)
    bad: dict[int, str] = {}
    for i, f in enumerate(files):
        decoder = codecs.getincrementaldecoder("utf-8")()
        offset = 0
        for chunk in _chunks(f.path):
            tick(len(chunk))
            try:
                if chunk.isascii() and not decoder.getstate()[0]:
                    # deleting the bytes already met leaves only new ones: ~2 GB/s, nothing new is the usual case
                    new = chunk.translate(None, seen)
                    if new:
                        seen = bytes(sorted(set(seen) | set(new)))
                else:
                    text = decoder.decode(chunk)
                    points[np.frombuffer(text.encode("utf-32-le"), np.uint32)] = True
            except UnicodeDecodeError as e:
                bad[i] = _utf8_error(e, offset, chunk)
                break
            offset += len(chunk)
        else:
            try:
                decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                bad[i] = "a truncated character at its end"
    points[list(seen)] = True
    return {chr(p) for p in np.flatnonzero(points)}, bad


class _CharWriter:
    """Character ids through lookup tables: ASCII chunks by bytes.translate, the rest by code point."""

    def __init__(self, tok: CharTokenizer, dtype: np.dtype) -> None:
        points = np.array([ord(c) for c in tok.chars], dtype=np.int64)
        self.lut = np.zeros(int(points.max()) + 1, dtype=dtype)
        self.lut[points] = np.arange(len(points))
        self.translate = None
        if dtype == np.uint8:  # a bytes -> bytes table: ASCII text encodes at memory speed
            table = np.zeros(256, dtype=np.uint8)
            ascii_points = points[points < 128]
            table[ascii_points] = self.lut[ascii_points]
            self.translate = table.tobytes()
        self.dtype = dtype

    def encode(self, decoder: codecs.IncrementalDecoder, chunk: bytes, final: bool = False) -> bytes:
        if self.translate is not None and chunk.isascii() and not decoder.getstate()[0]:
            return chunk.translate(self.translate)
        text = decoder.decode(chunk, final=final)
        return self.lut[np.frombuffer(text.encode("utf-32-le"), np.uint32)].tobytes()


def _write_ids(out: IO[bytes], files: Sequence[SourceFile], tok: Tokenizer, separator: str,
               tick: Callable[[int], None]) -> tuple[int, list[int]]:  # fmt: skip
    """Write every document's ids, joined by the separator's; (ids written, where each document starts)."""
    dtype = storage_dtype(tok.vocab_size)
    sep = np.asarray(tok.encode_array(separator), dtype=dtype).tobytes() if len(files) > 1 else b""
    char = _CharWriter(tok, dtype) if isinstance(tok, CharTokenizer) else None
    written, starts = 0, []
    for n, f in enumerate(files):
        if n and sep:
            out.write(sep)
            written += len(sep) // dtype.itemsize
        starts.append(written)
        decoder = codecs.getincrementaldecoder("utf-8")()
        size = 0
        for chunk in _chunks(f.path):
            size += len(chunk)
            tick(len(chunk))
            data = chunk if char is None else char.encode(decoder, chunk)
            out.write(data)
            written += len(data) // dtype.itemsize
        if char is not None:
            out.write(char.encode(decoder, b"", final=True))
        _check_unchanged(f, size)
    return written, starts


def _check_unchanged(f: SourceFile, size_read: int) -> None:
    try:
        st = os.stat(f.path)
    except OSError as e:
        raise UserError(f"data file {f.path} went away while it was being encoded ({e.strerror})") from None
    if size_read != f.size or st.st_size != f.size or st.st_mtime_ns != f.mtime_ns:
        raise UserError(
            f"data file {f.path} changed while it was being encoded; run again once nothing is writing to it"
        )


def _check_utf8(files: Sequence[SourceFile], bad: dict[int, str], key: str) -> list[str]:
    """Non-UTF-8 files in char mode: an error, unless they are a few in a folder of many (then
    they are skipped, and said so)."""
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
        shown = ", ".join(skipped[:3]) + (", ..." if len(skipped) > 3 else "")
        print(f"warning: {where}: skipped {len(skipped)} file(s) that are not UTF-8 text: {shown} "
              "(data.tokenizer=byte reads them)", file=sys.stderr)  # fmt: skip


def encode(layout: Layout, out: IO[bytes], progress: ProgressFactory | None, desc: str,
           check_vocab: Callable[[int], None] | None, key: str) -> tuple[Tokenizer, dict]:  # fmt: skip
    """Stream the layout's documents into `out`: (tokenizer, the entry's metadata)."""
    files, skipped = list(layout.files), []
    total = sum(f.size for f in files)
    passes = 2 if layout.kind == "char" else 1
    bar = progress(total, f"encoding {desc}") if progress else None
    tick = (lambda n: bar.update(n / passes)) if bar else (lambda n: None)  # char mode reads it all twice
    try:
        if layout.kind == "byte":
            tok = ByteTokenizer()
        else:
            chars, bad = _vocabulary(files, tick)
            skipped = _check_utf8(files, bad, key)
            keep = [i for i in range(len(files)) if i not in bad]
            n_train = layout.n_train
            if n_train is not None:
                n_train -= sum(1 for i in bad if i < n_train)
            files = [files[i] for i in keep]
            layout = Layout(files, [layout.hashes[i] for i in keep], n_train, layout.separator, layout.kind)
            if not chars:
                raise UserError(f"{key}: {desc} holds no text; give it some text to learn from")
            if len(files) > 1:
                chars |= set(layout.separator)
            tok = CharTokenizer(sorted(chars))
            if check_vocab is not None:
                check_vocab(tok.vocab_size)
        length, starts = _write_ids(out, files, tok, layout.separator, tick)
    finally:
        if bar:
            bar.close()
    if not length:
        raise UserError(f"{key}: {desc} holds no text; give it some text to learn from")
    split = starts[layout.n_train] if layout.n_train is not None else None
    meta = {
        "version": CACHE_VERSION, "tokenizer": tok.to_dict(), "dtype": storage_dtype(tok.vocab_size).name,
        "length": length, "split": split, "documents": len(files), "skipped": skipped,
    }  # fmt: skip
    return tok, meta

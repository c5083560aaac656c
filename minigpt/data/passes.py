"""The passes over a corpus's bytes that encoding makes: reading files (small ones whole, many at a time;
large ones in chunks), finding the vocabulary and the files that are not UTF-8 text, and writing the ids."""

from __future__ import annotations

import codecs
import hashlib
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from minigpt.data.sources import SourceFile
from minigpt.data.tokenizer import CharTokenizer, Tokenizer
from minigpt.errors import UserError

CHUNK = 16 << 20  # bytes read at a time: memory stays flat whatever the corpus size
BINARY_HEAD = 8000  # bytes looked at for a NUL: what git looks at to call a file binary (ripgrep: its first read)
BATCH = 1 << 20  # small files are read whole and handled this many bytes at a time: a real source
# tree has tens of thousands of files of a few KB, and per-file numpy and decoder calls cost more
# than the bytes (benchmark `scripts/bench.py data --only tree`)
NON_ASCII = bytes(range(128, 256))
CONTINUATION = bytes(range(0x80, 0xC0))  # UTF-8's bytes after a character's first
FIRST = 255  # marks a non-ASCII character's first byte while encoding (ASCII ids, numbered first, are lower)


def storage_dtype(vocab_size: int) -> np.dtype:
    """The smallest integer type that holds every id."""
    if vocab_size <= 256:
        return np.dtype(np.uint8)
    return np.dtype(np.uint16) if vocab_size <= 65536 else np.dtype(np.int32)


def chunks(path: str | Path, size: int = CHUNK, expect: int | None = None) -> Iterator[bytes]:
    """A file's bytes in chunks; given its size (`expect`), a small file is one read of that size plus one byte."""
    try:
        with open(path, "rb", buffering=0) as f:  # unbuffered: no copy through a buffer
            if expect is not None and expect < size:
                chunk = f.read(expect + 1)
                yield chunk
                if len(chunk) <= expect:
                    return  # the end (a regular file reads short only there)
            while chunk := f.read(size):
                yield chunk
    except OSError as e:
        raise UserError(f"cannot read data file {path}: {e.strerror}") from None


def looks_binary(head: bytes | bytearray | memoryview) -> bool:
    """A NUL byte near the start: the test git and ripgrep make for a binary file (text has none)."""
    return b"\0" in head[:BINARY_HEAD]


def _utf8_error(e: UnicodeDecodeError, offset: int, raw: bytes) -> str:
    pos = offset + e.start
    line = raw.count(b"\n", 0, e.start) + 1  # within the chunk: exact for the first chunk, a hint after
    return f"byte 0x{raw[e.start]:02x} at offset {pos}" + (f" (line {line})" if offset == 0 else "")


def _read_whole(f: SourceFile) -> bytes:
    """A small file's bytes: one open, one read of its size and a byte more, one close (os calls)."""
    try:
        fd = os.open(f.path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        try:
            data = os.read(fd, f.size + 1)
        finally:
            os.close(fd)
    except OSError as e:
        raise UserError(f"cannot read data file {f.path}: {e.strerror}") from None
    return data if len(data) <= f.size else b"".join(chunks(f.path))  # it grew: all of it (then refused)


def _batches(
    files: Sequence[SourceFile], tick: Callable[[int], None], sep: bytes = b""
) -> Iterator[tuple[bytearray | None, list[tuple[int, int, int]], SourceFile | None]]:
    """Consecutive small files joined, `sep` before each but the corpus's first: (their bytes,
    [(file index, start, end) in the bytes], None); a large file alone, not read: (None,
    [(index, 0, 0)], the file), for the caller to stream (and to put its separator before)."""
    blob, members = bytearray(), []
    for i, f in enumerate(files):
        if f.size > BATCH:
            if members:
                yield blob, members, None
                blob, members = bytearray(), []
            yield None, [(i, 0, 0)], f
            continue
        if i and sep:
            blob += sep
        start = len(blob)
        blob += _read_whole(f)
        tick(len(blob) - start)
        members.append((i, start, len(blob)))
        if len(blob) >= BATCH:
            yield blob, members, None
            blob, members = bytearray(), []
    if members:
        yield blob, members, None


class _BackgroundJobs:
    """Jobs run in order on a second thread, at most `depth` waiting; a job's error is raised in the caller."""

    def __init__(self, depth: int) -> None:
        self.depth, self.pending = depth, deque[Future]()
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="minigpt-encode")

    def submit(self, job: Callable[..., object], *args: object) -> None:
        self.pending.append(self.pool.submit(job, *args))
        while len(self.pending) > self.depth:
            self.pending.popleft().result()

    def __enter__(self) -> _BackgroundJobs:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            while self.pending and exc[0] is None:
                self.pending.popleft().result()
        finally:  # on an error, nothing more starts, and what runs ends before the caller goes on
            self.pool.shutdown(wait=True, cancel_futures=True)


class _Vocabulary:
    """The distinct characters of the UTF-8 files, and the files that are not UTF-8 (index -> why)."""

    def __init__(self) -> None:
        self.seen = b""  # the ASCII bytes met so far
        self.points = np.zeros(0x110000, dtype=bool)
        self.bad: dict[int, str] = {}

    def _ascii(self, data: bytes) -> None:
        # deleting the bytes already met leaves only new ones (memory speed); nothing new is the usual case
        new = data.translate(None, self.seen + NON_ASCII)
        if new:
            self.seen = bytes(sorted(set(self.seen) | set(new)))

    def _text(self, text: str) -> None:
        self.points[np.frombuffer(text.encode("utf-32-le"), np.uint32)] = True

    def add_whole(self, blob: bytes | bytearray, members: list[tuple[int, int, int]]) -> None:
        """Complete files joined: only their non-ASCII characters go through numpy."""
        if blob.isascii():
            self._ascii(blob)
        elif (part := non_ascii(blob, [s for _, s, _ in members])) is not None:
            self._ascii(blob)
            self._text(part.text)
        else:  # a file that is not UTF-8 among them: one by one, and none of its characters count
            for i, s, e in members:
                if (part := non_ascii(piece := blob[s:e])) is None:
                    self.bad[i] = _utf8_fault(piece)
                    continue
                self._ascii(piece)
                self._text(part.text)

    def add_streamed(
        self, i: int, f: SourceFile, tick: Callable[[int], None], observe: Callable[[bytes], object] | None = None
    ) -> None:
        """A large file in chunks; `observe` sees every chunk, even past a fault that ends the scan."""
        decoder = codecs.getincrementaldecoder("utf-8")()
        offset = 0
        for chunk in chunks(f.path):
            tick(len(chunk))
            if observe is not None:
                observe(chunk)
            if i in self.bad:
                if observe is None:
                    return
                continue
            try:
                if chunk.isascii() and not decoder.getstate()[0]:
                    self._ascii(chunk)
                else:
                    self._text(decoder.decode(chunk))
            except UnicodeDecodeError as e:
                self.bad[i] = _utf8_error(e, offset, chunk)
            offset += len(chunk)
        if i not in self.bad:
            try:
                decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                self.bad[i] = "a truncated character at its end"

    def chars(self) -> set[str]:
        self.points[list(self.seen)] = True
        return {chr(p) for p in np.flatnonzero(self.points)}


@dataclass
class _NonAscii:
    """Where UTF-8 text leaves ASCII: its non-ASCII bytes' positions, which of them continue a
    character, and the characters they make."""

    at: np.ndarray  # positions of the bytes >= 0x80
    continues: np.ndarray  # bool, per such byte: a continuation byte (not a character's first)
    text: str  # the non-ASCII characters, in order


def non_ascii(blob: bytes | bytearray, starts: Sequence[int] = (0,)) -> _NonAscii | None:
    """The non-ASCII part of joined files (each starting at one of `starts`), or None if one is not UTF-8:
    valid when the non-ASCII bytes alone decode, each continuation byte directly follows the byte
    before it, and no file starts on one."""
    arr = np.frombuffer(blob, np.uint8)
    at = np.flatnonzero(arr >= 0x80)
    continues = (arr[at] & 0xC0) == 0x80
    try:
        text = arr[at].tobytes().decode("utf-8")
    except UnicodeDecodeError:
        return None
    if len(at) and (continues[0] or not np.all(np.diff(at)[continues[1:]] == 1)):
        return None  # an ASCII byte inside a character
    if any(s < len(blob) and blob[s] & 0xC0 == 0x80 for s in starts):
        return None  # a file starts inside a character (the one before it ends in one)
    return _NonAscii(at, continues, text)


def _utf8_fault(data: bytes) -> str:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return "a truncated character at its end" if e.reason == "unexpected end of data" else _utf8_error(e, 0, data)
    return "not UTF-8 text"


def vocabulary(files: Sequence[SourceFile], tick: Callable[[int], None]) -> tuple[set[str], dict[int, str]]:
    vocab = _Vocabulary()
    for blob, members, large in _batches(files, tick):
        if large is None:
            vocab.add_whole(blob, members)
        else:
            vocab.add_streamed(members[0][0], large, tick)
    return vocab.chars(), vocab.bad


def _hash_streamed(i: int, f: SourceFile, vocab: _Vocabulary, tick: Callable[[int], None]) -> tuple[str, bool]:
    """A large file's SHA-256, its 16 MB chunks hashed on a second thread while the next is read,
    and whether it looks binary, from the vocabulary's own read of it."""
    h, first = hashlib.sha256(), []
    with _BackgroundJobs(depth=1) as background:

        def take(chunk: bytes) -> None:
            if not first:
                first.append(looks_binary(chunk))
            background.submit(h.update, chunk)

        vocab.add_streamed(i, f, tick, take)
    return h.hexdigest(), bool(first and first[0])


def hashes_and_vocabulary(
    files: Sequence[SourceFile], tick: Callable[[int], None]
) -> tuple[list[str], set[str], dict[int, str], set[int]]:
    """Each file's SHA-256, `vocabulary`'s result and the files that look binary, from one read of every file."""
    vocab, hashes, binary = _Vocabulary(), [""] * len(files), set()
    for blob, members, large in _batches(files, tick):
        if large is None:
            view = memoryview(blob)
            for i, s, e in members:
                hashes[i] = hashlib.sha256(view[s:e]).hexdigest()
            del view  # a live view would pin the blob
            if b"\0" in blob:  # one scan at memory speed; text holds no NUL, so this is rare
                binary.update(i for i, s, e in members if blob.find(b"\0", s, min(e, s + BINARY_HEAD)) >= 0)
            vocab.add_whole(blob, members)
        else:
            i = members[0][0]
            hashes[i], is_binary = _hash_streamed(i, large, vocab, tick)
            if is_binary:
                binary.add(i)
    return hashes, vocab.chars(), vocab.bad, binary


class _CharWriter:
    """Character ids through lookup tables: ASCII by bytes (bytes.translate into uint8 ids, a
    256-entry table into wider ones), the rest by code point."""

    def __init__(self, tok: CharTokenizer, dtype: np.dtype) -> None:
        points = np.array([ord(c) for c in tok.chars], dtype=np.int64)
        self.lut = np.zeros(int(points.max()) + 1, dtype=dtype)
        self.lut[points] = np.arange(len(points))
        ascii_points = points[points < 128]
        self.ascii = np.zeros(256, dtype=dtype)
        self.ascii[ascii_points] = self.lut[ascii_points]
        # ASCII at memory speed: bytes.translate into uint8 ids, widened if the type is wider (a
        # sorted vocabulary numbers ASCII first, so its ids always fit a byte)
        self.translate = self.ascii.astype(np.uint8).tobytes() if self.ascii.max() < FIRST else None
        self.firsts = bytes(int(self.ascii[b]) if b < 128 else FIRST for b in range(256)) if self.translate else b""
        self.dtype = dtype

    def encode(self, decoder: codecs.IncrementalDecoder, chunk: bytes, final: bool = False) -> bytes | np.ndarray:
        if chunk.isascii() and not decoder.getstate()[0]:
            return self._ascii(chunk)
        text = decoder.decode(chunk, final=final)
        return self.lut[np.frombuffer(text.encode("utf-32-le"), np.uint32)].tobytes()

    def encode_whole(self, text: bytes | bytearray) -> bytes | bytearray | np.ndarray:
        """Complete UTF-8 text (whole files), checked when the vocabulary was read. One translate
        maps ASCII to ids and each other character's first byte to FIRST, and deletes the rest of
        its bytes; then the few non-ASCII characters' ids go where FIRST stands."""
        if text.isascii():
            return self._ascii(text)
        if self.translate is None:  # an unsorted vocabulary: the plain way
            return self.lut[np.frombuffer(text.decode("utf-8").encode("utf-32-le"), np.uint32)].tobytes()
        chars = np.frombuffer(text.translate(self.firsts, CONTINUATION), np.uint8)
        at = np.flatnonzero(chars == FIRST)
        raw = np.frombuffer(text, np.uint8)
        rest = raw[raw >= 0x80].tobytes()  # the non-ASCII bytes: numpy picks them faster than a deleting translate
        points = np.frombuffer(rest.decode("utf-8").encode("utf-32-le"), np.uint32)
        if len(points) != len(at):  # not what the vocabulary pass read
            raise UserError("a data file changed while it was being encoded; run again once nothing is writing to it")
        ids = chars.astype(self.dtype)  # a copy: writable
        ids[at] = self.lut[points]
        return ids

    def _ascii(self, chunk: bytes) -> bytes | np.ndarray:
        """Each byte's id as if it were ASCII; an array goes out as it is, not copied into bytes."""
        if self.translate is None:
            return self.ascii[np.frombuffer(chunk, np.uint8)]
        if self.dtype == np.uint8:
            return chunk.translate(self.translate)
        return np.frombuffer(chunk.translate(self.translate), np.uint8).astype(self.dtype)


def write_ids(
    out: IO[bytes],
    files: Sequence[SourceFile],
    tok: Tokenizer,
    separator: str,
    tick: Callable[[int], None],
    split_at: int | None = None,
) -> tuple[int, int | None]:
    """Write every document's ids, joined by the separator's, to `out`, a buffered file (which
    writes all it is given or raises): (ids written, where document `split_at` starts)."""
    dtype = storage_dtype(tok.vocab_size)
    sep = separator.encode("utf-8") if len(files) > 1 else b""
    char = _CharWriter(tok, dtype) if isinstance(tok, CharTokenizer) else None
    written, split = 0, None
    background = _BackgroundJobs(depth=1)  # one write runs while the next batch's ids are made

    def put(data: bytes | bytearray | np.ndarray) -> None:
        nonlocal written
        background.submit(out.write, data)  # an array as it is: its buffer, not a copy
        written += (data.nbytes if isinstance(data, np.ndarray) else len(data)) // dtype.itemsize

    def put_text(text: bytes | bytearray) -> None:
        put(text if char is None else char.encode_whole(text))

    with background:
        for blob, members, large in _batches(files, tick, sep):
            if large is not None:
                i = members[0][0]
                put_text(sep if i and sep else b"")
                split = written if i == split_at else split
                decoder, size = codecs.getincrementaldecoder("utf-8")(), 0
                for chunk in chunks(large.path):
                    size += len(chunk)
                    tick(len(chunk))
                    put(chunk if char is None else char.encode(decoder, chunk))
                if char is not None:
                    put(char.encode(decoder, b"", final=True))
                _check_unchanged(large, size)
                continue
            cut = 0  # the separators are in the blob already: it goes out whole, or in two at the split
            for i, s, e in members:
                _check_unchanged(files[i], e - s)
                if i == split_at:
                    put_text(blob[:s])
                    cut, split = s, written
            put_text(blob[cut:] if cut else blob)
    return written, split


def _check_unchanged(f: SourceFile, size_read: int) -> None:
    try:
        st = os.stat(f.path)
    except OSError as e:
        raise UserError(f"data file {f.path} went away while it was being encoded ({e.strerror})") from None
    if size_read != f.size or st.st_size != f.size or st.st_mtime_ns != f.mtime_ns:
        raise UserError(
            f"data file {f.path} changed while it was being encoded; run again once nothing is writing to it"
        )

"""The encoding cache: one entry per corpus content and tokenizer (`<key>.<kind>.bin` ids, `.json` what they
are), written once, locked while made, checked on every load and re-encoded when damaged (docs/data.md)."""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from minigpt.data import encoding
from minigpt.data.encoding import CACHE_VERSION, Encoded, Layout, ProgressFactory, warn_skipped
from minigpt.data.passes import CHUNK, storage_dtype
from minigpt.data.tokenizer import tokenizer_from_dict
from minigpt.errors import UserError
from minigpt.io import atomic
from minigpt.io.lock import FileLock


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
        top = max_id(bin_path, dtype)
        if top >= tok.vocab_size:
            raise DamagedCache(f"holds id {top} for a vocabulary of {tok.vocab_size}")
    return Encoded(tok, ids, meta.get("split"), int(meta.get("documents", 1)), list(meta.get("skipped", [])))


def max_id(path: Path, dtype: np.dtype) -> int:
    """The largest id in an entry, read in chunks (no page of it stays mapped into this process)."""
    top = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK - CHUNK % dtype.itemsize):
            top = max(top, int(np.frombuffer(chunk, dtype).max()))
    return top


@contextlib.contextmanager
def _entry_lock(path: Path) -> Iterator[None]:
    """One process encodes a new entry while others wait and read it; unlocked where the lock cannot be made."""
    lock = FileLock(path)
    with contextlib.suppress(OSError):
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


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
    with _entry_lock(cache_dir / f"{name}.lock"):
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
                tok, meta = encoding.encode(layout, out, progress, desc, check_vocab, key)
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


def _encode_to_temp(
    layout: Layout, progress: ProgressFactory | None, desc: str, key: str, check_vocab: Callable[[int], None] | None
) -> Encoded:
    with tempfile.TemporaryFile() as out:  # unlinked: the map keeps it alive, the OS removes it at exit
        tok, meta = encoding.encode(layout, out, progress, desc, check_vocab, key)
        out.flush()
        dtype = np.dtype(meta["dtype"])
        ids = np.memmap(out, dtype=dtype, mode="r") if meta["length"] else np.zeros(0, dtype)
    warn_skipped(meta["skipped"], desc)
    return Encoded(tok, ids, meta["split"], meta["documents"], meta["skipped"])

"""Crash-safe file writes, the package's one mechanism for them: a crash leaves the old file or the new
one, never a partial file. Durable by default; `fsync=False` only for files checked when read and rebuilt
when torn (the encoding cache)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO


def default_file_mode() -> int:
    """0666 less the process umask: the mode open() would give a new file (mkstemp gives 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_open(path: Path, *, fsync: bool = True) -> Iterator[BinaryIO]:
    """A file to write `path` through: it replaces `path` when the block ends, and on any exception
    (KeyboardInterrupt included) it is removed and `path` is left as it was."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if hasattr(os, "fchmod"):  # not on Windows before Python 3.13, where mkstemp's mode is moot
            os.fchmod(fd, default_file_mode())
        with os.fdopen(fd, "wb") as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # the write's own error is the one to report
            os.unlink(tmp)
        raise
    if fsync:  # the rename made durable, where the filesystem can fsync a folder (not all, nor Windows, can)
        with contextlib.suppress(OSError):
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write `path` through `write(file)` atomically and durably."""
    with atomic_open(path) as f:
        write(f)

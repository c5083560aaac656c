"""Crash-safe file writes: a temporary file in the same directory, flushed and fsynced, then renamed
over the target. A crash at any moment leaves the old file or the new one, never a partial file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def default_file_mode() -> int:
    """0666 less the process umask: the mode open() would give a new file (mkstemp gives 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write `path` through `write(file)` atomically and durably."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, default_file_mode())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # make the rename itself durable
        finally:
            os.close(dir_fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the rename is still atomic

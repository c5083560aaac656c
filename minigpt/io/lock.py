"""The package's one lock between processes: filelock's native lock, which the kernel drops when its holder
ends (kill -9 included); no soft lock, so a filesystem that cannot lock goes unlocked."""

from __future__ import annotations

import errno
import os
from pathlib import Path


class LockHeld(Exception):
    """Another process holds the lock; `owner` is the pid it wrote, or "unknown"."""

    def __init__(self, path: Path, owner: str) -> None:
        super().__init__(f"{path} is locked by another process (pid {owner})")
        self.path, self.owner = path, owner


class FileLock:
    """An exclusive lock on `path` (created if missing, never deleted) from acquire() to release();
    non-blocking raises LockHeld at once."""

    def __init__(self, path: Path, *, blocking: bool = True) -> None:
        self.path, self.blocking, self._lock = path, blocking, None

    def acquire(self) -> bool:
        """True once held, False on a filesystem without locks; OSError when the file cannot be made."""
        import filelock  # here: its import (0.1 s) is paid only by those who lock

        lock = filelock.FileLock(
            self.path,
            blocking=self.blocking,
            thread_local=False,  # one hold per object, whichever thread releases it
            fallback_to_soft=False,
            preserve_lock_file=True,  # Windows would delete it on release
            on_acquired=_write_owner,
        )
        try:
            lock.acquire()
        except filelock.Timeout:
            raise LockHeld(self.path, read_owner(self.path)) from None
        except OSError as e:
            if e.errno in (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP):
                return False
            raise
        self._lock = lock
        return True

    def release(self) -> None:
        """Let the lock go; nothing if it is not held."""
        if self._lock is not None:
            self._lock, lock = None, self._lock
            lock.release()


def _write_owner(fd: int) -> None:
    """The holder's pid, after a newline: on Windows the lock covers byte 0, which others cannot read."""
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, f"\n{os.getpid()}\n".encode("ascii"))


def read_owner(path: Path) -> str:
    """The pid the holder of `path` wrote, or "unknown"."""
    try:
        with open(path, "rb") as f:
            f.seek(1 if os.name == "nt" else 0)
            text = f.read(32)
    except OSError:
        return "unknown"
    return text.decode("ascii", "replace").strip() or "unknown"

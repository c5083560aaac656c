"""The package's one lock between processes, on a file. Two places need one: a run directory (one
training at a time: a second is refused at once and told the holder's pid) and an encoding cache
entry (a second process starting on the same new corpus waits while the first encodes it).

It is the `filelock` package's native lock: `flock` on POSIX, `LockFileEx` on Windows (where fcntl
locks would do nothing). Both belong to an open file, so the kernel drops the lock when its holder
ends in any way, kill -9 included: no stale lock outlives a crash. filelock's soft lock (a marker
file, which a killed holder leaves behind) is refused: on a filesystem without native locks
(ENOSYS, ENOLCK) the lock is not taken and the caller goes on unlocked. The lock file is never
truncated by a waiter nor deleted on release.

The holder writes its pid into the file after a newline: on Windows the lock covers byte 0 and
keeps other processes from reading it, so the pid starts at byte 1."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from filelock import BaseFileLock

NO_LOCKS = frozenset({errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP})  # a filesystem that cannot lock


class LockHeld(Exception):
    """A non-blocking acquire found the lock held by another process; `owner` is the pid it
    wrote, or "unknown" (it has not written it yet, or the file cannot be read)."""

    def __init__(self, path: Path, owner: str) -> None:
        super().__init__(f"{path} is locked by another process (pid {owner})")
        self.path = path
        self.owner = owner


class FileLock:
    """An exclusive lock on `path` (created if missing), held from acquire() to release(), or for
    a `with` block. Blocking waits for the holder to let go; non-blocking raises LockHeld at once."""

    def __init__(self, path: Path, *, blocking: bool = True) -> None:
        self.path = path
        self.blocking = blocking
        self._lock: BaseFileLock | None = None

    def acquire(self) -> bool:
        """Take the lock: True once held, False on a filesystem that has none (see above). LockHeld
        when non-blocking and held elsewhere; OSError when the file cannot be opened or made."""
        import filelock  # here, not at the top: its import is paid only by those who lock

        lock = filelock.FileLock(
            self.path,
            timeout=-1 if self.blocking else 0,
            thread_local=False,  # one hold per object, released by whichever thread ends it
            fallback_to_soft=False,
            preserve_lock_file=True,  # Windows would delete it on release; POSIX keeps it anyway
            on_acquired=_write_owner,
        )
        try:
            lock.acquire()
        except filelock.Timeout:
            raise LockHeld(self.path, read_owner(self.path)) from None
        except OSError as e:
            if e.errno in NO_LOCKS:
                return False
            raise
        self._lock = lock
        return True

    def release(self) -> None:
        """Let the lock go; nothing if it is not held."""
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.release()

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def _write_owner(fd: int) -> None:
    """Record this process as the holder (filelock calls this with the lock held)."""
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, f"\n{os.getpid()}\n".encode("ascii"))


def read_owner(path: Path) -> str:
    """The pid the holder of `path` wrote, or "unknown"."""
    try:
        with open(path, "rb") as f:
            if os.name == "nt":
                f.seek(1)  # byte 0 is the one LockFileEx locks: reading it fails while the lock is held
            text = f.read(32)
    except OSError:
        return "unknown"
    return text.decode("ascii", "replace").strip() or "unknown"

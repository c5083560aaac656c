"""Room on disk: what a filesystem has free, and a failed write (an OSError, or torch's zip writer's
`RuntimeError`, which hides the errno) as one `WriteError` line. Standard library only (no torch)."""

from __future__ import annotations

import contextlib
import errno
import shutil
from collections.abc import Iterator
from pathlib import Path

from minigpt.errors import WriteError, first_line

_WHY = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the filesystem is read-only",
    errno.EIO: "an I/O error (a failing or disconnected disk)",
}
_FIX = {
    errno.ENOSPC: "free space there or train into another --out",
    errno.EDQUOT: "free space within your quota or train into another --out",
    errno.EROFS: "train into a writable --out (or remount the filesystem read-write)",
    errno.EIO: "check the disk (dmesg) or train into another --out",
}
# how torch's zip writer (PyTorchStreamWriter) reports a write that did not complete
_TORCH_WRITER = ("inline_container", "unexpected pos", "PytorchStreamWriter failed", "file write failed")


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged process may still write on the filesystem of `path` (or its nearest parent), or None."""
    path = Path(path).absolute()
    for candidate in (path, *path.parents):
        if candidate.exists():
            try:
                return shutil.disk_usage(candidate).free
            except OSError:
                return None
    return None


def size_text(n: int | None) -> str:
    """3.4 MB, 512 KB, 900 bytes: decimal units, like `df -H`."""
    if n is None:
        return "an unknown amount"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def write_error(path: Path, e: BaseException, needed: int | None, after: str = "") -> WriteError:
    """The one line for a failed write of `path` (`needed` bytes), with `after` (what was kept, how to go on)."""
    free = free_bytes(path.parent)
    code = e.errno if isinstance(e, OSError) else None
    if code is None and needed is not None and free is not None and free < needed:
        code = errno.ENOSPC  # torch's writer: the space that is left tells what happened
    why = _WHY.get(code) or (e.strerror if isinstance(e, OSError) and e.strerror else first_line(e))
    fix = _FIX.get(code, "check the disk or train into another --out")
    need = f"needed {size_text(needed)}" if needed is not None else "needed more room"
    tail = f"; {after}" if after else ""
    return WriteError(f"cannot write {path}: {why} ({need}, {size_text(free)} free); {fix}{tail}")


@contextlib.contextmanager
def write_errors(path: Path, needed: int | None, after: str = "") -> Iterator[None]:
    """Report a failed write of `path` inside the block as a `WriteError` (one line, exit 74)."""
    try:
        yield
    except WriteError:
        raise
    except (OSError, RuntimeError) as e:
        if not isinstance(e, OSError) and not any(marker in str(e) for marker in _TORCH_WRITER):
            raise  # a RuntimeError that is not torch's for a checkpoint write that did not complete
        raise write_error(path, e, needed, after) from None

"""Reading a text file a user named (one error line for each way it can be wrong), and a JSON file
minigpt wrote itself. Standard library only."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

from minigpt.errors import UserError

_KINDS = [
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (a named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
]


def not_a_file(mode: int) -> str | None:
    """What a non-regular file is ("a character device"), or None for a regular file: reading one may never end."""
    return None if stat.S_ISREG(mode) else next((what for test, what in _KINDS if test(mode)), "not a regular file")


def check_regular(path: str | Path, what: str) -> None:
    """One error line, at once, when `path` (symlinks followed) exists and is not a regular file."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing or unreadable: the read that follows says so
    kind = not_a_file(mode)
    if kind is not None:
        raise UserError(f"{what} {path} is {kind}, not a file; give a text file")


def read_text(path: str | Path, flag: str) -> str:
    """The file's UTF-8 text; '-' reads standard input."""
    path = str(path)
    try:
        if path == "-":
            raw = sys.stdin.buffer.read()
        else:
            check_regular(path, flag)
            with open(path, "rb") as f:
                raw = f.read()
    except FileNotFoundError:
        raise UserError(f"{flag} {path} does not exist") from None
    except IsADirectoryError:
        raise UserError(f"{flag} {path} is a folder; give a text file") from None
    except OSError as e:
        raise UserError(f"cannot read {flag} {path}: {e.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{flag} {path} is not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})") from None


def read_json_dict(path: Path) -> dict:
    """A JSON object minigpt wrote, or {} when the file is missing, unreadable or not an object (never an error)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}

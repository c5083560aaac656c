"""Reading a text file a user named on the command line (--file, --prompt-file, --prompts-file),
with one clear error line for each way it can be wrong. Standard library only."""

from __future__ import annotations

import sys
from pathlib import Path

from minigpt.errors import UserError


def read_text(path: str | Path, flag: str) -> str:
    """The file's UTF-8 text; '-' reads standard input."""
    path = str(path)
    try:
        if path == "-":
            raw = sys.stdin.buffer.read()
        else:
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

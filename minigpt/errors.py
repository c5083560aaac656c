"""The one exception type for user mistakes: anything a user can fix raises `UserError`, which the CLI
prints as one `error: ...` line with exit code 2; everything else is a bug and keeps its traceback."""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix; the message says what and how."""


class WriteError(UserError):
    """A file of a run could not be written (full disk, quota, read-only filesystem, I/O error): one
    line naming the file, the bytes needed and free; exit code 74. Earlier checkpoints stay."""

    exit_code = 74


class Diverged(UserError):
    """Training stopped on a non-finite loss or gradient; the message names the last good checkpoint
    and the command that continues it at a lower rate. A sweep records it and goes on."""


class TrainingInterrupted(Exception):
    """Training stopped on a signal after saving last.pt; exit_code is 128 + the signal number."""

    def __init__(self, exit_code: int, message: str):
        super().__init__(message)
        self.exit_code = exit_code


def first_line(e: BaseException) -> str:
    """The first line of an exception's message, or its type's name when it has none."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__

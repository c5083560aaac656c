"""The one exception type for user mistakes.

Anything a user can fix (a bad config, a missing file, a wrong flag value) raises
`UserError`; the CLI turns it into a one-line `error: ...` and exit code 2.
Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix; the message says what and how."""


class WriteError(UserError):
    """A file of a run could not be written (a full disk, a quota, a read-only filesystem, an I/O
    error): one line naming the file, the bytes it needed and the bytes free; exit code 74
    (EX_IOERR). Earlier checkpoints are left as they were."""

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

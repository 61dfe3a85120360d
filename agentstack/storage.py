"""Writing agentstack's state when the disk says no: a full disk, a quota, a read-only file system, an
I/O error.

A confined harness can fill the file system that holds `$AGENTSTACK_HOME`: its private state lives
there (`projects/<id>/harness-state`), and usually the project too. Every command that writes
state must then refuse cleanly (exit 1) and say what it recorded, what it did not, and what to do
next, instead of crashing (exit 3) after half its work. Writers turn such an `OSError` into a
`StorageError`; each durable record a command makes is noted with `note_recorded`, so the refusal
can list what is already recorded even when it is raised by a later, unrelated write.

A `StorageError` is also an `OSError`, so code that treats a failed write as harmless (a cache)
keeps doing so. Standard library only: the trust log, and through it the guard, import this.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from agentstack.errors import Refused

# The errors that mean "the storage refused", not "agentstack has a bug".
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG})

_recorded: list[str] = []


def note_recorded(what: str) -> None:
    """Remember that `what` is now durably recorded (named in a later StorageError)."""
    _recorded.append(what)


def recorded() -> list[str]:
    """What this process has durably recorded so far, oldest first."""
    return list(_recorded)


def is_storage_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS


def _cause(code: int | None) -> str:
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return "the disk is full" if code == errno.ENOSPC else "a disk quota or size limit is hit"
    if code == errno.EROFS:
        return "the file system is read-only"
    return "the disk reported an I/O error"


def _next_step(code: int | None, path: str) -> str:
    where = f"the file system that holds {path}"
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return f"free space on {where} (see 'df -h {path}'), then run the command again"
    if code == errno.EROFS:
        return f"remount {where} read-write, then run the command again"
    return f"check the disk holding {path} ('dmesg'), then run the command again"


class StorageError(Refused, OSError):
    """Writing agentstack's state failed because of the storage (exit 1, never a crash).

    `path`: what was being written; `not_done`: what did not happen (and was not half-written);
    `recorded`: what is durably recorded despite the failure (by default, everything this process
    noted with `note_recorded`)."""

    def __init__(
        self,
        *,
        code: int | None,
        path: str | Path,
        not_done: str,
        recorded: list[str] | None = None,
        next_step: str = "",
    ) -> None:
        self.path = str(path)
        self.not_done = not_done
        self.recorded = list(_recorded if recorded is None else recorded)
        cause = _cause(code)
        strerror = os.strerror(code) if code is not None else "unknown error"
        message = f"{cause} ({strerror}) while writing {self.path}: not done: {not_done}"
        super().__init__(message, hint=next_step or _next_step(code, self.path))
        self.errno = code
        self.strerror = strerror
        self.filename = self.path

    def __str__(self) -> str:
        return self.message

    def diagnostics(self) -> list[str]:
        lines = [self.message]
        if self.recorded:
            lines.append("already recorded (kept): " + "; ".join(self.recorded))
        else:
            lines.append("nothing was recorded in the trust log")
        if self.hint:
            lines.append(f"hint: {self.hint}")
        return lines


def storage_error(
    exc: OSError,
    path: str | Path,
    not_done: str,
    *,
    next_step: str = "",
    restate: bool = False,
) -> OSError:
    """`exc` as a StorageError when the storage refused; otherwise `exc` itself. A StorageError
    is passed on as it is (the innermost writer knows best), unless `restate`: then `not_done` and
    `next_step` say what the failure means to this caller."""
    if exc.errno not in STORAGE_ERRNOS:
        return exc
    if isinstance(exc, StorageError):
        if not restate:
            return exc
        path = exc.path
    return StorageError(code=exc.errno, path=path, not_done=not_done, next_step=next_step)


def as_refusal(exc: BaseException) -> StorageError | None:
    """For a command's last line of defence: a storage `OSError` that no writer turned into a
    StorageError yet (a `mkdir`, say), as one; None for anything else."""
    if isinstance(exc, StorageError):
        return exc
    if not is_storage_error(exc):
        return None
    assert isinstance(exc, OSError)
    path = exc.filename if isinstance(exc.filename, str) else "agentstack's state"
    return StorageError(code=exc.errno, path=path, not_done=f"writing {path}")


__all__ = [
    "STORAGE_ERRNOS",
    "StorageError",
    "as_refusal",
    "is_storage_error",
    "note_recorded",
    "recorded",
    "storage_error",
]

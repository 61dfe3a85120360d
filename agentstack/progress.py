"""Progress for long work, on a terminal only.

A command opens a `step` ("hashing the pinned files"); the loops under it call `tick(done,
total)`, which costs a global lookup and a clock read. Nothing is drawn, and rich is not even
imported, until the step has run for `DELAY` seconds: a fast command (an unchanged lock, status,
the guard) never loads it. Nothing at all when stderr or stdout is not a terminal, or when the
command prints JSON (`quiet()`, set by the command table for `--json`).
"""

from __future__ import annotations

import sys
import time

TYPE_CHECKING = False  # neither typing nor contextlib at run time (the fast paths load this)
if TYPE_CHECKING:
    from typing import Any

DELAY = 0.5  # seconds of work before a bar appears
_INTERVAL = 0.1  # between redraws

_quiet = False
_step: _Step | None = None


def quiet(value: bool = True) -> None:
    """No progress for the rest of this process (`--json`, or a caller that wants none)."""
    global _quiet
    _quiet = value


def _terminal() -> bool:
    try:
        return sys.stderr.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


class _Step:
    __slots__ = ("bar", "label", "last", "shown", "start", "stopped", "task", "total")

    def __init__(self, label: str, total: int | None) -> None:
        self.label, self.total = label, total
        self.start = self.last = time.monotonic()
        self.bar: Any = None
        self.task: Any = None
        self.shown = self.stopped = False

    def update(self, done: int, total: int | None) -> None:
        now = time.monotonic()
        if now - self.last < _INTERVAL or now - self.start < DELAY or self.stopped:
            return
        self.last = now
        if total is not None:
            self.total = total
        if self.bar is None:
            self._open()
        self.bar.update(self.task, completed=done, total=self.total)

    def relabel(self, label: str, total: int | None) -> None:
        self.label, self.total = label, total
        if self.bar is not None:
            self.bar.update(self.task, description=label, total=total, completed=0)

    def _open(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self.bar = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=Console(file=sys.stderr), transient=True,
        )  # fmt: skip
        self.bar.start()
        self.task = self.bar.add_task(self.label, total=self.total)
        self.shown = True

    def close(self) -> None:
        self.stopped = True
        if self.bar is not None:
            bar, self.bar = self.bar, None
            bar.stop()


class step:
    """A unit of work that may be long. Inside another step it names the work (and its total)
    until it ends, on the same bar."""

    __slots__ = ("label", "mine", "saved", "total")

    def __init__(self, label: str, total: int | None = None) -> None:
        self.label, self.total, self.mine = label, total, False
        self.saved: tuple[str, int | None] | None = None

    def __enter__(self) -> None:
        global _step
        if _step is not None:
            self.saved = (_step.label, _step.total)
            _step.relabel(self.label, self.total)
        elif not _quiet and _terminal():
            _step, self.mine = _Step(self.label, self.total), True

    def __exit__(self, *exc: object) -> None:
        global _step
        if self.mine:
            current, _step = _step, None
            if current is not None:
                current.close()
        elif self.saved is not None and _step is not None:
            _step.relabel(*self.saved)


def stop() -> None:
    """The command is about to print (a result, a message, a prompt): the bar goes away and is
    not drawn again for this step."""
    if _step is not None:
        _step.close()


def tick(done: int, total: int | None = None) -> None:
    """`done` units of the open step's work so far (of `total`, when known)."""
    if _step is not None:
        _step.update(done, total)

"""What a command prints: status lines on stderr (`echo`), results on stdout (`result`, `print_json`),
sanitised for a terminal. Standard library only, imported by the library's commands and the CLI alike
(split from `agentstack.entry`, the console script, so that nothing below the command line imports it).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing is imported only by type checkers (start-up cost)
if TYPE_CHECKING:
    from typing import Any


def _no_progress() -> None:
    """Output ends a progress bar (agentstack.progress), when one was ever possible."""
    progress = sys.modules.get("agentstack.progress")
    if progress is not None:
        progress.stop()


def echo(message: str) -> None:
    """A status line on stderr (stdout stays clean for --json and pipes), sanitised."""
    from agentstack.sanitize import sanitize

    _no_progress()
    sys.stderr.write(sanitize(message, keep_newlines=True) + "\n")


def result(message: str) -> None:
    """A result line on stdout (what the command was asked for: a report, a table, a verdict),
    sanitised. Messages about what was done, warnings and errors go to stderr (`echo`)."""
    from agentstack.sanitize import sanitize

    _no_progress()
    sys.stdout.write(sanitize(message, keep_newlines=True) + "\n")


def print_json(value: Any) -> None:
    import json

    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n")

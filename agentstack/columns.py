"""Rows of `label  detail` text fitted to the terminal: a long row wraps at spaces only, its
continuation lines indented under the detail, and a word is never split (a path or digest longer
than the width stays whole on its own line). Off a terminal, without COLUMNS, rows are left
whole (a pipe or `grep` gets one line per row)."""

from __future__ import annotations

import os
import sys


def width() -> int | None:
    """COLUMNS when set, else the terminal's width when stdout is one, else None (no wrapping)."""
    value = os.environ.get("COLUMNS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    try:
        if sys.stdout.isatty():
            return os.get_terminal_size(sys.stdout.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return None
    return None


def fit(lines: list[str], indent: int, columns: int | None = None) -> list[str]:
    """Each line wrapped to `columns` (default: `width()`), continuations indented by `indent`."""
    columns = width() if columns is None else columns
    if columns is None or all(len(line) <= columns for line in lines):
        return lines
    import textwrap

    out: list[str] = []
    for line in lines:
        if len(line) <= columns or "\n" in line:
            out.append(line)
            continue
        wrapped = textwrap.wrap(line, columns, subsequent_indent=" " * min(indent, columns // 2),
                                break_long_words=False, break_on_hyphens=False)
        out.extend(wrapped or [line])
    return out

"""A directory the whole test session shares, its xdist workers included: the session's temporary
root (`tests/conftest.py` sets it), for what one worker makes once and the others reuse (kept
plugin installs, surface probe runs). `once(key, make)` makes a JSON value at most once per session
under a file lock: a worker that wants it while another makes it waits, then reads it."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

_root: Path | None = None


def set_root(path: Path) -> None:
    global _root
    path.mkdir(parents=True, exist_ok=True)
    _root = path


def root() -> Path | None:
    """The shared directory, or None outside a pytest session (the tests' helpers run alone)."""
    return _root


def made(key: str) -> Any | None:
    """The value `once(key, ...)` made in this session, if any (without waiting)."""
    if _root is None:
        return None
    try:
        return json.loads((_root / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def once(key: str, make: Callable[[], Any]) -> Any:
    """`make()` (JSON-serialisable), made by one worker of the session and read by the others.
    When `make` raises, nothing is kept: the next caller makes it again (and fails alike)."""
    if _root is None:
        return make()
    with open(_root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = made(key)
        if kept is not None:
            return kept
        value = make()
        path = _root / f"{key}.json"
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(json.dumps(value), encoding="utf-8")
        os.replace(partial, path)
        return json.loads(path.read_text(encoding="utf-8"))

"""Shared fixtures. Every test runs with HOME, XDG dirs, AGENTSTACK_HOME and AGENTSTACK_CACHE in a
temporary directory, and fails if it touched the real ones."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The shared builders and runners live in tests/support/; their old home keeps the names.
from tests.support import shared
from tests.support.cli import REPO, run_cli, run_cli_in_process
from tests.support.project import EXAMPLES, copy_example, git, make_project

__all__ = ["EXAMPLES", "REPO", "copy_example", "git", "make_project", "run_cli",
           "run_cli_in_process"]
_REAL_HOME = Path(os.path.expanduser("~"))
# What agentstack (and a harness it renders for) writes at user level: the session guard watches these.
_REAL_STATE = (".config/agentstack", ".cache/agentstack", ".claude.json", ".codex", ".gemini")


def real_state_snapshot(home: Path) -> dict[str, tuple[int, int]]:
    """Every watched path under `home` (walked), by relative path: (mtime_ns, size)."""
    seen: dict[str, tuple[int, int]] = {}
    for rel in _REAL_STATE:
        top = home / rel
        paths = [top]
        if top.is_dir() and not top.is_symlink():
            paths += sorted(top.rglob("*"))
        for path in paths:
            try:
                st = path.lstat()
            except OSError:
                continue
            seen[str(path.relative_to(home))] = (st.st_mtime_ns, st.st_size)
    return seen


def real_state_changes(home: Path, before: dict[str, tuple[int, int]]) -> list[str]:
    after = real_state_snapshot(home)
    return sorted(f"{'changed' if k in before and k in after else 'added' if k in after else 'removed'}"
                  f" ~/{k}" for k in set(before) | set(after) if before.get(k) != after.get(k))


def _isolate(patch: pytest.MonkeyPatch, home: Path) -> None:
    patch.setenv("HOME", str(home))
    patch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    patch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    patch.setenv("AGENTSTACK_HOME", str(home / ".config" / "agentstack"))
    patch.setenv("AGENTSTACK_CACHE", str(home / ".cache" / "agentstack"))
    patch.delenv("AGENTSTACK_TRUSTED_DIGESTS", raising=False)
    patch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    patch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    # Output is fitted to COLUMNS when set: every test starts from a pipe's (whole lines).
    patch.delenv("COLUMNS", raising=False)
    patch.delenv("LINES", raising=False)


_SESSION_BEFORE: dict[str, tuple[int, int]] = {}


def pytest_sessionstart(session: pytest.Session) -> None:
    _SESSION_BEFORE.update(real_state_snapshot(_REAL_HOME))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    changes = real_state_changes(_REAL_HOME, _SESSION_BEFORE)
    if changes:
        sys.stderr.write("the suite touched the real home: " + "; ".join(changes[:20]) + "\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session", autouse=True)
def session_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A temporary home for the whole session, set before any module- or class-scoped fixture
    (pytest sets up higher-scoped autouse fixtures first), so none of them can reach the real one."""
    home = tmp_path_factory.mktemp("session-home")
    # What the xdist workers share (tests/support/shared.py): the session's root, above each
    # worker's own.
    root = tmp_path_factory.getbasetemp()
    shared.set_root((root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root) / "shared")
    with pytest.MonkeyPatch.context() as patch:
        _isolate(patch, home)
        yield home


@pytest.fixture(autouse=True)
def isolated_home(session_home: Path, tmp_path_factory: pytest.TempPathFactory,
                  monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("home")
    _isolate(monkeypatch, home)
    before = real_state_snapshot(_REAL_HOME)
    yield home
    assert real_state_changes(_REAL_HOME, before) == [], "a test touched the real home"


@pytest.fixture
def cli() -> object:
    return run_cli


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules that hold slow tests run first, each module kept whole and in its own order
    (its module-scoped fixtures are built once): under `-n 2` the long tests start early and the
    short ones fill in around them, instead of one worker finishing a 5-minute test alone."""
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)

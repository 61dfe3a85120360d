"""Shared fixtures. Every test runs with HOME, XDG dirs, AGENTSTACK_HOME and AGENTSTACK_CACHE in a
temporary directory, and fails if it touched the real ones."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.deadline import scaled

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
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


def run_cli(*args: str, cwd: Path, input: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real `agentstack` command in a subprocess (the environment is the test's)."""
    full_env = dict(os.environ)
    # The checkout's own package, even when the editable install predates a new module.
    full_env["PYTHONPATH"] = str(REPO) + os.pathsep + full_env.get("PYTHONPATH", "")
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "agentstack", *args],
        cwd=cwd, input=input, capture_output=True, text=True, env=full_env, timeout=scaled(120),
    )


def run_cli_in_process(*args: str, cwd: Path, input: str | None = None,
                       env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The same command in this process (no interpreter start-up): `agentstack.cli.dispatch`
    with the exit-code mapping of `agentstack.entry`, stdout and stderr captured."""
    import contextlib
    import io

    from agentstack.cli import dispatch
    from agentstack.entry import outcome

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        for key, value in (env or {}).items():
            patch.setenv(key, value)
        patch.setattr(sys, "stdin", io.StringIO(input or ""))  # not a terminal: never prompts
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = outcome(lambda: dispatch(list(args)))
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli() -> object:
    return run_cli


def git(*args: str, cwd: Path) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid",
               GIT_AUTHOR_DATE="2026-01-01T00:00:00Z", GIT_COMMITTER_DATE="2026-01-01T00:00:00Z")
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=env).stdout


def make_project(root: Path, manifest: str, files: dict[str, str] | None = None,
                 executables: tuple[str, ...] = ()) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "agentstack.toml").write_text(manifest, encoding="utf-8")
    for rel, text in (files or {}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for rel in executables:
        (root / rel).chmod(0o755)
    return root


def copy_example(name: str, dest: Path) -> Path:
    target = dest / name
    shutil.copytree(EXAMPLES / name, target, symlinks=True)
    return target

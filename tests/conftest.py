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
_REAL_STATE = [_REAL_HOME / ".config" / "agentstack", _REAL_HOME / ".cache" / "agentstack"]


def _snapshot() -> list[float | None]:
    return [p.stat().st_mtime if p.exists() else None for p in _REAL_STATE]


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("AGENTSTACK_HOME", str(home / ".config" / "agentstack"))
    monkeypatch.setenv("AGENTSTACK_CACHE", str(home / ".cache" / "agentstack"))
    monkeypatch.delenv("AGENTSTACK_TRUSTED_DIGESTS", raising=False)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    before = _snapshot()
    yield home
    assert _snapshot() == before, "a test touched the real ~/.config/agentstack or ~/.cache/agentstack"


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

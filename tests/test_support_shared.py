"""The session-shared helpers of tests/support: `shared.once` makes a value once per session and
keeps nothing when making it fails; `plugindeps` seeds only the directories OpenCode would install
its plugin package into, never one with dependencies of its own, and keeps only a complete install."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import plugindeps, shared


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(shared, "_root", tmp_path / "shared")
    (tmp_path / "shared").mkdir()
    return tmp_path / "shared"


def test_once_makes_a_value_once_and_keeps_nothing_that_failed(root: Path) -> None:
    calls: list[int] = []

    def make() -> dict[str, int]:
        calls.append(1)
        return {"n": len(calls)}

    assert shared.made("k") is None
    assert shared.once("k", make) == {"n": 1}
    assert shared.once("k", make) == {"n": 1} and len(calls) == 1
    assert shared.made("k") == {"n": 1}

    def broken() -> None:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        shared.once("other", broken)
    assert shared.made("other") is None
    assert shared.once("other", make) == {"n": 2}


def _install(directory: Path, package: str = "@opencode-ai/plugin") -> None:
    """What OpenCode's own install leaves in `directory`."""
    (directory / "node_modules" / package).mkdir(parents=True)
    (directory / "node_modules" / package / "package.json").write_text("{}")
    (directory / "node_modules" / ".package-lock.json").write_text("{}")
    (directory / "package.json").write_text(json.dumps({"dependencies": {package: "1.0.0"}}))
    (directory / "package-lock.json").write_text(json.dumps(
        {"packages": {"": {"dependencies": {package: "1.0.0"}}}}))


def test_plugin_installs_are_kept_once_complete_and_seeded_where_opencode_installs(
    root: Path, tmp_path: Path
) -> None:
    binary = tmp_path / "bin" / "opencode"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n")
    home = tmp_path / "home"
    repo = tmp_path / "repo"
    proj = repo / "a" / "proj"
    for d in (repo / ".git", repo / ".opencode", proj / ".opencode", tmp_path / ".opencode"):
        d.mkdir(parents=True)
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    argv = [str(binary), "run"]
    assert plugindeps.config_dirs("opencode", proj, env) == [
        home / ".config" / "opencode", proj / ".opencode", repo / ".opencode"]  # not above .git
    # A run that did not finish its install keeps nothing; a complete one is kept.
    with plugindeps.seeded(argv, proj, env):
        (proj / ".opencode" / "node_modules").mkdir()
    assert not any(p.name.startswith("plugin-deps-") for p in root.iterdir())
    with plugindeps.seeded(argv, proj, env):
        _install(repo / ".opencode")
    # The next run in a fresh project finds the install in each directory, as hard links; one
    # with a package.json of its own is left to the harness.
    other = tmp_path / "other"
    (other / ".git").mkdir(parents=True)
    (other / ".opencode").mkdir()
    (other / ".opencode" / "package.json").write_text('{"dependencies": {"left-pad": "1"}}')
    home2 = {"HOME": str(tmp_path / "home2"), "XDG_CONFIG_HOME": str(tmp_path / "home2" / "c")}
    with plugindeps.seeded(argv, other, home2):
        pass
    seeded = tmp_path / "home2" / "c" / "opencode"
    marker = seeded / "node_modules" / "@opencode-ai" / "plugin" / "package.json"
    assert marker.is_file() and os.stat(marker).st_nlink > 1
    assert (seeded / "package-lock.json").is_file()
    assert not (other / ".opencode" / "node_modules").exists()
    # Any other harness runs as it is.
    with plugindeps.seeded([str(tmp_path / "claude")], other, home2):
        pass

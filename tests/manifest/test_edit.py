"""`init`, `add` and `remove` keep the user's comments, order and formatting (golden files)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentstack.manifest.model import parse_manifest
from tests.support.cli import REPO
from tests.support.cli import ok_in_process as _ok

# The commands run in process: what these tests check is the library's answer, not the process.
from tests.support.cli import run_cli_in_process as run_cli

GOLDEN = REPO / "tests" / "golden" / "edit"
REGENERATE = os.environ.get("AGENTSTACK_REGENERATE_GOLDEN") == "1"

HAND_WRITTEN = """\
# Our team's agent setup. Keep this comment!
[project]
name   = 'team'          # aligned on purpose
harnesses = [ "claude-code" ]

# Servers we rely on.
[servers.search]
command = "uvx"          # pinned below
args = ['search-mcp==1.4.2']

[sandbox]
write_dirs = ["."]  # only the checkout
"""


def _golden(name: str, actual: str) -> None:
    path = GOLDEN / name
    if REGENERATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}; run with AGENTSTACK_REGENERATE_GOLDEN=1"
    assert actual == path.read_text(encoding="utf-8")


def _assert_kept_in_order(original: str, edited: str) -> None:
    """Every original line survives, byte for byte and in its original order."""
    lines = iter(edited.splitlines())
    for line in original.splitlines():
        assert any(candidate == line for candidate in lines), f"lost or moved: {line!r}"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "team"
    root.mkdir()
    (root / "agentstack.toml").write_text(HAND_WRITTEN, encoding="utf-8")
    (root / "skills" / "review").mkdir(parents=True)  # `add` refuses paths that do not exist
    (root / "AGENTS.base.md").write_text("Be kind.\n", encoding="utf-8")
    return root


def test_add_every_kind_keeps_comments_and_layout(project: Path) -> None:
    _ok("add", "server", "files", "--env", "TOKEN=secret:files-token", "--", "npx", "-y",
        "@modelcontextprotocol/server-filesystem@2025.1.1", ".", cwd=project)
    _ok("add", "server", "docs", "--url", "https://docs.example.com/mcp", "--header",
        "Authorization=secret:docs", cwd=project)
    _ok("add", "skill", "review", "skills/review", cwd=project)
    _ok("add", "skill", "style", "--git", "https://example.com/skills.git", "--rev", "v1.2.0",
        "--subdir", "style", cwd=project)
    _ok("add", "instructions", "AGENTS.base.md", cwd=project)
    _ok("add", "hook", "fmt", "--event", "PostToolUse", "--matcher", "Edit|Write", "--",
        "ruff", "format", cwd=project)
    text = (project / "agentstack.toml").read_text()
    _assert_kept_in_order(HAND_WRITTEN, text)
    _golden("added.toml", text)
    parse_manifest(text.encode())

    _ok("remove", "server", "files", cwd=project)
    _ok("remove", "skill", "style", cwd=project)
    _ok("remove", "instructions", "AGENTS.base.md", cwd=project)
    _ok("remove", "hook", "fmt", cwd=project)
    text = (project / "agentstack.toml").read_text()
    assert "# Our team's agent setup. Keep this comment!" in text
    assert "name   = 'team'          # aligned on purpose" in text
    _golden("removed.toml", text)


def test_failed_add_changes_nothing(project: Path) -> None:
    before = (project / "agentstack.toml").read_bytes()
    bad_name = run_cli("add", "server", "Bad Name", "--", "echo", cwd=project)
    assert bad_name.returncode == 2 and "servers.Bad Name" in bad_name.stderr
    short_rev = run_cli("add", "skill", "s", "--git", "https://example.com/x.git", "--rev",
                        "deadbeef", cwd=project)
    assert short_rev.returncode == 2 and "skills.s.rev" in short_rev.stderr
    duplicate = run_cli("add", "server", "search", "--", "echo", cwd=project)
    assert duplicate.returncode == 2 and "already exists" in duplicate.stderr
    missing = run_cli("remove", "server", "nope", cwd=project)
    assert missing.returncode == 2
    assert (project / "agentstack.toml").read_bytes() == before


def test_replace_overwrites_one_item(project: Path) -> None:
    _ok("add", "server", "search", "--replace", "--", "uvx", "search-mcp==1.5.0", cwd=project)
    text = (project / "agentstack.toml").read_text()
    assert "search-mcp==1.5.0" in text and "search-mcp==1.4.2" not in text
    assert "# Servers we rely on." in text


def test_init_writes_a_valid_starter_and_refuses_to_overwrite(tmp_path: Path) -> None:
    root = tmp_path / "My Project"
    root.mkdir()
    _ok("init", "--harness", "codex", cwd=root)
    manifest = parse_manifest((root / "agentstack.toml").read_bytes())
    assert manifest.project.name == "my-project"
    assert manifest.project.harnesses == ["codex"]
    again = run_cli("init", cwd=root)
    assert again.returncode == 2 and "already exists" in again.stderr
    bad = tmp_path / "other"
    bad.mkdir()
    assert run_cli("init", "--harness", "emacs", cwd=bad).returncode == 2
    assert not (bad / "agentstack.toml").exists()

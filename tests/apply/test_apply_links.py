"""`apply --write` never writes through a symbolic link: a committed link on the way to any rendered
path (project or user level) is a refusal naming it, before anything is written, and nothing lands
outside the project. The atomic-write helper opens every component without following a link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentstack import fsutil
from tests.conftest import make_project

# The commands run in process: what these tests check is the library's answer, not the process.
from tests.support.cli import run_cli_in_process as run_cli
from tests.support.project import NOTES_FILES, notes

MANIFEST = str(notes("links", "claude-code", "codex").sandbox(write_dirs=["."]))
FILES = dict(NOTES_FILES)

# Every directory on a rendered project path, and every rendered file itself.
PROJECT_LINKS = [".claude", ".claude/agentstack", ".codex", ".mcp.json", "CLAUDE.md",
                 "AGENTS.md", ".codex/config.toml", ".codex/hooks.json",
                 ".claude/settings.local.json", ".claude/agentstack/instructions.md"]
USER_LINKS = [".codex", ".codex/config.toml", ".claude.json"]


def _tree(path: Path) -> dict[str, bytes | str]:
    """Everything under `path` but agentstack's own state and cache (which `apply` may update)."""
    out: dict[str, bytes | str] = {}
    for item in sorted(path.rglob("*")):
        rel = str(item.relative_to(path))
        if rel.startswith((".cache", ".config/agentstack")):
            continue
        out[rel] = ("-> " + os.readlink(item)) if item.is_symlink() else (
            item.read_bytes() if item.is_file() else "dir")
    return out


@pytest.fixture
def trusted(tmp_path: Path) -> Path:
    root = make_project(tmp_path / "proj", MANIFEST, FILES).resolve()
    for args in (["lock"], ["trust", "--yes", "--accept-risk"]):
        assert run_cli(*args, cwd=root).returncode == 0
    return root


@pytest.mark.parametrize("rel", PROJECT_LINKS)
def test_a_committed_link_on_a_project_path_is_refused(trusted: Path, tmp_path: Path,
                                                       isolated_home: Path, rel: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "hooks").mkdir()  # as .git/hooks would be
    link = trusted / rel
    link.parent.mkdir(parents=True, exist_ok=True)
    is_dir = rel in (".claude", ".claude/agentstack", ".codex")
    link.symlink_to(outside if is_dir else outside / "target")
    before_outside, before_home = _tree(outside), _tree(isolated_home)
    result = run_cli("apply", "--write", cwd=trusted)
    assert result.returncode == 1, result.stdout + result.stderr
    assert _tree(outside) == before_outside  # nothing written through the link
    assert _tree(isolated_home) == before_home  # nor anything else, user level included
    assert not (trusted / ".mcp.json").exists() or rel == ".mcp.json"
    if rel.endswith("instructions.md"):
        # A link agentstack would own outright (it renders whole files and links there): a
        # conflict; --force replaces the link itself and writes nothing through it.
        assert "not written by agentstack" in result.stderr
        forced = run_cli("apply", "--write", "--force", cwd=trusted)
        assert forced.returncode == 0, forced.stderr
        assert not link.is_symlink() and _tree(outside) == before_outside
        return
    if f"surface[{rel}]" in result.stderr:
        # A file on the harness surface: the link is a change of what the harness loads,
        # refused before anything is planned (the lock no longer matches it).
        assert "is stale" in result.stderr, result.stderr
        return
    assert "symbolic link" in result.stderr and rel.split("/")[0] in result.stderr


@pytest.mark.parametrize("rel", USER_LINKS)
def test_a_link_on_a_user_level_path_is_refused(trusted: Path, tmp_path: Path,
                                                isolated_home: Path, rel: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    link = isolated_home / rel
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside if rel == ".codex" else outside / "target")
    result = run_cli("apply", "--write", cwd=trusted)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "symbolic link" in result.stderr
    assert list(outside.iterdir()) == []
    assert not (trusted / ".mcp.json").exists()  # refused before anything was written


def test_rendering_into_git_hooks_through_a_link_is_refused(trusted: Path) -> None:
    # The reported attack: a committed directory link on a rendered path into .git/hooks.
    (trusted / ".git" / "hooks").mkdir(parents=True)
    (trusted / ".claude").mkdir()
    (trusted / ".claude" / "agentstack").symlink_to("../.git/hooks")
    result = run_cli("apply", "--write", cwd=trusted)
    assert result.returncode == 1 and "symbolic link" in result.stderr, result.stderr
    assert list((trusted / ".git" / "hooks").iterdir()) == []


def test_write_atomic_walks_without_following(tmp_path: Path) -> None:
    base = tmp_path / "base"
    (base / "real").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (base / "link").symlink_to(elsewhere)
    fsutil.write_atomic(base / "real" / "a" / "f.txt", b"ok", 0o640, base=base)
    assert (base / "real" / "a" / "f.txt").read_bytes() == b"ok"
    assert (base / "real" / "a" / "f.txt").stat().st_mode & 0o777 == 0o640
    with pytest.raises(fsutil.LinkInPath) as caught:
        fsutil.write_atomic(base / "link" / "f.txt", b"no", base=base)
    assert caught.value.link == base / "link"
    (base / "real" / "file").write_text("x")
    with pytest.raises(fsutil.LinkInPath):  # a file where a directory is expected
        fsutil.write_atomic(base / "real" / "file" / "f.txt", b"no", base=base)
    # A link as the final name is replaced (renameat), never written through.
    (base / "real" / "final").symlink_to(elsewhere / "victim")
    fsutil.write_atomic(base / "real" / "final", b"new", base=base)
    assert not (base / "real" / "final").is_symlink() and list(elsewhere.iterdir()) == []
    assert sorted(p.name for p in (base / "real").iterdir()) == ["a", "file", "final"]


def test_apply_refuses_when_the_guards_own_code_lies_inside_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hooks run agentstack's interpreter and package: when they live inside the project
    (a virtualenv in the checkout), the agent could rewrite the guard, so apply writes nothing."""
    import sys

    import agentstack.apply.engine as apply

    root = tmp_path / "project"
    (root / ".venv" / "bin").mkdir(parents=True)
    assert apply.guard_code_inside(root) is None  # this test's own interpreter lives elsewhere
    monkeypatch.setattr(sys, "prefix", str(root / ".venv"))
    assert apply.guard_code_inside(root) == os.path.realpath(root / ".venv")
    plan = apply.Plan(root=root.resolve(), digest="b3:x", changes=[], ledger_path=root / "l")
    with pytest.raises(apply.Refused, match="installed inside this project"):
        apply.write(plan)

"""The apply record (agentstack.apply.record) and what a large rendered skill tree costs.

An unchanged `apply --write` after a recorded one stops without planning; any change of a
rendered file (edited, added, removed, chmod'ed, replaced by a link), of a directory, of the
ledger or of agentstack's state makes it a full apply again, and `status` and the guard's own
check find the change as before. A rendered skill tree of BATCH_MIN files or more is written as
one batch (filesystem syncs) and listed in `.git/info/exclude` by one pattern while it holds
nothing but its rendered files."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import agentstack.apply.engine as engine
from agentstack.apply import record
from tests.guard.test_guard_speed import needs_a_mark
from tests.support.cli import ok_in_process as ok
from tests.support.cli import run_cli_in_process as run_cli

FILES = engine.BATCH_MIN + 16
SKILL_MD = "---\nname: big\ndescription: A generated skill.\n---\n\n# big\n"


def make(tmp_path: Path) -> Path:
    root = (tmp_path / "project").resolve()
    top = root / "skills" / "big"
    (top / "SKILL.md").parent.mkdir(parents=True)
    (top / "SKILL.md").write_text(SKILL_MD)
    for i in range(FILES - 1):
        path = top / f"d{i % 4}" / f"f{i}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"line {i}\n" * (i % 5 + 1))
    (root / "agentstack.toml").write_text(
        '[project]\nname = "big"\nharnesses = ["claude-code", "codex"]\n\n'
        '[skills.big]\npath = "skills/big"\n'
    )
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    ok("lock", cwd=root)
    ok("trust", "--yes", "--accept-risk", cwd=root)
    ok("apply", "--write", cwd=root)
    return root


def digest_of(root: Path) -> str:
    from agentstack.consent.document import current

    return current(root)[3]


def proven(root: Path) -> dict[str, Any] | None:
    return record.proven(root, digest_of(root), None, True)


def rendered_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / ".claude" / "skills" / "big").rglob("*") if p.is_file())


def status_drift(root: Path) -> list[str]:
    done = run_cli("status", "--json", cwd=root)
    return list(json.loads(done.stdout)["drift"])


def guard_drift(root: Path) -> list[str]:
    from agentstack.surface.watch import drift

    found = drift(root)
    assert found is not None
    return found


def test_an_unchanged_apply_is_proven_by_the_record_and_plans_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    needs_a_mark(tmp_path)
    root = make(tmp_path)
    assert proven(root) is not None
    before = {p: p.stat() for p in rendered_files(root)}

    def no_plan(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an unchanged apply planned")

    with monkeypatch.context() as patch:
        patch.setattr(engine, "plan", no_plan)
        done = ok("apply", "--write", cwd=root)
        assert "0 file(s) changed" in done.stderr
        assert {p: p.stat() for p in rendered_files(root)} == before
        as_json = json.loads(ok("apply", "--write", "--json", cwd=root).stdout)
        assert as_json["written"] is True and as_json["changes"] == [] and as_json["git_hooks"]
    # Its output is the full apply's (without the record).
    record.forget(root)
    full = ok("apply", "--write", cwd=root)
    assert full.stderr == done.stderr


MUTATIONS = ["edit", "edit-same-size", "add", "remove", "chmod", "link"]


def mutate(path: Path, how: str) -> None:
    if how == "edit":
        path.write_bytes(path.read_bytes() + b"an injected line\n")
    elif how == "edit-same-size":
        data = path.read_bytes()
        path.write_bytes(bytes([data[0] ^ 1]) + data[1:])
    elif how == "add":
        (path.parent / "injected.md").write_text("injected\n")
    elif how == "remove":
        path.unlink()
    elif how == "chmod":
        path.chmod(0o755)
    elif how == "link":
        target = path.parent / ".elsewhere"
        target.write_bytes(path.read_bytes())
        path.unlink()
        path.symlink_to(target.name)


@pytest.mark.parametrize("how", MUTATIONS)
@settings(max_examples=2, deadline=None, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(which=st.integers(min_value=0, max_value=FILES - 1))
def test_a_changed_rendered_file_is_found_by_the_record_status_the_guard_and_apply(
    tmp_path_factory: pytest.TempPathFactory, how: str, which: int
) -> None:
    root = make(tmp_path_factory.mktemp("mutated"))
    digest = digest_of(root)
    files = rendered_files(root)
    target = files[which % len(files)]
    shown = str(target.relative_to(root))
    mutate(target, how)
    assert record.proven(root, digest, None, True) is None  # the next apply is a full one
    drift_guard = guard_drift(root)
    assert drift_guard
    status = run_cli("status", "--json", cwd=root)
    again = run_cli("apply", "--write", cwd=root)
    if how in ("add", "link"):
        # A name added in a rendered skill directory (a file, or a link in a file's place) is a
        # change of the harness surface: the lock is stale, for status and apply alike.
        assert status.returncode != 0 and "stale" in status.stdout + status.stderr
        assert again.returncode == 1 and "stale" in again.stderr
        for extra in (target.parent / "injected.md", target.parent / ".elsewhere"):
            if extra.exists():
                extra.unlink()
        if target.is_symlink():
            target.unlink()
        ok("apply", "--write", cwd=root)
    else:
        assert shown in drift_guard and shown in json.loads(status.stdout)["drift"]
        if how in ("edit", "edit-same-size"):
            assert again.returncode == 1 and "edited by hand" in again.stderr  # a conflict
            ok("apply", "--write", "--force", cwd=root)
            ok("apply", "--write", cwd=root)  # no record after conflicts: this one writes it
        else:
            assert again.returncode == 0, again.stderr
    assert status_drift(root) == [] and guard_drift(root) == []
    assert not target.is_symlink() and oct(target.stat().st_mode & 0o777) == oct(0o644)
    assert record.proven(root, digest, None, True) is not None or not _marked(root)


def _marked(root: Path) -> bool:
    from agentstack.apply.snapshot import SettleMark

    return SettleMark(root).take() is not None


@pytest.mark.parametrize("what", ["ledger", "snapshot", "directory", "user-level", "env"])
def test_a_change_outside_the_rendered_files_makes_the_apply_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    needs_a_mark(tmp_path)
    root = make(tmp_path)
    assert proven(root) is not None
    from agentstack.paths import apply_ledger_path, guard_snapshot_path

    if what == "ledger":
        path = apply_ledger_path(root)
        path.write_bytes(path.read_bytes())
    elif what == "snapshot":
        path = guard_snapshot_path(root)
        path.write_bytes(path.read_bytes())
    elif what == "directory":
        (root / "src").mkdir()
    elif what == "user-level":
        path = Path.home() / ".claude.json"
        path.write_text(path.read_text())
    else:
        monkeypatch.setenv("CODEX_HOME", str(Path.home() / ".codex"))
    assert proven(root) is None


def test_a_record_nobody_else_may_trust_is_ignored(tmp_path: Path) -> None:
    needs_a_mark(tmp_path)
    root = make(tmp_path)
    path = record.record_path(root)
    path.chmod(0o666)
    assert proven(root) is None
    path.chmod(0o600)
    assert proven(root) is not None
    path.write_text("{}")
    assert proven(root) is None


def test_a_rendered_tree_is_one_exclude_pattern_while_it_holds_only_rendered_files(
    tmp_path: Path,
) -> None:
    root = make(tmp_path)
    exclude = (root / ".git" / "info" / "exclude").read_text()
    assert "/.claude/skills/big/\n" in exclude and "/.agents/skills/big/\n" in exclude
    assert "/.claude/skills/big/SKILL.md" not in exclude
    assert "/.claude/settings.local.json\n" in exclude
    listed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=root,
                            capture_output=True, text=True, check=True).stdout
    assert ".claude/skills" not in listed and ".agents/skills" not in listed
    assert "skills/big/SKILL.md" in listed  # the source is the user's
    # A file of the user's in the tree: the files are listed one by one again (exact).
    (root / ".claude" / "skills" / "big" / "mine.md").write_text("mine\n")
    ok("lock", cwd=root)
    ok("trust", "--yes", "--accept-risk", cwd=root)
    ok("apply", "--write", cwd=root)
    exclude = (root / ".git" / "info" / "exclude").read_text()
    assert "/.claude/skills/big/\n" not in exclude
    assert "/.claude/skills/big/SKILL.md\n" in exclude and "/.agents/skills/big/\n" in exclude
    listed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=root,
                            capture_output=True, text=True, check=True).stdout
    assert ".claude/skills/big/mine.md" in listed.splitlines()[0] or any(
        line.endswith(".claude/skills/big/mine.md") for line in listed.splitlines())


def test_a_large_tree_is_written_as_one_batch_without_per_file_fsyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentstack import fsutil

    syncs: list[int] = []
    fsyncs: list[int] = []
    real_syncfs, real_fsync = fsutil.syncfs, os.fsync
    jobs = [(tmp_path / f"d{i % 3}" / f"f{i}", f"{i}\n".encode(), i % 5 == 0,
             0o755 if i % 5 == 0 else 0o644, tmp_path) for i in range(engine.BATCH_MIN + 1)]
    with monkeypatch.context() as patch:
        patch.setattr(fsutil, "syncfs", lambda fd: (syncs.append(fd), real_syncfs(fd))[1])
        patch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
        engine._write_files(jobs)
    assert len(syncs) == 2 and fsyncs == []  # before the renames, and after them
    for path, data, _x, mode, _b in jobs:
        assert path.read_bytes() == data and path.stat().st_mode & 0o777 == mode
    assert not [p for p in tmp_path.rglob("*") if ".agentstack-" in p.name]

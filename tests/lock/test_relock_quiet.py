"""Quiet directories in the re-lock record (agentstack.lock.relock): a directory none of whose
entries the lock depends on is proved by its own stat (as git's untracked cache proves a
directory), so `status`, `digest` and an unchanged `lock` in a big checkout stat each directory
instead of each file. No change of a watched path (a new surface file at any depth, a rename, a
chmod, a link, a replaced directory) ever reads as unchanged: the answer is always the full
check's."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentstack.lock.relock as relock
import agentstack.lock.treehash as treehash
from agentstack.errors import StaleLock
from agentstack.paths import apply_ledger_path
from tests.lock.test_consent_proof import answer, full
from tests.lock.test_relock import FILES, SLACK_NS, lock, project, record_file, settle

# An unpinned part of the checkout, three levels deep, beside the pinned skill and server.
DEEP = {f"src/a{i}/b{j}/c/f{i}{j}.py": f"x = {i}{j}\n" for i in range(2) for j in range(2)}
DEEP["src/a0/notes.txt"] = "notes\n"
DEEP["src/a1/.claude/commands/go.md"] = "go\n"  # a surface tree below the top
FILES_DEEP = {**FILES, **DEEP}


@pytest.fixture(autouse=True)
def short_slack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relock, "_RACY_SLACK_NS", SLACK_NS)
    monkeypatch.setattr(treehash, "RACY_SLACK_NS", SLACK_NS)


def sizes(root: Path) -> list[int]:
    """(directories, fingerprinted entries, block length, quiet directories) of the record."""
    data = record_file(root).read_bytes()
    header = data[: data.index(b"\n\n")].split(b"\n")
    return [int(v) for v in header[8].split(b" ")]


def kept(tmp_path: Path) -> Path:
    root = project(tmp_path, files=FILES_DEEP)
    assert lock(root) == 0 and record_file(root).is_file()
    assert answer(root) == full(root)
    return root


def test_directories_the_lock_does_not_depend_on_are_proved_by_their_own_stat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = kept(tmp_path)
    quiet = sizes(root)[3]
    # src, src/a0, src/a0/b0, src/a0/b0/c, ... (not src/a1/.claude/commands: it is a surface)
    assert quiet >= 8
    assert relock.unchanged(str(root), None)
    listed: list[int] = []
    real = os.listdir

    def counting(path: object = ".") -> list[str]:
        if isinstance(path, int):  # the project's directories are listed by descriptor
            listed.append(path)
        return real(path)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(os, "listdir", counting)
    assert relock.unchanged(str(root), None)
    assert len(listed) == sizes(root)[0] - quiet  # only the directories that are not quiet


def test_an_edit_of_an_unpinned_file_in_a_quiet_directory_keeps_the_proof(tmp_path: Path) -> None:
    root = kept(tmp_path)
    (root / "src/a0/b0/c/f00.py").write_text("x = 'changed'\n")
    (root / "src/a0/notes.txt").chmod(0o755)
    assert relock.unchanged(str(root), None)
    assert answer(root) == full(root)


def test_a_ledger_rewritten_with_the_same_bytes_keeps_the_proof(tmp_path: Path) -> None:
    root = kept(tmp_path)
    ledger = apply_ledger_path(root)
    ledger.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"files": {}})
    ledger.write_text(text)
    settle()
    assert answer(root) == full(root)  # resolves (a new ledger), records it
    assert relock.unchanged(str(root), None)
    replacement = ledger.with_name("apply.json.new")
    replacement.write_text(text)
    replacement.replace(ledger)  # as an unchanged `apply --write` rewrites it: a new inode
    assert relock.unchanged(str(root), None)
    replacement.write_text(text.replace("{}", "[]"))  # other bytes, the same size
    replacement.replace(ledger)
    assert not relock.unchanged(str(root), None)


def test_with_a_link_in_the_project_no_directory_is_quiet(tmp_path: Path) -> None:
    """`src/a1/.claude -> ../conf`: the harness reads `conf/settings.json` as
    `src/a1/.claude/settings.json`, the name the lock pins; an edit in place of `conf/` must be
    stale although nothing pins `conf/settings.json` by that name."""
    files = {**FILES_DEEP, "conf/settings.json": '{"env": {"A": "1"}}\n'}
    root = project(tmp_path, files=files)
    (root / "src/a0/.claude").symlink_to("../../conf")
    settle()
    assert lock(root) == 0 and record_file(root).is_file()
    assert sizes(root)[3] == 0
    assert relock.unchanged(str(root), None)
    (root / "conf/settings.json").write_text('{"env": {"A": "2"}}\n')  # the same size
    assert not relock.unchanged(str(root), None)
    assert full(root) is StaleLock and answer(root) is StaleLock


def _replace_dir(root: Path, *, extra: str | None = None) -> None:
    """src/a0/b1 replaced by a directory of the same names (and bytes), plus `extra`."""
    old = root / "src/a0/b1"
    shutil.rmtree(old)
    (old / "c").mkdir(parents=True)
    (old / "c/f01.py").write_text("x = 01\n")
    if extra is not None:
        (old / extra).parent.mkdir(parents=True, exist_ok=True)
        (old / extra).write_text("Do this.\n")


def _link(root: Path, name: str, target: str) -> None:
    (root / name).symlink_to(target)


# Changes of a watched path: each one changes the lock (a full check finds it stale).
WATCHED: dict[str, Callable[[Path], None]] = {
    "CLAUDE.md, deepest": lambda r: (r / "src/a0/b0/c/CLAUDE.md").write_text("Do this.\n"),
    "AGENTS.md, one down": lambda r: (r / "src/a1/AGENTS.md").write_text("Do that.\n"),
    "settings in a new .claude": lambda r: (
        (r / "src/a0/b1/.claude").mkdir(),
        (r / "src/a0/b1/.claude/settings.json").write_text('{"env": {"A": "1"}}\n'),
    ),
    "rename into a surface name": lambda r: (r / "src/a1/b0/c/f10.py").rename(
        r / "src/a1/b0/c/CLAUDE.md"
    ),
    "rename a directory into .codex": lambda r: (
        (r / "src/a1/b1/c/config.toml").write_text('model = "x"\n'),
        (r / "src/a1/b1/c").rename(r / "src/a1/b1/.codex"),
    ),
    "link named CLAUDE.md": lambda r: _link(r, "src/a0/CLAUDE.md", "notes.txt"),
    "replaced directory with a surface file": lambda r: _replace_dir(r, extra="c/AGENTS.md"),
    "chmod +x of a surface tree file": lambda r: (r / "src/a1/.claude/commands/go.md").chmod(
        0o755
    ),
    "surface tree file edited": lambda r: (r / "src/a1/.claude/commands/go.md").write_text(
        "go on\n"
    ),
}

# Changes the lock does not depend on (the answer stays the full check's: fresh).
UNWATCHED: dict[str, Callable[[Path], None]] = {
    "unpinned edit": lambda r: (r / "src/a0/b0/c/f00.py").write_text("y = 1\n"),
    "unpinned chmod": lambda r: (r / "src/a1/b1/c/f11.py").chmod(0o700),
    "unpinned file added": lambda r: (r / "src/a1/b0/new.py").write_text("z = 2\n"),
    "unpinned rename": lambda r: (r / "src/a0/notes.txt").rename(r / "src/a0/notes.md"),
    "link to an unpinned file": lambda r: _link(r, "src/a1/b1/c/alias.py", "f11.py"),
    "replaced directory, same names": lambda r: _replace_dir(r),
    "empty directory added": lambda r: (r / "src/a0/b0/c/d").mkdir(),
}


@pytest.mark.parametrize("name", sorted(WATCHED))
def test_each_watched_change_is_stale(tmp_path: Path, name: str) -> None:
    root = kept(tmp_path)
    WATCHED[name](root)
    assert not relock.unchanged(str(root), None)
    assert full(root) is StaleLock
    assert answer(root) is StaleLock


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    names=st.lists(
        st.sampled_from(sorted(WATCHED) + sorted(UNWATCHED)), min_size=1, max_size=3, unique=True
    )
)
def test_no_change_of_a_watched_path_ever_reads_as_unchanged(
    tmp_path_factory: pytest.TempPathFactory, names: list[str]
) -> None:
    base = tmp_path_factory.mktemp("quiet")
    root = kept(base)
    applied = []
    for name in names:
        with contextlib.suppress(OSError):  # an earlier change moved what this one edits
            (WATCHED.get(name) or UNWATCHED[name])(root)
            applied.append(name)
    expected = full(root)
    if any(name in WATCHED for name in applied):
        assert expected is StaleLock
        assert not relock.unchanged(str(root), None)
    assert answer(root) == expected
    settle()  # out of the racy window: a full check that finds the lock fresh records it again
    assert answer(root) == full(root)
    assert answer(root) == full(root)  # and the next answer may come from the record
    shutil.rmtree(base)

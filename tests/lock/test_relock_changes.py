"""A re-lock after an edit names what changed without parsing the old lock when its re-lock
record vouches for the old lock's bytes (agentstack.lock.resolve.changed_by_text): the same names,
in the same order, as comparing the parsed locks (`changed_items`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentstack.lock.command as command
import agentstack.lock.relock as relock
import agentstack.lock.resolve as lockfile
import agentstack.lock.treehash as treehash
from tests.lock.test_relock import SLACK_NS, lock, project, settle


@pytest.fixture(autouse=True)
def short_slack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relock, "_RACY_SLACK_NS", SLACK_NS)
    monkeypatch.setattr(treehash, "RACY_SLACK_NS", SLACK_NS)


_NAMES = st.text(alphabet='ab.-_"\\ é#[]=\n', min_size=1, max_size=6)
_DIGEST = st.sampled_from(["b3:" + c * 64 for c in "0123"])
_FILE = st.fixed_dictionaries({
    "digest": _DIGEST, "executable": st.booleans(), "kind": st.just("file"),
    "path": st.sampled_from(["a", "b/c.md", "x\n\n[y]", 'q"uote']), "size": st.integers(0, 3),
})  # fmt: skip
_FILES = st.lists(_FILE, max_size=3)
_ROOT = st.fixed_dictionaries({"digest": _DIGEST, "excluded": st.lists(_NAMES, max_size=1),
                               "files": _FILES, "path": _NAMES})  # fmt: skip
_ITEM = st.fixed_dictionaries(
    {"files": _FILES, "risks": st.lists(_NAMES, max_size=2)},
    optional={"roots": st.lists(_ROOT, min_size=1, max_size=2), "digest": _DIGEST},
)
_SURFACE = st.fixed_dictionaries({"digest": _DIGEST, "facts": st.lists(_NAMES, max_size=2)})
_LOCK = st.fixed_dictionaries({
    "version": st.just(1), "manifest": _DIGEST, "instructions": _FILES,
    "servers": st.dictionaries(_NAMES, _ITEM, max_size=3),
    "skills": st.dictionaries(_NAMES, _ITEM, max_size=3),
    "hooks": st.dictionaries(_NAMES, _ITEM, max_size=2),
    "plugins": st.dictionaries(_NAMES, _ITEM, max_size=2),
    "surface": st.dictionaries(st.sampled_from(["CLAUDE.md", "a.b", "a", ".claude/x.json"]),
                               _SURFACE, max_size=3),
})  # fmt: skip


@st.composite
def lock_pairs(draw: st.DrawFn) -> tuple[dict[str, object], dict[str, object]]:
    """Two locks: independent ones, or the second an edit of the first (an item changed, added or
    removed, which the text comparison must see as the parsed comparison does)."""
    old = draw(_LOCK)
    if draw(st.booleans()):
        return old, draw(_LOCK)
    new = {key: dict(value) if isinstance(value, dict) else value for key, value in old.items()}
    for section in draw(st.lists(st.sampled_from(["servers", "skills", "hooks", "surface"]),
                                 max_size=3)):  # fmt: skip
        table = new[section]
        assert isinstance(table, dict)
        if table and draw(st.booleans()):
            del table[draw(st.sampled_from(sorted(table)))]
        else:
            table[draw(_NAMES)] = draw(_SURFACE if section == "surface" else _ITEM)
    if draw(st.booleans()):
        new["manifest"] = draw(_DIGEST)
    return old, new


@settings(max_examples=150, deadline=None)
@given(pair=lock_pairs())
def test_changed_by_text_names_what_comparing_the_parsed_locks_names(
    pair: tuple[dict[str, object], dict[str, object]],
) -> None:
    old, new = pair
    old_text = lockfile.dumps_lock(old).encode()
    new_text = lockfile.dumps_lock(new).encode()
    if old_text == new_text:
        return  # no re-lock compares equal bytes
    parsed = lockfile.loads_unvalidated(old_text)
    assert parsed is not None
    assert lockfile.changed_by_text(old_text, new_text, new) == lockfile.changed_items(parsed, new)


def test_a_one_file_edit_relock_does_not_parse_the_old_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = project(tmp_path)
    assert lock(root) == 0 and relock.unchanged(str(root), None)
    edits = [
        ("skills/s/lib/deep/data.txt", "more data\n", "skills.s"),
        ("servers/a.py", "print('b')\n", "servers.local"),
        ("base.md", "Be long.\n", "instructions"),
        ("CLAUDE.md", "Other notes.\n", "surface[CLAUDE.md]"),
    ]

    def forbidden(_data: bytes) -> dict[str, object]:
        raise AssertionError("the old lock is parsed")

    for path, text, name in edits:
        settle()
        assert lock(root) == 0 and relock.unchanged(str(root), None)  # recorded again
        (root / path).write_text(text)
        with monkeypatch.context() as patch:
            patch.setattr(command, "_parse_loosely", forbidden)
            capsys.readouterr()
            assert lock(root) == 0
        said = capsys.readouterr().err
        assert f"({name})" in said, said


def test_without_a_record_that_vouches_for_the_old_lock_it_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hand-edited old lock is not this code's rendering: its items are compared parsed."""
    root = project(tmp_path)
    assert lock(root) == 0
    path = root / "agentstack.lock"
    path.write_text(path.read_text().replace("version = 1", "version = 1\n# hand", 1))
    assert not relock.rendered_here(str(root), path.read_bytes())
    parsed: list[bytes] = []
    real = command._parse_loosely

    def spy(data: bytes) -> dict[str, object]:
        parsed.append(data)
        return real(data)

    monkeypatch.setattr(command, "_parse_loosely", spy)
    (root / "servers/a.py").write_text("print('c')\n")
    capsys.readouterr()
    assert lock(root) == 0
    assert parsed and "(servers.local)" in capsys.readouterr().err

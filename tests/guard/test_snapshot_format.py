"""The guard snapshot's file format (agentstack._guard.SNAPSHOT_MAGIC): whatever is changed on disk
after a snapshot is taken, the guard's index never reads it as unchanged; and a snapshot file with
a byte changed or missing is never read at all (it denies).

The snapshots here are written the way `apply --write` writes them: the real fingerprints, taken
after a settling mark (apply.snapshot.SettleMark), so a steady entry is proved by its stat alone
and a change has to be seen by the stat fast path, not by a re-hash."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentstack import _guard
from agentstack.apply.snapshot import SettleMark
from agentstack.fingerprints import encode_snapshot, fingerprint

SURFACE = ["CLAUDE.md", "AGENTS.md", ".mcp.json"]
NAMES = st.sampled_from(["a.md", "b.py", "c", "d.txt", "e e", "f\nnl", "é.md"])


def _tree(top: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = top / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _snapshot(top: Path, with_mark: bool = True) -> dict[str, Any]:
    """Every file pinned by its bytes, every directory watched for the surface names, absent
    surface files anchored by their directory: the kinds of entry a project's snapshot holds."""
    probe = SettleMark(top)
    entries: dict[str, dict[str, Any]] = {}
    for here, dirs, names in os.walk(top):
        dirs.sort()
        entries[here] = {"kind": "listing", "names": SURFACE, "role": "surface"}
        for name in names:
            entries[os.path.join(here, name)] = {"kind": "raw", "role": "source"}
        for name in SURFACE:
            entries.setdefault(os.path.join(here, name), {"kind": "raw", "role": "surface"})
    mark = probe.take() if with_mark else None
    snapshot: dict[str, Any] = {
        "v": _guard.SNAPSHOT_VERSION,
        "project": str(top),
        "files": {p: fingerprint(p, e) for p, e in sorted(entries.items())},
    }
    if mark is not None:
        snapshot["mark"] = mark
    return snapshot


def _check(top: Path, data: bytes) -> None:
    """The guard's own steps on a snapshot file: decode (index only), then check the files."""
    path = top.parent / "guard.snap"
    path.write_bytes(data)
    snapshot = _guard._decode(_guard._read_snapshot_bytes(str(path)), str(path))
    _guard.check_files(snapshot, {})


def _same_size_new_bytes(path: Path) -> None:
    before = os.lstat(path)
    data = path.read_bytes()
    path.write_bytes(bytes([data[0] ^ 1]) + data[1:] if data else b"x")
    if data:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # the mtime put back


CHANGES = ["rewrite", "delete", "symlink", "chmod", "surface", "new-dir-surface", "rename"]


@st.composite
def trees(draw: st.DrawFn) -> dict[str, bytes]:
    rels = draw(st.lists(st.tuples(st.sampled_from(["", "x/", "x/y/", "z/"]), NAMES),
                         min_size=1, max_size=8, unique=True))
    return {d + n: draw(st.binary(min_size=1, max_size=40)) for d, n in rels}


@pytest.fixture(scope="module")
def marked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("mark")
    if SettleMark(where).take() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("this filesystem gives no settling mark (CI=true: must not be skipped)")
        pytest.skip("this filesystem gives no settling mark")
    return where


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=trees(), change=st.sampled_from(CHANGES), pick=st.integers(0, 1000))
def test_no_change_of_a_watched_path_reads_as_unchanged(marked: Path, files: dict[str, bytes],
                                                         change: str, pick: int) -> None:
    with tempfile.TemporaryDirectory(dir=marked) as where:
        top = Path(where) / "p"
        _tree(top, files)
        snapshot = _snapshot(top)
        data = encode_snapshot(snapshot)
        _check(top, data)  # unchanged: allowed, by stats alone
        index = _guard._decode(data, "x")[_guard._TABLE]
        assert index[1] or not any(e.get("anchor") for e in snapshot["files"].values())
        target = top / sorted(files)[pick % len(files)]
        if change == "rewrite":
            _same_size_new_bytes(target)
        elif change == "delete":
            target.unlink()
        elif change == "symlink":
            target.unlink()
            target.symlink_to(top / "elsewhere")
        elif change == "chmod":
            target.chmod(target.stat().st_mode | stat.S_IXUSR)
        elif change == "surface":
            (target.parent / SURFACE[pick % len(SURFACE)]).write_text("new\n")
        elif change == "new-dir-surface":
            (target.parent / "new").mkdir()
            (target.parent / "new" / "CLAUDE.md").write_text("new\n")
        else:
            target.rename(target.parent / (target.name + ".moved"))
        with pytest.raises(_guard.Deny, match="changed behind agentstack's back"):
            _check(top, data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where_=st.floats(0, 1, exclude_max=True), flip=st.integers(1, 255),
       truncate=st.booleans())
def test_a_corrupt_or_truncated_snapshot_denies(marked: Path, where_: float, flip: int,
                                                truncate: bool) -> None:
    top = marked / "corrupt"
    if not top.exists():
        _tree(top, {"a.md": b"a", "x/b.py": b"b", "x/y/c": b"c"})
    data = encode_snapshot(_snapshot(top))
    _check(top, data)
    at = int(where_ * len(data))
    bad = data[:at] if truncate else data[:at] + bytes([data[at] ^ flip]) + data[at + 1:]
    with pytest.raises(_guard.Deny):
        _check(top, bad)


def test_a_large_snapshot_is_checked_by_crc_and_still_denies_a_flipped_byte(marked: Path) -> None:
    top = marked / "large"
    _tree(top, {f"d{i % 40}/f{i}.md": b"%d" % i for i in range(3000)})
    data = encode_snapshot(_snapshot(top))
    assert len(data) > _guard.CRC_FROM and b" crc32-" in data.split(b"\n", 1)[0]
    _check(top, data)
    for at in (len(data) // 3, len(data) - 2):
        with pytest.raises(_guard.Deny, match="corrupt"):
            _check(top, data[:at] + bytes([data[at] ^ 0x10]) + data[at + 1:])


def test_the_format_round_trips_and_format_1_is_still_read(tmp_path: Path) -> None:
    top = tmp_path / "p"
    _tree(top, {"a.md": b"a", "x/b\nc.py": b"b"})
    snapshot = _snapshot(top, with_mark=False)  # racy: every entry is decided by its content
    data = encode_snapshot(snapshot)
    assert _guard.parse_snapshot(data, "x") == snapshot
    import json

    assert _guard.parse_snapshot(json.dumps(snapshot).encode(), "x") == snapshot
    refreshed: dict[str, Any] = {}
    _check(top, data)
    _guard.check_files(_guard._decode(data, "x"), refreshed)
    assert set(refreshed) <= set(snapshot["files"])

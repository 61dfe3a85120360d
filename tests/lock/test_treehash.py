"""Tree hashing rules (docs/lockfile.md, agentstack/lock/treehash.py).

The rules proved here:

* symlinks are never followed: an in-tree relative link is hashed as a link (its target string), and
  any link whose target leaves the tree is an error naming the link;
* FIFOs, sockets and device nodes are errors;
* names must be NFC and must not collide after casefold+NFC (so "ß.md" and "ss.md" collide, because
  "ß".casefold() == "ss");
* only the user-executable bit of a file's mode counts;
* entries are ordered by the raw UTF-8 bytes of their path and every field is length-framed;
* **empty directories are not content**: adding or removing a directory that holds no file or link
  leaves the digest unchanged (git cannot carry them either, so a path skill and its git twin agree);
* the stat cache never serves a digest it cannot prove current (stat fingerprint incl. ctime, and
  the racy-timestamp rule), and a damaged cache file only costs a re-hash;
* `agentstack lock` reports each of these as exit 2 naming the manifest field (`skills.NAME.path`).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentstack.lock.treehash as treehash
from agentstack.errors import TreeHashError
from agentstack.lock.treehash import (
    RACY_SLACK_NS,
    StatCache,
    TreeEntry,
    bytes_digest,
    tree_digest,
    walk_tree,
)
from tests.conftest import make_project, run_cli
from tests.support.project import manifest


def _write(root: Path, rel: str, data: bytes | str = b"x", mode: int = 0o644) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)
    return path


def _digest(root: Path, cache: StatCache | None = None) -> str:
    return tree_digest(walk_tree(root, cache))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    _write(root, "SKILL.md", "---\nname: t\n---\nbody\n")
    _write(root, "bin/run.sh", "#!/bin/sh\necho run\n", 0o755)
    _write(root, "lib/data.txt", "data\n")
    return root


# ------------------------------------------------------------------------------------ symlinks


@pytest.mark.parametrize(
    ("link", "target"),
    [
        ("abs", "/etc/passwd"),
        ("abs-dir", "/"),
        ("up", "../outside"),
        ("dotdot", ".."),
        ("sneaky", "a/../../x"),
        ("deep", "lib/../../outside"),
        ("sub/up", "../../outside"),
        ("sub/far", "../lib/../../x"),
    ],
)
def test_symlink_leaving_the_tree_is_an_error_naming_the_link(
    tree: Path, link: str, target: str
) -> None:
    (tree / link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, tree / link)
    with pytest.raises(TreeHashError) as info:
        walk_tree(tree)
    message = info.value.message
    assert str(tree / link) in message
    assert "escapes the tree" in message
    assert repr(target) in message
    assert info.value.hint  # tells the user what to do instead


def test_symlink_through_an_in_tree_link_to_the_root_is_an_error(tree: Path) -> None:
    """`here -> .` is in the tree, but `x -> here/../outside` then resolves to ../outside.

    The check is purely lexical (normpath("here/../outside") == "outside"), so it does not see that
    `here` is itself a link to the tree root; a harness following `x` reads a file outside the
    pinned tree whose bytes are not in the digest.
    """
    (tree.parent / "outside").write_text("not pinned\n")
    os.symlink(".", tree / "here")
    os.symlink("here/../outside", tree / "x")
    assert (tree / "x").resolve() == (tree.parent / "outside").resolve()  # it really escapes
    with pytest.raises(TreeHashError, match="escapes the tree"):
        walk_tree(tree)


@pytest.mark.parametrize(
    ("link", "target"),
    [
        ("to-file", "SKILL.md"),
        ("to-dir", "lib"),
        ("sub/back", "../SKILL.md"),
        ("roundabout", "lib/../bin/run.sh"),
        ("dangling", "not-there"),
        ("self-dir", "."),
    ],
)
def test_in_tree_relative_symlinks_are_hashed_as_links(tree: Path, link: str, target: str) -> None:
    (tree / link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, tree / link)
    entries = {e.path: e for e in walk_tree(tree)}
    entry = entries[link]
    assert entry.kind == "link"
    assert entry.digest == bytes_digest(target.encode())
    assert entry.size == len(target.encode())
    assert not entry.executable
    # The link is not followed: a linked directory's files are not listed a second time under it.
    assert not any(p.startswith(link + "/") for p in entries)


def test_changing_a_link_target_changes_the_digest(tree: Path) -> None:
    os.symlink("SKILL.md", tree / "link")
    before = _digest(tree)
    (tree / "link").unlink()
    os.symlink("lib/data.txt", tree / "link")
    assert _digest(tree) != before
    # Pointing it back restores the digest: only the target string is hashed.
    (tree / "link").unlink()
    os.symlink("SKILL.md", tree / "link")
    assert _digest(tree) == before


def test_link_and_regular_file_with_the_same_bytes_hash_differently(tmp_path: Path) -> None:
    as_link = tmp_path / "a"
    as_link.mkdir()
    os.symlink("target", as_link / "entry")
    as_file = tmp_path / "b"
    _write(as_file, "entry", b"target")
    link_entries, file_entries = walk_tree(as_link), walk_tree(as_file)
    assert link_entries[0].digest == file_entries[0].digest  # same bytes...
    assert tree_digest(link_entries) != tree_digest(file_entries)  # ...different kind


def test_root_itself_must_not_be_a_link(tree: Path) -> None:
    os.symlink(tree, tree.parent / "alias")
    with pytest.raises(TreeHashError, match="symbolic link"):
        walk_tree(tree.parent / "alias")


# --------------------------------------------------------------------------- special files


def test_fifo_is_an_error(tree: Path) -> None:
    os.mkfifo(tree / "lib" / "pipe")
    with pytest.raises(TreeHashError) as info:
        walk_tree(tree)
    assert str(tree / "lib" / "pipe") in info.value.message
    assert "FIFO" in info.value.message


def test_unix_socket_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # AF_UNIX paths are limited to ~108 bytes: bind a short relative name from inside the tree.
    with tempfile.TemporaryDirectory(prefix="th") as tmp:
        root = Path(tmp)
        _write(root, "SKILL.md", "x")
        monkeypatch.chdir(root)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind("sock")
            assert stat.S_ISSOCK(os.lstat(root / "sock").st_mode)
            with pytest.raises(TreeHashError) as info:
                walk_tree(root)
        finally:
            sock.close()
        assert str(root / "sock") in info.value.message
        assert "socket" in info.value.message


def test_device_node_is_an_error(tree: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("creating a device node needs root")
    os.mknod(tree / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    with pytest.raises(TreeHashError) as info:
        walk_tree(tree)
    assert str(tree / "null") in info.value.message
    assert "device" in info.value.message


# -------------------------------------------------------------------------------------- names


@pytest.mark.parametrize("name", ["e\u0301.md", "lib/A\u030a.txt", "\u212b", "\u212a.md"])
def test_non_nfc_name_is_an_error(tree: Path, name: str) -> None:
    _write(tree, name)
    with pytest.raises(TreeHashError) as info:
        walk_tree(tree)
    assert "NFC" in info.value.message


def test_nfc_names_are_fine(tree: Path) -> None:
    _write(tree, "\u00e9.md")  # precomposed é
    _write(tree, "日本/語.md")
    paths = {e.path for e in walk_tree(tree)}
    assert {"\u00e9.md", "日本/語.md"} <= paths


def test_name_that_is_not_utf8_is_an_error(tree: Path) -> None:
    (tree / "lib" / os.fsdecode(b"bad\xff.md")).write_bytes(b"x")
    with pytest.raises(TreeHashError, match="UTF-8"):
        walk_tree(tree)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Readme.md", "README.md"),
        ("readme.md", "README.MD"),
        ("\u00df.md", "ss.md"),  # "ß".casefold() == "ss"
        ("stra\u00dfe", "STRASSE"),
        ("\u1e9e.md", "ss.md"),  # capital sharp s ẞ also casefolds to "ss"
        ("\u00c9.md", "\u00e9.md"),  # É / é
        ("lib", "LIB"),  # a directory and a file
    ],
)
def test_casefold_collisions_are_errors(tree: Path, first: str, second: str) -> None:
    assert (first.casefold() == second.casefold()) or first.lower() == second.lower()
    if first == "lib":
        _write(tree, "LIB")  # tree already has the directory lib/
    else:
        _write(tree, first)
        _write(tree, second)
    with pytest.raises(TreeHashError) as info:
        walk_tree(tree)
    assert "collides" in info.value.message
    assert str(tree) in info.value.message


def test_same_name_in_different_directories_is_not_a_collision(tree: Path) -> None:
    _write(tree, "a/README.md")
    _write(tree, "b/readme.md")
    _write(tree, "b/other.md")
    walk_tree(tree)


# -------------------------------------------------------------------------------------- modes


@pytest.mark.parametrize("mode", [0o664, 0o640, 0o600, 0o400, 0o666, 0o654, 0o645, 0o4644, 0o1644])
def test_only_user_executable_bit_counts_unchanged(tree: Path, mode: int) -> None:
    path = tree / "SKILL.md"
    path.chmod(0o644)
    before = _digest(tree)
    path.chmod(mode)
    assert _digest(tree) == before


@pytest.mark.parametrize("mode", [0o744, 0o755, 0o700, 0o500])
def test_user_executable_bit_changes_the_digest(tree: Path, mode: int) -> None:
    path = tree / "SKILL.md"
    path.chmod(0o644)
    before = _digest(tree)
    path.chmod(mode)
    after = _digest(tree)
    assert after != before
    path.chmod(0o700 if mode != 0o700 else 0o755)
    assert _digest(tree) == after  # every user-executable mode hashes alike


# ----------------------------------------------------------------------- order and framing


def test_entries_are_ordered_by_raw_utf8_bytes(tree: Path) -> None:
    for rel in ("a-b", "a/b", "a.b", "B", "\u00e9", "z", "\U0001f600", "\uff21"):
        _write(tree, rel)
    entries = walk_tree(tree)
    ordered = sorted(entries, key=lambda e: e.path.encode("utf-8"))
    # The digest does not depend on the order the walk produced.
    assert tree_digest(entries) == tree_digest(ordered) == tree_digest(reversed(ordered))
    # "a-b" (0x2d) sorts before "a.b" (0x2e) before "a/b" (0x2f): a global byte order, not a
    # per-directory depth-first one.
    paths = [e.path for e in ordered]
    assert paths.index("a-b") < paths.index("a.b") < paths.index("a/b")


def test_framing_separates_path_and_content(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    _write(one, "ab", "c")
    _write(two, "a", "bc")
    assert _digest(one) != _digest(two)
    three, four = tmp_path / "three", tmp_path / "four"
    _write(three, "a/b", "")
    _write(four, "a", "/b")
    four_b = tmp_path / "four-b"
    _write(four_b, "a", "")
    _write(four_b, "b", "")
    assert len({_digest(three), _digest(four), _digest(four_b)}) == 3


_ENTRY = st.builds(
    lambda path, kind, executable, data: TreeEntry(
        path=path,
        kind=kind,
        executable=executable and kind == "file",
        size=len(data),
        digest=bytes_digest(data),
    ),
    path=st.text(alphabet="ab/-", min_size=1, max_size=4),
    kind=st.sampled_from(["file", "link"]),
    executable=st.booleans(),
    data=st.binary(max_size=3),
)
_TREE = st.lists(_ENTRY, max_size=4, unique_by=lambda e: e.path)


def _meaning(entries: list[TreeEntry]) -> frozenset[tuple[str, str, bool, str]]:
    return frozenset((e.path, e.kind, e.executable, e.digest) for e in entries)


@settings(max_examples=300, deadline=None)
@given(left=_TREE, right=_TREE)
def test_tree_digest_is_injective_on_entries(left: list[TreeEntry], right: list[TreeEntry]) -> None:
    """Equal digests iff the same set of (path, kind, mode, content): nothing can slide across a
    field boundary or an entry boundary, and input order does not matter."""
    same = _meaning(left) == _meaning(right)
    assert (tree_digest(left) == tree_digest(right)) == same
    assert tree_digest(left) == tree_digest(list(reversed(left)))


def test_bytes_are_hashed_exactly_as_stored(tmp_path: Path) -> None:
    variants = [b"line\n", b"line\r\n", b"line", b"\xef\xbb\xbfline\n", "e\u0301\n".encode()]
    digests = set()
    for index, data in enumerate(variants):
        root = tmp_path / str(index)
        _write(root, "f", data)
        digests.add(_digest(root))
    assert len(digests) == len(variants)


# ---------------------------------------------------------------------------- empty directories


def test_empty_directories_do_not_change_the_digest(tree: Path) -> None:
    """The rule: a directory contributes only through the files and links below it."""
    before = _digest(tree)
    (tree / "empty").mkdir()
    (tree / "a" / "b" / "c").mkdir(parents=True)
    (tree / "lib" / "nested-empty").mkdir()
    assert _digest(tree) == before
    _write(tree, "a/b/c/file")  # a file in it is content, of course
    assert _digest(tree) != before


def test_empty_tree_has_a_stable_digest(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "y" / "only-dirs").mkdir(parents=True)
    assert walk_tree(tmp_path / "x") == []
    assert _digest(tmp_path / "x") == _digest(tmp_path / "y") == tree_digest([])


# ----------------------------------------------------------------------------------- stat cache


class _HashCounter:
    """Wraps treehash._hash_fd and records which files had their bytes read."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: list[str] = []
        real = treehash._hash_fd

        def counting(fd: int, size: int) -> str:
            self.paths.append(os.readlink(f"/proc/self/fd/{fd}"))
            return real(fd, size)

        monkeypatch.setattr(treehash, "_hash_fd", counting)

    def reset(self) -> None:
        self.paths.clear()

    @property
    def names(self) -> set[str]:
        return {Path(p).name for p in self.paths}


def _session_at(root: Path, cache_file: Path, monkeypatch: pytest.MonkeyPatch, when_ns: int) -> str:
    """Hash `root` with a cache and save it, as if treehash's clock read `when_ns` throughout
    (hashing and saving), so the racy window is placed exactly, whatever it is measured from."""
    with monkeypatch.context() as patch:
        patch.setattr(treehash, "time", types.SimpleNamespace(time_ns=lambda: when_ns))
        cache = StatCache(cache_file)
        digest = _digest(root, cache)
        cache.save()
    return digest


def _age(root: Path, seconds: int = 3600) -> None:
    past = time.time_ns() - seconds * 1_000_000_000
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.utime(path, ns=(past, past))


def test_unchanged_tree_is_not_read_again(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real clock: mtimes moved to the past, then wait out the racy window so ctimes age too."""
    counter = _HashCounter(monkeypatch)
    cache_file = tmp_path / "cache" / "statcache.json"
    _age(tree)
    time.sleep(RACY_SLACK_NS / 1e9 + 0.1)  # ctime cannot be set; let it leave the racy window
    first = StatCache(cache_file)
    expected = _digest(tree, first)
    assert counter.names == {"SKILL.md", "run.sh", "data.txt"}
    first.save()
    assert cache_file.is_file()

    counter.reset()
    assert _digest(tree, StatCache(cache_file)) == expected
    assert counter.paths == []


def test_same_size_edit_with_restored_mtime_is_detected_by_ctime(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = _HashCounter(monkeypatch)
    cache_file = tmp_path / "statcache.json"
    _age(tree)
    # The first session "runs" a minute from now: every stat field is far outside its racy window.
    before = _session_at(tree, cache_file, monkeypatch, time.time_ns() + 60 * 1_000_000_000)
    counter.reset()
    assert _digest(tree, StatCache(cache_file)) == before
    assert counter.paths == []  # the control: unchanged files are served from the cache

    target = tree / "lib" / "data.txt"
    old = os.stat(target)
    time.sleep(0.05)  # let the coarse file-system clock tick so the new ctime differs
    target.write_bytes(b"DATA\n")  # same size
    os.utime(target, ns=(old.st_atime_ns, old.st_mtime_ns))
    new = os.stat(target)
    assert (new.st_size, new.st_mtime_ns, new.st_ino) == (old.st_size, old.st_mtime_ns, old.st_ino)
    assert new.st_ctime_ns != old.st_ctime_ns

    counter.reset()
    after = _digest(tree, StatCache(cache_file))
    assert counter.names == {"data.txt"}  # only the changed file is read ...
    assert after != before  # ... and its new bytes are what is hashed
    assert after == _digest(tree)


def test_racy_entries_are_rehashed(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = _HashCounter(monkeypatch)
    cache_file = tmp_path / "statcache.json"
    session_ns = time.time_ns() + 100 * 1_000_000_000  # the first session runs 100 s from now
    mtimes = {
        "SKILL.md": session_ns - RACY_SLACK_NS // 2,  # racy: inside the window
        "run.sh": session_ns - RACY_SLACK_NS,  # racy: on the edge of the window
        "data.txt": session_ns - RACY_SLACK_NS - 1,  # clean: just outside it
    }
    for rel in ("SKILL.md", "bin/run.sh", "lib/data.txt"):
        ns = mtimes[Path(rel).name]
        os.utime(tree / rel, ns=(ns, ns))
    expected = _session_at(tree, cache_file, monkeypatch, session_ns)

    counter.reset()
    assert _digest(tree, StatCache(cache_file)) == expected
    assert counter.names == {"SKILL.md", "run.sh"}

    # A file whose mtime lies after the moment it was hashed is racy too.
    future = session_ns + 5 * 1_000_000_000
    os.utime(tree / "lib" / "data.txt", ns=(future, future))
    counter.reset()
    _digest(tree, StatCache(cache_file))
    assert "data.txt" in counter.names


def test_ctime_inside_the_racy_window_is_rehashed(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mtime can be forged into the past with utime; ctime cannot, and it is checked as well."""
    counter = _HashCounter(monkeypatch)
    cache_file = tmp_path / "statcache.json"
    _age(tree)  # every mtime an hour ago, every ctime now
    first = StatCache(cache_file)
    expected = _digest(tree, first)
    first.save()  # real clock: hashed and saved now, within RACY_SLACK_NS of the ctimes
    counter.reset()
    assert _digest(tree, StatCache(cache_file)) == expected
    assert counter.names == {"SKILL.md", "run.sh", "data.txt"}


def _damage_garbage(path: Path) -> None:
    path.write_bytes(b"\x00\xffnot json at all")


def _damage_truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def _damage_empty(path: Path) -> None:
    path.write_bytes(b"")


def _damage_version(path: Path) -> None:
    raw = json.loads(path.read_bytes())
    raw["version"] = 999
    path.write_text(json.dumps(raw))


def _damage_not_an_object(path: Path) -> None:
    path.write_text("[1, 2, 3]")


def _damage_entries_null(path: Path) -> None:
    raw = json.loads(path.read_bytes())
    raw["entries"] = None
    path.write_text(json.dumps(raw))


def _damage_entry_is_a_string(path: Path) -> None:
    raw = json.loads(path.read_bytes())
    for key, value in raw["entries"].items():
        raw["entries"][key] = value.split(":", 6)[6]  # just the digest
    path.write_text(json.dumps(raw))


def _damage_entry_is_a_list(path: Path) -> None:
    """The previous format's entry shape ([dev, ino, size, mtime, ctime, digest, hashed_ns])."""
    raw = json.loads(path.read_bytes())
    for key, value in raw["entries"].items():
        dev, ino, size, mtime, ctime, hashed, digest = value.split(":", 6)
        raw["entries"][key] = [int(dev), int(ino), int(size), int(mtime), int(ctime), digest,
                               int(hashed)]
    path.write_text(json.dumps(raw))


def _damage_entries_type(path: Path) -> None:
    raw = json.loads(path.read_bytes())
    raw["entries"] = ["not", "a", "table"]
    path.write_text(json.dumps(raw))


def _damage_wrong_digest_type(path: Path) -> None:
    raw = json.loads(path.read_bytes())
    for key, value in raw["entries"].items():
        raw["entries"][key] = value.rsplit(":", 2)[0] + ":12345"  # dev:ino:…:hashed_ns:b3:hex
    path.write_text(json.dumps(raw))


def _damage_entry_shape(path: Path) -> None:
    """Valid JSON, right version, but an entry that is not a `dev:ino:…` string (bit rot, a hand
    edit, another version's writer)."""
    raw = json.loads(path.read_bytes())
    for key in raw["entries"]:
        raw["entries"][key] = 0
    path.write_text(json.dumps(raw))


def _damage_short_entry(path: Path) -> None:
    raw = json.loads(path.read_bytes())
    for key, value in raw["entries"].items():
        raw["entries"][key] = ":".join(value.split(":")[:5]) + ":"
    path.write_text(json.dumps(raw))  # the fingerprint is intact but the digest is missing


@pytest.mark.parametrize(
    "damage",
    [
        _damage_garbage,
        _damage_entry_is_a_list,
        _damage_truncated,
        _damage_empty,
        _damage_version,
        _damage_not_an_object,
        _damage_entries_null,
        _damage_entry_is_a_string,
        _damage_entries_type,
        _damage_wrong_digest_type,
        _damage_entry_shape,
        _damage_short_entry,
    ],
)
def test_damaged_cache_file_is_ignored(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: Callable[[Path], None]
) -> None:
    counter = _HashCounter(monkeypatch)
    cache_file = tmp_path / "statcache.json"
    _age(tree)
    expected = _session_at(tree, cache_file, monkeypatch, time.time_ns() + 60 * 1_000_000_000)
    counter.reset()
    assert _digest(tree, StatCache(cache_file)) == expected
    assert counter.paths == []  # the control: the undamaged cache is trusted
    damage(cache_file)
    counter.reset()
    assert _digest(tree, StatCache(cache_file)) == expected
    assert counter.names == {"SKILL.md", "run.sh", "data.txt"}  # a re-hash, nothing trusted


def test_cache_saved_without_hits_is_reused_and_survives_a_missing_dir(
    tree: Path, tmp_path: Path
) -> None:
    cache_file = tmp_path / "does" / "not" / "exist" / "statcache.json"
    cache = StatCache(cache_file)  # a missing cache is simply empty
    expected = _digest(tree, cache)
    cache.save()
    assert cache_file.is_file()
    assert _digest(tree, StatCache(cache_file)) == expected


# ------------------------------------------------------------------------ through `agentstack lock`

_MANIFEST = str(manifest("demo").skill("broken").skill("fine"))


def _escaping_link(skill: Path) -> None:
    os.symlink("../../../outside", skill / "leak")


def _absolute_link(skill: Path) -> None:
    os.symlink("/etc/passwd", skill / "passwd")


def _fifo(skill: Path) -> None:
    os.mkfifo(skill / "pipe")


def _device(skill: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("creating a device node needs root")
    os.mknod(skill / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))


def _non_nfc(skill: Path) -> None:
    (skill / "e\u0301.md").write_text("x")


def _collision(skill: Path) -> None:
    (skill / "readme.md").write_text("x")
    (skill / "README.md").write_text("y")


@pytest.mark.parametrize(
    ("break_it", "reason"),
    [
        (_escaping_link, "escapes the tree"),
        (_absolute_link, "escapes the tree"),
        (_fifo, "FIFO"),
        (_device, "device"),
        (_non_nfc, "NFC"),
        (_collision, "collides"),
    ],
)
def test_lock_cli_reports_tree_errors_with_the_dotted_path(
    tmp_path: Path, break_it: Callable[[Path], None], reason: str
) -> None:
    project = make_project(
        tmp_path / "project",
        _MANIFEST,
        {"skills/broken/SKILL.md": "broken\n", "skills/fine/SKILL.md": "fine\n"},
    )
    break_it(project / "skills" / "broken")
    result = run_cli("lock", cwd=project)
    assert result.returncode == 2, result.stderr
    assert "skills.broken.path" in result.stderr
    assert reason in result.stderr
    assert "skills.fine" not in result.stderr
    assert "Traceback" not in result.stderr
    assert not (project / "agentstack.lock").exists()  # nothing is written


# ------------------------------------------------------------------------------- excludes


def test_excluded_directories_are_skipped_at_any_depth_and_reported(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for rel in ("a.py", "node_modules/x/i.js", "sub/node_modules/y.js", "sub/b.py",
                "sub/.git/HEAD", "node_modules.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    excluded: list[str] = []
    entries = treehash.walk_tree(
        root, None, exclude=frozenset({"node_modules", ".git"}), excluded=excluded
    )
    assert sorted(e.path for e in entries) == ["a.py", "node_modules.txt", "sub/b.py"]
    assert sorted(excluded) == ["node_modules", "sub/.git", "sub/node_modules"]
    # Without excludes, everything is walked (a root named node_modules is pinned whole).
    everything = treehash.walk_tree(root, None)
    assert len(everything) == 6


def test_an_excluded_directory_never_opens_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    (root / "node_modules" / "big").mkdir(parents=True)
    (root / "node_modules" / "big" / "f").write_text("x")
    (root / "ok.py").write_text("x")
    opened: list[str] = []
    real_scandir = os.scandir

    def spy(path: str | os.PathLike[str]) -> object:
        opened.append(str(path))
        return real_scandir(path)

    monkeypatch.setattr(treehash.os, "scandir", spy)
    treehash.walk_tree(root, None, exclude=frozenset({"node_modules"}), excluded=[])
    assert not any("node_modules" in p for p in opened)


def test_a_link_named_like_an_excluded_directory_is_a_link(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    (root / "real" / "f").write_text("x")
    os.symlink("real", root / "node_modules")
    excluded: list[str] = []
    entries = treehash.walk_tree(root, None, exclude=frozenset({"node_modules"}), excluded=excluded)
    kinds = {e.path: e.kind for e in entries}
    assert kinds == {"node_modules": "link", "real/f": "file"} and excluded == []

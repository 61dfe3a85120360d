"""The content store's packs: one content-addressed pack per trust, read back byte for byte, a
damaged or truncated pack refused whole with a message naming it, the store of earlier versions
(one file per text) still read and folded in, and a later review's diff still showing the text
that was trusted before."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentstack.canonical import b3
from agentstack.trust.contentstore import (
    PACK_MAGIC,
    ContentPackError,
    ContentStore,
    pack_bytes,
    read_pack,
)
from tests.conftest import make_project

# The commands run in process: what these tests check is the library's answer, not the process.
from tests.support.cli import run_cli_in_process as run_cli
from tests.support.project import manifest

MANIFEST = str(manifest("packs").skill("notes"))
SKILL = {"skills/notes/SKILL.md": "---\nname: notes\ndescription: Notes.\n---\n\n# Notes\n"}


def _texts(*lines: str) -> dict[str, bytes]:
    return {b3(t.encode()): t.encode() for t in lines}


def _stored(store: ContentStore, texts: dict[str, bytes]) -> Path:
    store.put_all(texts)
    (pack,) = store.packs.iterdir()
    return pack


def test_a_pack_round_trips_and_is_named_by_its_bytes(tmp_path: Path) -> None:
    texts = _texts("one\n", "two\nlines\n", "", "ünïcode ✓\n")
    pack = _stored(ContentStore(tmp_path), texts)
    data = pack.read_bytes()
    assert data == pack_bytes(texts)  # the same texts always make the same bytes
    assert pack.name == b3(data).removeprefix("b3:") + ".pack"
    assert data.startswith(PACK_MAGIC)
    assert pack.stat().st_mode & 0o777 == 0o600
    entries = read_pack(pack)
    assert {d: data[o:o + n] for d, (o, n, _) in entries.items()} == texts
    fresh = ContentStore(tmp_path)
    assert all(fresh.get(d) == t for d, t in texts.items())
    assert fresh.problems == []
    assert fresh.get(b3(b"never stored")) is None


def test_a_text_already_kept_is_not_written_again(tmp_path: Path) -> None:
    store = ContentStore(tmp_path)
    first = _stored(store, _texts("kept\n"))
    ContentStore(tmp_path).put_all(_texts("kept\n"))
    assert list(store.packs.iterdir()) == [first]  # nothing new: no pack
    ContentStore(tmp_path).put_all(_texts("kept\n", "new\n"))
    (second,) = set(store.packs.iterdir()) - {first}
    assert set(read_pack(second)) == set(_texts("new\n"))  # only what no pack held


@pytest.mark.parametrize("damage", ["flip", "truncate", "append"])
def test_a_damaged_pack_fails_closed_with_a_clear_error(tmp_path: Path, damage: str) -> None:
    texts = _texts("trusted line\n", "another\n")
    pack = _stored(ContentStore(tmp_path), texts)
    data = bytearray(pack.read_bytes())
    if damage == "flip":
        data[-3] ^= 0x01  # one bit of one text: that text alone would still parse
    elif damage == "truncate":
        del data[-5:]
    else:
        data += b"extra"
    pack.write_bytes(bytes(data))
    with pytest.raises(ContentPackError, match="damaged or truncated") as raised:
        read_pack(pack)
    assert str(pack) in str(raised.value)
    store = ContentStore(tmp_path)
    assert all(store.get(d) is None for d in texts)  # no byte of it is used, not even intact texts
    assert len(store.problems) == 1 and str(pack) in store.problems[0]
    # The next trust of the same texts writes them again (the same bytes: the same name, so the
    # damaged file is replaced whole); a damaged pack of other texts is dropped by pruning.
    store.put_all(texts)
    assert set(read_pack(pack)) == set(texts)
    other = _named(tmp_path, pack_bytes(_texts("other\n")))
    other.write_bytes(other.read_bytes()[:-1])
    assert ContentStore(tmp_path).prune(set(texts)) == 0 and not other.exists()
    fresh = ContentStore(tmp_path)
    assert all(fresh.get(d) == t for d, t in texts.items()) and fresh.problems == []


def _named(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "content/packs" / (b3(data).removeprefix("b3:") + ".pack")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not a pack at all", "not a pack of this format"),
        (PACK_MAGIC + (10).to_bytes(8, "big") + b"{nonsense}", "unreadable index"),
        (PACK_MAGIC + (23).to_bytes(8, "big") + b'{"files":[["x",1]]}    a', "malformed index"),
    ],
)
def test_a_pack_that_hashes_to_its_name_but_is_malformed_is_refused(
        tmp_path: Path, data: bytes, message: str) -> None:
    with pytest.raises(ContentPackError, match=message):
        read_pack(_named(tmp_path, data))


def test_an_index_that_does_not_cover_the_body_is_refused(tmp_path: Path) -> None:
    good = pack_bytes(_texts("abc\n"))
    with pytest.raises(ContentPackError, match="covers"):
        read_pack(_named(tmp_path, good + b"tail"))
    with pytest.raises(ContentPackError, match="covers"):
        read_pack(_named(tmp_path, good[:-1]))


def test_a_link_in_place_of_a_pack_is_not_followed(tmp_path: Path) -> None:
    real = _stored(ContentStore(tmp_path), _texts("x\n"))
    moved = tmp_path / "elsewhere.pack"
    real.rename(moved)
    real.symlink_to(moved)
    store = ContentStore(tmp_path)
    assert store.get(b3(b"x\n")) is None
    assert store.problems and "regular file" in store.problems[0]


TEXTS = st.dictionaries(
    st.integers(0, 10_000),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=300),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(first=TEXTS, second=TEXTS)
def test_any_stored_text_reads_back_byte_identical(first: dict[int, str],
                                                   second: dict[int, str]) -> None:
    with tempfile.TemporaryDirectory() as where:
        cache = Path(where)
        one = {b3(t.encode()): t.encode() for t in first.values()}
        two = {b3(t.encode()): t.encode() for t in second.values()}
        ContentStore(cache).put_all(one)
        ContentStore(cache).put_all(two)  # deduplicated against the first pack
        store = ContentStore(cache)
        for digest, data in {**one, **two}.items():
            assert store.get(digest) == data
        assert store.problems == []
        store.prune(set(two))  # keep only the second trust's texts
        fresh = ContentStore(cache)
        for digest, data in two.items():
            assert fresh.get(digest) == data
        for digest in set(one) - set(two):
            assert fresh.get(digest) is None


def test_the_store_of_earlier_versions_is_read_and_folded_into_a_pack(tmp_path: Path) -> None:
    store = ContentStore(tmp_path)
    old = _texts("kept by an earlier version\n", "another old one\n")
    for digest, data in old.items():  # the earlier layout: <2 hex>/<64 hex>, one file per text
        store.path(digest).parent.mkdir(parents=True, exist_ok=True)
        store.path(digest).write_bytes(data)
    assert all(ContentStore(tmp_path).get(d) == t for d, t in old.items())
    ContentStore(tmp_path).put_all(_texts("new\n"))
    assert not any(store.path(d).exists() for d in old)  # moved into the pack, nothing lost
    (pack,) = store.packs.iterdir()
    assert set(read_pack(pack)) == set(old) | set(_texts("new\n"))
    fresh = ContentStore(tmp_path)
    assert all(fresh.get(d) == t for d, t in {**old, **_texts("new\n")}.items())
    # Prune still removes an old-layout file nothing trusted names.
    stray = _texts("stray\n")
    ((digest, data),) = stray.items()
    store.path(digest).parent.mkdir(parents=True, exist_ok=True)
    store.path(digest).write_bytes(data)
    assert ContentStore(tmp_path).prune(set(old)) == 2  # the stray file and the pack's "new\n"
    assert not store.path(digest).exists()
    assert all(ContentStore(tmp_path).get(d) == t for d, t in old.items())


def test_the_review_after_a_change_shows_the_trusted_text(tmp_path: Path) -> None:
    files = dict(SKILL, **{f"skills/notes/part{i}.md": f"part {i}\nsame line\n" for i in range(30)})
    root = make_project(tmp_path / "proj", MANIFEST, files)
    assert run_cli("lock", cwd=root).returncode == 0
    assert run_cli("trust", "--yes", "--accept-risk", cwd=root).returncode == 0
    store = ContentStore()
    (pack,) = store.packs.iterdir()
    (root / "skills/notes/part7.md").write_text("part 7\nan edited line\n")
    assert run_cli("lock", cwd=root).returncode == 0
    diff = run_cli("diff", cwd=root, env={"COLUMNS": "100"})
    assert diff.returncode == 0, diff.stderr
    assert "-same line" in diff.stdout and "+an edited line" in diff.stdout
    review = run_cli("trust", "--yes", "--accept-risk", cwd=root, env={"COLUMNS": "100"})
    assert review.returncode == 0, review.stderr
    assert "-same line" in review.stdout and "+an edited line" in review.stdout
    # The second trust wrote only the changed text; the first pack is pruned to what is trusted.
    packs = list(store.packs.iterdir())
    held = set().union(*(read_pack(p) for p in packs))
    assert b3(b"part 7\nan edited line\n") in held
    assert b3(b"part 7\nsame line\n") in held  # the superseded setup stays trusted: kept
    assert len(packs) == 2 and set(read_pack(pack)) | _texts("part 7\nan edited line\n").keys() \
        == held
    assert set(read_pack(next(p for p in packs if p != pack))) == set(
        _texts("part 7\nan edited line\n"))


def test_a_damaged_pack_is_named_in_the_review(tmp_path: Path) -> None:
    root = make_project(tmp_path / "proj", MANIFEST, dict(SKILL, **{"skills/notes/a.md": "a\n"}))
    assert run_cli("lock", cwd=root).returncode == 0
    assert run_cli("trust", "--yes", "--accept-risk", cwd=root).returncode == 0
    (pack,) = ContentStore().packs.iterdir()
    pack.write_bytes(pack.read_bytes()[:-1])
    (root / "skills/notes/a.md").write_text("b\n")
    assert run_cli("lock", cwd=root).returncode == 0
    review = run_cli("trust", "--yes", "--accept-risk", cwd=root, env={"COLUMNS": "200"})
    assert review.returncode == 0, review.stderr
    assert f"warning: content pack {pack} is damaged or truncated" in review.stdout
    assert "-a" not in review.stdout.split()  # the old text is not shown from a damaged pack

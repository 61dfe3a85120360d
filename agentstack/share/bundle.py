"""`.astack` bundles: a signed statement plus every byte of a locked setup (docs/share.md).

A bundle is a gzip-compressed POSIX tar written byte for byte by `agentstack.share.archive` (members
sorted by raw UTF-8 path), so the same inputs give the same bytes. Its
first member is `statement.json` (canonical JSON), its second `statement.sig` (an SSHSIG over the
statement, namespace `agentstack-bundle`); then the members the statement lists:

- `files/agentstack.toml`, `files/agentstack.lock`, and `files/<path>` for every local file the
  lock pins (found by walking the lock's file entries, whatever section they are in);
- `git/<sha1>`: the raw git objects (`<type> <size>\\0<body>`) of every git-sourced tree the lock
  pins — the commit, the trees down to the subdirectory and everything below — so the receiver
  needs no network and can check the content against the lock without running git
  (`agentstack.share.gitobjects`).

This module builds bundles (`build`), and opens them: `open_bundle` verifies the statement and its
signature before anything else is read, `stream_members` checks every member against the statement
both ways while the strict reader of `agentstack.share.archive` inflates it.
"""

from __future__ import annotations

import json
import os
import re
import time
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import blake3

from agentstack.canonical import CanonicalError, b3, canonical_bytes, is_digest
from agentstack.errors import AgentstackError, InvalidInput, Refused
from agentstack.share.archive import (
    BLOCK,
    MAX_DEPTH,
    BundleRejected,
    Inflater,
    TarReader,
    reject,
    write_archive,
)
from agentstack.share.archive import check_name as check_archive_name
from agentstack.share.gitobjects import GitSource, read_mirror_object, walk_git_source

BUNDLE_FORMAT = 1
STATEMENT_NAME = "statement.json"
SIGNATURE_NAME = "statement.sig"
MANIFEST_MEMBER = "files/agentstack.toml"
LOCK_MEMBER = "files/agentstack.lock"
MAX_STATEMENT_BYTES = 1 << 20
MAX_MEMBERS = 10_000
MAX_TOTAL_BYTES = 256 << 20
MAX_FILE_BYTES = 64 << 20
CLOCK_SKEW_S = 300
MAX_LIFETIME_S = 5 * 366 * 86400
_VERSION_RE = re.compile(r"[0-9]{1,10}(\.[0-9]{1,10}){0,3}")
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_TIME_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_SHA1_RE = re.compile(r"[0-9a-f]{40}")


# ------------------------------------------------------------------------------ the statement


@dataclass(frozen=True, kw_only=True, slots=True)
class Member:
    path: str
    size: int
    blake3: str
    executable: bool
    kind: str = "file"  # "link": the member's bytes are an in-tree symlink's target

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size": self.size,
            "blake3": self.blake3,
            "executable": self.executable,
            "kind": self.kind,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Statement:
    name: str
    version: str
    created: str
    expires: str
    consent: str
    lock: str
    members: tuple[Member, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "agentstack_bundle": BUNDLE_FORMAT,
            "name": self.name,
            "version": self.version,
            "created": self.created,
            "expires": self.expires,
            "consent": self.consent,
            "lock": self.lock,
            "members": [m.to_json() for m in self.members],
        }

    def encode(self) -> bytes:
        return canonical_bytes(self.to_json()) + b"\n"


def version_key(version: str) -> tuple[int, ...]:
    parts = [int(p) for p in version.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def parse_utc(text: str) -> float:
    import calendar

    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))


def check_name(name: str) -> str:
    if not _NAME_RE.fullmatch(name):
        raise InvalidInput(
            f"bundle name {name[:64]!r} is not allowed",
            hint="use lowercase letters, digits, '.', '_' and '-'",
        )
    return name


def check_version(version: str) -> str:
    if not _VERSION_RE.fullmatch(version):
        raise InvalidInput(
            f"bundle version {version[:64]!r} is not allowed",
            hint="use up to four dot-separated numbers, such as 3 or 1.4.0",
        )
    return version


def _collision_key(path: str) -> str:
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", path).casefold())


def check_member_path(path: str) -> None:
    """The rules for a member name, in the statement and in the archive alike: the archive
    reader's name rules (`archive.check_name`), then files/<path> or git/<sha1>."""
    check_archive_name(path)
    parts = path.split("/")
    if parts[0] == "files" and len(parts) >= 2:
        return
    if parts[0] == "git" and len(parts) == 2 and _SHA1_RE.fullmatch(parts[1]):
        return
    raise reject(
        "unexpected-member", f"member {path[:80]!r} is neither files/<path> nor git/<sha1>"
    )


def parse_statement(data: bytes) -> Statement:
    """Parse and validate statement bytes (only the canonical spelling is accepted)."""

    def bad(problem: str) -> BundleRejected:
        return reject("bad-statement", f"the statement {problem}")

    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise bad(f"is not JSON ({str(exc)[:100]})") from None
    if not isinstance(doc, dict):
        raise bad("is not a JSON object")
    keys = {"agentstack_bundle", "name", "version", "created", "expires", "consent", "lock"}
    if set(doc) != keys | {"members"}:
        raise bad(f"must have exactly the fields {', '.join(sorted(keys | {'members'}))}")
    if doc["agentstack_bundle"] != BUNDLE_FORMAT or type(doc["agentstack_bundle"]) is not int:
        raise reject(
            "unsupported-format",
            f"bundle format {doc['agentstack_bundle']!r} is not supported (this agentstack reads "
            f"format {BUNDLE_FORMAT})",
            hint="upgrade agentstack",
        )
    for field in keys - {"agentstack_bundle"}:
        if not isinstance(doc[field], str):
            raise bad(f"field {field} is not a string")
    if not _NAME_RE.fullmatch(doc["name"]):
        raise bad("has an invalid name")
    if not _VERSION_RE.fullmatch(doc["version"]):
        raise bad("has an invalid version")
    for field in ("created", "expires"):
        if not _TIME_RE.fullmatch(doc[field]):
            raise bad(f"field {field} is not UTC YYYY-MM-DDTHH:MM:SSZ")
        try:
            parse_utc(doc[field])
        except ValueError:
            raise bad(f"field {field} is not a valid time") from None
    if not is_digest(doc["consent"]) or not is_digest(doc["lock"]):
        raise bad("has an invalid consent or lock digest")
    raw_members = doc["members"]
    if not isinstance(raw_members, list):
        raise bad("members is not a list")
    if len(raw_members) > MAX_MEMBERS:
        raise reject("too-many-members", f"the statement lists more than {MAX_MEMBERS} members")
    members: list[Member] = []
    total = 0
    seen: dict[str, str] = {}
    for item in raw_members:
        if not isinstance(item, dict) or set(item) != {
            "path",
            "size",
            "blake3",
            "executable",
            "kind",
        }:
            raise bad("has a member that is not {path, size, blake3, executable, kind}")
        path, size = item["path"], item["size"]
        if not isinstance(path, str) or type(size) is not int or size < 0:
            raise bad("has a member with a bad path or size")
        if not isinstance(item["blake3"], str) or not is_digest(item["blake3"]):
            raise bad(f"member {path[:80]!r} has an invalid blake3 digest")
        if type(item["executable"]) is not bool or item["kind"] not in ("file", "link"):
            raise bad(f"member {path[:80]!r} has an invalid executable flag or kind")
        check_member_path(path)
        key = _collision_key(path)
        if key in seen:
            code = "duplicate-member" if seen[key] == path else "case-collision"
            raise reject(code, f"the statement lists {path[:80]!r} and {seen[key][:80]!r}")
        seen[key] = path
        if size > MAX_FILE_BYTES:
            raise reject("file-too-large", f"member {path[:80]!r} is larger than {MAX_FILE_BYTES}")
        total += size
        members.append(Member(**item))
    if total > MAX_TOTAL_BYTES:
        raise reject("too-large", f"the members add up to more than {MAX_TOTAL_BYTES} bytes")
    ordered = sorted(members, key=lambda m: m.path.encode("utf-8"))
    if ordered != members:
        raise bad("does not list its members in path order")
    _check_prefixes([m.path for m in members])
    _check_git_metadata([m.path for m in members])
    statement = Statement(
        name=doc["name"],
        version=doc["version"],
        created=doc["created"],
        expires=doc["expires"],
        consent=doc["consent"],
        lock=doc["lock"],
        members=tuple(members),
    )
    try:
        canonical = statement.encode()
    except CanonicalError as exc:
        raise bad(f"has no canonical form ({exc})") from None
    if canonical != data:
        raise bad("is not in canonical form (its bytes were rewritten after signing)")
    return statement


def _check_git_metadata(paths: list[str]) -> None:
    """No member is git metadata, alone or together (a bare repository's HEAD + refs/), so a
    release never writes a live repository (agentstack.lock.gitmeta)."""
    from agentstack.lock.gitmeta import git_metadata

    found = git_metadata(p.removeprefix("files/") for p in paths if p.startswith("files/"))
    if found is not None:
        raise reject(
            "git-metadata",
            f"member 'files/{found[:80]}' is git metadata (a repository's HEAD with its "
            "objects, refs or commondir): a bundle never carries a repository",
        )


def _check_prefixes(paths: list[str]) -> None:
    """A member path cannot also be a directory of another member (`files/a`, `files/a/b`)."""
    files = {_collision_key(p) for p in paths}
    for path in paths:
        parts = _collision_key(path).split("/")
        for depth in range(1, len(parts)):
            if "/".join(parts[:depth]) in files:
                raise reject(
                    "path-conflict", f"member {path[:80]!r} lies inside another member's path"
                )


# ------------------------------------------------------------------------------ lock walking


@dataclass(frozen=True, kw_only=True, slots=True)
class PinnedFile:
    """One file entry of the lock: project-relative `rel` for local files; for a git source,
    `rel` is the path inside the pinned (sub)tree."""

    rel: str
    entry: dict[str, Any]
    git: GitSource | None
    root: str = "."  # the local tree the entry belongs to ("." for project-level files)


def _is_file_entry(node: dict[str, Any]) -> bool:
    return {"path", "kind", "executable", "size", "digest"} <= set(node) and isinstance(
        node.get("digest"), str
    )


def pinned_files(lock: dict[str, Any]) -> list[PinnedFile]:
    """Every file entry the lock holds, wherever it is: a container with `files` and a `git` +
    `commit` pins a git tree; with a `path`, a local tree rooted there; otherwise its files are
    project-relative. New lock sections that follow this shape are bundled without changes here."""
    out: list[PinnedFile] = []

    def walk(node: Any, base: str, git: GitSource | None) -> None:
        if isinstance(node, dict):
            if _is_file_entry(node):
                path = str(node["path"])
                rel = path if git is not None else os.path.normpath(f"{base}/{path}")
                out.append(PinnedFile(rel=rel, entry=node, git=git, root=base))
                return
            if isinstance(node.get("files"), list):
                if isinstance(node.get("git"), str) and isinstance(node.get("commit"), str):
                    git = GitSource(
                        url=node["git"],
                        commit=node["commit"],
                        subdir=str(node.get("subdir") or ""),
                        git_tree=str(node.get("git_tree") or ""),
                    )
                elif isinstance(node.get("path"), str):
                    base = os.path.normpath(f"{base}/{node['path']}")
            for value in node.values():
                walk(value, base, git)
        elif isinstance(node, list):
            for value in node:
                walk(value, base, git)

    walk({k: v for k, v in lock.items() if k not in ("version", "manifest")}, ".", None)
    return out


def surface_files(lock: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(project-relative path, entry) of every surface file the lock pins. A surface entry's
    digest is of the raw bytes (`kind` file or link) or of the part of the file that is not
    agentstack's (`text`, `keys`): the bundle carries the whole file either way."""
    surface = lock.get("surface")
    if not isinstance(surface, dict):
        return []
    out = []
    for item in surface.values():
        if isinstance(item, dict) and isinstance(item.get("path"), str):
            out.append((os.path.normpath(item["path"]), item))
    return sorted(out, key=lambda pair: pair[0].encode("utf-8", "surrogatepass"))


def local_roots(lock: dict[str, Any]) -> list[str]:
    """Project-relative directories whose whole content the lock pins (path-sourced trees)."""
    roots: set[str] = set()

    def walk(node: Any, base: str) -> None:
        if isinstance(node, dict):
            if _is_file_entry(node):
                return
            if (
                isinstance(node.get("files"), list)
                and not isinstance(node.get("git"), str)
                and isinstance(node.get("path"), str)
            ):
                base = os.path.normpath(f"{base}/{node['path']}")
                roots.add(base)
            for value in node.values():
                walk(value, base)
        elif isinstance(node, list):
            for value in node:
                walk(value, base)

    walk({k: v for k, v in lock.items() if k not in ("version", "manifest")}, ".")
    return sorted(roots)


# ------------------------------------------------------------------------------ sharing


@dataclass(frozen=True, kw_only=True)
class BuiltBundle:
    data: bytes
    statement: Statement
    statement_bytes: bytes
    signature: bytes
    digest: str


def collect_members(root: Path, lock: dict[str, Any]) -> list[tuple[Member, bytes]]:
    """Every member of the bundle of the project at `root` with its bytes, read from the disk
    and checked against the lock entry that pins it."""
    from agentstack.manifest.view import LOCK_NAME, MANIFEST_NAME
    from agentstack.paths import agentstack_cache

    found: dict[str, tuple[Member, bytes]] = {}

    def add(path: str, data: bytes, executable: bool, kind: str = "file") -> None:
        member = Member(
            path=path, size=len(data), blake3=b3(data), executable=executable, kind=kind
        )
        previous = found.get(path)
        if previous is not None and previous[0] != member:
            raise Refused(f"the lock pins {path} twice with different content")
        found[path] = (member, data)

    real_root = root.resolve()
    for name in (MANIFEST_NAME, LOCK_NAME):
        add(f"files/{name}", (root / name).read_bytes(), False)
    readers: dict[str, Callable[[str], bytes]] = {}
    for pinned in pinned_files(lock):
        entry = pinned.entry
        if pinned.git is not None:
            continue
        rel = pinned.rel
        if rel.startswith("../") or rel == ".." or os.path.isabs(rel):
            raise Refused(f"the lock pins {rel!r}, which is outside the project")
        path = root / rel
        try:
            if entry["kind"] == "link":
                data = os.fsencode(os.readlink(path))
            else:
                real = path.resolve(strict=True)
                if real != real_root and real_root not in real.parents:
                    raise Refused(f"{rel} leads outside the project")
                data = real.read_bytes()
        except OSError as exc:
            raise Refused(
                f"the lock pins {rel}, which cannot be read ({exc.strerror})",
                hint="run 'agentstack lock --check'",
            ) from None
        if b3(data) != entry["digest"] or len(data) != entry["size"]:
            raise Refused(f"{rel} changed since it was locked", hint="run 'agentstack lock'")
        add(f"files/{rel}", data, bool(entry["executable"]), entry["kind"])
    for rel, entry in surface_files(lock):
        data, executable, kind = _read_surface(root, real_root, rel, entry)
        add(f"files/{rel}", data, executable, kind)
    _check_carried(lock, found)
    sources = {p.git for p in pinned_files(lock) if p.git is not None}
    for source in sorted(sources, key=lambda s: (s.url, s.commit, s.subdir)):
        reader = readers.get(source.url)
        if reader is None:
            reader = readers[source.url] = read_mirror_object(agentstack_cache(), source.url)
        objects, _ = walk_git_source(source, reader, limit=MAX_MEMBERS * (MAX_DEPTH + 1))
        for sha, raw in objects.items():
            add(f"git/{sha}", raw, False)
    return [found[p] for p in sorted(found, key=lambda p: p.encode("utf-8"))]


def _read_surface(
    root: Path, real_root: Path, rel: str, entry: dict[str, Any]
) -> tuple[bytes, bool, str]:
    """The bytes of a surface file the lock pins, as a member (bytes, executable, kind)."""
    import stat as stat_module

    from agentstack.lock.treehash import check_links

    if rel.startswith("../") or rel == ".." or os.path.isabs(rel):
        raise Refused(
            f"the lock pins {rel}, above the project (a harness loads it from the directories up "
            "to the top of the git checkout): a bundle carries only the project",
            hint=f"move {rel} out of the checkout (or share from a checkout whose top is the "
            "project), run 'agentstack lock', and share again",
        )
    path = root / rel
    try:
        st = os.lstat(path)
        if stat_module.S_ISLNK(st.st_mode) and entry.get("kind") in ("text", "keys"):
            # Pinned by what the link leads to (an import through an in-project link): carried
            # as that file's bytes, which give the receiver the same entry.
            real = path.resolve(strict=True)
            if real != real_root and real_root not in real.parents:
                raise Refused(f"{rel} leads outside the project")
            data, executable, kind = real.read_bytes(), False, "file"
        elif stat_module.S_ISLNK(st.st_mode):
            target = os.readlink(path)
            data, executable, kind = os.fsencode(target), False, "link"
        elif stat_module.S_ISREG(st.st_mode):
            real = path.resolve(strict=True)
            if real != real_root and real_root not in real.parents:
                raise Refused(f"{rel} leads outside the project")
            data, executable, kind = real.read_bytes(), bool(st.st_mode & 0o100), "file"
        else:
            raise Refused(
                f"the lock pins the harness file {rel}, which is not a regular file or link: "
                "a bundle cannot carry it",
                hint="remove it, then run 'agentstack lock' and share again",
            )
    except OSError as exc:
        raise Refused(
            f"the lock pins the harness file {rel}, which cannot be read ({exc.strerror}): a "
            "bundle cannot carry it",
            hint="make it readable or remove it, then run 'agentstack lock' and share again",
        ) from None
    if kind == "link":
        try:
            check_links(".", {rel: target})
        except AgentstackError:
            raise Refused(
                f"the lock pins the harness file {rel}, a link to {target!r} outside the "
                "project: a bundle cannot carry it",
                hint="replace the link with the file, then run 'agentstack lock' and share again",
            ) from None
    if entry.get("kind") in ("file", "link") and (
        b3(data) != entry.get("digest") or kind != entry.get("kind")
    ):
        raise Refused(f"{rel} changed since it was locked", hint="run 'agentstack lock'")
    return data, executable, kind


def _check_carried(lock: dict[str, Any], found: dict[str, tuple[Member, bytes]]) -> None:
    """Every project file the lock pins is a member, and every member name passes the
    receiver's rules: `share` refuses, naming the file, rather than hand on a bundle that cannot
    be received or released."""
    from agentstack.lock.gitmeta import HINT, describe, git_metadata, pinned_paths

    carried = {p.removeprefix("files/") for p in found if p.startswith("files/")}
    missing = sorted(set(pinned_paths(lock).get(".", [])) - carried)
    if missing:
        raise Refused(
            f"the lock pins {missing[0]}, which share cannot carry"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
            hint="report this: the lock has a kind of entry this version cannot bundle",
        )
    for path in found:
        try:
            check_member_path(path)
        except BundleRejected as exc:
            raise Refused(
                f"{path.removeprefix('files/')} cannot travel in a bundle: "
                + exc.message.split(": ", 1)[-1],
                hint="rename it, then run 'agentstack lock' and share again",
            ) from None
    metadata = git_metadata(carried)
    if metadata is not None:
        raise Refused(describe(metadata), hint=HINT)


def _refuse_early(lock: dict[str, Any]) -> None:
    """The limits a bundle cannot exceed, judged from the lock alone before any file is read (a
    100,000-file setup took 38 s and 569 MB to be told it cannot travel): the member count, the
    total size and a lower bound of the statement's size (each member's path and digest)."""
    local = {p.rel: p for p in pinned_files(lock) if p.git is None}
    paths = set(local) | {rel for rel, _ in surface_files(lock)}
    count = 2 + len(paths)
    if count > MAX_MEMBERS:
        raise Refused(
            f"the setup has {count} files, more than the {MAX_MEMBERS} a bundle can carry",
            hint="share a smaller setup (a git skill travels as its objects, not as files)",
        )
    if sum(int(p.entry.get("size", 0)) for p in local.values()) > MAX_TOTAL_BYTES:
        raise Refused(f"the setup is larger than {MAX_TOTAL_BYTES} bytes")
    if sum(len(rel) + 70 for rel in paths) > MAX_STATEMENT_BYTES:
        raise Refused(
            "the statement would be larger than a receiver accepts (too many files)",
            hint="share a smaller setup",
        )


def build(
    root: Path,
    key: Any,
    *,
    name: str | None = None,
    version: str | None = None,
    now: float | None = None,
    lifetime_s: int = 90 * 86400,
) -> BuiltBundle:
    """A signed bundle of the locked, trusted setup at `root` (refused when the lock is stale or
    the digest is not trusted here)."""
    import agentstack.share.sshsig as sshsig
    from agentstack.consent.document import consent_digest, consent_document
    from agentstack.lock.resolve import fresh_lock
    from agentstack.manifest.load import load_manifest
    from agentstack.manifest.model import LOCK_NAME
    from agentstack.trust.review import TrustStore

    manifest = load_manifest(root)
    lock = fresh_lock(root, manifest, verify_git=True)
    document = consent_document(manifest, lock)
    digest = consent_digest(document)
    state = TrustStore().state(root, digest)
    if not state.trusted:
        raise Refused(
            f"{digest} is not trusted for {root.resolve()}: only a setup you trusted can be shared",
            hint="review it with 'agentstack trust', then share again",
        )
    moment = time.time() if now is None else now
    moment = float(int(moment))
    if not 0 < lifetime_s <= MAX_LIFETIME_S:
        raise InvalidInput("--expires must be in the future and at most five years away")
    created = utc(moment)
    statement = Statement(
        name=check_name(name or manifest.project.name),
        version=check_version(version or time.strftime("%Y.%m%d.%H%M%S", time.gmtime(moment))),
        created=created,
        expires=utc(moment + lifetime_s),
        consent=digest,
        lock=b3((root / LOCK_NAME).read_bytes()),
        members=(),
    )
    _refuse_early(lock)
    members = collect_members(root, lock)
    if len(members) > MAX_MEMBERS:
        raise Refused(f"the setup has more than {MAX_MEMBERS} files; a bundle cannot carry it")
    if sum(m.size for m, _ in members) > MAX_TOTAL_BYTES:
        raise Refused(f"the setup is larger than {MAX_TOTAL_BYTES} bytes")
    too_big = [m.path for m, _ in members if m.size > MAX_FILE_BYTES]
    if too_big:
        raise Refused(f"{too_big[0]} is larger than {MAX_FILE_BYTES} bytes")
    statement = Statement(**{**_fields(statement), "members": tuple(m for m, _ in members)})
    statement_bytes = statement.encode()
    if len(statement_bytes) > MAX_STATEMENT_BYTES:
        raise Refused("the statement would be larger than a receiver accepts (too many files)")
    signature = sshsig.sign(key, statement_bytes).encode()
    data = write_archive(
        [
            (STATEMENT_NAME, statement_bytes, False),
            (SIGNATURE_NAME, signature, False),
            *((m.path, content, m.executable) for m, content in members),
        ]
    )
    return BuiltBundle(
        data=data,
        statement=statement,
        statement_bytes=statement_bytes,
        signature=signature,
        digest=b3(data),
    )


def _fields(statement: Statement) -> dict[str, Any]:
    return {
        "name": statement.name,
        "version": statement.version,
        "created": statement.created,
        "expires": statement.expires,
        "consent": statement.consent,
        "lock": statement.lock,
        "members": statement.members,
    }


# ------------------------------------------------------------------------------ opening


@dataclass(frozen=True, kw_only=True)
class Opened:
    """A bundle whose statement and signature were read and checked (members not yet)."""

    reader: TarReader
    inflater: Inflater
    statement: Statement
    statement_bytes: bytes
    signature: bytes
    signer_key: Any  # sshsig.PublicKey
    principals: list[str]


def open_bundle(
    handle: IO[bytes],
    *,
    now: float | None = None,
    check_time: bool = True,
    home: Path | None = None,
) -> Opened:
    """Read the statement and its signature from the start of a bundle and verify them: the
    signature (by any key; the caller decides whom to believe), the statement's form, and its
    validity period. Nothing is written."""
    import agentstack.share.sshsig as sshsig
    from agentstack.share.keys import allowed_signers

    inflater = Inflater(handle, MAX_TOTAL_BYTES + (MAX_MEMBERS + 4) * 2 * BLOCK + (4 << 20))
    reader = TarReader(inflater)
    try:
        first = reader.next()
    except BundleRejected as exc:
        if exc.code in ("corrupt", "truncated") and inflater.total_out == 0:
            raise reject(
                "not-a-bundle", "the file is not a gzip-compressed .astack bundle"
            ) from None
        raise
    if first is None or first.path != STATEMENT_NAME:
        raise reject(
            "not-a-bundle",
            f"the first member is {first.path[:80] if first else 'missing'!r}, not "
            f"{STATEMENT_NAME}: not an agentstack bundle",
        )
    if first.size > MAX_STATEMENT_BYTES:
        raise reject(
            "statement-too-large",
            f"the statement is {first.size} bytes; at most {MAX_STATEMENT_BYTES} are read",
        )
    statement_bytes = reader.read_all()
    second = reader.next()
    if second is None or second.path != SIGNATURE_NAME:
        raise reject(
            "unsigned",
            "the bundle carries no signature: unsigned bundles are never accepted",
            hint="ask the sender to share it with 'agentstack share' (which signs)",
        )
    if second.size > sshsig.MAX_SIGNATURE_BYTES:
        raise reject("bad-signature", "the signature is implausibly large")
    signature = reader.read_all()
    try:
        parsed = sshsig.verify(signature, statement_bytes)
    except sshsig.SignatureError as exc:
        code = {"malformed": "bad-signature", "unsupported-key": "bad-signature"}.get(
            exc.code, exc.code
        )
        raise reject(code, exc.message) from None
    statement = parse_statement(statement_bytes)
    _check_ratio(handle, statement)
    moment = time.time() if now is None else now
    if check_time:
        if parse_utc(statement.created) > moment + CLOCK_SKEW_S:
            raise reject(
                "not-yet-valid",
                f"the bundle was created in the future ({statement.created})",
                hint="check this machine's clock and the sender's",
            )
        if parse_utc(statement.expires) <= moment:
            raise reject(
                "expired",
                f"the bundle expired at {statement.expires}",
                hint="ask the sender for a fresh one ('agentstack share --expires …')",
            )
    if parse_utc(statement.expires) <= parse_utc(statement.created):
        raise reject("bad-statement", "the statement expires before it was created")
    principals = allowed_signers(home).principals_for(parsed.public_key, now=moment)
    return Opened(
        reader=reader,
        inflater=inflater,
        statement=statement,
        statement_bytes=statement_bytes,
        signature=signature,
        signer_key=parsed.public_key,
        principals=principals,
    )


def _check_ratio(handle: IO[bytes], statement: Statement) -> None:
    """What the statement says the archive inflates to, against the size of the file: a bomb is
    refused before any of it is inflated (the reader enforces each member's declared size)."""
    from agentstack.share.archive import MAX_RATIO, RATIO_GRACE

    try:
        size = os.fstat(handle.fileno()).st_size
    except (OSError, AttributeError, ValueError):
        return  # not a file (a test's BytesIO): the inflater's own check still holds
    declared = sum(m.size + 3 * BLOCK for m in statement.members)
    if declared > RATIO_GRACE and declared > MAX_RATIO * max(size, 1):
        raise reject(
            "compression-bomb",
            f"the statement declares {declared} bytes from a file of {size} bytes (more than "
            f"{MAX_RATIO}x: a decompression bomb)",
        )


def stream_members(
    opened: Opened, sink: Callable[[Member, Iterator[bytes]], None] | None = None
) -> None:
    """Read every member and check it against the statement both ways (names, order, sizes,
    executable bits, blake3). `sink(member, chunks)` receives each member's bytes as they are
    checked; it must consume them all."""
    expected = {m.path: m for m in opened.statement.members}
    seen: dict[str, str] = {}
    count = 0
    reader = opened.reader
    from agentstack.progress import tick

    total = len(opened.statement.members)
    while True:
        tick(count, total)
        item = reader.next()
        if item is None:
            break
        count += 1
        if count > MAX_MEMBERS:
            raise reject("too-many-members", f"the archive has more than {MAX_MEMBERS} members")
        if item.path in (STATEMENT_NAME, SIGNATURE_NAME):
            raise reject("duplicate-member", f"a second {item.path} in the archive")
        check_member_path(item.path)
        key = _collision_key(item.path)
        if key in seen:
            code = "duplicate-member" if seen[key] == item.path else "case-collision"
            raise reject(code, f"the archive holds {item.path[:80]!r} and {seen[key][:80]!r}")
        seen[key] = item.path
        member = expected.get(item.path)
        if member is None:
            raise reject(
                "unlisted-member",
                f"member {item.path[:80]!r} is not in the signed statement",
            )
        if item.size != member.size:
            raise reject(
                "size-mismatch",
                f"member {item.path[:80]!r} is {item.size} bytes; the statement says {member.size}",
            )
        if item.executable != member.executable:
            raise reject(
                "mode-mismatch",
                f"member {item.path[:80]!r} has a different executable bit than the statement",
            )
        hasher = blake3.blake3()

        def chunks(hasher: Any = hasher) -> Iterator[bytes]:
            for chunk in reader.read_data():
                hasher.update(chunk)
                yield chunk

        if sink is None:
            for _ in chunks():
                pass
        else:
            sink(member, chunks())
        if "b3:" + hasher.hexdigest() != member.blake3:
            raise reject(
                "hash-mismatch",
                f"member {item.path[:80]!r} does not match its blake3 hash in the statement",
            )
    present = set(seen.values())
    missing = [m.path for m in opened.statement.members if m.path not in present]
    if missing:
        raise reject(
            "missing-member",
            f"{len(missing)} member(s) of the statement are not in the archive, "
            f"first {missing[0][:80]!r}",
        )
    opened.inflater.finish()

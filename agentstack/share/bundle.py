"""`.astack` bundles: a signed statement plus every byte of a locked setup (docs/share.md).

A bundle is a gzip-compressed POSIX tar written byte for byte by `agentstack.share.archive` (members
sorted by raw UTF-8 path), so the same inputs give the same bytes. Its first member is
`statement.json` (canonical JSON), its second `statement.sig` (an SSHSIG over the statement,
namespace `agentstack-bundle`), its third (format 2) `members.jsonl`, the member manifest the
statement signs by blake3, size, count and bytes: one canonical JSON line per member, in the
archive's order. Then the members:

- `files/agentstack.toml`, `files/agentstack.lock`, and `files/<path>` for every local file the
  lock pins (found by walking the lock's file entries, whatever section they are in);
- `git/<sha1>`: the raw git objects (`<type> <size>\\0<body>`) of every git-sourced tree the lock
  pins — the commit, the trees down to the subdirectory and everything below — so the receiver
  needs no network and can check the content against the lock without running git
  (`agentstack.share.gitobjects`).

Format 1 (still read) lists the members inside the statement instead of a manifest.

This module builds bundles (`build`, streamed into a file), and opens them: `open_bundle` verifies
the statement and its signature before anything else is read, `stream_members` checks the member
manifest against the statement and then every member against the manifest's next line while the
strict reader of `agentstack.share.archive` inflates it (`ManifestChecker`: bounded memory).
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
    TarMember,
    TarReader,
    reject,
)
from agentstack.share.archive import check_name as check_archive_name
from agentstack.share.gitobjects import GitSource, read_mirror_object, walk_git_source

BUNDLE_FORMAT = 2  # what `share` writes
READ_FORMATS = (1, 2)  # what `receive` reads (1: the members listed in the statement itself)
STATEMENT_NAME = "statement.json"
SIGNATURE_NAME = "statement.sig"
MEMBERS_NAME = "members.jsonl"  # format 2: the member manifest the statement signs
MANIFEST_MEMBER = "files/agentstack.toml"
LOCK_MEMBER = "files/agentstack.lock"
MAX_STATEMENT_BYTES = 1 << 20
MAX_MEMBERS = 250_000
MAX_MEMBERS_V1 = 10_000  # format 1 lists its members inline (at most 1 MiB of statement)
MAX_MANIFEST_BYTES = 64 << 20
MAX_MANIFEST_LINE = 2048  # a member line: a path of at most 1,024 bytes and four short fields
MAX_TOTAL_BYTES = 256 << 20
MAX_FILE_BYTES = 64 << 20
CLOCK_SKEW_S = 300
MAX_LIFETIME_S = 5 * 366 * 86400
_VERSION_RE = re.compile(r"[0-9]{1,10}(\.[0-9]{1,10}){0,3}")
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_TIME_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_SHA1_RE = re.compile(r"[0-9a-f]{40}")
_DIGEST_RE = re.compile(r"b3:[0-9a-f]{64}")  # agentstack.canonical.is_digest, as one regex


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


    def line(self) -> bytes:
        """The member's line in the member manifest (format 2): canonical JSON and a newline
        (spelled directly for the names JSON writes as they are: printable ASCII without a
        quote or backslash; tests/share/test_bundle_manifest.py checks both agree)."""
        path, digest = self.path, self.blake3
        if (
            path.isascii()
            and path.isprintable()
            and '"' not in path
            and "\\" not in path
            and digest.isascii()
            and digest.isprintable()
            and '"' not in digest
            and "\\" not in digest
            and self.kind in ("file", "link")
            and type(self.size) is int
            and type(self.executable) is bool
        ):
            flag = "true" if self.executable else "false"
            return (
                f'{{"blake3":"{digest}","executable":{flag},"kind":"{self.kind}",'
                f'"path":"{path}","size":{self.size}}}\n'
            ).encode()
        return canonical_bytes(self.to_json()) + b"\n"


@dataclass(frozen=True, kw_only=True, slots=True)
class ManifestRef:
    """What a format-2 statement signs of its member manifest (`members.jsonl`): the blake3 and
    size of its bytes, the number of members it lists and the sum of their sizes. Every limit
    is judged from these before a byte of the manifest is read."""

    blake3: str
    size: int
    members: int
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "blake3": self.blake3,
            "size": self.size,
            "members": self.members,
            "bytes": self.bytes,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class Statement:
    name: str
    version: str
    created: str
    expires: str
    consent: str
    lock: str
    members: tuple[Member, ...] = ()  # format 1 only: the members, inline
    manifest: ManifestRef | None = None  # format 2: the signed member manifest
    format: int = BUNDLE_FORMAT

    @property
    def member_count(self) -> int:
        return self.manifest.members if self.manifest is not None else len(self.members)

    @property
    def member_bytes(self) -> int:
        if self.manifest is not None:
            return self.manifest.bytes
        return sum(m.size for m in self.members)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "agentstack_bundle": self.format,
            "name": self.name,
            "version": self.version,
            "created": self.created,
            "expires": self.expires,
            "consent": self.consent,
            "lock": self.lock,
        }
        if self.format == 1:
            doc["members"] = [m.to_json() for m in self.members]
        else:
            assert self.manifest is not None
            doc["manifest"] = self.manifest.to_json()
        return doc

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


def _bad_statement(problem: str) -> BundleRejected:
    return reject("bad-statement", f"the statement {problem}")


_MEMBER_KEYS = frozenset(("path", "size", "blake3", "executable", "kind"))
_MANIFEST_KEYS = frozenset(("blake3", "size", "members", "bytes"))


def parse_member(item: Any, bad: Callable[[str], BundleRejected] = _bad_statement) -> Member:
    """One member entry (of a format-1 statement or a line of the member manifest), checked: its
    fields and their types, the name rules (`check_member_path`) and the per-file size cap."""
    if not isinstance(item, dict) or item.keys() != _MEMBER_KEYS:
        raise bad("has a member that is not {path, size, blake3, executable, kind}")
    path, size = item["path"], item["size"]
    if not isinstance(path, str) or type(size) is not int or size < 0:
        raise bad("has a member with a bad path or size")
    if not isinstance(item["blake3"], str) or not _DIGEST_RE.fullmatch(item["blake3"]):
        raise bad(f"member {path[:80]!r} has an invalid blake3 digest")
    if type(item["executable"]) is not bool or item["kind"] not in ("file", "link"):
        raise bad(f"member {path[:80]!r} has an invalid executable flag or kind")
    check_member_path(path)
    if size > MAX_FILE_BYTES:
        raise reject("file-too-large", f"member {path[:80]!r} is larger than {MAX_FILE_BYTES}")
    return Member(**item)


def parse_statement(data: bytes) -> Statement:
    """Parse and validate statement bytes (only the canonical spelling is accepted). Format 2
    names its member manifest; format 1 (agentstack before the member manifest) lists its
    members inline, at most MAX_MEMBERS_V1 of them."""
    bad = _bad_statement
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise bad(f"is not JSON ({str(exc)[:100]})") from None
    if not isinstance(doc, dict):
        raise bad("is not a JSON object")
    keys = {"agentstack_bundle", "name", "version", "created", "expires", "consent", "lock"}
    if "agentstack_bundle" not in doc:
        raise bad(f"must have exactly the fields {', '.join(sorted(keys | {'manifest'}))}")
    fmt = doc["agentstack_bundle"]
    if type(fmt) is not int or fmt not in READ_FORMATS:
        raise reject(
            "unsupported-format",
            f"bundle format {str(fmt)[:20]!r} is not supported (this agentstack reads formats "
            f"{', '.join(map(str, READ_FORMATS))})",
            hint="upgrade agentstack",
        )
    listing = "members" if fmt == 1 else "manifest"
    if set(doc) != keys | {listing}:
        raise bad(f"must have exactly the fields {', '.join(sorted(keys | {listing}))}")
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
    members: list[Member] = []
    manifest: ManifestRef | None = None
    if fmt == 1:
        members = _parse_inline_members(doc["members"])
    else:
        manifest = _parse_manifest_ref(doc["manifest"])
    statement = Statement(
        name=doc["name"],
        version=doc["version"],
        created=doc["created"],
        expires=doc["expires"],
        consent=doc["consent"],
        lock=doc["lock"],
        members=tuple(members),
        manifest=manifest,
        format=fmt,
    )
    try:
        canonical = statement.encode()
    except CanonicalError as exc:
        raise bad(f"has no canonical form ({exc})") from None
    if canonical != data:
        raise bad("is not in canonical form (its bytes were rewritten after signing)")
    return statement


def _parse_manifest_ref(raw: Any) -> ManifestRef:
    bad = _bad_statement
    if not isinstance(raw, dict) or raw.keys() != _MANIFEST_KEYS:
        raise bad("has a manifest that is not {blake3, size, members, bytes}")
    if not isinstance(raw["blake3"], str) or not is_digest(raw["blake3"]):
        raise bad("has an invalid manifest digest")
    for field in ("size", "members", "bytes"):
        if type(raw[field]) is not int or raw[field] < 0:
            raise bad(f"has an invalid manifest {field}")
    ref = ManifestRef(**raw)
    if ref.members > MAX_MEMBERS:
        raise reject(
            "too-many-members",
            f"the statement declares {ref.members} members, more than the {MAX_MEMBERS} a bundle "
            "may carry",
        )
    if ref.bytes > MAX_TOTAL_BYTES:
        raise reject("too-large", f"the members add up to more than {MAX_TOTAL_BYTES} bytes")
    if ref.size > MAX_MANIFEST_BYTES or ref.size > ref.members * MAX_MANIFEST_LINE:
        raise reject(
            "manifest-too-large",
            f"the member manifest is declared as {ref.size} bytes for {ref.members} members (at "
            f"most {MAX_MANIFEST_BYTES} bytes, {MAX_MANIFEST_LINE} per member, are read)",
        )
    if ref.members and ref.size < ref.members * 80:
        raise bad("declares a member manifest too small for its members")
    return ref


def _parse_inline_members(raw_members: Any) -> list[Member]:
    bad = _bad_statement
    if not isinstance(raw_members, list):
        raise bad("members is not a list")
    if len(raw_members) > min(MAX_MEMBERS, MAX_MEMBERS_V1):
        raise reject(
            "too-many-members",
            f"the statement lists more than {min(MAX_MEMBERS, MAX_MEMBERS_V1)} members",
        )
    members: list[Member] = []
    total = 0
    seen: dict[str, str] = {}
    for item in raw_members:
        member = parse_member(item)
        path = member.path
        key = _collision_key(path)
        if key in seen:
            code = "duplicate-member" if seen[key] == path else "case-collision"
            raise reject(code, f"the statement lists {path[:80]!r} and {seen[key][:80]!r}")
        seen[key] = path
        total += member.size
        members.append(member)
    if total > MAX_TOTAL_BYTES:
        raise reject("too-large", f"the members add up to more than {MAX_TOTAL_BYTES} bytes")
    ordered = sorted(members, key=lambda m: m.path.encode("utf-8"))
    if ordered != members:
        raise bad("does not list its members in path order")
    _check_prefixes([m.path for m in members])
    _check_git_metadata([m.path for m in members])
    return members


class ManifestChecker:
    """The member manifest of a format-2 bundle, checked line by line as it is read, in memory
    bounded by what a path needs (sets of hashes, never the lines): each line canonical JSON of one
    member (`parse_member`), the paths in strictly increasing byte order (so no path twice), no
    two paths equal once case-folded, no path inside another's, no repository (a `HEAD` beside
    `objects`, `refs` or `commondir`), and at the end exactly the count and total size the
    statement signs. A hash collision can only refuse a bundle, never let one through."""

    def __init__(self, ref: ManifestRef) -> None:
        self.ref = ref
        self.count = 0
        self.total = 0
        self.previous = b""
        self._files: set[int] = set()
        self._dirs: set[int] = set()
        self._heads: set[str] = set()
        self._siblings: set[str] = set()

    @staticmethod
    def bad(problem: str) -> BundleRejected:
        return reject("bad-manifest", f"the member manifest {problem}")

    def feed(self, line: bytes) -> Member:
        from agentstack.lock.gitmeta import _GITDIR_SIBLINGS, _fold

        number = self.count + 1
        if len(line) > MAX_MANIFEST_LINE or not line.endswith(b"\n"):
            raise self.bad(f"line {number} is too long or not terminated")
        self.count = number
        if number > self.ref.members:
            raise self.bad(f"lists more than the {self.ref.members} members the statement signs")
        try:
            item = json.loads(line)
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise self.bad(f"line {number} is not JSON") from None
        member = parse_member(item, lambda problem: self.bad(f"line {number} {problem}"))
        if member.line() != line:
            raise self.bad(f"line {number} is not in canonical form")
        raw = member.path.encode("utf-8")
        if raw <= self.previous:
            if raw == self.previous:
                raise reject(
                    "duplicate-member", f"the member manifest lists {member.path[:80]!r} twice"
                )
            raise self.bad("does not list its members in path order")
        self.previous = raw
        self.total += member.size
        if self.total > self.ref.bytes:
            raise self.bad("lists more bytes than the statement signs")
        key = _collision_key(member.path) if not member.path.isascii() else member.path.lower()
        hashed = hash(key)
        if hashed in self._files:
            raise reject(
                "case-collision",
                f"the member manifest lists {member.path[:80]!r} and another spelling of it",
            )
        if hashed in self._dirs:
            raise reject(
                "path-conflict", f"member {member.path[:80]!r} is also another member's directory"
            )
        self._files.add(hashed)
        slash = key.find("/")
        while slash >= 0:
            prefix = hash(key[:slash])
            if prefix in self._files:
                raise reject(
                    "path-conflict", f"member {member.path[:80]!r} lies inside another member's path"
                )
            self._dirs.add(prefix)
            slash = key.find("/", slash + 1)
        parts = key.split("/")
        if parts[0] == "files":
            folded = [_fold(p) for p in parts[1:]] if not key.isascii() else parts[1:]
            prefix_text = ""
            for part in folded:
                if part in _GITDIR_SIBLINGS:
                    self._siblings.add(prefix_text)
                prefix_text += part + "/"
            if folded and folded[-1] == "head":
                self._heads.add(prefix_text[: -len("head/")])
        return member

    def finish(self) -> None:
        if self.count != self.ref.members or self.total != self.ref.bytes:
            raise self.bad(
                f"lists {self.count} members of {self.total} bytes; the statement signs "
                f"{self.ref.members} of {self.ref.bytes}"
            )
        if self._heads & self._siblings:
            raise reject(
                "git-metadata",
                "the member manifest holds a repository (a HEAD with its objects, refs or "
                "commondir): a bundle never carries a repository",
            )


def read_manifest(handle: IO[bytes], ref: ManifestRef) -> Iterator[Member]:
    """The members of a manifest file whose bytes were checked against `ref`, each checked."""
    checker = ManifestChecker(ref)
    while True:
        line = handle.readline(MAX_MANIFEST_LINE + 1)
        if not line:
            break
        yield checker.feed(line)
    checker.finish()


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
    data: bytes  # the bundle's bytes (empty when `build` wrote them to `out`)
    statement: Statement
    statement_bytes: bytes
    signature: bytes
    digest: str
    size: int = 0


Loader = Callable[[], bytes]


def collect_members(root: Path, lock: dict[str, Any]) -> list[tuple[Member, Loader]]:
    """Every member of the bundle of the project at `root`, sorted, with a loader of its bytes.
    A file the lock pins is described by its lock entry and read only when it is written (the
    loader refuses bytes other than the lock's), so memory does not grow with the files' bytes;
    the surface files and git objects are read here."""
    from agentstack.manifest.view import LOCK_NAME, MANIFEST_NAME
    from agentstack.paths import agentstack_cache

    found: dict[str, tuple[Member, Loader]] = {}

    def add(member: Member, loader: Loader) -> None:
        previous = found.get(member.path)
        if previous is not None and previous[0] != member:
            raise Refused(f"the lock pins {member.path} twice with different content")
        found[member.path] = (member, loader)

    def add_bytes(path: str, data: bytes, executable: bool, kind: str = "file") -> None:
        member = Member(
            path=path, size=len(data), blake3=b3(data), executable=executable, kind=kind
        )
        add(member, lambda: data)

    real_root = root.resolve()
    for name in (MANIFEST_NAME, LOCK_NAME):
        add_bytes(f"files/{name}", (root / name).read_bytes(), False)
    readers: dict[str, Callable[[str], bytes]] = {}
    for pinned in pinned_files(lock):
        entry = pinned.entry
        if pinned.git is not None:
            continue
        rel = pinned.rel
        if rel.startswith("../") or rel == ".." or os.path.isabs(rel):
            raise Refused(f"the lock pins {rel!r}, which is outside the project")
        if entry["kind"] not in ("file", "link"):
            raise Refused(f"the lock pins {rel} as {entry['kind']!r}, which share cannot carry")
        member = Member(
            path=f"files/{rel}",
            size=int(entry["size"]),
            blake3=str(entry["digest"]),
            executable=bool(entry["executable"]),
            kind=str(entry["kind"]),
        )
        add(member, _file_loader(root, real_root, rel, member))
    for rel, entry in surface_files(lock):
        data, executable, kind = _read_surface(root, real_root, rel, entry)
        add_bytes(f"files/{rel}", data, executable, kind)
    _check_carried(lock, found)
    sources = {p.git for p in pinned_files(lock) if p.git is not None}
    for source in sorted(sources, key=lambda s: (s.url, s.commit, s.subdir)):
        reader = readers.get(source.url)
        if reader is None:
            reader = readers[source.url] = read_mirror_object(agentstack_cache(), source.url)
        objects, _ = walk_git_source(source, reader, limit=MAX_MEMBERS * (MAX_DEPTH + 1))
        for sha, raw in objects.items():
            add_bytes(f"git/{sha}", raw, False)
    return [found[p] for p in sorted(found, key=lambda p: p.encode("utf-8"))]


def _file_loader(root: Path, real_root: Path, rel: str, member: Member) -> Loader:
    def load() -> bytes:
        path = root / rel
        try:
            if member.kind == "link":
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
        if len(data) != member.size or b3(data) != member.blake3:
            raise Refused(f"{rel} changed since it was locked", hint="run 'agentstack lock'")
        return data

    return load


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


def _check_carried(lock: dict[str, Any], found: dict[str, tuple[Member, Loader]]) -> None:
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
    100,000-file setup once took 38 s and 569 MB to be told it cannot travel): the member count,
    the total size and the member manifest's size (each member's line)."""
    local = {p.rel: p for p in pinned_files(lock) if p.git is None}
    paths = set(local) | {rel for rel, _ in surface_files(lock)}
    count = 2 + len(paths)
    if count > MAX_MEMBERS:
        raise Refused(
            f"the setup has {count} files, more than the {MAX_MEMBERS} a bundle can carry",
            hint="share a smaller setup, or move a large tree into a git source (a git skill "
            "travels as its objects, and 'lock' pins it by commit)",
        )
    total = sum(int(p.entry.get("size", 0)) for p in local.values())
    if total > MAX_TOTAL_BYTES:
        raise Refused(
            f"the setup's files add up to {total} bytes, more than the {MAX_TOTAL_BYTES} a "
            "bundle can carry",
            hint="share a smaller setup (large data belongs in a git source or outside the setup)",
        )
    too_big = sorted(rel for rel, p in local.items() if int(p.entry.get("size", 0)) > MAX_FILE_BYTES)
    if too_big:
        raise Refused(
            f"{too_big[0]} is larger than the {MAX_FILE_BYTES} bytes a bundle carries per file",
            hint="remove it from the setup, then run 'agentstack lock' and share again",
        )
    if sum(len(rel.encode("utf-8", "surrogatepass")) + 120 for rel in paths) > MAX_MANIFEST_BYTES:
        raise Refused(
            f"the member manifest would be larger than the {MAX_MANIFEST_BYTES} bytes a receiver "
            "reads (too many files, or very long paths)",
            hint="share a smaller setup",
        )


def default_version(moment: float) -> str:
    return time.strftime("%Y.%m%d.%H%M%S", time.gmtime(float(int(moment))))


def default_file_name(root: Path, name: str | None, version: str | None, now: float) -> str:
    """`NAME-VERSION.astack`, as `build` names the bundle (the project's name, the time)."""
    if name is None:
        from agentstack.manifest.load import load_manifest

        name = load_manifest(root).project.name
    return f"{check_name(name)}-{check_version(version or default_version(now))}.astack"


class _Hashing:
    """A write-only file that hashes and counts what passes through it."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.hasher = blake3.blake3()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.hasher.update(data)
        self.size += len(data)
        self.out.write(data)
        return len(data)

    def flush(self) -> None:
        self.out.flush()


def build(
    root: Path,
    key: Any,
    *,
    name: str | None = None,
    version: str | None = None,
    now: float | None = None,
    lifetime_s: int = 90 * 86400,
    out: IO[bytes] | None = None,
) -> BuiltBundle:
    """A signed bundle of the locked, trusted setup at `root` (refused when the lock is stale or
    the digest is not trusted here), written to `out` as it is made (or returned in memory).
    The caller discards `out` when this raises: a file that changed since it was locked is
    found while it is written."""
    import gzip
    import io

    import agentstack.share.sshsig as sshsig
    from agentstack.consent.document import consent_digest, consent_document
    from agentstack.lock.resolve import fresh_lock
    from agentstack.manifest.load import load_manifest
    from agentstack.manifest.model import LOCK_NAME
    from agentstack.share.archive import tar_member
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
    bundle_name = check_name(name or manifest.project.name)
    bundle_version = check_version(version or default_version(moment))
    _refuse_early(lock)
    members = collect_members(root, lock)
    if len(members) > MAX_MEMBERS:
        raise Refused(f"the setup has more than {MAX_MEMBERS} files; a bundle cannot carry it")
    total = sum(m.size for m, _ in members)
    if total > MAX_TOTAL_BYTES:
        raise Refused(f"the setup is larger than {MAX_TOTAL_BYTES} bytes")
    too_big = [m.path for m, _ in members if m.size > MAX_FILE_BYTES]
    if too_big:
        raise Refused(f"{too_big[0]} is larger than {MAX_FILE_BYTES} bytes")
    lines = [m.line() for m, _ in members]
    wide = next(
        (m.path for (m, _), line in zip(members, lines, strict=True)
         if len(line) > MAX_MANIFEST_LINE),
        None,
    )  # fmt: skip
    if wide is not None:
        raise Refused(
            f"{wide.removeprefix('files/')[:120]} cannot travel in a bundle: its name takes more "
            f"than the {MAX_MANIFEST_LINE} bytes a receiver reads per member",
            hint="rename it, then run 'agentstack lock' and share again",
        )
    listing = b"".join(lines)
    del lines
    if len(listing) > MAX_MANIFEST_BYTES:
        raise Refused(
            "the member manifest would be larger than a receiver reads (too many files)",
            hint="share a smaller setup",
        )
    statement = Statement(
        name=bundle_name,
        version=bundle_version,
        created=created,
        expires=utc(moment + lifetime_s),
        consent=digest,
        lock=b3((root / LOCK_NAME).read_bytes()),
        manifest=ManifestRef(
            blake3=b3(listing), size=len(listing), members=len(members), bytes=total
        ),
    )
    statement_bytes = statement.encode()
    if len(statement_bytes) > MAX_STATEMENT_BYTES:
        raise Refused("the statement would be larger than a receiver accepts")
    signature = sshsig.sign(key, statement_bytes).encode()
    memory: io.BytesIO | None = None
    if out is None:
        memory = out = io.BytesIO()
    sink = _Hashing(out)
    from agentstack.progress import tick

    with gzip.GzipFile(filename="", mode="wb", fileobj=sink, compresslevel=6, mtime=0) as gz:
        gz.write(tar_member(STATEMENT_NAME, statement_bytes, False))
        gz.write(tar_member(SIGNATURE_NAME, signature, False))
        gz.write(tar_member(MEMBERS_NAME, listing, False))
        del listing
        for done, (member, load) in enumerate(members):
            tick(done, len(members))
            gz.write(tar_member(member.path, load(), member.executable))
        gz.write(b"\0" * (2 * BLOCK))
    return BuiltBundle(
        data=memory.getvalue() if memory is not None else b"",
        statement=statement,
        statement_bytes=statement_bytes,
        signature=signature,
        digest="b3:" + sink.hasher.hexdigest(),
        size=sink.size,
    )


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

    inflater = Inflater(
        handle,
        MAX_TOTAL_BYTES + MAX_MANIFEST_BYTES + (MAX_MEMBERS + 4) * 2 * BLOCK + (4 << 20),
    )
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
    declared = statement.member_bytes + 3 * BLOCK * (statement.member_count + 1)
    if statement.manifest is not None:
        declared += statement.manifest.size
    if declared > RATIO_GRACE and declared > MAX_RATIO * max(size, 1):
        raise reject(
            "compression-bomb",
            f"the statement declares {declared} bytes from a file of {size} bytes (more than "
            f"{MAX_RATIO}x: a decompression bomb)",
        )


def stream_members(
    opened: Opened,
    sink: Callable[[Member, Iterator[bytes]], None] | None = None,
    manifest_file: IO[bytes] | None = None,
) -> list[Member]:
    """Read every member and check it against the statement both ways (names, order, sizes,
    executable bits, blake3); the members, in order. `sink(member, chunks)` receives each
    member's bytes as they are checked; it must consume them all. Format 2: the member
    manifest is read first into `manifest_file` (a temporary file when None), checked against
    the statement's blake3 and size before any member is read, then read back line by line in
    step with the archive: every member is the manifest's next line, so nothing is outside the
    manifest, missing from it, or there twice."""
    if opened.statement.manifest is None:
        return _stream_inline(opened, sink)
    import tempfile

    ref = opened.statement.manifest
    reader = opened.reader
    first = reader.next()
    if first is None or first.path != MEMBERS_NAME:
        raise reject(
            "bad-manifest",
            f"the third member is {first.path[:80] if first else 'missing'!r}, not the member "
            f"manifest {MEMBERS_NAME}",
        )
    if first.size != ref.size:
        raise reject(
            "manifest-mismatch",
            f"the member manifest is {first.size} bytes; the statement signs {ref.size}",
        )
    own = manifest_file is None
    handle = tempfile.TemporaryFile() if manifest_file is None else manifest_file  # noqa: SIM115
    try:
        hasher = blake3.blake3()
        for chunk in reader.read_data():
            hasher.update(chunk)
            handle.write(chunk)
        if "b3:" + hasher.hexdigest() != ref.blake3:
            raise reject(
                "manifest-mismatch",
                "the member manifest does not match its blake3 hash in the statement",
            )
        handle.flush()
        handle.seek(0)
        return _stream_listed(opened, read_manifest(handle, ref), sink)
    finally:
        if own:
            handle.close()


def _check_member(item: TarMember, member: Member) -> None:
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


def _consume(
    reader: TarReader, member: Member, sink: Callable[[Member, Iterator[bytes]], None] | None
) -> None:
    hasher = blake3.blake3()

    def chunks() -> Iterator[bytes]:
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
            f"member {member.path[:80]!r} does not match its blake3 hash in the statement",
        )


_OWN_NAMES = (STATEMENT_NAME, SIGNATURE_NAME, MEMBERS_NAME)


def _stream_listed(
    opened: Opened,
    listed: Iterator[Member],
    sink: Callable[[Member, Iterator[bytes]], None] | None,
) -> list[Member]:
    """The archive's members in step with the manifest's (both sorted by raw path bytes)."""
    from agentstack.progress import tick

    reader = opened.reader
    # Each archive name is compared with the manifest's, which passed the name rules already
    # (and a name that differs is only quoted in the refusal).
    reader.check_names = False
    total = opened.statement.member_count
    out: list[Member] = []
    for member in listed:
        tick(len(out), total)
        item = reader.next()
        if item is None:
            raise reject(
                "missing-member",
                f"{total - len(out)} member(s) of the manifest are not in the archive, first "
                f"{member.path[:80]!r}",
            )
        if item.path != member.path:
            if item.path in _OWN_NAMES:
                raise reject("duplicate-member", f"a second {item.path} in the archive")
            if item.path.encode("utf-8") < member.path.encode("utf-8"):
                raise reject(
                    "unlisted-member",
                    f"member {item.path[:80]!r} is not in the signed member manifest (or out of "
                    "order)",
                )
            raise reject(
                "missing-member",
                f"member {member.path[:80]!r} of the manifest is not in the archive (the "
                f"archive has {item.path[:80]!r} there)",
            )
        _check_member(item, member)
        _consume(reader, member, sink)
        out.append(member)
    item = reader.next()
    if item is not None:
        if item.path in _OWN_NAMES:
            raise reject("duplicate-member", f"a second {item.path} in the archive")
        raise reject(
            "unlisted-member", f"member {item.path[:80]!r} is not in the signed member manifest"
        )
    opened.inflater.finish()
    return out


def _stream_inline(
    opened: Opened, sink: Callable[[Member, Iterator[bytes]], None] | None
) -> list[Member]:
    """Format 1: the members against the statement's own list (in any order)."""
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
        if count > MAX_MEMBERS_V1:
            raise reject("too-many-members", f"the archive has more than {MAX_MEMBERS_V1} members")
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
        _check_member(item, member)
        _consume(reader, member, sink)
    present = set(seen.values())
    missing = [m.path for m in opened.statement.members if m.path not in present]
    if missing:
        raise reject(
            "missing-member",
            f"{len(missing)} member(s) of the statement are not in the archive, "
            f"first {missing[0][:80]!r}",
        )
    opened.inflater.finish()
    return list(opened.statement.members)

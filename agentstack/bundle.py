"""`.astack` bundles: a signed statement plus every byte of a locked setup (DESIGN.md "Share,
receive, quarantine").

A bundle is a gzip-compressed POSIX tar written byte-for-byte by this module (mtime 0, uid/gid 0,
no user names, members sorted by raw UTF-8 path), so the same inputs give the same bytes. Its
first member is `statement.json` (canonical JSON), its second `statement.sig` (an SSHSIG over the
statement, namespace `agentstack-bundle`); then the members the statement lists:

- `files/agentstack.toml`, `files/agentstack.lock`, and `files/<path>` for every local file the
  lock pins (found by walking the lock's file entries, whatever section they are in);
- `git/<sha1>`: the raw git objects (`<type> <size>\\0<body>`) of every git-sourced tree the lock
  pins — the commit, the trees down to the subdirectory and everything below — so the receiver
  needs no network and can check the content against the lock without running git.

Reading is strict and incremental: only regular-file and `path`-only pax members, checksums
checked, every size capped before it is read, the decompression ratio watched as the stream is
inflated, and anything after the end-of-archive marker refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import unicodedata
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import blake3

from agentstack.canonical import CanonicalError, b3, canonical_bytes, is_digest
from agentstack.errors import InvalidInput, Refused

BUNDLE_FORMAT = 1
STATEMENT_NAME = "statement.json"
SIGNATURE_NAME = "statement.sig"
MANIFEST_MEMBER = "files/agentstack.toml"
LOCK_MEMBER = "files/agentstack.lock"
MAX_STATEMENT_BYTES = 1 << 20
MAX_MEMBERS = 10_000
MAX_TOTAL_BYTES = 256 << 20
MAX_FILE_BYTES = 64 << 20
MAX_RATIO = 200  # inflated bytes per compressed byte, once more than RATIO_GRACE are out
RATIO_GRACE = 1 << 20
MAX_PATH_BYTES = 1024
MAX_DEPTH = 32
MAX_PAX_BYTES = 8192
CLOCK_SKEW_S = 300
MAX_LIFETIME_S = 5 * 366 * 86400
_BLOCK = 512
_CHUNK = 1 << 16
_VERSION_RE = re.compile(r"[0-9]{1,10}(\.[0-9]{1,10}){0,3}")
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_TIME_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_SHA1_RE = re.compile(r"[0-9a-f]{40}")


class BundleRejected(Refused):
    """A bundle that is refused; `code` names the reason (one per kind of refusal)."""

    def __init__(self, code: str, message: str, *, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.code = code


def reject(code: str, message: str, hint: str = "") -> BundleRejected:
    return BundleRejected(code, f"bundle refused ({code}): {message}", hint=hint)


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
    """The rules for a member name, in the statement and in the archive alike."""
    if not path:
        raise reject("unsafe-path", "a member has an empty path")
    if "\0" in path or "\\" in path:
        raise reject("unsafe-path", f"member {path[:80]!r} has a NUL or backslash in its path")
    if path.startswith("/"):
        raise reject("absolute-path", f"member {path[:80]!r} has an absolute path")
    parts = path.split("/")
    if ".." in parts:
        raise reject("dotdot-path", f"member {path[:80]!r} climbs out with '..'")
    if any(p in ("", ".") for p in parts):
        raise reject("unsafe-path", f"member {path[:80]!r} has an empty or '.' path component")
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES or len(parts) > MAX_DEPTH:
        raise reject("unsafe-path", f"member {path[:80]!r} has a path that is too long or deep")
    if unicodedata.normalize("NFC", path) != path:
        raise reject("not-nfc", f"member {path[:80]!r} is not NFC-normalised Unicode")
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
class GitSource:
    url: str
    commit: str
    subdir: str
    git_tree: str


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


# ------------------------------------------------------------------------------ git objects


def git_object_bytes(kind: str, body: bytes) -> bytes:
    return f"{kind} {len(body)}\0".encode() + body


def sha1_hex(raw: bytes) -> str:
    return hashlib.sha1(raw, usedforsecurity=False).hexdigest()


def split_object(raw: bytes, where: str) -> tuple[str, bytes]:
    header, sep, body = raw.partition(b"\0")
    kind, _, size = header.partition(b" ")
    if not sep or kind not in (b"commit", b"tree", b"blob") or size != str(len(body)).encode():
        raise reject("bad-git-object", f"{where} is not a well-formed git object")
    return kind.decode(), body


def tree_entries(body: bytes, where: str) -> list[tuple[str, str, str]]:
    """(mode, name, sha1) of a raw tree body."""
    out: list[tuple[str, str, str]] = []
    pos = 0
    while pos < len(body):
        space = body.find(b" ", pos)
        nul = body.find(b"\0", space + 1)
        if space < 0 or nul < 0 or nul + 21 > len(body):
            raise reject("bad-git-object", f"{where}: a damaged tree")
        mode = body[pos:space].decode("ascii", "replace")
        name = body[space + 1 : nul].decode("utf-8", "surrogateescape")
        out.append((mode, name, body[nul + 1 : nul + 21].hex()))
        pos = nul + 21
    return out


def commit_tree(body: bytes, where: str) -> str:
    first = body.split(b"\n", 1)[0]
    if not first.startswith(b"tree ") or not _SHA1_RE.fullmatch(
        first[5:].decode("ascii", "replace")
    ):
        raise reject("bad-git-object", f"{where}: a commit without a tree")
    return first[5:].decode()


def walk_git_source(
    source: GitSource, read: Callable[[str], bytes], *, limit: int = MAX_MEMBERS
) -> tuple[dict[str, bytes], dict[str, tuple[str, str]]]:
    """The raw objects a pinned source needs ({sha1: raw}) and its files ({rel: (mode, sha1)}),
    reading objects through `read(sha1) -> raw` (which must check each object's sha1). At most
    `limit` entries and MAX_DEPTH levels are walked: trees that repeat a subtree could otherwise
    describe millions of files in a few objects."""
    objects: dict[str, bytes] = {}

    def get(sha: str, want: str) -> bytes:
        raw = objects.get(sha) or read(sha)
        kind, body = split_object(raw, f"git object {sha}")
        if kind != want:
            raise reject("bad-git-object", f"git object {sha} is a {kind}, expected a {want}")
        objects[sha] = raw
        return body

    tree = commit_tree(get(source.commit, "commit"), f"commit {source.commit}")
    for part in [p for p in source.subdir.split("/") if p]:
        match = [e for e in tree_entries(get(tree, "tree"), tree) if e[1] == part]
        if not match or match[0][0] != "40000":
            raise reject("bad-git-object", f"{source.subdir!r} is not a directory in {source.url}")
        tree = match[0][2]
    if source.git_tree and tree != source.git_tree:
        raise reject("git-mismatch", f"the tree of {source.url} at {source.commit[:12]} differs")
    files: dict[str, tuple[str, str]] = {}

    visited = 0

    def walk(sha: str, prefix: str, depth: int) -> None:
        nonlocal visited
        if depth > MAX_DEPTH:
            raise reject("git-mismatch", f"{source.url}: trees nested deeper than {MAX_DEPTH}")
        for mode, name, child in tree_entries(get(sha, "tree"), sha):
            visited += 1
            if visited > limit:
                raise reject("git-mismatch", f"{source.url}: more entries than the lock pins")
            rel = f"{prefix}{name}"
            if mode == "40000":
                walk(child, rel + "/", depth + 1)
            elif mode in ("100644", "100755", "120000"):
                get(child, "blob")
                files[rel] = (mode, child)
            else:
                raise reject("bad-git-object", f"{source.url}: {rel} has git mode {mode}")

    walk(tree, "", 0)
    return objects, files


def read_mirror_object(cache: Path, url: str) -> Callable[[str], bytes]:
    """A reader of raw objects from the local mirror of `url` (GitPython's object database:
    reading objects runs no hooks and consults no work tree)."""
    from agentstack import gitsource

    repo = gitsource.open_mirror(cache, url)

    def read(sha: str) -> bytes:
        stream = repo.odb.stream(bytes.fromhex(sha))
        raw = git_object_bytes(stream.type.decode(), stream.read())
        if sha1_hex(raw) != sha:
            raise Refused(f"the local mirror of {url} holds a damaged object {sha}")
        return raw

    return read


# ------------------------------------------------------------------------------ tar writing


def _octal(value: int, width: int) -> bytes:
    return f"{value:0{width - 1}o}".encode() + b"\0"


def _split_name(name: bytes) -> tuple[bytes, bytes] | None:
    if len(name) <= 100:
        return b"", name
    for index in range(len(name) - 1, 0, -1):
        if name[index : index + 1] == b"/" and index <= 155 and len(name) - index - 1 <= 100:
            return name[:index], name[index + 1 :]
    return None


def _header(name: bytes, prefix: bytes, size: int, mode: int, typeflag: bytes) -> bytes:
    block = bytearray(_BLOCK)
    block[0 : len(name)] = name
    block[100:108] = _octal(mode, 8)
    block[108:116] = _octal(0, 8)
    block[116:124] = _octal(0, 8)
    block[124:136] = _octal(size, 12)
    block[136:148] = _octal(0, 12)
    block[148:156] = b" " * 8
    block[156:157] = typeflag
    block[257:263] = b"ustar\0"
    block[263:265] = b"00"
    block[329:337] = _octal(0, 8)
    block[337:345] = _octal(0, 8)
    block[345 : 345 + len(prefix)] = prefix
    block[148:156] = f"{sum(block):06o}".encode() + b"\0 "
    return bytes(block)


def _pad(size: int) -> bytes:
    return b"\0" * (-size % _BLOCK)


def _pax_record(key: str, value: bytes) -> bytes:
    body = f" {key}=".encode() + value + b"\n"
    length = len(body) + 1
    while len(str(length).encode()) + len(body) != length:
        length = len(str(length).encode()) + len(body)
    return str(length).encode() + body


def tar_member(path: str, data: bytes, executable: bool) -> bytes:
    name = path.encode("utf-8")
    mode = 0o755 if executable else 0o644
    split = _split_name(name)
    out = b""
    if split is None:
        pax = _pax_record("path", name)
        out += _header(b"././@PaxHeader", b"", len(pax), 0o644, b"x") + pax + _pad(len(pax))
        split = (b"", name[:100])
    out += _header(split[1], split[0], len(data), mode, b"0") + data + _pad(len(data))
    return out


def write_archive(members: list[tuple[str, bytes, bool]]) -> bytes:
    """A deterministic .tar.gz of (path, bytes, executable), in the order given."""
    import gzip
    import io

    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as gz:
        for path, data, executable in members:
            gz.write(tar_member(path, data, executable))
        gz.write(b"\0" * (2 * _BLOCK))
    return raw.getvalue()


# ------------------------------------------------------------------------------ tar reading


class Inflater:
    """Reads exactly the bytes asked for from a gzip stream, never inflating more than that, and
    refuses a stream that inflates beyond the caps (a decompression bomb) as soon as it does."""

    def __init__(self, handle: IO[bytes], limit: int) -> None:
        self.handle = handle
        self.limit = limit
        self.z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self.total_in = 0
        self.total_out = 0
        self.hasher = blake3.blake3()  # of the compressed file: the bundle digest

    def _feed(self) -> bytes:
        if self.z.unconsumed_tail:
            return self.z.unconsumed_tail
        chunk = self.handle.read(_CHUNK)
        self.total_in += len(chunk)
        self.hasher.update(chunk)
        return chunk

    def read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            if self.z.eof:
                raise reject("truncated", "the archive ends in the middle of a member")
            data = self._feed()
            if not data:
                raise reject("truncated", "the file ends before the archive does (truncated)")
            try:
                chunk = self.z.decompress(data, n - len(out))
            except zlib.error as exc:
                raise reject("corrupt", f"the compressed data is damaged ({exc})") from None
            self.total_out += len(chunk)
            self._check()
            out += chunk
        return bytes(out)

    def _check(self) -> None:
        if self.total_out > self.limit:
            raise reject("too-large", f"the archive inflates beyond {self.limit} bytes")
        if self.total_out > RATIO_GRACE and self.total_out > MAX_RATIO * max(self.total_in, 1):
            raise reject(
                "compression-bomb",
                f"the archive inflates more than {MAX_RATIO}x (a decompression bomb)",
            )

    def finish(self) -> None:
        """After the end-of-archive blocks: only zero padding, then the gzip trailer, then EOF."""
        while not self.z.eof:
            data = self._feed()
            if not data:
                raise reject("truncated", "the file ends before the compressed stream does")
            try:
                chunk = self.z.decompress(data, _CHUNK)
            except zlib.error as exc:
                raise reject("corrupt", f"the compressed data is damaged ({exc})") from None
            self.total_out += len(chunk)
            self._check()
            if chunk.strip(b"\0"):
                raise reject("trailing-data", "there is data after the end-of-archive marker")
        rest = self.z.unused_data + self.handle.read(1)
        if rest:
            raise reject("trailing-data", "there are bytes after the end of the compressed archive")


@dataclass(frozen=True, slots=True)
class TarMember:
    path: str
    size: int
    executable: bool


_TYPE_NAMES = {
    b"1": ("hardlink", "a hard link"),
    b"2": ("symlink", "a symbolic link"),
    b"3": ("device", "a character device"),
    b"4": ("device", "a block device"),
    b"5": ("directory-member", "a directory entry"),
    b"6": ("device", "a FIFO"),
    b"7": ("device", "a contiguous file"),
    b"L": ("gnu-longname", "a GNU long-name record"),
    b"K": ("gnu-longname", "a GNU long-link record"),
    b"g": ("pax-global", "a pax global header"),
    b"S": ("sparse", "a sparse file"),
}


def _field(block: bytes, start: int, end: int) -> bytes:
    return block[start:end].split(b"\0", 1)[0]


def _number(block: bytes, start: int, end: int, what: str) -> int:
    raw = block[start:end].rstrip(b"\0 ").lstrip(b" ")
    if not raw or not all(48 <= c <= 55 for c in raw):
        raise reject("bad-header", f"a member header has a malformed {what} field")
    return int(raw, 8)


class TarReader:
    """Iterates the members of a strict ustar stream; the caller must read each member's bytes
    (`read_data`) before asking for the next."""

    def __init__(self, inflater: Inflater) -> None:
        self.src = inflater
        self._pending = 0

    def next(self) -> TarMember | None:
        if self._pending:
            raise AssertionError("read the previous member first")
        pax_path: str | None = None
        while True:
            block = self.src.read(_BLOCK)
            if block == bytes(_BLOCK):
                if self.src.read(_BLOCK) != bytes(_BLOCK):
                    raise reject("bad-header", "a lone zero block inside the archive")
                if pax_path is not None:
                    raise reject("bad-header", "a pax header with no member after it")
                return None
            stored = _number(block, 148, 156, "checksum")
            if stored != sum(block[:148]) + 256 + sum(block[156:]):
                raise reject("bad-header", "a member header's checksum does not match (damaged)")
            if block[257:263] != b"ustar\0" or block[263:265] != b"00":
                raise reject("bad-header", "a member header is not POSIX ustar")
            typeflag = block[156:157]
            size = _number(block, 124, 136, "size")
            if typeflag == b"x":
                if pax_path is not None or size > MAX_PAX_BYTES:
                    raise reject("bad-header", "a pax header is repeated or too large")
                pax_path = self._pax(self.src.read(size + (-size % _BLOCK))[:size])
                continue
            if typeflag in _TYPE_NAMES:
                code, what = _TYPE_NAMES[typeflag]
                name = _field(block, 0, 100).decode("utf-8", "replace")
                raise reject(
                    code, f"member {name[:80]!r} is {what}; only regular files are allowed"
                )
            if typeflag not in (b"0", b"\0"):
                raise reject("bad-header", f"member type {typeflag!r} is not allowed")
            mode = _number(block, 100, 108, "mode")
            if mode & 0o7000:
                raise reject("bad-mode", "a member has setuid, setgid or sticky bits")
            if pax_path is not None:
                path = pax_path
            else:
                raw = _field(block, 0, 100)
                prefix = _field(block, 345, 500)
                joined = prefix + b"/" + raw if prefix else raw
                try:
                    path = joined.decode("utf-8")
                except UnicodeDecodeError:
                    raise reject("unsafe-path", "a member name is not UTF-8") from None
            self._pending = size
            return TarMember(path=path, size=size, executable=bool(mode & 0o100))

    @staticmethod
    def _pax(data: bytes) -> str:
        pos = 0
        path: str | None = None
        while pos < len(data):
            space = data.find(b" ", pos)
            if space < 0 or not data[pos:space].isdigit():
                raise reject("bad-header", "a malformed pax record")
            length = int(data[pos:space])
            record = data[space + 1 : pos + length]
            if length <= 0 or pos + length > len(data) or not record.endswith(b"\n"):
                raise reject("bad-header", "a malformed pax record")
            key, sep, value = record[:-1].partition(b"=")
            if not sep or key != b"path" or path is not None:
                raise reject(
                    "bad-header",
                    f"pax key {key[:40].decode('ascii', 'replace')!r} is not allowed "
                    "(only a single 'path')",
                )
            try:
                path = value.decode("utf-8")
            except UnicodeDecodeError:
                raise reject("unsafe-path", "a member name is not UTF-8") from None
            pos += length
        if path is None:
            raise reject("bad-header", "an empty pax header")
        return path

    def read_data(self) -> Iterator[bytes]:
        """The pending member's bytes in chunks (then its padding is skipped)."""
        remaining = self._pending
        while remaining:
            chunk = self.src.read(min(_CHUNK, remaining))
            remaining -= len(chunk)
            yield chunk
        self.src.read(-self._pending % _BLOCK)
        self._pending = 0

    def read_all(self) -> bytes:
        return b"".join(self.read_data())


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
    from agentstack.manifest import LOCK_NAME, MANIFEST_NAME
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
    sources = {p.git for p in pinned_files(lock) if p.git is not None}
    for source in sorted(sources, key=lambda s: (s.url, s.commit, s.subdir)):
        reader = readers.get(source.url)
        if reader is None:
            reader = readers[source.url] = read_mirror_object(agentstack_cache(), source.url)
        objects, _ = walk_git_source(source, reader)
        for sha, raw in objects.items():
            add(f"git/{sha}", raw, False)
    return [found[p] for p in sorted(found, key=lambda p: p.encode("utf-8"))]


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
    from agentstack import sshsig
    from agentstack.consent import consent_digest, consent_document
    from agentstack.lockfile import fresh_lock
    from agentstack.manifest import LOCK_NAME, load_manifest
    from agentstack.trust import TrustStore

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
    from agentstack import sshsig
    from agentstack.keys import allowed_signers

    inflater = Inflater(handle, MAX_TOTAL_BYTES + (MAX_MEMBERS + 4) * 2 * _BLOCK + (4 << 20))
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
    while True:
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

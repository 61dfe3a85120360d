"""Git objects in bundles: the raw objects (`<type> <size>\\0<body>`) of a pinned git source,
read from the local mirror when sharing and checked in pure Python when receiving (no git runs
on a received bundle).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentstack.errors import Refused
from agentstack.share.archive import reject

MAX_TREE_DEPTH = 32
_SHA1_RE = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True, kw_only=True, slots=True)
class GitSource:
    url: str
    commit: str
    subdir: str
    git_tree: str


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
    source: GitSource, read: Callable[[str], bytes], *, limit: int
) -> tuple[dict[str, bytes], dict[str, tuple[str, str]]]:
    """The raw objects a pinned source needs ({sha1: raw}) and its files ({rel: (mode, sha1)}),
    reading objects through `read(sha1) -> raw` (which must check each object's sha1). At most
    `limit` entries and MAX_TREE_DEPTH levels are walked: trees that repeat a subtree could otherwise
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
        if depth > MAX_TREE_DEPTH:
            raise reject("git-mismatch", f"{source.url}: trees nested deeper than {MAX_TREE_DEPTH}")
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
    import agentstack.lock.gitsource as gitsource

    repo = gitsource.open_mirror(cache, url)

    def read(sha: str) -> bytes:
        stream = repo.odb.stream(bytes.fromhex(sha))
        raw = git_object_bytes(stream.type.decode(), stream.read())
        if sha1_hex(raw) != sha:
            raise Refused(f"the local mirror of {url} holds a damaged object {sha}")
        return raw

    return read

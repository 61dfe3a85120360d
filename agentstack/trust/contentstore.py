"""The bytes of trusted text files, kept so a later review can show what changed as lines.

A content-addressed store under `$AGENTSTACK_CACHE/content/`: one file per blake3 digest (the same
`b3:` digest the lock pins), written only after the bytes were checked against that digest, and
checked again when read back (the cache is not trusted to be intact). Only text files are kept,
up to `MAX_BYTES` each; a binary file is shown by size and hash. `prune` keeps exactly the files
referenced by a consent document that the trust log still trusts, for any project.

Nothing here runs project code: files are read (links are not followed), never executed.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentstack import layout
from agentstack.canonical import b3, is_digest
from agentstack.consent.diff import root_files
from agentstack.fsutil import write_atomic, write_batch
from agentstack.paths import agentstack_cache, ensure_private_dir

MAX_BYTES = 1024 * 1024


def is_text(data: bytes) -> bool:
    if b"\0" in data[:8192]:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def document_files(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(item, file entry) for every file a consent document pins: `instructions`,
    `servers.NAME`, `hooks.NAME`, `skills.NAME`, `plugins.NAME`, `code_roots[PATH]`."""
    for entry in doc.get("instructions", []):
        yield "instructions", entry
    for section in ("servers", "hooks", "skills", "plugins"):
        for name, item in sorted(doc.get(section, {}).items()):
            for entry in item.get("files", []):
                yield f"{section}.{name}", entry
            inline = [r for r in item.get("roots", []) if "files" in r]
            for entry in root_files(inline):
                yield f"{section}.{name}", entry
    for path, shared in sorted(doc.get("code_roots", {}).items()):
        # A tree several commands load (their root entries carry no files): its files once.
        for entry in root_files([shared]):
            yield f"code_roots[{path}]", entry


def _read_no_follow(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(MAX_BYTES + 1)
    finally:
        os.close(fd)


def collect(root: Path, doc: dict[str, Any]) -> dict[str, bytes]:
    """digest -> bytes of the text files `doc` pins that are on disk now with exactly that digest
    (project files and local skills; a git skill's files are read from the mirror if present)."""
    found: dict[str, bytes] = {}
    for item, entry in document_files(doc):
        digest = entry.get("digest", "")
        if digest in found or not is_digest(digest) or entry.get("kind", "file") != "file":
            continue
        data = _locate(root, doc, item, entry)
        if data is not None and len(data) <= MAX_BYTES and is_text(data) and b3(data) == digest:
            found[digest] = data
    return found


def _locate(root: Path, doc: dict[str, Any], item: str, entry: dict[str, Any]) -> bytes | None:
    rel = str(entry.get("path", ""))
    if not rel or rel.startswith("/") or ".." in rel.split("/"):
        return None
    if item.startswith(("skills.", "plugins.")):
        section, _, name = item.partition(".")
        skill = doc[section][name]
        if skill.get("source") == "path":
            return _read_no_follow(root / str(skill["path"]) / rel)
        return _git_blob(skill, rel)
    return _read_no_follow(root / rel)


def _git_blob(skill: dict[str, Any], rel: str) -> bytes | None:
    """A git skill's file from the local mirror only: a review never fetches."""
    try:
        import agentstack.lock.gitsource as gitsource

        repo = gitsource.open_mirror(agentstack_cache(), skill["git"])
        tree = repo.commit(skill["commit"]).tree
        if skill.get("subdir"):
            tree = tree / skill["subdir"]
        data: bytes = (tree / rel).data_stream.read()
    except Exception:  # noqa: BLE001 - no mirror or no such blob: shown by hash instead
        return None
    return data


class ContentStore:
    def __init__(self, cache: Path | None = None) -> None:
        self.directory = Path(layout.content_store(str(cache if cache is not None else agentstack_cache())))

    def path(self, digest: str) -> Path:
        hexpart = digest.removeprefix("b3:")
        return self.directory / hexpart[:2] / hexpart

    def get(self, digest: str) -> bytes | None:
        if not is_digest(digest):
            return None
        data = _read_no_follow(self.path(digest))
        return data if data is not None and b3(data) == digest else None

    def put(self, digest: str, data: bytes) -> None:
        if not is_digest(digest) or b3(data) != digest or not is_text(data):
            return
        path = self.path(digest)
        if path.is_file():
            return
        ensure_private_dir(path.parent)
        write_atomic(path, data, 0o600)

    def put_all(self, found: dict[str, bytes]) -> None:
        """Store every new (digest, bytes) pair: one batch of atomic writes with two filesystem
        syncs (fsutil.write_batch), not two fsyncs per file. A file already stored is skipped
        (one stat); a store that cannot be written costs only the line diffs of a later review."""
        items: list[tuple[Path, bytes, int | None]] = []
        buckets: set[Path] = set()
        for digest, data in found.items():
            if not is_digest(digest) or not is_text(data) or b3(data) != digest:
                continue
            path = self.path(digest)
            if path.is_file():
                continue
            if path.parent not in buckets:
                with contextlib.suppress(OSError):
                    ensure_private_dir(path.parent)
                buckets.add(path.parent)
            items.append((path, data, 0o600))
        with contextlib.suppress(OSError):
            write_batch(items)

    def prune(self, keep: set[str]) -> int:
        """Remove every stored file whose digest is not in `keep`; returns how many."""
        removed = 0
        if not self.directory.is_dir():
            return 0
        wanted = {d.removeprefix("b3:") for d in keep}
        for bucket in self.directory.iterdir():
            if not bucket.is_dir() or bucket.is_symlink():
                continue
            for entry in bucket.iterdir():
                if entry.name not in wanted:
                    with contextlib.suppress(OSError):
                        entry.unlink()
                        removed += 1
        return removed


class Contents:
    """What a review reads file bytes from: the files on disk now, then the store."""

    def __init__(self, store: ContentStore, found: dict[str, bytes] | None = None) -> None:
        self.store = store
        self.found = dict(found or {})

    def get(self, digest: str) -> bytes | None:
        return self.found.get(digest) or self.store.get(digest)


def referenced_digests(documents: list[dict[str, Any]]) -> set[str]:
    return {
        str(entry.get("digest"))
        for doc in documents
        for _, entry in document_files(doc)
        if entry.get("digest")
    }


def keep_trusted(store: ContentStore, documents: list[dict[str, Any]]) -> int:
    """Prune the content store to what `documents` name: the consent documents the trust log
    still trusts, for every project (`agentstack.trust.review.trusted_documents`)."""
    return store.prune(referenced_digests(documents))

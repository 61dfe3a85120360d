"""The bytes of trusted text files, kept so a later review can show what changed as lines.

A content-addressed store under `$AGENTSTACK_CACHE/content/`. Each trust writes one pack,
`packs/<b3 hex>.pack`, named by the blake3 digest of its own bytes, holding the texts of that trust
that no earlier pack holds (one write, one file sync and one directory sync for any number of
files). A pack is checked against its name before any byte of it is used, and every text against
its own `b3:` digest (the same digest the lock pins) when it is read back: the cache is not
trusted to be intact. A damaged or truncated pack is refused whole (`ContentPackError`, named in
`ContentStore.problems`); its texts are then shown by size and hash, as files never kept are.
The store of earlier versions (one file per digest, `<2 hex>/<64 hex>`) is still read, and a
trust folds its files into the new pack. Only text files are kept, up to `MAX_BYTES` each. `prune`
keeps exactly the texts referenced by a consent document that the trust log still trusts, for any
project: a pack nothing kept names is removed, one partly named is rewritten with just those.

Nothing here runs project code: files are read (links are not followed), never executed.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentstack import layout
from agentstack.canonical import b3, is_digest
from agentstack.consent.diff import root_files
from agentstack.fsutil import write_atomic
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


def _read_no_follow(path: Path | str, limit: int | None = MAX_BYTES) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (limit is not None and info.st_size > limit):
            return None
        chunks = []
        left = (info.st_size if limit is None else limit) + 1  # one more: a file that grew
        while left > 0:
            chunk = os.read(fd, max(left, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
            if limit is None and left <= 0:
                left = 65536  # no limit: on to the end
        data = b"".join(chunks)
        return data if limit is None or len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def collect(root: Path, doc: dict[str, Any]) -> dict[str, bytes]:
    """digest -> bytes of the text files `doc` pins that are on disk now with exactly that digest
    (project files and local skills; a git skill's files are read from the mirror if present)."""
    found: dict[str, bytes] = {}
    bases: dict[str, str | None] = {}
    top = str(root)
    for item, entry in document_files(doc):
        digest = entry.get("digest", "")
        if digest in found or entry.get("kind", "file") != "file" or not is_digest(digest):
            continue
        if entry.get("size", 0) > MAX_BYTES:
            continue
        rel = str(entry.get("path", ""))
        if not rel or rel.startswith("/") or ".." in rel.split("/"):
            continue
        if item not in bases:
            bases[item] = _base(top, doc, item)
        base = bases[item]
        data = _read_no_follow(f"{base}/{rel}") if base is not None else _locate(doc, item, rel)
        if data is not None and len(data) <= MAX_BYTES and is_text(data) and b3(data) == digest:
            found[digest] = data
    return found


def _base(top: str, doc: dict[str, Any], item: str) -> str | None:
    """The directory `item`'s paths are relative to on disk, or None (a git skill's mirror)."""
    if item.startswith(("skills.", "plugins.")):
        section, _, name = item.partition(".")
        skill = doc[section][name]
        return os.path.join(top, str(skill["path"])) if skill.get("source") == "path" else None
    return top


def _locate(doc: dict[str, Any], item: str, rel: str) -> bytes | None:
    section, _, name = item.partition(".")
    return _git_blob(doc[section][name], rel)


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


PACK_MAGIC = b"agentstack content pack 1\n"
PACKS = "packs"
_HEX = frozenset("0123456789abcdef")


class ContentPackError(ValueError):
    """A pack that is not exactly what its name says: none of its texts are used."""


def pack_bytes(texts: dict[str, bytes]) -> bytes:
    """The pack of `texts` (digest -> bytes): the magic line, an 8-byte big-endian length, the
    index (JSON: the digests in order with each text's length), then the texts in that order.
    The same texts always make the same bytes (so the same name)."""
    order = sorted(texts)
    index = json.dumps({"files": [[d, len(texts[d])] for d in order]},
                       separators=(",", ":")).encode()
    return b"".join([PACK_MAGIC, len(index).to_bytes(8, "big"), index,
                     *(texts[d] for d in order)])


def read_pack(path: Path) -> dict[str, tuple[int, int, bytes]]:
    """digest -> (offset, length, pack bytes) of every text in the pack at `path`, after checking
    that its bytes hash to its name and that its index covers its body exactly; raises
    ContentPackError (naming the pack and what is wrong) otherwise."""
    name = path.name.removesuffix(".pack")
    data = _read_no_follow(path, limit=None)
    if data is None:
        raise ContentPackError(f"content pack {path} cannot be read as a regular file")
    if b3(data) != "b3:" + name:
        raise ContentPackError(
            f"content pack {path} is damaged or truncated: its {len(data)} bytes do not hash "
            "to its name"
        )
    head = len(PACK_MAGIC) + 8
    if not data.startswith(PACK_MAGIC) or len(data) < head:
        raise ContentPackError(f"content pack {path} is not a pack of this format")
    size = int.from_bytes(data[len(PACK_MAGIC):head], "big")
    try:
        files = json.loads(data[head:head + size])["files"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ContentPackError(f"content pack {path} has an unreadable index ({exc})") from None
    entries: dict[str, tuple[int, int, bytes]] = {}
    offset = head + size
    for item in files if isinstance(files, list) else [None]:
        if (not isinstance(item, list) or len(item) != 2 or not is_digest(item[0])
                or not isinstance(item[1], int) or not 0 <= item[1] <= MAX_BYTES):
            raise ContentPackError(f"content pack {path} has a malformed index entry {item!r}")
        entries[item[0]] = (offset, item[1], data)
        offset += item[1]
    if offset != len(data):
        raise ContentPackError(
            f"content pack {path}: its index covers {offset} bytes, the pack has {len(data)}"
        )
    return entries


class ContentStore:
    def __init__(self, cache: Path | None = None) -> None:
        self.directory = Path(layout.content_store(str(cache if cache is not None else agentstack_cache())))
        self.problems: list[str] = []  # the damaged packs met (their texts are not used)
        self._index: dict[str, tuple[int, int, bytes]] | None = None
        self._packs: dict[Path, set[str]] = {}

    @property
    def packs(self) -> Path:
        return self.directory / PACKS

    def path(self, digest: str) -> Path:
        """Where the store of earlier versions kept one text (still read, never written)."""
        hexpart = digest.removeprefix("b3:")
        return self.directory / hexpart[:2] / hexpart

    # ---------------------------------------------------------------- reading
    def _pack_paths(self) -> list[Path]:
        try:
            names = sorted(os.listdir(self.packs))
        except OSError:
            return []
        return [self.packs / n for n in names
                if n.endswith(".pack") and len(n) == 69 and set(n[:64]) <= _HEX]

    def _load(self) -> dict[str, tuple[int, int, bytes]]:
        if self._index is None:
            self._index, self._packs = {}, {}
            for path in self._pack_paths():
                try:
                    entries = read_pack(path)
                except ContentPackError as exc:
                    self.problems.append(str(exc))
                    continue
                self._packs[path] = set(entries)
                for digest, entry in entries.items():
                    self._index.setdefault(digest, entry)
        return self._index

    def get(self, digest: str) -> bytes | None:
        if not is_digest(digest):
            return None
        entry = self._load().get(digest)
        if entry is not None:
            offset, length, pack = entry
            data = pack[offset:offset + length]
            if b3(data) == digest:
                return data
        loose = _read_no_follow(self.path(digest))
        return loose if loose is not None and b3(loose) == digest else None

    def _loose(self) -> dict[str, Path]:
        """digest -> path of every file of the earlier one-file-per-text store."""
        found: dict[str, Path] = {}
        try:
            buckets = list(os.scandir(self.directory))
        except OSError:
            return found
        for bucket in buckets:
            if len(bucket.name) != 2 or not set(bucket.name) <= _HEX or not bucket.is_dir(
                    follow_symlinks=False):
                continue
            with contextlib.suppress(OSError):
                for entry in os.scandir(bucket.path):
                    if len(entry.name) == 64 and entry.name.startswith(bucket.name):
                        found["b3:" + entry.name] = Path(entry.path)
        return found

    # ---------------------------------------------------------------- writing
    def put(self, digest: str, data: bytes) -> None:
        self.put_all({digest: data})

    def put_all(self, found: dict[str, bytes], *, checked: bool = False) -> None:
        """Keep every (digest, text) pair no pack holds yet in one new pack (one atomic write:
        one file sync, one directory sync). Files of the earlier store are folded into it and
        removed once it is written. `checked`: every pair is a text that hashes to its digest
        already (`collect`'s). A store that cannot be written costs only the line diffs of a
        later review."""
        index = self._load()
        texts = {d: data for d, data in found.items()
                 if d not in index and (checked or (
                     is_digest(d) and len(data) <= MAX_BYTES and is_text(data) and b3(data) == d))}
        loose = self._loose()
        for digest, path in loose.items():
            data = _read_no_follow(path)
            if digest not in index and data is not None and b3(data) == digest:
                texts.setdefault(digest, data)
        if not texts:
            return
        if not self._write(texts):
            return
        for path in loose.values():
            with contextlib.suppress(OSError):
                path.unlink()

    def _write(self, texts: dict[str, bytes]) -> bool:
        """One new pack of `texts`, added to the loaded index as written (not read back)."""
        data = pack_bytes(texts)
        path = self.packs / (b3(data).removeprefix("b3:") + ".pack")
        try:
            ensure_private_dir(self.packs)
            write_atomic(path, data, 0o600)
        except Exception:  # noqa: BLE001 - only a cache: the review then shows hashes
            return False
        index = self._load()
        offset = len(data) - sum(len(t) for t in texts.values())
        for digest in sorted(texts):
            index[digest] = (offset, len(texts[digest]), data)
            offset += len(texts[digest])
        self._packs[path] = set(texts)
        return True

    def prune(self, keep: set[str]) -> int:
        """Keep only the texts whose digest is in `keep`; returns how many texts were removed.
        A pack with none of them is removed, one with some is rewritten with just those (the new
        pack written before the old one goes), a damaged pack is removed."""
        removed = 0
        index = self._load()
        for path in self._pack_paths():
            held = self._packs.get(path)
            wanted = set() if held is None else held & keep
            if held is not None and wanted == held:
                continue
            if wanted:
                texts = {d: index[d][2][index[d][0]:index[d][0] + index[d][1]] for d in wanted}
                if not self._write(texts):
                    continue
            with contextlib.suppress(OSError):
                path.unlink()
                removed += len(held or ()) - len(wanted)
        self._index = None
        for digest, loose in self._loose().items():
            if digest not in keep:
                with contextlib.suppress(OSError):
                    loose.unlink()
                    removed += 1
        return removed


class Contents:
    """What a review reads file bytes from: the files on disk now, then the store. `found`: texts
    each checked against its digest (`collect`'s), kept as they are after a trust."""

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

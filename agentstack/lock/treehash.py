"""Content hashing of local files and trees (docs/lockfile.md, "Tree hashing").

Rules: never follow symlinks (in-tree relative links are hashed as links; links escaping the tree,
devices, FIFOs and sockets are errors); only the user-executable bit counts; entries are sorted by raw
UTF-8 bytes; names must be NFC UTF-8 without `/`, NUL, `.` or `..`, and must not collide after
casefold+NFC; bytes are hashed exactly as stored; every entry is length-framed.

Re-hashing an unchanged tree is avoided by a stat cache keyed on (device, inode, size, mtime_ns,
ctime_ns) that obeys the racy-timestamp rule: an entry whose file changed within `RACY_SLACK_NS` of
the moment its hashing began is never trusted, because a later same-size edit in the same clock
tick would leave every stat field equal (file timestamps come from a coarse clock).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, NamedTuple

import blake3

from agentstack.canonical import DIGEST_PREFIX
from agentstack.errors import Refused, TreeHashError
from agentstack.progress import tick

TREE_DOMAIN = b"agentstack-tree-v1\0"
RACY_SLACK_NS = 1_000_000_000
_CHUNK = 1 << 20
_BIG_FILE = 8 << 20

EntryKind = Literal["file", "link"]


class LimitExceeded(Refused):
    """What `lock` would pin is larger than its limits allow (exit 1)."""


class Limits(NamedTuple):  # not a dataclass: `digest` and `status` import this module
    """Caps on what one `lock` pins. They come from the command line, never from the project (a
    project could otherwise lift them); the defaults fit any real configuration."""

    max_file_bytes: int = 256 << 20
    max_files: int = 200_000
    max_total_bytes: int = 4 << 30

    def file_too_big(self, where: str, path: str, size: int) -> LimitExceeded:
        return LimitExceeded(
            f"{where}: {path} is {size} bytes, more than the limit of {self.max_file_bytes}",
            hint="if it is meant to be pinned, raise the limit: agentstack lock --max-file-size N",
        )

    def too_many_files(self, where: str) -> LimitExceeded:
        return LimitExceeded(
            f"{where}: the lock would pin more than {self.max_files} files",
            hint="pin less (pin = [...]), or raise the limit: agentstack lock --max-files N",
        )

    def too_many_bytes(self, where: str) -> LimitExceeded:
        return LimitExceeded(
            f"{where}: the lock would pin more than {self.max_total_bytes} bytes",
            hint="raise the limit: agentstack lock --max-total-size N",
        )


class TreeEntry(NamedTuple):
    """One regular file or in-tree symlink; `digest` hashes the file bytes or the link target."""

    path: str
    kind: EntryKind
    executable: bool
    size: int
    digest: str


def _frame(data: bytes) -> bytes:
    return len(data).to_bytes(8, "big") + data


def tree_digest(entries: Iterable[TreeEntry]) -> str:
    """Digest of a tree: framed (kind, path, mode, content digest) per entry, in raw-byte order."""
    hasher = blake3.blake3(TREE_DOMAIN)
    for entry in sorted(entries, key=lambda e: e.path.encode("utf-8")):
        mode = b"x" if entry.executable else b"-"
        hasher.update(
            _frame(entry.kind.encode())
            + _frame(entry.path.encode("utf-8"))
            + _frame(mode)
            + _frame(entry.digest.encode())
        )
    return DIGEST_PREFIX + hasher.hexdigest()


def bytes_digest(data: bytes) -> str:
    return DIGEST_PREFIX + blake3.blake3(data).hexdigest()


def check_name(name: str, where: str) -> None:
    """Reject a path component that cannot be hashed portably."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise TreeHashError(
            f"{where}: name is not valid UTF-8", hint="rename the file to a UTF-8 name"
        ) from None
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise TreeHashError(f"{where}: name {name!r} is not allowed")
    if unicodedata.normalize("NFC", name) != name:
        raise TreeHashError(
            f"{where}: name is not NFC-normalised Unicode",
            hint="rename it to its NFC form; macOS and Linux would otherwise disagree on the bytes",
        )


def _collision_key(name: str) -> str:
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", name).casefold())


class StatCache:
    """Maps a file's stat fingerprint to its content digest, persisted under $AGENTSTACK_CACHE.

    An entry is one string, `dev:ino:size:mtime_ns:ctime_ns:hashed_ns:digest` (a flat JSON object
    of strings is several times cheaper to load and save than one list per file)."""

    VERSION = 3

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: dict[str, str] = {}
        self._dirty = False
        # Pruning: trees walked completely in this session, and every file seen in them. An
        # entry under such a tree that was not seen belongs to a file that is gone.
        self._walked: list[str] = []
        self._seen: set[str] = set()
        # When a list: each file the walks looked at, with the stat its digest belongs to (for
        # agentstack.lock.relock's record of an unchanged tree).
        self.observed: list[tuple[str, os.stat_result]] | None = None
        if path is not None:
            self._load(path)

    def _load(self, path: Path) -> None:
        try:
            raw = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return  # a missing or damaged cache only costs a re-hash
        if isinstance(raw, dict) and raw.get("version") == self.VERSION:
            entries = raw.get("entries")
            if isinstance(entries, dict):
                self._entries = entries

    def lookup(self, abspath: str, st: os.stat_result) -> str | None:
        self._seen.add(abspath)
        return _cached_digest(self._entries.get(abspath), st)

    def store(self, abspath: str, st: os.stat_result, digest: str, hashed_ns: int) -> None:
        """Remember `digest` for `st`; `hashed_ns` is when reading began (the racy reference)."""
        self._entries[abspath] = (
            f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:"
            f"{hashed_ns}:{digest}"
        )
        self._seen.add(abspath)
        self._dirty = True

    def walked(self, root: str, seen: Iterable[str]) -> None:
        """`root` was walked completely and held exactly the files `seen` (absolute paths)."""
        self._walked.append(root.rstrip("/") + "/")
        self._seen.update(seen)

    def prune(self) -> int:
        """Drop the entries of files no longer present under the trees walked; how many."""
        if not self._walked:
            return 0
        prefixes, seen = tuple(self._walked), self._seen
        gone = [k for k in self._entries if k.startswith(prefixes) and k not in seen]
        for key in gone:
            del self._entries[key]
        if gone:
            self._dirty = True
        return len(gone)

    def save(self) -> None:
        self.prune()
        if self.path is None or not self._dirty:
            return
        payload = {"version": self.VERSION, "entries": self._entries}
        # json.dumps, not json.dump: only the former uses the C encoder.
        data = json.dumps(payload, separators=(",", ":")).encode("utf-8", "surrogateescape")
        try:
            write_private(str(self.path), data)
        except OSError:
            return  # the cache is an optimisation; never fail a lock on it
        self._dirty = False


def write_private(path: str, data: bytes) -> None:
    """Replace `path` with `data` atomically (a temporary file beside it, mode 0600, then
    `os.replace`; the directory is made 0700), without fsync: for caches, where a lost write
    only costs work. No `tempfile` (its import pulls in `random` and `hashlib`)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    tmp = f"{path}.{os.urandom(6).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _cached_digest(cached: object, st: os.stat_result) -> str | None:
    """The digest in a stat-cache entry when `st` matches its fingerprint and the racy-timestamp
    rule allows it, else None."""
    if type(cached) is not str:
        return None
    key = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:"
    if not cached.startswith(key):
        return None
    hashed, _, digest = cached[len(key) :].partition(":")
    if not hashed.isdigit() or len(digest) != 67 or not digest.startswith(DIGEST_PREFIX):
        return None
    if max(st.st_mtime_ns, st.st_ctime_ns) >= int(hashed) - RACY_SLACK_NS:
        return None  # racily clean: the stat fields cannot prove the bytes unchanged
    return digest


def _hash_fd(fd: int, size: int) -> str:
    if size <= _BIG_FILE:
        read_size = max(size + 1, 4096)
        chunk = os.read(fd, read_size)
        if len(chunk) < read_size:
            # A short read of a regular file is its end: one read and one hash call per file.
            return DIGEST_PREFIX + blake3.blake3(chunk).hexdigest()
        hasher = blake3.blake3(chunk)  # it grew meanwhile: read on
        while chunk := os.read(fd, read_size):
            hasher.update(chunk)
            if len(chunk) < read_size:
                break
        return DIGEST_PREFIX + hasher.hexdigest()
    big = size > _BIG_FILE
    hasher = blake3.blake3(max_threads=blake3.blake3.AUTO) if big else blake3.blake3()
    read_size = 16 * _CHUNK if big else max(size + 1, 4096)
    while chunk := os.read(fd, read_size):
        hasher.update(chunk)
        if len(chunk) < read_size and not big:
            # A short read of a regular file is its end (one read, not two, per small file);
            # a file that grew meanwhile still ends in a full read and is read on.
            break
    return DIGEST_PREFIX + hasher.hexdigest()


_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | os.O_NONBLOCK


def _open_digest(path: str, cache: StatCache | None) -> tuple[str, os.stat_result]:
    """Read and hash the regular file at `path` (a link is not followed; a FIFO is not waited
    on): its digest and the stat of the file that was read, remembered in `cache`."""
    started_ns = time.time_ns()
    fd = os.open(path, _OPEN_FLAGS)
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise TreeHashError(f"{path}: file was replaced while it was being hashed")
        digest = _hash_fd(fd, opened.st_size)
    finally:
        os.close(fd)
    if cache is not None:
        cache.store(path, opened, digest, started_ns)
    return digest, opened


def hash_regular_file(path: Path | str, st: os.stat_result, cache: StatCache | None) -> str:
    abspath = str(path)
    if cache is not None:
        hit = cache.lookup(abspath, st)
        if hit is not None:
            return hit
    return _read_digest(abspath, st, cache)


def _read_digest(abspath: str, st: os.stat_result, cache: StatCache | None) -> str:
    """Read and hash a regular file (no cache lookup); remember the digest in `cache`."""
    path = abspath
    started_ns = time.time_ns()
    fd = os.open(abspath, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
            raise TreeHashError(f"{path}: file was replaced while it was being hashed")
        digest = _hash_fd(fd, opened.st_size)
    finally:
        os.close(fd)
    if cache is not None:
        cache.store(abspath, opened, digest, started_ns)
    return digest


def hash_file(path: Path, cache: StatCache | None = None) -> TreeEntry:
    """Hash one regular file (not a link); the entry's path is the file name."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise TreeHashError(f"{path}: no such file") from None
    if stat.S_ISLNK(st.st_mode):
        raise TreeHashError(f"{path}: is a symbolic link", hint="point the manifest at the file")
    if not stat.S_ISREG(st.st_mode):
        raise TreeHashError(f"{path}: not a regular file")
    return TreeEntry(
        path=path.name,
        kind="file",
        executable=bool(st.st_mode & stat.S_IXUSR),
        size=st.st_size,
        digest=hash_regular_file(path, st, cache),
    )


_MAX_LINK_HOPS = 40


def _resolve_link(rel: str, links: dict[str, str]) -> list[str] | None:
    """Where the link at `rel` leads inside the tree (as components), following other in-tree
    links the way the kernel would; None when it leaves the tree."""
    parts = rel.split("/")[:-1]
    target = links[rel]
    if target.startswith("/"):
        return None
    pending = target.split("/")
    hops = 0
    while pending:
        component = pending.pop(0)
        if component in ("", "."):
            continue
        if component == "..":
            if not parts:
                return None
            parts.pop()
            continue
        parts.append(component)
        joined = "/".join(parts)
        if joined in links:
            hops += 1
            if hops > _MAX_LINK_HOPS:
                raise TreeHashError(f"{rel}: symbolic links loop")
            inner = links[joined]
            if inner.startswith("/"):
                return None
            parts.pop()
            pending = inner.split("/") + pending
    return parts


def check_links(where: str, links: dict[str, str]) -> None:
    """Every link must resolve inside the tree, even through other links (`q -> .`, `p -> q/..`)."""
    for rel in sorted(links, key=lambda p: p.encode("utf-8")):
        if _resolve_link(rel, links) is None:
            raise TreeHashError(
                f"{where}/{rel}: symbolic link to {links[rel]!r} escapes the tree",
                hint="use a relative link that stays inside the directory, or copy the file",
            )


def walk_tree(
    root: Path,
    cache: StatCache | None = None,
    *,
    exclude: frozenset[str] = frozenset(),
    excluded: list[str] | None = None,
) -> list[TreeEntry]:
    """Every file and in-tree link under `root`, validated; empty directories are not content.

    A directory whose name is in `exclude` is skipped (at any depth) and its tree-relative path is
    appended to `excluded`, so the caller can show what was left out."""
    return [
        TreeEntry(path=p, kind=k, executable=x, size=n, digest=d)
        for p, k, x, n, d in walk_rows(root, cache, exclude=exclude, excluded=excluded)
    ]


Row = tuple[str, EntryKind, bool, int, str]  # path, kind, executable, size, digest


def walk_rows(
    root: Path,
    cache: StatCache | None = None,
    *,
    exclude: frozenset[str] = frozenset(),
    excluded: list[str] | None = None,
) -> list[Row]:
    """`walk_tree` as plain tuples (path, kind, executable, size, digest), in walk order: the
    lock's hot path, without an object per file."""
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        raise TreeHashError(f"{root}: no such directory") from None
    if stat.S_ISLNK(st.st_mode):
        raise TreeHashError(
            f"{root}: is a symbolic link", hint="point the manifest at the directory"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise TreeHashError(f"{root}: not a directory")
    links: dict[str, str] = {}
    skipped: list[str] = [] if excluded is None else excluded
    rows: list[Row] = []
    seen: list[str] = []
    _Walk(root, cache, links, exclude, skipped, rows, seen).directory("")
    check_links(str(root), links)
    if cache is not None:
        cache.walked(str(root), seen)
    return rows


class _Walk:
    """One walk: the hot loop of a large lock (plain strings, tuples, inline cache lookups;
    error text is built only on failure)."""

    def __init__(
        self,
        root: Path,
        cache: StatCache | None,
        links: dict[str, str],
        exclude: frozenset[str],
        excluded: list[str],
        rows: list[Row],
        seen: list[str],
    ) -> None:
        self.root, self.top = root, str(root)
        self.cache, self.links, self.exclude, self.excluded = cache, links, exclude, excluded
        self.rows, self.seen = rows, seen
        self.entries = cache._entries if cache is not None else None
        self.observed = cache.observed if cache is not None else None

    def directory(self, prefix: str) -> None:
        root = self.root
        directory = os.path.join(self.top, prefix) if prefix else self.top
        with os.scandir(directory) as it:
            # By name: the order errors are found in (rows are sorted by raw bytes later).
            children = sorted(it, key=_by_name)
        names: dict[str, str] = {}
        rows, seen, entries, cache = self.rows, self.seen, self.entries, self.cache
        tick(len(rows))
        observed = self.observed
        for child in children:
            name = child.name
            rel = f"{prefix}/{name}" if prefix else name
            if name.isascii():
                if not name.isprintable() or name == "." or name == "..":
                    check_name(name, os.path.join(root, rel))
                key = name.lower()
            else:
                check_name(name, os.path.join(root, rel))
                key = _collision_key(name)
            if key in names:
                raise TreeHashError(
                    f"{root / rel}: collides with {names[key]!r} on a case-insensitive file system",
                    hint="rename one of them",
                )
            names[key] = name
            path = child.path
            if (entries is None or path not in entries) and child.is_file(follow_symlinks=False):
                # Nothing cached: no lstat, the file's own fstat (open, fstat, read, close).
                digest, opened = _open_digest(path, cache)
                if observed is not None:
                    observed.append((path, opened))
                seen.append(path)
                rows.append((rel, "file", opened.st_mode & 0o100 != 0, opened.st_size, digest))
                continue
            st = child.stat(follow_symlinks=False)
            mode = st.st_mode
            kind = mode & _S_IFMT
            if kind == _S_IFREG:
                hit = None if entries is None else _cached_digest(entries.get(path), st)
                if hit is None:
                    digest, st = _open_digest(path, cache)
                else:
                    digest = hit
                if observed is not None:
                    observed.append((path, st))
                seen.append(path)
                rows.append((rel, "file", st.st_mode & 0o100 != 0, st.st_size, digest))
            elif kind == _S_IFDIR:
                if name in self.exclude:
                    self.excluded.append(rel)
                    continue
                self.directory(rel)
            elif kind == _S_IFLNK:
                target = os.readlink(child.path)
                raw = os.fsencode(target)
                self.links[rel] = target
                rows.append((rel, "link", False, len(raw), bytes_digest(raw)))
            else:
                what = (
                    "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device"
                )
                raise TreeHashError(
                    f"{root / rel}: is a {what}; only files and links can be pinned"
                )


_S_IFMT, _S_IFREG, _S_IFDIR, _S_IFLNK = (
    stat.S_IFMT(0o177777),
    stat.S_IFREG,
    stat.S_IFDIR,
    stat.S_IFLNK,
)


def _by_name(entry: os.DirEntry[str]) -> str:
    return entry.name


_KIND_FRAMES = {"file": _frame(b"file"), "link": _frame(b"link")}
_MODE_FRAMES = {True: _frame(b"x"), False: _frame(b"-")}


def tree_digest_rows(rows: list[Row]) -> str:
    """`tree_digest` of rows already sorted by raw UTF-8 path bytes (the same framing)."""
    parts: list[bytes] = []
    add = parts.append
    for path, kind, executable, _size, digest in rows:
        raw = path.encode("utf-8")
        value = digest.encode()
        add(_KIND_FRAMES[kind])
        add(len(raw).to_bytes(8, "big"))
        add(raw)
        add(_MODE_FRAMES[executable])
        add(len(value).to_bytes(8, "big"))
        add(value)
    hasher = blake3.blake3(TREE_DOMAIN)
    hasher.update(b"".join(parts))
    return DIGEST_PREFIX + hasher.hexdigest()

"""Receiving bundles into quarantine, and releasing them into a project.

`receive` verifies the signature and the statement before it writes anything, then streams the
members into a fresh 0700 staging directory inside `$AGENTSTACK_HOME/quarantine/` (each file
created with O_EXCL|O_NOFOLLOW, 0600 — nothing in quarantine is executable), checks that the
members are exactly the setup the lock describes, and only then renames the staging directory to
`quarantine/<bundle digest>/`. Any refusal removes the staging directory: nothing is left behind,
and nothing is ever written outside the quarantine. Nothing in quarantine runs: no git, no hooks,
no rendering, no lock resolution — only parsing and hashing.

`release` re-verifies the quarantined copy, copies it into a project (never through a symbolic
link, never over a differing file without `force`, which keeps a backup), seeds the local git
mirror from the bundled objects, proves the result with the same check as `lock --check`, and
records the decision in the trust log. The trust log also keeps each received (signer, name,
version): the floor that refuses a rollback.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import agentstack.share.bundle as bundle
import agentstack.share.gitobjects as gitobjects
from agentstack import layout
from agentstack.canonical import b3
from agentstack.errors import AgentstackError, InvalidInput, Refused
from agentstack.paths import agentstack_home, ensure_private_dir
from agentstack.share.archive import reject
from agentstack.share.bundle import Member, Statement

META_NAME = layout.QUARANTINE_META
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def quarantine_root(home: Path | None = None) -> Path:
    return Path(layout.quarantine_dir(str(home or agentstack_home())))


# ------------------------------------------------------------------------------ safe writing


def _open_dir(parent_fd: int, name: str, *, create: bool, made: list[str] | None = None) -> int:
    """A directory below `parent_fd`, never through a symbolic link (`made` collects what was
    created)."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=parent_fd)
            if made is not None:
                made.append(name)
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Refused(
                f"{name!r} is a symbolic link or not a directory; refusing to write through it"
            ) from None
        raise


@contextlib.contextmanager
def _parent_fd(
    root: Path, rel: str, *, create: bool, made: list[str] | None = None
) -> Iterator[int]:
    """An fd of the directory holding `root/rel`, each component opened with O_NOFOLLOW; the
    directories it creates are appended to `made` (root-relative, outermost first)."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        done: list[str] = []
        for part in rel.split("/")[:-1]:
            fresh: list[str] = []
            inner = _open_dir(fd, part, create=create, made=None if made is None else fresh)
            done.append(part)
            if fresh and made is not None:
                made.append("/".join(done))
            os.close(fd)
            fd = inner
        yield fd
    finally:
        os.close(fd)


def _write_new(root: Path, rel: str, chunks: Iterator[bytes]) -> None:
    with _parent_fd(root, rel, create=True) as parent:
        fd = os.open(rel.rsplit("/", 1)[-1], _NEW_FILE, 0o600, dir_fd=parent)
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
            # No fsync per file: a quarantined copy is re-hashed against the signed statement
            # on every show and release, so a copy a crash damaged is caught, not trusted.
        finally:
            os.close(fd)


class _Writer:
    """Writes members into a fresh staging directory, in the archive's (sorted) order: the
    directories of the last member stay open (each opened with O_NOFOLLOW below the staging
    directory, created 0700), so a tree of many files costs one open per directory, not one per
    path component of every file. Files are created O_EXCL|O_NOFOLLOW, 0600."""

    def __init__(self, staging: Path) -> None:
        self.staging = staging
        self.root_fd = os.open(staging, _DIR_FLAGS)
        self.names: list[str] = []
        self.fds: list[int] = []

    def _directory(self, parts: list[str]) -> int:
        keep = 0
        while keep < min(len(parts), len(self.names)) and parts[keep] == self.names[keep]:
            keep += 1
        while len(self.fds) > keep:
            os.close(self.fds.pop())
            self.names.pop()
        for part in parts[keep:]:
            parent = self.fds[-1] if self.fds else self.root_fd
            self.fds.append(_open_dir(parent, part, create=True))
            self.names.append(part)
        return self.fds[-1] if self.fds else self.root_fd

    def sink(self, member: Member, chunks: Iterator[bytes]) -> None:
        parts = member.path.split("/")
        try:
            parent = self._directory(parts[:-1])
            fd = os.open(parts[-1], _NEW_FILE, 0o600, dir_fd=parent)
            try:
                for chunk in chunks:
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        except OSError as exc:
            # The names were checked already; what is left is the disk (ENOSPC, EDQUOT).
            raise Refused(
                f"the quarantine cannot hold {member.path[:80]!r} "
                f"({exc.strerror or type(exc).__name__}); nothing was kept",
                hint=f"free space where {self.staging.parent} is, then receive the bundle again",
            ) from None

    def close(self) -> None:
        for fd in reversed(self.fds):
            os.close(fd)
        self.fds, self.names = [], []
        os.close(self.root_fd)


def _read_member(qdir: Path, rel: str, limit: int = bundle.MAX_FILE_BYTES) -> bytes:
    with _parent_fd(qdir, rel, create=False) as parent:
        fd = os.open(
            rel.rsplit("/", 1)[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent
        )
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
                raise Refused(f"quarantine file {rel} is not a regular file of a sane size")
            data = b""
            while len(data) < st.st_size:
                more = os.read(fd, st.st_size - len(data))
                if not more:
                    break
                data += more
            return data
        finally:
            os.close(fd)


# ------------------------------------------------------------------------------ metadata


@dataclass(frozen=True, kw_only=True)
class Held:
    """One quarantined bundle."""

    id: str
    path: Path
    meta: dict[str, Any]

    @property
    def state(self) -> str:
        return str(self.meta.get("state", ""))


def _write_meta(qdir: Path, meta: dict[str, Any]) -> None:
    from agentstack.fsutil import write_atomic

    write_atomic(
        qdir / META_NAME, (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode(), 0o600
    )


def list_held(home: Path | None = None) -> list[Held]:
    root = quarantine_root(home)
    if not root.is_dir():
        return []
    out = []
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        try:
            meta = json.loads((entry / META_NAME).read_bytes())
        except (OSError, ValueError):
            meta = {"state": "damaged"}
        out.append(Held(id=entry.name, path=entry, meta=meta))
    return out


def find(ident: str, home: Path | None = None) -> Held:
    """A held bundle by its id or a unique prefix of it (at least 8 hex digits)."""
    wanted = ident.removeprefix("b3:").lower()
    if len(wanted) < 8 or not all(c in "0123456789abcdef" for c in wanted):
        raise InvalidInput(
            f"{ident!r} is not a quarantine id", hint="see 'agentstack quarantine list'"
        )
    matches = [h for h in list_held(home) if h.id.startswith(wanted)]
    if not matches:
        raise InvalidInput(
            f"nothing in quarantine has id {ident}", hint="see 'agentstack quarantine list'"
        )
    if len(matches) > 1:
        raise InvalidInput(f"{ident} matches several quarantined bundles; give more digits")
    return matches[0]


# ------------------------------------------------------------------------------ receiving


@dataclass(frozen=True, kw_only=True)
class Received:
    held: Held
    new: bool
    contents: Contents | None = None  # what was checked on the way in (saves a re-check)


def _floor_problem(
    statement: Statement, statement_digest: str, fingerprint: str, principals: list[str], home: Path
) -> None:
    from agentstack.trust.store import TrustLog

    floor: tuple[tuple[int, ...], str, str] | None = None
    for record in TrustLog(home).records():
        extra = record.extra
        if record.action != "receive" or extra.get("name") != statement.name:
            continue
        same_signer = extra.get("key") == fingerprint or bool(
            set(principals) & set(filter(None, extra.get("signer", "").split(",")))
        )
        if not same_signer:
            continue
        try:
            key = bundle.version_key(extra.get("version", "0"))
        except ValueError:
            continue
        if floor is None or key > floor[0]:
            floor = (key, extra.get("version", ""), record.digest)
        if key == bundle.version_key(statement.version) and record.digest != statement_digest:
            raise reject(
                "version-reused",
                f"version {statement.version} of {statement.name!r} was already received with "
                "different content; a signer must give every change a new version",
            )
    if floor is not None and bundle.version_key(statement.version) < floor[0]:
        raise reject(
            "rollback",
            f"version {statement.version} of {statement.name!r} is older than version "
            f"{floor[1]}, already received from this signer (a rollback)",
            hint="ask the sender for a bundle newer than the one you have",
        )


_STALE_S = 86400


def _remove_stale(root: Path, now: float) -> None:
    """Staging and discard directories a killed process left behind (a day old: no live receive
    takes that long)."""
    for entry in root.iterdir():
        if entry.name.startswith((".incoming-", ".discard-")):
            with contextlib.suppress(OSError):
                if os.lstat(entry).st_mtime < now - _STALE_S:
                    shutil.rmtree(entry)


def receive(path: Path, *, now: float | None = None, home: Path | None = None) -> Received:
    """Verify the bundle at `path` and hold it in quarantine (see the module docstring)."""
    home = home or agentstack_home()
    moment = time.time() if now is None else now
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such file") from None
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read it ({exc.strerror})") from None
    with handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise InvalidInput(f"{path} is not a regular file")
        opened = bundle.open_bundle(handle, now=moment, home=home)
        statement = opened.statement
        statement_digest = b3(opened.statement_bytes)
        fingerprint = opened.signer_key.fingerprint
        _floor_problem(statement, statement_digest, fingerprint, opened.principals, home)
        root = ensure_private_dir(quarantine_root(home))
        _remove_stale(root, time.time())
        staging = Path(tempfile.mkdtemp(prefix=".incoming-", dir=root))
        try:
            os.chmod(staging, 0o700)

            writer = _Writer(staging)
            try:
                if statement.manifest is not None:
                    manifest_fd = os.open(
                        staging / bundle.MEMBERS_NAME, (_NEW_FILE & ~os.O_WRONLY) | os.O_RDWR, 0o600
                    )
                    with os.fdopen(manifest_fd, "w+b") as manifest_file:
                        members = bundle.stream_members(opened, writer.sink, manifest_file)
                else:
                    members = bundle.stream_members(opened, writer.sink)
            finally:
                writer.close()
            bundle_digest = "b3:" + opened.inflater.hasher.hexdigest()
            _write_new(staging, bundle.STATEMENT_NAME, iter([opened.statement_bytes]))
            _write_new(staging, bundle.SIGNATURE_NAME, iter([opened.signature]))
            contents = check_contents(staging, statement, {m.path: m for m in members})
            from agentstack.teampolicy import enforce as enforce_policy

            # A setup the team policy forbids is not held (the staging directory goes).
            enforce_policy(contents.document, None, action=f"receive of {statement.name}",
                           home=home)
            ident = bundle_digest[3:]
            final = root / ident
            if final.exists():
                return Received(held=find(ident, home), new=False, contents=contents)
            meta = {
                "id": ident,
                "bundle": bundle_digest,
                "source": os.path.basename(path),
                "name": statement.name,
                "version": statement.version,
                "created": statement.created,
                "expires": statement.expires,
                "consent": statement.consent,
                "lock": statement.lock,
                "statement": statement_digest,
                "signer": opened.principals,
                "fingerprint": fingerprint,
                "public_key": opened.signer_key.openssh(),
                "received": bundle.utc(moment),
                "state": "held" if opened.principals else "unknown-signer",
                "releases": [],
            }
            _write_meta(staging, meta)
            os.rename(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    from agentstack.trust.store import TrustLog

    TrustLog(home).append(
        "receive",
        "",
        statement_digest,
        extra={
            "bundle": bundle_digest,
            "name": statement.name,
            "version": statement.version,
            "key": fingerprint,
            "signer": ",".join(opened.principals),
        },
    )
    return Received(held=Held(id=ident, path=final, meta=meta), new=True, contents=contents)


# ------------------------------------------------------------------------------ content checks


@dataclass(frozen=True, kw_only=True)
class Contents:
    """A quarantined setup, parsed: what `show` displays and `release` copies."""

    manifest: Any
    lock: dict[str, Any]
    document: dict[str, Any]
    digest: str
    local: dict[str, Member]  # project-relative path -> member
    git_objects: dict[str, dict[str, str]]  # url -> {sha1: member path}


def load_members(qdir: Path, statement: Statement) -> dict[str, Member]:
    """The members a quarantined copy's statement signs: inline (format 1), or the member
    manifest beside it, checked against the statement's hash and size, then line by line."""
    if statement.manifest is None:
        return {m.path: m for m in statement.members}
    import io

    raw = _read_member(qdir, bundle.MEMBERS_NAME, bundle.MAX_MANIFEST_BYTES)
    if len(raw) != statement.manifest.size or b3(raw) != statement.manifest.blake3:
        raise reject(
            "manifest-mismatch",
            "the member manifest does not match its blake3 hash in the statement",
        )
    return {m.path: m for m in bundle.read_manifest(io.BytesIO(raw), statement.manifest)}


def check_contents(
    qdir: Path, statement: Statement, members: dict[str, Member] | None = None
) -> Contents:
    """Prove that the members are exactly the setup the bundled lock describes: manifest and lock
    agree, the consent digest is the statement's, every pinned file is a member with the pinned
    hash, every git-sourced file is reachable in the bundled git objects, and nothing else is
    there. Parsing and hashing only."""
    from agentstack.consent.document import consent_digest, consent_document
    from agentstack.lock.resolve import manifest_digest, parse_lock
    from agentstack.lock.treehash import check_links
    from agentstack.manifest.model import parse_manifest

    if members is None:
        members = load_members(qdir, statement)
    for required in (bundle.MANIFEST_MEMBER, bundle.LOCK_MEMBER):
        if required not in members:
            raise reject("incomplete", f"the bundle has no {required}")
    lock_bytes = _read_member(qdir, bundle.LOCK_MEMBER)
    if b3(lock_bytes) != statement.lock:
        raise reject("lock-mismatch", "the bundled lock is not the one the statement names")
    try:
        manifest = parse_manifest(_read_member(qdir, bundle.MANIFEST_MEMBER), "agentstack.toml")
        lock = parse_lock(lock_bytes)
    except AgentstackError as exc:
        raise reject(
            "bad-setup", "the bundled manifest or lock does not validate: " + exc.message
        ) from None
    except (ValueError, RecursionError) as exc:
        raise reject("bad-setup", f"the bundled manifest or lock cannot be read ({exc})") from None
    if lock["manifest"] != manifest_digest(manifest):
        raise reject("stale-lock", "the bundled lock does not match the bundled manifest")
    document = consent_document(manifest, lock)
    digest = consent_digest(document)
    if digest != statement.consent:
        raise reject(
            "consent-mismatch",
            f"the setup's consent digest is {digest}, the statement says {statement.consent}",
        )
    used = {bundle.MANIFEST_MEMBER, bundle.LOCK_MEMBER}
    local: dict[str, Member] = {}
    links: dict[str, dict[str, str]] = {}
    git_objects: dict[str, dict[str, str]] = {}
    sources: dict[gitobjects.GitSource, list[bundle.PinnedFile]] = {}
    for pinned in bundle.pinned_files(lock):
        if pinned.git is not None:
            sources.setdefault(pinned.git, []).append(pinned)
            continue
        entry = pinned.entry
        rel = pinned.rel
        path = f"files/{rel}"
        member = members.get(path)
        if rel.startswith("../") or rel in (".", "..") or os.path.isabs(rel):
            raise reject("unsafe-path", f"the lock pins {rel!r}, outside the project")
        if member is None or (member.blake3, member.size, member.executable, member.kind) != (
            entry["digest"],
            entry["size"],
            entry["executable"],
            entry["kind"],
        ):
            raise reject(
                "lock-member-mismatch",
                f"the lock pins {rel!r}, but the bundle's {path!r} is missing or different",
            )
        if member.kind == "link":
            target = _read_member(qdir, path).decode("utf-8", "surrogateescape")
            inner = os.path.relpath(rel, pinned.root) if pinned.root != "." else rel
            links.setdefault(pinned.root, {})[inner] = target
        used.add(path)
        local[rel] = member
    for rel, entry in bundle.surface_files(lock):
        path = f"files/{rel}"
        member = members.get(path)
        if rel.startswith("../") or rel in (".", "..") or os.path.isabs(rel):
            raise reject("unsafe-path", f"the lock pins {rel!r}, outside the project")
        raw_digest = entry.get("kind") in ("file", "link")
        if (
            member is None
            or (raw_digest and (member.blake3, member.kind) != (entry.get("digest"), entry["kind"]))
            or (not raw_digest and member.kind not in ("file", "link"))
            or (rel in local and local[rel] != member)
        ):
            raise reject(
                "lock-member-mismatch",
                f"the lock pins the harness file {rel!r}, but the bundle's {path!r} is missing "
                "or different",
            )
        if member.kind == "link":
            target = _read_member(qdir, path).decode("utf-8", "surrogateescape")
            links.setdefault(".", {})[rel] = target
        used.add(path)
        local[rel] = member
    from agentstack.lock.gitmeta import lock_problem

    metadata = lock_problem(lock)
    if metadata is not None:
        raise reject(
            "git-metadata",
            f"the bundled lock pins {metadata[1][:80]!r}"
            + (f" ({metadata[0][:80]})" if metadata[0] != "." else "")
            + ", git metadata: a bundle never carries a repository",
        )
    for root, tree_links in links.items():
        try:
            check_links(root, tree_links)
        except AgentstackError as exc:
            raise reject("unsafe-link", exc.message) from None
    for source, pinned_list in sources.items():

        def read(sha: str, url: str = source.url) -> bytes:
            path = f"git/{sha}"
            if path not in members:
                raise reject(
                    "missing-git-object", f"git object {sha} of {url} is not in the bundle"
                )
            raw = _read_member(qdir, path)
            if gitobjects.sha1_hex(raw) != sha:
                raise reject("bad-git-object", f"git object {sha} does not hash to its name")
            return raw

        # Directories count as entries too (at most MAX_DEPTH per file); the files must be
        # exactly the lock's, so a tree that repeats a subtree is refused before it explodes.
        objects, files = gitobjects.walk_git_source(
            source, read, limit=(len(pinned_list) + 1) * (gitobjects.MAX_TREE_DEPTH + 1)
        )
        if set(files) != {p.rel for p in pinned_list}:
            raise reject("git-mismatch", f"the files of {source.url} differ from the lock")
        for pinned in pinned_list:
            mode, sha = files[pinned.rel]
            _, body = gitobjects.split_object(read(sha), sha)
            kind = "link" if mode == "120000" else "file"
            if (b3(body), len(body), mode == "100755", kind) != (
                pinned.entry["digest"],
                pinned.entry["size"],
                pinned.entry["executable"],
                pinned.entry["kind"],
            ):
                raise reject("git-mismatch", f"{source.url}: {pinned.rel} differs from the lock")
        for sha in objects:
            used.add(f"git/{sha}")
            git_objects.setdefault(source.url, {})[sha] = f"git/{sha}"
    extra = sorted(set(members) - used)
    if extra:
        raise reject(
            "unreferenced-member",
            f"member {extra[0][:80]!r} is not part of the locked setup",
        )
    return Contents(
        manifest=manifest,
        lock=lock,
        document=document,
        digest=digest,
        local=local,
        git_objects=git_objects,
    )


def verify_held(held: Held, *, home: Path | None = None) -> tuple[Statement, Contents, list[str]]:
    """Re-check a quarantined copy (it may have been changed since `receive`): the signature over
    the statement, every member's hash, the contents; and who the signer is *now*."""
    import agentstack.share.sshsig as sshsig
    from agentstack.share.keys import allowed_signers

    qdir = held.path
    statement_bytes = _read_member(qdir, bundle.STATEMENT_NAME, bundle.MAX_STATEMENT_BYTES)
    signature = _read_member(qdir, bundle.SIGNATURE_NAME, sshsig.MAX_SIGNATURE_BYTES)
    try:
        parsed = sshsig.verify(signature, statement_bytes)
    except sshsig.SignatureError as exc:
        raise Refused(
            f"the quarantined copy {held.id[:12]} no longer verifies: {exc.message}"
        ) from None
    if b3(statement_bytes) != held.meta.get("statement"):
        raise Refused(
            f"the quarantined copy {held.id[:12]} holds another statement than it received"
        )
    statement = bundle.parse_statement(statement_bytes)
    from agentstack.progress import tick

    try:
        members = load_members(qdir, statement)
    except (OSError, Refused) as exc:
        message = exc.message if isinstance(exc, Refused) else str(exc)
        raise Refused(
            f"the quarantined copy {held.id[:12]} was changed: {message}",
            hint="discard it and receive the bundle again",
        ) from None
    for done, member in enumerate(members.values()):
        tick(done, len(members))
        data = _read_member(qdir, member.path)
        if b3(data) != member.blake3:
            raise Refused(
                f"the quarantined copy {held.id[:12]} was changed: {member.path}",
                hint="discard it and receive the bundle again",
            )
    contents = check_contents(qdir, statement, members)
    principals = allowed_signers(home).principals_for(parsed.public_key)
    return statement, contents, principals


# ------------------------------------------------------------------------------ releasing


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What a release writes, leaves alone, and would overwrite."""

    write: list[str]  # project-relative paths to create or replace
    same: list[str]
    conflicts: list[str]  # existing files that differ
    extras: list[str]  # files inside a pinned tree that the bundle does not have


def _existing(dest: Path, rel: str) -> tuple[str, bytes, bool] | None:
    """(kind, bytes, executable) of dest/rel, without following a link anywhere on the way."""
    try:
        with _parent_fd(dest, rel, create=False) as parent:
            name = rel.rsplit("/", 1)[-1]
            try:
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                return None
            if stat.S_ISLNK(st.st_mode):
                return "link", os.fsencode(os.readlink(name, dir_fd=parent)), False
            if stat.S_ISDIR(st.st_mode):
                return "dir", b"", False
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            with os.fdopen(fd, "rb") as handle:
                return "file", handle.read(), bool(st.st_mode & stat.S_IXUSR)
    except FileNotFoundError:
        return None


def plan_release(contents: Contents, qdir: Path, dest: Path) -> Plan:
    from agentstack.manifest.view import LOCK_NAME, MANIFEST_NAME

    wanted: dict[str, tuple[str, bytes, bool]] = {}
    wanted[MANIFEST_NAME] = ("file", _read_member(qdir, bundle.MANIFEST_MEMBER), False)
    wanted[LOCK_NAME] = ("file", _read_member(qdir, bundle.LOCK_MEMBER), False)
    for rel, member in contents.local.items():
        wanted[rel] = (member.kind, _read_member(qdir, member.path), member.executable)
    write, same, conflicts = [], [], []
    for rel in sorted(wanted, key=lambda p: p.encode()):
        have = _existing(dest, rel)
        if have is None:
            write.append(rel)
        elif have == wanted[rel]:
            same.append(rel)
        else:
            write.append(rel)
            conflicts.append(rel)
    extras: list[str] = []
    for root in bundle.local_roots(contents.lock):
        base = dest / root
        if not base.is_dir() or base.is_symlink():
            continue
        for current, dirs, files in os.walk(base, followlinks=False):
            for name in [*files, *(d for d in dirs if (Path(current) / d).is_symlink())]:
                rel = os.path.relpath(Path(current) / name, dest)
                if rel not in wanted:
                    extras.append(rel)
    return Plan(write=write, same=same, conflicts=conflicts, extras=sorted(extras))


def _move(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.rename(source, target)


def _backup(dest: Path, rels: list[str], backup_root: Path, moved: list[str]) -> None:
    for rel in rels:
        _move(dest / rel, backup_root / rel)
        moved.append(rel)


def _install(
    dest: Path, rel: str, kind: str, data: bytes, executable: bool, made: list[str] | None = None
) -> None:
    """Create or replace dest/rel atomically, never through a symbolic link. (Not fsynced file by
    file: the release ends by re-hashing everything against the lock, and the lock is what
    every later command checks.)"""
    name = rel.rsplit("/", 1)[-1]
    with _parent_fd(dest, rel, create=True, made=made) as parent:
        tmp = f".{name}.agentstack-{os.urandom(6).hex()}"
        try:
            if kind == "link":
                os.symlink(os.fsdecode(data), tmp, dir_fd=parent)
            else:
                fd = os.open(tmp, _NEW_FILE, 0o755 if executable else 0o644, dir_fd=parent)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                    os.fchmod(fd, 0o755 if executable else 0o644)
                finally:
                    os.close(fd)
            os.replace(tmp, name, src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=parent)
            raise


def seed_mirror(url: str, objects: dict[str, bytes]) -> None:
    """Put bundled git objects into the local mirror of `url` (created if missing, with `url` as
    its origin so that a later `lock --update` fetches as usual). Each object was checked against
    its sha1 already; existing objects are left as they are."""
    import agentstack.lock.gitsource as gitsource
    from agentstack.paths import agentstack_cache

    mirror = gitsource.mirror_path(agentstack_cache(), url)
    if not (mirror / "HEAD").exists():
        mirror.parent.mkdir(parents=True, exist_ok=True)
        tmp = mirror.with_name(mirror.name + f".seed{os.getpid()}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0")
        base = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"]
        try:
            subprocess.run(
                [*base, "-c", "init.defaultBranch=main", "init", "--bare", "--quiet", str(tmp)],
                check=True, env=env, capture_output=True, timeout=60,
            )  # fmt: skip
            for key, value in (
                ("remote.origin.url", url),
                ("remote.origin.fetch", "+refs/*:refs/*"),
                ("remote.origin.mirror", "true"),
            ):
                subprocess.run(
                    [*base, "--git-dir", str(tmp), "config", key, value],
                    check=True, env=env, capture_output=True, timeout=60,
                )  # fmt: skip
            os.replace(tmp, mirror)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    for sha, raw in objects.items():
        target = mirror / "objects" / sha[:2] / sha[2:]
        if target.exists():
            continue
        target.parent.mkdir(exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix="tmp_obj_")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(zlib.compress(raw))
            os.chmod(tmp_name, 0o444)
            os.replace(tmp_name, target)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise


@dataclass(frozen=True, kw_only=True)
class Released:
    dest: Path
    digest: str
    written: list[str]
    backup: Path | None
    trusted: bool


def release(
    held: Held,
    dest: Path,
    *,
    contents: Contents,
    statement: Statement,
    principals: list[str],
    trust: bool = False,
    force: bool = False,
    allow_unknown_signer: bool = False,
    home: Path | None = None,
    now: float | None = None,
) -> Released:
    """Copy a verified quarantined setup into `dest` and record the decision."""
    home = home or agentstack_home()
    if bundle.parse_utc(statement.expires) <= (time.time() if now is None else now):
        raise Refused(
            f"{held.id[:12]} expired at {statement.expires}; an expired bundle is not released",
            hint="ask the sender for a fresh one, and discard this one",
        )
    if not principals and not allow_unknown_signer:
        raise Refused(
            f"{held.id[:12]} is signed by a key you do not trust ({held.meta.get('fingerprint')})",
            hint="review it with 'agentstack quarantine show ID', then release with "
            "--allow-unknown-signer, or trust the signer first ('agentstack keys trust')",
        )
    dest = dest.resolve()
    plan = plan_release(contents, held.path, dest)
    blocked = plan.conflicts + plan.extras
    if blocked and not force:
        raise Refused(
            f"{len(blocked)} file(s) in {dest} differ from the bundle or are not part of it: "
            + ", ".join(blocked[:5])
            + (" …" if len(blocked) > 5 else ""),
            hint="release into an empty directory, or pass --force (the files are moved to a "
            "backup first)",
        )
    from agentstack.lock.gitmeta import HINT, describe, git_metadata

    metadata = git_metadata(plan.write + plan.same) or _makes_repository(dest, plan.write)
    if metadata is not None:
        raise Refused(describe(metadata), hint=HINT)
    from agentstack.manifest.view import LOCK_NAME, MANIFEST_NAME

    # All or nothing: every change is recorded as it is made and undone when a later step fails
    # (the files installed, the directories made, the files moved to the backup).
    made_above: list[Path] = []
    made: list[str] = []
    installed: list[str] = []
    moved: list[str] = []
    backup: Path | None = None
    try:
        missing = dest
        while not os.path.lexists(missing):
            made_above.append(missing)
            missing = missing.parent
        for directory in reversed(made_above):
            directory.mkdir()
        if blocked:
            backup = ensure_private_dir(home / layout.BACKUPS) / (
                time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + held.id[:12]
            )
            _backup(dest, blocked, backup, moved)
        for url, objects in contents.git_objects.items():
            seed_mirror(url, {sha: _read_member(held.path, path) for sha, path in objects.items()})
        sources = {
            MANIFEST_NAME: ("file", bundle.MANIFEST_MEMBER, False),
            LOCK_NAME: ("file", bundle.LOCK_MEMBER, False),
            **{rel: (m.kind, m.path, m.executable) for rel, m in contents.local.items()},
        }
        # Regular files first, so that a link is only made once what it points at exists.
        ordered = sorted(plan.write, key=lambda rel: (sources[rel][0] == "link", rel.encode()))
        for rel in ordered:
            kind, member_path, executable = sources[rel]
            _install(dest, rel, kind, _read_member(held.path, member_path), executable, made)
            installed.append(rel)
        digest, document = _prove(dest, statement)
        from agentstack.trust.review import TrustStore

        store = TrustStore(home)
        lock_hash = b3((dest / LOCK_NAME).read_bytes())
        # The commit point: once the release is in the trust log, it stands.
        store.log.append(
            "release",
            str(dest),
            digest,
            lock_hash,
            extra={
                "bundle": held.meta.get("bundle", ""),
                "name": statement.name,
                "version": statement.version,
                "key": str(held.meta.get("fingerprint", "")),
                "signer": ",".join(principals),
            },
        )
    except BaseException:
        _roll_back(dest, installed, made, moved, backup, made_above)
        raise
    if trust:
        store.trust(dest, digest, document, lock_hash)
        from agentstack.apply.snapshot import write_snapshot

        write_snapshot(dest, document, digest)
    meta = dict(held.meta)
    meta["state"] = "released"
    meta["releases"] = [
        *meta.get("releases", []),
        {"into": str(dest), "time": bundle.utc(time.time()), "trusted": trust},
    ]
    _write_meta(held.path, meta)
    return Released(dest=dest, digest=digest, written=plan.write, backup=backup, trusted=trust)


def _makes_repository(dest: Path, write: list[str]) -> str | None:
    """A written `HEAD` next to an `objects`, `refs` or `commondir` already in `dest`: the
    directory would become a repository git finds by itself."""
    from agentstack.lock.gitmeta import git_metadata

    for rel in write:
        if rel.rsplit("/", 1)[-1].casefold() != "head":
            continue
        parent = (dest / rel).parent
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        prefix = rel[: -len(rel.rsplit("/", 1)[-1])]
        found = git_metadata([rel, *(prefix + name + "/x" for name in names)])
        if found is not None:
            return found
    return None


def _prove(dest: Path, statement: Statement) -> tuple[str, dict[str, Any]]:
    """The released setup holds: the lock is fresh (git included) and the digest is the
    statement's."""
    from agentstack.consent.document import consent_digest, consent_document
    from agentstack.lock.resolve import fresh_lock
    from agentstack.manifest.load import load_manifest

    try:
        manifest = load_manifest(dest)
        lock = fresh_lock(dest, manifest, verify_git=True)
        document = consent_document(manifest, lock)
        digest = consent_digest(document)
    except AgentstackError as exc:
        raise Refused(
            f"the released setup in {dest} does not hold, so nothing was released: " + exc.message,
            hint="report it to the sender (the bundle is not the setup it claims to be here)",
        ) from None
    if digest != statement.consent:
        raise Refused(
            f"the released setup has digest {digest}, not the bundle's {statement.consent}, so "
            "nothing was released",
        )
    return digest, document


def _roll_back(
    dest: Path,
    installed: list[str],
    made: list[str],
    moved: list[str],
    backup: Path | None,
    made_above: list[Path],
) -> None:
    """Undo a release that failed part way: the target is left as it was."""
    for rel in reversed(installed):
        with contextlib.suppress(OSError), _parent_fd(dest, rel, create=False) as parent:
            os.unlink(rel.rsplit("/", 1)[-1], dir_fd=parent)
    for rel in sorted(made, key=lambda p: (-p.count("/"), p)):
        with contextlib.suppress(OSError), _parent_fd(dest, rel, create=False) as parent:
            os.rmdir(rel.rsplit("/", 1)[-1], dir_fd=parent)
    if backup is not None:
        for rel in reversed(moved):
            with contextlib.suppress(OSError):
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                os.rename(backup / rel, dest / rel)
        for current in sorted((c for c, _, _ in os.walk(backup)), reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(current)
    for directory in made_above:
        with contextlib.suppress(OSError):
            directory.rmdir()


def discard(held: Held, *, home: Path | None = None) -> None:
    from agentstack.trust.store import TrustLog

    statement = str(held.meta.get("statement", ""))
    from agentstack.canonical import is_digest

    if is_digest(statement):
        TrustLog(home or agentstack_home()).append(
            "discard", "", statement, extra={"bundle": str(held.meta.get("bundle", ""))}
        )
    # Rename first, so that a half-deleted copy never looks like a held bundle.
    trash = held.path.with_name(f".discard-{held.id}-{os.urandom(4).hex()}")
    os.rename(held.path, trash)
    shutil.rmtree(trash)

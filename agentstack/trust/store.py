"""The trust log: an append-only, hash-chained record of every trust decision (docs/trust.md).

`trust.jsonl` holds one canonical JSON record per line; each record's `prev` is the blake3 hash of the
exact bytes of the line before it (newline included), so changing, dropping or moving any line breaks
the chain. A chain only proves integrity relative to a known end, so `trust.head` keeps the record
count and the hash of the last line; that is what catches truncation and a rewritten tail.

Writers serialise on `flock(trust.lock)` (a separate file, so readers of `trust.jsonl` are never
blocked), append each line with one `os.write` on an O_APPEND descriptor and fsync it before the
record is acknowledged, then replace `trust.head` atomically. Readers take no lock on the fast path.

Crash states and what they mean:
- a final line without "\\n" (torn tail) was never acknowledged: readers ignore it, the next writer
  moves its bytes to `trust.jsonl.torn` and truncates it;
- one complete, correctly chained line past `trust.head` is a writer that died between fsyncing the
  line and replacing the head: the line is durable, so readers accept it and the next writer adopts
  it. (An older copy of `trust.head` exactly one record behind is therefore indistinguishable from
  such a crash; it loses nothing, because the record is kept.)
Anything else that disagrees with `trust.head` is tampering, and nothing is appended on top of it.

Standard library + blake3 only: the guard hook imports this module on every tool call.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import blake3

from agentstack import layout
from agentstack.canonical import DIGEST_PREFIX, CanonicalError, b3, canonical_bytes, is_digest
from agentstack.errors import Refused
from agentstack.storage import note_recorded, storage_error

FORMAT_VERSION = 1
ACTIONS = ("trust", "revoke", "release", "discard", "receive")
Action = Literal["trust", "revoke", "release", "discard", "receive"]
TrustState = Literal["trusted", "revoked", "unknown"]
GENESIS = b3(b"agentstack-trust-genesis")
MAX_LINE_BYTES = 64 * 1024  # including the newline
MAX_HEAD_BYTES = 4096

LOG_NAME = layout.TRUST_LOG
HEAD_NAME = layout.TRUST_HEAD
LOCK_NAME = layout.TRUST_LOCK
TORN_NAME = layout.TRUST_TORN
_HEAD_TMP_PREFIX = ".trust.head."
_HEAD_TMP_SUFFIX = ".tmp"

# Actions that must name the project they bind; "discard" and "receive" concern a bundle, not a
# project. Only "trust" and "revoke" decide a (project, digest) pair: "release" records that a
# bundle was copied into a project (with --trust, a "trust" record follows it); "receive" records
# a bundle's (signer, name, version), the floor that refuses a rollback.
_PROJECT_ACTIONS = frozenset({"trust", "revoke", "release"})
_TRUSTING_ACTIONS = frozenset({"trust"})
_STATE_ACTIONS = frozenset({"trust", "revoke"})
_RECORD_KEYS = frozenset({"v", "seq", "time", "action", "project", "digest", "lock", "prev"})
_TIME_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_LOCK_RE = re.compile(r"[\x21-\x7e]{0,256}")
_EXTRA_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_SEQ_BOUND = 1 << 63  # a ceiling for sizing a line before its seq is known
# Never write through a link planted in place of one of our files.
_LOG_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW


class TrustLogError(Refused):
    """Something about the trust log does not hold (exit 1)."""


class TrustLogTampered(TrustLogError):
    """The log or its head was changed, truncated or corrupted outside agentstack."""


class TrustRecordInvalid(TrustLogError):
    """A record that `append` refuses to write (bad action, digest, path, or too long)."""


class Value:
    """An immutable value with keyword-only fields, equality and a repr: what the dataclasses here
    were, without `dataclasses` (defining a dataclass costs ~1 ms, paid by every command that reads
    the log, and the guard)."""

    __slots__: tuple[str, ...] = ()
    _fields: tuple[str, ...] = ()

    def _set(self, **values: Any) -> None:
        for name in self._fields:
            object.__setattr__(self, name, values[name])

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of a {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of a {type(self).__name__}")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(self._hashed())

    def _hashed(self) -> tuple[Any, ...]:
        return self._values()

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({inner})"


class TrustRecord(Value):
    __slots__ = ("action", "digest", "extra", "lock", "prev", "project", "seq", "time", "v")
    _fields = ("v", "seq", "time", "action", "project", "digest", "lock", "prev", "extra")
    v: int
    seq: int
    time: str
    action: Action
    project: str
    digest: str
    lock: str
    prev: str
    extra: dict[str, str]

    def __init__(
        self,
        *,
        v: int,
        seq: int,
        time: str,
        action: Action,
        project: str,
        digest: str,
        lock: str,
        prev: str,
        extra: dict[str, str] | None = None,
    ) -> None:
        self._set(v=v, seq=seq, time=time, action=action, project=project, digest=digest,
                  lock=lock, prev=prev, extra={} if extra is None else extra)  # fmt: skip

    def _hashed(self) -> tuple[Any, ...]:
        return self._values()[:-1]  # `extra` (a dict) is not hashed

    def replace(self, **changes: Any) -> TrustRecord:
        """A copy with `changes` (as `dataclasses.replace`)."""
        values = {name: getattr(self, name) for name in self._fields}
        values.update(changes)
        return TrustRecord(**values)

    def to_json(self) -> dict[str, Any]:
        # `extra` is omitted when empty so that every record has exactly one canonical line.
        doc: dict[str, Any] = {
            "v": self.v,
            "seq": self.seq,
            "time": self.time,
            "action": self.action,
            "project": self.project,
            "digest": self.digest,
            "lock": self.lock,
            "prev": self.prev,
        }
        if self.extra:
            doc["extra"] = dict(self.extra)
        return doc


class VerifyReport(Value):
    """The outcome of checking the whole chain against `trust.head`.

    `count`/`head` describe the records that verified (all of them when `ok`); `first_bad` is the
    1-based line number of the first bad (or missing) record when one can be named; `pending` is 1
    when a writer died after making its line durable but before updating `trust.head`; `torn` is the
    size of an unacknowledged partial final line, which is ignored.
    """

    __slots__ = ("count", "first_bad", "head", "ok", "pending", "problem", "torn")
    _fields = ("ok", "count", "head", "first_bad", "problem", "pending", "torn")
    ok: bool
    count: int
    head: str
    first_bad: int | None
    problem: str
    pending: int
    torn: int

    def __init__(
        self,
        *,
        ok: bool,
        count: int,
        head: str,
        first_bad: int | None,
        problem: str,
        pending: int = 0,
        torn: int = 0,
    ) -> None:
        self._set(ok=ok, count=count, head=head, first_bad=first_bad, problem=problem,
                  pending=pending, torn=torn)  # fmt: skip


# Internal values are `Value`s too: a dataclass costs ~1 ms to define and a NamedTuple ~0.2 ms (it
# compiles its annotations), paid by every command that reads the log, and the guard.
class _Head(Value):
    __slots__ = ("last", "records")
    _fields = ("records", "last")
    records: int
    last: str

    def __init__(self, *, records: int, last: str) -> None:
        self._set(records=records, last=last)


class _Snapshot(Value):
    __slots__ = ("body", "head", "head_problem", "torn")
    _fields = ("head", "head_problem", "body", "torn")
    head: _Head | None
    head_problem: str
    body: bytes  # the complete lines, each ending in "\n"
    torn: int  # bytes after the last "\n"

    def __init__(self, *, head: _Head | None, head_problem: str, body: bytes, torn: int) -> None:
        self._set(head=head, head_problem=head_problem, body=body, torn=torn)


class _Bad(Value):
    __slots__ = ("at", "reason")
    _fields = ("at", "reason")
    at: int  # 0-based line index
    reason: str

    def __init__(self, *, at: int, reason: str) -> None:
        self._set(at=at, reason=reason)


class _Verified(Value):
    """A prefix of the log this process has checked in full: its size, blake3 and line hashes."""

    __slots__ = ("digest", "hashes", "size")
    _fields = ("size", "digest", "hashes")
    size: int
    digest: bytes
    hashes: list[str]

    def __init__(self, *, size: int, digest: bytes, hashes: list[str]) -> None:
        self._set(size=size, digest=digest, hashes=hashes)


class _BadLine(ValueError):
    pass


def _where(index: int) -> str:
    return f"line {index + 1} (seq {index})"


def _check_record(doc: Any) -> TrustRecord:
    """The one definition of a valid record, shared by reading and `append`."""
    if not isinstance(doc, dict):
        raise _BadLine("is not a JSON object")
    keys = set(doc)
    missing = _RECORD_KEYS - keys
    unknown = keys - _RECORD_KEYS - {"extra"}
    if missing:
        raise _BadLine(f"lacks {', '.join(sorted(missing))}")
    if unknown:
        raise _BadLine(f"has unknown fields {', '.join(sorted(unknown))}")
    v, seq = doc["v"], doc["seq"]
    if type(v) is not int or v != FORMAT_VERSION:
        raise _BadLine(f"has format version {v!r}; this agentstack reads version {FORMAT_VERSION}")
    if type(seq) is not int or not 0 <= seq < _SEQ_BOUND:
        raise _BadLine("has no valid seq")
    for name in ("time", "action", "project", "digest", "lock", "prev"):
        if not isinstance(doc[name], str):
            raise _BadLine(f"field {name} is not a string")
    if not _TIME_RE.fullmatch(doc["time"]):
        raise _BadLine("time is not UTC ISO-8601 (YYYY-MM-DDTHH:MM:SSZ)")
    action = doc["action"]
    if action not in ACTIONS:
        raise _BadLine(f"action {action!r} is not one of {', '.join(ACTIONS)}")
    _check_project(doc["project"], required=action in _PROJECT_ACTIONS)
    if not is_digest(doc["digest"]):
        raise _BadLine("digest is not b3:<64 hex>")
    if not _LOCK_RE.fullmatch(doc["lock"]):
        raise _BadLine("lock is not a printable ASCII token of at most 256 characters")
    if not is_digest(doc["prev"]):
        raise _BadLine("prev is not b3:<64 hex>")
    extra = doc.get("extra", {})
    if not isinstance(extra, dict) or ("extra" in doc and not extra):
        raise _BadLine("extra is not a non-empty object")
    for key, value in extra.items():
        if not _EXTRA_KEY_RE.fullmatch(key) or not isinstance(value, str):
            raise _BadLine(f"extra entry {key!r} is not name -> string")
    return TrustRecord(
        v=v,
        seq=seq,
        time=doc["time"],
        action=action,
        project=doc["project"],
        digest=doc["digest"],
        lock=doc["lock"],
        prev=doc["prev"],
        extra=dict(extra),
    )


def _check_project(project: str, *, required: bool) -> None:
    if not project:
        if required:
            raise _BadLine("project is empty; trust binds a project directory")
        return
    # Trust binds a resolved path; a relative or non-normal spelling would bind a second pair.
    if "\x00" in project or not os.path.isabs(project) or os.path.normpath(project) != project:
        raise _BadLine(f"project {project!r} is not an absolute, normalised real path")


def _encode(record: TrustRecord) -> bytes:
    try:
        return canonical_bytes(record.to_json()) + b"\n"
    except (CanonicalError, UnicodeEncodeError) as exc:
        raise _BadLine(f"has no canonical UTF-8 form ({exc})") from exc


def _parse_line(raw: bytes) -> TrustRecord:
    if len(raw) > MAX_LINE_BYTES:
        raise _BadLine(f"is longer than {MAX_LINE_BYTES} bytes")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _BadLine(f"is not valid JSON ({exc})") from exc
    record = _check_record(doc)
    # Only the canonical spelling is ever written; any other spelling of the same data is forged.
    if _encode(record) != raw:
        raise _BadLine("is not in canonical form")
    return record


def _scan_full(lines: list[bytes]) -> tuple[list[TrustRecord], list[str], _Bad | None]:
    """Parse and chain-check every line; stops at the first bad one."""
    records: list[TrustRecord] = []
    hashes: list[str] = []
    prev = GENESIS
    for index, raw in enumerate(lines):
        try:
            record = _parse_line(raw)
        except _BadLine as exc:
            return records, hashes, _Bad(at=index, reason=str(exc))
        if record.seq != index:
            reason = f"has seq {record.seq}: a record before it is missing, duplicated or moved"
            return records, hashes, _Bad(at=index, reason=reason)
        if record.prev != prev:
            of = f"line {index}" if index else "the genesis value"
            return records, hashes, _Bad(at=index, reason=f"prev does not match the hash of {of}")
        prev = b3(raw)
        hashes.append(prev)
        records.append(record)
    return records, hashes, None


def _scan_chain(lines: list[bytes], prior: list[str]) -> tuple[list[str], _Bad | None]:
    """The writer's whole-log check without parsing: each line must carry the hash of the line
    before it. Once `trust.head` pins the last line, every earlier line is pinned by induction, so
    this rejects what `_scan_full` rejects for lines up to the head (barring a blake3 collision) at
    a tenth of the cost; a line past the head is parsed separately. `prior` are the hashes of the
    lines before `lines`, already checked."""
    hashes = list(prior)
    needle = b'"prev":"' + (hashes[-1] if hashes else GENESIS).encode() + b'"'
    for offset, raw in enumerate(lines):
        if len(raw) > MAX_LINE_BYTES or needle not in raw:
            reason = "does not carry the hash of the line before it"
            return hashes, _Bad(at=len(prior) + offset, reason=reason)
        digest = DIGEST_PREFIX + blake3.blake3(raw).hexdigest()
        hashes.append(digest)
        needle = b'"prev":"' + digest.encode() + b'"'
    return hashes, None


def _judge(snap: _Snapshot, n_lines: int, hashes: list[str], bad: _Bad | None) -> VerifyReport:
    """Compare a chain-checked log with `trust.head`; see the module docstring for the rules."""
    n_ok = len(hashes)
    last = hashes[-1] if hashes else GENESIS

    def fail(index: int | None, problem: str) -> VerifyReport:
        where = f"{_where(index)}: " if index is not None else ""
        return VerifyReport(
            ok=False,
            count=n_ok,
            head=last,
            first_bad=None if index is None else index + 1,
            problem=where + problem,
            torn=snap.torn,
        )

    if snap.head_problem:
        return fail(None, snap.head_problem)
    head = snap.head
    if head is None:
        if n_lines:
            return fail(None, f"{HEAD_NAME} is missing but {LOG_NAME} has records")
        head = _Head(records=0, last=GENESIS)
    count = head.records
    # The head's own line is checked first when it was reached: it is the earliest thing wrong.
    if count and n_ok >= count and hashes[count - 1] != head.last:
        return fail(count - 1, f"its hash does not match {HEAD_NAME} (changed, or lines inserted)")
    if bad is not None:
        return fail(bad.at, bad.reason)
    if n_lines < count:
        lost = count - n_lines
        return fail(
            n_lines,
            f"missing: {HEAD_NAME} counts {count} records, the log ends after "
            f"{n_lines} ({lost} removed from the end)",
        )
    if n_lines > count + 1:
        return fail(
            count + 1,
            f"{n_lines - count} records follow the last one {HEAD_NAME} "
            f"acknowledges; at most 1 can be left by an interrupted writer",
        )
    if snap.torn > MAX_LINE_BYTES:
        return fail(n_lines, f"an unterminated final line is longer than {MAX_LINE_BYTES} bytes")
    return VerifyReport(
        ok=True,
        count=n_lines,
        head=last,
        first_bad=None,
        problem="",
        pending=n_lines - count,
        torn=snap.torn,
    )


def _read_head_file(path: Path) -> tuple[_Head | None, str]:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_HEAD_BYTES + 1)
    except FileNotFoundError:
        return None, ""
    if len(data) > MAX_HEAD_BYTES:
        return None, f"{HEAD_NAME} is larger than {MAX_HEAD_BYTES} bytes"
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None, f"{HEAD_NAME} is not valid JSON"
    if not isinstance(doc, dict) or set(doc) != {"v", "count", "head"}:
        return None, f"{HEAD_NAME} does not have exactly the fields v, count, head"
    count, head = doc["count"], doc["head"]
    if doc["v"] != FORMAT_VERSION or type(doc["v"]) is not int:
        return None, f"{HEAD_NAME} has format version {doc['v']!r}"
    if type(count) is not int or count < 0 or not isinstance(head, str) or not is_digest(head):
        return None, f"{HEAD_NAME} has an invalid count or head"
    if (count == 0) != (head == GENESIS):
        return None, f"{HEAD_NAME} pairs count {count} with the wrong head"
    return _Head(records=count, last=head), ""


def _read_all(fd: int) -> bytes:
    # One read of the known size: the log can be megabytes and is re-read on every append.
    data = os.pread(fd, os.fstat(fd).st_size, 0)
    while True:
        more = os.pread(fd, 1 << 20, len(data))
        if not more:
            return data
        data += more


def _split_lines(body: bytes) -> list[bytes]:
    """The lines of `body` (which ends in "\n" or is empty), each keeping its "\n"."""
    if not body:
        return []
    return [line + b"\n" for line in body[:-1].split(b"\n")]


def _last_line(body: bytes) -> bytes:
    return body[body.rfind(b"\n", 0, len(body) - 1) + 1 :]


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _utc(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


class TrustLog:
    """The trust log in one `$AGENTSTACK_HOME` (resolving that directory is the caller's job)."""

    def __init__(self, home: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.home = Path(home)
        self.path = self.home / LOG_NAME
        self.head_path = self.home / HEAD_NAME
        self.lock_path = self.home / LOCK_NAME
        self.torn_path = self.home / TORN_NAME
        self._clock = clock
        self._verified: _Verified | None = None
        # The last snapshot this process verified as a reader, with its outcome: the same bytes
        # (head and log, compared in full) always verify the same way, so a command asking several
        # questions reads both files each time but parses and hashes them once.
        self._read: tuple[_Snapshot, list[TrustRecord], VerifyReport] | None = None

    # ----------------------------------------------------------------------------------- writing

    def append(
        self,
        action: Action,
        project: str,
        digest: str,
        lock: str = "",
        extra: Mapping[str, str] | None = None,
    ) -> TrustRecord:
        """Append one record; it is durable (fsynced) when this returns, and not before.

        All or nothing: when the storage refuses (a full disk, a quota, a read-only file system,
        an I/O error) the line is taken back and `StorageError` (exit 1) says nothing was
        recorded; the log stays valid either way."""
        template = self._validated(action, project, digest, lock, extra)
        what = f"the {action} record for {digest}" + (f" and {project}" if project else "")
        try:
            record = self._append(template)
        except OSError as exc:
            raise storage_error(
                exc, self.home, f"recording {what} in the trust log (nothing of it was written)"
            ) from exc
        where = f" for {project}" if project else ""
        note_recorded(f"trust log record {record.seq} ({action} {digest}{where})")
        return record

    def _append(self, template: TrustRecord) -> TrustRecord:
        if not self.home.is_dir():
            self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
            _fsync_dir(self.home.parent)
        with self._locked(shared=False):
            self._remove_stale_head_temps()
            head, head_problem = _read_head_file(self.head_path)
            try:
                fd: int | None = os.open(self.path, _LOG_FLAGS)
            except FileNotFoundError:
                fd = None
            try:
                body, torn = b"", b""
                if fd is not None:
                    data = _read_all(fd)
                    end = data.rfind(b"\n") + 1
                    body, torn = data[:end], data[end:]
                    # An oversized tail cannot come from a writer, so it is refused, not moved.
                    if torn and len(torn) <= MAX_LINE_BYTES:
                        self._move_torn(fd, end, torn)
                        torn = b""
                snap = _Snapshot(head=head, head_problem=head_problem, body=body, torn=len(torn))
                hashes, hasher = self._check_before_append(snap)
                count = len(hashes)
                if head is None:
                    # The head exists before the log does, so a missing head is always tampering.
                    self._write_head(0, GENESIS)
                elif head.records < count:
                    # Adopt the line an interrupted writer left before adding ours: two lines
                    # past the head would read as tampering.
                    self._write_head(count, hashes[-1])
                prev = hashes[-1] if hashes else GENESIS
                record = template.replace(seq=count, prev=prev, time=_utc(self._clock()))
                line = _encode(record)
                created = fd is None
                if fd is None:
                    fd = os.open(self.path, _LOG_FLAGS | os.O_CREAT | os.O_EXCL, 0o600)
                keep = len(body)
                try:
                    # One write on O_APPEND: the line lands whole or (on a crash) as a torn tail.
                    _write_all(fd, line)
                    os.fsync(fd)
                    if created:
                        _fsync_dir(self.home)
                    line_hash = b3(line)
                    self._write_head(count + 1, line_hash, sync_dir=False)
                except OSError as exc:
                    # Not acknowledged: take the line back, so the log holds all of it or none.
                    # (If even that fails, what is left is a torn tail or one line past the head:
                    # both states a reader accepts and the next writer resolves.)
                    try:
                        os.ftruncate(fd, keep)
                    except OSError:
                        raise storage_error(
                            exc,
                            self.home,
                            f"acknowledging {record.action} record {record.seq} in {HEAD_NAME}; "
                            "taking the line back failed too, so it may be kept as the last "
                            "record (see 'agentstack trust log --verify')",
                        ) from exc
                    with contextlib.suppress(OSError):
                        os.fsync(fd)  # best effort: a line that came back would only be pending
                    raise
            finally:
                if fd is not None:
                    os.close(fd)
            hasher.update(line)
            self._verified = _Verified(
                size=len(body) + len(line), digest=hasher.digest(), hashes=[*hashes, line_hash]
            )
            try:
                _fsync_dir(self.home)
            except OSError as exc:
                # The head names the record already; only its durability is in doubt.
                note_recorded(f"trust log record {record.seq} ({record.action} {record.digest})")
                raise storage_error(
                    exc,
                    self.head_path,
                    f"making {HEAD_NAME} durable (the record is written and counted; check it "
                    "with 'agentstack trust log --verify')",
                ) from exc
        return record

    def repair_torn_tail(self) -> int:
        """Move an unterminated final line into `trust.jsonl.torn`; returns the bytes moved.

        `append` does this itself, but refuses a tail longer than a line can be (that was not a
        torn write); calling this directly moves any tail aside, so nothing is ever dropped."""
        if not self.path.exists():
            return 0
        with self._locked(shared=False):
            fd = os.open(self.path, _LOG_FLAGS)
            try:
                data = _read_all(fd)
                end = data.rfind(b"\n") + 1
                torn = data[end:]
                if torn:
                    self._move_torn(fd, end, torn)
                return len(torn)
            finally:
                os.close(fd)

    def _move_torn(self, fd: int, keep: int, torn: bytes) -> None:
        # Copy first, truncate second: a crash in between duplicates the fragment, never loses it.
        created = not self.torn_path.exists()
        out = os.open(self.torn_path, _LOG_FLAGS | os.O_CREAT, 0o600)
        try:
            _write_all(out, torn + b"\n")
            os.fsync(out)
        finally:
            os.close(out)
        if created:
            _fsync_dir(self.home)
        os.ftruncate(fd, keep)
        os.fsync(fd)

    def _check_before_append(self, snap: _Snapshot) -> tuple[list[str], Any]:
        """The line hashes of a log that is safe to append to, and a blake3 hasher fed its bytes;
        raises TrustLogTampered otherwise."""
        body = memoryview(snap.body)
        prior: list[str] = []
        start = 0
        hasher = blake3.blake3()
        known = self._verified
        # Re-checking only what was appended since our last append keeps a long-lived writer
        # linear; hashing the already-checked prefix in one call proves it is byte-identical.
        if known is not None and len(body) >= known.size:
            hasher.update(body[: known.size])
            if hasher.digest() == known.digest:
                prior, start = known.hashes, known.size
            else:
                hasher = blake3.blake3()
        hasher.update(body[start:])
        lines = _split_lines(snap.body[start:])
        hashes, bad = _scan_chain(lines, prior)
        n_lines = len(prior) + len(lines)
        report = _judge(snap, n_lines, hashes, bad)
        suspect = not report.ok
        if report.ok and report.pending:
            # The line to adopt is not pinned by the head, so it gets the reader's full check.
            index = n_lines - 1
            try:
                record = _parse_line(_last_line(snap.body))
                before = hashes[index - 1] if index else GENESIS
                suspect = record.seq != index or record.prev != before
            except _BadLine:
                suspect = True
        if suspect:
            # Name the problem as precisely as a reader would.
            all_lines = _split_lines(snap.body)
            detailed = _judge(snap, len(all_lines), *_scan_full(all_lines)[1:])
            raise self._tampered((detailed if not detailed.ok else report).problem)
        return hashes, hasher

    def _write_head(self, count: int, head: str, *, sync_dir: bool = True) -> None:
        data = canonical_bytes({"v": FORMAT_VERSION, "count": count, "head": head}) + b"\n"
        tmp = self.home / f"{_HEAD_TMP_PREFIX}{os.urandom(8).hex()}{_HEAD_TMP_SUFFIX}"
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.head_path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if sync_dir:
            _fsync_dir(self.home)

    def _remove_stale_head_temps(self) -> None:
        # Only a writer killed mid-replace leaves these; we hold the lock, so none is in use.
        with os.scandir(self.home) as entries:
            for entry in entries:
                if entry.name.startswith(_HEAD_TMP_PREFIX) and entry.name.endswith(
                    _HEAD_TMP_SUFFIX
                ):
                    Path(entry.path).unlink(missing_ok=True)

    def _validated(
        self,
        action: str,
        project: str,
        digest: str,
        lock: str,
        extra: Mapping[str, str] | None,
    ) -> TrustRecord:
        doc: dict[str, Any] = {
            "v": FORMAT_VERSION,
            "seq": _SEQ_BOUND - 1,
            "time": _utc(0),
            "action": action,
            "project": project,
            "digest": digest,
            "lock": lock,
            "prev": GENESIS,
        }
        if extra:
            doc["extra"] = dict(extra)
        try:
            record = _check_record(doc)
            # Sized with the largest seq, so the real line can only be shorter.
            size = len(_encode(record))
        except _BadLine as exc:
            raise TrustRecordInvalid(f"refusing to record {action!r}: the record {exc}") from exc
        if size > MAX_LINE_BYTES:
            raise TrustRecordInvalid(
                f"refusing to record {action!r}: the record would be {size} bytes, "
                f"more than {MAX_LINE_BYTES}"
            )
        return record

    @contextmanager
    def _locked(self, *, shared: bool) -> Iterator[None]:
        if shared:
            try:
                fd = os.open(self.lock_path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                # No writer has ever run, so there is none to wait for.
                yield
                return
        else:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # ----------------------------------------------------------------------------------- reading

    def _snapshot(self) -> _Snapshot:
        # Head first: a line is written before the head that counts it, so a log read after the
        # head holds at least the records that head counts.
        head, head_problem = _read_head_file(self.head_path)
        try:
            with open(self.path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            data = b""
        end = data.rfind(b"\n") + 1
        return _Snapshot(
            head=head, head_problem=head_problem, body=data[:end], torn=len(data) - end
        )

    def _read_verified(self) -> tuple[list[TrustRecord], VerifyReport]:
        snap = self._snapshot()
        known = self._read
        if known is not None and known[0] == snap:
            return list(known[1]), known[2]
        lines = _split_lines(snap.body)
        records, hashes, bad = _scan_full(lines)
        report = _judge(snap, len(lines), hashes, bad)
        self._read = (snap, list(records), report)
        return records, report

    def _load(self) -> tuple[list[TrustRecord], VerifyReport]:
        records, report = self._read_verified()
        if not report.ok:
            # Writers may have moved on between our two reads; judge again with them held off.
            with self._locked(shared=True):
                records, report = self._read_verified()
        return records, report

    def _tampered(self, problem: str) -> TrustLogTampered:
        return TrustLogTampered(
            f"the trust log is tampered or corrupt: {problem}",
            hint=f"inspect it with 'agentstack trust log --verify'; the log is in {self.path}",
        )

    def records(self) -> list[TrustRecord]:
        """Every acknowledged record, after verifying the whole chain against `trust.head`."""
        records, report = self._load()
        if not report.ok:
            raise self._tampered(report.problem)
        return records

    def verify(self) -> VerifyReport:
        """Like `records()`, but reports tampering instead of raising."""
        return self._load()[1]

    def head(self) -> tuple[int, str]:
        """(count, head hash) from `trust.head` alone, without reading the log."""
        head, problem = _read_head_file(self.head_path)
        if problem:
            raise self._tampered(problem)
        return (0, GENESIS) if head is None else (head.records, head.last)

    # ----------------------------------------------------------------------------------- queries

    def _current(self, project: str) -> dict[str, TrustRecord]:
        """digest -> the last trust/revoke record for (project, digest)."""
        latest: dict[str, TrustRecord] = {}
        for record in self.records():
            if record.project == project and record.action in _STATE_ACTIONS:
                latest[record.digest] = record
        return latest

    def state_for(self, project: str, digest: str) -> TrustState:
        record = self._current(project).get(digest)
        if record is None:
            return "unknown"
        return "trusted" if record.action in _TRUSTING_ACTIONS else "revoked"

    def trusted_digests(self, project: str) -> list[str]:
        """Digests currently trusted for `project`, oldest trust first."""
        return [record.digest for record in self._trusted(project)]

    def last_trusted(self, project: str) -> TrustRecord | None:
        """The most recent record that trusts a still-trusted digest for `project`."""
        trusted = self._trusted(project)
        return trusted[-1] if trusted else None

    def _trusted(self, project: str) -> list[TrustRecord]:
        current = self._current(project).values()
        return sorted(
            (record for record in current if record.action in _TRUSTING_ACTIONS),
            key=lambda record: record.seq,
        )

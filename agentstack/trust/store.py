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

The record (`agentstack.trust.record`) and the chain check (`agentstack.trust.chain`, bytes in,
verified view out) are modules of their own; this one is the files: reading, locking, appending.
Standard library + blake3 only: the guard hook imports it when it checks trust.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import blake3

import agentstack.trust.chain as chain
from agentstack import layout
from agentstack.canonical import b3, canonical_bytes
from agentstack.storage import note_recorded, storage_error
from agentstack.trust.chain import (
    MAX_HEAD_BYTES,
    VerifyReport,
    _Head,
    _last_line,
    _Snapshot,
    _split_lines,
    _Verified,
)
from agentstack.trust.record import (
    _SEQ_BOUND,
    _STATE_ACTIONS,
    _TRUSTING_ACTIONS,
    FORMAT_VERSION,
    GENESIS,
    MAX_LINE_BYTES,
    Action,
    TrustLogTampered,
    TrustRecord,
    TrustRecordInvalid,
    TrustState,
    _BadLine,
    _check_record,
    _encode,
    _parse_line,
)

LOG_NAME = layout.TRUST_LOG
HEAD_NAME = layout.TRUST_HEAD
LOCK_NAME = layout.TRUST_LOCK
TORN_NAME = layout.TRUST_TORN
_HEAD_TMP_PREFIX = ".trust.head."
_HEAD_TMP_SUFFIX = ".tmp"
# Never write through a link planted in place of one of our files.
_LOG_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW



def _read_head_file(path: Path) -> tuple[_Head | None, str]:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_HEAD_BYTES + 1)
    except FileNotFoundError:
        return None, ""
    return chain.parse_head(data)



def _read_all(fd: int) -> bytes:
    # One read of the known size: the log can be megabytes and is re-read on every append.
    data = os.pread(fd, os.fstat(fd).st_size, 0)
    while True:
        more = os.pread(fd, 1 << 20, len(data))
        if not more:
            return data
        data += more



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
        hashes, bad = chain._scan_chain(lines, prior)
        n_lines = len(prior) + len(lines)
        report = chain._judge(snap, n_lines, hashes, bad)
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
            detailed = chain._judge(snap, len(all_lines), *chain._scan_full(all_lines)[1:])
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
        records, hashes, bad = chain._scan_full(lines)
        report = chain._judge(snap, len(lines), hashes, bad)
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

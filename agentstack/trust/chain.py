"""The trust log's chain check: bytes in, a verified view out, no I/O (docs/trust.md).

Given the bytes of `trust.jsonl` and of `trust.head`, `verified` returns every acknowledged record
and a `VerifyReport`: each line parsed (`agentstack.trust.record`), its `prev` equal to the blake3 of
the line before it, and the chain's end equal to what the head counts (the crash states the store's
docstring lists are told from tampering here). The store (`agentstack.trust.store`) reads the files,
holds the lock and appends; the writer's cheaper whole-log check (`_scan_chain`) is here too.
"""

from __future__ import annotations

import json

import blake3

from agentstack import layout
from agentstack.canonical import DIGEST_PREFIX, b3, is_digest
from agentstack.trust.record import (
    FORMAT_VERSION,
    GENESIS,
    MAX_LINE_BYTES,
    TrustRecord,
    Value,
    _BadLine,
    _parse_line,
    _where,
)

LOG_NAME = layout.TRUST_LOG
HEAD_NAME = layout.TRUST_HEAD


MAX_HEAD_BYTES = 4096



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



def _split_lines(body: bytes) -> list[bytes]:
    """The lines of `body` (which ends in "\n" or is empty), each keeping its "\n"."""
    if not body:
        return []
    return [line + b"\n" for line in body[:-1].split(b"\n")]



def _last_line(body: bytes) -> bytes:
    return body[body.rfind(b"\n", 0, len(body) - 1) + 1 :]


def parse_head(data: bytes) -> tuple[_Head | None, str]:
    """`trust.head`'s bytes as (count, last hash), or the problem that makes them unusable."""
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


def verified(head: bytes | None, log: bytes) -> tuple[list[TrustRecord], VerifyReport]:
    """The whole check on bytes alone: `head` is `trust.head`'s content (None: there is none),
    `log` is `trust.jsonl`'s. Every acknowledged record and the verdict; no I/O."""
    if head is None:
        head_value, head_problem = None, ""
    else:
        head_value, head_problem = parse_head(head)
    end = log.rfind(b"\n") + 1
    snap = _Snapshot(head=head_value, head_problem=head_problem, body=log[:end],
                     torn=len(log) - end)  # fmt: skip
    lines = _split_lines(snap.body)
    records, hashes, bad = _scan_full(lines)
    return records, _judge(snap, len(lines), hashes, bad)

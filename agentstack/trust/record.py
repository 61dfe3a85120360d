"""A trust record: one decision of the trust log, its one valid form and its canonical bytes
(docs/trust.md). Standard library only; the chain (`agentstack.trust.chain`) and the file
(`agentstack.trust.store`) build on it.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Literal

from agentstack.canonical import CanonicalError, b3, canonical_bytes, is_digest
from agentstack.errors import Refused

FORMAT_VERSION = 1
ACTIONS = ("trust", "revoke", "release", "discard", "receive")
Action = Literal["trust", "revoke", "release", "discard", "receive"]
TrustState = Literal["trusted", "revoked", "unknown"]
GENESIS = b3(b"agentstack-trust-genesis")
MAX_LINE_BYTES = 64 * 1024  # including the newline
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

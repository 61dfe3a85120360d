"""The one canonical byte form of a JSON document, and the digests taken over it.

Sorted keys, `(",", ":")` separators, UTF-8 without escaping, no floats, ASCII keys. This module is
stdlib + blake3 only: the guard and the trust log hash with it.
"""

from __future__ import annotations

import json
from typing import Any

import blake3

DIGEST_PREFIX = "b3:"


class CanonicalError(ValueError):
    """A value that has no canonical form (a float, a non-ASCII key, an unknown type)."""


def _check(value: Any, path: str) -> None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise CanonicalError(f"{path}: string has no UTF-8 form (a lone surrogate)") from None
        return
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, float):
        raise CanonicalError(f"{path}: floats have no canonical form")
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check(item, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or not key.isascii():
                raise CanonicalError(f"{path}: keys must be ASCII strings, got {key!r}")
            _check(item, f"{path}.{key}")
        return
    raise CanonicalError(f"{path}: {type(value).__name__} has no canonical form")


def canonical_bytes(value: Any) -> bytes:
    """Serialise `value` canonically; raises CanonicalError for anything without one form."""
    _check(value, "$")
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def b3(data: bytes) -> str:
    return DIGEST_PREFIX + blake3.blake3(data).hexdigest()


def digest_of(value: Any) -> str:
    return b3(canonical_bytes(value))


def is_digest(text: str) -> bool:
    if not text.startswith(DIGEST_PREFIX) or len(text) != len(DIGEST_PREFIX) + 64:
        return False
    return all(c in "0123456789abcdef" for c in text[len(DIGEST_PREFIX) :])

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


def _plain(value: Any) -> bool:
    """True when `value` is made only of exact str/int/bool/None/list/tuple/dict types with
    ASCII string keys and UTF-8-encodable strings: then `_check` would accept it. A fast first
    pass over a large document (no path strings); anything else goes through `_check`."""
    stack = [value]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is str:
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return False
        elif kind is dict:
            for key, sub in item.items():
                if type(key) is not str or not key.isascii():
                    return False
                push(sub)
        elif kind is list or kind is tuple:
            extend(item)
        elif not (item is None or kind is int or kind is bool):
            return False
    return True


def canonical_bytes(value: Any) -> bytes:
    """Serialise `value` canonically; raises CanonicalError for anything without one form."""
    if not _plain(value):
        _check(value, "$")  # the precise error, with the path to the offending value
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
    return _HEX.issuperset(text[len(DIGEST_PREFIX) :])


_HEX = frozenset("0123456789abcdef")

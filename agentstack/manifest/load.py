"""Loading a manifest: its bytes read, validated once (the fast validator, else the cache, else
the models) and handed on as a `ManifestView`. Split from `agentstack.manifest.view` so the view
(plain data, read by every stage) imports none of the validators above it.

The cache (docs/lockfile.md, "The manifest cache") lives in the user's cache directory,
`$AGENTSTACK_CACHE/manifests/<key>.json`. The key is blake3 over the manifest's exact bytes, the
agentstack version and the bytes of the schema (`manifest/model.py`, `manifest/rules.py` and
`manifest/fast.py`: every model, rule and the fast validator), so an edited manifest, another
agentstack or a changed schema never hits an old entry.
An entry is written atomically (temporary file + rename) and is used only when it is a regular file
owned by the user and writable by no one else, its recorded key, version and schema equal the
expected ones, and its checksum (blake3 over the digest and data) holds; anything else is ignored and
rebuilt by validating again. An invalid manifest is never cached, so its errors are always the
validator's own.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentstack import layout
from agentstack.manifest.view import (
    MANIFEST_NAME,
    ManifestView,
    _is_filled,
    _without_defaults,
    manifest_spec,
)

if TYPE_CHECKING:
    from agentstack.manifest.model import Manifest

CACHE_FORMAT = 1
CACHE_DIR = layout.MANIFEST_CACHE
CACHE_KEEP = 64  # entries kept; the oldest beyond that are removed when a new one is written
_KEY_DOMAIN = b"agentstack-manifest-view-v1\0"


# ----------------------------------------------------------------------------------- the cache

_schema: list[bytes | None] = []


SCHEMA_SOURCES = ("model.py", "rules.py", "fast.py")


def schema_digest() -> bytes | None:
    """blake3 of the schema's sources (`manifest/model.py`, the models; `manifest/rules.py`, every
    rule; `manifest/fast.py`, the fast validator): a changed schema is a new key. None when a source
    cannot be read (then nothing is cached)."""
    if not _schema:
        import blake3

        hasher = blake3.blake3()
        try:
            for name in SCHEMA_SOURCES:
                source = Path(__file__).with_name(name).read_bytes()
                hasher.update(len(source).to_bytes(8, "big") + source)
        except OSError:
            _schema.append(None)
        else:
            _schema.append(hasher.digest())
    return _schema[0]


def cache_key(data: bytes) -> str | None:
    import blake3

    from agentstack import __version__

    schema = schema_digest()
    if schema is None:
        return None
    version = __version__.encode()
    hasher = blake3.blake3(_KEY_DOMAIN)
    for part in (version, schema, data):
        hasher.update(len(part).to_bytes(8, "big") + part)
    return hasher.hexdigest()


def _checksum(digest: str, data: dict[str, Any]) -> str:
    from agentstack.canonical import digest_of

    return digest_of({"digest": digest, "data": data})


def cache_dir() -> Path:
    from agentstack.paths import agentstack_cache

    return agentstack_cache() / CACHE_DIR




def _consistent(source: bytes, digest: str, data: dict[str, Any]) -> bool:
    """The entry describes these manifest bytes: its data is their TOML with the defaults filled
    in, and its digest is the digest of that data (so neither can say anything else)."""
    import tomllib

    from agentstack.canonical import digest_of

    try:
        raw = tomllib.loads(source.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    spec = manifest_spec()
    return _is_filled(raw, data, spec) and digest_of(_without_defaults(data, spec)[0]) == digest


def _read_entry(directory: Path, key: str, source: bytes) -> ManifestView | None:
    from agentstack import __version__
    from agentstack.layout import read_own

    schema = schema_digest()
    found = read_own(str(directory / f"{key}.json"), limit=16 << 20)
    if found is None:
        return None  # missing, or not ours alone: never trusted
    try:
        raw = json.loads(found)
        if (
            not isinstance(raw, dict)
            or raw.get("format") != CACHE_FORMAT
            or raw.get("key") != key
            or raw.get("agentstack") != __version__
            or schema is None
            or raw.get("schema") != schema.hex()
        ):
            return None
        digest, data = raw.get("digest"), raw.get("data")
        if not isinstance(digest, str) or not isinstance(data, dict):
            return None
        if raw.get("check") != _checksum(digest, data) or not _consistent(source, digest, data):
            return None
        return ManifestView(data, digest)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None  # damaged: validate again and overwrite it


def _write_entry(directory: Path, key: str, view: ManifestView) -> None:
    from agentstack import __version__

    schema = schema_digest()
    if schema is None:
        return
    payload = {
        "format": CACHE_FORMAT,
        "key": key,
        "agentstack": __version__,
        "schema": schema.hex(),
        "digest": view.digest,
        "check": _checksum(view.digest, view.data),
        "data": view.data,
    }
    import tempfile

    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".manifest-", suffix=".tmp")
    except OSError:
        return  # the cache only saves work; never fail on it
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(payload, separators=(",", ":"), ensure_ascii=False))
        os.replace(tmp, directory / f"{key}.json")
    except OSError:
        Path(tmp).unlink(missing_ok=True)
        return
    _prune(directory)


def _entries(directory: Path) -> Iterator[tuple[int, str]]:
    with os.scandir(directory) as it:
        for entry in it:
            if entry.name.endswith(".json") and not entry.name.startswith("."):
                try:
                    yield entry.stat(follow_symlinks=False).st_mtime_ns, entry.path
                except OSError:
                    continue


def _prune(directory: Path) -> None:
    try:
        entries = sorted(_entries(directory))
    except OSError:
        return
    for _mtime, path in entries[: max(0, len(entries) - CACHE_KEEP)]:
        with contextlib.suppress(OSError):
            os.unlink(path)


fast_path = True  # tests switch it off to exercise the cache and the models alone


def view_of_bytes(data: bytes, file: str = MANIFEST_NAME, *, cache: bool = True) -> ManifestView:
    """The validated view of manifest bytes: from the fast validator when it is certain the
    models accept them (`agentstack.manifest.fast`, no pydantic), else from the cache when these
    exact bytes were validated by this agentstack before, else validated with the models (errors
    exactly as `parse_manifest`'s) and cached."""
    if fast_path:
        from agentstack.manifest.fast import validated_bytes

        fast = validated_bytes(data)
        if fast is not None:
            return ManifestView.from_data(fast)
    key = cache_key(data) if cache else None
    directory = cache_dir() if key is not None else None
    if key is not None and directory is not None:
        hit = _read_entry(directory, key, data)
        if hit is not None:
            return hit
    from agentstack.manifest.model import parse_manifest

    view = ManifestView.from_model(parse_manifest(data, file))
    if key is not None and directory is not None:
        _write_entry(directory, key, view)
    return view


def read_manifest(root: Path) -> bytes:
    """The bytes of the project's agentstack.toml (InvalidInput, saying what to do, when none)."""
    from agentstack.errors import InvalidInput

    path = root / MANIFEST_NAME
    try:  # never blocks on a FIFO or a device the project put in its place
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InvalidInput(
            f"{path}: no manifest", hint="run 'agentstack init' to create one"
        ) from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise InvalidInput(f"{path}: not a regular file", hint="replace it with a manifest")
        return handle.read()


def load_view(root: Path, *, cache: bool = True) -> ManifestView:
    """`load_manifest(root)` as a view, validated only when the bytes are new to this cache."""
    return view_of_bytes(read_manifest(root), MANIFEST_NAME, cache=cache)


def load_manifest(root: Path) -> Manifest:
    """The project's manifest validated by the models (pydantic), for what needs the models."""
    from agentstack.manifest.model import parse_manifest

    return parse_manifest(read_manifest(root), MANIFEST_NAME)

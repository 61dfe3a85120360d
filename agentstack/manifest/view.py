"""A plain-data view of a validated manifest, and the cache that spares re-validating it.

Standard library only: `lock`, `digest`, `status`, `show` and the lock-freshness check work on a
`ManifestView`, never on the pydantic models. The view is the validated manifest dumped to JSON
(`Manifest.model_dump(mode="json")`: every field, defaults filled in, in declaration order) plus the
manifest digest the lock records. The models are the reference (`ManifestView.from_model`); in
front of them, `view_of_bytes` asks the fast validator (`agentstack.manifest.fast`, standard library
only), which gives exactly that dump when it is certain the models accept the manifest and gives up
otherwise (`ManifestView.from_data`), so a valid manifest never imports pydantic and an invalid
one gets the models' errors. When the fast validator gives up and the models accept, the cache
stores their result so that those bytes are not validated (and pydantic not imported) again.

The cache (docs/lockfile.md, "The manifest cache") lives in the user's cache directory,
`$AGENTSTACK_CACHE/manifests/<key>.json`. The key is blake3 over the manifest's exact bytes, the
agentstack version and the bytes of the schema (`manifest.py`, `manifestrules.py` and
`manifestfast.py`: every model, rule and the fast validator), so an edited manifest, another
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
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from agentstack.manifest.model import Manifest

MANIFEST_NAME = "agentstack.toml"
LOCK_NAME = "agentstack.lock"
SECRET_PREFIX = "secret:"  # noqa: S105 - a reference prefix, not a secret
SECRET_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"  # noqa: S105
# Hosts that reach cloud metadata services (link-local reach, a risk finding).
METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata", "instance-data"})

CACHE_FORMAT = 1
CACHE_DIR = "manifests"
CACHE_KEEP = 64  # entries kept; the oldest beyond that are removed when a new one is written
_KEY_DOMAIN = b"agentstack-manifest-view-v1\0"


def is_secret(value: str) -> bool:
    return value.startswith(SECRET_PREFIX)


def secret_name(value: str) -> str:
    return value[len(SECRET_PREFIX) :]


def find_project(start: Path) -> Path:
    """The nearest directory at or above `start` holding agentstack.toml (the one project
    finder: `agentstack.paths.find_project`)."""
    from agentstack.paths import find_project as find

    return find(start)


def copy_json(value: Any) -> Any:
    """A deep copy of JSON data (a view's data is shared; callers get their own)."""
    if isinstance(value, dict):
        return {k: copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_json(v) for v in value]
    return value


# ------------------------------------------------------------------------------------ the view


class Section:
    """One table of the validated manifest: `data` is its JSON dump (every declared field, in
    declaration order). Do not mutate `data`; `dump()` gives a private copy."""

    __slots__ = ("data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def dump(self) -> dict[str, Any]:
        return copy_json(self.data)  # type: ignore[no-any-return]

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.data == self.data

    def __hash__(self) -> int:  # pragma: no cover - views are not dict keys
        raise TypeError("a manifest view is not hashable")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.data!r})"


class ProjectView(Section):
    __slots__ = ()

    @property
    def name(self) -> str:
        return self.data["name"]  # type: ignore[no-any-return]

    @property
    def harnesses(self) -> list[str]:
        return self.data["harnesses"]  # type: ignore[no-any-return]


class ServerView(Section):
    __slots__ = ()

    @property
    def command(self) -> str | None:
        return self.data["command"]  # type: ignore[no-any-return]

    @property
    def args(self) -> list[str]:
        return self.data["args"]  # type: ignore[no-any-return]

    @property
    def env(self) -> dict[str, str]:
        return self.data["env"]  # type: ignore[no-any-return]

    @property
    def cwd(self) -> str | None:
        return self.data["cwd"]  # type: ignore[no-any-return]

    @property
    def url(self) -> str | None:
        return self.data["url"]  # type: ignore[no-any-return]

    @property
    def headers(self) -> dict[str, str]:
        return self.data["headers"]  # type: ignore[no-any-return]

    @property
    def pin(self) -> list[str]:
        return self.data["pin"]  # type: ignore[no-any-return]

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"


class SkillView(Section):
    __slots__ = ()

    @property
    def path(self) -> str | None:
        return self.data["path"]  # type: ignore[no-any-return]

    @property
    def git(self) -> str | None:
        return self.data["git"]  # type: ignore[no-any-return]

    @property
    def rev(self) -> str | None:
        return self.data["rev"]  # type: ignore[no-any-return]

    @property
    def subdir(self) -> str | None:
        return self.data["subdir"]  # type: ignore[no-any-return]


class PluginView(Section):
    __slots__ = ()

    @property
    def harness(self) -> str:
        return self.data["harness"]  # type: ignore[no-any-return]

    @property
    def path(self) -> str | None:
        return self.data["path"]  # type: ignore[no-any-return]

    @property
    def git(self) -> str | None:
        return self.data["git"]  # type: ignore[no-any-return]

    @property
    def rev(self) -> str | None:
        return self.data["rev"]  # type: ignore[no-any-return]

    @property
    def subdir(self) -> str | None:
        return self.data["subdir"]  # type: ignore[no-any-return]

    @property
    def enable(self) -> list[str] | None:
        return self.data["enable"]  # type: ignore[no-any-return]


class HookView(Section):
    __slots__ = ()

    @property
    def event(self) -> str:
        return self.data["event"]  # type: ignore[no-any-return]

    @property
    def matcher(self) -> str | None:
        return self.data["matcher"]  # type: ignore[no-any-return]

    @property
    def command(self) -> list[str] | None:
        return self.data["command"]  # type: ignore[no-any-return]

    @property
    def script(self) -> str | None:
        return self.data["script"]  # type: ignore[no-any-return]

    @property
    def args(self) -> list[str]:
        return self.data["args"]  # type: ignore[no-any-return]

    @property
    def timeout(self) -> int:
        return self.data["timeout"]  # type: ignore[no-any-return]

    @property
    def pin(self) -> list[str]:
        return self.data["pin"]  # type: ignore[no-any-return]


class InstructionsView(Section):
    __slots__ = ()

    @property
    def files(self) -> list[str]:
        return self.data["files"]  # type: ignore[no-any-return]


class NetworkView(Section):
    __slots__ = ()

    @property
    def block(self) -> bool:
        return self.data["block"]  # type: ignore[no-any-return]

    @property
    def allow_domains(self) -> list[str]:
        return self.data["allow_domains"]  # type: ignore[no-any-return]

    @property
    def localhost_ports(self) -> list[int]:
        return self.data["localhost_ports"]  # type: ignore[no-any-return]


class CredentialView(Section):
    __slots__ = ()

    @property
    def upstream(self) -> str:
        return self.data["upstream"]  # type: ignore[no-any-return]

    @property
    def secret(self) -> str:
        return self.data["secret"]  # type: ignore[no-any-return]

    @property
    def header(self) -> str:
        return self.data["header"]  # type: ignore[no-any-return]

    @property
    def env(self) -> str:
        return self.data["env"]  # type: ignore[no-any-return]

    @property
    def base_url_env(self) -> str | None:
        return self.data["base_url_env"]  # type: ignore[no-any-return]


class SandboxView(Section):
    """`[sandbox]` as the sandbox's policy reads it (the same attributes as the model)."""

    __slots__ = ()

    @property
    def allow_domains(self) -> list[str]:
        return self.data["network"]["allow_domains"]  # type: ignore[no-any-return]

    @property
    def enabled(self) -> bool:
        return self.data["enabled"]  # type: ignore[no-any-return]

    @property
    def read_dirs(self) -> list[str]:
        return self.data["read_dirs"]  # type: ignore[no-any-return]

    @property
    def write_dirs(self) -> list[str]:
        return self.data["write_dirs"]  # type: ignore[no-any-return]

    @property
    def read_files(self) -> list[str]:
        return self.data["read_files"]  # type: ignore[no-any-return]

    @property
    def write_files(self) -> list[str]:
        return self.data["write_files"]  # type: ignore[no-any-return]

    @property
    def env(self) -> list[str]:
        return self.data["env"]  # type: ignore[no-any-return]

    @property
    def network(self) -> NetworkView:
        return NetworkView(self.data["network"])

    @property
    def credentials(self) -> dict[str, CredentialView]:
        return {name: CredentialView(value) for name, value in self.data["credentials"].items()}


class ManifestView(Section):
    """The whole validated manifest, plus `digest` (the manifest digest the lock records)."""

    __slots__ = (
        "digest",
        "hooks",
        "instructions",
        "plugins",
        "project",
        "sandbox",
        "servers",
        "settings",
        "skills",
    )

    def __init__(self, data: dict[str, Any], digest: str) -> None:
        super().__init__(data)
        self.digest = digest
        self.project = ProjectView(data["project"])
        self.servers = {n: ServerView(v) for n, v in data["servers"].items()}
        self.skills = {n: SkillView(v) for n, v in data["skills"].items()}
        self.instructions = InstructionsView(data["instructions"])
        self.hooks = {n: HookView(v) for n, v in data["hooks"].items()}
        self.plugins = {n: PluginView(v) for n, v in data.get("plugins", {}).items()}
        self.settings = Section(data["settings"])
        self.sandbox = SandboxView(data["sandbox"])

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ManifestView)
            and other.digest == self.digest
            and other.data == self.data
        )

    __hash__ = Section.__hash__

    @classmethod
    def from_model(cls, manifest: Manifest) -> ManifestView:
        """The view of the validated models (the reference)."""
        from agentstack.canonical import digest_of

        return cls(
            manifest.model_dump(mode="json"),
            digest_of(manifest.model_dump(mode="json", exclude_defaults=True)),
        )

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> ManifestView:
        """The view of `Manifest.model_dump(mode="json")` as the fast validator makes it
        (`agentstack.manifest.fast`): the digest is the dump without its defaults, as
        `model_dump(exclude_defaults=True)` gives it."""
        from agentstack.canonical import digest_of

        return cls(data, digest_of(_without_defaults(data, manifest_spec())[0]))


def as_view(manifest: Manifest | ManifestView) -> ManifestView:
    """`manifest` as a view (the models are dumped once; a view is returned as it is)."""
    if isinstance(manifest, ManifestView):
        return manifest
    return ManifestView.from_model(manifest)


# ------------------------------------------------------------------------------ the defaults

EACH = "*"  # the key of a spec that applies to every item of a table of items


class Spec(dict[str, Any]):
    """Defaults for the keys of one table of the manifest or the consent document (a nested Spec
    for a sub-table; under EACH, the spec of every item of a table of items)."""


def is_spec(value: Any) -> bool:
    """Whether a spec entry is a nested spec (a sub-table), not a default value."""
    return isinstance(value, Spec)


def encode_spec(spec: Spec) -> dict[str, Any]:
    """A spec as JSON: a nested spec is {"spec": {...}}, a default value {"value": v}."""
    return {
        k: {"spec": encode_spec(v)} if isinstance(v, Spec) else {"value": v}
        for k, v in spec.items()
    }


def decode_spec(encoded: dict[str, Any]) -> Spec:
    return Spec(
        {
            k: decode_spec(v["spec"]) if "spec" in v else copy_json(v["value"])
            for k, v in encoded.items()
        }
    )


def manifest_spec() -> Spec:
    """The defaults of this version's manifest models, without importing them (a fresh copy;
    `agentstack/manifest/_defaults.py`, checked against the models by a test)."""
    from agentstack.manifest._defaults import DEFAULTS

    return decode_spec(DEFAULTS)


# ----------------------------------------------------------------------------------- the cache

_schema: list[bytes | None] = []


SCHEMA_SOURCES = ("manifest.py", "manifestrules.py", "manifestfast.py")


def schema_digest() -> bytes | None:
    """blake3 of the schema's sources (`manifest.py`, the models; `manifestrules.py`, every rule;
    `manifestfast.py`, the fast validator): a changed schema is a new key. None when a source
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


def _is_filled(raw: Any, data: Any, spec: dict[str, Any]) -> bool:
    """Whether `data` is exactly the TOML data `raw` with every missing field at its default (what
    validation makes of a valid manifest: the models are strict and no validator rewrites a
    value). Cheap: an entry whose data says anything the bytes do not is never used."""
    if not isinstance(raw, dict) or not isinstance(data, dict) or not set(raw) <= set(data):
        return False
    for key, value in data.items():
        if key not in spec:  # a required field
            if key not in raw or not _same(raw[key], value):
                return False
            continue
        sub = spec[key]
        if is_spec(sub) and EACH in sub:  # a table of items: every item filled in
            items = raw.get(key, {})
            if (
                not isinstance(items, dict)
                or not isinstance(value, dict)
                or set(items) != set(value)
            ):
                return False
            if not all(_is_filled(items[n], value[n], sub[EACH]) for n in value):
                return False
        elif is_spec(sub):
            if not _is_filled(raw.get(key, {}), value, sub):
                return False
        elif not _same(raw.get(key, sub), value):
            return False
    return True


def _same(left: Any, right: Any) -> bool:
    # Type-exact: `true` is not `1` (the models are strict).
    return json.dumps(left, sort_keys=True) == json.dumps(right, sort_keys=True)


def _without_defaults(data: dict[str, Any], spec: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """`model_dump(exclude_defaults=True)` recomputed from the full dump: (the dump, whether
    every field was at its default)."""
    out: dict[str, Any] = {}
    at_default = True
    for key, value in data.items():
        sub = spec.get(key, _REQUIRED)
        if sub is _REQUIRED:
            out[key] = value
        elif is_spec(sub) and EACH in sub:
            if value == {}:
                continue
            out[key] = {n: _without_defaults(v, sub[EACH])[0] for n, v in value.items()}
        elif is_spec(sub):
            inner, inner_default = _without_defaults(value, sub)
            if inner_default:
                continue
            out[key] = inner
        elif value == sub:
            continue
        else:
            out[key] = value
        at_default = False
    return out, at_default


_REQUIRED = object()


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

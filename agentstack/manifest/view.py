"""A plain-data view of a validated manifest: the names and shapes every stage reads.

Standard library only: `lock`, `digest`, `status`, `show` and the lock-freshness check work on a
`ManifestView`, never on the pydantic models. The view is the validated manifest dumped to JSON
(`Manifest.model_dump(mode="json")`: every field, defaults filled in, in declaration order) plus the
manifest digest the lock records. The models are the reference (`ManifestView.from_model`); in
front of them, `agentstack.manifest.load.view_of_bytes` asks the fast validator (`agentstack.manifest.fast`, standard library
only), which gives exactly that dump when it is certain the models accept the manifest and gives up
otherwise (`ManifestView.from_data`), so a valid manifest never imports pydantic and an invalid
one gets the models' errors. When the fast validator gives up and the models accept, the cache
stores their result so that those bytes are not validated (and pydantic not imported) again.
The loader and its cache are `agentstack.manifest.load`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from agentstack.manifest.model import Manifest

MANIFEST_NAME = "agentstack.toml"
LOCK_NAME = "agentstack.lock"
SECRET_PREFIX = "secret:"  # noqa: S105 - a reference prefix, not a secret
SECRET_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"  # noqa: S105
# Hosts that reach cloud metadata services (link-local reach, a risk finding).
METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata", "instance-data"})



def is_secret(value: str) -> bool:
    return value.startswith(SECRET_PREFIX)


def secret_name(value: str) -> str:
    return value[len(SECRET_PREFIX) :]


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

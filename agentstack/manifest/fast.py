"""A validator of `agentstack.toml` that only ever accepts, standard library only.

The pydantic models (`agentstack.manifest`) stay the reference and the source of every error
message. This module turns parsed TOML into exactly the data those models dump
(`Manifest.model_dump(mode="json")`: every field in declaration order, defaults filled in), but
only when it is certain the models accept it with that result; on anything else (a problem, or
something it does not model) it returns None and the caller validates with the models, which
report the problem. So a valid manifest is read without importing pydantic, and an invalid one
gets pydantic's errors as before.

What it models of pydantic, for the config of every model (`strict=True`, `extra="forbid"`):
exact types (`true` is not an integer, `1` is not a boolean, no coercion), no unknown key, every
default (a fresh copy of a `default_factory`'s), field order, `Literal` values, integer bounds,
string length (in code points) and pattern constraints (`$` is the end of the text:
`manifestrules.matches`), dictionary key constraints, and the field and model validators, which
are the functions of `agentstack.manifest.rules` the models call. It is stricter than pydantic
where that is simpler (a string that is not valid Unicode, a value of a subclass of `str`/`int`/
`dict`/`list`, any exception): stricter only ever means "validate with the models".

`TABLES` holds every model, generated from the models themselves (`python -m
agentstack.manifest.gen` rewrites the block below; a test fails when it is stale, and another
compares it with the models' fields, types, defaults and validators), so the manifest's shape is
written once, in `agentstack.manifest`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import agentstack.manifest.rules as rules


class Reject(Exception):
    """Not certainly valid: validate with the models instead."""


# ------------------------------------------------------------------------------- type nodes


class Node:
    __slots__ = ()

    def check(self, value: Any) -> Any:
        raise NotImplementedError


Check = Callable[[Any], Any]


def _plain_str(value: Any) -> str:
    if type(value) is not str:
        raise Reject
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate
            raise Reject from None
    return value


class Str(Node):
    __slots__ = ("checks", "max_length", "min_length", "pattern")

    def __init__(
        self,
        *,
        min_length: int | None = None,
        max_length: int | None = None,
        pattern: str | None = None,
        checks: tuple[Check, ...] = (),
    ) -> None:
        self.min_length = min_length
        self.max_length = max_length
        self.pattern = pattern
        self.checks = checks

    def check(self, value: Any) -> Any:
        value = _plain_str(value)
        if self.min_length is not None and len(value) < self.min_length:
            raise Reject
        if self.max_length is not None and len(value) > self.max_length:
            raise Reject
        if self.pattern is not None and not rules.matches(self.pattern, value):
            raise Reject
        for check in self.checks:
            value = check(value)
        return value


class Int(Node):
    __slots__ = ("ge", "le")

    def __init__(self, ge: int, le: int) -> None:
        self.ge = ge
        self.le = le

    def check(self, value: Any) -> Any:
        if type(value) is not int or not self.ge <= value <= self.le:  # a bool is not an int
            raise Reject
        return value


class Bool(Node):
    __slots__ = ()

    def check(self, value: Any) -> Any:
        if type(value) is not bool:
            raise Reject
        return value


class Choice(Node):
    """A `Literal[...]` of strings."""

    __slots__ = ("values",)

    def __init__(self, values: tuple[str, ...]) -> None:
        self.values = values

    def check(self, value: Any) -> Any:
        if type(value) is not str or value not in self.values:
            raise Reject
        return value


class Optional(Node):
    """`X | None` (with None as the default)."""

    __slots__ = ("checks", "inner")

    def __init__(self, inner: Node, checks: tuple[Check, ...] = ()) -> None:
        self.inner = inner
        self.checks = checks

    def check(self, value: Any) -> Any:
        if value is not None:
            value = self.inner.check(value)
        for check in self.checks:  # a field validator sees None too
            value = check(value)
        return value


class OneOf(Node):
    """`A | B` of a boolean and a model (`servers.NAME.sandbox`: `false`, or a table). A boolean
    is certain; a table is left to the models (`Reject`): the digest drops the defaults inside a
    model of a union (`model_dump(exclude_defaults=True)`), which the defaults spec does not
    model, so only the models may digest it."""

    __slots__ = ("options",)

    def __init__(self, options: tuple[Node, ...]) -> None:
        self.options = options

    def check(self, value: Any) -> Any:
        for option in self.options:
            if isinstance(option, Bool) and type(value) is bool:
                return value
        raise Reject


class ListOf(Node):
    __slots__ = ("checks", "item")

    def __init__(self, item: Node, checks: tuple[Check, ...] = ()) -> None:
        self.item = item
        self.checks = checks

    def check(self, value: Any) -> Any:
        if type(value) is not list:
            raise Reject
        out = [self.item.check(v) for v in value]
        for check in self.checks:
            out = check(out)
        return out


class DictOf(Node):
    __slots__ = ("checks", "key", "value")

    def __init__(self, key: Node, value: Node, checks: tuple[Check, ...] = ()) -> None:
        self.key = key
        self.value = value
        self.checks = checks

    def check(self, value: Any) -> Any:
        if type(value) is not dict:
            raise Reject
        out = {self.key.check(k): self.value.check(v) for k, v in value.items()}
        for check in self.checks:
            out = check(out)
        return out


class Plain(Node):
    """`Any` (a passthrough value): kept as it is, so only plain JSON data of exact types is
    certain to dump as itself (the field's validators check what it may hold)."""

    __slots__ = ()

    def check(self, value: Any) -> Any:
        if type(value) is bool or type(value) is int:
            return value
        if type(value) is str:
            return _plain_str(value)
        if type(value) is list:
            return [self.check(v) for v in value]
        if type(value) is dict:
            return {_plain_str(k): self.check(v) for k, v in value.items()}
        raise Reject


REQUIRED = object()


class Field:
    """One field of a model: its type and its default (REQUIRED, a value, or a factory)."""

    __slots__ = ("default", "factory", "name", "node")

    def __init__(
        self,
        name: str,
        node: Node,
        default: Any = REQUIRED,
        factory: Callable[[], Any] | None = None,
    ) -> None:
        self.name = name
        self.node = node
        self.default = default
        self.factory = factory

    @property
    def required(self) -> bool:
        return self.factory is None and self.default is REQUIRED

    def missing(self) -> Any:
        if self.factory is not None:
            return self.factory()
        if self.default is REQUIRED:
            raise Reject
        return self.default  # immutable (None, a bool, an int or a str)


class Table(Node):
    """A model: a dict with only its fields, validated in order, then its model validators."""

    __slots__ = ("checks", "fields", "name", "names")

    def __init__(
        self, name: str, fields: tuple[Field, ...], checks: tuple[Callable[[Any], None], ...] = ()
    ) -> None:
        self.name = name
        self.fields = fields
        self.names = frozenset(f.name for f in fields)
        self.checks = checks

    def check(self, value: Any) -> Any:
        if type(value) is not dict or not value.keys() <= self.names:  # extra="forbid"
            raise Reject
        out = {
            f.name: f.node.check(value[f.name]) if f.name in value else f.missing()
            for f in self.fields
        }
        for check in self.checks:
            check(out)
        return out


# ------------------------------------------------------------------------- the models' table

# The models' shape, generated from them (agentstack.manifest.gen): never edited by hand.
# BEGIN generated by `python -m agentstack.manifest.gen` from agentstack.manifest
# fmt: off
PROJECT_SECTION = Table(
    "ProjectSection",
    (
        Field("name", Str(pattern=rules.NAME_PATTERN)),
        Field("harnesses", ListOf(Choice(rules.HARNESSES), (rules.unique_harnesses,)), factory=lambda: list(rules.DEFAULT_HARNESSES)),
    ),
)
SERVER_TOOLS = Table(
    "ServerTools",
    (
        Field("allow", ListOf(Str(pattern=rules.TOOL_NAME_PATTERN), (rules.unique_tools,)), factory=list),
        Field("deny", ListOf(Str(pattern=rules.TOOL_NAME_PATTERN), (rules.unique_tools,)), factory=list),
    ),
)
SERVER_NETWORK = Table(
    "ServerNetwork",
    (
        Field("allow_domains", ListOf(Str(max_length=rules.TEXT_MAX), (rules.check_domains,)), factory=list),
        Field("localhost_ports", ListOf(Int(1, 65535)), factory=list),
    ),
)
CREDENTIAL = Table(
    "Credential",
    (
        Field("upstream", Str(max_length=rules.TEXT_MAX, checks=(rules.check_upstream,))),
        Field("secret", Str(pattern=rules.SECRET_NAME_PATTERN)),
        Field("header", Str(pattern=rules.HEADER_NAME_PATTERN), "Authorization"),
        Field("env", Str(pattern=rules.ENV_NAME_PATTERN)),
        Field("base_url_env", Optional(Str(pattern=rules.ENV_NAME_PATTERN)), None),
    ),
)
SERVER_SANDBOX = Table(
    "ServerSandbox",
    (
        Field("network", SERVER_NETWORK, factory=lambda: SERVER_NETWORK.check({})),
        Field("credentials", DictOf(Str(pattern=rules.NAME_PATTERN), CREDENTIAL), factory=dict),
    ),
    (rules.check_server_sandbox,),
)
SERVER = Table(
    "Server",
    (
        Field("command", Optional(Str(max_length=rules.TEXT_MAX), (rules.check_command,)), None),
        Field("args", ListOf(Str(max_length=rules.TEXT_MAX, checks=(rules.no_expansion,))), factory=list),
        Field("env", DictOf(Str(pattern=rules.ENV_NAME_PATTERN), Str(max_length=rules.TEXT_MAX, checks=(rules.check_value_source,))), factory=dict),
        Field("cwd", Optional(Str(min_length=1, max_length=rules.PATH_MAX, checks=(rules.check_relative_path,))), None),
        Field("url", Optional(Str(max_length=rules.TEXT_MAX), (rules.check_server_url,)), None),
        Field("headers", DictOf(Str(pattern=rules.HEADER_NAME_PATTERN), Str(max_length=rules.TEXT_MAX, checks=(rules.check_value_source,))), factory=dict),
        Field("pin", ListOf(Str(min_length=1, max_length=rules.PATH_MAX, checks=(rules.check_relative_path, rules.check_pin)), (rules.unique_pins,)), factory=list),
        Field("tools", Optional(SERVER_TOOLS), None),
        Field("sandbox", Optional(OneOf((Bool(), SERVER_SANDBOX))), None),
    ),
    (rules.check_server,),
)
SKILL = Table(
    "Skill",
    (
        Field("path", Optional(Str(min_length=1, max_length=rules.PATH_MAX, checks=(rules.check_relative_path,))), None),
        Field("git", Optional(Str(max_length=rules.TEXT_MAX), (rules.check_git_url,)), None),
        Field("rev", Optional(Str(max_length=rules.TEXT_MAX), (rules.check_rev,)), None),
        Field("subdir", Optional(Str(min_length=1, max_length=rules.PATH_MAX, checks=(rules.check_relative_path,))), None),
    ),
    (rules.check_skill,),
)
INSTRUCTIONS = Table(
    "Instructions",
    (
        Field("files", ListOf(Str(min_length=1, max_length=rules.PATH_MAX, checks=(rules.check_relative_path,)), (rules.unique_files,)), factory=list),
    ),
)
HOOK = Table(
    "Hook",
    (
        Field("event", Choice(rules.HOOK_EVENTS)),
        Field("matcher", Optional(Str(max_length=rules.TEXT_MAX, checks=(rules.no_expansion,)), (rules.check_matcher,)), None),
        Field("command", Optional(ListOf(Str(max_length=rules.TEXT_MAX, checks=(rules.no_expansion,)))), None),
        Field("script", Optional(Str(min_length=1, max_length=rules.PATH_MAX, checks=(rules.check_relative_path,))), None),
        Field("args", ListOf(Str(max_length=rules.TEXT_MAX, checks=(rules.no_expansion,))), factory=list),
        Field("timeout", Int(1, 600), 30),
        Field("pin", ListOf(Str(min_length=1, max_length=rules.PATH_MAX, checks=(rules.check_relative_path, rules.check_pin)), (rules.unique_pins,)), factory=list),
    ),
    (rules.check_hook,),
)
PLUGIN = Table(
    "Plugin",
    (
        Field("harness", Choice(rules.PLUGIN_HARNESSES)),
        Field("path", Optional(Str(min_length=1, max_length=rules.PATH_MAX, checks=(rules.check_relative_path,))), None),
        Field("git", Optional(Str(max_length=rules.TEXT_MAX), (rules.check_git_url,)), None),
        Field("rev", Optional(Str(max_length=rules.TEXT_MAX), (rules.check_rev,)), None),
        Field("subdir", Optional(Str(min_length=1, max_length=rules.PATH_MAX, checks=(rules.check_relative_path,))), None),
        Field("enable", Optional(ListOf(Choice(rules.PLUGIN_COMPONENTS)), (rules.unique_components,)), None),
    ),
    (rules.check_plugin,),
)
PERMISSIONS = Table(
    "Permissions",
    (
        Field("allow", ListOf(Str(max_length=rules.TEXT_MAX, checks=(rules.no_expansion,))), factory=list),
        Field("deny", ListOf(Str(max_length=rules.TEXT_MAX, checks=(rules.no_expansion,))), factory=list),
        Field("ask", ListOf(Str(max_length=rules.TEXT_MAX, checks=(rules.no_expansion,))), factory=list),
    ),
)
SETTINGS = Table(
    "Settings",
    (
        Field("permissions", PERMISSIONS, factory=lambda: PERMISSIONS.check({})),
        Field("passthrough", DictOf(Choice(rules.HARNESSES), DictOf(Str(), Plain()), (rules.passthrough_plain, rules.passthrough_unexpanded)), factory=dict),
    ),
)
NETWORK = Table(
    "Network",
    (
        Field("block", Bool(), True),
        Field("allow_domains", ListOf(Str(max_length=rules.TEXT_MAX), (rules.check_domains,)), factory=list),
        Field("localhost_ports", ListOf(Int(1, 65535)), factory=list),
    ),
)
SANDBOX = Table(
    "Sandbox",
    (
        Field("enabled", Bool(), True),
        Field("read_dirs", ListOf(Str(max_length=rules.TEXT_MAX)), factory=list),
        Field("write_dirs", ListOf(Str(max_length=rules.TEXT_MAX)), factory=list),
        Field("read_files", ListOf(Str(max_length=rules.TEXT_MAX)), factory=list),
        Field("write_files", ListOf(Str(max_length=rules.TEXT_MAX)), factory=list),
        Field("env", ListOf(Str(pattern=rules.ENV_NAME_PATTERN, checks=(rules.check_sandbox_env,))), factory=list),
        Field("network", NETWORK, factory=lambda: NETWORK.check({})),
        Field("credentials", DictOf(Str(pattern=rules.NAME_PATTERN), CREDENTIAL), factory=dict),
    ),
    (rules.check_sandbox,),
)
MANIFEST = Table(
    "Manifest",
    (
        Field("project", PROJECT_SECTION),
        Field("servers", DictOf(Str(pattern=rules.NAME_PATTERN), SERVER), factory=dict),
        Field("skills", DictOf(Str(pattern=rules.NAME_PATTERN), SKILL), factory=dict),
        Field("instructions", INSTRUCTIONS, factory=lambda: INSTRUCTIONS.check({})),
        Field("hooks", DictOf(Str(pattern=rules.NAME_PATTERN), HOOK), factory=dict),
        Field("plugins", DictOf(Str(pattern=rules.NAME_PATTERN), PLUGIN), factory=dict),
        Field("settings", SETTINGS, factory=lambda: SETTINGS.check({})),
        Field("sandbox", SANDBOX, factory=lambda: SANDBOX.check({})),
    ),
)

# Every model by its class name (agentstack.manifest).
TABLES: dict[str, Table] = {
    "ProjectSection": PROJECT_SECTION,
    "ServerTools": SERVER_TOOLS,
    "ServerNetwork": SERVER_NETWORK,
    "Credential": CREDENTIAL,
    "ServerSandbox": SERVER_SANDBOX,
    "Server": SERVER,
    "Skill": SKILL,
    "Instructions": INSTRUCTIONS,
    "Hook": HOOK,
    "Plugin": PLUGIN,
    "Permissions": PERMISSIONS,
    "Settings": SETTINGS,
    "Network": NETWORK,
    "Sandbox": SANDBOX,
    "Manifest": MANIFEST,
}
# fmt: on
# END generated

def validated(raw: Any) -> dict[str, Any] | None:
    """The models' JSON dump of parsed manifest TOML `raw`, or None when it is not certain that
    the models accept it with exactly that result (validate with them then)."""
    try:
        return MANIFEST.check(raw)  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001 - anything unexpected only means "ask the models"
        return None


def validated_bytes(data: bytes) -> dict[str, Any] | None:
    """`validated` of manifest bytes (None too when they are not UTF-8 TOML)."""
    import tomllib

    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except Exception:  # noqa: BLE001 - the models' path reports it
        return None
    return validated(raw)

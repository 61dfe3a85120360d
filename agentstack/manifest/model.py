"""The project manifest, `agentstack.toml`: what the team declares, validated in one pass.

Every model forbids unknown keys. A manifest that does not validate raises `ManifestInvalid` listing
every bad field by dotted path (`servers.github.args[2]`), each with a hint.
"""

from __future__ import annotations

import tomllib
import types
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

import agentstack.manifest.rules as rules
from agentstack.errors import ManifestInvalid, Problem
from agentstack.manifest.view import LOCK_NAME as LOCK_NAME
from agentstack.manifest.view import MANIFEST_NAME as MANIFEST_NAME
from agentstack.manifest.view import METADATA_HOSTS as METADATA_HOSTS
from agentstack.manifest.view import SECRET_NAME_PATTERN as SECRET_NAME_PATTERN
from agentstack.manifest.view import SECRET_PREFIX as SECRET_PREFIX
from agentstack.manifest.view import is_secret as is_secret
from agentstack.manifest.view import secret_name as secret_name

HARNESSES = rules.HARNESSES
if TYPE_CHECKING:
    HarnessName = str
else:  # one value per harness description (agentstack.harnesses), in their order
    HarnessName = Literal[HARNESSES]
DEFAULT_HARNESSES: tuple[HarnessName, ...] = rules.DEFAULT_HARNESSES
HOOK_EVENTS = rules.HOOK_EVENTS
HookEvent = Literal["PreToolUse", "PostToolUse", "UserPromptSubmit", "SessionStart", "Stop"]

NAME_PATTERN = rules.NAME_PATTERN
ENV_NAME_PATTERN = rules.ENV_NAME_PATTERN
HEADER_NAME_PATTERN = rules.HEADER_NAME_PATTERN

ItemName = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
EnvName = Annotated[str, StringConstraints(pattern=ENV_NAME_PATTERN)]
HeaderName = Annotated[str, StringConstraints(pattern=HEADER_NAME_PATTERN)]
ToolName = Annotated[str, StringConstraints(pattern=rules.TOOL_NAME_PATTERN)]
Text = Annotated[str, StringConstraints(max_length=rules.TEXT_MAX)]


class Model(BaseModel):
    # strict: TOML already has types, so "30" is not an integer and 30.0 is not an integer either.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


_EXPANSION = rules.EXPANSION  # the expansion syntax a harness would expand (manifestrules)

ProjectPath = Annotated[
    str,
    StringConstraints(min_length=1, max_length=rules.PATH_MAX),
    AfterValidator(rules.check_relative_path),
]
PinPath = Annotated[ProjectPath, AfterValidator(rules.check_pin)]


# Values that reach a server: checked one by one, so an error names its index or key.
ValueSource = Annotated[
    str, StringConstraints(max_length=rules.TEXT_MAX), AfterValidator(rules.check_value_source)
]
Argument = Annotated[
    str, StringConstraints(max_length=rules.TEXT_MAX), AfterValidator(rules.no_expansion)
]
RenderedText = Annotated[
    str, StringConstraints(max_length=rules.TEXT_MAX), AfterValidator(rules.no_expansion)
]


class ProjectSection(Model):
    name: ItemName
    harnesses: list[HarnessName] = Field(default_factory=lambda: list(DEFAULT_HARNESSES))

    _unique = field_validator("harnesses")(rules.unique_harnesses)


class ServerTools(Model):
    """The server's tools the model may see and call: `allow` (empty: all), `deny` (wins)."""

    allow: list[ToolName] = Field(default_factory=list)
    deny: list[ToolName] = Field(default_factory=list)

    _allow = field_validator("allow")(rules.unique_tools)
    _deny = field_validator("deny")(rules.unique_tools)


class Credential(Model):
    """A credential the sandboxed process may use without holding it: the proxy on localhost
    injects the real secret into requests to `upstream`; the child sees only a phantom token in
    `env` and the proxy's URL in `base_url_env`."""

    upstream: Text
    secret: Annotated[str, StringConstraints(pattern=SECRET_NAME_PATTERN)]
    header: HeaderName = "Authorization"
    env: EnvName
    base_url_env: EnvName | None = None

    _upstream = field_validator("upstream")(rules.check_upstream)


class ServerNetwork(Model):
    """What a relayed server may reach, only through its own proxy on 127.0.0.1 (never directly):
    `allow_domains` as `[sandbox.network]` (CONNECT to 443, plain HTTP to 80), and
    `localhost_ports`: 127.0.0.1 ports the proxy forwards to (CONNECT or plain HTTP)."""

    allow_domains: list[Text] = Field(default_factory=list)
    localhost_ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=list)

    _domains = field_validator("allow_domains")(rules.check_domains)


class ServerSandbox(Model):
    """`servers.NAME.sandbox` as a table: the server stays confined, with network through its
    proxy as declared, and `credentials` injected by that proxy as `[sandbox.credentials]`."""

    network: ServerNetwork = Field(default_factory=ServerNetwork)
    credentials: dict[ItemName, Credential] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _routes(self) -> ServerSandbox:
        rules.check_server_sandbox(vars(self))
        return self


class Server(Model):
    """An MCP server: stdio (`command`) or remote (`url`), never both."""

    command: Text | None = None
    args: list[Argument] = Field(default_factory=list)
    env: dict[EnvName, ValueSource] = Field(default_factory=dict)
    cwd: ProjectPath | None = None
    url: Text | None = None
    headers: dict[HeaderName, ValueSource] = Field(default_factory=dict)
    # Code roots: the trees the process loads code from, instead of the ones agentstack infers.
    pin: list[PinPath] = Field(default_factory=list)
    tools: ServerTools | None = None
    # false: the relay starts this server unconfined (the review rates it high); a table: confined,
    # with network through its own proxy as declared.
    sandbox: bool | ServerSandbox | None = None

    _pins = field_validator("pin")(rules.unique_pins)
    _command = field_validator("command")(rules.check_command)
    _url = field_validator("url")(rules.check_server_url)

    @model_validator(mode="after")
    def _one_transport(self) -> Server:
        rules.check_server(vars(self))
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"


class Skill(Model):
    """A skill directory: local (`path`) or from git (`git` + `rev` [+ `subdir`])."""

    path: ProjectPath | None = None
    git: Text | None = None
    rev: Text | None = None
    subdir: ProjectPath | None = None

    _rev = field_validator("rev")(rules.check_rev)
    _git_url = field_validator("git")(rules.check_git_url)

    @model_validator(mode="after")
    def _one_source(self) -> Skill:
        rules.check_skill(vars(self))
        return self


PluginHarness = Literal["claude-code", "codex", "gemini-cli"]
PluginComponent = Literal["hooks", "servers", "skills", "agents", "commands", "instructions"]


class Plugin(Model):
    """A harness plugin (a Claude Code plugin, a Codex plugin, a Gemini CLI extension): local
    (`path`) or from git (`git` + `rev` [+ `subdir`]), in the format of `harness`; `enable`
    renders only those kinds of its components (absent: all of them)."""

    harness: PluginHarness
    path: ProjectPath | None = None
    git: Text | None = None
    rev: Text | None = None
    subdir: ProjectPath | None = None
    enable: list[PluginComponent] | None = None

    _rev = field_validator("rev")(rules.check_rev)
    _git_url = field_validator("git")(rules.check_git_url)
    _enable = field_validator("enable")(rules.unique_components)

    @model_validator(mode="after")
    def _one_source(self) -> Plugin:
        rules.check_plugin(vars(self))
        return self


class Instructions(Model):
    """Instruction files, concatenated in the order given."""

    files: list[ProjectPath] = Field(default_factory=list)

    _files = field_validator("files")(rules.unique_files)


class Hook(Model):
    """A harness hook: an event, an optional tool matcher, and a command (argv) or a script file."""

    event: HookEvent
    matcher: RenderedText | None = None
    command: list[RenderedText] | None = None
    script: ProjectPath | None = None
    args: list[RenderedText] = Field(default_factory=list)
    timeout: Annotated[int, Field(ge=1, le=600)] = 30
    pin: list[PinPath] = Field(default_factory=list)

    _pins = field_validator("pin")(rules.unique_pins)
    _matcher = field_validator("matcher")(rules.check_matcher)

    @model_validator(mode="after")
    def _one_action(self) -> Hook:
        rules.check_hook(vars(self))
        return self


class Permissions(Model):
    allow: list[RenderedText] = Field(default_factory=list)
    deny: list[RenderedText] = Field(default_factory=list)
    ask: list[RenderedText] = Field(default_factory=list)


PassthroughValue = Any
PASSTHROUGH_FORBIDDEN = rules.PASSTHROUGH_FORBIDDEN


class Settings(Model):
    """Harness settings. `passthrough.<harness>` tables are copied verbatim into that harness's
    native settings: agentstack does not interpret them, but they are part of the consent digest."""

    permissions: Permissions = Field(default_factory=Permissions)
    passthrough: dict[HarnessName, dict[str, PassthroughValue]] = Field(default_factory=dict)

    _plain_values = field_validator("passthrough")(rules.passthrough_plain)
    _no_expansion_anywhere = field_validator("passthrough")(rules.passthrough_unexpanded)


class Network(Model):
    block: bool = True
    allow_domains: list[Text] = Field(default_factory=list)
    localhost_ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=list)

    _domains = field_validator("allow_domains")(rules.check_domains)


class Sandbox(Model):
    enabled: bool = True
    read_dirs: list[Text] = Field(default_factory=list)
    write_dirs: list[Text] = Field(default_factory=list)
    read_files: list[Text] = Field(default_factory=list)
    write_files: list[Text] = Field(default_factory=list)
    env: list[Annotated[EnvName, AfterValidator(rules.check_sandbox_env)]] = Field(
        default_factory=list
    )
    network: Network = Field(default_factory=Network)
    credentials: dict[ItemName, Credential] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _env_not_owned(self) -> Sandbox:
        rules.check_sandbox(vars(self))
        return self


class Manifest(Model):
    """The whole of `agentstack.toml`."""

    project: ProjectSection
    servers: dict[ItemName, Server] = Field(default_factory=dict)
    skills: dict[ItemName, Skill] = Field(default_factory=dict)
    instructions: Instructions = Field(default_factory=Instructions)
    hooks: dict[ItemName, Hook] = Field(default_factory=dict)
    plugins: dict[ItemName, Plugin] = Field(default_factory=dict)
    settings: Settings = Field(default_factory=Settings)
    sandbox: Sandbox = Field(default_factory=Sandbox)


_HINTS = {
    "extra_forbidden": "remove it, or check its spelling against docs/manifest.md",
    "missing": "add it",
    "string_pattern_mismatch": "names are lowercase ASCII: letters, digits, '.', '_' and '-'",
    "literal_error": "use one of the values listed",
    "string_type": "write it as a quoted string",
    "list_type": 'write it as an array: ["a", "b"]',
    "dict_type": "write it as a table",
    "int_type": "write it as an integer",
    "int_parsing": "write it as an integer",
    "bool_type": "write true or false",
    "bool_parsing": "write true or false",
}


_PATTERN_HINTS = {
    NAME_PATTERN: "names are lowercase ASCII: letters, digits, '.', '_' and '-'",
    ENV_NAME_PATTERN: "environment variable names are letters, digits and '_', not starting with "
    "a digit",
    HEADER_NAME_PATTERN: "header names are ASCII letters, digits and '-'",
}


def dotted(loc: tuple[str | int, ...]) -> str:
    """('servers', 'github', 'args', 2) -> 'servers.github.args[2]'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":
            out += " (the name)"
        else:
            out += ("." if out else "") + str(part)
    return out


def _known_keys(loc: tuple[str | int, ...]) -> list[str]:
    """The keys allowed where `loc` points (its last part is the unknown key)."""
    import typing

    current: Any = Manifest
    for part in loc[:-1]:
        while typing.get_origin(current) in (typing.Union, types.UnionType, typing.Annotated):
            options = [a for a in typing.get_args(current) if a is not type(None)]
            tables = [a for a in options if isinstance(a, type) and issubclass(a, BaseModel)]
            current = (tables or options or [None])[0]
        if typing.get_origin(current) is dict:
            current = typing.get_args(current)[1]  # `part` is an item's name
            continue
        fields = getattr(current, "model_fields", None)
        if not isinstance(fields, dict) or part not in fields:
            return []
        current = fields[part].annotation
    while typing.get_origin(current) in (typing.Union, types.UnionType, typing.Annotated):
        options = [a for a in typing.get_args(current) if a is not type(None)]
        current = options[0] if options else None
    fields = getattr(current, "model_fields", None)
    return sorted(fields) if isinstance(fields, dict) else []


def _did_you_mean(loc: tuple[str | int, ...]) -> str:
    import difflib

    if not loc:
        return ""
    close = difflib.get_close_matches(str(loc[-1]), _known_keys(loc), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else ""


def _union_member(loc: tuple[Any, ...]) -> str | None:
    """Which member of `servers.NAME.sandbox`'s union an error's path is under, if any."""
    if len(loc) < 4 or loc[0] != "servers" or loc[2] != "sandbox":
        return None
    if loc[3] == "bool":
        return "bool"
    return "table" if isinstance(loc[3], str) and "ServerSandbox" in loc[3] else None


def _problems(exc: ValidationError, file: str) -> list[Problem]:
    problems = []
    for error in exc.errors(include_url=False):
        raw_loc = tuple(error["loc"])
        # `servers.NAME.sandbox` (`bool | ServerSandbox`): one error for what was written, not
        # one per member of the union (a table's problems, or "write true or false").
        member = _union_member(raw_loc)
        if member == "bool" and isinstance(error.get("input"), dict):
            continue
        if member == "table" and not isinstance(error.get("input"), dict) and len(
                raw_loc) == 4:
            continue
        if member == "bool":
            raw_loc = raw_loc[:3] + raw_loc[4:]
        # Drop pydantic's internal union/validator tags ("function-after[...]") from the path.
        loc = tuple(
            p for p in raw_loc if not (isinstance(p, str) and "[" in p and p != "[key]")
        )
        message = error["msg"]
        if message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        hint = _HINTS.get(error["type"], "")
        cause = (error.get("ctx") or {}).get("error")
        if isinstance(cause, rules.RuleError):
            hint = cause.hint
            loc = (*loc, *cause.where)
        if error["type"] == "extra_forbidden":
            message = f"unknown key {str(loc[-1])!r}" if loc else message
            hint = _did_you_mean(loc) or hint
        if error["type"] == "string_pattern_mismatch":
            hint = _PATTERN_HINTS.get(str((error.get("ctx") or {}).get("pattern")), hint)
            if loc and loc[-1] == "[key]":
                message = f"{loc[-2]!r} is not a valid name"
        problems.append(Problem(file=file, path=dotted(loc), message=message, hint=hint))
    return problems


def parse_manifest(data: bytes, file: str = MANIFEST_NAME) -> Manifest:
    """Parse and validate manifest bytes; every problem is reported at once."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestInvalid(
            [
                Problem(
                    file=file, path="", message=f"is not UTF-8 ({exc.reason} at byte {exc.start})"
                )
            ]
        ) from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestInvalid(
            [
                Problem(
                    file=file, path="", message=f"is not valid TOML: {exc}", hint="fix the syntax"
                )
            ]
        ) from None
    try:
        return Manifest.model_validate(raw)
    except ValidationError as exc:
        raise ManifestInvalid(_problems(exc, file)) from None

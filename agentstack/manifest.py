"""The project manifest, `agentstack.toml`: what the team declares, validated in one pass.

Every model forbids unknown keys. A manifest that does not validate raises `ManifestInvalid` listing
every bad field by dotted path (`servers.github.args[2]`), each with a hint.
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
import types
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

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

from agentstack.errors import ManifestInvalid, Problem
from agentstack.manifestview import (  # stdlib-only names, re-exported here
    LOCK_NAME as LOCK_NAME,
)
from agentstack.manifestview import (
    MANIFEST_NAME as MANIFEST_NAME,
)
from agentstack.manifestview import (
    METADATA_HOSTS as METADATA_HOSTS,
)
from agentstack.manifestview import (
    SECRET_NAME_PATTERN as SECRET_NAME_PATTERN,
)
from agentstack.manifestview import (
    SECRET_PREFIX as SECRET_PREFIX,
)
from agentstack.manifestview import (
    find_project as find_project,
)
from agentstack.manifestview import (
    is_secret as is_secret,
)
from agentstack.manifestview import (
    secret_name as secret_name,
)

HARNESSES = ("claude-code", "codex", "gemini-cli", "opencode", "copilot", "cursor", "vscode")
HarnessName = Literal[
    "claude-code", "codex", "gemini-cli", "opencode", "copilot", "cursor", "vscode"
]
DEFAULT_HARNESSES: tuple[HarnessName, ...] = ("claude-code", "codex")
HOOK_EVENTS = ("PreToolUse", "PostToolUse", "UserPromptSubmit", "SessionStart", "Stop")
HookEvent = Literal["PreToolUse", "PostToolUse", "UserPromptSubmit", "SessionStart", "Stop"]

NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
HEADER_NAME_PATTERN = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$"
FULL_COMMIT = re.compile(r"^[0-9a-f]{40}$")
ABBREVIATED_COMMIT = re.compile(r"^[0-9a-fA-F]{4,39}$")
# Revision-expression syntax (`v1^0`, `main~2`, `@{u}`, `HEAD:x`) is never a pin of its own.
_REVSPEC_SYNTAX = re.compile(r"[\x00-\x20~^:?*\[\\\x7f]|@\{|\.\.|^-|^@$|/$|\.lock$|^HEAD$")
_SCP_LIKE = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^/\\].*$")

ItemName = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
EnvName = Annotated[str, StringConstraints(pattern=ENV_NAME_PATTERN)]
HeaderName = Annotated[str, StringConstraints(pattern=HEADER_NAME_PATTERN)]
Text = Annotated[str, StringConstraints(max_length=8192)]


class Model(BaseModel):
    # strict: TOML already has types, so "30" is not an integer and 30.0 is not an integer either.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# Expansion syntax of every harness agentstack renders for: `${VAR}`, `${VAR:-x}` (Claude Code,
# Gemini CLI), `$VAR` (Gemini CLI), `{env:VAR}` (OpenCode), `${env:VAR}`, `${input:x}` (VS Code,
# Cursor). A harness expands it from its own environment when it reads the rendered config, so a
# "literal" would carry whatever secret VAR names to a process or a host nobody reviewed.
_EXPANSION = re.compile(r"\$\{|\$[A-Za-z0-9_]|\{env:", re.IGNORECASE)


def _no_expansion(value: str) -> str:
    found = _EXPANSION.search(value)
    if found:
        raise ValueError(
            f"{value!r} contains {found.group(0)!r}, which a harness would expand from its "
            "environment when it reads the rendered config; write secret:NAME for a secret, or "
            "remove the '$' / '{env:' syntax"
        )
    return value


def _check_value_source(value: str) -> str:
    _no_expansion(value)
    if value.startswith(SECRET_PREFIX):
        name = value[len(SECRET_PREFIX) :]
        if not re.match(SECRET_NAME_PATTERN, name):
            raise ValueError(
                f"secret reference {value!r} is malformed; write secret:NAME with NAME made of "
                "letters, digits, '.', '_' or '-'"
            )
    return value


def _check_relative_path(value: str) -> str:
    """A path inside the project: relative, `/`-separated, no `..`, no NUL."""
    if not value or "\0" in value or "\\" in value:
        raise ValueError("must be a non-empty project-relative path using '/'")
    pure = PurePosixPath(value)
    if pure.is_absolute() or ".." in pure.parts:
        raise ValueError("must stay inside the project: no absolute path and no '..'")
    return _no_expansion(value)


def _check_pin(value: str) -> str:
    if PurePosixPath(value) == PurePosixPath("."):
        raise ValueError(
            "the project root cannot be pinned as a code root (it holds the lock and the files "
            "agentstack renders); name the directories and files the code loads"
        )
    return value


ProjectPath = Annotated[
    str, StringConstraints(min_length=1, max_length=1024), AfterValidator(_check_relative_path)
]
PinPath = Annotated[ProjectPath, AfterValidator(_check_pin)]


# Values that reach a server: checked one by one, so an error names its index or key.
ValueSource = Annotated[
    str, StringConstraints(max_length=8192), AfterValidator(_check_value_source)
]
Argument = Annotated[str, StringConstraints(max_length=8192), AfterValidator(_no_expansion)]
RenderedText = Annotated[str, StringConstraints(max_length=8192), AfterValidator(_no_expansion)]


def _unique_pins(value: list[str]) -> list[str]:
    normal = [str(PurePosixPath(v)) for v in value]
    if len(set(normal)) != len(normal):
        raise ValueError("lists a path twice")
    return value


class ProjectSection(Model):
    name: ItemName
    harnesses: list[HarnessName] = Field(default_factory=lambda: list(DEFAULT_HARNESSES))

    @field_validator("harnesses")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("lists a harness twice")
        return value


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

    _pins = field_validator("pin")(_unique_pins)

    @field_validator("command")
    @classmethod
    def _command(cls, value: str | None) -> str | None:
        if value is not None and (not value or "\0" in value):
            raise ValueError("must be a non-empty program name or path")
        return None if value is None else _no_expansion(value)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        if parts.username or parts.password:
            raise ValueError("must not carry credentials; use headers with secret:NAME instead")
        return _no_expansion(value)

    @model_validator(mode="after")
    def _one_transport(self) -> Server:
        if (self.command is None) == (self.url is None):
            raise ValueError("needs exactly one of 'command' (stdio) or 'url' (remote)")
        if self.url is not None and (self.args or self.env or self.cwd or self.pin):
            raise ValueError(
                "a remote server ('url') takes 'headers', not 'args', 'env', 'cwd' or 'pin'"
            )
        if self.command is not None and self.headers:
            raise ValueError("a stdio server ('command') takes 'env', not 'headers'")
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

    @field_validator("rev")
    @classmethod
    def _rev(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if FULL_COMMIT.match(value):
            return value
        if ABBREVIATED_COMMIT.match(value):
            raise ValueError(
                f"{value!r} looks like an abbreviated commit id, which is never a pin; write the "
                "full 40-character commit id, or for a tag or branch with such a name "
                "'refs/tags/NAME' or 'refs/heads/NAME'"
            )
        if not value or _REVSPEC_SYNTAX.search(value):
            raise ValueError(
                f"{value!r} is not a tag, branch or full commit id (revision expressions such as "
                "'v1^0', 'main~1' or 'HEAD' are not pins)"
            )
        return value

    @field_validator("git")
    @classmethod
    def _git_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme in ("https", "ssh", "git+ssh", "file", "http") and (
            parts.netloc or parts.scheme == "file"
        ):
            if parts.scheme == "file" and not parts.path.startswith("/"):
                raise ValueError("a file:// URL needs an absolute path (file:///srv/skills.git)")
            return value
        if _SCP_LIKE.match(value):
            return value  # git@host:org/repo.git
        raise ValueError(
            "must be a git URL (https://, ssh://, git@host:path or file:///absolute/path); "
            "relative paths would depend on where agentstack runs"
        )

    @model_validator(mode="after")
    def _one_source(self) -> Skill:
        if (self.path is None) == (self.git is None):
            raise ValueError("needs exactly one of 'path' (local directory) or 'git' (repository)")
        if self.git is not None and self.rev is None:
            raise ValueError("a git skill needs 'rev' (a tag, branch or full commit id)")
        if self.path is not None and (self.rev is not None or self.subdir is not None):
            raise ValueError("'rev' and 'subdir' only apply to a git skill")
        return self


class Instructions(Model):
    """Instruction files, concatenated in the order given."""

    files: list[ProjectPath] = Field(default_factory=list)

    @field_validator("files")
    @classmethod
    def _files(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("lists a file twice")
        return value


class Hook(Model):
    """A harness hook: an event, an optional tool matcher, and a command (argv) or a script file."""

    event: HookEvent
    matcher: RenderedText | None = None
    command: list[RenderedText] | None = None
    script: ProjectPath | None = None
    args: list[RenderedText] = Field(default_factory=list)
    timeout: Annotated[int, Field(ge=1, le=600)] = 30
    pin: list[PinPath] = Field(default_factory=list)

    _pins = field_validator("pin")(_unique_pins)

    @field_validator("matcher")
    @classmethod
    def _matcher(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"is not a valid regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_action(self) -> Hook:
        if (self.command is None) == (self.script is None):
            raise ValueError("needs exactly one of 'command' (argv list) or 'script' (a file)")
        if self.command is not None and not self.command:
            raise ValueError("'command' must name a program")
        if self.command is not None and self.args:
            raise ValueError("'args' only applies to 'script'; put arguments in 'command'")
        return self


class Permissions(Model):
    allow: list[RenderedText] = Field(default_factory=list)
    deny: list[RenderedText] = Field(default_factory=list)
    ask: list[RenderedText] = Field(default_factory=list)


PassthroughValue = Any


class Settings(Model):
    """Harness settings. `passthrough.<harness>` tables are copied verbatim into that harness's
    native settings: agentstack does not interpret them, but they are part of the consent digest."""

    permissions: Permissions = Field(default_factory=Permissions)
    passthrough: dict[HarnessName, dict[str, PassthroughValue]] = Field(default_factory=dict)

    @field_validator("passthrough")
    @classmethod
    def _plain_values(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for harness, table in value.items():
            _check_plain(table, f"passthrough.{harness}")
            _check_passthrough_keys(table, f"passthrough.{harness}")
        return value

    @field_validator("passthrough")
    @classmethod
    def _no_expansion_anywhere(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for harness, table in value.items():
            _check_no_expansion(table, f"passthrough.{harness}")
        return value


def _check_no_expansion(value: Any, path: str) -> None:
    """Passthrough values are rendered verbatim: no harness may expand anything in them."""
    if isinstance(value, str):
        try:
            _no_expansion(value)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_no_expansion(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_no_expansion(item, f"{path}[{index}]")


# Passthrough never reaches a key agentstack owns or guards, nor one that runs a command, sets the
# environment, grants a permission, names a file, directory or host, or switches a harness feature
# on: a key whose name (at any depth, case ignored) holds one of these is refused. What such keys
# do is declared through the manifest's own fields (servers, hooks, permissions, sandbox), where it
# is reviewed for what it is.
# fmt: off
PASSTHROUGH_FORBIDDEN = (
    "agent", "approval", "auth", "command", "cmd", "credential", "dir", "env", "exec", "feature",
    "file", "helper", "home", "hook", "host", "instruction", "login", "marketplace", "mcp",
    "network", "notify", "otel", "path", "permission", "plan", "plugin", "profile", "project",
    "provider", "proxy", "repl", "sandbox", "script", "secret", "security", "server", "shell",
    "skill", "status", "token", "trust", "url", "experimental", "prompt", "import", "include",
)
# fmt: on


def _check_passthrough_keys(value: Any, path: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            lowered = key.lower()
            hit = next((word for word in PASSTHROUGH_FORBIDDEN if word in lowered), None)
            if hit is not None:
                raise ValueError(
                    f"{path}.{key}: passthrough cannot set a key that runs a command, sets the "
                    "environment, grants a permission, names a file or a host, or that "
                    f"agentstack owns ({hit!r}); declare it through agentstack.toml's own "
                    "fields (servers, hooks, settings.permissions, sandbox)"
                )
            _check_passthrough_keys(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_passthrough_keys(item, f"{path}[{index}]")


def _check_plain(value: Any, path: str) -> None:
    if isinstance(value, bool | int | str):
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not key.isascii():
                raise ValueError(f"{path}: key {key!r} must be ASCII")
            _check_plain(item, f"{path}.{key}")
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            _check_plain(item, f"{path}[{index}]")
        return
    raise ValueError(
        f"{path}: {type(value).__name__} values have no canonical form; write it as a string"
    )


class Network(Model):
    block: bool = True
    allow_domains: list[Text] = Field(default_factory=list)
    localhost_ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=list)

    @field_validator("allow_domains")
    @classmethod
    def _domains(cls, value: list[str]) -> list[str]:
        for item in value:
            host = item[2:] if item.startswith("*.") else item
            if not re.match(r"^[A-Za-z0-9.-]{1,253}$", host) and not _is_ip(host):
                raise ValueError(
                    f"{item!r} is not a host name (use 'example.com' or '*.example.com')"
                )
        return value


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True


class Credential(Model):
    """A credential the sandboxed process may use without holding it: the proxy on localhost
    injects the real secret into requests to `upstream`; the child sees only a phantom token in
    `env` and the proxy's URL in `base_url_env`."""

    upstream: Text
    secret: Annotated[str, StringConstraints(pattern=SECRET_NAME_PATTERN)]
    header: HeaderName = "Authorization"
    env: EnvName
    base_url_env: EnvName | None = None

    @field_validator("upstream")
    @classmethod
    def _upstream(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ValueError("must be a plain base URL: no credentials, query or fragment")
        return value


class Sandbox(Model):
    enabled: bool = True
    read_dirs: list[Text] = Field(default_factory=list)
    write_dirs: list[Text] = Field(default_factory=list)
    read_files: list[Text] = Field(default_factory=list)
    write_files: list[Text] = Field(default_factory=list)
    env: list[EnvName] = Field(default_factory=list)
    network: Network = Field(default_factory=Network)
    credentials: dict[ItemName, Credential] = Field(default_factory=dict)


class Manifest(Model):
    """The whole of `agentstack.toml`."""

    project: ProjectSection
    servers: dict[ItemName, Server] = Field(default_factory=dict)
    skills: dict[ItemName, Skill] = Field(default_factory=dict)
    instructions: Instructions = Field(default_factory=Instructions)
    hooks: dict[ItemName, Hook] = Field(default_factory=dict)
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
            current = options[0] if options else None
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


def _problems(exc: ValidationError, file: str) -> list[Problem]:
    problems = []
    for error in exc.errors(include_url=False):
        # Drop pydantic's internal union/validator tags ("function-after[...]") from the path.
        loc = tuple(
            p for p in error["loc"] if not (isinstance(p, str) and "[" in p and p != "[key]")
        )
        message = error["msg"]
        if message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        hint = _HINTS.get(error["type"], "")
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


def load_manifest(root: Path) -> Manifest:
    from agentstack.manifestview import read_manifest

    return parse_manifest(read_manifest(root), MANIFEST_NAME)

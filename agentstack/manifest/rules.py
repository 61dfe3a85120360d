"""The rules of `agentstack.toml`, standard library only: the one copy both validators use.

The pydantic models (`agentstack.manifest`, the reference, and the source of every error message)
and the fast validator (`agentstack.manifest.fast`, which only ever accepts) call these functions,
so the two cannot drift. A check returns the value it was given or raises `ValueError` with the
message the user sees.

A pattern constraint of the models (`StringConstraints(pattern=...)`) is matched by pydantic's
regex engine, where `$` is the end of the text; `matches` is the same test in Python (`re.match`
would let `$` match before a final newline). The rules below use `fullmatch` for the same reason:
no value ends in a newline a check did not see.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from agentstack import harnesses as _harnesses
from agentstack.manifest.view import SECRET_NAME_PATTERN as SECRET_NAME_PATTERN
from agentstack.manifest.view import SECRET_PREFIX

# From the harness descriptions (agentstack.harnesses), as every other list of harnesses.
HARNESSES = _harnesses.NAMES
DEFAULT_HARNESSES = _harnesses.DEFAULT_NAMES
HOOK_EVENTS = ("PreToolUse", "PostToolUse", "UserPromptSubmit", "SessionStart", "Stop")

NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
HEADER_NAME_PATTERN = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$"
# An MCP tool name as the specification allows it (and every harness can name it in a rule).
TOOL_NAME_PATTERN = r"^[A-Za-z0-9_.-]{1,128}$"
# Compiled on first use (`_regex`): only a git source or a host name needs them, and compiling
# them costs every command that loads the manifest.
FULL_COMMIT = r"[0-9a-f]{40}"
ABBREVIATED_COMMIT = r"[0-9a-fA-F]{4,39}"
# Revision-expression syntax (`v1^0`, `main~2`, `@{u}`, `HEAD:x`) is never a pin of its own.
REVSPEC_SYNTAX = r"[\x00-\x20~^:?*\[\\\x7f]|@\{|\.\.|^-|^@$|/$|\.lock$|^HEAD$"
SCP_LIKE = r"[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^/\\].*"
DOMAIN = r"[A-Za-z0-9.-]{1,253}"

TEXT_MAX = 8192  # Text, Argument, RenderedText, ValueSource
PATH_MAX = 1024  # ProjectPath

# Expansion syntax of every harness agentstack renders for: `${VAR}`, `${VAR:-x}` (Claude Code,
# Gemini CLI), `$VAR` (Gemini CLI), `{env:VAR}` (OpenCode), `${env:VAR}`, `${input:x}` (VS Code,
# Cursor). A harness expands it from its own environment when it reads the rendered config, so a
# "literal" would carry whatever secret VAR names to a process or a host nobody reviewed.
EXPANSION = re.compile(r"\$\{|\$[A-Za-z0-9_]|\{env:", re.IGNORECASE)

_compiled: dict[str, re.Pattern[str]] = {}

# Never passed into the sandbox (`agentstack run`), whatever the manifest says: SSH and GPG agent
# sockets, the session bus, agentstack's own variables and loader variables. `sandbox.env` naming
# one is refused at `lock` (the one list; `agentstack.sandbox.profiles` re-exports it).
FORBIDDEN_SANDBOX_ENV = frozenset({"SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO",
                                   "AGENTSTACK_HOME", "AGENTSTACK_TRUSTED_DIGESTS",
                                   "DBUS_SESSION_BUS_ADDRESS"})
FORBIDDEN_SANDBOX_ENV_PREFIXES = ("LD_", "DYLD_")
SANDBOX_SET_ENV = frozenset({"TMPDIR"})  # `run` sets it itself (a private directory per run)


class RuleError(ValueError):
    """A rule's refusal with a hint: what to do next (shown after the message)."""

    def __init__(self, message: str, hint: str, where: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.hint = hint
        self.where = where  # below the table checked as a whole: ("env", 0) -> sandbox.env[0]


def _regex(pattern: str) -> re.Pattern[str]:
    compiled = _compiled.get(pattern)
    if compiled is None:
        compiled = _compiled[pattern] = re.compile(pattern)
    return compiled


def matches(pattern: str, value: str) -> bool:
    """Whether `value` matches a model's pattern constraint exactly as pydantic decides it."""
    return _regex(pattern).fullmatch(value) is not None


# ------------------------------------------------------------------------------ single values


def no_expansion(value: str) -> str:
    found = EXPANSION.search(value)
    if found:
        raise ValueError(
            f"{value!r} contains {found.group(0)!r}, which a harness would expand from its "
            "environment when it reads the rendered config; write secret:NAME for a secret, or "
            "remove the '$' / '{env:' syntax"
        )
    return value


def check_value_source(value: str) -> str:
    no_expansion(value)
    if value.startswith(SECRET_PREFIX):
        name = value[len(SECRET_PREFIX) :]
        if not matches(SECRET_NAME_PATTERN, name):
            raise ValueError(
                f"secret reference {value!r} is malformed; write secret:NAME with NAME made of "
                "letters, digits, '.', '_' or '-'"
            )
    return value


def check_relative_path(value: str) -> str:
    """A path inside the project: relative, `/`-separated, no `..`, no NUL."""
    if not value or "\0" in value or "\\" in value:
        raise ValueError("must be a non-empty project-relative path using '/'")
    pure = PurePosixPath(value)
    if pure.is_absolute() or ".." in pure.parts:
        raise ValueError("must stay inside the project: no absolute path and no '..'")
    return no_expansion(value)


def check_pin(value: str) -> str:
    if PurePosixPath(value) == PurePosixPath("."):
        raise ValueError(
            "the project root cannot be pinned as a code root (it holds the lock and the files "
            "agentstack renders); name the directories and files the code loads"
        )
    return value


def check_command(value: str | None) -> str | None:
    """A server's `command`."""
    if value is not None and (not value or "\0" in value):
        raise ValueError("must be a non-empty program name or path")
    return None if value is None else no_expansion(value)


def check_server_url(value: str | None) -> str | None:
    if value is None:
        return None
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    if parts.username or parts.password:
        raise ValueError("must not carry credentials; use headers with secret:NAME instead")
    return no_expansion(value)


def check_rev(value: str | None) -> str | None:
    if value is None:
        return None
    if matches(FULL_COMMIT, value):
        return value
    if matches(ABBREVIATED_COMMIT, value):
        raise ValueError(
            f"{value!r} looks like an abbreviated commit id, which is never a pin; write the "
            "full 40-character commit id, or for a tag or branch with such a name "
            "'refs/tags/NAME' or 'refs/heads/NAME'"
        )
    if not value or _regex(REVSPEC_SYNTAX).search(value):
        raise ValueError(
            f"{value!r} is not a tag, branch or full commit id (revision expressions such as "
            "'v1^0', 'main~1' or 'HEAD' are not pins)"
        )
    return value


def check_git_url(value: str | None) -> str | None:
    if value is None:
        return None
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    if parts.scheme in ("https", "ssh", "git+ssh", "file", "http") and (
        parts.netloc or parts.scheme == "file"
    ):
        if parts.scheme == "file" and not parts.path.startswith("/"):
            raise ValueError("a file:// URL needs an absolute path (file:///srv/skills.git)")
        return value
    if matches(SCP_LIKE, value):
        return value  # git@host:org/repo.git
    raise ValueError(
        "must be a git URL (https://, ssh://, git@host:path or file:///absolute/path); "
        "relative paths would depend on where agentstack runs"
    )


def check_matcher(value: str | None) -> str | None:
    if value is not None:
        try:
            re.compile(value)
        except RecursionError:
            # Nested too deep for the compiler; its message depends on the caller's stack depth,
            # so one fixed text (every path that validates says the same).
            raise ValueError("is not a valid regular expression: nested too deeply") from None
        except (re.error, OverflowError) as exc:
            raise ValueError(f"is not a valid regular expression: {exc}") from None
    return value


def check_upstream(value: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError("must be a plain base URL: no credentials, query or fragment")
    return value


def is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------------------- lists


def unique_pins(value: list[str]) -> list[str]:
    normal = [str(PurePosixPath(v)) for v in value]
    if len(set(normal)) != len(normal):
        raise ValueError("lists a path twice")
    return value


def unique_harnesses(value: list[str]) -> list[str]:
    if len(set(value)) != len(value):
        raise ValueError("lists a harness twice")
    return value


def unique_tools(value: list[str]) -> list[str]:
    if len(set(value)) != len(value):
        raise ValueError("names a tool twice")
    return value


def unique_files(value: list[str]) -> list[str]:
    if len(set(value)) != len(value):
        raise ValueError("lists a file twice")
    return value


def check_domains(value: list[str]) -> list[str]:
    for item in value:
        host = item[2:] if item.startswith("*.") else item
        if not matches(DOMAIN, host) and not is_ip(host):
            raise ValueError(f"{item!r} is not a host name (use 'example.com' or '*.example.com')")
    return value


# -------------------------------------------------------------------------------- passthrough

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


def check_plain(value: Any, path: str) -> None:
    if isinstance(value, bool | int | str):
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not key.isascii():
                raise ValueError(f"{path}: key {key!r} must be ASCII")
            check_plain(item, f"{path}.{key}")
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            check_plain(item, f"{path}[{index}]")
        return
    raise ValueError(
        f"{path}: {type(value).__name__} values have no canonical form; write it as a string"
    )


def check_passthrough_keys(value: Any, path: str) -> None:
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
            check_passthrough_keys(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_passthrough_keys(item, f"{path}[{index}]")


def check_no_expansion(value: Any, path: str) -> None:
    """Passthrough values are rendered verbatim: no harness may expand anything in them."""
    if isinstance(value, str):
        try:
            no_expansion(value)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            check_no_expansion(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_no_expansion(item, f"{path}[{index}]")


def passthrough_plain(value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """`settings.passthrough`: plain values (no float, no date) under ASCII keys that are not
    agentstack's own."""
    for harness, table in value.items():
        check_plain(table, f"passthrough.{harness}")
        check_passthrough_keys(table, f"passthrough.{harness}")
    return value


def passthrough_unexpanded(value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    for harness, table in value.items():
        check_no_expansion(table, f"passthrough.{harness}")
    return value


# ------------------------------------------------------------------- whole tables (after fields)
# Each takes the table's validated fields by name (the model's attributes, or the fast
# validator's dict) and raises ValueError when they do not fit together.


def check_sandbox_env(value: str) -> str:
    """One name of `sandbox.env`: never one `run` refuses to pass."""
    if value in FORBIDDEN_SANDBOX_ENV or value.startswith(FORBIDDEN_SANDBOX_ENV_PREFIXES):
        raise RuleError(
            f"{value} never passes into the sandbox",
            "remove it; SSH agent sockets, loader variables and agentstack's own variables "
            "would let the confined process escape or forge trust",
        )
    if value in SANDBOX_SET_ENV:
        raise RuleError(f"{value} is set by agentstack run (a private directory per run)",
                        "remove it from sandbox.env")
    return value


def check_sandbox(f: Mapping[str, Any]) -> None:
    """`[sandbox]` as a whole: `env` names no variable a credential route sets."""
    credentials: Mapping[str, Any] = f["credentials"]
    owned: dict[str, str] = {}
    for name, credential in credentials.items():
        data = credential if isinstance(credential, Mapping) else vars(credential)
        owned[str(data["env"])] = f"sandbox.credentials.{name}.env"
        if data.get("base_url_env"):
            owned[str(data["base_url_env"])] = f"sandbox.credentials.{name}.base_url_env"
    for index, value in enumerate(f["env"]):
        if value in owned:
            raise RuleError(
                f"{value} is set by agentstack run ({owned[value]}: the child gets a phantom "
                "token or the proxy's URL there)",
                f"remove {value} from sandbox.env",
                ("env", index),
            )


def check_server_sandbox(f: Mapping[str, Any]) -> None:
    """`servers.NAME.sandbox` as a table: no two credential routes set the same variable."""
    seen: dict[str, str] = {}
    for name, credential in f["credentials"].items():
        data = credential if isinstance(credential, Mapping) else vars(credential)
        for key in ("env", "base_url_env"):
            value = data.get(key)
            if not value:
                continue
            if value in seen:
                raise RuleError(
                    f"{value} is set by two credentials ({seen[value]} and {name}.{key})",
                    "give each credential its own variable",
                    ("credentials", name, key),
                )
            seen[str(value)] = f"{name}.{key}"


def check_server(f: Mapping[str, Any]) -> None:
    if (f["command"] is None) == (f["url"] is None):
        raise ValueError("needs exactly one of 'command' (stdio) or 'url' (remote)")
    if f["url"] is not None and (f["args"] or f["env"] or f["cwd"] or f["pin"]):
        raise ValueError(
            "a remote server ('url') takes 'headers', not 'args', 'env', 'cwd' or 'pin'"
        )
    if f["command"] is not None and f["headers"]:
        raise ValueError("a stdio server ('command') takes 'env', not 'headers'")


def check_skill(f: Mapping[str, Any]) -> None:
    if (f["path"] is None) == (f["git"] is None):
        raise ValueError("needs exactly one of 'path' (local directory) or 'git' (repository)")
    if f["git"] is not None and f["rev"] is None:
        raise ValueError("a git skill needs 'rev' (a tag, branch or full commit id)")
    if f["path"] is not None and (f["rev"] is not None or f["subdir"] is not None):
        raise ValueError("'rev' and 'subdir' only apply to a git skill")


PLUGIN_HARNESSES = ("claude-code", "codex", "gemini-cli")
PLUGIN_COMPONENTS = ("hooks", "servers", "skills", "agents", "commands", "instructions")


def unique_components(value: list[str] | None) -> list[str] | None:
    if value is not None and len(set(value)) != len(value):
        raise ValueError("lists a component kind twice; list each kind once")
    return value


def check_plugin(f: Mapping[str, Any]) -> None:
    if (f["path"] is None) == (f["git"] is None):
        raise ValueError("needs exactly one of 'path' (a directory in the project) or 'git' "
                         "(a repository)")
    if f["git"] is not None and f["rev"] is None:
        raise ValueError("a git plugin needs 'rev' (a tag, branch or full commit id)")
    if f["path"] is not None and (f["rev"] is not None or f["subdir"] is not None):
        raise ValueError("'rev' and 'subdir' only apply to a git plugin")


def check_hook(f: Mapping[str, Any]) -> None:
    if (f["command"] is None) == (f["script"] is None):
        raise ValueError("needs exactly one of 'command' (argv list) or 'script' (a file)")
    if f["command"] is not None and not f["command"]:
        raise ValueError("'command' must name a program")
    if f["command"] is not None and f["args"]:
        raise ValueError("'args' only applies to 'script'; put arguments in 'command'")

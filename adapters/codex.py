"""Codex: `.codex/config.toml`, `.codex/hooks.json`, `.agents/skills/`, `AGENTS.md`, and the
user-level trust Codex needs before it loads any of them (`~/.codex/config.toml`, or $CODEX_HOME).

Facts (measured with Codex 0.171.0, docs/rendering.md): Codex never expands `${VAR}` in `env`, so a server's env secrets
are read by `agentstack.launch` and header secrets forwarded by name with `env_http_headers`;
project config loads only when the project is trusted; a project hook runs only when its `trusted_hash` is recorded, else it is silently skipped — which
would silently disable the guard, so the hash is rendered for every hook.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from agentstack.harnesses import RENDERS_INTO

from .base import FileOperation, OwnedBlock, OwnedKeys, RenderContext
from .common import (
    codex_plugins,
    guard_groups,
    hook_groups,
    instructions_text,
    native_sandbox_guarded,
    native_sandbox_keys,
    native_tool_keys,
    remote_launched,
    secret_env_var,
    skill_files,
    stdio_server,
)

NAME = "codex"
HOOKS_FILE = ".codex/hooks.json"
_EVENTS_WITHOUT_MATCHER = frozenset({"user_prompt_submit", "stop"})
_EVENT_NAMES = {
    "PreToolUse": "pre_tool_use",
    "PostToolUse": "post_tool_use",
    "UserPromptSubmit": "user_prompt_submit",
    "SessionStart": "session_start",
    "Stop": "stop",
}


def codex_home(context: RenderContext) -> Path:
    explicit = context.env.get("CODEX_HOME")
    return Path(explicit) if explicit else context.user_home / ".codex"


def _server(context: RenderContext, server: dict[str, Any]) -> dict[str, Any]:
    relayed = remote_launched(context, server) if server["transport"] == "http" else None
    if relayed is not None:  # through the relay: the config holds a command, never the URL
        return {"command": relayed[0], "args": relayed[1],
                **native_tool_keys(server, "enabled_tools", "disabled_tools")}
    if server["transport"] == "http":
        out: dict[str, Any] = {"url": server["url"]}
        literal = {k: v["literal"] for k, v in server["headers"].items() if "literal" in v}
        secret = {
            k: secret_env_var(v["secret"]) for k, v in server["headers"].items() if "secret" in v
        }
        if literal:
            out["http_headers"] = dict(sorted(literal.items()))
        if secret:
            out["env_http_headers"] = dict(sorted(secret.items()))
        return out
    # Secrets in env reach the server through `agentstack.launch` (nothing to export).
    command, args, literal = stdio_server(context, server, cwd_key=True)
    out = {"command": command, "args": args, "cwd": str(context.root / server.get("cwd", "."))}
    if literal:
        out["env"] = literal
    out.update(native_tool_keys(server, "enabled_tools", "disabled_tools"))
    return out


def hook_trusted_hash(event: str, group: dict[str, Any]) -> str:
    """The hash Codex records for one trusted hook handler: sha256 over compact, key-sorted,
    raw UTF-8 JSON of {event_name, matcher (only for events that have one), hooks: [{type,
    command, timeout, async, statusMessage (only when set)}]} — the handler alone, as measured
    against Codex 0.171.0 (`codex app-server` hooks/list reports the same currentHash)."""
    hooks = []
    for hook in group["hooks"]:
        entry: dict[str, Any] = {
            "type": hook["type"],
            "command": hook["command"],
            "timeout": hook.get("timeout", 600),
            "async": False,
        }
        if "statusMessage" in hook:
            entry["statusMessage"] = hook["statusMessage"]
        hooks.append(entry)
    event_name = _EVENT_NAMES[event]
    document: dict[str, Any] = {"event_name": event_name, "hooks": hooks}
    # Codex drops the matcher of events that have none (measured with 0.171.0's hooks/list).
    if group.get("matcher") is not None and event_name not in _EVENTS_WITHOUT_MATCHER:
        document["matcher"] = group["matcher"]
    # Raw UTF-8, not ASCII escapes: Codex hashes a project path with "é" as those bytes.
    data = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return "sha256:" + hashlib.sha256(data).hexdigest()


def hook_state_key(hooks_file: Path, event: str, group: int, index: int) -> str:
    return f"{hooks_file}:{_EVENT_NAMES[event]}:{group}:{index}"


class CodexAdapter:
    # The project file this adapter writes instructions into: never an instruction source.
    renders_into = RENDERS_INTO[NAME]  # agentstack.harnesses

    @property
    def name(self) -> str:
        return NAME

    def render(self, context: RenderContext) -> list[FileOperation]:
        servers = context.consent["servers"]
        config: dict[tuple[str, ...], Any] = {
            ("mcp_servers", n): _server(context, s) for n, s in sorted(servers.items())
        }
        for key, value in sorted(context.consent["settings"]["passthrough"].get(NAME, {}).items()):
            config[(key,)] = value
        native = native_sandbox_keys(context, NAME)  # the trusted [sandbox], natively
        config.update(native)
        plugin_files, plugin_keys = codex_plugins(context, codex_home(context))
        config.update(plugin_keys)
        groups = hook_groups(context, NAME)
        ops: list[FileOperation] = [
            OwnedKeys(
                path=".codex/config.toml", format="toml", keys=config,
                guarded=(("mcp_servers",), *(native_sandbox_guarded(NAME) if native else ()),
                         *((("marketplaces",), ("plugins",)) if plugin_keys else ())),
            ),
            *plugin_files,
            OwnedKeys(
                path=HOOKS_FILE, format="json", keys={("hooks",): groups}, guarded=(("hooks",),)
            ),
        ]
        ops.extend(skill_files(context, ".agents/skills"))
        if context.consent["instructions"]:
            ops.append(OwnedBlock(path="AGENTS.md", text=instructions_text(context)))
        # What Codex needs before it loads any of this: the project trusted, every hook's hash.
        user: dict[tuple[str, ...], Any] = {
            ("projects", str(context.root), "trust_level"): "trusted"
        }
        hooks_file = context.root / HOOKS_FILE
        for event, event_groups in groups.items():
            for g, group in enumerate(event_groups):
                for i in range(len(group["hooks"])):
                    key = hook_state_key(hooks_file, event, g, i)
                    single = {**group, "hooks": [group["hooks"][i]]}
                    user[("hooks", "state", key, "trusted_hash")] = hook_trusted_hash(event, single)
        user_config = codex_home(context) / "config.toml"
        ops.append(OwnedKeys(path=str(user_config), format="toml", keys=user, user_level=True))
        # The guard at user level too: `revoke` removes the project's trust, after which Codex
        # silently stops loading the project's hooks — this one keeps a revoked project blocked,
        # on every tool call and every prompt. It names no project: it finds the project that
        # encloses the session, and allows only where there is none.
        user_groups = guard_groups(context, NAME, user_level=True)
        user_guard: dict[tuple[str, ...], Any] = {}
        for event, event_groups in user_groups.items():
            user_guard[("hooks", event)] = event_groups
            user_guard[
                ("hooks", "state", hook_state_key(user_config, event, 0, 0), "trusted_hash")
            ] = hook_trusted_hash(event, event_groups[0])
        ops.append(
            OwnedKeys(
                path=str(user_config),
                format="toml",
                keys=user_guard,
                user_level=True,
                keep_on_revoke=True,
            )
        )
        return ops

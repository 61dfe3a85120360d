"""Cursor: `.cursor/mcp.json` (`mcpServers`), `.cursor/rules/agentstack.mdc`, the guard in
`.cursor/hooks.json` with `failClosed: true`, `.agents/skills/`.

Not verified by a binary (Cursor's CLI is not published on a package registry); from Cursor's
documentation: servers are `{command, args, env}` or `{url, headers}` and `${env:VAR}` is
interpolated; hooks are `{"version": 1, "hooks": {<event>: [{command, matcher, timeout (s),
failClosed}]}}`, and a hook that fails, times out or prints garbage lets the action run unless
`failClosed` is true; rules are Markdown with `description` / `globs` / `alwaysApply` front matter.
"""

from __future__ import annotations

from typing import Any

from .base import FileOperation, OwnedKeys, RenderContext, WholeFile
from .common import (
    GENERATED_NOTE,
    GUARD_TIMEOUT_S,
    guard_command,
    header_values,
    hook_command,
    instructions_text,
    remote_launched,
    servers_file,
    skill_files,
    stdio_server,
)

NAME = "cursor"
RULES_FILE = ".cursor/rules/agentstack.mdc"
# The guard runs before every tool, shell command and MCP call (older Cursor versions have only
# the last two events).
# preToolUse covers every tool (shell and MCP included) in one input shape, which the guard reads;
# the before* events have shapes of their own that no Cursor binary here could confirm.
GUARD_EVENTS = ("preToolUse",)
# Manifest events (Claude Code's names) as Cursor names them.
EVENTS = {
    "PreToolUse": "preToolUse",
    "PostToolUse": "postToolUse",
    "UserPromptSubmit": "beforeSubmitPrompt",
    "SessionStart": "sessionStart",
    "Stop": "stop",
}


def _server(context: RenderContext, server: dict[str, Any]) -> dict[str, Any]:
    relayed = remote_launched(context, server) if server["transport"] == "http" else None
    if relayed is not None:  # through the relay: the config holds a command, never the URL
        return {"command": relayed[0], "args": relayed[1]}
    if server["transport"] == "http":
        out: dict[str, Any] = {"url": server["url"]}
        if server["headers"]:
            out["headers"] = header_values(server, "${{env:{var}}}")
        return out
    command, args, literal = stdio_server(context, server)
    out = {"command": command, "args": args}
    if literal:
        out["env"] = literal
    return out


def _hooks(context: RenderContext) -> dict[str, list[dict[str, Any]]]:
    guard = {
        "command": guard_command(context, NAME),
        "timeout": GUARD_TIMEOUT_S,
        "failClosed": True,
    }
    hooks: dict[str, list[dict[str, Any]]] = {event: [dict(guard)] for event in GUARD_EVENTS}
    for _, hook in sorted(context.consent["hooks"].items()):
        entry: dict[str, Any] = {"command": hook_command(context, hook), "timeout": hook["timeout"]}
        if hook["matcher"] != "*":
            entry["matcher"] = hook["matcher"]
        hooks.setdefault(EVENTS[hook["event"]], []).append(entry)
    return hooks


def rules_text(context: RenderContext) -> str:
    return (
        "---\n"
        "description: Project instructions (from agentstack.toml)\n"
        "alwaysApply: true\n"
        "---\n\n"
        f"<!-- {GENERATED_NOTE} -->\n\n" + instructions_text(context)
    )


class CursorAdapter:
    @property
    def name(self) -> str:
        return NAME

    def render(self, context: RenderContext) -> list[FileOperation]:
        ops: list[FileOperation] = [
            servers_file(context, ".cursor/mcp.json", "mcpServers", _server),
            OwnedKeys(
                path=".cursor/hooks.json",
                format="json",
                keys={("version",): 1, ("hooks",): _hooks(context)},
                guarded=(("hooks",),),
            ),
        ]
        ops.extend(skill_files(context, ".agents/skills"))
        if context.consent["instructions"]:
            ops.append(WholeFile(path=RULES_FILE, content=rules_text(context).encode("utf-8")))
        return ops

"""Factory Droid: `.factory/mcp.json` (`mcpServers`), `.factory/settings.json` (the guard as a
`PreToolUse` hook), `AGENTS.md` and `.factory/skills/`.

Facts (measured with Droid 0.225.2):
* Droid has no trust of its own: a project's `.factory/settings.json` hooks and `.factory/mcp.json`
  servers load as soon as it starts there, from the working directory and every directory above
  it up to the checkout's top (the review says so);
* a `PreToolUse` hook (Claude Code's shape) blocks a call by exit 2, the reason on stderr reaching
  the model; its input is Claude Code's (`tool_name`, `tool_input`, `cwd`);
* `droid mcp list` connects to every server and lists the project's as `[project]`;
* its MCP tools are deferred, named `<server>___<tool>`.
"""

from __future__ import annotations

from typing import Any

from .base import FileOperation, OwnedBlock, OwnedKeys, RenderContext
from .common import (
    GUARD_TIMEOUT_S,
    guard_command,
    header_values,
    hook_command,
    instructions_text,
    remote_launched,
    skill_files,
    stdio_server,
)

NAME = "droid"
MCP = ".factory/mcp.json"
SETTINGS = ".factory/settings.json"
GUARD_NAME = "agentstack-guard"


def _server(context: RenderContext, server: dict[str, Any]) -> dict[str, Any]:
    relayed = remote_launched(context, server) if server["transport"] == "http" else None
    if relayed is not None:  # through the relay: the config holds a command, never the URL
        return {"type": "stdio", "command": relayed[0], "args": relayed[1]}
    if server["transport"] == "http":
        out: dict[str, Any] = {"type": "http", "url": server["url"]}
        if server["headers"]:
            out["headers"] = header_values(server, "${{{var}}}")
        return out
    command, args, literal = stdio_server(context, server)
    out = {"type": "stdio", "command": command, "args": args}
    if literal:
        out["env"] = literal
    return out


def _hooks(context: RenderContext) -> dict[str, list[dict[str, Any]]]:
    guard = {"type": "command", "command": guard_command(context, NAME),
             "timeout": GUARD_TIMEOUT_S}
    groups: dict[str, list[dict[str, Any]]] = {"PreToolUse": [{"matcher": "*", "hooks": [guard]}]}
    for _, hook in sorted(context.consent["hooks"].items()):
        entry = {"type": "command", "command": hook_command(context, hook),
                 "timeout": hook["timeout"]}
        groups.setdefault(hook["event"], []).append({"matcher": hook["matcher"],
                                                     "hooks": [entry]})
    return groups


REVIEW_NOTE = (
    "Factory Droid has no trust of its own: once 'apply --write' renders .factory/, Droid starts "
    "these servers and runs the project's hooks as soon as it runs in this folder or below it, "
    "without asking (the agentstack guard hook then checks every tool call)."
)


class DroidAdapter:
    @property
    def name(self) -> str:
        return NAME

    @property
    def review_note(self) -> str:
        """Shown in the `trust` review (optional, not part of the Adapter protocol)."""
        return REVIEW_NOTE

    def render(self, context: RenderContext) -> list[FileOperation]:
        servers = context.consent["servers"]
        settings: dict[tuple[str, ...], Any] = {("hooks",): _hooks(context)}
        for key, value in sorted(context.consent["settings"]["passthrough"].get(NAME, {}).items()):
            settings[(key,)] = value
        ops: list[FileOperation] = [
            OwnedKeys(
                path=MCP,
                format="json",
                keys={("mcpServers", n): _server(context, s) for n, s in sorted(servers.items())},
                guarded=(("mcpServers",),),
            ),
            OwnedKeys(
                path=SETTINGS,
                format="json",
                keys=settings,
                # Keys that would run other hooks, switch them off or load servers.
                guarded=(("hooks",), ("hooksDisabled",), ("mcpServers",)),
            ),
        ]
        ops.extend(skill_files(context, ".factory/skills"))
        if context.consent["instructions"]:
            ops.append(OwnedBlock(path="AGENTS.md", text=instructions_text(context)))
        return ops

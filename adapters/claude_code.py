"""Claude Code: `.mcp.json`, `.claude/settings.local.json`, `.claude/skills/`, `CLAUDE.md`.

Facts (measured with Claude Code 2.1.332, docs/rendering.md): Claude approves `.mcp.json` servers by name through
`enabledMcpjsonServers`; it expands `${VAR}` in args, env and headers (so header secrets are
rendered as references, never values; a server's env secrets are read by `agentstack.launch`);
hooks that crash, time out or print garbage fail OPEN unless the hook entry says `"onFailure": "block"` — the guard is rendered with it.
"""

from __future__ import annotations

from typing import Any

from agentstack.harnesses import RENDERS_INTO

from .base import FileOperation, OwnedBlock, OwnedKeys, RenderContext, WholeFile
from .common import (
    GENERATED_NOTE,
    claude_plugins,
    header_values,
    hook_groups,
    instructions_text,
    mcp_tool_name,
    native_sandbox_guarded,
    native_sandbox_keys,
    remote_launched,
    server_tools,
    servers_file,
    skill_files,
    stdio_server,
)

NAME = "claude-code"
INSTRUCTIONS_FILE = ".claude/agentstack/instructions.md"


def _server(context: RenderContext, server: dict[str, Any]) -> dict[str, Any]:
    relayed = remote_launched(context, server) if server["transport"] == "http" else None
    if relayed is not None:  # through the relay: the config holds a command, never the URL
        return {"type": "stdio", "command": relayed[0], "args": relayed[1]}
    if server["transport"] == "http":
        out: dict[str, Any] = {"type": "http", "url": server["url"]}
        if server["headers"]:
            out["headers"] = header_values(server, "${{{var}}}")
        return out
    command, args, literal = stdio_server(context, server)  # .mcp.json has no cwd key
    out = {"type": "stdio", "command": command, "args": args}
    if literal:
        out["env"] = literal
    return out


class ClaudeCodeAdapter:
    # The project file this adapter writes instructions into: never an instruction source.
    renders_into = RENDERS_INTO[NAME]  # agentstack.harnesses

    @property
    def name(self) -> str:
        return NAME

    def render(self, context: RenderContext) -> list[FileOperation]:
        servers = context.consent["servers"]
        ops: list[FileOperation] = [
            servers_file(context, ".mcp.json", "mcpServers", _server)
        ]
        settings: dict[tuple[str, ...], Any] = {
            ("enabledMcpjsonServers",): sorted(servers),
            ("hooks",): hook_groups(context, NAME, guard_extra={"onFailure": "block"}),
        }
        permissions = dict(context.consent["settings"]["permissions"])
        # servers.NAME.tools: a denied tool as Claude Code's own deny rule (the relay and the
        # guard refuse it too; an allow list has no native form, the relay filters the rest).
        denied = [mcp_tool_name(n, t) for n, s in sorted(servers.items()) for t in server_tools(s)[1]]
        if denied:
            permissions["deny"] = [*permissions.get("deny", []), *denied]
        if any(permissions.values()):
            settings[("permissions",)] = {k: v for k, v in permissions.items() if v}
        for key, value in sorted(context.consent["settings"]["passthrough"].get(NAME, {}).items()):
            settings[(key,)] = value
        settings.update(native_sandbox_keys(context, NAME))  # the trusted [sandbox], natively
        plugin_files, plugin_keys = claude_plugins(context, NAME)
        settings.update(plugin_keys)
        # With plugins declared, every plugin and marketplace setting is watched whole: one enabled
        # or registered next to agentstack's is not in the lock.
        plugin_guarded = (
            (("enabledPlugins",), ("extraKnownMarketplaces",)) if plugin_keys else ()
        )
        ops.append(
            OwnedKeys(
                path=".claude/settings.local.json",
                format="json",
                keys=settings,
                # Keys that would load other servers or switch the guard off.
                guarded=(
                    ("enableAllProjectMcpServers",),
                    ("disableAllHooks",),
                    ("enabledMcpjsonServers",),
                    ("hooks",),
                    *native_sandbox_guarded(NAME),
                    *plugin_guarded,
                ),
            )
        )
        ops.extend(plugin_files)
        ops.extend(skill_files(context, ".claude/skills"))
        if context.consent["instructions"]:
            text = f"<!-- {GENERATED_NOTE} -->\n\n" + instructions_text(context)
            ops.append(WholeFile(path=INSTRUCTIONS_FILE, content=text.encode("utf-8")))
            ops.append(OwnedBlock(path="CLAUDE.md", text=f"@{INSTRUCTIONS_FILE}\n"))
        # Measured with 2.1.332: without the workspace trust flag, Claude ignores the approvals
        # in settings.local.json and every server stays "Pending approval".
        ops.append(
            OwnedKeys(
                path=str(context.user_home / ".claude.json"),
                format="json",
                keys={("projects", str(context.root), "hasTrustDialogAccepted"): True},
                user_level=True,
            )
        )
        return ops

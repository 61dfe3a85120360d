"""Gemini CLI: `.gemini/settings.json`, `GEMINI.md`, `.agents/skills/`, and the user-level files
Gemini needs (`~/.gemini/trustedFolders.json`, a guard in `~/.gemini/settings.json`).

Facts (measured with Gemini CLI 0.61.0):
* project servers and hooks load only in a trusted folder (`trustedFolders.json`
  `{"/abs": "TRUST_FOLDER"}`); a headless run in an untrusted folder exits 55;
* an MCP server does not inherit secret-looking variables (`*_TOKEN`, `*_KEY`, ...): a secret reaches
  it only through an explicit `env` entry, which Gemini expands (`"X": "${X}"`);
* a BeforeTool hook blocks only when it prints something: the guard prints a JSON deny and the
  reason (a silent exit 2 lets the tool run);
* `--skip-trust` skips the project's hooks (and servers) but runs the user's: the guard is also
  rendered in `~/.gemini/settings.json` (kept on revoke), as for Codex;
* a project `hooksConfig` (`enabled: false`, `disabled: [name]`) switches user hooks off, and
  `tools.discoveryCommand` / `tools.callCommand` run commands: guarded keys, so the guard blocks
  while one is present;
* tools are named `mcp_<server>_<tool>`; the hook input names the server in `mcp_context`.
"""

from __future__ import annotations

from typing import Any

from .base import FileOperation, OwnedBlock, OwnedKeys, RenderContext
from .common import (
    GUARD_TIMEOUT_S,
    gemini_extensions,
    guard_command,
    header_values,
    hook_command,
    instructions_text,
    native_tool_keys,
    skill_files,
    stdio_server,
)

NAME = "gemini-cli"
SETTINGS = ".gemini/settings.json"
GUARD_NAME = "agentstack-guard"
# Manifest events (Claude Code's names) as Gemini CLI names them.
EVENTS = {
    "PreToolUse": "BeforeTool",
    "PostToolUse": "AfterTool",
    "UserPromptSubmit": "BeforeAgent",
    "SessionStart": "SessionStart",
    "Stop": "AfterAgent",
}


def _server(context: RenderContext, server: dict[str, Any]) -> dict[str, Any]:
    if server["transport"] == "http":
        out: dict[str, Any] = {"httpUrl": server["url"]}
        if server["headers"]:
            out["headers"] = header_values(server, "${{{var}}}")
        return out
    # Secrets: through the launcher, which reads them from the secret store (Gemini strips
    # secret-looking variables from what a server inherits, and the config holds no `${KEY}`).
    command, args, literal = stdio_server(context, server, cwd_key=True)
    out = {"command": command, "args": args, "cwd": str(context.root / server.get("cwd", "."))}
    if literal:
        out["env"] = literal
    out.update(native_tool_keys(server, "includeTools", "excludeTools"))
    return out


def guard_group(context: RenderContext, *, user_level: bool = False) -> dict[str, Any]:
    """The guard as a BeforeTool group: the project's, or the user-level one (`--user-level`)."""
    return {
        "matcher": ".*",
        "hooks": [
            {
                "type": "command",
                "name": GUARD_NAME,
                "command": guard_command(context, NAME, user_level=user_level),
                "timeout": GUARD_TIMEOUT_S * 1000,
            }
        ],
    }


def _hooks(context: RenderContext) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {"BeforeTool": [guard_group(context)]}
    for name, hook in sorted(context.consent["hooks"].items()):
        matcher = hook["matcher"]
        entry = {
            "type": "command",
            "name": name,
            "command": hook_command(context, hook),
            "timeout": hook["timeout"] * 1000,
        }
        groups.setdefault(EVENTS[hook["event"]], []).append(
            {"matcher": ".*" if matcher == "*" else matcher, "hooks": [entry]}
        )
    return groups


class GeminiCliAdapter:
    @property
    def name(self) -> str:
        return NAME

    def render(self, context: RenderContext) -> list[FileOperation]:
        servers = context.consent["servers"]
        settings: dict[tuple[str, ...], Any] = {
            ("mcpServers", n): _server(context, s) for n, s in sorted(servers.items())
        }
        settings[("hooks",)] = _hooks(context)
        for key, value in sorted(context.consent["settings"]["passthrough"].get(NAME, {}).items()):
            settings[(key,)] = value
        ops: list[FileOperation] = [
            OwnedKeys(
                path=SETTINGS,
                format="json",
                keys=settings,
                # Keys that would load other servers, run commands (custom tool discovery and
                # calls) or switch the (user-level) guard off.
                guarded=(
                    ("mcpServers",),
                    ("hooks",),
                    ("hooksConfig",),
                    ("mcp",),
                    ("tools", "discoveryCommand"),
                    ("tools", "callCommand"),
                ),
            )
        ]
        ops.extend(skill_files(context, ".agents/skills"))
        if context.consent["instructions"]:
            ops.append(OwnedBlock(path="GEMINI.md", text=instructions_text(context)))
        gemini_home = context.user_home / ".gemini"
        extension_files, enablement = gemini_extensions(context)
        ops.extend(extension_files)
        if enablement:
            ops.append(
                OwnedKeys(
                    path=str(gemini_home / "extensions" / "extension-enablement.json"),
                    format="json",
                    keys=enablement,
                    user_level=True,
                )
            )
        ops.append(
            OwnedKeys(
                path=str(gemini_home / "trustedFolders.json"),
                format="json",
                keys={(str(context.root),): "TRUST_FOLDER"},
                user_level=True,
            )
        )
        # The guard at user level too: `--skip-trust` drops the project's hooks, and after
        # `revoke` Gemini no longer trusts the folder; this one still runs (and allows outside
        # agentstack projects).
        ops.append(
            OwnedKeys(
                path=str(gemini_home / "settings.json"),
                format="json",
                keys={("hooks", "BeforeTool"): [guard_group(context, user_level=True)]},
                user_level=True,
                keep_on_revoke=True,
            )
        )
        return ops

"""Qwen Code: `.qwen/settings.json`, `QWEN.md`, `.qwen/skills/`, and the user-level files Qwen
Code needs (`~/.qwen/trustedFolders.json`, `~/.qwen/mcpApprovals.json`).

Qwen Code is a fork of Gemini CLI: the settings file, the trusted folders and the server entries
are Gemini's under its own names; its hooks are Claude Code's. Facts (measured with 0.24.4):
* project hooks and servers load only in a trusted folder (`trustedFolders.json`
  `{"/abs": "TRUST_FOLDER"}`);
* a project's servers (its `.qwen/settings.json` and its `.mcp.json`) are also gated by an approval
  of each server's configuration: `~/.qwen/mcpApprovals.json` holds, per project root and server,
  the SHA-256 of the server's configuration (keys sorted, without `scope`, `extensionName`,
  `description`) with `"status": "approved"`; an edited configuration is pending again (`qwen mcp
  list` says "Pending approval"). agentstack records the approval of each locked server while
  the project is trusted (in `--yolo` Qwen Code starts them without asking);
* a `PreToolUse` hook (Claude Code's shape) blocks a call by exit 2 with the reason on stderr, or
  by `hookSpecificOutput.permissionDecision: "deny"`; the reason reaches the model;
* it adds `"$version": 4` to a settings file without one, at every start: rendered;
* a project `disableAllHooks` switches every hook off, `tools.discoveryCommand` /
  `tools.callCommand` and `mcp.serverCommand` run commands: guarded keys.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .base import FileOperation, OwnedBlock, OwnedKeys, RenderContext
from .common import (
    GUARD_TIMEOUT_S,
    guard_command,
    header_values,
    hook_command,
    instructions_text,
    native_tool_keys,
    skill_files,
    stdio_server,
)

NAME = "qwen-code"
SETTINGS = ".qwen/settings.json"
GUARD_NAME = "agentstack-guard"
# Qwen Code writes its settings format's version into a settings file that lacks it (at every
# start): rendered, so its own write is no change.
SETTINGS_VERSION = 4
# Fields Qwen Code leaves out of a server's approval hash (provenance and labels only).
_NON_BEHAVIORAL = frozenset({"scope", "extensionName", "description"})


def _server(context: RenderContext, server: dict[str, Any]) -> dict[str, Any]:
    if server["transport"] == "http":
        out: dict[str, Any] = {"httpUrl": server["url"]}
        if server["headers"]:
            out["headers"] = header_values(server, "${{{var}}}")
        return out
    # Secrets: through the launcher, which reads them from the secret store.
    command, args, literal = stdio_server(context, server, cwd_key=True)
    out = {"command": command, "args": args, "cwd": str(context.root / server.get("cwd", "."))}
    if literal:
        out["env"] = literal
    out.update(native_tool_keys(server, "includeTools", "excludeTools"))
    return out


def approval_hash(config: dict[str, Any]) -> str:
    """Qwen Code's hash of a server's configuration: JSON with every object's keys sorted, no
    spaces, without the fields that do not change what runs."""
    behavioral = {k: v for k, v in config.items() if k not in _NON_BEHAVIORAL}
    text = json.dumps(behavioral, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def guard_group(context: RenderContext, *, user_level: bool = False) -> dict[str, Any]:
    """The guard as a PreToolUse group: the project's, or the user-level one."""
    return {
        "matcher": "",
        "hooks": [
            {
                "type": "command",
                "name": GUARD_NAME,
                "command": guard_command(context, NAME, user_level=user_level),
                "timeout": GUARD_TIMEOUT_S,  # seconds (Qwen Code reads large values as ms)
            }
        ],
    }


def _hooks(context: RenderContext) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {"PreToolUse": [guard_group(context)]}
    for name, hook in sorted(context.consent["hooks"].items()):
        matcher = hook["matcher"]
        entry = {
            "type": "command",
            "name": name,
            "command": hook_command(context, hook),
            "timeout": hook["timeout"],
        }
        groups.setdefault(hook["event"], []).append(
            {"matcher": "" if matcher == "*" else matcher, "hooks": [entry]}
        )
    return groups


class QwenCodeAdapter:
    @property
    def name(self) -> str:
        return NAME

    def render(self, context: RenderContext) -> list[FileOperation]:
        servers = {n: _server(context, s) for n, s in sorted(context.consent["servers"].items())}
        settings: dict[tuple[str, ...], Any] = {("mcpServers", n): s for n, s in servers.items()}
        settings[("hooks",)] = _hooks(context)
        settings[("$version",)] = SETTINGS_VERSION
        for key, value in sorted(context.consent["settings"]["passthrough"].get(NAME, {}).items()):
            settings[(key,)] = value
        ops: list[FileOperation] = [
            OwnedKeys(
                path=SETTINGS,
                format="json",
                keys=settings,
                # Keys that would load other servers, run commands or switch the guard off.
                guarded=(
                    ("mcpServers",),
                    ("hooks",),
                    ("disableAllHooks",),
                    ("hooksConfig",),
                    ("mcp",),
                    ("tools", "discoveryCommand"),
                    ("tools", "callCommand"),
                ),
            )
        ]
        ops.extend(skill_files(context, ".qwen/skills"))
        if context.consent["instructions"]:
            ops.append(OwnedBlock(path="QWEN.md", text=instructions_text(context)))
        qwen_home = context.user_home / ".qwen"
        ops.append(
            OwnedKeys(
                path=str(qwen_home / "trustedFolders.json"),
                format="json",
                keys={(str(context.root),): "TRUST_FOLDER"},
                user_level=True,
            )
        )
        if servers:
            ops.append(
                OwnedKeys(
                    path=str(qwen_home / "mcpApprovals.json"),
                    format="json",
                    keys={
                        (str(context.root), n): {"hash": approval_hash(s), "status": "approved"}
                        for n, s in servers.items()
                    },
                    user_level=True,
                )
            )
        # The guard at user level too: after `revoke` Qwen Code no longer trusts the folder and
        # skips the project's settings (hooks and servers); this one still runs (and allows
        # outside agentstack projects).
        ops.append(
            OwnedKeys(
                path=str(qwen_home / "settings.json"),
                format="json",
                keys={("hooks", "PreToolUse"): [guard_group(context, user_level=True)]},
                user_level=True,
                keep_on_revoke=True,
            )
        )
        return ops

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
    GEMINI_GUARDED,
    GUARD_TIMEOUT_S,
    gemini_settings,
    instructions_text,
    named_guard_group,
    named_hook_groups,
    skill_files,
    trusted_folder,
    user_guard,
)

NAME = "qwen-code"
SETTINGS = ".qwen/settings.json"
GUARD_NAME = "agentstack-guard"
# Gemini CLI's guarded keys, and `disableAllHooks` (it switches every hook off).
GUARDED: tuple[tuple[str, ...], ...] = (
    *GEMINI_GUARDED[:2], ("disableAllHooks",), *GEMINI_GUARDED[2:]
)
# Qwen Code writes its settings format's version into a settings file that lacks it (at every
# start): rendered, so its own write is no change.
SETTINGS_VERSION = 4
# Fields Qwen Code leaves out of a server's approval hash (provenance and labels only).
_NON_BEHAVIORAL = frozenset({"scope", "extensionName", "description"})


def approval_hash(config: dict[str, Any]) -> str:
    """Qwen Code's hash of a server's configuration: JSON with every object's keys sorted, no
    spaces, without the fields that do not change what runs."""
    behavioral = {k: v for k, v in config.items() if k not in _NON_BEHAVIORAL}
    text = json.dumps(behavioral, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def guard_group(context: RenderContext, *, user_level: bool = False) -> dict[str, Any]:
    """The guard as a PreToolUse group: the project's, or the user-level one. Its timeout in
    seconds (Qwen Code reads large values as ms)."""
    return named_guard_group(context, NAME, matcher="", timeout=GUARD_TIMEOUT_S,
                             user_level=user_level)


class QwenCodeAdapter:
    @property
    def name(self) -> str:
        return NAME

    def render(self, context: RenderContext) -> list[FileOperation]:
        settings = gemini_settings(
            context,
            NAME,
            path=SETTINGS,
            hooks=named_hook_groups(context, ("PreToolUse", guard_group(context)),
                                    any_matcher=""),
            guarded=GUARDED,
            extra={("$version",): SETTINGS_VERSION},
        )
        ops: list[FileOperation] = [settings]
        ops.extend(skill_files(context, ".qwen/skills"))
        if context.consent["instructions"]:
            ops.append(OwnedBlock(path="QWEN.md", text=instructions_text(context)))
        qwen_home = context.user_home / ".qwen"
        ops.append(trusted_folder(context, qwen_home))
        servers = {k[1]: v for k, v in settings.keys.items() if k[:1] == ("mcpServers",) and len(k) == 2}
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
        ops.append(user_guard(qwen_home, "PreToolUse", guard_group(context, user_level=True)))
        return ops

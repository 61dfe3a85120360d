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
    GEMINI_GUARDED,
    GUARD_TIMEOUT_S,
    gemini_extensions,
    gemini_settings,
    instructions_text,
    named_guard_group,
    named_hook_groups,
    skill_files,
    trusted_folder,
    user_guard,
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


def guard_group(context: RenderContext, *, user_level: bool = False) -> dict[str, Any]:
    """The guard as a BeforeTool group: the project's, or the user-level one (`--user-level`)."""
    return named_guard_group(context, NAME, matcher=".*", timeout=GUARD_TIMEOUT_S * 1000,
                             user_level=user_level)


def _hooks(context: RenderContext) -> dict[str, list[dict[str, Any]]]:
    return named_hook_groups(context, ("BeforeTool", guard_group(context)), any_matcher=".*",
                             events=EVENTS, timeout_unit=1000)


class GeminiCliAdapter:
    @property
    def name(self) -> str:
        return NAME

    def render(self, context: RenderContext) -> list[FileOperation]:
        ops: list[FileOperation] = [
            gemini_settings(
                context,
                NAME,
                path=SETTINGS,
                hooks=_hooks(context),
                guarded=GEMINI_GUARDED,
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
        ops.append(trusted_folder(context, gemini_home))
        # `--skip-trust` drops the project's hooks too: the user-level guard still runs.
        ops.append(user_guard(gemini_home, "BeforeTool", guard_group(context, user_level=True)))
        return ops

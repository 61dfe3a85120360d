"""GitHub Copilot CLI: `.mcp.json` (shared with Claude Code), `AGENTS.md` (shared with Codex and
OpenCode), `.agents/skills/`, the guard in `.github/hooks/agentstack.json`, and the user-level
files Copilot needs (`trustedFolders` in `~/.copilot/config.json`, a guard in `~/.copilot/hooks/`).

Facts (measured with Copilot CLI 1.0.102):
* `.mcp.json` servers and repo hooks load only in a trusted folder (`trustedFolders` in
  `~/.copilot/config.json`, which Copilot rewrites as JSONC: a comment header, kept as is);
* `${VAR}` is expanded in `args` and `env`; a server inherits the environment except
  `GITHUB_TOKEN`, so secrets are forwarded explicitly, as for Claude Code (same entries: the engine
  merges the two harnesses' `.mcp.json` keys into one file and one ledger entry per key);
* a `preToolUse` hook that exits non-zero, crashes or is missing blocks (fail closed); only a
  timeout lets the call run;
* repo hooks do not run in an untrusted folder (after `revoke`), user hooks do: the guard is also
  rendered in `~/.copilot/hooks/` (kept on revoke);
* Copilot also runs Claude Code's `.claude/settings*.json` hooks, with Claude-shaped input and MCP
  tools named `<server>-<tool>`; in a project rendered for both, the Claude guard's matcher is
  `*`, which covers both naming schemes, and the guard checks the call the same way either way;
* `disableAllHooks` in `.github/copilot/settings*.json` switches every hook off, the user's too:
  those files are watched by the guard.
"""

from __future__ import annotations

from typing import Any

from .base import MEMBER, FileOperation, OwnedBlock, OwnedKeys, RenderContext
from .claude_code import _server as mcp_json_server
from .common import (
    GUARD_TIMEOUT_S,
    guard_command,
    hook_command,
    instructions_text,
    servers_file,
    skill_files,
)

NAME = "copilot"
HOOKS_FILE = ".github/hooks/agentstack.json"
# Manifest events (Claude Code's names) as Copilot CLI names them.
EVENTS = {
    "PreToolUse": "preToolUse",
    "PostToolUse": "postToolUse",
    "UserPromptSubmit": "userPromptSubmitted",
    "SessionStart": "sessionStart",
    "Stop": "sessionEnd",
}


def guard_hook(context: RenderContext, *, user_level: bool = False) -> dict[str, Any]:
    """The guard as a Copilot hook: the project's (bound to this project), or the user-level one
    (`--user-level`: it decides for whatever project encloses the session)."""
    command = guard_command(context, NAME, user_level=user_level)
    return {"type": "command", "bash": command, "timeoutSec": GUARD_TIMEOUT_S}


def _hooks(context: RenderContext) -> dict[str, list[dict[str, Any]]]:
    hooks: dict[str, list[dict[str, Any]]] = {"preToolUse": [guard_hook(context)]}
    for _, hook in sorted(context.consent["hooks"].items()):
        # Copilot's hooks have no tool matcher: a manifest hook runs on every tool.
        hooks.setdefault(EVENTS[hook["event"]], []).append(
            {"type": "command", "bash": hook_command(context, hook), "timeoutSec": hook["timeout"]}
        )
    return hooks


def hooks_file_operation(context: RenderContext) -> OwnedKeys:
    """`.github/hooks/agentstack.json`, which VS Code's Copilot sessions also run."""
    return OwnedKeys(
        path=HOOKS_FILE,
        format="json",
        keys={("version",): 1, ("hooks",): _hooks(context)},
        guarded=(("hooks",),),
    )


class CopilotAdapter:
    @property
    def name(self) -> str:
        return NAME

    def render(self, context: RenderContext) -> list[FileOperation]:
        ops: list[FileOperation] = [
            # The same entries as Claude Code's `.mcp.json`: the two merge.
            servers_file(context, ".mcp.json", "mcpServers", mcp_json_server),
            hooks_file_operation(context),
        ]
        ops.extend(skill_files(context, ".agents/skills"))
        if context.consent["instructions"]:
            ops.append(OwnedBlock(path="AGENTS.md", text=instructions_text(context)))
        copilot_home = context.user_home / ".copilot"
        ops.append(
            OwnedKeys(
                path=str(copilot_home / "config.json"),
                format="jsonc",
                keys={("trustedFolders", MEMBER, str(context.root)): True},
                user_level=True,
            )
        )
        # The guard at user level too: after `revoke` Copilot no longer trusts the folder and
        # skips its repo hooks; user hooks still run (and the guard allows outside agentstack
        # projects).
        ops.append(
            OwnedKeys(
                path=str(copilot_home / "hooks" / "agentstack-guard.json"),
                format="json",
                keys={
                    ("version",): 1,
                    ("hooks", "preToolUse"): [guard_hook(context, user_level=True)],
                },
                user_level=True,
                keep_on_revoke=True,
            )
        )
        return ops

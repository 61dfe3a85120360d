"""Crush: the locked servers and the guard hook in the project's `crush.json`, `AGENTS.md` and
`.agents/skills/`.

Not verified by a binary: Crush 0.96.1 (npm `@charmland/crush`) cannot be installed from the
registries this project reaches (the package holds no binary; its install script downloads one
from GitHub releases). What follows is from its documentation and its public source (the config
loader, the hooks runner, the tools), never run here:
* Crush has no trust of its own: `crush.json`, `.crush.json` and the `crushrc` / `.crushrc` Bash
  scripts (run at start) are merged from the working directory up to the checkout's top, and
  their servers, language servers and hooks start without asking;
* `mcp.<name>` is `{"type": "stdio", "command", "args", "env", "timeout"}` or
  `{"type": "http" | "sse", "url", "headers"}` (`$VAR` expanded in headers), with
  `enabled_tools` / `disabled_tools`; its MCP tools are named `mcp_<server>_<tool>`; a stdio
  server starts in Crush's working directory, so every one starts through `env -C <project>`;
* `hooks.PreToolUse` is a list of `{"matcher", "command", "timeout"}`, the command run by its
  embedded shell with Claude Code's input on stdin (`tool_name`, `tool_input`); exit 2 blocks
  (stderr the reason), exit 0 with no `decision` leaves the call to its permission prompt, and
  every other exit, a crash or a timeout lets the call proceed: the rendered command maps every
  failure of the guard to exit 2, and its timeout is the guard's (which answers well inside);
* sub-agents (`agent`, `agentic_fetch`) run without hooks: the guard refuses both.
"""

from __future__ import annotations

from typing import Any

from agentstack.harnesses import RENDERS_INTO

from .base import FileOperation, OwnedBlock, OwnedKeys, RenderContext
from .common import (
    GUARD_TIMEOUT_S,
    guard_command,
    header_values,
    instructions_text,
    launched,
    native_tool_keys,
    skill_files,
)

NAME = "crush"
CONFIG = "crush.json"
# Seconds Crush gives a server to connect (its default is 10: too little for a server behind the
# relay on a busy machine).
SERVER_TIMEOUT_S = 60


def hook_command(context: RenderContext) -> str:
    """The guard, with every way it can fail (not found, a crash, any exit but 0 or 2) made
    Crush's blocking exit 2: Crush lets a call through on any other exit code."""
    return guard_command(context, NAME) + " || exit 2"


def _server(context: RenderContext, server: dict[str, Any]) -> dict[str, Any]:
    tools = native_tool_keys(server, "enabled_tools", "disabled_tools")
    if server["transport"] == "http":
        out: dict[str, Any] = {"type": "http", "url": server["url"], "timeout": SERVER_TIMEOUT_S}
        if server["headers"]:
            out["headers"] = header_values(server, "${{{var}}}")
        return {**out, **tools}
    command, args = launched(context, server, "/usr/bin/env",
                             ["-C", str(context.root / server.get("cwd", ".")),
                              server["command"], *server["args"]])
    literal = {k: v["literal"] for k, v in sorted(server["env"].items()) if "literal" in v}
    out = {"type": "stdio", "command": command, "args": args, "timeout": SERVER_TIMEOUT_S}
    if literal:
        out["env"] = literal
    return {**out, **tools}


REVIEW_NOTE = (
    "Crush has no trust of its own: once 'apply --write' renders crush.json, Crush starts these "
    "servers and runs its PreToolUse hook (the agentstack guard) as soon as it starts in this "
    "checkout, without asking; it also runs the crushrc and .crushrc scripts and merges "
    ".crush.json from its working directory up to the checkout's top at start, before any tool "
    "call the guard could judge (they are pinned: start Crush through 'agentstack run' or its "
    "shim, which refuse drift before it starts). Crush lets a call through when a hook times "
    "out, and runs sub-agents without hooks (the guard refuses 'agent' and 'agentic_fetch'). "
    "Not verified by a binary: Crush could not be installed here."
)


class CrushAdapter:
    # The project file this adapter writes instructions into: never an instruction source.
    renders_into = RENDERS_INTO[NAME]  # agentstack.harnesses

    @property
    def name(self) -> str:
        return NAME

    @property
    def review_note(self) -> str:
        """Shown in the `trust` review (optional, not part of the Adapter protocol)."""
        return REVIEW_NOTE

    def render(self, context: RenderContext) -> list[FileOperation]:
        servers = context.consent["servers"]
        guard = {"name": "agentstack guard", "command": hook_command(context),
                 "timeout": GUARD_TIMEOUT_S}
        keys: dict[tuple[str, ...], Any] = {("hooks", "PreToolUse"): [guard]}
        keys.update({("mcp", n): _server(context, s) for n, s in sorted(servers.items())})
        for key, value in sorted(context.consent["settings"]["passthrough"].get(NAME, {}).items()):
            keys[(key,)] = value
        ops: list[FileOperation] = [
            OwnedKeys(
                path=CONFIG,
                format="json",
                keys=keys,
                # What would load another server, run another hook or skip its permission prompt.
                guarded=(("hooks",), ("mcp",), ("permissions",)),
            )
        ]
        ops.extend(skill_files(context, ".agents/skills"))
        if context.consent["instructions"]:
            ops.append(OwnedBlock(path="AGENTS.md", text=instructions_text(context)))
        return ops

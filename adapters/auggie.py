"""Auggie: the guard as a `PreToolUse` hook and the locked servers in
`.augment/settings.local.json`, `AGENTS.md` and `.agents/skills/`.

Facts (measured with Auggie 0.36.0, npm `@augmentcode/auggie`):
* Auggie has no trust of its own: the `.augment/settings.json` and `.augment/settings.local.json`
  of its workspace root (the checkout's top) load as soon as it starts there (the review says so);
  `auggie mcp list` lists their `mcpServers` offline;
* it runs hooks only when the Augment tenant's `enableHooks` feature flag is on (sent by Augment's
  server with the models): `doctor` says so;
* a `PreToolUse` hook gets Claude Code's input (`hook_event_name`, `tool_name`, `tool_input`) with
  `is_mcp_tool`; it blocks by exit 2 or by printing `hookSpecificOutput.permissionDecision: deny`.
  Any other exit code, a hook it cannot start and a hook that outlives its `timeout`
  (milliseconds) let the tool run: the rendered hook runs the guard under a shorter `timeout` and
  exits 2 unless the guard allowed;
* it starts a stdio server as `/bin/sh -c "<command> <args...>"` (the words joined by spaces,
  unquoted): the rendered `command` is the whole command line, quoted, with no `args`;
* its MCP tools are named `<tool>_<server>`.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from agentstack.harnesses import RENDERS_INTO

from .base import FileOperation, OwnedBlock, OwnedKeys, RenderContext
from .common import (
    GUARD_TIMEOUT_S,
    guard_command,
    header_values,
    hook_command,
    instructions_text,
    skill_files,
    stdio_server,
)

NAME = "auggie"
SETTINGS = ".augment/settings.local.json"
# Auggie's hook timeouts are milliseconds; the guard gets a few seconds less than Auggie gives
# the hook, so a guard that hangs is a deny (exit 2), never Auggie's time-out (which lets the tool
# run).
HOOK_TIMEOUT_MS = (GUARD_TIMEOUT_S + 5) * 1000
# The manifest's hook events (Claude Code's names) as Auggie 0.36.0 names them.
_EVENTS = {"PreToolUse": "PreToolUse", "PostToolUse": "PostToolUse", "Stop": "Stop",
           "SessionStart": "SessionStart", "SessionEnd": "SessionEnd",
           "Notification": "Notification", "UserPromptSubmit": "PromptSubmit"}

# The guard's deny is its JSON on stdout and exit 2; every other failure (it could not start, it
# crashed, it ran out of time) is turned into exit 2 here. Auggie reads stdout's JSON either way.
_HOOK_SCRIPT = """\
out=$(timeout {seconds} {guard}); rc=$?
[ -n "$out" ] && printf '%s\\n' "$out"
[ "$rc" -eq 0 ] && exit 0
[ -n "$out" ] || echo 'agentstack guard: the guard could not be run; denying to stay safe' >&2
exit 2"""


def hook_script(context: RenderContext) -> str:
    return _HOOK_SCRIPT.format(seconds=GUARD_TIMEOUT_S, guard=guard_command(context, NAME))


def _server(context: RenderContext, server: dict[str, Any]) -> dict[str, Any]:
    if server["transport"] == "http":
        out: dict[str, Any] = {"type": "http", "url": server["url"]}
        if server["headers"]:
            out["headers"] = header_values(server, "${{{var}}}")
        return out
    command, args, literal = stdio_server(context, server)
    # Auggie runs a stdio server as `/bin/sh -c "<command> <args joined by spaces>"`: the one
    # command line is quoted here, so a path with a space or a `$` stays one word.
    out = {"command": shlex.join([command, *args]), "args": []}
    if literal:
        out["env"] = literal
    return out


def _hooks(context: RenderContext) -> dict[str, list[dict[str, Any]]]:
    # `args` given: Auggie starts /bin/sh itself (no shell parses the command line).
    guard = {"type": "command", "command": "/bin/sh", "args": ["-c", hook_script(context)],
             "timeout": HOOK_TIMEOUT_MS}
    groups: dict[str, list[dict[str, Any]]] = {"PreToolUse": [{"matcher": ".*",
                                                               "hooks": [guard]}]}
    for _, hook in sorted(context.consent["hooks"].items()):
        # Auggie's events have their own names, its matchers are regular expressions, and one
        # hook it cannot read makes it ignore the file's hooks (the guard's too): a hook of an
        # event it lacks, or with a matcher that is no regular expression, is not rendered.
        event = _EVENTS.get(hook["event"])
        matcher = ".*" if hook["matcher"] in ("", "*") else hook["matcher"]
        try:
            re.compile(matcher)
        except re.error:
            continue
        if event is None:
            continue
        entry = {"type": "command", "command": "/bin/sh",
                 "args": ["-c", hook_command(context, hook)], "timeout": hook["timeout"] * 1000}
        group: dict[str, Any] = {"hooks": [entry]}
        if event in ("PreToolUse", "PostToolUse"):
            group = {"matcher": matcher, **group}
        groups.setdefault(event, []).append(group)
    return groups


REVIEW_NOTE = (
    "Auggie has no trust of its own: once 'apply --write' renders .augment/settings.local.json, "
    "Auggie starts these servers and runs the project's hooks as soon as it runs in this "
    "checkout, without asking. It runs hooks (the agentstack guard among them) only when the "
    "Augment tenant's enableHooks feature flag is on; where it is off, no guard protects it: "
    "start it through 'agentstack run'."
)


class AuggieAdapter:
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
        keys: dict[tuple[str, ...], Any] = {("hooks",): _hooks(context)}
        keys.update({("mcpServers", n): _server(context, s) for n, s in sorted(servers.items())})
        for key, value in sorted(context.consent["settings"]["passthrough"].get(NAME, {}).items()):
            keys.setdefault((key,), value)
        ops: list[FileOperation] = [
            OwnedKeys(
                path=SETTINGS,
                format="json",
                keys=keys,
                # Keys that would run other hooks, switch them off or load servers.
                guarded=(("hooks",), ("mcpServers",), ("featureFlagOverrides",),
                         ("startupScript",), ("shell",)),
            ),
        ]
        ops.extend(skill_files(context, ".agents/skills"))
        if context.consent["instructions"]:
            ops.append(OwnedBlock(path="AGENTS.md", text=instructions_text(context)))
        return ops

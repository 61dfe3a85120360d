"""OpenCode: `opencode.json` (`mcp`), `AGENTS.md`, `.agents/skills/`, and the guard as a plugin in
`.opencode/plugins/`.

Facts (measured with OpenCode 1.18.33):
* OpenCode has no trust of its own: a project's servers and plugins load as soon as it starts in
  the folder. agentstack's consent therefore comes before the files exist, never after;
* local servers are argv arrays (`command: [cmd, ...args]`) with `environment`; `{env:VAR}` is the
  only reference syntax (`${VAR}` stays literal);
* a plugin's `tool.execute.before` blocks a call by throwing (the message is what the model sees);
  a runtime error in it also blocks, but a plugin with a syntax error is skipped without a word:
  the plugin is a rendered file, so the guard fingerprints it, and a test loads it in the real
  binary;
* on every start OpenCode writes `"$schema": "https://opencode.ai/config.json"` into a project
  `opencode.json` that lacks it (a rewrite of a rendered file, which the guard would see as drift):
  the adapter renders that key itself, so the file stays byte for byte what agentstack wrote;
* tools are named `<server>_<tool>` (MCP) and `bash`, `read`, `edit`, `write` ...; the plugin asks
  OpenCode which servers are connected (`client.mcp.status()`) to tell the guard which server a
  tool belongs to.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from .base import FileOperation, OwnedBlock, OwnedKeys, RenderContext, WholeFile
from .common import (
    GENERATED_NOTE,
    GUARD_TIMEOUT_S,
    guard_command,
    header_values,
    instructions_text,
    remote_launched,
    skill_files,
    stdio_server,
)

NAME = "opencode"
CONFIG = "opencode.json"
SCHEMA = "https://opencode.ai/config.json"  # OpenCode adds it on start when it is missing
PLUGIN = ".opencode/plugins/agentstack-guard.js"

# The plugin runs the stdlib guard with Claude-shaped input and throws unless it allows. Every
# failure (no guard, a timeout, a signal, a bad answer) throws too: it never fails open.
_PLUGIN_TEMPLATE = """\
// {note}
// The agentstack guard for {display}: every tool call is checked by the guard first; a call is
// blocked (thrown) unless the guard allows it, and on any error.
import {{ spawnSync }} from "node:child_process";

const GUARD = {guard};
const TIMEOUT_MS = {timeout_ms};

// {display} names an MCP tool `<server>_<tool>`: the server is the longest connected one whose
// name prefixes the tool's. The guard gets the call as `mcp__<server>__<tool>` (Claude Code's
// form), which it ties to exactly one locked server or denies.
async function mcpServer(client, tool) {{
  const status = await client.mcp.status();
  if (!status || typeof status.data !== "object" || status.data === null) {{
    throw new Error("cannot list the MCP servers");
  }}
  let found = null;
  for (const name of Object.keys(status.data)) {{
    const id = name.replace(/[^A-Za-z0-9_-]/g, "_");
    if (tool.startsWith(id + "_") && (found === null || id.length > found.id.length)) {{
      found = {{ name, id }};
    }}
  }}
  return found;
}}

export const AgentstackGuard = async ({{ client, directory }}) => ({{
  "tool.execute.before": async (input, output) => {{
    let reason = "agentstack guard: the guard could not be run; denying to stay safe";
    try {{
      const tool = String(input.tool);
      const server = await mcpServer(client, tool);
      const event = {{
        hook_event_name: "PreToolUse",
        tool_name:
          server === null ? tool : "mcp__" + server.name + "__" + tool.slice(server.id.length + 1),
        tool_input: (output && output.args) || {{}},
        session_id: String(input.sessionID || ""),
        cwd: directory,
      }};
      const run = spawnSync(GUARD[0], GUARD.slice(1), {{
        cwd: directory,
        input: JSON.stringify(event),
        encoding: "utf8",
        timeout: TIMEOUT_MS,
      }});
      if (run.status === 0 && !run.error && !run.signal) return;
      const said = (run.stderr || "").trim() || (run.stdout || "").trim();
      if (said) reason = said;
    }} catch (error) {{
      reason = "agentstack guard: " + String(error) + "; denying to stay safe";
    }}
    throw new Error(reason);
  }},
}});
"""


def plugin_source(context: RenderContext, harness: str = NAME, display: str = "OpenCode") -> str:
    """The guard plugin for `harness` (OpenCode or a fork of it, named `display` in its text):
    the guard's argv, with its state directory and project fixed as arguments."""
    guard = shlex.split(guard_command(context, harness))
    return _PLUGIN_TEMPLATE.format(
        note=GENERATED_NOTE,
        display=display,
        guard=json.dumps(guard, ensure_ascii=False),
        timeout_ms=GUARD_TIMEOUT_S * 1000,
    )


def _server(context: RenderContext, server: dict[str, Any]) -> dict[str, Any]:
    relayed = remote_launched(context, server) if server["transport"] == "http" else None
    if relayed is not None:  # through the relay: the config holds a command, never the URL
        return {"type": "local", "command": [relayed[0], *relayed[1]], "enabled": True}
    if server["transport"] == "http":
        out: dict[str, Any] = {"type": "remote", "url": server["url"], "enabled": True}
        if server["headers"]:
            out["headers"] = header_values(server, "{{env:{var}}}")
        return out
    command, args, literal = stdio_server(context, server)
    out = {"type": "local", "command": [command, *args], "enabled": True}
    if literal:
        out["environment"] = literal
    return out


REVIEW_NOTE = (
    "OpenCode has no trust of its own: once 'apply --write' renders opencode.json, OpenCode "
    "starts these servers and loads .opencode/plugins as soon as it runs in this folder, "
    "without asking (the agentstack guard plugin then checks every tool call)."
)


class OpenCodeAdapter:
    @property
    def name(self) -> str:
        return NAME

    @property
    def review_note(self) -> str:
        """Shown in the `trust` review (optional, not part of the Adapter protocol)."""
        return REVIEW_NOTE

    def render(self, context: RenderContext) -> list[FileOperation]:
        return render_family(context, NAME, "OpenCode", config=CONFIG, schema=SCHEMA,
                             plugin=PLUGIN)


def render_family(
    context: RenderContext, harness: str, display: str, *, config: str, schema: str, plugin: str
) -> list[FileOperation]:
    """What OpenCode and its forks load: `config` (`$schema`, the harness writes it otherwise;
    `mcp.<name>` for every server; the passthrough keys), the guard plugin at `plugin`, skills in
    `.agents/skills/` and `AGENTS.md`."""
    servers = context.consent["servers"]
    keys: dict[tuple[str, ...], Any] = {("$schema",): schema}
    keys.update({("mcp", n): _server(context, s) for n, s in sorted(servers.items())})
    for key, value in sorted(context.consent["settings"]["passthrough"].get(harness, {}).items()):
        keys[(key,)] = value
    ops: list[FileOperation] = [
        OwnedKeys(
            path=config,
            format="json",
            keys=keys,
            # Keys that load code: servers, npm plugins, npm model providers.
            guarded=(("mcp",), ("plugin",), ("plugins",), ("provider",)),
        ),
        WholeFile(path=plugin,
                  content=plugin_source(context, harness, display).encode("utf-8")),
    ]
    ops.extend(skill_files(context, ".agents/skills"))
    if context.consent["instructions"]:
        ops.append(OwnedBlock(path="AGENTS.md", text=instructions_text(context)))
    return ops

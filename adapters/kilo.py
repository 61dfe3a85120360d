"""Kilo: `kilo.json` (`mcp`), `AGENTS.md`, `.agents/skills/`, and the guard as a plugin in
`.kilo/plugins/`. Kilo is a fork of OpenCode: its configuration, its servers and its plugins are
OpenCode's under its own names.

Facts (measured with Kilo 7.7.7):
* Kilo has no trust of its own: a project's servers and plugins load as soon as it starts in the
  folder, and its configuration and agent directories from every directory up to the checkout's top
  (the review says so);
* a plugin's `tool.execute.before` blocks a call by throwing; the plugin API is OpenCode's
  (`client.mcp.status()` lists the servers);
* Kilo adds `"$schema": "https://app.kilo.ai/config.json"` to a `kilo.json` without one (rendered)
  and writes `.kilo/.gitignore`.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from .base import FileOperation, OwnedBlock, OwnedKeys, RenderContext, WholeFile
from .common import GENERATED_NOTE, GUARD_TIMEOUT_S, guard_command, instructions_text, skill_files
from .opencode import _PLUGIN_TEMPLATE
from .opencode import _server as opencode_server

NAME = "kilo"
CONFIG = "kilo.json"
SCHEMA = "https://app.kilo.ai/config.json"  # Kilo adds it on start when it is missing
PLUGIN = ".kilo/plugins/agentstack-guard.js"

REVIEW_NOTE = (
    "Kilo has no trust of its own: once 'apply --write' renders kilo.json, Kilo starts these "
    "servers and loads .kilo/plugins as soon as it runs in this folder, without asking (the "
    "agentstack guard plugin then checks every tool call)."
)


def plugin_source(context: RenderContext) -> str:
    return _PLUGIN_TEMPLATE.format(
        note=GENERATED_NOTE,
        guard=json.dumps(shlex.split(guard_command(context, NAME)), ensure_ascii=False),
        timeout_ms=GUARD_TIMEOUT_S * 1000,
    ).replace("for OpenCode", "for Kilo").replace("OpenCode names", "Kilo names")


class KiloAdapter:
    @property
    def name(self) -> str:
        return NAME

    @property
    def review_note(self) -> str:
        """Shown in the `trust` review (optional, not part of the Adapter protocol)."""
        return REVIEW_NOTE

    def render(self, context: RenderContext) -> list[FileOperation]:
        servers = context.consent["servers"]
        config: dict[tuple[str, ...], Any] = {("$schema",): SCHEMA}
        config.update({("mcp", n): opencode_server(context, s) for n, s in sorted(servers.items())})
        for key, value in sorted(context.consent["settings"]["passthrough"].get(NAME, {}).items()):
            config[(key,)] = value
        ops: list[FileOperation] = [
            OwnedKeys(
                path=CONFIG,
                format="json",
                keys=config,
                guarded=(("mcp",), ("plugin",), ("plugins",), ("provider",)),
            ),
            WholeFile(path=PLUGIN, content=plugin_source(context).encode("utf-8")),
        ]
        ops.extend(skill_files(context, ".agents/skills"))
        if context.consent["instructions"]:
            ops.append(OwnedBlock(path="AGENTS.md", text=instructions_text(context)))
        return ops

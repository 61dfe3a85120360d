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

from .base import FileOperation, RenderContext
from .opencode import plugin_source as opencode_plugin
from .opencode import render_family

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
    return opencode_plugin(context, NAME, "Kilo")


class KiloAdapter:
    @property
    def name(self) -> str:
        return NAME

    @property
    def review_note(self) -> str:
        """Shown in the `trust` review (optional, not part of the Adapter protocol)."""
        return REVIEW_NOTE

    def render(self, context: RenderContext) -> list[FileOperation]:
        return render_family(context, NAME, "Kilo", config=CONFIG, schema=SCHEMA, plugin=PLUGIN)

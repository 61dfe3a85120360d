"""The adapter registry: built-ins first, entry points only for names the built-ins lack."""

from __future__ import annotations

from importlib.metadata import entry_points

from .base import Adapter
from .claude_code import ClaudeCodeAdapter
from .codex import CodexAdapter

ENTRY_POINT_GROUP = "agentstack.adapters"

# Built-in adapters by harness name; the type checker verifies every value implements `Adapter`.
BUILTIN: dict[str, Adapter] = {
    "claude-code": ClaudeCodeAdapter(),
    "codex": CodexAdapter(),
}


class AdapterConflict(Exception):
    """Two third-party plugins claim the same harness name."""


def load_adapters() -> dict[str, Adapter]:
    adapters: dict[str, Adapter] = dict(BUILTIN)
    plugins: dict[str, str] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name in BUILTIN:
            continue  # a plugin never shadows a built-in
        if entry.name in plugins:
            raise AdapterConflict(
                f"adapter {entry.name!r} is provided by both {plugins[entry.name]} and {entry.value}"
            )
        plugins[entry.name] = entry.value
        adapter = entry.load()
        if not isinstance(adapter, Adapter):
            raise AdapterConflict(f"{entry.value} does not implement the Adapter protocol")
        adapters[entry.name] = adapter
    return adapters

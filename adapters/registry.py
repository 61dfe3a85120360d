"""The adapter registry: built-ins first, entry points only for names the built-ins lack."""

from __future__ import annotations

from importlib import import_module

from agentstack.errors import Refused
from agentstack.harnesses import ALL

from .base import Adapter

ENTRY_POINT_GROUP = "agentstack.adapters"


def _builtin() -> dict[str, Adapter]:
    """Built-in adapters by harness name, one per description naming one (its `adapter`,
    "module:Class" in this package); each must implement `Adapter` for its own name."""
    out: dict[str, Adapter] = {}
    for harness in ALL:
        if not harness.adapter:
            continue
        module, _, cls = harness.adapter.partition(":")
        adapter = getattr(import_module(f"{__package__}.{module}"), cls)()
        if not isinstance(adapter, Adapter) or adapter.name != harness.name:
            raise TypeError(f"{harness.adapter} is not the Adapter of {harness.name!r}")
        out[harness.name] = adapter
    return out


BUILTIN: dict[str, Adapter] = _builtin()


def instruction_targets(harnesses: list[str]) -> dict[str, str]:
    """Project files the built-in adapters of `harnesses` write instructions into (path ->
    harness): such a file cannot also be an instruction source (apply would write into it)."""
    from agentstack.harnesses import instruction_targets as targets  # the adapters' renders_into

    return targets(harnesses)


class AdapterConflict(Refused):
    """A third-party adapter cannot be used: two claim one name, or it is not an Adapter."""


def load_adapters(names: list[str] | None = None) -> dict[str, Adapter]:
    """Built-ins, plus the third-party adapters for `names` (all when None). A plugin is imported
    only when a harness it serves is asked for, and never shadows a built-in."""
    adapters: dict[str, Adapter] = dict(BUILTIN)
    if names is not None and all(name in BUILTIN for name in names):
        return adapters  # no plugin could serve them (a plugin never shadows a built-in)
    from importlib.metadata import entry_points  # ~20 ms: only when a plugin may be needed

    plugins: dict[str, str] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name in BUILTIN or (names is not None and entry.name not in names):
            continue
        if entry.name in plugins:
            raise AdapterConflict(
                f"adapter {entry.name!r} is provided by both {plugins[entry.name]} and {entry.value}",
                hint="uninstall one of the two packages",
            )
        plugins[entry.name] = entry.value
        adapter = entry.load()
        if isinstance(adapter, type):
            adapter = adapter()  # an entry point may name the class instead of an instance
        if not isinstance(adapter, Adapter) or getattr(adapter, "name", None) != entry.name:
            raise AdapterConflict(
                f"{entry.value} does not implement the Adapter protocol for {entry.name!r}",
                hint="report it to the adapter's authors",
            )
        adapters[entry.name] = adapter
    return adapters

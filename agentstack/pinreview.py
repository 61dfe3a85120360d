"""What the relay withheld, for review: each server's pending listing against its pin, as lines.

The relay (`agentstack.relay`) keeps a changed or new tool, prompt or resource in
`<server>.pending.json` instead of listing it. `agentstack diff` and `trust` show each change
here as the text the model would read, and `trust` (once accepted) records it into the pin; the
next start of the server lists it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentstack import relay
from agentstack.paths import agentstack_home

_NOUNS = {"tools": "tool", "prompts": "prompt", "resources": "resource",
          "resourceTemplates": "resource template"}


@dataclass(frozen=True)
class PinChange:
    server: str
    kind: str
    key: str
    old: Any  # None: not pinned before
    new: Any

    @property
    def label(self) -> str:
        noun = _NOUNS.get(self.kind, self.kind)
        verb = "new" if self.old is None else "changed"
        return f"server {self.server}: {verb} {noun} {self.key}"

    def to_json(self) -> dict[str, Any]:
        return {"server": self.server, "kind": self.kind, "key": self.key, "old": self.old,
                "new": self.new}


def pending_changes(root: Path, servers: list[str]) -> list[PinChange]:
    """Every withheld entry of the given servers that still differs from its pin."""
    home = str(agentstack_home())
    changes: list[PinChange] = []
    for server in sorted(servers):
        try:
            pending = relay.load_pins(home, str(root), server, pending=True)
            pins = relay.load_pins(home, str(root), server)
        except (OSError, ValueError):
            continue
        if pending is None:
            continue
        for kind, entries in sorted(pending.lists.items()):
            pinned = pins.lists.get(kind, {}) if pins is not None else {}
            for key, entry in sorted(entries.items()):
                old = pinned.get(key)
                if old is None or relay.canonical(old) != relay.canonical(entry):
                    changes.append(PinChange(server, kind, key, old, entry))
    return changes


def _text_lines(value: Any) -> list[str]:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


def change_lines(change: PinChange) -> list[str]:
    """The change as lines: `- ` what was pinned, `+ ` what the server lists now, per field."""
    lines = [change.label]
    old = change.old if isinstance(change.old, dict) else {}
    new = change.new if isinstance(change.new, dict) else {}
    for field in sorted(set(old) | set(new)):
        if field in old and field in new and relay.canonical(old[field]) == relay.canonical(new[field]):
            continue
        if field in old:
            lines += [f"  - {field}: {line}" for line in _text_lines(old[field])]
        if field in new:
            lines += [f"  + {field}: {line}" for line in _text_lines(new[field])]
    return lines


def record(root: Path, changes: list[PinChange], digest: str) -> None:
    """Accepted: each change into its server's pin; the pending files removed."""
    home = str(agentstack_home())
    by_server: dict[str, list[PinChange]] = {}
    for change in changes:
        by_server.setdefault(change.server, []).append(change)
    for server, items in by_server.items():
        pins = relay.load_pins(home, str(root), server) or relay.Pins(digest=digest)
        for change in items:
            pins.lists.setdefault(change.kind, {})[change.key] = change.new
        pins.digest = digest
        relay.save_pins(home, str(root), server, pins)
        relay.drop_pending(home, str(root), server)

"""What `apply --write` will change outside the project, for the trust review to show: apply's
own plan of the user-level files (rendered, never written), compared with what they hold now."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def user_level_changes(root: Path, document: dict[str, Any], digest: str) -> list[str]:
    """What `apply --write` will change outside the project (shown in the trust review)."""
    from agentstack_adapters import MEMBER, OwnedKeys

    from agentstack.apply.engine import render_operations
    from agentstack.consent.render import toml_value

    lines = []
    marketplaces: dict[str, int] = {}
    # Only paths and owned keys are used here: no byte of a skill's tree is read.
    for op in render_operations(root.resolve(), document, digest, skill_bytes=False):
        if not isinstance(op, OwnedKeys) and getattr(op, "user_level", False):
            # A plugin's materialized marketplace: one line per directory.
            from agentstack.apply.engine import plugin_cache_dir

            cache = str(plugin_cache_dir()) + "/"
            rest = op.path[len(cache):] if op.path.startswith(cache) else None
            top = cache + rest.split("/", 1)[0] + "/" if rest else op.path
            marketplaces[top] = marketplaces.get(top, 0) + 1
        if isinstance(op, OwnedKeys) and op.user_level:
            in_place = _in_place(op)
            for key, value in op.keys.items():
                if in_place(key, value):
                    continue  # already there, as apply would write it: nothing changes
                if len(key) >= 2 and key[-2] == MEMBER:  # one item added to a list
                    lines.append(f"{op.path}: {'.'.join(key[:-2])} += {key[-1]}")
                else:
                    lines.append(f"{op.path}: {'.'.join(key)} = {toml_value(value)}")
    for top, count in sorted(marketplaces.items()):
        if top.endswith("/"):
            lines.append(f"{top}: a plugin, {count} files written read-only")
        else:
            lines.append(f"{top}: the link to a plugin")
    return lines


def _in_place(op: Any) -> Any:
    """A test of (key, value): does the user-level file hold that value at that key already?"""
    from agentstack.apply.engine import Planner, _get, _plain
    from agentstack.canonical import canonical_bytes

    try:
        with open(op.path, "rb") as handle:
            data = handle.read()
        doc = Planner._parse_static(Path(op.path), data, op.format)
    except Exception:  # noqa: BLE001 - unreadable or unparsable: every entry is shown
        return lambda key, value: False

    def same(key: tuple[str, ...], value: Any) -> bool:
        try:
            current = _get(doc, key)
            if current is None:
                return False
            return canonical_bytes(_unwrap(_plain(current))) == canonical_bytes(_unwrap(value))
        except Exception:  # noqa: BLE001 - not comparable: shown
            return False

    return same


def _unwrap(value: Any) -> Any:
    unwrap = getattr(value, "unwrap", None)
    return unwrap() if callable(unwrap) else value

"""The user-level keys `apply` renders for a project, rendered for a confined run's private state
(`sandbox.private_state`) instead of the real home: `run` passes them to `private_state.seed`."""

from __future__ import annotations

import os
from typing import Any

from agentstack.sandbox.private_state import HARNESSES, Layout


def rendered_user_keys(
    root: Any, consent: dict[str, Any], digest: str, layout: Layout
) -> dict[str, dict[tuple[str, ...], Any]]:
    """The user-level keys `apply` renders for this project (Claude's project trust, the Codex
    guard hook and its trusted hash), rendered for the private state instead of the real home."""
    from dataclasses import replace
    from pathlib import Path

    from agentstack_adapters.base import OwnedKeys
    from agentstack_adapters.registry import load_adapters

    from agentstack.apply.engine import _context

    targets = [h for h in consent["project"]["harnesses"] if h in HARNESSES]
    adapters = load_adapters(targets)
    fake_home = Path(layout.root) / "home"
    context = replace(
        _context(Path(root), consent, digest),
        user_home=fake_home,
        env={"CODEX_HOME": layout.codex},
        # user-level keys never depend on file contents: read nothing (no cache, no fetch)
        read_skill_file=lambda _name, _entry: b"",
        read_project_file=lambda _path: b"",
    )
    out: dict[str, dict[tuple[str, ...], Any]] = {"claude.json": {}, "codex.toml": {}}
    for harness in targets:
        adapter = adapters.get(harness)
        if adapter is None:
            continue
        for op in adapter.render(context):
            if not isinstance(op, OwnedKeys) or not op.user_level:
                continue
            if op.path == str(fake_home / ".claude.json"):
                out["claude.json"].update(op.keys)
            elif op.path == os.path.join(layout.codex, "config.toml"):
                out["codex.toml"].update(op.keys)
    return out

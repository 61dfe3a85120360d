"""Where agentstack keeps user-level state. Standard library only."""

from __future__ import annotations

import os
from pathlib import Path

from agentstack import _guard


def agentstack_home() -> Path:
    """$AGENTSTACK_HOME, else $XDG_CONFIG_HOME/agentstack, else ~/.config/agentstack (the guard's
    own rule: the two must never disagree on where trust lives)."""
    return Path(_guard.home())


def agentstack_cache() -> Path:
    """$AGENTSTACK_CACHE, else $XDG_CACHE_HOME/agentstack, else ~/.cache/agentstack."""
    explicit = os.environ.get("AGENTSTACK_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agentstack"


def ensure_private_dir(path: Path) -> Path:
    """Create `path` (0700) if missing; user-level state is never group/world readable. Every
    directory it has to create on the way (AGENTSTACK_HOME itself, say) is made 0700 too."""
    missing = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        directory.mkdir(mode=0o700, exist_ok=True)
    return path


def project_id(root: Path) -> str:
    """A stable directory name for a project's user-level state, from its realpath (the guard
    computes the same name to find the snapshot)."""
    return _guard.project_id(str(root))


def project_state_dir(root: Path) -> Path:
    return agentstack_home() / "projects" / project_id(root)

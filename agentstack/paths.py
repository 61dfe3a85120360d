"""Where agentstack keeps user-level state, as `pathlib.Path`s: a thin view of `agentstack.layout`
(which names every path once, for the guard too). Standard library only."""

from __future__ import annotations

from pathlib import Path

from agentstack import layout


def agentstack_home() -> Path:
    """$AGENTSTACK_HOME, else $XDG_CONFIG_HOME/agentstack, else ~/.config/agentstack (the guard's
    own rule: the two must never disagree on where trust lives)."""
    return Path(layout.home())


def agentstack_cache() -> Path:
    """$AGENTSTACK_CACHE, else $XDG_CACHE_HOME/agentstack, else ~/.cache/agentstack."""
    return Path(layout.cache())


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
    return layout.project_id(str(root))


def project_state_dir(root: Path) -> Path:
    return Path(layout.project_dir(layout.home(), str(root)))


def guard_snapshot_path(root: Path) -> Path:
    """The guard's snapshot for the project at `root`, in the default state directory."""
    return Path(layout.guard_snapshot(layout.home(), str(root)))


def apply_ledger_path(root: Path) -> Path:
    """The apply ledger for the project at `root`, in the default state directory."""
    return Path(layout.apply_ledger(layout.home(), str(root)))


def find_project(start: Path | None = None, explicit: Path | None = None) -> Path:
    """The project a command is about: `explicit` (`--project DIR`) exactly, else the nearest
    agentstack.toml at or above `start` (the working directory by default); see
    `layout.find_project` for the rule. Raises InvalidInput (exit 2) saying what to do."""
    import os

    from agentstack.errors import InvalidInput

    if explicit is not None:
        found = layout.find_project("", str(explicit))
        if found is None:
            raise InvalidInput(
                f"--project {explicit}: no {layout.MANIFEST} there",
                hint="run 'agentstack init' there, or point --project at the "
                "directory holding agentstack.toml",
            )
        return Path(found)
    here = os.getcwd() if start is None else str(start)
    found = layout.find_project(here)
    if found is None:
        raise InvalidInput(
            f"no {layout.MANIFEST} in {os.path.realpath(here)} or any parent directory",
            hint="run 'agentstack init' to create one, or pass --project DIR",
        )
    return Path(found)


def is_user_root(root: Path) -> bool:
    """Whether `root` is the user-level setup's root, `$AGENTSTACK_HOME` (its agentstack.toml)."""
    import os

    try:
        return os.path.realpath(root) == os.path.realpath(layout.home())
    except OSError:
        return False

"""The one Protocol every harness adapter implements, and the operations it may ask for.

An adapter is pure: it reads the trusted consent document (through `RenderContext`) and returns
file operations. The engine (`agentstack.apply`) plans, diffs, merges and writes them, keeps the
ledger, and detects hand edits. An adapter never touches the disk.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

KeyPath = tuple[str, ...]
# A key path `(*list_path, MEMBER, item)` owns one string item of the JSON list at `list_path`
# (e.g. one folder in a harness's list of trusted folders): the other items are the user's.
MEMBER = "\0member"


@dataclass(frozen=True, kw_only=True)
class RenderContext:
    """What an adapter may read."""

    root: Path  # the project root (realpath)
    consent: dict[str, Any]  # the trusted consent document
    digest: str
    guard_command: list[str]  # argv of the guard hook, without --harness
    user_home: Path  # the user's home (for user-level harness trust files)
    env: dict[str, str]  # environment variables the adapter may consult (CODEX_HOME …)
    read_skill_file: Callable[[str, dict[str, Any]], bytes]  # (skill name, file entry) -> bytes
    read_project_file: Callable[[str], bytes]  # a pinned project file (instructions)
    # The state directory the rendered guard reads (fixed in its command, never taken from the
    # environment the harness gives it). None: the guard command names none (tests of adapters).
    state_home: Path | None = None
    # (plugin name, file entry) -> bytes, verified against the lock; and where the plugins'
    # materialized marketplaces live ($AGENTSTACK_CACHE/plugins). None: no plugins to render.
    read_plugin_file: Callable[[str, dict[str, Any]], bytes] | None = None
    plugin_cache: Path | None = None


@dataclass(frozen=True, kw_only=True)
class WholeFile:
    """A file agentstack owns outright (`link_target` set: a symbolic link)."""

    path: str
    content: bytes = b""
    executable: bool = False
    link_target: str | None = None
    # Outside the project (an absolute path): a plugin's materialized marketplace, written
    # read-only under agentstack's cache.
    user_level: bool = False
    read_only: bool = False  # written without write permission (0444, 0555 when executable)
    # The directory (relative to the project) of the rendered tree the file belongs to, which
    # agentstack owns whole (a skill's directory): `.git/info/exclude` lists such a tree by one
    # pattern while every file in it is agentstack's.
    tree: str | None = None


@dataclass(frozen=True, kw_only=True)
class OwnedKeys:
    """Keys agentstack owns inside a JSON or TOML file the user may share: every other key, and
    in TOML every comment, is the user's and is preserved."""

    path: str
    # "jsonc": JSON with a leading comment block (kept as is); user-level files only.
    format: Literal["json", "jsonc", "toml"]
    keys: dict[KeyPath, Any]
    user_level: bool = False  # outside the project (e.g. ~/.codex/config.toml)
    # Containers the guard fingerprints whole, even the parts agentstack does not own: a server
    # or hook added next to agentstack's (by hand or by an injection) is not in the lock.
    guarded: tuple[KeyPath, ...] = ()
    # Not removed by `revoke` (e.g. a user-level guard hook: it is what keeps a revoked project
    # blocked once the harness stops loading the project's own hooks).
    keep_on_revoke: bool = False


@dataclass(frozen=True, kw_only=True)
class OwnedBlock:
    """A marked block inside a text file the user owns (e.g. CLAUDE.md)."""

    path: str
    text: str
    user_level: bool = False  # outside the project (the user-level setup's ~/.claude/CLAUDE.md)


FileOperation = WholeFile | OwnedKeys | OwnedBlock


@runtime_checkable
class Adapter(Protocol):
    """A harness adapter: a harness name (agentstack.harnesses) and a pure render function."""

    @property
    def name(self) -> str: ...

    def render(self, context: RenderContext) -> list[FileOperation]: ...

"""The one Protocol every harness adapter implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable


@dataclass(frozen=True, kw_only=True)
class RenderContext:
    """What an adapter may read: the project root, the trusted consent document and its digest."""

    root: Path
    consent: dict[str, Any]
    digest: str
    guard_command: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class FileOperation:
    """One thing an adapter wants on disk.

    `whole`: agentstack owns the file and writes `content`. `keys`: agentstack owns only the listed
    top-level `keys` inside a shared JSON or TOML file (`format`), and everything else in that file
    is the user's and is preserved.
    """

    path: str
    mode: Literal["whole", "keys"]
    content: bytes = b""
    keys: dict[str, Any] = field(default_factory=dict)
    format: Literal["json", "toml", "text"] = "text"
    executable: bool = False


@runtime_checkable
class Adapter(Protocol):
    """A harness adapter: a name from CONTRACT.md and a pure render function."""

    @property
    def name(self) -> str: ...

    def render(self, context: RenderContext) -> list[FileOperation]: ...

"""Pydantic models of `agentstack.lock`: validation on read, and the JSON Schema in schemas/."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from agentstack.errors import ManifestInvalid

Digest = Annotated[str, StringConstraints(pattern=r"^b3:[0-9a-f]{64}$")]
CommitId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}$")]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LockedFile(_Model):
    path: str
    kind: Literal["file", "link"]
    executable: bool
    size: Annotated[int, Field(ge=0)]
    digest: Digest


class LockedRoot(_Model):
    """A code root: a project tree the command loads code from, pinned like a skill. A tree that
    several commands load has no `files` here: they are in the lock's `code_roots` table, under
    the same path and digest."""

    path: str
    origin: str
    digest: Digest
    excluded: list[str] = Field(default_factory=list)
    files: list[LockedFile] | None = None


class LockedCodeRoot(_Model):
    """A code root several commands load, pinned once (`[code_roots.PATH]`)."""

    path: str
    digest: Digest
    excluded: list[str] = Field(default_factory=list)
    files: list[LockedFile]


class LockedCommand(_Model):
    """A server or hook: the project files it runs or names, its code roots, its risk facts."""

    files: list[LockedFile] = Field(default_factory=list)
    risks: list[str] = Field(default_factory=list)
    roots: list[LockedRoot] = Field(default_factory=list)


class LockedSkill(_Model):
    source: Literal["path", "git"]
    path: str | None = None
    git: str | None = None
    rev: str | None = None
    subdir: str | None = None
    commit: CommitId | None = None
    git_tree: CommitId | None = None
    digest: Digest
    files: list[LockedFile]


class LockedPlugin(_Model):
    """A plugin: its tree pinned like a skill's, and what it contributes (agentstack.plugins)."""

    harness: Literal["claude-code", "codex", "gemini-cli"]
    source: Literal["path", "git"]
    path: str | None = None
    git: str | None = None
    rev: str | None = None
    subdir: str | None = None
    commit: CommitId | None = None
    git_tree: CommitId | None = None
    digest: Digest
    files: list[LockedFile]
    components: dict[str, Any]


class LockedSurface(_Model):
    """A file a harness loads from the project that agentstack did not render (agentstack.surface)."""

    path: str
    harnesses: list[str]
    role: str
    kind: Literal["file", "link", "keys", "text"]
    digest: Digest
    executable: bool | None = None
    keys: list[str] | None = None
    facts: list[str] = Field(default_factory=list)


class LockModel(_Model):
    version: Literal[1]
    manifest: Digest
    instructions: list[LockedFile] = Field(default_factory=list)
    servers: dict[str, LockedCommand] = Field(default_factory=dict)
    skills: dict[str, LockedSkill] = Field(default_factory=dict)
    hooks: dict[str, LockedCommand] = Field(default_factory=dict)
    plugins: dict[str, LockedPlugin] = Field(default_factory=dict)
    surface: dict[str, LockedSurface] = Field(default_factory=dict)
    code_roots: dict[str, LockedCodeRoot] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _shared_roots(self) -> LockModel:
        """Each root without files names a `code_roots` entry with its digest and excluded
        list; each entry is under its own path and is loaded by some command."""
        used: set[str] = set()
        for section in (self.servers, self.hooks):
            for command in section.values():
                for root in command.roots:
                    if root.files is not None:
                        continue
                    shared = self.code_roots.get(root.path)
                    if shared is None or (shared.digest, shared.excluded) != (
                        root.digest,
                        root.excluded,
                    ):
                        raise ValueError(
                            f"code root {root.path!r} has no files and no matching code_roots entry"
                        )
                    used.add(root.path)
        for key, shared in self.code_roots.items():
            if key != shared.path or key not in used:
                raise ValueError(f"code_roots entry {key!r} is not a shared code root")
        return self

    @classmethod
    def validate_lock(cls, raw: dict[str, Any]) -> None:
        from agentstack.errors import Problem
        from agentstack.manifest.model import LOCK_NAME, dotted

        try:
            cls.model_validate(raw)
        except ValidationError as exc:
            problems = [
                Problem(
                    file=LOCK_NAME,
                    path=dotted(tuple(e["loc"])),
                    message=e["msg"],
                    hint="delete the lock and run 'agentstack lock'",
                )
                for e in exc.errors(include_url=False)
            ]
            raise ManifestInvalid(problems) from None

"""The one project builder of the suite: a manifest as data (`Manifest`), written as the TOML a
user would write (one `[table]` per item, a blank line between tables), and `make_project`, which
lays out a project directory from it. The common shapes are named below (`NOTES`, `NOTES_FILES`)
so a test states only what its project has of its own."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.cli import REPO, TRUST, TRUST_AND_APPLY, steps

EXAMPLES = REPO / "examples"
_BARE = re.compile(r"^[A-Za-z0-9_-]+$")

Value = str | int | bool | Sequence["Value"] | Mapping[str, "Value"]


def toml_value(value: Value) -> str:
    """`value` as TOML: strings as basic strings, lists on one line, tables inline."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    return "[" + ", ".join(toml_value(v) for v in value) + "]"


def _key(name: str) -> str:
    return name if _BARE.match(name) else json.dumps(name, ensure_ascii=False)


def _table(dotted: Sequence[str]) -> str:
    return ".".join(_key(part) for part in dotted)


@dataclass(frozen=True)
class Manifest:
    """An `agentstack.toml`, built up one table at a time; `str()` is its text. Each method returns
    a new manifest (the old one is unchanged), so a module's base manifest can be extended by a
    test without copying it."""

    name: str
    harnesses: Sequence[str] | None = None
    tables: tuple[tuple[tuple[str, ...], tuple[tuple[str, Value], ...]], ...] = ()

    def table(self, *dotted: str, **keys: Value) -> Manifest:
        """Any table: `table("sandbox", "network", block=True)` is `[sandbox.network]`."""
        return Manifest(self.name, self.harnesses, (*self.tables, (dotted, tuple(keys.items()))))

    def server(self, name: str, *args: str, command: str = "python3", **keys: Value) -> Manifest:
        """A stdio server: `command` with `args` (and any other key, e.g. `env`)."""
        return self.table("servers", name, command=command, args=list(args), **keys)

    def skill(self, name: str, path: str | None = None, **keys: Value) -> Manifest:
        """A skill at `path` (default skills/NAME), or with `git`/`rev` keys instead."""
        if path is None and "git" not in keys:
            path = f"skills/{name}"
        return self.table("skills", name, **({"path": path} if path else {}), **keys)

    def instructions(self, *files: str) -> Manifest:
        return self.table("instructions", files=list(files))

    def hook(self, name: str, event: str, script: str, **keys: Value) -> Manifest:
        return self.table("hooks", name, event=event, script=script, **keys)

    def sandbox(self, **keys: Value) -> Manifest:
        """`[sandbox]`; a `network` mapping becomes its own `[sandbox.network]` table."""
        network = keys.pop("network", None)
        built = self.table("sandbox", **keys)
        if isinstance(network, Mapping):
            built = built.table("sandbox", "network", **network)
        return built

    def __str__(self) -> str:
        head = [f"name = {toml_value(self.name)}"]
        if self.harnesses is not None:
            head.append(f"harnesses = {toml_value(list(self.harnesses))}")
        blocks = ["[project]\n" + "".join(line + "\n" for line in head)]
        for dotted, keys in self.tables:
            lines = "".join(f"{_key(k)} = {toml_value(v)}\n" for k, v in keys)
            blocks.append(f"[{_table(dotted)}]\n{lines}")
        return "\n".join(blocks)


def manifest(name: str = "demo", *harnesses: str) -> Manifest:
    """A manifest for project `name` naming `harnesses` (none: no `harnesses` key at all)."""
    return Manifest(name, list(harnesses) if harnesses else None)


# The suite's common shapes: a python stdio server beside the project, an instruction file.
NOTES_SERVER = ("notes", "servers/notes.py")
NOTES_FILES: dict[str, str] = {"servers/notes.py": "print('notes')\n", "AGENTS.base.md": "Be careful.\n"}


def notes(name: str, *harnesses: str) -> Manifest:
    """The shape most tests start from: the `notes` server (servers/notes.py) and AGENTS.base.md
    as the instruction file; add `.sandbox(...)` and the rest."""
    return manifest(name, *harnesses).server(*NOTES_SERVER).instructions("AGENTS.base.md")


def make_project(root: Path, manifest: str | Manifest, files: Mapping[str, str] | None = None,
                 executables: tuple[str, ...] = ()) -> Path:
    """A project directory at `root`: its agentstack.toml, `files` (relative path: text) and the
    `executables` among them made executable. Returns `root` (as given, not resolved)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "agentstack.toml").write_text(str(manifest), encoding="utf-8")
    for rel, text in (files or {}).items():
        put(root / rel, text)
    for rel in executables:
        (root / rel).chmod(0o755)
    return root


def put(path: Path, text: str) -> Path:
    """Write `text` to `path`, creating its parent directories."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def copy_example(name: str, dest: Path) -> Path:
    """A copy of examples/NAME under `dest` (links kept as links)."""
    target = dest / name
    shutil.copytree(EXAMPLES / name, target, symlinks=True)
    return target


def git(*args: str, cwd: Path) -> str:
    """The real git with a fixed identity and date (commits are reproducible)."""
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid",
               GIT_AUTHOR_DATE="2026-01-01T00:00:00Z", GIT_COMMITTER_DATE="2026-01-01T00:00:00Z")
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=env).stdout


def git_init(root: Path) -> Path:
    """`git init` at `root` (the top of its checkout: nothing above it is on the surface)."""
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def locked_project(root: Path, manifest: str | Manifest, files: Mapping[str, str] | None = None,
                   executables: tuple[str, ...] = ()) -> Path:
    """`make_project`, then `agentstack lock` in this process (required to exit 0)."""
    return steps(make_project(root, manifest, files, executables), TRUST[:1], in_process=True)


def trusted_example(name: str, dest: Path, *, apply: bool = True) -> Path:
    """A copy of examples/NAME under `dest`, locked, trusted accepting its risk and (unless
    `apply=False`) applied, each command in this process: where most command tests start."""
    return steps(copy_example(name, dest), TRUST_AND_APPLY if apply else TRUST, in_process=True)


DECOY_KEY = "DECOY-SSH-KEY\n"


@contextmanager
def decoy_home(prefix: str) -> Iterator[Path]:
    """A HOME outside /tmp (which sandboxes grant), with a decoy secret that exists
    (`.ssh/id_ed25519`, holding DECOY_KEY): a denial of it is proved by the kernel's answer, never
    by a missing file. Removed afterwards."""
    from agentstack.sandbox import verify

    base = Path(tempfile.mkdtemp(dir=verify.DECOY_ROOT, prefix=prefix))
    (base / ".ssh").mkdir()
    (base / ".ssh" / "id_ed25519").write_text(DECOY_KEY)
    try:
        yield base.resolve()
    finally:
        shutil.rmtree(base, ignore_errors=True)

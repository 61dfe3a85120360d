"""`init`, `add` and `remove`: edit agentstack.toml with tomlkit, keeping comments and layout.

An edit is validated as a whole manifest before it is written, and written atomically, so a failed
`add` leaves the file exactly as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.items import Table

from agentstack.errors import InvalidInput
from agentstack.manifest.model import MANIFEST_NAME, parse_manifest

STARTER = """\
# agentstack.toml: what this project's coding agents may run and read.
# Reference: docs/manifest.md. After editing, run 'agentstack lock' and 'agentstack trust'.
# Editor completion: 'agentstack schema > .agentstack.schema.json', then make the first line
#   #:schema ./.agentstack.schema.json

[project]
name = {name}
harnesses = [{harnesses}]

# [servers.example]
# command = "npx"
# args = ["-y", "@scope/server@1.2.3"]
# env = {{ API_TOKEN = "secret:example-token" }}

[sandbox]
write_dirs = ["."]

[sandbox.network]
block = true
"""


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step: a reader sees the old or the new file, never half."""
    from agentstack.fsutil import write_atomic as write_bytes

    write_bytes(path, text.encode("utf-8"))


def init(root: Path, name: str, harnesses: list[str]) -> Path:
    path = root / MANIFEST_NAME
    if path.exists():
        raise InvalidInput(f"{path} already exists", hint="edit it, or use 'agentstack add'")
    text = STARTER.format(
        name=tomlkit.string(name).as_string(),
        harnesses=", ".join(tomlkit.string(h).as_string() for h in harnesses),
    )
    parse_manifest(text.encode(), MANIFEST_NAME)  # a bad --name or --harness fails here, unwritten
    write_atomic(path, text)
    return path


class ManifestEditor:
    """Load, edit and save the manifest document; `save` validates the result first."""

    def __init__(self, root: Path) -> None:
        self.path = root / MANIFEST_NAME
        try:
            self.original = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InvalidInput(f"{self.path}: no manifest", hint="run 'agentstack init'") from None
        parse_manifest(self.original.encode(), MANIFEST_NAME)
        self.doc = tomlkit.parse(self.original)

    def _section(self, kind: str) -> Table:
        section = self.doc.get(kind)
        if section is None:
            section = tomlkit.table(is_super_table=True)
            self.doc.add(kind, section)
        assert isinstance(section, Table)
        return section

    def add_item(self, kind: str, name: str, values: dict[str, Any], *, replace: bool) -> None:
        section = self._section(kind)
        if name in section and not replace:
            raise InvalidInput(
                f"{kind}.{name} already exists in {MANIFEST_NAME}",
                hint=f"pass --replace, or 'agentstack remove {kind[:-1]} {name}'",
            )
        table = tomlkit.table()
        for key, value in values.items():
            if isinstance(value, dict):
                inline = tomlkit.inline_table()
                inline.update(value)
                table.add(key, inline)
            else:
                table.add(key, value)
        table.add(tomlkit.nl())  # keep a blank line between this table and whatever follows
        if name in section:
            section[name] = table
        else:
            section.add(name, table)

    def remove_item(self, kind: str, name: str) -> None:
        section = self.doc.get(kind)
        if section is None or name not in section:
            raise InvalidInput(f"{kind}.{name} is not in {MANIFEST_NAME}")
        del section[name]

    def add_instructions(self, path: str) -> None:
        section = self.doc.get("instructions")
        if section is None:
            section = tomlkit.table()
            section.add("files", tomlkit.array())
            self.doc.add("instructions", section)
        files = section.setdefault("files", tomlkit.array())
        if path in files:
            raise InvalidInput(f"{path} is already listed in instructions.files")
        files.append(path)

    def remove_instructions(self, path: str) -> None:
        files = (self.doc.get("instructions") or {}).get("files")
        if files is None or path not in files:
            raise InvalidInput(f"{path} is not listed in instructions.files")
        files.remove(path)

    def save(self) -> None:
        text = tomlkit.dumps(self.doc)
        if not text.endswith("\n"):
            text += "\n"
        parse_manifest(text.encode(), MANIFEST_NAME)  # never write a manifest that does not load
        write_atomic(self.path, text)

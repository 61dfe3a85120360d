"""The trust review's preview of what `apply --write` changes outside the project reads no byte of
a skill's tree, and says exactly what a render with the skills' bytes would say."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentstack.apply import engine
from agentstack.apply.materialize import Materializer
from agentstack.apply.preview import user_level_changes
from agentstack.consent.document import current
from tests.conftest import make_project

# The commands run in process: what these tests check is the library's answer, not the process.
from tests.support.cli import run_cli_in_process as run_cli
from tests.support.project import NOTES_SERVER, manifest

MANIFEST = str(manifest("preview", "claude-code", "codex").skill("big")
               .server(*NOTES_SERVER))
FILES = {
    "skills/big/SKILL.md": "---\nname: big\ndescription: Big.\n---\n\n# Big\n",
    **{f"skills/big/d{i % 3}/f{i}.md": f"text {i}\n" for i in range(12)},
    "servers/notes.py": "print('notes')\n",
}


def test_the_preview_reads_no_skill_byte_and_says_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_project(tmp_path / "proj", MANIFEST, FILES).resolve()
    assert run_cli("lock", cwd=root).returncode == 0
    _, _, document, digest = current(root)
    full = [op for op in engine.render_operations(root, document, digest)]
    read: list[str] = []
    real = Materializer.skill_file

    def counting(self: Materializer, name: str, entry: dict[str, object]) -> bytes:
        read.append(str(entry["path"]))
        return real(self, name, entry)

    monkeypatch.setattr(Materializer, "skill_file", counting)
    lines = user_level_changes(root, document, digest)
    assert read == []  # not one file of the skill was read for the preview
    bare = engine.render_operations(root, document, digest, skill_bytes=False)
    assert read == []
    # The same operations, paths and owned keys; only the skill copies' bytes are left out.
    assert [(type(op).__name__, op.path) for op in bare] == [
        (type(op).__name__, op.path) for op in full]
    assert [getattr(op, "keys", None) for op in bare] == [getattr(op, "keys", None) for op in full]
    assert lines and any(".claude.json" in line for line in lines)
    monkeypatch.setattr(Materializer, "skill_file", real)
    assert user_level_changes(root, document, digest) == lines

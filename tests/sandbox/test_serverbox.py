"""The relay's kept confinement (`mcp-pins/<server>.box`): used only for the very key it was
resolved for, and dropped when the kernel refuses it. The server is the real notes server,
started through the rendered launcher (forked and confined in-process)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from agentstack import layout
from tests.sandbox.test_relay import Session, rendered_command, trusted_project


def _box(root: Path) -> Path:
    return Path(layout.box_file(os.environ["AGENTSTACK_HOME"], str(root), "notes"))


def _lists_tools(root: Path) -> tuple[bool, str]:
    session = Session(rendered_command(root))
    session.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "test", "version": "0"}}})
    assert session.proc.stdout is not None
    answered = bool(session.proc.stdout.readline())
    return answered, session.close()


def _break_grants(box: Path) -> dict[str, object]:
    """The kept confinement with only /usr readable: the server's interpreter cannot start."""
    kept = json.loads(box.read_text())
    kept["confinement"]["grants"] = [{"path": "/usr", "access": "ro", "file": False}]
    box.write_text(json.dumps(kept))
    return kept


def test_a_kept_confinement_is_used_for_its_key_and_dropped_when_refused(tmp_path: Path) -> None:
    root = trusted_project(tmp_path)
    assert _lists_tools(root)[0]
    box = _box(root)
    assert box.exists() and box.stat().st_mode & 0o077 == 0
    _break_grants(box)
    # The same key: the kept confinement is used (so the server cannot start), then dropped.
    answered, stderr = _lists_tools(root)
    assert not answered and "not started" in stderr
    assert not box.exists()
    assert _lists_tools(root)[0]  # resolved again
    assert box.exists()


def test_a_kept_confinement_of_another_key_is_not_used(tmp_path: Path) -> None:
    root = trusted_project(tmp_path)
    assert _lists_tools(root)[0]
    box = _box(root)
    kept = _break_grants(box)
    kept["key"][0] = "b3:" + "0" * 64  # type: ignore[index]  # another digest
    box.write_text(json.dumps(kept))
    answered, stderr = _lists_tools(root)
    assert answered, stderr
    assert json.loads(box.read_text())["key"][0] != "b3:" + "0" * 64

"""Cursor: golden files (tests/apply/test_apply.py) and the rendered files checked against the keys
Cursor documents (MCP, hooks, rules). Not verified by a binary: Cursor's CLI is not published on
a package registry. The guard answers a Cursor hook in Cursor's deny shape."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from agentstack.apply.engine import GUARD_CODE
from tests.harness.deadline import scaled
from tests.support.adapters import locked_project, trust_and_apply, without_relay
from tests.support.cli import run_cli_in_process as run_cli

STDIO_KEYS = {"command", "args", "env"}
HOOK_KEYS = {"command", "matcher", "timeout", "failClosed"}
HOOK_EVENTS = {"preToolUse", "postToolUse", "beforeShellExecution", "beforeMCPExecution",
               "beforeReadFile", "beforeSubmitPrompt", "sessionStart", "stop"}
RULE_KEYS = {"description", "globs", "alwaysApply"}


def _project(tmp_path: Path) -> Path:
    server = f"command = {json.dumps(sys.executable)}\nargs = [\"-I\", \"server.py\"]\n"
    root = locked_project(tmp_path / "proj", f"""\
[project]
name = "cursor"
harnesses = ["cursor"]

[servers.notes]
{server}env = {{ LEVEL = "info", TOKEN = "secret:notes-token" }}

[servers.docs]
url = "https://docs.example.invalid/mcp"
headers = {{ Authorization = "secret:docs-token" }}

[hooks.fmt]
event = "PostToolUse"
matcher = "Edit|Write"
command = ["true"]

[instructions]
files = ["base.md"]
""", {"base.md": "Be careful.\n", "server.py": ""})
    trust_and_apply(root)
    return root


def test_rendered_files_use_only_documented_keys(tmp_path: Path) -> None:
    root = _project(tmp_path)
    mcp = json.loads((root / ".cursor" / "mcp.json").read_text())
    assert set(mcp) == {"mcpServers"}
    assert set(mcp["mcpServers"]["notes"]) <= STDIO_KEYS
    # Only literal values are rendered; the secret reaches the server through the launcher.
    assert mcp["mcpServers"]["notes"]["env"] == {"LEVEL": "info"}
    assert without_relay(mcp["mcpServers"]["notes"]["args"])[:6] == [
        "-I", "-m", "agentstack.launch", "--secret", "TOKEN=notes-token", "--"]
    # The remote server through the relay's remote mode: no URL, no header, no secret reference.
    assert set(mcp["mcpServers"]["docs"]) == {"command", "args"}
    assert mcp["mcpServers"]["docs"]["args"][-2] == "--remote"

    hooks = json.loads((root / ".cursor" / "hooks.json").read_text())
    assert hooks["version"] == 1 and set(hooks) == {"version", "hooks"}
    assert set(hooks["hooks"]) <= HOOK_EVENTS
    for event, entries in hooks["hooks"].items():
        for entry in entries:
            assert set(entry) <= HOOK_KEYS, (event, entry)
            assert isinstance(entry["timeout"], int)
    for event in ("preToolUse",):
        (guard,) = hooks["hooks"][event]
        assert guard["failClosed"] is True  # Cursor fails open without it
        assert shlex.split(guard["command"])[3:] == [
            GUARD_CODE, "--harness", "cursor", "--state", os.environ["AGENTSTACK_HOME"],
            "--project", str(root)]
    assert hooks["hooks"]["postToolUse"] == [{"command": "true", "timeout": 30,
                                              "matcher": "Edit|Write"}]

    rule = (root / ".cursor" / "rules" / "agentstack.mdc").read_text()
    _, front, body = rule.split("---\n", 2)
    keys = dict(line.split(": ", 1) for line in front.strip().splitlines())
    assert set(keys) <= RULE_KEYS and keys["alwaysApply"] == "true"
    assert body.rstrip().endswith("Be careful.")


def test_guard_denies_in_cursors_shape(tmp_path: Path) -> None:
    root = _project(tmp_path)
    hooks = json.loads((root / ".cursor" / "hooks.json").read_text())
    (guard,) = hooks["hooks"]["preToolUse"]  # the command Cursor runs, as rendered
    assert run_cli("revoke", cwd=root).returncode == 0
    event = {"hook_event_name": "preToolUse", "tool_name": "Shell",
             "tool_input": {"command": "ls"}, "workspace_roots": [str(root)]}
    result = subprocess.run(shlex.split(guard["command"]), cwd=root, input=json.dumps(event),
                            capture_output=True, text=True, timeout=scaled(30))
    assert result.returncode == 2
    decision = json.loads(result.stdout)
    assert decision["permission"] == "deny" and "revoked" in decision["agent_message"]


def test_cursor_mcp_tool_names_are_tied_to_the_lock() -> None:
    from agentstack._guard import Deny, check_call

    snapshot = {"servers": ["notes"], "policy": {"deny": [], "read": ["/"], "write": ["/"],
                                                 "network_block": True, "hosts": []}}

    def call(tool: str) -> None:
        check_call(snapshot, {"tool_name": tool, "tool_input": {}}, "/", "cursor")

    call("MCP:notes:add_note")
    for tool in ("MCP:other:add_note", "MCP:notes:x:y", "MCP:notes:", "mcp:notes:add_note"):
        with pytest.raises(Deny):
            call(tool)

"""Qwen Code: what the adapter renders, checked in process and by the real `qwen` (0.24.4).

The real binary, offline, HOME at a temporary directory: before trust `qwen mcp list` shows
nothing from agentstack; after `trust` + `apply --write` every locked server is connected (its
approval recorded in `~/.qwen/mcpApprovals.json` matches Qwen Code's own hash). End to end against
the mock model (OpenAI chat completions on 127.0.0.1): the guard lets a tool call run in a trusted,
unchanged project, and blocks it after a rendered file is edited behind agentstack's back and after
`revoke` (the user-level guard: Qwen Code then skips the untrusted project's settings).

Skips locally when `qwen` is missing (scripts/install-harnesses); fails in CI (CI=true).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from agentstack.apply.engine import GUARD_CODE
from tests.harness.binaries import harness_bin, harness_env
from tests.harness.deadline import scaled
from tests.harness.drive import NOTES_SERVER
from tests.harness.mock_model import ToolCall
from tests.support.adapters import (
    TOUCH,
    added_key_blocks,
    allowed_then_blocked_on_edit,
    drive,
    line_of,
    listed_only_after_trust,
    notes_project,
    rendered,
    without_relay,
)
from tests.support.adapters import ok as _ok


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return notes_project(tmp_path, "qwen-e2e", '["qwen-code"]')


# ------------------------------------------------------------------------------ in process


def test_render_guards_every_call_and_approves_each_locked_server(project: Path,
                                                                  isolated_home: Path) -> None:
    from agentstack_adapters.qwen_code import approval_hash

    ops = rendered(project, ["qwen-code"])
    settings = ops[".qwen/settings.json"]
    notes = settings.keys[("mcpServers", "notes")]
    assert "NOTES_TOKEN" not in notes.get("env", {})  # the secret comes through the launcher
    assert without_relay(notes["args"])[6:] == [sys.executable, "-I", str(NOTES_SERVER)]
    assert notes["cwd"] == str(project)
    (guard,) = settings.keys[("hooks",)]["PreToolUse"]
    assert guard["matcher"] == ""
    assert shlex.split(guard["hooks"][0]["command"])[3:] == [
        GUARD_CODE, "--harness", "qwen-code", "--state",
        os.environ["AGENTSTACK_HOME"], "--project", str(project)]
    assert guard["hooks"][0]["timeout"] == 10  # seconds
    for key in (("disableAllHooks",), ("hooks",), ("mcpServers",), ("tools", "callCommand")):
        assert key in settings.guarded, key
    trusted = ops[str(isolated_home / ".qwen" / "trustedFolders.json")]
    assert trusted.keys == {(str(project),): "TRUST_FOLDER"} and trusted.user_level
    approvals = ops[str(isolated_home / ".qwen" / "mcpApprovals.json")]
    assert approvals.user_level and not approvals.keep_on_revoke
    assert approvals.keys == {
        (str(project), name): {"hash": approval_hash(settings.keys[("mcpServers", name)]),
                               "status": "approved"}
        for name in ("journal", "notes")}
    user = ops[str(isolated_home / ".qwen" / "settings.json")]
    (user_guard,) = user.keys[("hooks", "PreToolUse")]
    assert user.keep_on_revoke
    assert shlex.split(user_guard["hooks"][0]["command"])[3:] == [
        GUARD_CODE, "--harness", "qwen-code", "--state",
        os.environ["AGENTSTACK_HOME"], "--user-level"]
    assert ops["QWEN.md"].text == "Be careful.\n"


def test_the_approval_hash_is_qwens() -> None:
    """Qwen Code 0.24.4's `hashMcpServerConfig`: sha256 of the JSON text with every object's keys
    sorted and no spaces, without `scope`, `extensionName` and `description`."""
    import hashlib

    from agentstack_adapters.qwen_code import approval_hash

    config = {"command": "x", "args": ["-I", "é"], "env": {"B": "1", "A": "2"},
              "scope": "project", "description": "label"}
    text = '{"args":["-I","é"],"command":"x","env":{"A":"2","B":"1"}}'
    assert approval_hash(config) == hashlib.sha256(text.encode()).hexdigest()
    assert approval_hash({**config, "scope": "workspace"}) == approval_hash(config)
    assert approval_hash({**config, "args": ["-I"]}) != approval_hash(config)


@pytest.mark.parametrize("added", [
    {"disableAllHooks": True},
    {"hooksConfig": {"enabled": False}},
    {"tools": {"callCommand": "sh -c 'curl evil'"}},
    {"mcp": {"serverCommand": "sh"}},
])
def test_switches_in_the_project_settings_block_the_guard(project: Path, isolated_home: Path,
                                                          added: dict[str, Any]) -> None:
    added_key_blocks(project, ".qwen/settings.json", added)


# ------------------------------------------------------------------------------- real qwen


def _user_settings(home: Path) -> None:
    """The user's own Qwen Code settings (an OpenAI-compatible model), next to agentstack's."""
    path = home / ".qwen" / "settings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.exists() else {}
    data["security"] = {"auth": {"selectedType": "openai"}}
    data["model"] = {"name": "gpt-4o"}
    path.write_text(json.dumps(data, indent=2))


@pytest.mark.slow
def test_qwen_mcp_list_only_after_trust(project: Path, isolated_home: Path) -> None:
    harness_bin("qwen")
    _user_settings(isolated_home)
    env = harness_env(isolated_home, OPENAI_API_KEY="dummy")
    # approved (not "Pending approval") and started
    listed_only_after_trust("qwen", project, env,
                            lambda server, out: "Connected" in line_of(server, out))


def run_qwen(root: Path, home: Path, call: ToolCall) -> tuple[bool, str, int]:
    """(did the call run?, what the model was told, exit code)."""
    return drive(
        root, call, [str(harness_bin("qwen")), "-p", "do it", "--yolo"],
        lambda model: harness_env(home, OPENAI_API_KEY="dummy",
                                  OPENAI_BASE_URL=model.openai_base_url, OPENAI_MODEL="gpt-4o",
                                  QWEN_CODE_SUPPRESS_YOLO_WARNING="1"),
        timeout=scaled(120))


@pytest.mark.slow
def test_qwen_guard_end_to_end(project: Path, isolated_home: Path) -> None:
    harness_bin("qwen")
    _user_settings(isolated_home)
    allowed_then_blocked_on_edit(project, lambda call: run_qwen(project, isolated_home, call),
                                 TOUCH, ToolCall("mcp__notes__add_note", {"text": "ok"}),
                                 ".qwen/settings.json")

    # After revoke Qwen Code no longer trusts the folder (its settings are skipped); the
    # user-level guard still blocks.
    _ok("revoke", cwd=project)
    ran, text, _ = run_qwen(project, isolated_home, TOUCH)
    assert not ran and "agentstack guard" in text, text

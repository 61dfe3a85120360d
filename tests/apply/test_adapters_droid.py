"""Factory Droid: what the adapter renders, checked in process and by the real `droid` (0.225.2).

The real binary, offline (any `FACTORY_API_KEY`: it is not checked before a model request; the
model a `customModels` entry pointing at the mock on 127.0.0.1), HOME at a temporary directory:
before trust `droid mcp list` shows nothing from agentstack; after `trust` + `apply --write` every
locked server is connected. End to end: the guard lets a tool call (and an MCP tool, named
`<server>___<tool>`) run in a trusted, unchanged project, and blocks it after a rendered file is
edited behind agentstack's back and after `revoke` (Droid has no trust of its own: the project's
hook still runs, and the guard refuses a revoked project).

Skips locally when `droid` is missing (scripts/install-harnesses); fails in CI (CI=true).
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

import pytest

from agentstack.apply.engine import GUARD_CODE
from tests.harness.binaries import harness_bin, harness_env
from tests.harness.deadline import scaled
from tests.harness.mock_model import MockModel, ToolCall
from tests.support.adapters import (
    TOUCH,
    added_key_blocks,
    allowed_then_blocked_on_edit,
    drive,
    guard_snapshot,
    listed_only_after_trust,
    notes_project,
    rendered,
)
from tests.support.adapters import ok as _ok

# Droid's shell tool wants a risk level with every command.
SHELL = ToolCall("Execute", {"command": "touch marker.txt", "riskLevel": "low",
                             "riskLevelReason": "creates one file"})


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return notes_project(tmp_path, "droid-e2e", '["droid"]')


def droid_env(home: Path, model: MockModel | None) -> dict[str, str]:
    """Droid's user settings (a model on the mock) and its environment."""
    factory = home / ".factory"
    factory.mkdir(parents=True, exist_ok=True)
    url = model.openai_base_url if model is not None else "http://127.0.0.1:9/v1"
    (factory / "settings.json").write_text(json.dumps({"customModels": [{
        "model": "gpt-4o", "displayName": "mock", "baseUrl": url, "apiKey": "dummy",
        "provider": "generic-chat-completion-api"}]}))
    return harness_env(home, FACTORY_API_KEY="fk-offline")


# ------------------------------------------------------------------------------ in process


def test_render_puts_the_guard_first_and_the_servers_in_factory_mcp_json(
        project: Path, isolated_home: Path) -> None:
    ops = rendered(project, ["droid"])
    servers = ops[".factory/mcp.json"]
    assert set(servers.keys) == {("mcpServers", "notes"), ("mcpServers", "journal")}
    notes = servers.keys[("mcpServers", "notes")]
    assert notes["type"] == "stdio" and "NOTES_TOKEN" not in notes.get("env", {})
    settings = ops[".factory/settings.json"]
    (guard,) = settings.keys[("hooks",)]["PreToolUse"]
    assert guard["matcher"] == "*"
    assert shlex.split(guard["hooks"][0]["command"])[3:] == [
        GUARD_CODE, "--harness", "droid", "--state",
        os.environ["AGENTSTACK_HOME"], "--project", str(project)]
    assert ("hooksDisabled",) in settings.guarded and ("hooks",) in settings.guarded
    assert ops["AGENTS.md"].text == "Be careful.\n"
    assert not any(op.path.startswith(str(isolated_home)) for op in ops.values())  # no trust


def test_the_review_says_droid_has_no_trust_of_its_own(project: Path) -> None:
    from agentstack.trust.review import harness_notes
    from tests.support.adapters import current

    (note,) = harness_notes(current(project)[2])
    assert note.startswith("Factory Droid has no trust of its own")


def test_an_mcp_tool_is_tied_to_exactly_one_locked_server(project: Path,
                                                          isolated_home: Path) -> None:
    from agentstack._guard import Deny, check_call

    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    snapshot = guard_snapshot(project)

    def call(tool: str) -> None:
        check_call(snapshot, {"hook_event_name": "PreToolUse", "tool_name": tool,
                               "tool_input": {"text": "x"}}, str(project), "droid")

    call("notes___add_note")
    for tool in ("other___add_note", "notes___", "notes__add_note"):
        with pytest.raises(Deny):
            call(tool)


@pytest.mark.parametrize("added", [{"hooksDisabled": True}, {"mcpServers": {"x": {}}}])
def test_switches_in_the_project_settings_block_the_guard(project: Path, isolated_home: Path,
                                                          added: dict[str, Any]) -> None:
    added_key_blocks(project, ".factory/settings.json", added)


# ------------------------------------------------------------------------------- real droid


@pytest.mark.slow
def test_droid_mcp_list_only_after_trust(project: Path, isolated_home: Path) -> None:
    harness_bin("droid")

    def listed(server: str, out: str) -> bool:
        line = next((ln for ln in out.splitlines() if f" {server} " in f" {ln} "), "")
        return "connected" in line and "[project]" in line

    listed_only_after_trust("droid", project, droid_env(isolated_home, None), listed)


def run_droid(root: Path, home: Path, call: ToolCall) -> tuple[bool, str, int]:
    """(did the call run?, what the model was told, exit code)."""
    ran, text, rc = drive(
        root, call,
        [str(harness_bin("droid")), "exec", "-m", "custom:gpt-4o", "--auto", "high", "do it"],
        lambda model: droid_env(home, model), timeout=scaled(120))
    if call is SHELL:
        ran = (root / "marker.txt").exists()
    return ran, text, rc


@pytest.mark.slow
def test_droid_guard_end_to_end(project: Path, isolated_home: Path) -> None:
    harness_bin("droid")
    allowed_then_blocked_on_edit(project, lambda call: run_droid(project, isolated_home, call),
                                 SHELL, ToolCall("notes___add_note", {"text": "ok"}),
                                 ".factory/mcp.json")

    # Revoked: Droid still runs the project's hook (it has no trust of its own); the guard
    # refuses a revoked project.
    _ok("revoke", cwd=project)
    ran, text, _ = run_droid(project, isolated_home, SHELL)
    assert not ran and "agentstack guard" in text, text


def test_touch_is_the_generic_shell_call() -> None:
    assert TOUCH.name == "Bash" and SHELL.input["command"] == TOUCH.input["command"]

"""Gemini CLI: what the adapter renders, checked in process and by the real `gemini` (0.61.0).

The real binary, offline, HOME at a temporary directory: before trust `gemini mcp list` shows
nothing from agentstack; after `trust` + `apply --write` every locked server is connected. End to
end against a mock Gemini API on 127.0.0.1: the guard lets a tool call run in a trusted, unchanged
project, and blocks it after a rendered file is edited behind agentstack's back, after a project
`hooksConfig` tries to switch hooks off, and after `revoke` (then only with `--skip-trust`, which
drops project hooks: the user-level guard blocks it).

Skips locally when `gemini` is missing (scripts/install-harnesses); fails in CI (CI=true).
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
    allowed_then_blocked_on_edit,
    drive,
    guard_snapshot,
    line_of,
    listed_only_after_trust,
    mcp_list,
    notes_project,
    rendered,
    without_relay,
)
from tests.support.adapters import ok as _ok
from tests.support.cli import run_cli_in_process as run_cli


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return notes_project(tmp_path, "gemini-e2e", '["gemini-cli"]')


# ------------------------------------------------------------------------------ in process


def _render(root: Path) -> dict[str, Any]:
    return rendered(root, ["gemini-cli"])


def test_render_launches_secrets_and_guards_the_hook_switches(project: Path,
                                                              isolated_home: Path) -> None:
    ops = _render(project)
    settings = ops[".gemini/settings.json"]
    notes = settings.keys[("mcpServers", "notes")]
    # The secret reaches the server through the launcher (Gemini strips secret-looking inherited
    # variables; the launcher adds it after): no secret and no reference in the settings.
    assert "NOTES_TOKEN" not in notes["env"]
    assert without_relay(notes["args"])[:6] == ["-I", "-m", "agentstack.launch", "--secret", "NOTES_TOKEN=notes-token", "--"]
    assert without_relay(notes["args"])[6:] == [sys.executable, "-I", str(NOTES_SERVER)]
    assert notes["cwd"] == str(project) and "trust" not in notes
    guard = settings.keys[("hooks",)]["BeforeTool"][0]
    assert guard["matcher"] == ".*"
    assert shlex.split(guard["hooks"][0]["command"])[3:] == [
        GUARD_CODE, "--harness", "gemini-cli", "--state",
        os.environ["AGENTSTACK_HOME"], "--project", str(project)]
    assert guard["hooks"][0]["timeout"] == 10_000  # milliseconds
    assert ("hooksConfig",) in settings.guarded and ("mcpServers",) in settings.guarded
    trusted = ops[str(isolated_home / ".gemini" / "trustedFolders.json")]
    assert trusted.keys == {(str(project),): "TRUST_FOLDER"} and trusted.user_level
    user = ops[str(isolated_home / ".gemini" / "settings.json")]
    (user_guard,) = user.keys[("hooks", "BeforeTool")]
    assert user.keep_on_revoke and user_guard["matcher"] == ".*"
    (user_hook,) = user_guard["hooks"]
    # The user-level guard names no project: it finds the enclosing agentstack project itself.
    assert shlex.split(user_hook["command"])[3:] == [
        GUARD_CODE, "--harness", "gemini-cli", "--state",
        os.environ["AGENTSTACK_HOME"], "--user-level"]
    assert {**user_hook, "command": ""} == {**guard["hooks"][0], "command": ""}
    assert ops["GEMINI.md"].text == "Be careful.\n"


@pytest.mark.parametrize("added", [
    {"hooksConfig": {"disabled": ["agentstack-guard"]}},
    {"hooksConfig": {"enabled": False}},
    {"tools": {"discoveryCommand": "sh -c 'curl evil'"}},
    {"mcp": {"serverCommand": "sh"}},
])
def test_switches_in_the_project_settings_block_the_guard(project: Path, isolated_home: Path,
                                                          added: dict[str, Any]) -> None:
    """`hooksConfig` switches user-level hooks off, `tools.*Command` and `mcp` run commands: the
    guard treats each as drift."""
    from agentstack._guard import Deny, check_files

    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    snapshot = guard_snapshot(project)
    check_files(snapshot)
    path = project / ".gemini" / "settings.json"
    data = json.loads(path.read_text())
    data.update(added)
    path.write_text(json.dumps(data))
    with pytest.raises(Deny, match=r"\.gemini/settings\.json"):
        check_files(snapshot)


def test_revoke_keeps_the_user_level_guard(project: Path, isolated_home: Path) -> None:
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    _ok("revoke", cwd=project)
    trusted = json.loads((isolated_home / ".gemini" / "trustedFolders.json").read_text()
                         if (isolated_home / ".gemini" / "trustedFolders.json").exists() else "{}")
    assert str(project) not in trusted
    user = json.loads((isolated_home / ".gemini" / "settings.json").read_text())
    assert "agentstack._guard" in user["hooks"]["BeforeTool"][0]["hooks"][0]["command"]


# ------------------------------------------------------------------------------ real gemini


def _user_settings(home: Path) -> None:
    """The user's own Gemini settings (API-key auth), next to what agentstack adds."""
    path = home / ".gemini" / "settings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.exists() else {}
    data["security"] = {"auth": {"selectedType": "gemini-api-key"}}
    path.write_text(json.dumps(data, indent=2))


def gemini_mcp_list(root: Path, home: Path) -> str:
    return mcp_list("gemini", root, harness_env(home), timeout=120)


@pytest.mark.slow
def test_gemini_mcp_list_only_after_trust(project: Path, isolated_home: Path) -> None:
    harness_bin("gemini")
    _user_settings(isolated_home)
    listed_only_after_trust("gemini", project, harness_env(isolated_home),
                            lambda server, out: "Connected" in line_of(server, out))
    # doctor asks the same binary, and says so per locked server.
    done = run_cli("doctor", "--json", cwd=project,
                   env={"PATH": f"{harness_bin('gemini').parent}:/usr/bin:/bin"})
    (row,) = [c for c in json.loads(done.stdout)["checks"] if c["name"] == "mcp gemini-cli"]
    assert row["status"] == "ok" and row["servers"] == {"journal": "connected",
                                                         "notes": "connected"}, row


def run_gemini(root: Path, home: Path, call: ToolCall, *args: str) -> tuple[bool, str, int]:
    """(did the call run?, what the model was told, exit code)."""
    return drive(
        root, call, [str(harness_bin("gemini")), "-p", "do it", "--approval-mode", "yolo", *args],
        lambda model: harness_env(home, GEMINI_API_KEY="dummy", GOOGLE_GEMINI_BASE_URL=model.url),
        timeout=scaled(120))


@pytest.mark.slow
def test_gemini_guard_end_to_end(project: Path, isolated_home: Path) -> None:
    harness_bin("gemini")
    _user_settings(isolated_home)
    allowed_then_blocked_on_edit(project, lambda call: run_gemini(project, isolated_home, call),
                                 TOUCH, ToolCall("mcp__notes__add_note", {"text": "ok"}),
                                 ".gemini/settings.json")

    # After revoke Gemini no longer trusts the folder; --skip-trust drops the project's hooks,
    # and the user-level guard still blocks.
    _ok("revoke", cwd=project)
    ran, text, rc = run_gemini(project, isolated_home, TOUCH)
    assert not ran and rc == 55, text  # headless in an untrusted folder: refuses to run
    ran, text, _ = run_gemini(project, isolated_home, TOUCH, "--skip-trust")
    assert not ran and "revoked" in text and "agentstack guard" in text, text

"""Cline CLI: what the adapter renders, checked in process and by the real `cline` (3.0.65).

The real binary, offline (`cline auth -p openai -b <mock>`: the mock model on 127.0.0.1), HOME at a
temporary directory. Cline has no `mcp list`: what it lists is the tools its requests offer the
model. Before trust none of the locked servers' tools is offered; after `trust` + `apply --write`
each one's is (`<server>__<tool>`, from the user-level `cline_mcp_settings.json`). End to end: the
guard hook (`.clinerules/hooks/PreToolUse`, answering `{"cancel": ...}`) lets a tool call run in a
trusted, unchanged project, and cancels it after a rendered file is edited behind agentstack's back
and after `revoke` (Cline has no trust of its own: the project's hook still runs). Every run ends
with Cline's hub daemon reaped (`reaping`).

Skips locally when `cline` is missing (scripts/install-harnesses); fails in CI (CI=true).
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from agentstack.apply.engine import GUARD_CODE
from tests.conftest import run_cli
from tests.harness.binaries import harness_bin, harness_env
from tests.harness.deadline import scaled
from tests.harness.drive import reaping
from tests.harness.mock_model import MockModel, ToolCall
from tests.harness.tool_tables import names_offered
from tests.support.adapters import current, guard_snapshot, notes_project, rendered, trust_and_apply
from tests.support.adapters import ok as _ok

SHELL = ToolCall("run_commands", {"commands": ["touch marker.txt"]})
NOTE = ToolCall("notes__add_note", {"text": "ok"})
MCP_SETTINGS = ".cline/data/settings/cline_mcp_settings.json"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return notes_project(tmp_path, "cline-e2e", '["cline"]')


# ------------------------------------------------------------------------------ in process


def test_render_puts_the_guard_in_an_executable_hook_and_the_servers_at_user_level(
        project: Path, isolated_home: Path) -> None:
    ops = rendered(project, ["cline"])
    hook = ops[".clinerules/hooks/PreToolUse"]
    assert hook.executable
    text = hook.content.decode()
    line = next(ln for ln in text.splitlines() if ln.startswith("answer=$("))
    assert shlex.split(line.removeprefix("answer=$(").removesuffix(")"))[3:] == [
        GUARD_CODE, "--harness", "cline", "--state", os.environ["AGENTSTACK_HOME"],
        "--project", str(project)]
    servers = ops[str(isolated_home / MCP_SETTINGS)]
    assert servers.user_level and set(servers.keys) == {("mcpServers", "notes"),
                                                        ("mcpServers", "journal")}
    notes = servers.keys[("mcpServers", "notes")]
    assert "NOTES_TOKEN" not in notes.get("env", {})  # the secret comes through the launcher
    assert notes["args"][notes["args"].index("--") + 1:][:3] == ["/usr/bin/env", "-C",
                                                                 str(project)]
    assert ops["AGENTS.md"].text == "Be careful.\n"


def _hook(project: Path, event: dict[str, object]) -> tuple[dict[str, object], int]:
    """The rendered hook, run as Cline runs it: (what it printed, its exit code)."""
    done = subprocess.run([str(project / ".clinerules" / "hooks" / "PreToolUse")], cwd=project,
                          input=json.dumps(event), capture_output=True, text=True,
                          timeout=scaled(60))
    return json.loads(done.stdout), done.returncode


def _event(project: Path, name: str, arguments: dict[str, object]) -> dict[str, object]:
    # Cline 3.0.65's PreToolUse input (measured), trimmed to what the guard reads.
    return {"hookName": "tool_call", "workspaceRoots": [str(project)],
            "tool_call": {"id": "call_1", "name": name, "input": arguments},
            "preToolUse": {"toolName": name, "parameters": {
                k: json.dumps(v) for k, v in arguments.items()}}}


def test_the_rendered_hook_answers_cancel_unless_the_guard_allows(project: Path,
                                                                  isolated_home: Path) -> None:
    trust_and_apply(project)
    hook = project / ".clinerules" / "hooks" / "PreToolUse"
    assert hook.stat().st_mode & stat.S_IXUSR
    assert _hook(project, _event(project, "notes__add_note", {"text": "x"})) == (
        {"cancel": False}, 0)
    decoy = isolated_home / ".ssh" / "id_ed25519"
    for name, arguments in (
        ("other__add_note", {"text": "x"}),
        ("notes__", {}),
        ("read_files", {"files": [{"path": str(decoy)}]}),
        ("fetch_web_content", {"requests": [{"url": "http://127.0.0.1:9/x", "prompt": "hi"}]}),
        ("some_new_tool", {}),
    ):
        answer, rc = _hook(project, _event(project, name, arguments))
        assert answer["cancel"] is True and rc == 0, (name, answer)
        assert str(answer["errorMessage"]).startswith("agentstack guard: "), answer
    # Not Cline's input at all: cancelled too.
    answer, _ = _hook(project, {"tool_name": "read_files", "tool_input": {}})
    assert answer["cancel"] is True


def test_the_hook_cancels_when_the_guard_cannot_be_started(project: Path,
                                                           isolated_home: Path) -> None:
    trust_and_apply(project)
    hook = project / ".clinerules" / "hooks" / "PreToolUse"
    text = hook.read_text()
    hook.write_text(text.replace("answer=$(", "answer=$(/nonexistent/python ", 1))
    answer, rc = _hook(project, _event(project, "notes__add_note", {"text": "x"}))
    assert answer["cancel"] is True and rc == 0, answer


def test_the_review_says_cline_has_no_trust_and_user_level_servers(project: Path) -> None:
    from agentstack.trust.review import harness_notes

    (note,) = harness_notes(current(project)[2])
    assert note.startswith("Cline has no trust of its own") and "cline_mcp_settings" in note


def test_an_edit_of_the_rendered_hook_blocks_the_guard(project: Path, isolated_home: Path) -> None:
    from agentstack._guard import Deny, check_files

    trust_and_apply(project)
    snapshot = guard_snapshot(project)
    check_files(snapshot)
    extra = project / ".clinerules" / "hooks" / "TaskStart"
    extra.write_text("#!/bin/sh\ncurl evil\n")
    with pytest.raises(Deny, match=r"\.clinerules"):
        check_files(snapshot)


# ------------------------------------------------------------------------------- real cline


def run_cline(root: Path, home: Path, call: ToolCall | None) -> tuple[bool, str, set[str]]:
    """One headless `cline --json` session in `root` against a mock model asking for `call`:
    (did it run?, what Cline printed and the model was told, the tools its requests offered).
    Its hub daemon is reaped (it holds inherited pipes open, so output goes to a file)."""
    env = harness_env(home)
    marker = root / "marker.txt"
    marker.unlink(missing_ok=True)
    out = home / "cline-output.txt"
    with reaping(), MockModel([call] if call else []) as model:
        subprocess.run([str(harness_bin("cline")), "auth", "-p", "openai", "-k", "dummy", "-m",
                        "gpt-4o", "-b", model.openai_base_url], cwd=root, env=env,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=scaled(120), check=True)
        with out.open("w") as sink, subprocess.Popen(
                [str(harness_bin("cline")), "--json", "do it"], cwd=root, env=env,
                stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                start_new_session=True) as proc:
            proc.wait(timeout=scaled(240))
    offered = {name for request in model.requests for name in names_offered(request)}
    texts = "\n".join(r.text for r in model.tool_results) + out.read_text()
    ran = marker.exists() if call is SHELL else any("added note" in r.text
                                                    for r in model.tool_results)
    return ran, texts, offered


@pytest.mark.slow
def test_cline_lists_the_locked_servers_only_after_trust(project: Path,
                                                         isolated_home: Path) -> None:
    harness_bin("cline")
    assert run_cli("apply", "--write", cwd=project).returncode == 1
    _, text, before = run_cline(project, isolated_home, None)
    assert before and not any("__" in name for name in before), (before, text)
    trust_and_apply(project)
    _, text, after = run_cline(project, isolated_home, None)
    assert {"notes__add_note", "journal__add_note"} <= after, (after, text)


@pytest.mark.slow
def test_cline_guard_end_to_end(project: Path, isolated_home: Path) -> None:
    harness_bin("cline")
    trust_and_apply(project)
    ran, text, _ = run_cline(project, isolated_home, SHELL)
    assert ran, text
    ran, text, _ = run_cline(project, isolated_home, NOTE)
    assert ran, text

    # A rendered file edited behind agentstack's back (the hook itself, which still runs the
    # guard): the call is cancelled (the run aborted).
    hook = project / ".clinerules" / "hooks" / "PreToolUse"
    hook.write_text(hook.read_text() + "# edited\n")
    ran, text, _ = run_cline(project, isolated_home, SHELL)
    assert not ran and '"aborted"' in text, text
    _ok("apply", "--write", "--force", cwd=project)
    ran, text, _ = run_cline(project, isolated_home, SHELL)
    assert ran, text

    # Revoked: the servers are gone from the user's file; Cline still runs the project's hook
    # (it has no trust of its own) and the guard refuses a revoked project.
    _ok("revoke", cwd=project)
    settings = isolated_home / MCP_SETTINGS
    assert not settings.exists() or "notes" not in json.loads(settings.read_text()).get(
        "mcpServers", {})
    ran, text, _ = run_cline(project, isolated_home, SHELL)
    assert not ran and '"aborted"' in text, text

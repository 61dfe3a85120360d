"""GitHub Copilot CLI: what the adapter renders, checked in process and by the real `copilot`
(1.0.102).

In process: `.mcp.json` shared with Claude Code merges (one file, one ledger entry per key);
`~/.copilot/config.json` is JSONC, its comment header and the user's other trusted folders
survive apply and revoke; a project `disableAllHooks` is drift; MCP tools named `<server>-<tool>`
are checked against the lock. The real binary, offline, HOME at a temporary directory: before
trust `copilot mcp list` shows nothing from agentstack, after `trust` + `apply --write` it lists
every locked server. End to end against a mock chat-completions API on 127.0.0.1: a tool call runs
in a trusted, unchanged project and is blocked after a rendered file is edited behind agentstack's
back and after `revoke`.

Skips locally when `copilot` is missing (scripts/install-harnesses); fails in CI (CI=true).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.harness.binaries import harness_bin, harness_env
from tests.harness.drive import NOTES_SERVER
from tests.harness.mock_model import ToolCall
from tests.support.adapters import (
    TOUCH,
    current,
    drive,
    guard_snapshot,
    mcp_list,
    notes_project,
    without_relay,
)
from tests.support.adapters import ok as _ok
from tests.support.adapters import render as _ops
from tests.support.cli import run_cli_in_process as run_cli

HEADER = "// User settings belong in settings.json.\n// This file is managed automatically.\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return notes_project(tmp_path, "copilot-e2e", '["copilot", "claude-code"]')


def _user_config(home: Path, text: str) -> Path:
    path = home / ".copilot" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ------------------------------------------------------------------------------ in process


def test_mcp_json_shared_with_claude_code_merges(project: Path) -> None:
    from agentstack.apply.engine import plan

    claude = {op.path: op for op in _ops(project, ["claude-code"])}[".mcp.json"]
    copilot = {op.path: op for op in _ops(project, ["copilot"])}[".mcp.json"]
    assert claude.keys == copilot.keys  # the same entries: nothing to fight over
    notes = copilot.keys[("mcpServers", "notes")]
    # The secret reaches the server through the launcher: no secret and no reference in the file.
    assert "NOTES_TOKEN" not in notes.get("env", {})
    assert without_relay(notes["args"])[:6] == ["-I", "-m", "agentstack.launch", "--secret",
                                 "NOTES_TOKEN=notes-token", "--"]
    _, _, document, digest = current(project)
    changes = [c for c in plan(project, document, digest).changes if c.display == ".mcp.json"]
    assert len(changes) == 1 and changes[0].ledger is not None
    assert sorted(changes[0].ledger["keys"]) == ['["mcpServers", "journal"]',
                                                 '["mcpServers", "notes"]']
    agents = [c for c in plan(project, document, digest).changes if c.display == "AGENTS.md"]
    assert len(agents) == 1


def test_apply_writes_trusted_folder_into_jsonc_and_revoke_removes_only_it(
        project: Path, isolated_home: Path) -> None:
    config = _user_config(isolated_home, HEADER + '{\n  "trustedFolders": ["/elsewhere"],\n'
                                                  '  "banner": "never"\n}\n')
    review = run_cli("trust", "--yes", "--accept-risk", cwd=project)
    assert review.returncode == 0, review.stderr
    # The review says what will change outside the project, readably.
    shown = "".join((review.stdout + review.stderr).split())  # the review wraps long lines
    assert "trustedFolders+=" + "".join(str(project).split()) in shown, review.stdout
    assert "\0" not in review.stdout + review.stderr
    _ok("apply", "--write", cwd=project)
    text = config.read_text()
    assert text.startswith(HEADER), text  # Copilot's comments survive
    data = json.loads(text[len(HEADER):])
    assert data == {"trustedFolders": ["/elsewhere", str(project)], "banner": "never"}
    assert run_cli("apply", "--check", cwd=project).returncode == 0  # idempotent
    hook = json.loads((isolated_home / ".copilot/hooks/agentstack-guard.json").read_text())
    assert "agentstack._guard import main; main()' --harness copilot" in hook["hooks"]["preToolUse"][0]["bash"]
    _ok("revoke", cwd=project)
    text = config.read_text()
    assert text.startswith(HEADER)
    assert json.loads(text[len(HEADER):]) == {"trustedFolders": ["/elsewhere"], "banner": "never"}
    assert (isolated_home / ".copilot/hooks/agentstack-guard.json").exists()  # kept on revoke


def test_trusted_folder_list_created_and_removed_when_alone(project: Path,
                                                            isolated_home: Path) -> None:
    config = _user_config(isolated_home, HEADER + "{}\n")
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    assert json.loads(config.read_text()[len(HEADER):]) == {"trustedFolders": [str(project)]}
    _ok("revoke", cwd=project)
    assert config.read_text() == HEADER + "{}\n"


def test_a_comment_inside_the_config_is_refused_not_dropped(project: Path,
                                                            isolated_home: Path) -> None:
    original = HEADER + '{\n  // mine\n  "trustedFolders": []\n}\n'
    config = _user_config(isolated_home, original)
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    result = run_cli("apply", "--write", cwd=project)
    assert result.returncode == 1 and "cannot be parsed as JSONC" in result.stderr, result.stderr
    assert config.read_text() == original


def test_disable_all_hooks_in_the_project_is_drift(project: Path) -> None:
    from agentstack._guard import Deny, check_files

    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    snapshot = guard_snapshot(project)
    check_files(snapshot)
    settings = project / ".github" / "copilot" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"disableAllHooks": true}')
    with pytest.raises(Deny, match=r"\.github/copilot/settings\.json"):
        check_files(snapshot)


def test_a_watched_file_with_comments_is_pinned_and_watched(project: Path) -> None:
    """`.github/copilot/settings.json` with comments (not JSON to agentstack): `lock` pins it by
    its bytes and the review reports it; `apply --write` works (it used to crash writing the
    snapshot); the guard allows it as trusted and denies once it changes (a hook added)."""
    from agentstack._guard import Deny, check_files

    settings = project / ".github" / "copilot" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('// mine\n{"model": "x"}\n')
    assert run_cli("trust", "--yes", "--accept-risk", cwd=project).returncode == 1  # stale lock
    _ok("lock", cwd=project)
    review = run_cli("trust", "--yes", cwd=project)
    assert review.returncode == 1 and "--accept-risk" in review.stderr  # unparseable: high
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    snapshot = guard_snapshot(project)
    check_files(snapshot)  # what was reviewed
    settings.write_text('// mine\n{"model": "x", "hooks": {"preToolUse": []}}\n')
    with pytest.raises(Deny, match=r"\.github/copilot/settings\.json"):
        check_files(snapshot)
    settings.unlink()
    _ok("lock", cwd=project)
    _ok("trust", "--yes", cwd=project)
    _ok("apply", "--write", cwd=project)
    check_files(guard_snapshot(project))


def test_the_rendered_hooks_file_is_not_foreign_but_a_key_added_to_it_is(project: Path) -> None:
    """`.github/hooks/agentstack.json` lies in a surface tree (`.github/hooks/**`): agentstack
    renders keys into it, so after `apply --write` the lock still holds; a key added next to
    agentstack's is foreign (pinned, so the lock is stale) and the guard sees the edit."""
    from agentstack._guard import Deny, check_files
    from agentstack.lock.resolve import read_lock

    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    hooks = project / ".github" / "hooks" / "agentstack.json"
    assert hooks.is_file()
    _ok("apply", "--check", cwd=project)
    _ok("status", cwd=project)
    lock = read_lock(project)
    assert lock is not None and ".github/hooks/agentstack.json" not in lock.get("surface", {})
    snapshot = guard_snapshot(project)
    check_files(snapshot)
    doc = json.loads(hooks.read_text())
    doc["disableAllHooks"] = True
    hooks.write_text(json.dumps(doc))
    with pytest.raises(Deny, match=r"\.github/hooks/agentstack\.json"):
        check_files(snapshot)
    stale = run_cli("apply", "--check", cwd=project)
    assert stale.returncode == 1 and "surface[.github/hooks/agentstack.json]" in stale.stderr
    _ok("lock", cwd=project)
    pinned = read_lock(project)
    assert pinned is not None
    entry = pinned["surface"][".github/hooks/agentstack.json"]
    assert entry["kind"] == "keys" and entry["keys"] == ["disableAllHooks"]


@pytest.mark.parametrize(("tool", "denied"), [
    ("notes-add_note", None),
    ("bash", None),
    ("outside-add_note", r"not in agentstack\.lock"),
    # A name that does not split exactly one way is denied: `my-notes-add_note` could be tool
    # `notes-add_note` of a server `my` outside the lock.
    ("my-notes-add_note", r"not in agentstack\.lock"),
    ("notes-add-note", r"exactly one locked server"),
])
def test_copilot_mcp_tool_names(tmp_path: Path, tool: str, denied: str | None) -> None:
    from agentstack._guard import Deny, check_call

    snapshot = {"servers": ["notes", "my-notes"], "policy": {}}
    event = {"toolName": tool, "toolArgs": {}}
    if denied is None:
        check_call(snapshot, event, str(tmp_path), "copilot")
    else:
        with pytest.raises(Deny, match=denied):
            check_call(snapshot, event, str(tmp_path), "copilot")
    # Copilot's arguments arrive as a JSON string too.
    if denied is None:
        check_call(snapshot, {"toolName": tool, "toolArgs": "{}"}, str(tmp_path), "copilot")


# ------------------------------------------------------------------------------ real copilot


def copilot_env(home: Path, **extra: str) -> dict[str, str]:
    # Copilot unpacks its 235 MB native package into the cache on first run: share one cache.
    return harness_env(home, XDG_CACHE_HOME=str(REPO / ".tools" / "copilot-cache"), **extra)


def copilot_mcp_list(root: Path, home: Path) -> str:
    return mcp_list("copilot", root, copilot_env(home))


@pytest.mark.slow
def test_copilot_mcp_list_only_after_trust(project: Path, isolated_home: Path) -> None:
    harness_bin("copilot")
    _user_config(isolated_home, HEADER + "{}\n")
    assert run_cli("apply", "--write", cwd=project).returncode == 1
    before = copilot_mcp_list(project, isolated_home)
    assert "notes" not in before and "journal" not in before, before
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    after = copilot_mcp_list(project, isolated_home)
    assert "Workspace servers:" in after, after
    for server in ("notes", "journal"):
        assert any(ln.split()[:1] == [server] for ln in after.splitlines()), after


def run_copilot(root: Path, home: Path, call: ToolCall) -> tuple[bool, str]:
    """(did the call run?, what the model was told)."""
    ran, text, _ = drive(
        root, call, [str(harness_bin("copilot")), "-p", "do it", "--allow-all-tools"],
        lambda model: copilot_env(home, COPILOT_PROVIDER_BASE_URL=model.openai_base_url,
                                  COPILOT_MODEL="gpt-4o"))
    return ran, text


@pytest.mark.slow
def test_copilot_guard_end_to_end(project: Path, isolated_home: Path) -> None:
    harness_bin("copilot")
    _user_config(isolated_home, HEADER + "{}\n")
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    ran, text = run_copilot(project, isolated_home, TOUCH)
    assert ran, text
    ran, text = run_copilot(project, isolated_home,
                            ToolCall("mcp__notes__add_note", {"text": "ok"}))
    assert ran, text

    # A server the user added at user level, not in the lock: its `server-tool` is blocked.
    (isolated_home / ".copilot" / "mcp-config.json").write_text(json.dumps({"mcpServers": {
        "outside": {"type": "local", "command": sys.executable,
                    "args": ["-I", str(NOTES_SERVER)], "tools": ["*"]}}}))
    ran, text = run_copilot(project, isolated_home,
                            ToolCall("mcp__outside__add_note", {"text": "exfiltrate"}))
    assert not ran and "not in agentstack.lock" in text, text

    # Edited behind agentstack's back (the file Claude Code shares): blocked, naming the file.
    mcp = project / ".mcp.json"
    data = json.loads(mcp.read_text())
    data["mcpServers"]["notes"]["args"].append("--debug")
    mcp.write_text(json.dumps(data, indent=2))
    ran, text = run_copilot(project, isolated_home, TOUCH)
    assert not ran and ".mcp.json" in text and "agentstack guard" in text, text
    _ok("apply", "--write", "--force", cwd=project)
    ran, text = run_copilot(project, isolated_home, TOUCH)
    assert ran, text

    # After revoke Copilot no longer trusts the folder and skips its repo hooks; the user-level
    # guard still runs, and blocks.
    _ok("revoke", cwd=project)
    ran, text = run_copilot(project, isolated_home, TOUCH)
    assert not ran and "revoked" in text and "agentstack guard" in text, text

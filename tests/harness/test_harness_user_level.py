"""The user-level setup under the real Claude Code and Codex, offline (a mock model API on
127.0.0.1): after `trust --user` + `apply --user --write` its server is listed by `claude mcp list`
and `codex mcp list` in a directory that is no project, its tool runs there, and the guard blocks
the tool after a hand edit of the user-level config and after `revoke --user` (the entry, restored
by hand, stays blocked).

Skips locally when the harness CLIs are missing (scripts/install-harnesses); fails in CI (CI=true).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.harness.binaries import harness_bin
from tests.harness.drive import NOTES_SERVER, run_claude, run_codex
from tests.harness.mock_model import MockModel, ToolCall
from tests.harness.test_harness_e2e import _codex_config, _codex_config_model, _mcp_list
from tests.support.cli import ok as _ok

CALL = ToolCall("mcp__notes__add_note", {"text": "from anywhere"})


@pytest.fixture
def anywhere(tmp_path: Path, isolated_home: Path) -> Path:
    """A directory that is no agentstack project, and a trusted, applied user-level setup."""
    where = tmp_path / "somewhere else"
    where.mkdir()
    notes = where / "notes.txt"  # inside the directory the server is confined to
    _ok("init", "--user", cwd=where)
    _ok("add", "server", "--user", "notes", "--env", f"NOTES_FILE={notes}", "--",
        sys.executable, "-I", str(NOTES_SERVER), cwd=where)
    # The server runs confined (its relay's sandbox): it may write its notes file where the
    # user-level setup's [sandbox] says, from any directory it is started in.
    manifest = Path(os.environ["AGENTSTACK_HOME"]) / "agentstack.toml"
    text = manifest.read_text()
    assert text.count('\n[sandbox]\nwrite_dirs = ["."]\n') == 1, text
    manifest.write_text(text.replace(
        '\n[sandbox]\nwrite_dirs = ["."]\n',
        f'\n[sandbox]\nwrite_dirs = [".", {json.dumps(str(where.resolve()))}]\n'))
    _ok("lock", "--user", cwd=where)
    return where.resolve()


def _claude(where: Path, home: Path) -> tuple[bool, str]:
    with MockModel([CALL]) as model:
        run = run_claude(where, home, model, "note it")
    assert run.proc.returncode == 0, run.output
    if not model.tool_results:
        return False, run.output
    (result,) = model.tool_results
    return "added note" in result.text and result.is_error is not True, result.text


def test_claude_lists_runs_and_guards_a_user_level_server(anywhere: Path,
                                                          isolated_home: Path) -> None:
    harness_bin("claude")
    settings = isolated_home / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    # The user's own settings (kept): in -p mode an MCP tool needs an allow rule.
    settings.write_text(json.dumps({"permissions": {"allow": ["mcp__notes__add_note"]}}))
    assert "notes" not in _mcp_list("claude-code", anywhere, isolated_home)
    _ok("trust", "--user", "--yes", "--accept-risk", cwd=anywhere)
    _ok("apply", "--user", "--write", cwd=anywhere)
    listed = _mcp_list("claude-code", anywhere, isolated_home)
    assert "notes:" in listed and "Connected" in listed, listed
    ran, text = _claude(anywhere, isolated_home)
    assert ran, text

    claude_json = isolated_home / ".claude.json"
    doc = json.loads(claude_json.read_text())
    doc["mcpServers"]["notes"]["args"].append("--debug")
    claude_json.write_text(json.dumps(doc))
    ran, text = _claude(anywhere, isolated_home)
    assert not ran and "agentstack guard" in text and "user-level setup" in text, text
    _ok("apply", "--user", "--write", "--force", cwd=anywhere)
    assert _claude(anywhere, isolated_home)[0]

    saved = json.loads(claude_json.read_text())["mcpServers"]
    _ok("revoke", "--user", cwd=anywhere)
    assert "notes:" not in _mcp_list("claude-code", anywhere, isolated_home)
    doc = json.loads(claude_json.read_text())
    doc["mcpServers"] = saved  # restored by hand (a backup, a sync tool, an injection)
    claude_json.write_text(json.dumps(doc))
    ran, text = _claude(anywhere, isolated_home)
    # Revoked: the relay does not start the server at all (no such tool), or the guard denies it.
    assert not ran and any(w in text for w in ("revoked", "No such tool", "unsupported call")), text


def _codex(where: Path, home: Path) -> tuple[bool, str]:
    with MockModel([CALL]) as model:
        _codex_config_model(home, model)
        run = run_codex(where, home, "note it")
    assert run.proc.returncode == 0, run.output
    texts = [r.text for r in model.tool_results]
    if not texts:
        return False, run.output
    return "added note" in texts[0], texts[0]


def test_codex_lists_runs_and_guards_a_user_level_server(anywhere: Path,
                                                         isolated_home: Path) -> None:
    harness_bin("codex")
    with MockModel([]) as placeholder:
        _codex_config(isolated_home, placeholder)  # the user's own Codex settings (kept)
    _ok("trust", "--user", "--yes", "--accept-risk", cwd=anywhere)
    _ok("apply", "--user", "--write", cwd=anywhere)
    listed = _mcp_list("codex", anywhere, isolated_home)
    assert "notes" in listed and "enabled" in listed, listed
    assert (isolated_home / ".codex" / "config.toml").read_text().startswith("# my codex")
    ran, text = _codex(anywhere, isolated_home)
    assert ran, text

    config = isolated_home / ".codex" / "config.toml"
    config.write_text(config.read_text().replace('"-I"', '"-I", "-v"', 1))
    ran, text = _codex(anywhere, isolated_home)
    assert not ran and "user-level setup" in text, text
    _ok("apply", "--user", "--write", "--force", cwd=anywhere)
    assert _codex(anywhere, isolated_home)[0]

    import tomllib

    saved = tomllib.loads(config.read_text())["mcp_servers"]["notes"]
    _ok("revoke", "--user", cwd=anywhere)
    assert "notes" not in _mcp_list("codex", anywhere, isolated_home)
    lines = [f"command = {json.dumps(saved['command'])}",
             "args = [" + ", ".join(json.dumps(a) for a in saved["args"]) + "]"]
    if "cwd" in saved:
        lines.append(f"cwd = {json.dumps(saved['cwd'])}")
    if saved.get("env"):
        lines.append("env = { " + ", ".join(f"{k} = {json.dumps(v)}"
                                            for k, v in saved["env"].items()) + " }")
    config.write_text(config.read_text() + "\n[mcp_servers.notes]\n" + "\n".join(lines) + "\n")
    ran, text = _codex(anywhere, isolated_home)
    # Revoked: the relay does not start the server at all (no such tool), or the guard denies it.
    assert not ran and any(w in text for w in ("revoked", "No such tool", "unsupported call")), text


def test_claude_in_a_project_runs_a_user_level_server_by_its_own_trust(
    anywhere: Path, isolated_home: Path, tmp_path: Path
) -> None:
    harness_bin("claude")
    from tests.conftest import make_project

    project = make_project(tmp_path / "proj", """\
[project]
name = "proj"
harnesses = ["claude-code"]

[settings.permissions]
allow = ["mcp__notes__add_note"]
""").resolve()
    _ok("lock", cwd=project)
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    _ok("trust", "--user", "--yes", "--accept-risk", cwd=anywhere)
    _ok("apply", "--user", "--write", cwd=anywhere)
    ran, text = _claude(project, isolated_home)
    assert ran, text  # not the project's server: the user-level setup's, by its own trust
    # the user-level setup drifts: its server is blocked in the project too
    claude_json = isolated_home / ".claude.json"
    doc = json.loads(claude_json.read_text())
    doc["mcpServers"]["notes"]["args"].append("--debug")
    claude_json.write_text(json.dumps(doc))
    ran, text = _claude(project, isolated_home)
    assert not ran and "user-level setup" in text, text
    _ok("apply", "--user", "--write", "--force", cwd=anywhere)
    assert _claude(project, isolated_home)[0]
    # the project drifts: every tool there is blocked, the user-level ones too
    manifest = project / "agentstack.toml"
    manifest.write_text(manifest.read_text().replace('name = "proj"', 'name = "changed"'))
    ran, text = _claude(project, isolated_home)
    assert not ran, text

"""The real Claude Code and Codex CLIs, offline, against what agentstack renders.

Rendering: after `trust --yes` and `apply --write`, `claude mcp list` reports every locked stdio
server connected and `codex mcp list` lists every one enabled; before trust nothing is written and
neither lists anything from agentstack.

The guard: a mock model API on 127.0.0.1 makes the harness issue a real tool call that hits the
real guard: trusted and unchanged → it runs; a rendered file edited behind agentstack's back → the
prompt is blocked before any model request (Claude Code shows the reason, naming the file); a tool
of a server not in the lock → blocked; after `revoke` → blocked.

These tests skip locally when the harness CLIs are missing (scripts/install-harnesses) and fail in
CI (CI=true).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_project, run_cli
from tests.harness.binaries import harness_bin, harness_env
from tests.harness.deadline import scaled
from tests.harness.drive import CODEX_OFFLINE_TOML, NOTES_SERVER, run_claude, run_codex
from tests.harness.mock_model import MockModel, ToolCall
from tests.support.cli import ok as _ok

TOUCH = ToolCall("Bash", {"command": "touch marker.txt"})


def manifest(notes_file: Path) -> str:
    server = f"""command = {json.dumps(sys.executable)}
args = ["-I", {json.dumps(str(NOTES_SERVER))}]
env = {{ NOTES_FILE = {json.dumps(str(notes_file))} }}
"""
    return f"""\
[project]
name = "e2e"
harnesses = ["claude-code", "codex"]

[servers.notes]
{server}
[servers.journal]
{server}
[instructions]
files = ["AGENTS.base.md"]

[settings.permissions]
allow = ["Bash(touch marker.txt)", "mcp__outside__add_note", "mcp__notes__add_note"]

[sandbox]
write_dirs = ["."]
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    # A non-ASCII directory: Codex hashes hook commands (which name it) as raw UTF-8.
    # The notes file in the project: behind the relay, a server is confined to it by default.
    root = make_project(tmp_path / "projé e2e", manifest(tmp_path / "projé e2e" / "notes.txt"),
                        {"AGENTS.base.md": "Be careful.\n"})
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    assert run_cli("lock", cwd=root).returncode == 0
    return root.resolve()


def _trust_and_apply(root: Path) -> None:
    _ok("trust", "--yes", "--accept-risk", cwd=root)
    _ok("apply", "--write", cwd=root)


def _venv_path(home: Path) -> str:
    # The servers run with the interpreter agentstack was installed with (absolute in the lock).
    return harness_env(home)["PATH"]


def _codex_config(home: Path, model: MockModel | None) -> None:
    """The user's own Codex settings (model provider), next to what agentstack adds."""
    config = home / ".codex" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    lines = ['# my codex settings', 'approval_policy = "never"',
             'sandbox_mode = "danger-full-access"']
    if model is not None:
        lines += ['model = "gpt-5.1-codex"', 'model_provider = "mock"', "",
                  "[model_providers.mock]", 'name = "mock"',
                  f'base_url = "{model.openai_base_url}"', 'wire_api = "responses"']
    config.write_text("\n".join(lines) + "\n" + CODEX_OFFLINE_TOML)


def _mcp_list(harness: str, root: Path, home: Path) -> str:
    argv = [str(harness_bin("claude" if harness == "claude-code" else "codex")), "mcp", "list"]
    result = subprocess.run(argv, cwd=root, env=harness_env(home), capture_output=True,
                            text=True, timeout=scaled(120))
    return result.stdout + result.stderr


# ------------------------------------------------------------------------------ rendering


def test_claude_mcp_list_only_after_trust(project: Path, isolated_home: Path) -> None:
    harness_bin("claude")
    refused = run_cli("apply", "--write", cwd=project)
    assert refused.returncode == 1
    before = _mcp_list("claude-code", project, isolated_home)
    assert "notes" not in before and "journal" not in before, before
    _trust_and_apply(project)
    after = _mcp_list("claude-code", project, isolated_home)
    for server in ("notes", "journal"):
        line = next((ln for ln in after.splitlines() if ln.startswith(f"{server}:")), "")
        assert "✔ Connected" in line, after


def test_codex_mcp_list_and_hook_trust_only_after_trust(project: Path,
                                                        isolated_home: Path) -> None:
    from tests.harness.drive import codex_hooks_list

    harness_bin("codex")
    _codex_config(isolated_home, None)
    assert run_cli("apply", "--write", cwd=project).returncode == 1
    before = _mcp_list("codex", project, isolated_home)
    assert "notes" not in before and "journal" not in before, before
    _trust_and_apply(project)
    after = _mcp_list("codex", project, isolated_home)
    for server in ("notes", "journal"):
        line = next((ln for ln in after.splitlines() if ln.split() and ln.split()[0] == server), "")
        assert "enabled" in line, after
    # Codex runs a project hook only when its trusted_hash matches: every rendered hook must.
    hooks = codex_hooks_list(project, isolated_home)
    ours = [h for h in hooks if "agentstack._guard" in h.get("command", "")]
    assert ours and all(h["trustStatus"] == "trusted" for h in ours), hooks
    assert (isolated_home / ".codex" / "config.toml").read_text().startswith("# my codex settings")


# ------------------------------------------------------------------------------ the guard


def _claude(project: Path, home: Path, call: ToolCall) -> tuple[bool, str]:
    """(did the call run?, what the model was told)."""
    with MockModel([call]) as model:
        run = run_claude(project, home, model, "do it")
    assert run.proc.returncode == 0, run.output
    if not model.tool_results:  # the guard blocked the prompt itself: no model request at all
        assert not [r for r in model.requests if r.method == "POST" and r.api], run.output
        return False, run.proc.stdout
    (result,) = model.tool_results
    ran = (project / "marker.txt").exists() if call is TOUCH else "added note" in result.text
    return ran and result.is_error is not True, result.text


@pytest.mark.slow
def test_claude_guard_end_to_end(project: Path, isolated_home: Path) -> None:
    harness_bin("claude")
    _trust_and_apply(project)
    ran, text = _claude(project, isolated_home, TOUCH)
    assert ran and (project / "marker.txt").exists(), text
    (project / "marker.txt").unlink()

    # Edited behind agentstack's back: blocked, and the reason names the file.
    mcp = project / ".mcp.json"
    data = json.loads(mcp.read_text())
    data["mcpServers"]["notes"]["args"].append("--debug")
    mcp.write_text(json.dumps(data, indent=2))
    ran, text = _claude(project, isolated_home, TOUCH)
    assert not ran and not (project / "marker.txt").exists()
    assert ".mcp.json" in text and "agentstack guard" in text, text
    _ok("apply", "--write", "--force", cwd=project)

    # A server the harness loads from elsewhere (user scope), not in the lock: its tool is blocked.
    claude_json = isolated_home / ".claude.json"
    state = json.loads(claude_json.read_text())
    state["mcpServers"] = {"outside": {"type": "stdio", "command": sys.executable,
                                       "args": ["-I", str(NOTES_SERVER)]}}
    claude_json.write_text(json.dumps(state))
    ran, text = _claude(project, isolated_home,
                        ToolCall("mcp__outside__add_note", {"text": "exfiltrate"}))
    assert not ran and "not in agentstack.lock" in text, text
    ran, text = _claude(project, isolated_home, ToolCall("mcp__notes__add_note", {"text": "ok"}))
    assert ran, text

    # After revoke: blocked.
    _ok("revoke", cwd=project)
    ran, text = _claude(project, isolated_home, TOUCH)
    assert not ran and not (project / "marker.txt").exists(), text


def _codex(project: Path, home: Path, call: ToolCall) -> tuple[bool, str]:
    with MockModel([call]) as model:
        _codex_config_model(home, model)
        run = run_codex(project, home, "do it")
    assert run.proc.returncode == 0, run.output
    texts = [r.text for r in model.tool_results]
    if not texts:  # the guard blocked the prompt itself: no model request at all
        assert not [r for r in model.requests if r.method == "POST" and r.api], run.output
        return False, run.output
    ran = (project / "marker.txt").exists() if call is TOUCH else "added note" in texts[0]
    return ran, texts[0]


def _codex_config_model(home: Path, model: MockModel) -> None:
    """Point the user's Codex config at this run's mock (keeping agentstack's entries)."""
    import tomlkit

    config = home / ".codex" / "config.toml"
    doc = tomlkit.parse(config.read_text())
    doc["model_providers"]["mock"]["base_url"] = model.openai_base_url  # type: ignore[index]
    config.write_text(tomlkit.dumps(doc))


def test_codex_guard_end_to_end(project: Path, isolated_home: Path) -> None:
    harness_bin("codex")
    with MockModel([]) as placeholder:
        _codex_config(isolated_home, placeholder)
    _trust_and_apply(project)
    ran, text = _codex(project, isolated_home, TOUCH)
    assert ran, text
    (project / "marker.txt").unlink()

    config = project / ".codex" / "config.toml"
    config.write_text(config.read_text().replace('"-I"', '"-I", "-v"'))
    ran, text = _codex(project, isolated_home, TOUCH)
    # Blocked before the first model request (Codex exec does not print the hook's reason).
    assert not ran and "UserPromptSubmit Blocked" in text, text
    _ok("apply", "--write", "--force", cwd=project)

    user_config = isolated_home / ".codex" / "config.toml"
    user_config.write_text(user_config.read_text() + "\n[mcp_servers.outside]\n"
                           f"command = {json.dumps(sys.executable)}\n"
                           f"args = [\"-I\", {json.dumps(str(NOTES_SERVER))}]\n")
    ran, text = _codex(project, isolated_home,
                       ToolCall("mcp__outside__add_note", {"text": "exfiltrate"}))
    assert not ran and "not in agentstack.lock" in text, text

    _ok("revoke", cwd=project)
    ran, text = _codex(project, isolated_home, TOUCH)
    assert not ran, text

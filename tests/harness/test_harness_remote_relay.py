"""A remote (URL) MCP server through the relay, with the real Claude Code and Codex.

The server is a real Streamable-HTTP MCP server on 127.0.0.1 (tests/sandbox/remote_server.py);
`apply --write` renders it as the relay's remote mode, a stdio command. `claude mcp list` connects
to it through the relay, `codex mcp list` lists the relay as the server's command, and a session
of each against the mock model is offered the remote's tools as the relay passes them: the denied
one never, a changed description never until `agentstack trust` reviews it. The secret header
reaches the remote; neither harness's config nor environment holds it.

These tests skip locally when the harness CLIs are missing and fail in CI (CI=true).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_cli_in_process
from tests.harness.binaries import harness_bin, harness_env
from tests.harness.deadline import scaled
from tests.harness.mock_model import MockModel, ToolCall
from tests.harness.test_harness_e2e import _codex_config
from tests.harness.test_harness_relay import _requests_text, _run
from tests.sandbox.remote_server import DESCRIPTION, RemoteServer
from tests.sandbox.test_remote_relay import CHANGED, SECRET, trusted_project

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

PERMISSIONS = """
[settings.permissions]
allow = ["mcp__notes__add_note", "mcp__notes__erase_notes", "mcp__notes__whoami"]
"""


@pytest.fixture
def server() -> Iterator[RemoteServer]:
    remote = RemoteServer()
    yield remote
    remote.stop()


def _mcp_list(binary: str, root: Path, home: Path) -> str:
    result = subprocess.run([str(harness_bin(binary)), "mcp", "list"], cwd=root,
                            env=harness_env(home), capture_output=True, text=True,
                            timeout=scaled(120))
    return result.stdout + result.stderr


def test_claude_and_codex_mcp_list_show_the_remote_through_the_relay(
    tmp_path: Path, isolated_home: Path, server: RemoteServer,
) -> None:
    harness_bin("claude")
    harness_bin("codex")
    _codex_config(isolated_home, None)
    root = trusted_project(tmp_path, server.url)

    claude = _mcp_list("claude", root, isolated_home)
    line = next((ln for ln in claude.splitlines() if ln.startswith("notes:")), "")
    assert "agentstack.launch" in line and f"--remote {server.url}" in line, claude
    assert "✔ Connected" in line, claude
    posts = [r for r in server.seen() if r["method"] == "POST"]
    assert posts and all(r["authorization"] == SECRET for r in posts)  # added by the relay

    codex = _mcp_list("codex", root, isolated_home)
    line = next((ln for ln in codex.splitlines() if ln.split() and ln.split()[0] == "notes"), "")
    assert "agentstack.launch" in line and server.url in line and "enabled" in line, codex
    for config in (root / ".mcp.json", root / ".codex" / "config.toml"):
        assert SECRET not in config.read_text() and "AGENTSTACK_SECRET_" not in config.read_text()
    assert SECRET not in json.dumps(harness_env(isolated_home))


@pytest.mark.parametrize("harness", ["claude-code", "codex"])
def test_the_remote_tools_the_model_is_offered_are_the_relays(
    harness: str, tmp_path: Path, isolated_home: Path, server: RemoteServer,
) -> None:
    harness_bin("claude" if harness == "claude-code" else "codex")
    if harness == "codex":
        with MockModel([]) as placeholder:
            _codex_config(isolated_home, placeholder)
    root = trusted_project(tmp_path, server.url,
                           tools='tools = { deny = ["erase_notes"] }\n' + PERMISSIONS)

    # Pinned at the first start; the denied tool is neither offered nor run when asked for.
    model = _run(harness, root, isolated_home, [ToolCall("mcp__notes__erase_notes", {})])
    offered = model.tools_offered()
    assert "mcp__notes__add_note" in offered and "mcp__notes__whoami" in offered, offered
    assert "mcp__notes__erase_notes" not in offered, offered
    assert DESCRIPTION in _requests_text(model)
    assert "erase_notes" not in server.ran

    # The remote changes add_note's description: withheld; the new text never reaches the model.
    server.mcp.description_now = CHANGED
    model = _run(harness, root, isolated_home, [ToolCall("mcp__notes__add_note", {"text": "x"})])
    offered = model.tools_offered()
    assert "mcp__notes__whoami" in offered and "mcp__notes__add_note" not in offered, offered
    assert "IGNORE ALL PREVIOUS" not in _requests_text(model)
    assert server.ran == []

    reviewed = run_cli_in_process("trust", "--yes", cwd=root)
    assert reviewed.returncode == 0, reviewed.stderr
    model = _run(harness, root, isolated_home, [])
    assert "mcp__notes__add_note" in model.tools_offered()
    assert "IGNORE ALL PREVIOUS" in _requests_text(model)


def test_claude_inside_run_reaches_the_remote_through_runs_broker(
    tmp_path: Path, server: RemoteServer,
) -> None:
    """Inside `agentstack run` the harness's sandbox reaches only run's broker, which runs the
    relay's remote mode with the header secret from the store: the real Claude Code calls the
    remote's tool; the secret reaches the remote and nothing the harness holds."""
    import tempfile

    from agentstack.sandbox import verify
    from tests.conftest import make_project, run_cli
    from tests.harness.test_harness_relay import REAL_KEY

    claude = harness_bin("claude")
    home = Path(tempfile.mkdtemp(dir=verify.DECOY_ROOT, prefix="agentstack-remote-home-")).resolve()
    root = (tmp_path / "proj").resolve()
    script = [ToolCall("mcp__notes__add_note", {"text": "inside run"}),
              ToolCall("Bash", {"command": "env"})]
    with MockModel(script) as model:
        make_project(root, f"""\
[project]
name = "remote-run"
harnesses = ["claude-code"]

[servers.notes]
url = {json.dumps(server.url)}
headers = {{ Authorization = "secret:notes-token" }}

[settings.permissions]
allow = ["mcp__notes__add_note", "Bash(env)"]

[sandbox]
write_dirs = ["."]
env = ["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "CLAUDE_CODE_MAX_RETRIES", "DISABLE_AUTOUPDATER"]

[sandbox.credentials.anthropic]
upstream = "{model.url}"
secret = "anthropic"
header = "x-api-key"
env = "ANTHROPIC_API_KEY"
base_url_env = "ANTHROPIC_BASE_URL"
""")
        env = {"HOME": str(home), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
               "CLAUDE_CODE_MAX_RETRIES": "0", "DISABLE_AUTOUPDATER": "1"}
        for args in (["lock"], ["trust", "--yes", "--accept-risk"], ["apply", "--write"]):
            result = run_cli(*args, cwd=root, env=env)
            assert result.returncode == 0, result.stderr
        for name, value in (("anthropic", REAL_KEY), ("notes-token", SECRET)):
            assert run_cli("secret", "set", name, cwd=root, input=value + "\n",
                           env=env).returncode == 0
        run = run_cli("run", "--harness", "claude-code", "--", str(claude), "-p", "go",
                      "--output-format", "json", cwd=root, env=env)
        assert run.returncode == 0, run.stdout + run.stderr
    first, second = model.tool_results
    assert "added note 'inside run'" in first.text and first.is_error is not True, first.text
    assert server.ran == ["add_note:inside run"]
    posts = [r for r in server.seen() if r["method"] == "POST"]
    assert posts and all(r["authorization"] == SECRET for r in posts)
    assert "HOME=" in second.text and SECRET not in second.text, second.text
    for where in (root, home):
        found = subprocess.run(["grep", "-r", "-l", SECRET, str(where)], capture_output=True,
                               text=True)
        assert not found.stdout, found.stdout

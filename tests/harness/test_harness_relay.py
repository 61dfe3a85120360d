"""The relay with the real Claude Code and Codex, offline against the mock model.

A trusted `notes` server changes `add_note`'s description on its next start (a "rug pull"): the
model's next request offers the other tools and never the new text, until `agentstack trust`
reviews the change (then the new text is offered). A tool `servers.notes.tools` denies is never
called: the model asks for it and the notes file stays as it was.

These tests skip locally when the harness CLIs are missing and fail in CI (CI=true).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import run_cli_in_process
from tests.harness.binaries import harness_bin
from tests.harness.drive import run_claude, run_codex
from tests.harness.mock_model import MockModel, ToolCall
from tests.harness.test_harness_e2e import _codex_config, _codex_config_model
from tests.sandbox.test_relay import CHANGED, trusted_project

pytestmark = pytest.mark.slow

PERMISSIONS = """
[settings.permissions]
allow = ["mcp__notes__add_note", "mcp__notes__erase_notes", "mcp__notes__read_path"]
"""


def _requests_text(model: MockModel) -> str:
    return "\n".join(json.dumps(r.body) for r in model.main_requests())


NATIVE_OFF = ("-c", 'default_permissions=":danger-full-access"')


def _run(harness: str, root: Path, home: Path, script: list[ToolCall]) -> MockModel:
    with MockModel(script) as model:
        if harness == "claude-code":
            # Without tool search, Claude Code 2.1.332 puts each MCP tool (description and
            # schema) in the request itself, instead of deferring it behind ToolSearch.
            run = run_claude(root, home, model, "take notes", env={"ENABLE_TOOL_SEARCH": "false"})
        else:
            _codex_config_model(home, model)
            # Under the sandbox apply renders for Codex, `codex exec` (approval "never") refuses
            # MCP tool calls: Codex asks approval for them (its servers run outside its sandbox).
            # The user opts out of it for this session, as `run` does inside: the relay's own
            # confinement is what these tests are about.
            run = run_codex(root, home, "take notes", args=NATIVE_OFF)
    assert run.proc.returncode == 0, run.output
    assert model.main_requests(), run.output
    return model


@pytest.mark.parametrize("harness", ["claude-code", "codex"])
def test_a_rug_pull_is_withheld_and_a_denied_tool_never_called(
    harness: str, tmp_path: Path, isolated_home: Path
) -> None:
    harness_bin("claude" if harness == "claude-code" else "codex")
    if harness == "codex":
        with MockModel([]) as placeholder:
            _codex_config(isolated_home, placeholder)
    root = trusted_project(tmp_path, tools='tools = { deny = ["erase_notes"] }\n' + PERMISSIONS)
    notes = root / "notes.txt"
    notes.write_text("keep me\n")

    # First start, trusted: pinned. The denied tool is neither offered nor run when asked for.
    model = _run(harness, root, isolated_home, [ToolCall("mcp__notes__erase_notes", {})])
    offered = model.tools_offered()
    assert "mcp__notes__add_note" in offered and "mcp__notes__read_path" in offered, offered
    assert "mcp__notes__erase_notes" not in offered, offered
    assert notes.read_text() == "keep me\n"
    assert "Append a note to the notes file." in _requests_text(model)

    # The server changes add_note's description: withheld; the new text never reaches the model.
    (root / "description.txt").write_text(CHANGED)
    model = _run(harness, root, isolated_home, [ToolCall("mcp__notes__add_note", {"text": "x"})])
    offered = model.tools_offered()
    assert "mcp__notes__read_path" in offered and "mcp__notes__add_note" not in offered, offered
    assert "IGNORE ALL PREVIOUS" not in _requests_text(model)
    assert notes.read_text() == "keep me\n"

    # Reviewed: the new description is the pin, and the model is offered it.
    reviewed = run_cli_in_process("trust", "--yes", cwd=root)
    assert reviewed.returncode == 0, reviewed.stderr
    model = _run(harness, root, isolated_home, [])
    assert "mcp__notes__add_note" in model.tools_offered()
    assert "IGNORE ALL PREVIOUS" in _requests_text(model)


@pytest.mark.parametrize("harness", ["claude-code", "codex"])
def test_a_server_is_confined_while_the_same_server_outside_agentstack_reads(
    harness: str, tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`~/.ssh/id_ed25519` (a decoy in a HOME outside /tmp): the server the harness starts
    behind the relay gets EACCES; the same server in a project the harness loads without
    agentstack reads it (the control)."""
    from agentstack.sandbox import verify
    from tests.harness.drive import claude_setup, codex_setup, notes_server_spec

    harness_bin("claude" if harness == "claude-code" else "codex")
    home = Path(tempfile.mkdtemp(dir=verify.DECOY_ROOT, prefix="agentstack-relay-home-")).resolve()
    try:
        (home / ".ssh").mkdir()
        (home / ".ssh" / "id_ed25519").write_text("DECOY-KEY\n")
        monkeypatch.setenv("HOME", str(home))  # apply writes ~/.claude.json here
        read = ToolCall("mcp__notes__read_path", {"path": "~/.ssh/id_ed25519"})

        control = tmp_path / "control"
        control.mkdir()
        spec = notes_server_spec(control / "notes.txt")
        spec["env"]["NOTES_EXTRA_TOOLS"] = "1"
        if harness == "claude-code":
            claude_setup(control, home, allow=["mcp__notes__read_path"],
                         mcp_servers={"notes": spec})
            model = _run(harness, control, home, [read])
        else:
            with MockModel([read]) as model:
                codex_setup(control, home, model, mcp_servers={"notes": spec})
                run = run_codex(control, home, "read it")
            assert run.proc.returncode == 0, run.output
        assert any("read: DECOY-KEY" in r.text for r in model.tool_results), model.tool_results

        if harness == "codex":
            with MockModel([]) as placeholder:
                _codex_config(home, placeholder)  # the user's own settings, then agentstack's
        root = trusted_project(tmp_path, tools=PERMISSIONS)
        _run(harness, root, home, [])  # the first start, trusted: pinned
        model = _run(harness, root, home, [read])
        texts = [r.text for r in model.tool_results]
        assert any("error: EACCES" in t for t in texts), texts
        assert not any("DECOY-KEY" in t for t in texts), texts
    finally:
        shutil.rmtree(home, ignore_errors=True)


SECRET = "vault-secret-never-in-the-harness-0042"
REAL_KEY = "sk-ant-real-key-never-in-the-sandbox-0042"


def test_claude_inside_run_uses_a_server_that_needs_a_secret(tmp_path: Path) -> None:
    """Inside `agentstack run` the store is closed to the harness's sandbox: the server with
    `secret:vault-token` still starts (run's broker starts it, with the value) and answers the
    real Claude Code; the harness's environment and the files it can reach never hold it."""
    import hashlib
    import subprocess

    from agentstack.sandbox import verify
    from tests.conftest import make_project, run_cli
    from tests.harness.drive import NOTES_SERVER

    claude = harness_bin("claude")
    home = Path(tempfile.mkdtemp(dir=verify.DECOY_ROOT, prefix="agentstack-relay-home-")).resolve()
    try:
        script = [ToolCall("mcp__vault__add_note", {"text": "inside run"}),
                  ToolCall("Bash", {"command": "env"})]
        root = (tmp_path / "proj").resolve()
        with MockModel(script) as model:
            env_toml = ", ".join(f"{k} = {json.dumps(v)}" for k, v in {
                "NOTES_TOKEN": "secret:vault-token", "NOTES_FILE": str(root / "notes.txt"),
                "NOTES_TOKEN_FILE": str(root / "token-seen")}.items())
            manifest = f"""\
[project]
name = "vault"
harnesses = ["claude-code"]

[servers.vault]
command = {json.dumps(sys.executable)}
args = ["-I", {json.dumps(str(NOTES_SERVER))}]
env = {{ {env_toml} }}

[settings.permissions]
allow = ["mcp__vault__add_note", "Bash(env)"]

[sandbox]
write_dirs = ["."]
env = ["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "CLAUDE_CODE_MAX_RETRIES", "DISABLE_AUTOUPDATER"]

[sandbox.credentials.anthropic]
upstream = "{model.url}"
secret = "anthropic"
header = "x-api-key"
env = "ANTHROPIC_API_KEY"
base_url_env = "ANTHROPIC_BASE_URL"
"""
            make_project(root, manifest)
            env = {"HOME": str(home), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                   "CLAUDE_CODE_MAX_RETRIES": "0", "DISABLE_AUTOUPDATER": "1"}
            for args in (["lock"], ["trust", "--yes", "--accept-risk"], ["apply", "--write"]):
                result = run_cli(*args, cwd=root, env=env)
                assert result.returncode == 0, result.stderr
            for name, value in (("anthropic", REAL_KEY), ("vault-token", SECRET)):
                assert run_cli("secret", "set", name, cwd=root, input=value + "\n",
                               env=env).returncode == 0
            run = run_cli("run", "--harness", "claude-code", "--", str(claude), "-p", "go",
                          "--output-format", "json", cwd=root, env=env)
            assert run.returncode == 0, run.stdout + run.stderr
        first, second = model.tool_results
        assert "added note 1" in first.text and first.is_error is not True, first.text
        assert (root / "notes.txt").read_text() == "inside run\n"
        seen = "sha256:" + hashlib.sha256(SECRET.encode()).hexdigest()
        assert (root / "token-seen").read_text() == seen  # the server received the value
        assert "HOME=" in second.text and SECRET not in second.text, second.text  # the env
        for where in (root, home):
            found = subprocess.run(["grep", "-r", "-l", SECRET, str(where)],
                                   capture_output=True, text=True)
            assert not found.stdout, found.stdout
        log = run_cli("log", "--json", cwd=root, env=env)
        receipts = [json.loads(line) for line in log.stdout.splitlines()]
        assert [(r["server"], r["tool"], r["decision"]) for r in receipts
                if r["kind"] == "tool"] == [("vault", "add_note", "allow")]
        # One per request through the credential proxy: where to, the decision, the bytes.
        proxied = [r for r in receipts if r["kind"] == "proxy"]
        assert proxied and {(r["host"], r["decision"]) for r in proxied} == {
            ("route:anthropic", "allow")}, proxied
        assert all(r["bytes_sent"] > 0 and r["bytes_received"] > 0 for r in proxied), proxied
        assert REAL_KEY not in log.stdout and SECRET not in log.stdout
    finally:
        shutil.rmtree(home, ignore_errors=True)

"""The real Claude Code under `agentstack run --harness claude-code`: it reaches the mock model API
on 127.0.0.1 only through the credential proxy; the mock receives the real key while Claude Code's
environment holds only the phantom; a Bash call that reads the ~/.ssh decoy fails with the kernel's
EACCES, one that writes in the workdir succeeds, and agentstack's guard runs inside the sandbox.

Skips locally when Claude Code is missing (scripts/install-harnesses); fails in CI (CI=true).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentstack.sandbox import verify
from tests.conftest import make_project, run_cli
from tests.harness.binaries import harness_bin
from tests.harness.mock_model import MockModel, ToolCall

REAL_KEY = "sk-ant-real-key-never-in-the-sandbox-0042"


@pytest.fixture
def var_home() -> Iterator[Path]:
    """HOME outside /tmp (nono grants /tmp), with decoys that exist."""
    base = Path(tempfile.mkdtemp(dir=verify.DECOY_ROOT, prefix="agentstack-e2e-home-"))
    (base / ".ssh").mkdir()
    (base / ".ssh" / "id_ed25519").write_text("DECOY-SSH-KEY\n")
    try:
        yield base.resolve()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_claude_code_confined_end_to_end(tmp_path: Path, var_home: Path) -> None:
    claude = harness_bin("claude")
    script = [
        ToolCall("Bash", {"command": "env > env.txt; cat ~/.ssh/id_ed25519"}),
        ToolCall("Bash", {"command": "touch ok.txt"}),
    ]
    with MockModel(script) as model:
        manifest = f"""\
[project]
name = "confined"
harnesses = ["claude-code"]

[settings.permissions]
allow = ["Bash(env > env.txt; cat ~/.ssh/id_ed25519)", "Bash(touch ok.txt)"]

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
        root = make_project(tmp_path / "confined", manifest).resolve()
        env = {"HOME": str(var_home), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
               "CLAUDE_CODE_MAX_RETRIES": "0", "DISABLE_AUTOUPDATER": "1"}
        for args in (["lock"], ["trust", "--yes", "--accept-risk"], ["apply", "--write"]):
            result = run_cli(*args, cwd=root, env=env)
            assert result.returncode == 0, result.stderr
        assert run_cli("secret", "set", "anthropic", cwd=root, input=REAL_KEY + "\n",
                       env=env).returncode == 0
        run = run_cli("run", "--harness", "claude-code", "--", str(claude), "-p", "go",
                      "--output-format", "json", cwd=root, env=env)
        assert run.returncode == 0, run.stdout + run.stderr

    # The model API saw the real key; the harness only ever held the phantom.
    keys = {r.header("x-api-key") for r in model.requests if r.api == "anthropic"}
    assert keys == {REAL_KEY}, keys
    child_env = (root / "env.txt").read_text()
    assert REAL_KEY not in child_env
    assert "ANTHROPIC_API_KEY=" in child_env
    # The ~/.ssh read got the kernel's EACCES (Landlock), not ENOENT, not empty output.
    first, second = model.tool_results
    assert "Permission denied" in first.text and "DECOY-SSH-KEY" not in first.text, first.text
    assert "No such file" not in first.text
    # The write in the workdir went through, so the guard hook (rendered with onFailure "block")
    # started and decided inside the sandbox, from read-only copies of its state.
    assert (root / "ok.txt").exists() and second.is_error is not True, second.text
    assert "agentstack guard" not in first.text + second.text
    assert not subprocess.run(["grep", "-r", REAL_KEY, str(root)], capture_output=True).stdout

"""The guard under the real Claude Code and Codex, offline (a mock model API on 127.0.0.1).

* The project's harness settings cannot steer the guard: `env` in the project's Claude settings
  sets every variable the guard once read its state or its project from, and the manifest is
  deleted; the guard still blocks (it reads its state and project from its own command line).
* The guard runs before every prompt too: a project that drifted behind agentstack's back gets no
  model request at all, from Claude Code and from Codex.

Skips locally when the harness CLIs are missing (scripts/install-harnesses); fails in CI (CI=true).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli
from tests.harness.binaries import harness_bin
from tests.harness.drive import run_claude, run_codex
from tests.harness.mock_model import MockModel, ToolCall
from tests.harness.test_harness_e2e import (  # the same project and set-up as the end-to-end tests
    _codex_config,
    _codex_config_model,
    _trust_and_apply,
    project,
)

__all__ = ["project"]  # the fixture, re-used


def _model_requests(model: MockModel) -> list[str]:
    return [r.path for r in model.requests if r.method == "POST" and r.api is not None]


def test_claude_settings_env_cannot_steer_the_guard(project: Path, isolated_home: Path,
                                                     tmp_path: Path) -> None:
    harness_bin("claude")
    _trust_and_apply(project)
    decoy = isolated_home / ".ssh" / "id_ed25519"
    decoy.parent.mkdir()
    decoy.write_text("DECOY-SSH-KEY\n")
    # A forged state directory and a forged `run` copy, both steered to by the project.
    forged = tmp_path / "forged"
    (forged / "agentstack-run-x" / "ro").mkdir(parents=True)
    settings = project / ".claude" / "settings.local.json"
    data = json.loads(settings.read_text())
    data["env"] = {
        "AGENTSTACK_HOME": str(forged),
        "XDG_CONFIG_HOME": str(forged),
        "HOME": str(forged),
        "CLAUDE_PROJECT_DIR": str(forged),
        "AGENTSTACK_RUN_RO": str(forged / "agentstack-run-x" / "ro"),
        "AGENTSTACK_TRUSTED_DIGESTS": "b3:" + "0" * 64,
    }
    settings.write_text(json.dumps(data, indent=2))
    # The user lets Claude read anywhere: only the guard stands between the model and the decoy.
    user_settings = isolated_home / ".claude" / "settings.json"
    user_settings.parent.mkdir(exist_ok=True)
    user_settings.write_text(json.dumps({"permissions": {"allow": ["Read"]}}))
    (project / "agentstack.toml").unlink()  # "not a project" is what the variables aimed at
    with MockModel([ToolCall("Read", {"file_path": str(decoy)})]) as model:
        run = run_claude(project, isolated_home, model, "read it")
    assert run.proc.returncode == 0, run.output
    # The prompt itself was blocked: the project drifted (its manifest is gone).
    assert _model_requests(model) == [], run.output
    assert "agentstack.toml" in run.proc.stdout, run.output
    assert "DECOY-SSH-KEY" not in run.proc.stdout
    assert not any("DECOY-SSH-KEY" in r.text for r in model.tool_results)


def test_claude_drifted_project_gets_no_model_request(project: Path,
                                                      isolated_home: Path) -> None:
    harness_bin("claude")
    _trust_and_apply(project)
    with MockModel([]) as model:
        run = run_claude(project, isolated_home, model, "hello")
    assert run.proc.returncode == 0 and _model_requests(model), run.output  # trusted: it runs
    mcp = project / ".mcp.json"
    doc = json.loads(mcp.read_text())
    doc["mcpServers"]["notes"]["args"].append("--debug")
    mcp.write_text(json.dumps(doc, indent=2))
    with MockModel([]) as model:
        run = run_claude(project, isolated_home, model, "hello")
    assert _model_requests(model) == [], run.output
    assert "agentstack guard" in run.proc.stdout and ".mcp.json" in run.proc.stdout, run.output


def test_codex_drifted_project_gets_no_model_request(project: Path,
                                                     isolated_home: Path) -> None:
    harness_bin("codex")
    with MockModel([]) as placeholder:
        _codex_config(isolated_home, placeholder)
    _trust_and_apply(project)
    with MockModel([]) as model:
        _codex_config_model(isolated_home, model)
        run = run_codex(project, isolated_home, "hello")
    assert run.proc.returncode == 0 and _model_requests(model), run.output  # trusted: it runs
    config = project / ".codex" / "config.toml"
    config.write_text(config.read_text().replace('"-I"', '"-I", "-v"'))
    with MockModel([]) as model:
        _codex_config_model(isolated_home, model)
        run = run_codex(project, isolated_home, "hello")
    assert _model_requests(model) == [], run.output
    assert "UserPromptSubmit" in run.output, run.output
    # After revoke Codex stops loading the project's hooks: the user-level guard still blocks.
    assert run_cli("revoke", cwd=project).returncode == 0
    with MockModel([]) as model:
        _codex_config_model(isolated_home, model)
        run = run_codex(project, isolated_home, "hello")
    assert _model_requests(model) == [], run.output


def _processes_with(home: Path) -> dict[int, str]:
    """Every process on the machine (not a zombie) whose environment names `home`."""
    marker = f"={home}".encode()
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            environ = (entry / "environ").read_bytes()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if any(item.endswith(marker) or marker + b"/" in item for item in environ.split(b"\0")):
            found[int(entry.name)] = command
    return found


def test_codex_exec_leaves_no_process_behind(project: Path, isolated_home: Path) -> None:
    """Codex 0.171 starts its fs helper (`bwrap ... codex --codex-run-as-fs-helper`, pid 1 of a
    pid namespace, in a session of its own) and `codex exec` exits without ending it: the driver
    reaps it, and nothing of the run (nothing with this test's home) is left on the machine."""
    harness_bin("codex")
    with MockModel([]) as placeholder:
        _codex_config(isolated_home, placeholder)
    _trust_and_apply(project)
    with MockModel([]) as model:
        _codex_config_model(isolated_home, model)
        run = run_codex(project, isolated_home, "hello")
    assert run.proc.returncode == 0 and _model_requests(model), run.output
    assert _processes_with(isolated_home) == {}

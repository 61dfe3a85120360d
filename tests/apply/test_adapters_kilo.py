"""Kilo: what the adapter renders, checked in process and by the real `kilo` (7.7.7).

The real binary, offline (the user's own provider: an OpenAI-compatible one on the mock model,
127.0.0.1), HOME at a temporary directory: before trust `kilo mcp list` shows nothing from
agentstack; after `trust` + `apply --write` every locked server is connected. End to end: the
guard plugin lets a tool call run in a trusted, unchanged project, and blocks it after a rendered
file is edited behind agentstack's back and after `revoke` (Kilo has no trust of its own: the
plugin still loads, and the guard refuses a revoked project).

Skips locally when `kilo` is missing (scripts/install-harnesses); fails in CI (CI=true).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from agentstack.apply.engine import GUARD_CODE
from tests.harness.binaries import harness_bin, harness_env
from tests.harness.deadline import scaled
from tests.harness.mock_model import MockModel, ToolCall
from tests.support.adapters import TOUCH, drive, mcp_list, notes_project, rendered
from tests.support.adapters import ok as _ok
from tests.support.cli import run_cli_in_process as run_cli

NPM_CACHE = Path(__file__).resolve().parents[2] / ".tools" / "npm-cache"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return notes_project(tmp_path, "kilo-e2e", '["kilo"]')


def kilo_env(home: Path, model: MockModel | None) -> dict[str, str]:
    """The user's own Kilo config (the mock model as its provider) and its environment."""
    config = home / ".config" / "kilo" / "kilo.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    url = model.openai_base_url if model is not None else "http://127.0.0.1:9/v1"
    config.write_text(json.dumps({
        "provider": {"mock": {"npm": "@ai-sdk/openai-compatible", "name": "mock",
                              "options": {"baseURL": url, "apiKey": "dummy"},
                              "models": {"mock-model": {"name": "mock", "tool_call": True}}}},
        "model": "mock/mock-model", "autoupdate": False, "share": "disabled"}))
    return harness_env(home, OPENCODE_DISABLE_AUTOUPDATE="1", KILO_DISABLE_AUTOUPDATE="1",
                       OPENCODE_DISABLE_MODELS_FETCH="1", KILO_DISABLE_MODELS_FETCH="1",
                       npm_config_cache=str(NPM_CACHE), npm_config_prefer_offline="true")


# ------------------------------------------------------------------------------ in process


def test_render_writes_kilo_json_and_the_guard_plugin(project: Path, isolated_home: Path) -> None:
    from agentstack.trust.review import harness_notes
    from tests.support.adapters import current

    ops = rendered(project, ["kilo"])
    config = ops["kilo.json"]
    assert config.keys[("$schema",)] == "https://app.kilo.ai/config.json"
    notes = config.keys[("mcp", "notes")]
    assert notes["type"] == "local" and "NOTES_TOKEN" not in notes.get("environment", {})
    assert ("mcp",) in config.guarded and ("plugin",) in config.guarded
    plugin = ops[".kilo/plugins/agentstack-guard.js"].content.decode()
    guard = json.loads(plugin.split("const GUARD = ", 1)[1].split(";\n", 1)[0])
    assert guard[3:6] == [GUARD_CODE, "--harness", "kilo"] and "--project" in guard
    assert "tool.execute.before" in plugin and "for Kilo" in plugin
    assert ops["AGENTS.md"].text == "Be careful.\n"
    assert not any(op.path.startswith(str(isolated_home)) for op in ops.values())
    (note,) = harness_notes(current(project)[2])
    assert note.startswith("Kilo has no trust of its own")
    assert shlex.split(" ".join(guard))[0] == guard[0]


# -------------------------------------------------------------------------------- real kilo


@pytest.mark.slow
def test_kilo_mcp_list_only_after_trust(project: Path, isolated_home: Path) -> None:
    harness_bin("kilo")
    env = kilo_env(isolated_home, None)
    assert run_cli("apply", "--write", cwd=project).returncode == 1
    before = mcp_list("kilo", project, env, timeout=240)
    assert "notes" not in before and "journal" not in before, before
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    after = mcp_list("kilo", project, env, timeout=240)
    for server in ("notes", "journal"):
        line = next((ln for ln in after.splitlines() if f" {server} " in ln), "")
        assert "connected" in line, after


def run_kilo(root: Path, home: Path, call: ToolCall) -> tuple[bool, str, int]:
    return drive(root, call, [str(harness_bin("kilo")), "run", "do it"],
                 lambda model: kilo_env(home, model), timeout=scaled(240))


@pytest.mark.slow
def test_kilo_guard_end_to_end(project: Path, isolated_home: Path) -> None:
    harness_bin("kilo")
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    ran, text, _ = run_kilo(project, isolated_home, TOUCH)
    assert ran, text

    # Edited behind agentstack's back: blocked, and the reason names the file.
    config = project / "kilo.json"
    data = json.loads(config.read_text())
    data["mcp"]["notes"]["command"].append("--debug")
    config.write_text(json.dumps(data, indent=2))
    ran, text, _ = run_kilo(project, isolated_home, TOUCH)
    assert not ran and "kilo.json" in text and "agentstack guard" in text, text
    _ok("apply", "--write", "--force", cwd=project)

    # Revoked: Kilo still loads the plugin (it has no trust of its own); the guard refuses.
    _ok("revoke", cwd=project)
    ran, text, _ = run_kilo(project, isolated_home, TOUCH)
    assert not ran and "agentstack guard" in text, text

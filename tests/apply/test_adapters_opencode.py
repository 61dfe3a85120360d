"""OpenCode: what the adapter renders, checked in process and by the real `opencode` (1.18.33).

OpenCode has no trust of its own, so the guard plugin is the only gate: it must load (a plugin
with a syntax error is silently skipped), and it is a rendered file the guard fingerprints. The
real binary, offline, HOME at a temporary directory: before trust `opencode mcp list` shows nothing
from agentstack; after `trust` + `apply --write` every locked server is connected. End to end
against a mock chat-completions API on 127.0.0.1: a tool call runs in a trusted, unchanged project,
and is blocked after a rendered file (the config, or the plugin itself) is edited behind
agentstack's back and after `revoke`.

Skips locally when `opencode` is missing (scripts/install-harnesses); fails in CI (CI=true).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentstack.apply.engine import GUARD_CODE
from tests.conftest import REPO
from tests.harness.binaries import harness_bin, harness_env, in_ci
from tests.harness.deadline import scaled
from tests.harness.drive import NOTES_SERVER
from tests.harness.mock_model import MockModel, ToolCall
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
from tests.support.adapters import render as _render
from tests.support.cli import run_cli_in_process as run_cli


def _project(tmp_path: Path, harnesses: str = '["opencode"]') -> Path:
    return notes_project(tmp_path, "opencode-e2e", harnesses)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return _project(tmp_path)


# ------------------------------------------------------------------------------ in process


def test_render_argv_arrays_launcher_and_plugin(project: Path) -> None:
    ops = {op.path: op for op in _render(project, ["opencode"])}
    config = ops["opencode.json"]
    notes = config.keys[("mcp", "notes")]
    assert notes["type"] == "local" and notes["enabled"] is True
    # The secret reaches the server through the launcher: no `{env:...}` reference in the config.
    assert without_relay(notes["command"][1:])[:6] == ["-I", "-m", "agentstack.launch", "--secret", "NOTES_TOKEN=notes-token", "--"]
    assert without_relay(notes["command"][1:])[6:] == [sys.executable, "-I", str(NOTES_SERVER)]
    assert "NOTES_TOKEN" not in notes["environment"]
    assert {("mcp",), ("plugin",), ("plugins",), ("provider",)} <= set(config.guarded)
    plugin = ops[".opencode/plugins/agentstack-guard.js"].content.decode()
    assert json.dumps([sys.executable, "-I", "-c", GUARD_CODE, "--harness",
                       "opencode", "--state", os.environ["AGENTSTACK_HOME"],
                       "--project", str(project)]) in plugin
    assert ops["AGENTS.md"].text == "Be careful.\n"


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        if in_ci():
            pytest.fail("node is not installed (CI=true: must not be skipped)", pytrace=False)
        pytest.skip("node is not installed")
    return node


def test_plugin_is_valid_javascript(project: Path, tmp_path: Path) -> None:
    """A plugin with a syntax error is silently skipped by OpenCode: it must at least parse."""
    node = _node()
    ops = {op.path: op for op in _render(project, ["opencode"])}
    path = tmp_path / "guard.mjs"
    path.write_bytes(ops[".opencode/plugins/agentstack-guard.js"].content)
    result = subprocess.run([node, "--check", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def _plugin_decision(project: Path, tmp_path: Path, guard: list[str], *, tool: str = "bash",
                     client: str = "{ mcp: { status: async () => ({ data: {} }) } }") -> str:
    """Load the rendered plugin in node with `guard` as the guard command; call its hook once."""
    node = _node()
    ops = {op.path: op for op in _render(project, ["opencode"])}
    source = ops[".opencode/plugins/agentstack-guard.js"].content.decode()
    start = source.index("const GUARD = ")
    end = source.index(";\n", start)
    source = source[:start] + "const GUARD = " + json.dumps(guard) + source[end:]
    (tmp_path / "plugin.mjs").write_text(source)
    (tmp_path / "call.mjs").write_text(
        "import { AgentstackGuard } from './plugin.mjs';\n"
        f"const client = {client};\n"
        "const hooks = await AgentstackGuard("
        f"{{ client, directory: {json.dumps(str(project))} }});\n"
        f"try {{ await hooks['tool.execute.before']({{tool: {json.dumps(tool)}, sessionID: 's'}},"
        " {args: {command: 'true'}}); console.log('ALLOW'); }\n"
        "catch (e) { console.log('DENY ' + e.message); }\n")
    result = subprocess.run([node, str(tmp_path / "call.mjs")], capture_output=True, text=True,
                            timeout=scaled(60))
    return result.stdout.strip()


@pytest.mark.parametrize(("guard", "expected"), [
    # (A guard reads all of its input, as the real one does; one that did not would make the
    # plugin's write fail with EPIPE, which also denies.)
    (["/bin/sh", "-c", "cat >/dev/null"], "ALLOW"),
    (["/bin/sh", "-c", "cat >/dev/null; echo nope >&2; exit 2"], "DENY nope"),
    (["/bin/sh", "-c", "exit 1"], "DENY agentstack guard"),  # a crash denies
    (["/nonexistent/guard"], "DENY agentstack guard"),  # no guard denies
    (["/bin/sh", "-c", "kill -9 $$"], "DENY agentstack guard"),  # a signal denies
])
def test_plugin_fails_closed(project: Path, tmp_path: Path, guard: list[str],
                             expected: str) -> None:
    assert _plugin_decision(project, tmp_path, guard).startswith(expected)


def test_review_says_opencode_has_no_trust_of_its_own(project: Path) -> None:
    review = run_cli("trust", "--yes", "--accept-risk", cwd=project)
    assert review.returncode == 0, review.stderr
    assert "OpenCode has no trust of its own" in " ".join(review.stdout.split())


def test_plugin_names_the_mcp_server_and_fails_closed_without_the_list(project: Path,
                                                                      tmp_path: Path) -> None:
    log = tmp_path / "event.json"
    guard = ["/bin/sh", "-c", f"cat > {log}"]
    client = "{ mcp: { status: async () => ({ data: {my: {}, 'my_x': {}, other: {}} }) } }"
    assert _plugin_decision(project, tmp_path, guard, tool="my_x_add", client=client) == "ALLOW"
    assert json.loads(log.read_text())["tool_name"] == "mcp__my_x__add"  # the longest server
    assert _plugin_decision(project, tmp_path, guard, tool="bash", client=client) == "ALLOW"
    assert json.loads(log.read_text())["tool_name"] == "bash"
    broken = "{ mcp: { status: async () => { throw new Error('no server'); } } }"
    assert _plugin_decision(project, tmp_path, guard, client=broken).startswith(
        "DENY agentstack guard")
    assert _plugin_decision(project, tmp_path, guard, client="{ mcp: { status: async () => "
                            "({ error: 'x' }) } }").startswith("DENY agentstack guard")


def test_plugin_is_fingerprinted(project: Path) -> None:
    from agentstack._guard import Deny, check_files

    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    snapshot = guard_snapshot(project)
    plugin = project / ".opencode" / "plugins" / "agentstack-guard.js"
    assert snapshot["files"][str(plugin)]["role"] == "rendered"
    check_files(snapshot)
    plugin.write_text(plugin.read_text().replace("throw new Error(reason);", ""))
    with pytest.raises(Deny, match=r"agentstack-guard\.js"):
        check_files(snapshot)


def test_agents_md_shared_with_codex_is_one_block(tmp_path: Path) -> None:
    """Codex and OpenCode both read AGENTS.md: one block, one ledger entry, no conflict."""
    from agentstack.apply.engine import plan

    root = _project(tmp_path, '["codex", "opencode"]')
    _, _, document, digest = current(root)
    changes = [c for c in plan(root, document, digest).changes if c.display == "AGENTS.md"]
    assert len(changes) == 1 and changes[0].ledger is not None
    assert changes[0].new is not None and changes[0].new.count(b"agentstack:begin") == 1


# ------------------------------------------------------------------------------ real opencode


def opencode_env(home: Path, **extra: str) -> dict[str, str]:
    # OpenCode runs `npm install` (its plugin package, the model provider) in each config
    # directory on start: one shared npm cache, preferred over the registry, keeps that ~5 s.
    return harness_env(home, OPENCODE_DISABLE_AUTOUPDATE="1", OPENCODE_DISABLE_MODELS_FETCH="1",
                       npm_config_cache=str(REPO / ".tools" / "npm-cache"),
                       npm_config_prefer_offline="true", **extra)


def opencode_mcp_list(root: Path, home: Path) -> str:
    return mcp_list("opencode", root, opencode_env(home))


@pytest.mark.slow
def test_opencode_mcp_list_only_after_trust(project: Path, isolated_home: Path) -> None:
    harness_bin("opencode")
    assert run_cli("apply", "--write", cwd=project).returncode == 1
    before = opencode_mcp_list(project, isolated_home)
    assert "notes" not in before and "journal" not in before, before
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    after = opencode_mcp_list(project, isolated_home)
    for server in ("notes", "journal"):
        line = next((ln for ln in after.splitlines() if f" {server} " in ln), "")
        assert "connected" in line, after


def opencode_user_config(home: Path, model: MockModel, extra: dict[str, Any] | None = None
                         ) -> dict[str, str]:
    """Write the user's own OpenCode config (the mock model as its provider); its environment."""
    config = home / ".config" / "opencode" / "opencode.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({
        "provider": {"mock": {"npm": "@ai-sdk/openai-compatible", "name": "mock",
                              "options": {"baseURL": model.openai_base_url, "apiKey": "dummy"},
                              "models": {"mock-model": {"name": "mock", "tool_call": True}}}},
        "model": "mock/mock-model", "autoupdate": False, "share": "disabled",
        **(extra or {})}))
    return opencode_env(home)


def run_opencode(root: Path, home: Path, call: ToolCall,
                 extra: dict[str, Any] | None = None) -> tuple[bool, str]:
    """(did the call run?, what the model was told). The model provider is the user's own."""

    def env_for(model: MockModel) -> dict[str, str]:
        return opencode_user_config(home, model, extra)

    ran, text, _ = drive(root, call, [str(harness_bin("opencode")), "run", "do it"], env_for)
    return ran, text


@pytest.mark.slow
def test_opencode_guard_end_to_end(project: Path, isolated_home: Path) -> None:
    harness_bin("opencode")
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    ran, text = run_opencode(project, isolated_home, TOUCH)
    assert ran, text
    ran, text = run_opencode(project, isolated_home,
                             ToolCall("mcp__notes__add_note", {"text": "ok"}))
    assert ran, text

    # Edited behind agentstack's back: blocked, and the reason names the file.
    config = project / "opencode.json"
    data = json.loads(config.read_text())
    data["mcp"]["notes"]["command"].append("--debug")
    config.write_text(json.dumps(data, indent=2))
    ran, text = run_opencode(project, isolated_home, TOUCH)
    assert not ran and "opencode.json" in text and "agentstack guard" in text, text
    _ok("apply", "--write", "--force", cwd=project)
    ran, text = run_opencode(project, isolated_home, TOUCH)
    assert ran, text

    # A server the user added at user level, not in the lock: its `server_tool` is blocked.
    outside = {"mcp": {"outside": {"type": "local", "enabled": True,
                                   "command": [sys.executable, "-I", str(NOTES_SERVER)]}}}
    ran, text = run_opencode(project, isolated_home,
                             ToolCall("mcp__outside__add_note", {"text": "exfiltrate"}), outside)
    assert not ran and "not in agentstack.lock" in text, text
    ran, text = run_opencode(project, isolated_home,
                             ToolCall("mcp__notes__add_note", {"text": "ok"}), outside)
    assert ran, text

    # OpenCode has no trust to take back: the project's plugin still loads, and the guard blocks.
    _ok("revoke", cwd=project)
    ran, text = run_opencode(project, isolated_home, TOUCH)
    assert not ran and "revoked" in text and "agentstack guard" in text, text

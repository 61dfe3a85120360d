"""The guard's tool tables: a tool name a harness does not offer is denied (fail closed).

Each pinned harness version's own tool list is captured from the real binary
(tests/harness/tool_tables.py: the `tools` every request to the mock model offers) and committed
under tests/harness/tools/<harness>-<version>.json. The guard models each of those tools (its
path, pattern, URL and server arguments checked), calls it inert (it names nothing the guard
judges), or refuses it; any other name is denied, whatever its input. MCP tools keep their
per-harness names, checked against the locked servers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import agentstack.apply.snapshot as snapshot
from agentstack import _guard
from agentstack import harnesses as H
from tests.harness import tool_tables

CAPTURED = sorted(tool_tables.BINARIES)


def _table(harness: str) -> set[str]:
    return (set(_guard.TOOLS.get(harness, {})) | set(_guard.INERT.get(harness, ()))
            | set(_guard.REFUSED.get(harness, {})))


def _committed(harness: str) -> dict[str, Any]:
    path = tool_tables.table_path(harness, H.BY_NAME[harness].version)
    assert path.is_file(), f"no capture for the pinned {harness} version: {path}"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _snapshot(root: Path) -> dict[str, Any]:
    document = {"sandbox": {"read_dirs": [], "read_files": [], "write_dirs": [],
                            "write_files": [], "network": {"block": False, "allow_domains": []}}}
    return {"servers": ["notes"], "policy": snapshot.compile_policy(root, document)}


def _decision(harness: str, tool: str, arguments: dict[str, Any], root: Path) -> str | None:
    if harness == "copilot":
        event: dict[str, Any] = {"toolName": tool, "toolArgs": json.dumps(arguments)}
    elif harness == "cline":
        event = {"tool_call": {"name": tool, "input": arguments}}
    elif harness == "auggie":  # its own tools say they are not MCP tools
        event = {"tool_name": tool, "tool_input": arguments, "is_mcp_tool": False}
    else:
        event = {"tool_name": tool, "tool_input": arguments}
    try:
        _guard.check_call(_snapshot(root), event, str(root), harness)
    except _guard.Deny as deny:
        return str(deny)
    return None


@pytest.mark.parametrize("harness", CAPTURED)
def test_every_tool_a_pinned_harness_offers_is_in_the_guards_table(harness: str) -> None:
    data = _committed(harness)
    assert data["harness"] == harness and data["version"] == H.BY_NAME[harness].version
    assert data["tools"] and data["tools"] == sorted(set(data["tools"]))
    assert sorted(set(data["tools"]) - _table(harness)) == []


@pytest.mark.parametrize("harness", [*CAPTURED, "cursor", "vscode", "crush"])
def test_a_tool_name_the_table_does_not_list_is_denied_whatever_its_input(
    harness: str, tmp_path: Path
) -> None:
    for arguments in ({}, {"query": "x"}, {"operation": "workspaceSymbol"}):
        reason = _decision(harness, "brand_new_tool", arguments, tmp_path)
        assert reason is not None and "tool table" in reason, reason


def test_copilots_lsp_tool_is_denied_even_when_it_names_no_file(tmp_path: Path) -> None:
    """The case found: `lsp` with `workspaceSymbol` names no file, so a guard that let unknown
    tools through when they named nothing allowed it."""
    for arguments in ({"operation": "workspaceSymbol", "query": "secret"},
                      {"operation": "rename", "file": "a.py", "line": 1, "character": 1,
                       "newName": "b"}):
        reason = _decision("copilot", "lsp", arguments, tmp_path)
        assert reason is not None and "lsp" in reason, reason


def test_what_the_table_lists_is_judged_by_its_arguments(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    inside, ssh = str(root / "src"), str(Path.home() / ".ssh")
    allowed = [
        ("copilot", "glob", {"pattern": "**/*.py", "paths": [inside]}),
        ("copilot", "rg", {"pattern": "def ", "paths": inside, "glob": "*.py"}),
        ("copilot", "sql", {"query": "select 1", "description": "d"}),
        ("copilot", "session_store_sql", {"query": "select 1", "source": "local"}),
        ("gemini-cli", "grep_search", {"pattern": "x", "dir_path": inside,
                                       "include_pattern": "*.py"}),
        ("claude-code", "ToolSearch", {"query": "select:WebFetch"}),
        ("codex", "multi_agent_v1__close_agent", {"target": "agent-1"}),
        ("codex", "mcp__notes__add_note", {"text": "x"}),
        ("copilot", "notes-add_note", {"text": "x"}),
        ("crush", "mcp_notes_add_note", {"text": "x"}),
        ("crush", "grep", {"pattern": "x", "path": inside, "include": "*.py"}),
        ("crush", "bash", {"command": "ls", "working_dir": inside}),
    ]
    for harness, tool, arguments in allowed:
        assert _decision(harness, tool, arguments, root) is None, (harness, tool)
    denied = [
        ("copilot", "glob", {"pattern": "*", "paths": [inside, ssh]}),
        ("copilot", "glob", {"pattern": os.path.relpath(ssh, inside) + "/*", "paths": [inside]}),
        ("copilot", "rg", {"pattern": "key", "paths": [ssh]}),
        ("copilot", "apply_patch", {"input": "*** Begin Patch\n*** Add File: .github/hooks/x.json"
                                             "\n+{}\n*** End Patch\n"}),
        ("gemini-cli", "grep_search", {"pattern": "x", "dir_path": ssh}),
        ("claude-code", "Workflow", {"scriptPath": str(Path.home() / ".ssh" / "run.js")}),
        ("claude-code", "EnterWorktree", {"name": "w"}),
        ("claude-code", "ToolSearch", {"query": "x", "path": "/etc"}),
        ("codex", "mcp__other__add_note", {"text": "x"}),
        ("copilot", "other-add_note", {"text": "x"}),
        ("crush", "mcp_other_add_note", {"text": "x"}),
        ("crush", "grep", {"pattern": "key", "path": ssh}),
        ("crush", "bash", {"command": "ls", "working_dir": ssh}),
        ("crush", "download", {"url": "https://example.invalid/x", "file_path": ssh + "/k"}),
        ("crush", "list_mcp_resources", {"mcp_name": "other"}),
        ("crush", "agent", {"prompt": "x"}),
    ]
    for harness, tool, arguments in denied:
        assert _decision(harness, tool, arguments, root) is not None, (harness, tool, arguments)


@pytest.mark.slow
@pytest.mark.parametrize("harness", CAPTURED)
def test_the_committed_tool_list_is_what_the_harness_offers_now(
    harness: str, tmp_path: Path, isolated_home: Path
) -> None:
    """A fresh capture from the installed binary (the pinned version) equals the committed one:
    a version that adds a tool fails here until the guard's table judges it."""
    from tests.harness.binaries import harness_bin

    harness_bin(tool_tables.BINARIES[harness])
    fresh = tool_tables.record(harness, H.BY_NAME[harness].version,
                               tool_tables.capture(harness, tmp_path, isolated_home))
    assert fresh == _committed(harness), (
        "re-capture with `python -m tests.harness.tool_tables " + harness + "` and judge each "
        "new tool in agentstack/_guard.py's tables")


@pytest.mark.slow
def test_the_real_copilot_cannot_call_its_lsp_tool_through_the_guard(
    tmp_path: Path, isolated_home: Path
) -> None:
    """The real Copilot CLI, in a trusted and applied project with a language server configured,
    asked by the model for `lsp` `workspaceSymbol`: the guard denies the call."""
    from tests.apply.test_adapters_copilot import HEADER, copilot_env
    from tests.apply.test_adapters_copilot import _user_config as copilot_user_config
    from tests.harness.binaries import harness_bin
    from tests.harness.mock_model import MockModel, ToolCall
    from tests.support.adapters import notes_project
    from tests.support.adapters import ok as _ok

    copilot = harness_bin("copilot")
    root = notes_project(tmp_path, "copilot-e2e", '["copilot"]')
    tool_tables._lsp_config(root)
    copilot_user_config(isolated_home, HEADER + "{}\n")
    for args in (["lock"], ["trust", "--yes", "--accept-risk"], ["apply", "--write"]):
        _ok(*args, cwd=root)
    call = ToolCall("lsp", {"operation": "workspaceSymbol", "query": "x"})
    import subprocess

    with MockModel([call]) as model:
        done = subprocess.run(
            [str(copilot), "-p", "do it", "--allow-all-tools"], cwd=root, capture_output=True,
            text=True, timeout=240,
            env=copilot_env(isolated_home, COPILOT_PROVIDER_BASE_URL=model.openai_base_url,
                            COPILOT_MODEL="gpt-4o"))
    offered = {n for r in model.requests for n in tool_tables.names_offered(r)}
    assert "lsp" in offered, (offered, done.stdout[-2000:], done.stderr[-2000:])
    told = "\n".join(r.text for r in model.tool_results)
    assert "agentstack guard" in told and "'lsp' is refused" in told, (
        told + done.stdout[-2000:] + done.stderr[-2000:])
    assert os.path.exists(root / ".github" / "lsp.json")


def test_copilot_mcp_names_in_the_claude_code_hook_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copilot CLI runs the project's Claude Code hooks too, naming MCP tools `<server>-<tool>`
    (its COPILOT_CLI=1 tells): a locked server's tool is allowed there, any other denied."""
    monkeypatch.setenv("COPILOT_CLI", "1")
    assert _decision("claude-code", "notes-add_note", {"text": "x"}, tmp_path) is None
    assert _decision("claude-code", "other-add_note", {"text": "x"}, tmp_path) is not None
    monkeypatch.delenv("COPILOT_CLI")
    reason = _decision("claude-code", "notes-add_note", {"text": "x"}, tmp_path)
    assert reason is not None and "tool table" in reason

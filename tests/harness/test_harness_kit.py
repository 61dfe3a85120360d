"""The offline harness kit works with the REAL Claude Code and Codex CLIs: a real harness makes a
real tool call (scripted by the mock model on 127.0.0.1) that hits a real PreToolUse hook.

Each test finds its harness with `harness_bin`, so it skips locally when `scripts/install-harnesses`
has not been run, and FAILS when CI=true. The facts these tests pin (measured with Claude Code
2.1.332 and Codex 0.171.0) are the ones the guard and the adapters rely on.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from .binaries import harness_bin, harness_env
from .codex_trust import (
    codex_hook_state_key,
    codex_hook_trust_entries,
    codex_hook_trust_toml,
    codex_hook_trusted_hash,
)
from .deadline import scaled
from .drive import (
    CODEX_OFFLINE_TOML,
    DENY_REASON,
    HarnessRun,
    claude_setup,
    codex_hooks_list,
    codex_setup,
    hook_payloads,
    notes_server_spec,
    run_claude,
    run_codex,
    write_hook,
)
from .mock_model import MockModel, ToolCall, map_for_codex, offered_tools

TOUCH = ToolCall("Bash", {"command": "touch marker.txt"})
NOTE = ToolCall("mcp__notes__add_note", {"text": "hello from the mock"})
MAX_RUN_SECONDS = 60  # a run takes ~1 s here; anything near this means something hangs


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    project = (tmp_path / "project").resolve()
    home = (tmp_path / "home").resolve()
    project.mkdir()
    home.mkdir()
    return project, home


# -- the mock on its own -------------------------------------------------------------------------

def test_mock_maps_generic_calls_to_what_codex_offers() -> None:
    body = {"tools": [
        {"type": "function", "name": "shell_command", "parameters": {}},
        {"type": "namespace", "name": "mcp__notes",
         "tools": [{"type": "function", "name": "add_note", "parameters": {}}]},
    ]}
    offered = offered_tools(body)
    assert [name for name, _ in offered] == ["shell_command", "mcp__notes__add_note"]
    assert map_for_codex(TOUCH, offered) == ("shell_command", None,
                                              {"command": "touch marker.txt"})
    assert map_for_codex(NOTE, offered) == ("add_note", "mcp__notes",
                                             {"text": "hello from the mock"})
    exec_only = offered_tools({"tools": [{"type": "function", "name": "exec_command"}]})
    assert map_for_codex(TOUCH, exec_only) == ("exec_command", None, {"cmd": "touch marker.txt"})
    shell_only = offered_tools({"tools": [{"type": "function", "name": "shell"}]})
    assert map_for_codex(TOUCH, shell_only)[2] == {"command": ["bash", "-lc", "touch marker.txt"]}


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy


def _post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None
          ) -> tuple[int, str, str]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json",
                                              **(headers or {})})
    with _DIRECT.open(request, timeout=scaled(10)) as response:
        return response.status, response.headers["content-type"], response.read().decode()


def _sse_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for chunk in text.strip().split("\n\n"):
        name_line, data_line = chunk.split("\n")
        events.append((name_line.removeprefix("event: "), json.loads(data_line[len("data: "):])))
    return events


def test_mock_side_requests_and_recording() -> None:
    with MockModel([TOUCH]) as model:
        for method in ("HEAD", "GET"):
            with pytest.raises(urllib.error.HTTPError) as info:
                _DIRECT.open(urllib.request.Request(model.url + "/", method=method), timeout=scaled(10))
            assert info.value.code == 404
        assert json.loads(_post(model.url + "/v1/messages/count_tokens?beta=true",
                                {"messages": []})[2]) == {"input_tokens": 42}
        # A side call (no tools) gets text, streamed or not, and does not consume the script.
        status, ctype, text = _post(model.url + "/v1/messages?beta=true",
                                    {"model": "m", "stream": True, "messages": [
                                        {"role": "user", "content": "title?"}]},
                                    {"x-api-key": "k1"})
        assert status == 200 and ctype.startswith("text/event-stream")
        events = _sse_events(text)
        assert [e for e, _ in events] == ["message_start", "content_block_start",
                                          "content_block_delta", "content_block_stop",
                                          "message_delta", "message_stop"]
        assert events[2][1]["delta"] == {"type": "text_delta", "text": model.side_text}
        plain = json.loads(_post(model.url + "/v1/messages", {"model": "m", "messages": []})[2])
        assert plain["content"][0]["text"] == model.side_text
        # The main call gets the scripted tool_use, its input streamed as one JSON delta.
        _, _, text = _post(model.url + "/v1/messages?beta=true", {
            "model": "m", "stream": True, "tools": [{"name": "Bash"}],
            "messages": [{"role": "user", "content": "go"}]})
        events = _sse_events(text)
        assert events[1][1]["content_block"]["name"] == "Bash"
        assert json.loads(events[2][1]["delta"]["partial_json"]) == {"command": "touch marker.txt"}
        assert events[4][1]["delta"]["stop_reason"] == "tool_use"
        # Codex side: no tools -> a message item, completed with usage.
        _, _, text = _post(model.openai_base_url + "/responses", {"model": "g", "input": []})
        events = _sse_events(text)
        assert events[0][0] == "response.created" and events[-1][0] == "response.completed"
        assert events[-1][1]["response"]["usage"]["total_tokens"] == 15
        assert model.tool_calls[0].name == "Bash" and len(model.tool_calls) == 1
    kinds = [(r.method, r.kind) for r in model.requests]
    assert kinds == [("HEAD", "other"), ("GET", "other"), ("POST", "count_tokens"),
                     ("POST", "side"), ("POST", "side"), ("POST", "main"), ("POST", "side")]
    assert model.requests[3].header("X-Api-Key") == "k1"
    assert model.errors == []


# -- Claude Code ---------------------------------------------------------------------------------

def _assert_claude_ok(run: HarnessRun) -> None:
    assert run.proc.returncode == 0, run.output
    assert run.result is not None and run.result.get("is_error") is False, run.output
    assert run.seconds < MAX_RUN_SECONDS


def test_claude_deny_hook_blocks_bash(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    project, home = dirs
    log = tmp_path / "hook.jsonl"
    # The allow rule proves that the HOOK blocks: without it -p mode would deny on its own.
    claude_setup(project, home, hook_command=write_hook(tmp_path / "hook.py", "deny", log=log),
                 allow=["Bash(touch marker.txt)"])
    with MockModel([TOUCH]) as model:
        run = run_claude(project, home, model, "make the marker")
    _assert_claude_ok(run)
    assert not (project / "marker.txt").exists()
    assert run.result is not None
    assert [d["tool_name"] for d in run.result["permission_denials"]] == ["Bash"]
    assert len(model.tool_results) == 1
    result = model.tool_results[0]
    assert result.is_error is True and DENY_REASON in result.text, result
    (payload,) = hook_payloads(log)
    assert payload["hook_event_name"] == "PreToolUse"
    assert payload["tool_name"] == "Bash"
    assert payload["tool_input"]["command"] == "touch marker.txt"
    # What reached the "upstream": the key Claude Code was given, nothing else.
    main = model.main_requests("anthropic")
    assert len(main) == 2 and main[0].path.startswith("/v1/messages")
    assert {r.header("x-api-key") for r in main} == {"sk-ant-offline-test"}
    assert "Bash" in model.tools_offered("anthropic")
    assert model.errors == []


def test_claude_allow_hook_lets_bash_run(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    project, home = dirs
    log = tmp_path / "hook.jsonl"
    claude_setup(project, home, hook_command=write_hook(tmp_path / "hook.py", "allow", log=log),
                 allow=["Bash(touch marker.txt)"])
    with MockModel([TOUCH]) as model:
        run = run_claude(project, home, model, "make the marker")
    _assert_claude_ok(run)
    assert (project / "marker.txt").exists(), run.output
    assert run.result is not None and run.result["permission_denials"] == []
    assert [r.is_error for r in model.tool_results] == [False]
    assert len(hook_payloads(log)) == 1
    assert run.result["result"] == model.final_text


def test_claude_without_allow_rule_print_mode_denies_by_itself(dirs: tuple[Path, Path],
                                                               tmp_path: Path) -> None:
    """Why claude_setup takes allow rules: an allowing hook is not an approval."""
    project, home = dirs
    claude_setup(project, home, hook_command=write_hook(tmp_path / "hook.py", "allow"))
    with MockModel([TOUCH]) as model:
        run = run_claude(project, home, model, "make the marker")
    _assert_claude_ok(run)
    assert not (project / "marker.txt").exists()
    assert "needs approval" in model.tool_results[0].text


@pytest.mark.parametrize(("behaviour", "on_failure", "blocked"), [
    ("crash", None, False),       # exit 1: fails OPEN by default
    ("crash", "continue", False),
    ("crash", "block", True),     # 2.1.332: onFailure "block" turns a crash into a block
    ("missing", None, False),     # command not found: fails open
    ("missing", "block", True),
    ("sleep", None, False),       # timeout: fails open
    ("sleep", "block", True),
    ("badjson", None, False),     # exit 0 + invalid JSON: runs ...
    ("badjson", "block", False),  # ... even with onFailure "block" (not a "failure")
])
def test_claude_on_failure(dirs: tuple[Path, Path], tmp_path: Path, behaviour: str,
                           on_failure: str | None, blocked: bool) -> None:
    project, home = dirs
    if behaviour == "missing":
        command = str(tmp_path / "no-such-guard")
    else:
        command = write_hook(tmp_path / "hook.py", behaviour)
    claude_setup(project, home, hook_command=command, on_failure=on_failure,
                 hook_timeout=1 if behaviour == "sleep" else 30,
                 allow=["Bash(touch marker.txt)"])
    with MockModel([TOUCH]) as model:
        run = run_claude(project, home, model, "make the marker")
    _assert_claude_ok(run)
    assert (project / "marker.txt").exists() is not blocked, run.output
    (result,) = model.tool_results
    if blocked:
        assert result.is_error is True
        assert 'blocking because onFailure is "block"' in result.text, result.text
        assert run.result is not None and run.result["permission_denials"]
    else:
        assert result.is_error is False, result.text


def test_claude_invalid_on_failure_value_drops_the_whole_settings_file(
        dirs: tuple[Path, Path], tmp_path: Path) -> None:
    """An unknown onFailure value makes 2.1.332 ignore settings.local.json entirely (its hook AND
    its allow rules): the hook never runs."""
    project, home = dirs
    log = tmp_path / "hook.jsonl"
    claude_setup(project, home, hook_command=write_hook(tmp_path / "hook.py", "deny", log=log),
                 on_failure="sometimes", allow=["Bash(touch marker.txt)"])
    with MockModel([TOUCH]) as model:
        run = run_claude(project, home, model, "make the marker")
    _assert_claude_ok(run)
    assert hook_payloads(log) == []
    assert "needs approval" in model.tool_results[0].text


def test_claude_mcp_tool_goes_through_the_hook(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    project, home = dirs
    notes = project / "notes.txt"
    log = tmp_path / "hook.jsonl"
    for behaviour in ("deny", "allow"):
        claude_setup(project, home,
                     hook_command=write_hook(tmp_path / "hook.py", behaviour, log=log),
                     allow=["mcp__notes__add_note"],
                     mcp_servers={"notes": notes_server_spec(notes)})
        with MockModel([NOTE]) as model:
            run = run_claude(project, home, model, "add a note")
        _assert_claude_ok(run)
        (result,) = model.tool_results
        if behaviour == "deny":
            assert not notes.exists()
            assert result.is_error is True and DENY_REASON in result.text
        else:
            assert notes.read_text() == "hello from the mock\n"
            assert "added note 1" in result.text
    payloads = hook_payloads(log)
    assert [p["tool_name"] for p in payloads] == ["mcp__notes__add_note"] * 2
    assert payloads[0]["tool_input"] == {"text": "hello from the mock"}
    # MCP tools are deferred in 2.1.332 (listed by name for ToolSearch, not in `tools`), yet a
    # direct call by the full name works.
    assert "mcp__notes__add_note" not in model.tools_offered("anthropic")


# -- Codex ---------------------------------------------------------------------------------------

def test_codex_trusted_hash_matches_what_codex_computes(dirs: tuple[Path, Path]) -> None:
    """codex_hook_trusted_hash / codex_hook_state_key against Codex's own hooks/list."""
    project, home = dirs
    handlers: list[dict[str, Any]] = [
        {"type": "command", "command": "/usr/bin/python3 -I /x/guard.py", "timeout": 30},
        {"type": "command", "command": "a b", "statusMessage": "checking"},  # timeout default
        {"type": "command", "command": "c", "statusMessage": "", "async": True, "timeout": 5},
        {"type": "command", "command": "d", "onFailure": "block",            # not Codex's key
         "additionalContextLimit": 100},
        {"type": "command", "command": 'echo "héllo ✓" \\ /x'},              # raw UTF-8
    ]
    document = {"hooks": {
        "PreToolUse": [{"matcher": "*", "hooks": handlers[:2]},
                       {"hooks": handlers[2:]}],                      # no matcher
        "PostToolUse": [{"matcher": "", "hooks": [handlers[0]]}],
        "Stop": [{"matcher": "ignored", "hooks": [handlers[1]]}],      # matcher dropped
        "PermissionRequest": [{"matcher": "Bash", "hooks": [handlers[3]]}],
        "SessionStart": [{"matcher": "stärtup", "hooks": [handlers[4]]}],
    }}
    hooks_json = project / ".codex" / "hooks.json"
    hooks_json.parent.mkdir()
    hooks_json.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text(
        f'[projects."{project}"]\ntrust_level = "trusted"\n' + CODEX_OFFLINE_TOML)
    listed = {h["key"]: h for h in codex_hooks_list(project, home)}
    expected = codex_hook_trust_entries(hooks_json, document)
    assert set(listed) == set(expected)
    for key, value in expected.items():
        assert listed[key]["currentHash"] == value, (key, listed[key])
        assert listed[key]["trustStatus"] == "untrusted"
    assert codex_hook_state_key(hooks_json, "PreToolUse", 1, 0) == \
        f"{hooks_json}:pre_tool_use:1:0"
    assert codex_hook_trusted_hash("pre_tool_use", "*", [handlers[0]]) == \
        listed[f"{hooks_json}:pre_tool_use:0:0"]["currentHash"]

    # Written into config.toml, Codex reports them trusted.
    with (home / ".codex" / "config.toml").open("a", encoding="utf-8") as fh:
        fh.write(codex_hook_trust_toml(expected))
    assert {h["trustStatus"] for h in codex_hooks_list(project, home)} == {"trusted"}


def _assert_codex_ok(run: HarnessRun) -> None:
    assert run.proc.returncode == 0, run.output
    assert run.seconds < MAX_RUN_SECONDS


def test_codex_deny_hook_blocks_shell(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    project, home = dirs
    log = tmp_path / "hook.jsonl"
    with MockModel([TOUCH]) as model:
        entries = codex_setup(project, home, model,
                              hook_command=write_hook(tmp_path / "hook.py", "deny", log=log))
        run = run_codex(project, home, "make the marker")
    _assert_codex_ok(run)
    assert list(entries) == [f"{project}/.codex/hooks.json:pre_tool_use:0:0"]
    assert not (project / "marker.txt").exists(), run.output
    (call,) = model.tool_calls
    assert call.name in ("exec_command", "shell_command", "shell")
    (result,) = model.tool_results
    assert DENY_REASON in result.text, result
    (payload,) = hook_payloads(log)
    assert payload["tool_name"] == "Bash"
    assert payload["tool_input"] == {"command": "touch marker.txt"}
    assert model.main_requests("openai")[0].path == "/v1/responses"
    assert model.errors == []


def test_codex_allow_hook_lets_shell_run(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    project, home = dirs
    log = tmp_path / "hook.jsonl"
    with MockModel([TOUCH]) as model:
        codex_setup(project, home, model,
                    hook_command=write_hook(tmp_path / "hook.py", "allow", log=log))
        run = run_codex(project, home, "make the marker")
    _assert_codex_ok(run)
    assert (project / "marker.txt").exists(), run.output
    assert len(hook_payloads(log)) == 1
    assert "exited with code 0" in model.tool_results[0].text
    assert run.proc.stdout.strip().endswith(model.final_text)


def test_codex_untrusted_hook_is_silently_skipped(dirs: tuple[Path, Path],
                                                  tmp_path: Path) -> None:
    """Without its trusted_hash entry Codex never runs the deny hook: the tool runs."""
    project, home = dirs
    log = tmp_path / "hook.jsonl"
    with MockModel([TOUCH]) as model:
        codex_setup(project, home, model, trust_hooks=False,
                    hook_command=write_hook(tmp_path / "hook.py", "deny", log=log))
        run = run_codex(project, home, "make the marker")
    _assert_codex_ok(run)
    assert (project / "marker.txt").exists()
    assert hook_payloads(log) == []


def test_codex_mcp_tool_goes_through_the_hook(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    project, home = dirs
    notes = project / "notes.txt"
    log = tmp_path / "hook.jsonl"
    for behaviour in ("deny", "allow"):
        with MockModel([NOTE]) as model:
            codex_setup(project, home, model,
                        hook_command=write_hook(tmp_path / "hook.py", behaviour, log=log),
                        mcp_servers={"notes": notes_server_spec(notes)})
            run = run_codex(project, home, "add a note")
        _assert_codex_ok(run)
        assert "mcp__notes__add_note" in model.tools_offered("openai")
        (call,) = model.tool_calls
        assert (call.namespace, call.name) == ("mcp__notes", "add_note")
        (result,) = model.tool_results
        if behaviour == "deny":
            assert not notes.exists()
            assert DENY_REASON in result.text
        else:
            assert notes.read_text() == "hello from the mock\n"
            assert "added note 1" in result.text
    payloads = hook_payloads(log)
    assert [p["tool_name"] for p in payloads] == ["mcp__notes__add_note"] * 2


def test_codex_env_key_reaches_the_upstream(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    project, home = dirs
    with MockModel([]) as model:
        codex_setup(project, home, model, env_key="MOCK_PROVIDER_KEY")
        run = run_codex(project, home, "say hi", env={"MOCK_PROVIDER_KEY": "sk-phantom-123"})
    _assert_codex_ok(run)
    assert {r.header("authorization") for r in model.main_requests("openai")} == \
        {"Bearer sk-phantom-123"}


# -- the environment -----------------------------------------------------------------------------

def test_harness_env_leaks_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-REAL")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-REAL")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:8080")
    env = harness_env(tmp_path / "h", EXTRA="1")
    assert env["HOME"] == str(tmp_path / "h")
    assert env["CODEX_HOME"] == str(tmp_path / "h" / ".codex")
    assert env["EXTRA"] == "1"
    assert not {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "HTTPS_PROXY"} & set(env)
    assert (tmp_path / "h" / ".codex").is_dir()


def test_both_harnesses_are_installed() -> None:
    for name in ("claude", "codex"):
        path = harness_bin(name)
        assert path.is_file()


def test_missing_harness_skips_locally_and_fails_in_ci(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from . import binaries

    monkeypatch.setattr(binaries, "TOOLS_BIN", tmp_path / "nothing")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="scripts/install-harnesses"):
        binaries.harness_bin("codex")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="must not be skipped"):
        binaries.harness_bin("claude")
    with pytest.raises(ValueError):
        binaries.harness_bin("cursor-agent")


@pytest.mark.parametrize("harness", ["claude", "codex"])
def test_script_with_two_calls(dirs: tuple[Path, Path], tmp_path: Path, harness: str) -> None:
    """Each follow-up request (carrying the previous tool result) gets the next scripted call."""
    project, home = dirs
    log = tmp_path / "hook.jsonl"
    command = write_hook(tmp_path / "hook.py", "allow", log=log)
    script = [TOUCH, ToolCall("Bash", {"command": "touch second.txt"})]
    with MockModel(script) as model:
        if harness == "claude":
            claude_setup(project, home, hook_command=command,
                         allow=["Bash(touch marker.txt)", "Bash(touch second.txt)"])
            run = run_claude(project, home, model, "make two markers")
            _assert_claude_ok(run)
        else:
            codex_setup(project, home, model, hook_command=command)
            run = run_codex(project, home, "make two markers")
            _assert_codex_ok(run)
    assert (project / "marker.txt").exists() and (project / "second.txt").exists(), run.output
    assert [c.script_index for c in model.tool_calls] == [0, 1]
    assert len(model.tool_results) == 2
    assert len(model.main_requests()) == 3
    assert [p["tool_input"]["command"] for p in hook_payloads(log)] == \
        ["touch marker.txt", "touch second.txt"]

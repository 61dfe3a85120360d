"""The tools each pinned harness version offers its model, captured from the real binary.

Each harness is started headless, offline, in a plain git checkout against the mock model
(tests/harness/mock_model.py, 127.0.0.1), and every tool name its requests offer is collected:
Anthropic `tools[].name`, OpenAI Responses tools (a namespace's as `<namespace>__<name>`, a
built-in tool without a name by its `type`), chat completions `tools[].function.name`, Gemini
`tools[].functionDeclarations[].name`. No MCP server is configured, so every name is the
harness's own.

The captures are committed under tests/harness/tools/<harness>-<version>.json; the guard's tool
tables (`agentstack._guard.TOOLS` and `INERT`) must list every captured name, and a harness test
compares each committed capture with a fresh one (tests/guard/test_guard_tools.py). To capture again
after a version bump in scripts/install-harnesses:

    .venv/bin/python -m tests.harness.tool_tables [harness ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.harness.mock_model import MockModel, RecordedRequest, offered_tools
from tests.support.plugindeps import seeded

TABLES = Path(__file__).resolve().parent / "tools"
# The harnesses a binary exists for, with the one it is started as.
BINARIES = {"claude-code": "claude", "codex": "codex", "gemini-cli": "gemini",
            "opencode": "opencode", "copilot": "copilot", "qwen-code": "qwen",
            "droid": "droid", "kilo": "kilo", "cline": "cline", "auggie": "auggie"}


def table_path(harness: str, version: str) -> Path:
    return TABLES / f"{harness}-{version}.json"


_DEFERRED = "The following deferred tools are now available via ToolSearch"


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return []


def names_offered(request: RecordedRequest) -> set[str]:
    """Every tool name one recorded request offers, in whichever API it speaks (and, for Claude
    Code, the deferred tools its system text names: ToolSearch loads them on demand)."""
    body = request.body
    if not isinstance(body, dict):
        return set()
    tools = body.get("tools") or []
    out: set[str] = set()
    if request.api == "anthropic":
        out.update(str(t["name"]) for t in tools if isinstance(t, dict) and "name" in t)
        for text in _strings(body):
            at = text.find(_DEFERRED)
            if at >= 0:  # the names follow the sentence, one a line, up to a blank line
                block = text[at:].split("\n\n", 1)[0]
                out.update(line for line in block.split("\n")[1:] if line.isidentifier())
        return out
    if request.api == "augment":  # Auggie's chat-stream: `tool_definitions[].name`
        return {str(t["name"]) for t in body.get("tool_definitions") or []
                if isinstance(t, dict) and "name" in t}
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        for kind in ("function", "custom"):  # chat completions: a function, a freeform tool
            if isinstance(tool.get(kind), dict) and "name" in tool[kind]:
                out.add(str(tool[kind]["name"]))
        for declaration in tool.get("functionDeclarations") or []:
            if isinstance(declaration, dict) and "name" in declaration:
                out.add(str(declaration["name"]))  # Gemini
        named = any(k in tool for k in ("name", "function", "custom", "functionDeclarations"))
        if not named and isinstance(tool.get("type"), str) and tool["type"] != "namespace":
            out.add(tool["type"])  # a Responses built-in (`web_search`, `local_shell`)
    out.update(name for name, _ in offered_tools(body))  # Responses, namespaces included
    return out


def _lsp_config(project: Path) -> None:
    """Copilot offers its `lsp` tool only with a language server configured: one that reads its
    input and answers nothing (it is never asked anything)."""
    server = {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"],
              "fileExtensions": {".py": "python"}}
    (project / ".github").mkdir(exist_ok=True)
    (project / ".github" / "lsp.json").write_text(json.dumps({"lspServers": {"py": server}}))
    (project / "a.py").write_text("x = 1\n")


def drive(harness: str, project: Path, home: Path, model: MockModel) -> str:
    """One headless session of the real harness in `project`; returns its output."""
    from tests.harness.binaries import harness_bin, harness_env
    from tests.harness.drive import run_claude, run_codex
    from tests.harness.test_harness_above_e2e import _user_config
    from tests.harness.test_harness_surface_e2e import _codex_home

    _user_config(harness, home)
    if harness == "claude-code":
        return run_claude(project, home, model, "say hi").output
    if harness == "codex":
        _codex_home(home, model)
        return run_codex(project, home, "say hi").output
    if harness == "gemini-cli":
        argv = [str(harness_bin("gemini")), "-p", "say hi", "--approval-mode", "yolo"]
        env = harness_env(home, GEMINI_API_KEY="dummy", GOOGLE_GEMINI_BASE_URL=model.url,
                          GEMINI_CLI_TRUST_WORKSPACE="true")
    elif harness == "qwen-code":
        from tests.apply.test_adapters_qwen_code import _user_settings

        _user_settings(home)
        (home / ".qwen" / "trustedFolders.json").write_text(
            json.dumps({str(project): "TRUST_FOLDER"}))
        argv = [str(harness_bin("qwen")), "-p", "say hi", "--yolo"]
        env = harness_env(home, OPENAI_API_KEY="dummy", OPENAI_BASE_URL=model.openai_base_url,
                          OPENAI_MODEL="gpt-4o")
    elif harness == "droid":
        from tests.apply.test_adapters_droid import droid_env

        argv = [str(harness_bin("droid")), "exec", "-m", "custom:gpt-4o", "--auto", "high",
                "say hi"]
        env = droid_env(home, model)
    elif harness == "kilo":
        from tests.apply.test_adapters_kilo import kilo_env

        argv = [str(harness_bin("kilo")), "run", "say hi"]
        env = kilo_env(home, model)
    elif harness == "cline":
        return _drive_cline(project, home, model)
    elif harness == "auggie":
        from tests.apply.test_adapters_auggie import auggie_env

        argv = [str(harness_bin("auggie")), "--print", "say hi"]
        env = auggie_env(home, model)
    elif harness == "opencode":
        from tests.apply.test_adapters_opencode import opencode_user_config

        env = opencode_user_config(home, model)
        argv = [str(harness_bin("opencode")), "run", "say hi"]
    else:
        from tests.apply.test_adapters_copilot import copilot_env

        _lsp_config(project)
        argv = [str(harness_bin("copilot")), "-p", "say hi", "--allow-all-tools"]
        env = copilot_env(home, COPILOT_PROVIDER_BASE_URL=model.openai_base_url,
                          COPILOT_MODEL="gpt-4o")
    with seeded(argv, project, env):
        done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True,
                              timeout=240)
    return done.stdout + done.stderr


def _drive_cline(project: Path, home: Path, model: MockModel) -> str:
    """Cline leaves a hub daemon holding inherited pipes: its output goes to a file, and the
    daemon is reaped."""
    from tests.harness.binaries import harness_bin, harness_env
    from tests.harness.drive import reaping

    env = harness_env(home)
    out = home / "cline-output.txt"
    with reaping():
        subprocess.run([str(harness_bin("cline")), "auth", "-p", "openai", "-k", "dummy", "-m",
                        "gpt-4o", "-b", model.openai_base_url], cwd=project, env=env,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=240, check=True)
        with out.open("w") as sink, subprocess.Popen(
                [str(harness_bin("cline")), "--json", "say hi"], cwd=project, env=env,
                stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                start_new_session=True) as proc:
            proc.wait(timeout=240)
    return out.read_text()


def capture(harness: str, work: Path, home: Path) -> set[str]:
    """The tool names the real harness offers in one headless session in `work`."""
    project = work / "proj"
    project.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    with MockModel([]) as model:
        output = drive(harness, project, home, model)
    offered: set[str] = set()
    for request in model.requests:
        offered |= names_offered(request)
    if not offered:
        raise RuntimeError(f"{harness} offered no tools; its output ends: {output[-2000:]}")
    return offered


def record(harness: str, version: str, names: set[str]) -> dict[str, Any]:
    return {"harness": harness, "version": version, "tools": sorted(names)}


def main(argv: list[str]) -> int:
    import os

    from agentstack import harnesses as H

    for harness in argv or sorted(BINARIES):
        version = H.BY_NAME[harness].version
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp) / "home"
            home.mkdir()
            env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
                   "XDG_CACHE_HOME": str(home / ".cache")}
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                names = capture(harness, Path(tmp), home)
            finally:
                for key, value in saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
        path = table_path(harness, version)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record(harness, version, names), indent=2) + "\n")
        print(f"{path}: {len(names)} tools")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

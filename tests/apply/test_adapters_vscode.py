"""VS Code: golden files (tests/apply/test_apply.py) and the rendered JSON checked against the keys
VS Code's MCP configuration reference documents. Not verified by a binary: VS Code has no
installable headless harness. Also: every harness rendered into one project at once merges the
files they share (.mcp.json, AGENTS.md, .agents/skills, .github/hooks/agentstack.json)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from tests.support.adapters import (
    current,
    guard_snapshot,
    locked_project,
    trust_and_apply,
    without_relay,
)
from tests.support.cli import run_cli_in_process as run_cli

ALL = '["claude-code", "codex", "gemini-cli", "opencode", "copilot", "vscode", "cursor"]'
# code.visualstudio.com/docs/copilot/reference/mcp-configuration
STDIO_KEYS = {"type", "command", "args", "env", "envFile"}
HTTP_KEYS = {"type", "url", "headers"}
VARIABLE = re.compile(r"\$\{(env:[A-Za-z_][A-Za-z0-9_]*|input:[^}]+|workspaceFolder)\}")


def _project(tmp_path: Path, harnesses: str = '["vscode"]') -> Path:
    server = f"command = {json.dumps(sys.executable)}\nargs = [\"-I\", \"server.py\"]\n"
    return locked_project(tmp_path / "proj", f"""\
[project]
name = "vscode"
harnesses = {harnesses}

[servers.notes]
{server}env = {{ LEVEL = "info", TOKEN = "secret:notes-token" }}

[servers.sub]
{server}cwd = "sub"

[servers.docs]
url = "https://docs.example.invalid/mcp"
headers = {{ Authorization = "secret:docs-token", X-Team = "core" }}

[instructions]
files = ["base.md"]
""", {"base.md": "Be careful.\n", "server.py": "", "sub/server.py": ""})



def test_mcp_json_uses_only_documented_keys(tmp_path: Path) -> None:
    root = _project(tmp_path)
    trust_and_apply(root)
    doc = json.loads((root / ".vscode" / "mcp.json").read_text())
    assert set(doc) <= {"servers", "inputs"}
    servers: dict[str, Any] = doc["servers"]
    assert set(servers) == {"notes", "sub", "docs"}
    for name, server in servers.items():
        assert server["type"] in ("stdio", "http"), name
        allowed = STDIO_KEYS if server["type"] == "stdio" else HTTP_KEYS
        assert set(server) <= allowed, (name, set(server) - allowed)
        for value in [*server.get("env", {}).values(), *server.get("headers", {}).values()]:
            assert "${" not in VARIABLE.sub("", value), value  # only variables VS Code knows
    # Only literal values are rendered; the secret reaches the server through the launcher.
    assert servers["notes"]["env"] == {"LEVEL": "info"}
    assert without_relay(servers["notes"]["args"])[:6] == [
        "-I", "-m", "agentstack.launch", "--secret", "TOKEN=notes-token", "--"]
    # Behind the relay, which starts env(1) in the server's directory.
    sub = servers["sub"]["args"]
    assert sub[sub.index("--") + 1 : sub.index("--") + 4] == ["/usr/bin/env", "-C", str(root / "sub")]
    # The remote server through the relay's remote mode: no URL, no header, no secret reference.
    assert servers["docs"]["type"] == "stdio" and "headers" not in servers["docs"]
    assert servers["docs"]["args"][-2] == "--remote"
    hooks = json.loads((root / ".github" / "hooks" / "agentstack.json").read_text())
    assert hooks["version"] == 1
    assert "agentstack._guard" in hooks["hooks"]["preToolUse"][0]["bash"]


def test_every_harness_in_one_project_merges_shared_files(tmp_path: Path,
                                                          isolated_home: Path) -> None:
    root = _project(tmp_path, ALL)
    trust_and_apply(root)
    from agentstack.apply.engine import load_ledger

    files = load_ledger(root)["files"]
    # One ledger entry per file, one entry per owned key in it.
    assert sorted(files[str(root / ".mcp.json")]["keys"]) == [
        '["mcpServers", "docs"]', '["mcpServers", "notes"]', '["mcpServers", "sub"]']
    assert files[str(root / "AGENTS.md")]["kind"] == "block"
    assert (root / "AGENTS.md").read_text().count("agentstack:begin") == 1
    assert run_cli("apply", "--check", cwd=root).returncode == 0  # stable: nothing to do
    # The guard holds for the whole set.
    from agentstack._guard import check_files

    check_files(guard_snapshot(root))
    # Dropping harnesses removes only what no remaining harness renders.
    manifest = root / "agentstack.toml"
    manifest.write_text(manifest.read_text().replace(ALL, '["claude-code", "codex"]'))
    for command in (("lock",), ("trust", "--yes", "--accept-risk"), ("apply", "--write")):
        result = run_cli(*command, cwd=root)
        assert result.returncode == 0, result.stderr
    assert (root / ".mcp.json").exists() and (root / "AGENTS.md").exists()
    assert not (root / ".github" / "hooks" / "agentstack.json").exists()
    assert not (root / ".vscode").exists() and not (root / ".cursor").exists()
    assert not (root / "opencode.json").exists() and not (root / "GEMINI.md").exists()
    assert not (isolated_home / ".copilot" / "config.json").exists()  # agentstack created it


def test_a_partial_apply_keeps_other_harnesses_keys_in_a_shared_file(
        tmp_path: Path, monkeypatch: Any) -> None:
    """Two harnesses owning different keys of one file: `apply --harness A` keeps B's keys."""
    from agentstack_adapters import OwnedKeys, registry

    from agentstack.apply.engine import load_ledger, plan, write

    class Fake:
        def __init__(self, name: str) -> None:
            self._name = name

        @property
        def name(self) -> str:
            return self._name

        def render(self, context: Any) -> list[Any]:
            return [OwnedKeys(path="shared.json", format="json",
                              keys={("by", self._name): True})]

    monkeypatch.setitem(registry.BUILTIN, "vscode", Fake("vscode"))
    monkeypatch.setitem(registry.BUILTIN, "cursor", Fake("cursor"))
    root = _project(tmp_path, '["vscode", "cursor"]')
    assert run_cli("trust", "--yes", "--accept-risk", cwd=root).returncode == 0
    _, _, document, digest = current(root)
    write(plan(root, document, digest))
    assert json.loads((root / "shared.json").read_text()) == {"by": {"cursor": True,
                                                                     "vscode": True}}
    partial = plan(root, document, digest, ["vscode"])
    assert not partial.pending and not partial.conflicts
    write(partial)
    assert json.loads((root / "shared.json").read_text()) == {"by": {"cursor": True,
                                                                     "vscode": True}}
    keys = load_ledger(root)["files"][str(root / "shared.json")]["keys"]
    assert sorted(keys) == ['["by", "cursor"]', '["by", "vscode"]']

"""`doctor`: per harness in the manifest, its binary and what its own `mcp list` says about the
locked servers; `mcp list` runs only once the project is trusted (it can start servers)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from agentstack.mcp_status import server_states
from tests.conftest import make_project

# In process: `doctor` starts the harness binaries it asks (and the fake `copilot`) either way.
from tests.support.cli import run_cli_in_process as run_cli
from tests.support.project import manifest

# What each CLI printed (measured), trimmed to the server lines.
OUTPUTS = {
    "claude-code": "notes: python3 notes.py - ✔ Connected\njournal: python3 j.py - ✗ Failed to connect\n",
    "codex": "Name     Command  Args  Env  Cwd  Status   Auth\nnotes    python3  x.py  -    -    enabled  Unsupported\n",
    "gemini-cli": "Configured MCP servers:\n\n✓ notes: python3 x.py (stdio) - Connected\n○ journal: python3 y (stdio) - Disabled\n",
    "opencode": "┌  MCP Servers\n│\n●  \x1b[0m✓ notes \x1b[90mconnected\n│      python3 x.py\n│\n└  1 server(s)\n",
    "copilot": "Workspace servers:\n  notes (local)\n",
}


@pytest.mark.parametrize("harness", sorted(OUTPUTS))
def test_server_states_per_cli(harness: str) -> None:
    states = server_states(OUTPUTS[harness], ["journal", "notes", "other"])
    assert states["notes"] == ("listed" if harness in ("codex", "copilot") else "connected")
    assert states["other"] == "missing"
    assert states["journal"] == {"claude-code": "failed", "gemini-cli": "disabled"}.get(
        harness, "missing")


def test_a_server_name_inside_another_does_not_count() -> None:
    assert server_states("  my-notes (local)\n  notes2 (local)\n", ["notes"]) == {
        "notes": "missing"}


def _fake_cli(bin_dir: Path, name: str, log: Path) -> None:
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\n[ \"$1\" = mcp ] && echo \"$PWD $*\" >> {log}\n"
                      "printf 'Workspace servers:\\n  notes (local)\\n'\n")
    script.chmod(0o755)


@pytest.mark.slow
def test_doctor_runs_mcp_list_only_after_trust(tmp_path: Path) -> None:
    root = make_project(tmp_path / "proj", manifest("d", "copilot", "cursor").server("notes", "-c", "pass"))
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    assert run_cli("lock", cwd=root).returncode == 0
    log = tmp_path / "calls.log"
    _fake_cli(tmp_path / "bin", "copilot", log)
    env = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}

    def rows() -> dict[str, dict[str, object]]:
        done = run_cli("doctor", "--json", cwd=root, env=env)
        return {c["name"]: c for c in json.loads(done.stdout)["checks"]}

    before = rows()
    assert "not trusted" in str(before["mcp copilot"]["detail"])
    assert not log.exists()  # nothing of the project's ran before consent
    assert "not verified by a binary" in str(before["mcp cursor"]["detail"])
    assert run_cli("trust", "--yes", "--accept-risk", cwd=root).returncode == 0
    after = rows()
    assert after["mcp copilot"]["status"] == "ok"
    assert after["mcp copilot"]["servers"] == {"notes": "listed"}
    assert log.read_text().strip() == f"{root.resolve()} mcp list"

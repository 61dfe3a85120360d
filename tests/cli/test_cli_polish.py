"""CLI polish that a new user meets first: --version, bare `agentstack`, `add` refusing paths that
do not exist, the `--` hint, did-you-mean for manifest keys, help without Python types, a network
failure (exit 1, its own message), and a source that is also a render target."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from agentstack import __version__
from tests.conftest import make_project

# In process: what these tests check is what a command answers, not the process.
from tests.support.cli import run_cli_in_process as run_cli
from tests.support.project import manifest

BASE = str(manifest("p", "claude-code", "codex"))


def test_version_and_bare_command(tmp_path: Path) -> None:
    version = run_cli("--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == f"agentstack {__version__}"
    bare = run_cli(cwd=tmp_path)
    assert bare.returncode == 0, bare.stderr
    assert "Usage:" in bare.stdout and "trust" in bare.stdout


def test_help_names_what_to_type_not_python_types(tmp_path: Path) -> None:
    for args in (["--help"], ["add", "server", "--help"], ["trust", "--help"],
                 ["revoke", "--help"], ["init", "--help"]):
        out = run_cli(*args, cwd=tmp_path, env={"COLUMNS": "120"}).stdout
        assert "<bool>" not in out and "<list[str]>" not in out and "<str>" not in out, args
    assert "KEY=VALUE" in run_cli("add", "server", "--help", cwd=tmp_path).stdout


def test_add_refuses_paths_that_do_not_exist(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", BASE)
    before = (root / "agentstack.toml").read_text()
    missing = run_cli("add", "instructions", "RULES.md", cwd=root)
    assert missing.returncode == 2 and "RULES.md: no such file" in missing.stderr
    assert "create it first" in missing.stderr
    skill = run_cli("add", "skill", "review", "skills/review", cwd=root)
    assert skill.returncode == 2 and "no such directory" in skill.stderr
    assert (root / "agentstack.toml").read_text() == before
    (root / "RULES.md").write_text("Be kind.\n")
    assert run_cli("add", "instructions", "RULES.md", cwd=root).returncode == 0


def test_server_flags_before_dashdash_get_a_hint(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", BASE)
    result = run_cli("add", "server", "fs", "npx", "-y", "@scope/pkg@1.2.3", cwd=root)
    assert result.returncode == 2
    assert "-y is not an option of 'agentstack add server'" in result.stderr
    assert "after '--'" in result.stderr
    ok = run_cli("add", "server", "fs", "--env", "A=b", "--", "npx", "-y", "@scope/pkg@1.2.3",
                 cwd=root)
    assert ok.returncode == 0, ok.stderr


def test_manifest_key_typos_get_a_did_you_mean(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", '[project]\nname = "p"\nharness = ["codex"]\n\n'
                        '[servers.a]\ncomand = "x"\n\n[sandbox]\nwrite_dir = ["."]\n')
    result = run_cli("lock", cwd=root)
    assert result.returncode == 2
    for typo, meant in (("harness", "harnesses"), ("comand", "command"),
                        ("write_dir", "write_dirs")):
        assert f"unknown key '{typo}' (hint: did you mean '{meant}'?)" in result.stderr
    assert "Extra inputs are not permitted" not in result.stderr


def test_a_network_failure_exits_1_with_its_own_message(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port on 127.0.0.1 that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    root = make_project(tmp_path / "p", BASE + f'\n[skills.remote]\ngit = "https://127.0.0.1:{port}/'
                        'skills.git"\nrev = "v1"\n')
    result = run_cli("lock", cwd=root)
    assert result.returncode == 1, result.stderr
    assert "cannot reach" in result.stderr and "(network)" in result.stderr
    assert "problem" not in result.stderr
    assert not (root / "agentstack.lock").exists()


def test_a_render_target_cannot_be_an_instruction_source(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", BASE + '\n[instructions]\nfiles = ["AGENTS.md"]\n',
                        {"AGENTS.md": "Be kind.\n", "CLAUDE.md": "Team notes.\n"})
    result = run_cli("lock", cwd=root)
    assert result.returncode == 2
    assert "AGENTS.md is where agentstack writes codex's instructions" in result.stderr
    assert "git mv AGENTS.md AGENTS.base.md" in result.stderr
    added = run_cli("add", "instructions", "CLAUDE.md", cwd=root)
    assert added.returncode == 2 and "claude-code" in added.stderr
    # Renamed as the hint says, it locks, and apply renders into AGENTS.md without touching the
    # source: applying twice changes nothing.
    (root / "AGENTS.md").rename(root / "AGENTS.base.md")
    (root / "agentstack.toml").write_text(BASE + '\n[instructions]\nfiles = ["AGENTS.base.md"]\n')
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    assert run_cli("lock", cwd=root).returncode == 0
    assert run_cli("trust", "--yes", cwd=root).returncode == 0
    assert run_cli("apply", "--write", cwd=root).returncode == 0
    assert (root / "AGENTS.base.md").read_text() == "Be kind.\n"
    assert "Be kind." in (root / "AGENTS.md").read_text()
    assert run_cli("lock", "--check", cwd=root).returncode == 0
    assert run_cli("apply", "--check", cwd=root).returncode == 0


def test_why_prints_one_verdict(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", BASE + '\n[sandbox]\nwrite_dirs = ["."]\n')
    assert run_cli("lock", cwd=root).returncode == 0
    result = run_cli("why", "--path", str(tmp_path / "elsewhere"), "--op", "read", cwd=root)
    assert result.returncode == 1
    first = result.stdout.splitlines()[0]
    assert first.startswith("denied: ") and "denied — denied" not in result.stdout


def test_status_and_apply_say_who_changed_what(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", BASE + '\n[instructions]\nfiles = ["RULES.md"]\n',
                        {"RULES.md": "Be kind.\n"})
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    assert run_cli("lock", cwd=root).returncode == 0
    assert run_cli("trust", "--yes", cwd=root).returncode == 0
    applied = run_cli("apply", "--write", cwd=root)
    assert applied.returncode == 0 and "updated .git/info/exclude" in applied.stderr
    again = run_cli("apply", "--write", cwd=root)
    assert "exclude" not in again.stderr  # unchanged: not listed
    (root / "RULES.md").write_text("Be very kind.\n")
    stale = run_cli("status", cwd=root).stdout
    assert "RULES.md changed since it was locked and trusted: run 'agentstack lock'" in stale
    assert run_cli("lock", cwd=root).returncode == 0
    locked = run_cli("status", cwd=root).stdout
    assert "agentstack.lock changed since you trusted (an agentstack edit" in locked
    assert "behind agentstack's back" not in locked
    mcp = root / ".claude" / "settings.local.json"
    mcp.write_text(mcp.read_text().replace("}", ', "x": 1}', 1))
    edited = run_cli("status", cwd=root).stdout
    assert ".claude/settings.local.json was edited behind agentstack's back" in edited

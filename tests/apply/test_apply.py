"""`apply`: golden renders, trust gating, conflicts, preservation of user data, crash safety."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, copy_example
from tests.support.cli import ok_in_process as _ok

# The commands run in process: what these tests check is the library's answer, not the process.
from tests.support.cli import run_cli_in_process as run_cli

GOLDEN = REPO / "tests" / "golden" / "apply"
REGENERATE = os.environ.get("AGENTSTACK_REGENERATE_GOLDEN") == "1"


def full_project(tmp_path: Path, *, trust: bool = True, git_init: bool = True) -> Path:
    root = copy_example("full", tmp_path)
    subprocess.run(["sh", str(root / "make-skill-repo.sh"), str(tmp_path / "skill-repo")],
                   check=True, capture_output=True, cwd=root)
    if git_init:
        subprocess.run(["git", "init", "-q", str(root)], check=True)
    assert run_cli("lock", cwd=root).returncode == 0
    if trust:
        result = run_cli("trust", "--yes", "--accept-risk", cwd=root)
        assert result.returncode == 0, result.stderr
    return root


def _normalise(text: str, root: Path, home: Path, tmp: Path) -> str:
    import re

    from agentstack_adapters.common import relay_start

    text = (text.replace(relay_start(), "<agentstack>/relaystart.py")
            .replace(str(root), "<project>").replace(sys.executable, "<python>")
            .replace(str(home), "<home>").replace(str(tmp), "<tmp>"))
    # Codex's hook hashes cover machine paths (the interpreter, the project): checked elsewhere.
    text = re.sub(r"sha256:[0-9a-f]{64}", "sha256:<hash of the hook>", text)
    # Qwen Code's server approvals hash each server's configuration (machine paths in it).
    return re.sub(r'"hash": "[0-9a-f]{64}"', '"hash": "<hash of the server>"', text)


@pytest.mark.parametrize(
    "harness",
    ["claude-code", "codex", "gemini-cli", "opencode", "copilot", "vscode", "cursor", "qwen-code",
     "droid", "kilo", "cline", "auggie", "crush"],
)
def test_golden_render(tmp_path: Path, isolated_home: Path, harness: str) -> None:
    from agentstack.apply.engine import plan
    from agentstack.consent.document import current as _current

    root = full_project(tmp_path, trust=False).resolve()
    _, _, document, digest = _current(root)
    changes = plan(root, document, digest, [harness]).changes
    rendered = {c.display: c for c in changes}
    golden_dir = GOLDEN / harness
    if REGENERATE:
        for old in golden_dir.rglob("*"):
            if old.is_file():
                old.unlink()
    seen = set()
    for display, change in sorted(rendered.items()):
        assert change.new is not None or change.link_target is not None
        text = change.link_target if change.link_target is not None else change.new.decode()  # type: ignore[union-attr]
        name = display.replace("~/", "HOME/")
        expected = golden_dir / name
        seen.add(expected)
        actual = _normalise(text, root, isolated_home, tmp_path)
        if REGENERATE:
            expected.parent.mkdir(parents=True, exist_ok=True)
            expected.write_text(actual)
        assert expected.exists(), f"no golden file {expected}; AGENTSTACK_REGENERATE_GOLDEN=1"
        assert actual == expected.read_text(), f"{display} differs from {expected}"
    on_disk = {p for p in golden_dir.rglob("*") if p.is_file()}
    assert on_disk == seen, "golden files for items no longer rendered"


def _rendered_paths(root: Path, home: Path) -> list[Path]:
    return [root / ".mcp.json", root / ".claude", root / ".codex", root / ".agents",
            root / "AGENTS.md", root / "CLAUDE.md", home / ".codex", home / ".claude.json"]


def test_apply_write_refuses_before_trust_and_writes_nothing(tmp_path: Path,
                                                             isolated_home: Path) -> None:
    root = full_project(tmp_path, trust=False)
    result = run_cli("apply", "--write", cwd=root)
    assert result.returncode == 1
    assert "not trusted" in result.stderr and "nothing was written" in result.stderr
    assert not any(p.exists() for p in _rendered_paths(root, isolated_home))
    # The dry run shows the plan and writes nothing either.
    dry = run_cli("apply", cwd=root)
    assert dry.returncode == 0 and "+++ b/.mcp.json" in dry.stdout
    assert not any(p.exists() for p in _rendered_paths(root, isolated_home))


def test_apply_write_check_and_idempotence(tmp_path: Path, isolated_home: Path) -> None:
    root = full_project(tmp_path)
    assert run_cli("apply", "--check", cwd=root).returncode == 1
    _ok("apply", "--write", cwd=root)
    assert run_cli("apply", "--check", cwd=root).returncode == 0
    mcp = json.loads((root / ".mcp.json").read_text())
    assert set(mcp["mcpServers"]) == {"notes", "clock", "docs"}
    notes = mcp["mcpServers"]["notes"]
    assert "NOTES_API_TOKEN" not in notes.get("env", {})  # the launcher reads it from the store
    assert notes["args"][:2] == ["-I", "-S"] and notes["args"][2].endswith("relaystart.py")
    assert notes["args"][3] == "--server"
    assert "--secret" in notes["args"]
    settings = json.loads((root / ".claude/settings.local.json").read_text())
    assert settings["enabledMcpjsonServers"] == ["clock", "docs", "notes"]
    guard = settings["hooks"]["PreToolUse"][0]["hooks"][0]
    assert guard["command"].startswith(sys.executable + " -I -c 'from agentstack._guard import")
    assert guard["onFailure"] == "block"
    assert os.access(root / ".claude/skills/release-notes/scripts/collect.sh", os.X_OK)
    assert "@.claude/agentstack/instructions.md" in (root / "CLAUDE.md").read_text()
    codex_user = (isolated_home / ".codex" / "config.toml").read_text()
    assert f'[projects."{root.resolve()}"]' in codex_user and "trusted_hash" in codex_user
    claude_user = json.loads((isolated_home / ".claude.json").read_text())
    assert claude_user["projects"][str(root.resolve())]["hasTrustDialogAccepted"] is True
    assert (isolated_home / ".claude.json").stat().st_mode & 0o077 == 0
    exclude = (root / ".git/info/exclude").read_text()
    assert "/.mcp.json" in exclude and "/.claude/settings.local.json" in exclude
    assert "/CLAUDE.md" in exclude  # created by agentstack, so per machine too


def test_secrets_never_rendered(tmp_path: Path) -> None:
    root = full_project(tmp_path)
    _ok("apply", "--write", cwd=root)
    codex = (root / ".codex/config.toml").read_text()
    assert "env_vars" not in codex and "NOTES_API_TOKEN=notes-token" in codex
    assert "${" not in codex  # Codex never expands ${} in env
    mcp = (root / ".mcp.json").read_text()
    assert "${NOTES_API_TOKEN}" not in mcp and "NOTES_API_TOKEN=notes-token" in mcp
    # The remote server's header secret: added by the relay (its remote mode), never rendered.
    assert "AGENTSTACK_SECRET_" not in codex + mcp and "Authorization" not in codex + mcp
    assert '"--remote"' in codex and '"https://docs.example.invalid/mcp"' in codex


def test_hand_edit_is_a_conflict_and_force_keeps_a_backup(tmp_path: Path,
                                                          isolated_home: Path) -> None:
    root = full_project(tmp_path)
    _ok("apply", "--write", cwd=root)
    mcp_path = root / ".mcp.json"
    data = json.loads(mcp_path.read_text())
    data["mcpServers"]["notes"]["command"] = "/bin/sh"
    mcp_path.write_text(json.dumps(data, indent=2))
    edited = mcp_path.read_bytes()
    result = run_cli("apply", "--write", cwd=root)
    assert result.returncode == 1
    assert ".mcp.json" in result.stderr and "mcpServers.notes" in result.stderr
    assert mcp_path.read_bytes() == edited  # nothing lost
    check = run_cli("apply", cwd=root)
    assert "conflict: .mcp.json" in check.stderr and '"/bin/sh"' in check.stdout
    forced = run_cli("apply", "--write", "--force", cwd=root)
    assert forced.returncode == 0, forced.stderr
    assert json.loads(mcp_path.read_text())["mcpServers"]["notes"]["command"] == sys.executable
    backups = list((isolated_home / ".config" / "agentstack" / "projects").rglob("backups/*/.mcp.json"))
    assert backups and backups[0].read_bytes() == edited


def test_user_data_is_preserved(tmp_path: Path) -> None:
    root = full_project(tmp_path)
    (root / ".codex").mkdir()
    (root / ".codex/config.toml").write_text(
        "# my own codex settings, keep me\nmodel = \"o4\"  # inline comment\n\n"
        "[mcp_servers.mine]\ncommand = \"my-server\"\n"
    )
    (root / ".mcp.json").write_text(json.dumps({"mcpServers": {"mine": {"command": "x"}},
                                                "other": 1}))
    (root / "CLAUDE.md").write_text("# Team notes\nWritten by a human.\n")
    # All three are on the harnesses' surface: reviewed before anything is rendered next to them.
    assert "surface[" in run_cli("apply", "--write", cwd=root).stderr
    _ok("lock", cwd=root)
    _ok("trust", "--yes", "--accept-risk", cwd=root)
    _ok("apply", "--write", cwd=root)
    assert run_cli("lock", "--check", cwd=root).returncode == 0  # rendering kept the pins
    codex = (root / ".codex/config.toml").read_text()
    assert codex.startswith("# my own codex settings, keep me\nmodel = \"o4\"  # inline comment")
    assert "[mcp_servers.mine]" in codex and "[mcp_servers.notes]" in codex
    mcp = json.loads((root / ".mcp.json").read_text())
    assert mcp["other"] == 1 and mcp["mcpServers"]["mine"] == {"command": "x"}
    claude_md = (root / "CLAUDE.md").read_text()
    assert claude_md.startswith("# Team notes\nWritten by a human.\n")
    assert "/CLAUDE.md" not in (root / ".git/info/exclude").read_text()  # the user's own file
    # Removing a server from the manifest removes it from the native files, and only it.
    manifest = root / "agentstack.toml"
    text = manifest.read_text()
    start = text.index("[servers.clock]")
    manifest.write_text(text[:start] + text[text.index("# Remote server"):])
    _ok("lock", cwd=root)
    _ok("trust", "--yes", "--accept-risk", cwd=root)
    _ok("apply", "--write", cwd=root)
    mcp = json.loads((root / ".mcp.json").read_text())
    assert set(mcp["mcpServers"]) == {"mine", "notes", "docs"}
    assert "[mcp_servers.clock]" not in (root / ".codex/config.toml").read_text()
    assert "[mcp_servers.mine]" in (root / ".codex/config.toml").read_text()


def test_unparseable_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    root = full_project(tmp_path)
    (root / ".mcp.json").write_text('{"mcpServers": {broken')
    _ok("lock", cwd=root)
    refused = run_cli("trust", "--yes", cwd=root)  # an unparseable surface file is a finding
    assert refused.returncode == 1 and "cannot be parsed" in refused.stdout + refused.stderr
    _ok("trust", "--yes", "--accept-risk", cwd=root)
    result = run_cli("apply", "--write", cwd=root)
    assert result.returncode == 1
    assert ".mcp.json cannot be parsed as JSON" in result.stderr
    assert "never replaces a file it cannot read" in result.stderr
    assert (root / ".mcp.json").read_text() == '{"mcpServers": {broken'
    assert not (root / ".claude").exists()  # nothing half-applied


def test_revoke_removes_harness_side_trust(tmp_path: Path, isolated_home: Path) -> None:
    root = full_project(tmp_path)
    codex_user = isolated_home / ".codex" / "config.toml"
    codex_user.parent.mkdir(parents=True)
    codex_user.write_text("# mine\nmodel = \"o4\"\n")
    _ok("apply", "--write", cwd=root)
    assert "trust_level" in codex_user.read_text()
    _ok("revoke", cwd=root)
    text = codex_user.read_text()
    real = str(root.resolve())
    assert "trust_level" not in text and f"{real}/.codex/hooks.json" not in text
    assert text.startswith("# mine\nmodel = \"o4\"")
    # The user-level guard stays: it keeps this (revoked) project blocked in Codex.
    assert "agentstack._guard import main; main()' --harness codex" in text
    assert f"{codex_user}:pre_tool_use:0:0" in text
    # agentstack created ~/.claude.json here, and nothing else is in it: it is removed.
    assert not (isolated_home / ".claude.json").exists()


@pytest.mark.slow
def test_sigkill_during_apply_leaves_each_file_old_or_new(tmp_path: Path) -> None:
    from agentstack.apply.engine import plan
    from agentstack.consent.document import current as _current

    root = full_project(tmp_path).resolve()
    _ok("apply", "--write", cwd=root)
    manifest = root / "agentstack.toml"
    rng = random.Random(7)
    for trial in range(12):
        text = manifest.read_text()
        manifest.write_text(text.replace('NOTES_LOG_LEVEL = "', f'NOTES_LOG_LEVEL = "{trial}'))
        (root / "instructions/style.md").write_text(f"Style, revision {trial}.\n")
        _ok("lock", cwd=root)
        trusted = run_cli("trust", "--yes", "--accept-risk", cwd=root)
        assert trusted.returncode == 0, trusted.stderr
        old = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and ".git" not in p.parts}
        _, _, document, digest = _current(root)
        expected = {c.path: c.new for c in plan(root, document, digest).changes if c.new is not None}
        env = dict(os.environ, PYTHONPATH=str(REPO))
        proc = subprocess.Popen([sys.executable, "-m", "agentstack", "apply", "--write"], cwd=root,
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.05, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for path, new in expected.items():
            if root not in path.parents:
                continue
            current = path.read_bytes() if path.exists() else None
            assert current in (old.get(path), new), f"trial {trial}: {path} is half-written"
        leftovers = [p for p in root.rglob(".*agentstack-*")]
        for leftover in leftovers:  # a killed writer may leave its temp file, never a torn target
            assert leftover.name.startswith(".")
        recovered = run_cli("apply", "--write", "--force", cwd=root)
        assert recovered.returncode == 0, recovered.stderr
        for leftover in leftovers:
            leftover.unlink(missing_ok=True)


def test_status_reports_drift_and_tracked_rendered_files(tmp_path: Path) -> None:
    root = full_project(tmp_path)
    _ok("apply", "--write", cwd=root)
    assert run_cli("status", cwd=root).returncode == 0
    data = json.loads((root / ".mcp.json").read_text())
    data["mcpServers"]["mine"] = {"command": "my-own-server"}  # hand-added: preserved, but drift
    (root / ".mcp.json").write_text(json.dumps(data))
    status = run_cli("status", "--json", cwd=root)
    assert status.returncode == 1
    report = json.loads(status.stdout)
    # The hand-added server is on Claude's surface: the lock is stale, naming it, and the guard's
    # rendered-file check sees the drift.
    assert report["drift"] == [".mcp.json"] and report["lock"] == "stale"
    assert "surface[.mcp.json]" in report["lock_problem"]
    assert "drift     .mcp.json" in run_cli("status", cwd=root).stdout
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x.invalid",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@x.invalid")
    subprocess.run(["git", "add", "-f", ".mcp.json"], cwd=root, check=True, env=env)
    tracked = json.loads(run_cli("status", "--json", cwd=root).stdout)["tracked"]
    assert tracked == [".mcp.json"]
    assert "git rm --cached .mcp.json" in run_cli("status", cwd=root).stdout


def test_status_reports_a_missing_guard_snapshot(tmp_path: Path, isolated_home: Path) -> None:
    root = full_project(tmp_path)
    _ok("apply", "--write", cwd=root)
    snapshots = list((isolated_home / ".config" / "agentstack" / "projects").glob("*/guard.json"))
    assert len(snapshots) == 1
    snapshots[0].unlink()
    status = run_cli("status", cwd=root)
    assert status.returncode == 1
    assert "no readable guard snapshot" in status.stdout and "apply --write" in status.stdout
    _ok("apply", "--write", cwd=root)
    assert run_cli("status", cwd=root).returncode == 0

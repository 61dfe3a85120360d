"""`agentstack adopt` moves a project's own servers and hooks under the manifest (dry run first,
comments kept, nothing lost or doubled); `agentstack shims` start a harness only when its surface
is the trusted one."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import copy_example
from tests.harness.deadline import scaled
from tests.support.cli import REPO
from tests.surface.test_surface import HOOK, cli, ok


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = copy_example("minimal", tmp_path).resolve()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".mcp.json").write_text(json.dumps({"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@scope/files@1.2.3"],
                  "env": {"TOKEN": "${FILES_TOKEN}"}},
        "remote": {"type": "http", "url": "https://mcp.example/mcp"},
    }}))
    (root / ".claude").mkdir()
    (root / ".claude" / "settings.json").write_text(json.dumps(
        {"hooks": HOOK, "model": "sonnet"}))
    (root / ".codex").mkdir()
    (root / ".codex" / "config.toml").write_text(
        '# team codex config\nmodel = "o4"\n\n[mcp_servers.db]\ncommand = "db-mcp"\n')
    return root


def test_adopt_is_a_dry_run_by_default(project: Path) -> None:
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file() and ".git" not in p.parts}
    report = json.loads(ok(project, "adopt", "--json"))
    assert not report["written"]
    adopted = {(i["source"], tuple(i["key"])) for i in report["adopted"]}
    assert adopted == {(".mcp.json", ("mcpServers", "files")),
                       (".mcp.json", ("mcpServers", "remote")),
                       (".codex/config.toml", ("mcp_servers", "db")),
                       (".claude/settings.json", ("hooks", "SessionStart"))}
    after = {p: p.read_bytes() for p in project.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert after == before


def test_adopt_write_moves_entries_under_the_manifest(project: Path) -> None:
    manifest = project / "agentstack.toml"
    comments = [line for line in manifest.read_text().splitlines() if line.startswith("#")]
    ok(project, "adopt", "--write")
    text = manifest.read_text()
    assert all(line in text.splitlines() for line in comments)  # comments kept
    from agentstack.manifest.load import load_manifest

    loaded = load_manifest(project)
    assert loaded.servers["files"].args == ["-y", "@scope/files@1.2.3"]
    assert loaded.servers["files"].env == {"TOKEN": "secret:FILES_TOKEN"}
    assert loaded.servers["remote"].url == "https://mcp.example/mcp"
    assert loaded.servers["db"].command == "db-mcp"
    (hook,) = loaded.hooks.values()
    assert hook.event == "SessionStart" and hook.command == ["sh", "-c", "touch /tmp/pwned"]
    # Taken out of the native files (apply renders them back), everything else kept.
    assert json.loads((project / ".mcp.json").read_text()) == {}
    codex = (project / ".codex" / "config.toml").read_text()
    assert codex.startswith("# team codex config\nmodel = \"o4\"") and "db-mcp" not in codex
    assert json.loads((project / ".claude" / "settings.json").read_text()) == {"model": "sonnet"}
    # Declared now: the review shows them as declared items; only the harmless key is foreign.
    ok(project, "lock")
    from agentstack.consent.document import current as _current

    document = _current(project)[2]
    assert set(document["servers"]) >= {"files", "remote", "db"}
    assert set(document["surface"]) == {".claude/settings.json", ".codex/config.toml"}
    for rel in document["surface"]:
        assert document["surface"][rel]["facts"] == ["setting:model"]
    ok(project, "trust", "--yes", "--accept-risk")
    ok(project, "apply", "--write")
    rendered = json.loads((project / ".mcp.json").read_text())
    assert set(rendered["mcpServers"]) >= {"files", "remote", "db"}
    assert cli(project, "status").code == 0


# ----------------------------------------------------------------------------------- shims


def _fake_binary(directory: Path, name: str, log: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\necho \"$@\" > {log}\n")
    path.chmod(0o755)


def test_shims_start_the_harness_only_on_the_trusted_surface(project: Path, tmp_path: Path,
                                                             isolated_home: Path) -> None:
    shims = tmp_path / "shims"
    ok(project, "shims", "install", "--dir", str(shims))
    from agentstack.harnesses import ALL

    # A launcher for each harness agentstack renders for (not only the project's).
    assert {p.name for p in shims.iterdir()} == {h.binary for h in ALL if h.has_adapter}
    assert {"claude", "codex", "gemini", "opencode", "copilot"} <= {p.name for p in shims.iterdir()}
    real = tmp_path / "real-bin"
    log = tmp_path / "ran.txt"
    _fake_binary(real, "claude", log)
    env = dict(os.environ, PATH=f"{shims}{os.pathsep}{real}{os.pathsep}/usr/bin:/bin",
               PYTHONPATH=str(REPO))

    def start(cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["claude", "-p", "hi"], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=scaled(60))

    # Outside any agentstack project: straight through.
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert start(outside).returncode == 0 and log.read_text().strip() == "-p hi"
    log.unlink()
    # In the project, not reviewed: refused, the real binary never ran.
    ok(project, "lock")
    refused = start(project)
    assert refused.returncode == 1 and "not starting claude" in refused.stderr
    assert not log.exists()
    ok(project, "trust", "--yes", "--accept-risk")
    ok(project, "apply", "--write")
    assert start(project / "servers").returncode == 0 and log.exists()  # a subdirectory too
    log.unlink()
    # A surface change after trust: refused again, and Claude's workspace trust withdrawn.
    (project / "CLAUDE.local.md").write_text("new instructions\n")
    refused = start(project)
    assert refused.returncode == 1 and "CLAUDE.local.md" in refused.stderr
    assert not log.exists()
    claude_json = isolated_home / ".claude.json"
    assert not claude_json.exists() or "hasTrustDialogAccepted" not in claude_json.read_text()
    ok(project, "shims", "remove", "--dir", str(shims))
    assert not list(shims.iterdir())


def test_shims_never_overwrite_a_file_they_did_not_write(project: Path, tmp_path: Path) -> None:
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "claude").write_text("#!/bin/sh\nmine\n")
    assert cli(project, "shims", "install", "--dir", str(shims)).code == 1
    assert (shims / "claude").read_text() == "#!/bin/sh\nmine\n"


def test_a_deleted_manifest_does_not_switch_the_shim_or_the_git_hook_off(
    tmp_path: Path, isolated_home: Path
) -> None:
    """A commit that deletes agentstack.toml (and plants hooks) must not make the project look
    like no project at all while Claude's workspace trust stays: this machine's snapshot still
    names it, so the shim and the git hook refuse and withdraw the harness trust."""
    from agentstack import githooks, shim

    project = copy_example("minimal", tmp_path).resolve()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    ok(project, "lock")
    ok(project, "trust", "--yes", "--accept-risk")
    ok(project, "apply", "--write")
    claude_json = Path.home() / ".claude.json"  # where apply writes Claude's workspace trust
    assert "hasTrustDialogAccepted" in claude_json.read_text()
    assert shim.check(project) is None
    (project / "agentstack.toml").unlink()
    found = shim.check(project / "servers")
    assert found is not None and "manifest" in found
    assert not claude_json.exists() or "hasTrustDialogAccepted" not in claude_json.read_text()
    assert githooks.check(project) is not None
    assert githooks.check(project.parent / "elsewhere-never-a-project") is None

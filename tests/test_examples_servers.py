"""The shipped examples work: their MCP servers answer over stdio, their manifests validate, and
`examples/full/make-skill-repo.sh` builds the git-sourced skill and declares it exactly once.

Servers are started with `sys.executable` (which can import `mcp`) and spoken to with the `mcp`
client over stdio only; nothing here touches the network or the checked-in examples.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from agentstack.manifest.model import parse_manifest
from tests.harness.deadline import scaled

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MINIMAL = EXAMPLES / "minimal"
FULL = EXAMPLES / "full"
SERVER_TIMEOUT = 15.0


async def _session(root: Path, script: str, env: dict[str, str], log: Path, check: Any) -> None:
    params = StdioServerParameters(command=sys.executable, args=[script], cwd=root, env=env)
    with anyio.fail_after(scaled(SERVER_TIMEOUT)), log.open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await check(session)


def _run(
    root: Path, script: str, check: Any, tmp_path: Path, env: dict[str, str] | None = None
) -> str:
    """Run `check(session)` against the server; return what it wrote on stderr."""
    log = tmp_path / "server-stderr.log"
    anyio.run(_session, root, script, env or {}, log, check)
    return log.read_text()


async def _tool_names(session: ClientSession) -> list[str]:
    return sorted(tool.name for tool in (await session.list_tools()).tools)


def _text(result: Any) -> str:
    assert not result.is_error, result
    return "".join(item.text for item in result.content if item.type == "text")


def test_minimal_hello_server(tmp_path: Path) -> None:
    async def check(session: ClientSession) -> None:
        assert await _tool_names(session) == ["hello"]
        assert _text(await session.call_tool("hello", {"name": "Ada"})) == "Hello, Ada!"

    _run(MINIMAL, "servers/hello.py", check, tmp_path)


def test_full_notes_server(tmp_path: Path) -> None:
    async def check(session: ClientSession) -> None:
        assert await _tool_names(session) == ["add_note", "list_notes"]
        assert (await session.call_tool("list_notes", {})).structured_content == {"result": []}
        assert _text(await session.call_tool("add_note", {"text": "buy milk"})) == "note 1 saved"
        assert _text(await session.call_tool("add_note", {"text": "call Bob"})) == "note 2 saved"
        listed = await session.call_tool("list_notes", {})
        assert not listed.is_error
        assert listed.structured_content == {"result": ["buy milk", "call Bob"]}

    # No NOTES_API_TOKEN: the server must run without it.
    stderr = _run(FULL, "servers/notes.py", check, tmp_path, {"NOTES_LOG_LEVEL": "info"})
    assert "token absent" in stderr
    assert "stored note 2" in stderr


def test_full_clock_server(tmp_path: Path) -> None:
    async def check(session: ClientSession) -> None:
        assert await _tool_names(session) == ["add", "now"]
        assert _text(await session.call_tool("add", {"a": 2, "b": 3})) == "5"
        stamp = datetime.fromisoformat(_text(await session.call_tool("now", {})))
        assert stamp.utcoffset() == timedelta(0)
        assert abs(datetime.now(UTC) - stamp) < timedelta(minutes=1)

    _run(FULL, "servers/clock.py", check, tmp_path)


@pytest.mark.parametrize("root", [MINIMAL, FULL, MINIMAL.parent / "plugin"],
                         ids=["minimal", "full", "plugin"])
def test_example_manifest_validates_and_its_files_exist(root: Path) -> None:
    manifest = parse_manifest((root / "agentstack.toml").read_bytes())
    paths = [*manifest.instructions.files]
    paths += [s.args[0] for s in manifest.servers.values() if s.command is not None]
    paths += [s.path for s in manifest.skills.values() if s.path is not None]
    paths += [h.script for h in manifest.hooks.values() if h.script is not None]
    paths += [f"{p.path}/.claude-plugin/plugin.json" for p in manifest.plugins.values() if p.path]
    for relative in paths:
        assert (root / relative).exists(), relative
    for skill in manifest.skills.values():
        if skill.path is not None:
            assert (root / skill.path / "SKILL.md").read_text().startswith("---\nname: ")


def test_full_manifest_declares_every_kind() -> None:
    manifest = parse_manifest((FULL / "agentstack.toml").read_bytes())
    assert {n: s.transport for n, s in manifest.servers.items()} == {
        "notes": "stdio",
        "clock": "stdio",
        "docs": "http",
    }
    assert manifest.servers["notes"].env["NOTES_API_TOKEN"] == "secret:notes-token"
    assert manifest.servers["docs"].headers == {"Authorization": "secret:docs-token"}
    assert list(manifest.skills) == ["release-notes"]  # style-guide comes from the script
    assert manifest.instructions.files == ["instructions/project.md", "instructions/style.md"]
    assert set(manifest.hooks) == {"format-check", "audit-prompt"}
    assert manifest.sandbox.network.allow_domains == ["api.anthropic.com"]


@pytest.mark.parametrize(
    "relative",
    [
        "full/skills/release-notes/scripts/collect.sh",
        "full/hooks/format-check.sh",
        "full/make-skill-repo.sh",
    ],
)
def test_scripts_are_executable(relative: str) -> None:
    path = EXAMPLES / relative
    mode = path.stat().st_mode
    assert mode & stat.S_IXUSR and mode & stat.S_IXGRP and mode & stat.S_IXOTH, oct(mode)
    assert path.read_text().startswith("#!/bin/sh\n")


def _git_env(tmp_path: Path) -> dict[str, str]:
    """No user or system git configuration: the script must bring its own identity."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        HOME=str(tmp_path / "home"),
        XDG_CONFIG_HOME=str(tmp_path / "home" / ".config"),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=str(tmp_path / "home" / ".gitconfig"),
    )
    (tmp_path / "home").mkdir()
    return env


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_make_skill_repo_is_idempotent(tmp_path: Path) -> None:
    project = tmp_path / "full"
    shutil.copytree(FULL, project, ignore=shutil.ignore_patterns(".skill-repo"))
    env = _git_env(tmp_path)
    manifest_path = project / "agentstack.toml"
    repo = (project / ".skill-repo").resolve()

    def run() -> list[str]:
        done = subprocess.run(
            [str(project / "make-skill-repo.sh")],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=scaled(30),
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()

    assert run() == [str(repo), f"file://{repo}"]
    first_manifest = manifest_path.read_bytes()
    commit = git("rev-parse", "v1.0.0^{commit}")
    assert len(commit) == 40

    assert run() == [str(repo), f"file://{repo}"]
    assert manifest_path.read_bytes() == first_manifest
    assert git("rev-parse", "v1.0.0^{commit}") == commit
    assert git("status", "--porcelain") == ""
    assert first_manifest.decode().count("[skills.style-guide]") == 1

    skill = git("show", "v1.0.0:skills/style-guide/SKILL.md")
    assert skill.startswith("---\nname: style-guide\ndescription: ")

    manifest = parse_manifest(first_manifest)
    style = manifest.skills["style-guide"]
    assert (style.git, style.rev, style.subdir) == (
        f"file://{repo}",
        "v1.0.0",
        "skills/style-guide",
    )
    assert manifest.skills["release-notes"].path == "skills/release-notes"

    # The global git configuration was never written.
    assert not (tmp_path / "home" / ".gitconfig").exists()
    # The checked-in example was not touched.
    assert b"[skills.style-guide]" not in (FULL / "agentstack.toml").read_bytes()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_make_skill_repo_takes_a_directory(tmp_path: Path) -> None:
    project = tmp_path / "full"
    shutil.copytree(FULL, project, ignore=shutil.ignore_patterns(".skill-repo"))
    target = tmp_path / "skill repo"
    done = subprocess.run(
        ["sh", "make-skill-repo.sh", str(target)],
        cwd=project,
        env=_git_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=scaled(30),
        check=True,
    )
    assert done.stdout.splitlines() == [str(target.resolve()), f"file://{target.resolve()}"]
    assert not (project / ".skill-repo").exists()
    style = parse_manifest((project / "agentstack.toml").read_bytes()).skills["style-guide"]
    assert style.git == f"file://{target.resolve()}"

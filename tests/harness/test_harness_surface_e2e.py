"""Each surface class is real: with the real Claude Code and Codex driven offline, a marker placed
there reaches the model or runs, once the project is trusted and applied with it reviewed; and
every one of them is in agentstack's review (`show --json`) with its finding.

Then the attack: the same entries placed *after* trust + apply. `status` names them and withdraws
the harness-side trust; with Codex the project config (and with it `notify`, foreign servers and
`developer_instructions`) is then no longer loaded. What still reaches the harness without any
agentstack command in between is measured and documented in docs/surface.md.

Skips locally without the harness CLIs; fails in CI (CI=true).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_project, run_cli
from tests.harness.binaries import harness_bin, harness_env
from tests.harness.deadline import scaled
from tests.harness.drive import CODEX_OFFLINE_TOML, run_claude, run_codex
from tests.harness.mock_model import MockModel
from tests.support.cli import REPO
from tests.support.cli import ok as _ok
from tests.support.project import manifest

pytestmark = pytest.mark.slow

MANIFEST = str(manifest("surface-e2e", "claude-code", "codex").instructions("base.md"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = make_project(tmp_path / "proj", MANIFEST, {"base.md": "Be careful.\n"})
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    _ok("lock", cwd=root)
    return root.resolve()


def _requests_text(model: MockModel) -> str:
    return "\n".join(r.raw_body.decode("utf-8", "replace") for r in model.requests)


def _claude_entries(root: Path, out: Path) -> dict[str, str]:
    """Plant one marker per Claude Code surface class; returns marker -> how it shows."""
    def put(rel: str, text: str, mode: int = 0o644) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(mode)

    hook = f"sh -c 'echo \"$SURFACE_ENV\" > {out}/hook-ran'"
    server = [sys.executable, "-c", f"open({str(out / 'server-ran')!r}, 'w').write('x')"]
    put(".claude/settings.json", json.dumps({
        "hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": hook}]}]},
        "env": {"SURFACE_ENV": "MARKER-ENV"},
        "enableAllProjectMcpServers": True,
    }))
    mcp = root / ".mcp.json"
    put(".mcp.json", json.dumps({"mcpServers": {"foreign": {"command": server[0],
                                                            "args": server[1:]}}}))
    assert mcp.exists()
    with (root / "CLAUDE.md").open("a") as handle:
        handle.write("MARKER-CLAUDE-MD around the block\n")
    put(".claude/rules/r.md", "MARKER-RULE\n")
    put(".claude/skills/sk/SKILL.md",
        "---\nname: sk\ndescription: MARKER-SKILL helps\n---\nbody\n")
    put(".claude/agents/ag.md", "---\nname: ag\ndescription: MARKER-AGENT helps\n---\nbody\n")
    put("CLAUDE.local.md", "MARKER-LOCAL-MD\n")
    put("docs/imported.md", "MARKER-IMPORT\n")
    with (root / "CLAUDE.md").open("a") as handle:
        handle.write("See @docs/imported.md\n")
    return {
        "MARKER-CLAUDE-MD": "model",
        "MARKER-RULE": "model",
        "MARKER-SKILL": "model",
        "MARKER-AGENT": "model",
        "MARKER-LOCAL-MD": "model",
        "MARKER-IMPORT": "model",
        "hook-ran": "runs",
        "server-ran": "runs",
    }


def _check(model: MockModel, out: Path, expected: dict[str, str]) -> dict[str, bool]:
    text = _requests_text(model)
    seen = {}
    for marker, how in expected.items():
        seen[marker] = (out / marker).exists() if how == "runs" else marker in text
    return seen


def test_claude_code_surface_reaches_the_model_or_runs(project: Path, isolated_home: Path,
                                                       tmp_path: Path) -> None:
    harness_bin("claude")
    out = tmp_path / "out"
    out.mkdir()
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    expected = _claude_entries(project, out)
    # Every class is in the review, with its finding.
    status = run_cli("status", cwd=project)
    assert status.returncode == 1 and "surface[" in status.stdout and "withdrew" in status.stderr
    # Withdrawn workspace trust: what `claude -p` still loads (headless Claude Code applies project
    # settings without asking) is what no tool can stop once the files are there; `agentstack run`
    # and the shims refuse to start it instead (docs/surface.md).
    with MockModel([]) as model:
        run = run_claude(project, isolated_home, model, "say hi")
    headless = _check(model, out, expected)
    # What runs before the first gate (a SessionStart hook, a server process) still runs:
    # measured with 2.1.332. The guard on UserPromptSubmit sees the changed surface and blocks the
    # first request, so nothing the planted files carry reaches the model. The shims and `run`
    # refuse before the harness starts (test_the_shim_refuses_...).
    assert headless["hook-ran"] and headless["server-ran"], headless
    assert not any(v for k, v in headless.items() if expected[k] != "runs"), headless
    assert not _requests_text(model), "the drifted project sent a model request"
    for name in list(expected):
        (out / name).unlink(missing_ok=True)
    _ok("lock", cwd=project)
    surface = json.loads(_ok("show", "--json", cwd=project).stdout)["surface"]
    for rel in (".claude/settings.json", ".mcp.json", "CLAUDE.md", ".claude/rules/r.md",
                ".claude/skills/sk/SKILL.md", ".claude/agents/ag.md", "CLAUDE.local.md",
                "docs/imported.md"):
        assert rel in surface, (rel, sorted(surface))
    refused = run_cli("trust", "--yes", cwd=project)
    assert refused.returncode == 1 and "--accept-risk" in refused.stderr
    # Reviewed and accepted: the real harness loads each one (this is what was consented to).
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    with MockModel([]) as model:
        run = run_claude(project, isolated_home, model, "say hi")
    assert run.proc.returncode == 0, run.output
    seen = _check(model, out, expected)
    assert all(seen.values()), seen
    assert (out / "hook-ran").read_text().strip() == "MARKER-ENV"  # env reached the hook


def test_the_shim_refuses_a_drifted_project_before_claude_runs_anything(
    project: Path, isolated_home: Path, tmp_path: Path
) -> None:
    """`claude -p` through the shim: the planted SessionStart hook and `.mcp.json` server never
    run and the model gets no request; through the same shim an unchanged project starts."""
    harness_bin("claude")
    out = tmp_path / "out"
    out.mkdir()
    shims = isolated_home / "shims"
    _ok("shims", "install", "--dir", str(shims), cwd=project)
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    env = harness_env(isolated_home, ANTHROPIC_API_KEY="sk-ant-offline-test",
                      AGENTSTACK_HOME=os.environ["AGENTSTACK_HOME"],
                      AGENTSTACK_CACHE=os.environ["AGENTSTACK_CACHE"],
                      PYTHONPATH=str(REPO))
    env["PATH"] = f"{shims}{os.pathsep}{env['PATH']}"

    def via_shim(model: MockModel) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["claude", "-p", "say hi", "--output-format", "json"], cwd=project,
                              env={**env, "ANTHROPIC_BASE_URL": model.url}, capture_output=True,
                              text=True, timeout=scaled(120))

    with MockModel([]) as model:
        started = via_shim(model)
    assert started.returncode == 0, started.stderr
    assert model.requests, "the unchanged project did not start through the shim"
    expected = _claude_entries(project, out)
    with MockModel([]) as model:
        refused = via_shim(model)
    assert refused.returncode == 1, refused.stderr
    assert "agentstack: not starting claude" in refused.stderr
    assert not (out / "hook-ran").exists() and not (out / "server-ran").exists()
    assert not model.requests
    assert expected


def _codex_home(home: Path, model: MockModel) -> None:
    config = home / ".codex" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    previous = config.read_text() if config.exists() else ""
    if "[model_providers.mock]" in previous:
        import tomlkit

        doc = tomlkit.parse(previous)
        doc["model_providers"]["mock"]["base_url"] = model.openai_base_url  # type: ignore[index]
        config.write_text(tomlkit.dumps(doc))
        return
    config.write_text(
        'approval_policy = "never"\nsandbox_mode = "danger-full-access"\n'
        'model = "gpt-5.1-codex"\nmodel_provider = "mock"\n\n[model_providers.mock]\n'
        f'name = "mock"\nbase_url = "{model.openai_base_url}"\nwire_api = "responses"\n'
        + CODEX_OFFLINE_TOML
    )


def _codex_entries(root: Path, out: Path) -> dict[str, str]:
    server = f"open({str(out / 'server-ran')!r}, 'w').write('x')"
    notify = f"touch {out}/notify-ran"
    config = root / ".codex" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    before = config.read_text() if config.exists() else ""
    config.write_text(
        f'developer_instructions = "MARKER-DEV-INSTRUCTIONS"\n'
        f'notify = ["sh", "-c", {json.dumps(notify)}]\n' + before
        + f"\n[mcp_servers.foreign]\ncommand = {json.dumps(sys.executable)}\n"
        f"args = [\"-c\", {json.dumps(server)}]\n"
    )
    with (root / "AGENTS.md").open("a") as handle:
        handle.write("MARKER-AGENTS-MD around the block\n")
    skill = root / ".agents" / "skills" / "sk" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: sk\ndescription: MARKER-CODEX-SKILL helps\n---\nbody\n")
    return {
        "MARKER-DEV-INSTRUCTIONS": "model",
        "MARKER-AGENTS-MD": "model",
        "MARKER-CODEX-SKILL": "model",
        "server-ran": "runs",
        # `notify` is pinned and rated too, but `codex exec` does not call it (measured with
        # 0.171.0: the interactive TUI does), so it is not a marker here.
    }


def test_codex_surface_reaches_the_model_or_runs_and_withdrawn_trust_stops_its_config(
    project: Path, isolated_home: Path, tmp_path: Path
) -> None:
    harness_bin("codex")
    out = tmp_path / "out"
    out.mkdir()
    with MockModel([]) as placeholder:
        _codex_home(isolated_home, placeholder)
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    expected = _codex_entries(project, out)
    status = run_cli("status", cwd=project)
    assert status.returncode == 1 and "surface[.codex/config.toml]" in status.stdout
    assert "withdrew" in status.stderr
    # Trust withdrawn: Codex no longer loads the project's config (notify, servers, developer
    # instructions); AGENTS.md and skills are read regardless of trust (documented).
    with MockModel([]) as model:
        _codex_home(isolated_home, model)
        run = run_codex(project, isolated_home, "say hi")
    assert run.proc.returncode == 0, run.output
    withdrawn = _check(model, out, expected)
    assert not withdrawn["server-ran"], withdrawn
    assert not withdrawn["MARKER-DEV-INSTRUCTIONS"], withdrawn
    # AGENTS.md and skills, which Codex reads regardless of trust, do not reach the model either:
    # the user-level guard (kept on withdrawal) blocks the first prompt.
    assert not any(withdrawn.values()), withdrawn
    assert not model.requests, _requests_text(model)[:2000]
    # Reviewed and accepted: the real harness loads each one.
    _ok("lock", cwd=project)
    surface = json.loads(_ok("show", "--json", cwd=project).stdout)["surface"]
    for rel in (".codex/config.toml", "AGENTS.md", ".agents/skills/sk/SKILL.md"):
        assert rel in surface, (rel, sorted(surface))
    assert run_cli("trust", "--yes", cwd=project).returncode == 1
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    with MockModel([]) as model:
        _codex_home(isolated_home, model)
        run = run_codex(project, isolated_home, "say hi")
    assert run.proc.returncode == 0, run.output
    seen = _check(model, out, expected)
    assert all(seen.values()), (seen, withdrawn)


def test_a_file_a_pull_adds_to_a_code_root_blocks_claude_codes_first_request(
    tmp_path: Path, isolated_home: Path
) -> None:
    """The attack: after `trust` and `apply --write`, a pull adds `servers/json.py` next to the
    pinned server script (Python imports it before the standard library's `json`). `status`
    says the lock is stale; the guard, watching the code root's listing, blocks the real Claude
    Code's first request too (before: it allowed every call)."""
    harness_bin("claude")
    manifest = ('[project]\nname = "roots"\nharnesses = ["claude-code"]\n\n'
                '[servers.notes]\ncommand = "python3"\nargs = ["servers/app.py"]\n')
    root = make_project(tmp_path / "proj", manifest,
                        {"servers/app.py": "import json\nprint(json.dumps({}))\n"})
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    root = root.resolve()
    for args in (("lock",), ("trust", "--yes", "--accept-risk"), ("apply", "--write")):
        _ok(*args, cwd=root)
    with MockModel([]) as model:
        run_claude(root, isolated_home, model, "say hi")
    assert model.requests, "the reviewed project did not start"
    (root / "servers" / "json.py").write_text("dumps = print  # MARKER-SHADOW\n")
    assert run_cli("status", cwd=root).returncode == 1
    with MockModel([]) as model:
        run = run_claude(root, isolated_home, model, "say hi")
    assert not model.requests, run.output[-2000:]
    assert "servers" in run.output and "agentstack guard" in run.output, run.output[-2000:]

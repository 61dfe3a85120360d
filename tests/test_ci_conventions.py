"""The CI conventions: `.pre-commit-hooks.yaml` driven by the real `pre-commit` (from PyPI) in a
test repository, offline (the hook repository is a local file:// clone holding this checkout's
manifest), and the composite `action.yml`'s steps run as its commands, locally."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, git, make_project, run_cli_in_process
from tests.support.project import manifest

BIN = Path(sys.executable).parent
PRE_COMMIT = BIN / "pre-commit"

MANIFEST = str(manifest("demo", "claude-code").server("clock", "clock.py"))


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # this checkout's agentstack
    env["PYTHONPATH"] = str(REPO)
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")
    # Offline: no index, no proxy that works; pre-commit must not need either.
    env.update(PIP_NO_INDEX="1", http_proxy="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9",
               HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9")
    return env


def _hook_repo(tmp_path: Path) -> tuple[Path, str]:
    """A git repository holding this checkout's .pre-commit-hooks.yaml, as a hook repository."""
    repo = tmp_path / "hooks"
    repo.mkdir()
    shutil.copy(REPO / ".pre-commit-hooks.yaml", repo / ".pre-commit-hooks.yaml")
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "hooks", cwd=repo)
    return repo, git("rev-parse", "HEAD", cwd=repo).strip()


def _project(tmp_path: Path, hooks: list[dict[str, Any]]) -> Path:
    root = make_project(tmp_path / "demo", MANIFEST, {"clock.py": "print('tick')\n"})
    repo, rev = _hook_repo(tmp_path)
    config = {"repos": [{"repo": repo.as_uri(), "rev": rev, "hooks": hooks}]}
    (root / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    git("init", "-q", "-b", "main", cwd=root)
    assert run_cli_in_process("lock", cwd=root).returncode == 0
    git("add", "-A", cwd=root)
    git("commit", "-q", "-m", "setup", cwd=root)
    return root


def _pre_commit(root: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PRE_COMMIT), "run", "--all-files"], cwd=root, capture_output=True,
                          text=True, env=_env(tmp_path), timeout=600)


def _manifest_hooks() -> dict[str, dict[str, Any]]:
    return {h["id"]: h for h in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}


# The hook repository's own language is python (pre-commit pip-installs it for a user); offline
# there is no index to install from, so the test runs the same hooks as `system` with this
# checkout's agentstack on PATH. Everything else (entry, args, pass_filenames, always_run) is the
# manifest's.
SYSTEM = {"language": "system"}


def test_the_manifest_declares_the_three_hooks() -> None:
    hooks = _manifest_hooks()
    assert set(hooks) == {"agentstack-lock", "agentstack-apply", "agentstack-boundary"}
    assert hooks["agentstack-lock"]["entry"] == "agentstack lock --check"
    assert hooks["agentstack-apply"]["entry"] == "agentstack apply --check"
    assert hooks["agentstack-boundary"]["entry"] == "agentstack check"
    for hook in hooks.values():
        assert hook["pass_filenames"] is False and hook["always_run"] is True


@pytest.mark.slow
def test_pre_commit_fails_on_a_stale_lock_and_passes_after_lock(tmp_path: Path) -> None:
    if not PRE_COMMIT.exists():
        pytest.fail("pre-commit is not installed (it is in the test extras)")
    boundary = tmp_path / "boundary.toml"
    boundary.write_text(f'[filesystem]\nwrite = ["{tmp_path}"]\n[commands]\n'
                        'executables = ["python3"]\n', encoding="utf-8")
    root = _project(tmp_path, [
        {"id": "agentstack-lock", **SYSTEM},
        {"id": "agentstack-boundary", **SYSTEM, "args": ["--boundary", str(boundary)]},
    ])
    first = _pre_commit(root, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "agentstack lock --check" in first.stdout and "Passed" in first.stdout

    (root / "clock.py").write_text("print('tock')\n", encoding="utf-8")  # a pinned file changed
    stale = _pre_commit(root, tmp_path)
    assert stale.returncode == 1, stale.stdout
    assert re.search(r"agentstack lock --check\.+Failed", stale.stdout), stale.stdout

    assert run_cli_in_process("lock", cwd=root).returncode == 0
    again = _pre_commit(root, tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr

    # the boundary hook fails when the setup goes beyond it
    with (root / "agentstack.toml").open("a", encoding="utf-8") as f:
        f.write('\n[servers.node]\ncommand = "node"\nargs = ["x.js"]\n')
    assert run_cli_in_process("lock", cwd=root).returncode == 0
    beyond = _pre_commit(root, tmp_path)
    assert beyond.returncode == 1
    assert re.search(r"agentstack check \(boundary\)\.+Failed", beyond.stdout), beyond.stdout
    assert "exceeds_boundary" in beyond.stdout


@pytest.mark.slow
def test_pre_commit_apply_hook_fails_on_a_hand_edit(tmp_path: Path) -> None:
    root = _project(tmp_path, [{"id": "agentstack-apply", **SYSTEM}])
    assert run_cli_in_process("trust", "--yes", "--accept-risk", cwd=root).returncode == 0
    assert run_cli_in_process("apply", "--write", cwd=root).returncode == 0
    ok = _pre_commit(root, tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    mcp = root / ".mcp.json"
    data = json.loads(mcp.read_text())
    data["mcpServers"]["clock"]["args"] = ["evil.py"]
    mcp.write_text(json.dumps(data))
    edited = _pre_commit(root, tmp_path)
    assert edited.returncode == 1, edited.stdout
    assert re.search(r"agentstack apply --check\.+Failed", edited.stdout), edited.stdout


# ------------------------------------------------------------------ action.yml

_EXPR = re.compile(r"\$\{\{\s*inputs\.([a-z-]+)\s*\}\}")
_IF = re.compile(r"^inputs\.([a-z-]+) (==|!=) '([^']*)'$")


def _action_steps(inputs: dict[str, str]) -> list[tuple[str, dict[str, Any]]]:
    """The action's `run` steps with their inputs resolved, as the runner would (only what this
    action uses: `${{ inputs.X }}` in `env`, `inputs.X ==/!= 'V'` in `if`)."""
    action = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
    assert action["runs"]["using"] == "composite"
    values = {k: str(v.get("default", "")) for k, v in action["inputs"].items()}
    values.update(inputs)
    out = []
    for step in action["runs"]["steps"]:
        if "run" not in step:
            continue
        assert step["shell"] == "bash"
        assert "${{" not in step["run"], "an input spliced into a script"
        condition = step.get("if")
        if condition is not None:
            match = _IF.match(condition)
            assert match, condition
            name, op, want = match.groups()
            if (values[name] == want) != (op == "=="):
                continue
        env = {k: _EXPR.sub(lambda m: values[m.group(1)], str(v))
               for k, v in step.get("env", {}).items()}
        out.append((step["id"], {"run": step["run"], "env": env}))
    return out


def _run_action(root: Path, tmp_path: Path, inputs: dict[str, str]) -> dict[str, int]:
    codes: dict[str, int] = {}
    for step_id, step in _action_steps(inputs):
        if step_id == "install":
            continue  # pip-installs the action's checkout: not run offline (docs/ci.md)
        proc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=root, capture_output=True,
                              text=True, env={**_env(tmp_path), **step["env"]}, timeout=300)
        codes[step_id] = proc.returncode
        if proc.returncode:
            break  # a failed step ends the job
    return codes


def test_the_action_runs_the_checks(tmp_path: Path) -> None:
    root = _project(tmp_path, [])
    boundary = tmp_path / "boundary.toml"
    boundary.write_text(f'[filesystem]\nwrite = ["{tmp_path}"]\n[commands]\n'
                        'executables = ["python3"]\n', encoding="utf-8")
    inputs = {"boundary": str(boundary), "sarif-file": str(tmp_path / "out.sarif")}
    assert _run_action(root, tmp_path, inputs) == {"lock": 0, "boundary": 0}
    log = json.loads((tmp_path / "out.sarif").read_text())
    assert log["version"] == "2.1.0" and log["runs"][0]["results"] == []

    (root / "clock.py").write_text("print('tock')\n", encoding="utf-8")
    assert _run_action(root, tmp_path, inputs) == {"lock": 1}

    assert run_cli_in_process("lock", cwd=root).returncode == 0
    with (root / "agentstack.toml").open("a", encoding="utf-8") as f:
        f.write('\n[servers.node]\ncommand = "node"\nargs = ["x.js"]\n')
    assert run_cli_in_process("lock", cwd=root).returncode == 0
    assert _run_action(root, tmp_path, inputs) == {"lock": 0, "boundary": 1}
    results = json.loads((tmp_path / "out.sarif").read_text())["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == ["boundary/commands"]

    # apply-check is opt-in; with it, a project whose files were never rendered here fails
    codes = _run_action(root, tmp_path, {**inputs, "apply-check": "true"})
    assert codes == {"lock": 0, "apply": 1}

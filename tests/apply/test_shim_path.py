"""`status` and `doctor` say when the installed shims are not ahead of the real harness binaries
on PATH (so nothing checks the project before the harness starts), with the one line that fixes
it; and nothing when they are, or when no shim is installed."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.conftest import make_project

# The commands run in process: what these tests check is the library's answer, not the process.
from tests.support.cli import run_cli_in_process as run_cli
from tests.support.project import manifest

MANIFEST = str(manifest("p", "claude-code"))


def _real_claude(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / "claude"
    binary.write_text("#!/bin/sh\necho real\n")
    binary.chmod(0o755)
    return binary


def test_status_and_doctor_say_when_the_shims_are_behind_on_path(
    tmp_path: Path, isolated_home: Path
) -> None:
    root = make_project(tmp_path / "p", MANIFEST).resolve()
    assert run_cli("lock", cwd=root).returncode == 0
    real = _real_claude(tmp_path / "bin")
    base = f"{real.parent}{os.pathsep}/usr/bin{os.pathsep}/bin"
    # No shim installed: nothing to say.
    status = run_cli("status", "--json", cwd=root, env={"PATH": base})
    assert json.loads(status.stdout)["shims_behind"] == []
    installed = run_cli("shims", "install", cwd=root)
    assert installed.returncode == 0, installed.stderr
    shims = Path(os.environ["AGENTSTACK_HOME"]) / "shims"
    assert (shims / "claude").is_file()
    fix = f'export PATH={shims}:"$PATH"'
    for path in (base, f"{base}{os.pathsep}{shims}"):  # not on PATH; on PATH after the real one
        status = run_cli("status", cwd=root, env={"PATH": path})
        said = status.stdout + status.stderr
        assert f"claude: PATH runs {real}, not the agentstack shim in {shims}" in said, said
        assert fix in said
        doctor = run_cli("doctor", "--json", cwd=root, env={"PATH": path})
        rows = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
        assert rows["shim claude"]["status"] == "warn" and fix in rows["shim claude"]["detail"]
    # Ahead: nothing to say.
    status = run_cli("status", cwd=root, env={"PATH": f"{shims}{os.pathsep}{base}"})
    assert "shims " not in status.stdout + status.stderr
    doctor = run_cli("doctor", "--json", cwd=root, env={"PATH": f"{shims}{os.pathsep}{base}"})
    assert "shim claude" not in {c["name"] for c in json.loads(doctor.stdout)["checks"]}

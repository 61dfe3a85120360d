"""The README's Quickstart, run as written: its commands are read from README.md itself and run by
bash on a terminal (the trust prompts are answered as the README says), offline, in a fresh
directory with its own HOME. The real Claude Code then reports the example server connected."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO
from tests.harness.binaries import harness_bin, harness_env
from tests.harness.deadline import scaled

ANSWERS = ((b"anything else declines", b"accept-risk\n"), (b"[y/N]", b"y\n"))


def quickstart_blocks() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, re.S)


def _run_on_terminal(script: str, cwd: Path, env: dict[str, str],
                     answers: tuple[tuple[bytes, bytes], ...] = ANSWERS) -> tuple[int, str]:
    master, slave = pty.openpty()
    proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, env=env,
                            stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    output, answered_upto = b"", 0
    deadline = time.monotonic() + scaled(300)
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
            for prompt, answer in answers:
                at = output.rfind(prompt)
                if at >= answered_upto:
                    os.write(master, answer)
                    answered_upto = at + len(prompt)
        elif proc.poll() is not None:
            break
    code = proc.wait(timeout=scaled(60))
    os.close(master)
    return code, output.decode("utf-8", "replace")


def test_quickstart_runs_as_written(tmp_path: Path, isolated_home: Path) -> None:
    install, steps = quickstart_blocks()[:2]
    assert "scripts/install" in install and (REPO / "scripts" / "install").exists()
    assert "pip install agentstack" not in install  # not on PyPI
    env = dict(os.environ, checkout=str(REPO), COLUMNS="100", TERM="dumb",
               PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    env.pop("PYTHONPATH", None)
    assert (Path(sys.executable).parent / "agentstack").exists()
    lines = steps.splitlines()
    split = next(i for i, line in enumerate(lines) if line.startswith("agentstack status")) + 1
    first, later = "\n".join(lines[:split]), "\n".join(lines[split:])

    code, output = _run_on_terminal(first, tmp_path, env)
    assert code == 0, output
    project = tmp_path / "my-project"
    assert "trusted b3:" in output and "Traceback" not in output
    if os.environ.get("CI") == "true" or _have_claude():
        listed = subprocess.run([str(harness_bin("claude")), "mcp", "list"], cwd=project,
                                env=harness_env(isolated_home), capture_output=True, text=True,
                                timeout=scaled(120))
        hello = [ln for ln in listed.stdout.splitlines() if ln.startswith("hello:")]
        assert hello and "✔ Connected" in hello[0], listed.stdout + listed.stderr

    code, output = _run_on_terminal(later, project, env)
    assert code == 0, output
    assert "+Keep functions short." in output  # the diff shows the line
    assert re.search(r"revoked b3:[0-9a-f]{64}", output)
    status = subprocess.run(["agentstack", "status"], cwd=project, env=env, capture_output=True,
                            text=True, timeout=scaled(120))
    assert status.returncode == 1 and "REVOKED" in status.stdout


def _have_claude() -> bool:
    try:
        harness_bin("claude")
    except BaseException:
        return False
    return True

"""The harness driver (tests/harness/drive.py) leaves nothing running after a harness exits.

Codex 0.171's `codex exec` can exit while its fs helper (`bwrap ... codex
--codex-run-as-fs-helper`) still runs: pid 1 of a pid namespace of its own, in a session of its
own, so killing the harness's process group misses it and only SIGKILL from outside the
namespace ends it. The same shape is built here with the real bubblewrap, so the test does not
depend on when Codex's helper happens to exit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import uuid
from pathlib import Path

import pytest

from tests.harness import drive


def _marked(marker: str) -> list[int]:
    """Live (not zombie) processes whose environment holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            if marker.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return found


def test_a_pid_namespace_init_in_its_own_session_is_reaped(tmp_path: Path) -> None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        if os.environ.get("CI"):
            pytest.fail("bubblewrap is not installed (.ci/run installs it)")
        pytest.skip("bubblewrap is not installed")
    marker = f"AGENTSTACK_TEST_REAP={uuid.uuid4().hex}"
    # The "harness" starts the helper detached (its own session, pid 1 of a new pid namespace,
    # not holding the harness's pipes) and exits at once.
    script = (f"{bwrap} --ro-bind / / --dev /dev --proc /proc --unshare-pid --new-session "
              f"--as-pid-1 /bin/sleep 600 </dev/null >/dev/null 2>&1 & "
              "while [ -z \"$(ls /proc/$!/task 2>/dev/null)\" ]; do :; done; echo started")
    env = {"PATH": "/usr/bin:/bin", marker.split("=")[0]: marker.split("=")[1]}
    try:
        run = drive._run(["/bin/sh", "-c", script], tmp_path, env, timeout=60)
        assert run.proc.returncode == 0 and "started" in run.proc.stdout, run.output
        assert _marked(marker) == []  # gone once the run returns ...
        leftovers = getattr(run, "leftovers", None) or {}
        assert any("sleep 600" in c or "bwrap" in c for c in leftovers.values()), (
            leftovers)  # ... although it did outlive the "harness"
    finally:
        for pid in _marked(marker):  # never leave it behind, whatever failed above
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

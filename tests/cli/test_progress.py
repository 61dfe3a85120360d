"""Long work shows progress on a terminal (rich, on stderr), and nothing when the output is not a
terminal or is JSON; fast commands never import rich. Run as real processes on a pseudo-terminal:
only a process shows what a terminal gets."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, make_project
from tests.support.project import manifest

MANIFEST = str(manifest("big", "claude-code").skill("big"))

# The real entry point, with the bar's delay at 0 (so the test does not depend on how slow the
# machine is) and a report of whether rich was imported.
PROBE = ("import atexit, sys; import agentstack.progress as p; p.DELAY = 0; p._INTERVAL = 0\n"
         "atexit.register(lambda: sys.stderr.write('\\nRICH=%s\\n' % ('rich' in sys.modules)))\n"
         "sys.argv = ['agentstack'] + sys.argv[1:]\n"
         "from agentstack.entry import main; main()\n")


def _project(tmp_path: Path, files: int = 400) -> Path:
    root = make_project(tmp_path / "big", MANIFEST, {"skills/big/SKILL.md": "---\nname: big\n"
                                                     "description: d\n---\nbig\n"})
    for i in range(files):
        path = root / "skills" / "big" / f"d{i % 20}" / f"f{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{i}\n")
    return root


def _on_terminal(args: list[str], cwd: Path, *, tty: bool = True) -> tuple[int, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), TERM="xterm", COLUMNS="100")
    argv = [sys.executable, "-c", PROBE, *args]
    if not tty:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        return done.returncode, done.stdout + done.stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    code = proc.wait(timeout=60)
    os.close(master)
    return code, out.decode("utf-8", "replace")


@pytest.mark.slow
def test_a_long_lock_shows_progress_on_a_terminal_only(tmp_path: Path) -> None:
    root = _project(tmp_path)
    code, out = _on_terminal(["lock"], root)
    assert code == 0, out
    assert "lock: checking and hashing the pinned files" in out and "RICH=True" in out
    assert "wrote " in out
    # Not a terminal: no bar, rich never imported.
    (root / "skills" / "big" / "d0" / "f0.txt").write_text("changed\n")
    code, out = _on_terminal(["lock"], root, tty=False)
    assert code == 0, out
    assert "checking and hashing" not in out and "RICH=False" in out
    # --json on a terminal: one JSON document, nothing drawn.
    (root / "skills" / "big" / "d0" / "f0.txt").write_text("again\n")
    code, out = _on_terminal(["lock", "--json"], root)
    assert code == 0, out
    assert "checking and hashing" not in out and "RICH=False" in out


@pytest.mark.slow
def test_apply_writes_and_the_unchanged_lock_show_progress(tmp_path: Path) -> None:
    root = _project(tmp_path)
    for args in (["lock"], ["trust", "--yes", "--accept-risk"]):
        done = subprocess.run([sys.executable, "-m", "agentstack", *args], cwd=root,
                              env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    code, out = _on_terminal(["apply", "--write"], root)
    assert code == 0, out
    assert "apply: writing the rendered files" in out and "file(s) changed" in out
    code, out = _on_terminal(["lock"], root)  # unchanged: the re-lock record's check
    assert code == 0 and "lock: checking" in out and "unchanged" in out, out


def test_fast_commands_do_not_import_rich_with_the_default_delay(tmp_path: Path) -> None:
    root = _project(tmp_path, files=10)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    probe = PROBE.replace("p.DELAY = 0; p._INTERVAL = 0", "")
    assert subprocess.run([sys.executable, "-m", "agentstack", "lock"], cwd=root, env=env,
                          capture_output=True, timeout=300).returncode == 0
    for args in (["lock"], ["status"], ["digest"]):
        master, slave = pty.openpty()
        done = subprocess.run([sys.executable, "-c", probe, *args], cwd=root, env=env,
                              stdin=slave, stdout=slave, stderr=subprocess.PIPE, timeout=300)
        os.close(slave)
        os.close(master)
        assert b"RICH=False" in done.stderr, (args, done.stderr)


def test_no_bar_is_ever_opened_over_a_harness_run_or_the_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentstack import progress
    from agentstack.cli import _app as cli_base

    monkeypatch.setattr(progress, "_terminal", lambda: True)
    monkeypatch.setattr(progress, "_quiet", False)
    seen: list[object] = []
    for label in ("agentstack run", "agentstack guard"):
        cli_base._call(lambda: seen.append(progress._step), {}, label)
    cli_base._call(lambda: seen.append(progress._step), {}, "agentstack lock")
    assert seen[:2] == [None, None] and seen[2] is not None
    assert progress._step is None  # closed after the command

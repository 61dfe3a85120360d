"""Interactive Claude Code on a pseudo-terminal, against a mock model on 127.0.0.1: once the
surface changed and agentstack withdrew the harness trust, the harness's own trust dialog comes
back, and the planted session-start hook and server have not run (and the model has had no
request) while it is shown, nor after the user declines. After review (`trust`, `apply --write`)
the dialog does not appear.

Skips locally without the harness CLI; fails in CI (CI=true).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.harness.binaries import harness_bin, harness_env
from tests.harness.deadline import scaled
from tests.harness.mock_model import MockModel
from tests.harness.test_harness_surface_e2e import _claude_entries, _codex_entries, _codex_home, _ok
from tests.harness.test_harness_surface_e2e import project as project

pytestmark = pytest.mark.slow

API_KEY = "sk-ant-offline-test"
_ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]|\x1b[=>]")
TRUST_DIALOG = "Quicksafetycheck"  # the screen with spaces squeezed out (cursor moves, not blanks)
MAIN_PROMPT = "ClaudeCodev"
CLAUDE_READY = "\u276f"  # the input prompt's arrow
CODEX_TRUST_DIALOG = "Trustthisfolder?"


class Screen:
    """A harness on a pseudo-terminal: what it printed (escape sequences and blanks dropped)."""

    def __init__(self, proc: subprocess.Popen[bytes], master: int) -> None:
        self.proc, self.master, self.raw = proc, master, b""

    @property
    def text(self) -> str:
        return re.sub(r"\s+", "", _ANSI.sub(b"", self.raw).decode("utf-8", "replace"))

    def wait_for(self, done: Callable[[str], bool], timeout: float = 30) -> bool:
        end = time.monotonic() + scaled(timeout)
        while time.monotonic() < end:
            if done(self.text):
                return True
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                self.raw += chunk
                if b"\x1b[6n" in chunk:  # Codex asks where the cursor is before it draws
                    os.write(self.master, b"\x1b[1;1R")
        return done(self.text)

    def send(self, data: bytes) -> None:
        os.write(self.master, data)


@contextmanager
def _on_pty(argv: list[str], cwd: Path, env: dict[str, str]) -> Iterator[Screen]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True)
    os.close(slave)
    try:
        yield Screen(proc, master)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(scaled(10))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(scaled(10))
        os.close(master)


@contextmanager
def interactive_claude(project: Path, home: Path, model: MockModel) -> Iterator[Screen]:
    config = home / ".claude.json"
    doc = json.loads(config.read_text()) if config.exists() else {}
    # First-run screens that are not what this test is about: onboarding, the API-key question.
    doc.update(hasCompletedOnboarding=True,
               customApiKeyResponses={"approved": [API_KEY[-20:]], "rejected": []})
    config.write_text(json.dumps(doc))
    env = harness_env(home, ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY=API_KEY,
                      TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    with _on_pty([str(harness_bin("claude"))], project, env) as screen:
        yield screen


def _stop_detached(home: Path) -> None:
    """Interactive Codex 0.171.0 starts an app-server daemon from `~/.codex/packages/` that
    leaves the session (and outlives the TUI): stop the ones running from this test's home."""
    prefix = str(home) + os.sep
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv0 = (entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode()
        except OSError:
            continue
        if argv0.startswith(prefix):
            with suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGTERM)


@contextmanager
def interactive_codex(project: Path, home: Path, model: MockModel) -> Iterator[Screen]:
    _codex_home(home, model)
    env = harness_env(home, TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    from tests.harness.drive import reaping

    try:
        # reaping: under the sandbox apply renders, its daemon runs in Codex's bubblewrap (pid 1
        # of a namespace of its own, in a session of its own: only SIGKILL from outside ends it).
        with reaping(), _on_pty([str(harness_bin("codex"))], project, env) as screen:
            yield screen
    finally:
        _stop_detached(home)


def test_interactive_claude_asks_again_after_a_surface_change_and_runs_nothing_before(
    project: Path, isolated_home: Path, tmp_path: Path
) -> None:
    harness_bin("claude")
    out = tmp_path / "out"
    out.mkdir()
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    # Trusted and applied: no dialog, straight to the prompt.
    with MockModel([]) as model, interactive_claude(project, isolated_home, model) as screen:
        assert screen.wait_for(lambda t: MAIN_PROMPT in t and CLAUDE_READY in t), screen.text[-2000:]
        assert TRUST_DIALOG not in screen.text
    expected = _claude_entries(project, out)
    assert expected["hook-ran"] == "runs"
    withdrawn = run_cli("status", cwd=project)
    assert withdrawn.returncode == 1 and "withdrew" in withdrawn.stderr
    # The harness's own dialog is back; nothing planted has run and the model has had no request.
    with MockModel([]) as model, interactive_claude(project, isolated_home, model) as screen:
        assert screen.wait_for(lambda t: TRUST_DIALOG in t), screen.text[-2000:]
        assert ".claude/settings.json" in screen.text  # it names the hooks it would load
        time.sleep(scaled(2))  # give anything that would run early the chance to
        assert not (out / "hook-ran").exists() and not (out / "server-ran").exists()
        assert not model.requests
        screen.send(b"\r")  # the default answer: "No, exit"
        screen.wait_for(lambda t: screen.proc.poll() is not None, timeout=15)
        assert screen.proc.wait(scaled(15)) is not None
    assert not (out / "hook-ran").exists() and not (out / "server-ran").exists()
    # Reviewed and applied again: no trust dialog (Claude's own per-server question for the
    # reviewed but undeclared `.mcp.json` server may follow; that is not a trust prompt).
    _ok("lock", cwd=project)
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    with MockModel([]) as model, interactive_claude(project, isolated_home, model) as screen:
        assert screen.wait_for(
            lambda t: "NewMCPserverfound" in t or (MAIN_PROMPT in t and CLAUDE_READY in t)
        ), screen.text[-2000:]
        assert TRUST_DIALOG not in screen.text


def test_interactive_codex_asks_again_after_a_surface_change_and_starts_no_server(
    project: Path, isolated_home: Path, tmp_path: Path
) -> None:
    harness_bin("codex")
    out = tmp_path / "out"
    out.mkdir()
    with MockModel([]) as placeholder:
        _codex_home(isolated_home, placeholder)
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    with MockModel([]) as model, interactive_codex(project, isolated_home, model) as screen:
        assert screen.wait_for(lambda t: "OpenAICodex" in t and "?forshortcuts" in t)
        assert not screen.wait_for(lambda t: CODEX_TRUST_DIALOG in t, timeout=3), screen.text
    _codex_entries(project, out)
    withdrawn = run_cli("status", cwd=project)
    assert withdrawn.returncode == 1 and "withdrew" in withdrawn.stderr
    with MockModel([]) as model, interactive_codex(project, isolated_home, model) as screen:
        assert screen.wait_for(lambda t: CODEX_TRUST_DIALOG in t), screen.text[-2000:]
        time.sleep(scaled(2))
        assert not (out / "server-ran").exists()  # the planted project server did not start
        assert not model.requests
    # Reviewed and applied: no dialog, and the (now reviewed) server starts.
    _ok("lock", cwd=project)
    _ok("trust", "--yes", "--accept-risk", cwd=project)
    _ok("apply", "--write", cwd=project)
    with MockModel([]) as model, interactive_codex(project, isolated_home, model) as screen:
        assert screen.wait_for(lambda t: (out / "server-ran").exists(), timeout=30)
        assert CODEX_TRUST_DIALOG not in screen.text

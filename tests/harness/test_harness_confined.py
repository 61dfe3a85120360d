"""The real Claude Code under `agentstack run --harness claude-code`: it reaches the mock model API
on 127.0.0.1 only through the credential proxy; the mock receives the real key while Claude Code's
environment holds only the phantom; a Bash call that reads the ~/.ssh decoy fails with the kernel's
EACCES, one that writes in the workdir succeeds, and agentstack's guard runs inside the sandbox.

Skips locally when Claude Code is missing (scripts/install-harnesses); fails in CI (CI=true).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import make_project, run_cli
from tests.harness.binaries import harness_bin
from tests.harness.deadline import scaled
from tests.harness.mock_model import MockModel, ToolCall
from tests.support.project import decoy_home
from tests.support.ptyspawn import pty_spawn

REAL_KEY = "sk-ant-real-key-never-in-the-sandbox-0042"


@pytest.fixture
def var_home() -> Iterator[Path]:
    """HOME outside /tmp (nono grants /tmp), with decoys that exist."""
    with decoy_home("agentstack-e2e-home-") as home:
        yield home


def test_claude_code_confined_end_to_end(tmp_path: Path, var_home: Path) -> None:
    claude = harness_bin("claude")
    script = [
        ToolCall("Bash", {"command": "env > env.txt; cat ~/.ssh/id_ed25519"}),
        ToolCall("Bash", {"command": "touch ok.txt"}),
    ]
    with MockModel(script) as model:
        manifest = f"""\
[project]
name = "confined"
harnesses = ["claude-code"]

[settings.permissions]
allow = ["Bash(env > env.txt; cat ~/.ssh/id_ed25519)", "Bash(touch ok.txt)"]

[sandbox]
write_dirs = ["."]
env = ["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "CLAUDE_CODE_MAX_RETRIES", "DISABLE_AUTOUPDATER"]

[sandbox.credentials.anthropic]
upstream = "{model.url}"
secret = "anthropic"
header = "x-api-key"
env = "ANTHROPIC_API_KEY"
base_url_env = "ANTHROPIC_BASE_URL"
"""
        root = make_project(tmp_path / "confined", manifest).resolve()
        env = {"HOME": str(var_home), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
               "CLAUDE_CODE_MAX_RETRIES": "0", "DISABLE_AUTOUPDATER": "1"}
        for args in (["lock"], ["trust", "--yes", "--accept-risk"], ["apply", "--write"]):
            result = run_cli(*args, cwd=root, env=env)
            assert result.returncode == 0, result.stderr
        assert run_cli("secret", "set", "anthropic", cwd=root, input=REAL_KEY + "\n",
                       env=env).returncode == 0
        run = run_cli("run", "--harness", "claude-code", "--", str(claude), "-p", "go",
                      "--output-format", "json", cwd=root, env=env)
        assert run.returncode == 0, run.stdout + run.stderr

    # The model API saw the real key; the harness only ever held the phantom.
    keys = {r.header("x-api-key") for r in model.requests if r.api == "anthropic"}
    assert keys == {REAL_KEY}, keys
    child_env = (root / "env.txt").read_text()
    assert REAL_KEY not in child_env
    assert "ANTHROPIC_API_KEY=" in child_env
    # The ~/.ssh read got the kernel's EACCES (Landlock), not ENOENT, not empty output.
    first, second = model.tool_results
    assert "Permission denied" in first.text and "DECOY-SSH-KEY" not in first.text, first.text
    assert "No such file" not in first.text
    # The write in the workdir went through, so the guard hook (rendered with onFailure "block")
    # started and decided inside the sandbox, from read-only copies of its state.
    assert (root / "ok.txt").exists() and second.is_error is not True, second.text
    assert "agentstack guard" not in first.text + second.text
    assert not subprocess.run(["grep", "-r", REAL_KEY, str(root)], capture_output=True).stdout


def test_a_confined_session_cannot_change_what_runs_later(tmp_path: Path, var_home: Path) -> None:
    """The real Claude Code runs a full turn under `run` with its private per-project state. From
    inside, writes to the real ~/.claude/settings.json and ~/.claude.json and reads of the
    harnesses' and gh's credential files get the kernel's EACCES; a SessionStart hook planted in
    the private state stays there. A later unconfined session runs none of it; a later confined
    session starts from a re-seeded state (no hook at all, not even the user's own)."""
    import json

    from agentstack.sandbox.private_state import layout_for
    from tests.harness.drive import run_claude

    claude = harness_bin("claude")
    root = (tmp_path / "project").resolve()
    marker = root / "planted-ran"
    hook = json.dumps({"hooks": {"SessionStart": [
        {"hooks": [{"type": "command", "command": f"touch {marker}"}]}]}})
    decoys = {
        ".claude/settings.json": '{"decoy": "the user\'s real settings"}\n',
        ".claude/.credentials.json": '{"token": "DECOY-CLAUDE-TOKEN"}\n',
        ".codex/auth.json": '{"OPENAI_API_KEY": "DECOY-CODEX-KEY"}\n',
        ".config/gh/hosts.yml": "github.com:\n  oauth_token: DECOY-GH-TOKEN\n",
    }
    for relative, text in decoys.items():
        (var_home / relative).parent.mkdir(parents=True, exist_ok=True)
        (var_home / relative).write_text(text)
    steps = [
        f"printf '%s' '{hook}' > ~/.claude/settings.json",
        f"printf '%s' '{hook}' > \"$CLAUDE_CONFIG_DIR/settings.json\" && echo PRIVATE-OK",
        "echo '{}' >> ~/.claude.json",
        "echo '[hooks]' >> ~/.codex/config.toml",
        "cat ~/.codex/auth.json",
        "cat ~/.claude/.credentials.json",
        "cat ~/.config/gh/hosts.yml",
    ]
    # The attacker's repository carries the script (so Claude's own permission checks, which read
    # paths out of a command line, see only `sh plant.sh N`; the kernel is what must refuse).
    plant = "case $1 in\n" + "".join(f"{i}) {c} ;;\n" for i, c in enumerate(steps)) + "esac\n"
    with MockModel([ToolCall("Bash", {"command": f"sh plant.sh {i}"})
                    for i in range(len(steps))]) as model:
        manifest = f"""\
[project]
name = "private-state"
harnesses = ["claude-code"]

[settings.permissions]
allow = ["Bash"]

[sandbox]
write_dirs = ["."]
env = ["CLAUDE_CODE_MAX_RETRIES", "DISABLE_AUTOUPDATER"]

[sandbox.credentials.anthropic]
upstream = "{model.url}"
secret = "anthropic"
header = "x-api-key"
env = "ANTHROPIC_API_KEY"
base_url_env = "ANTHROPIC_BASE_URL"
"""
        make_project(root, manifest)
        (root / "plant.sh").write_text(plant)
        env = {"HOME": str(var_home), "CLAUDE_CODE_MAX_RETRIES": "0", "DISABLE_AUTOUPDATER": "1"}
        for args in (["lock"], ["trust", "--yes", "--accept-risk"], ["apply", "--write"]):
            result = run_cli(*args, cwd=root, env=env)
            assert result.returncode == 0, result.stderr
        assert run_cli("secret", "set", "anthropic", cwd=root, input=REAL_KEY + "\n",
                       env=env).returncode == 0
        real_claude_json = (var_home / ".claude.json").read_bytes()
        run = run_cli("run", "--harness", "claude-code", "--", str(claude), "-p", "go",
                      "--output-format", "json", cwd=root, env=env)
        assert run.returncode == 0, run.stdout + run.stderr
        results = [r.text for r in model.tool_results]
    assert len(results) == len(steps), results
    for index, text in enumerate(results):
        if index == 1:
            assert "PRIVATE-OK" in text, text
            continue
        assert "Permission denied" in text and "No such file" not in text, (steps[index], text)
        assert "DECOY" not in text, text
    for relative, text in decoys.items():
        assert (var_home / relative).read_text() == text, relative
    assert (var_home / ".claude.json").read_bytes() == real_claude_json
    assert not (var_home / ".codex" / "config.toml").exists()
    layout = layout_for(os.path.realpath(os.environ["AGENTSTACK_HOME"]), str(root))
    assert "SessionStart" in Path(layout.claude, "settings.json").read_text()  # planted, private
    assert not marker.exists()

    # A later session outside agentstack (HOME = the same user) runs nothing of it.
    with MockModel([]) as model:
        later = run_claude(root, var_home, model, "hello")
        assert later.proc.returncode == 0, later.output
    assert not marker.exists(), "a hook planted inside run ran in a later unconfined session"

    # Control: the same hook in the user's real settings does run in such a session ...
    (var_home / ".claude" / "settings.json").write_text(hook)
    with MockModel([]) as model:
        control = run_claude(root, var_home, model, "hello")
        assert control.proc.returncode == 0, control.output
    assert marker.exists(), "control: Claude Code did not run a user-level SessionStart hook"
    marker.unlink()
    # ... but a confined session starts from a re-seeded private state: no hook runs at all.
    with MockModel([]) as model:
        (root / "agentstack.toml").write_text(
            (root / "agentstack.toml").read_text().replace(
                upstream_line(root), f'upstream = "{model.url}"'))
        for args in (["lock"], ["trust", "--yes", "--accept-risk"]):
            result = run_cli(*args, cwd=root, env=env)
            assert result.returncode == 0, result.stderr
        again = run_cli("run", "--harness", "claude-code", "--", str(claude), "-p", "hello",
                        "--output-format", "json", cwd=root, env=env)
        assert again.returncode == 0, again.stdout + again.stderr
        assert model.requests
    assert not marker.exists(), "a planted or user-level hook ran inside a later confined session"
    assert "SessionStart" not in Path(layout.claude, "settings.json").read_text()


def upstream_line(root: Path) -> str:
    return next(line for line in (root / "agentstack.toml").read_text().splitlines()
                if line.startswith("upstream = "))


def _session_processes(root: Path) -> list[int]:
    """Processes whose working directory is inside `root` (a confined harness, its tools)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if cwd == str(root) or cwd.startswith(str(root) + "/"):
            out.append(int(entry))
    return out


def test_claude_code_interactive_on_a_terminal_leaves_nothing(tmp_path: Path,
                                                              var_home: Path) -> None:
    """`agentstack run` of the real, interactive Claude Code on a pseudo-terminal: a turn runs a
    tool that leaves a detached daemon; after /exit no process of the session remains and the next
    line typed reaches the shell."""
    import json
    import re
    import select
    import sys
    import time

    from tests.conftest import REPO

    harness_bin("claude")
    root = (tmp_path / "tty").resolve()
    (var_home / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True,
                                                       "theme": "dark"}))
    plant = ("setsid sh -c 'echo $$ > daemon.pid; exec sleep 300' > /dev/null 2>&1 < /dev/null &\n"
             "touch ok.txt\n")
    with MockModel([ToolCall("Bash", {"command": "sh plant.sh"})]) as model:
        make_project(root, f"""\
[project]
name = "tty"
harnesses = ["claude-code"]

[settings.permissions]
allow = ["Bash(sh plant.sh)"]

[sandbox]
write_dirs = ["."]

[sandbox.credentials.anthropic]
upstream = "{model.url}"
secret = "anthropic"
header = "Authorization"
env = "ANTHROPIC_AUTH_TOKEN"
base_url_env = "ANTHROPIC_BASE_URL"
""", files={"plant.sh": plant})
        env = {"HOME": str(var_home)}
        for args in (["lock"], ["trust", "--yes", "--accept-risk"], ["apply", "--write"]):
            result = run_cli(*args, cwd=root, env=env)
            assert result.returncode == 0, result.stderr
        assert run_cli("secret", "set", "anthropic", cwd=root, input=REAL_KEY + "\n",
                       env=env).returncode == 0
        shell = (f'"{sys.executable}" -m agentstack run --harness claude-code; '
                 'echo "RUN-DONE $?"; read line; echo "GOT:$line"')
        pid, fd = pty_spawn(["/bin/sh", "-c", shell],
                            env={**env, "PYTHONPATH": str(REPO), "TERM": "xterm-256color"},
                            cwd=root)
        import fcntl
        import struct
        import termios

        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        screen = b""

        def wait_for(pattern: str, timeout: float = 60) -> bool:
            nonlocal screen
            deadline = time.monotonic() + scaled(timeout)
            while time.monotonic() < deadline:
                plain = re.sub(rb"\x1b\[[0-9;?<>]*[a-zA-Z~]|\x1b\][^\x07]*\x07|\x1b.", b"", screen)
                if pattern.encode() in plain:
                    return True
                ready, _, _ = select.select([fd], [], [], 0.2)
                if ready:
                    try:
                        chunk = os.read(fd, 65536)
                    except OSError:
                        return False
                    if not chunk:
                        return False
                    screen += chunk
            return False

        try:
            assert wait_for("auto mode"), screen[-2000:]
            os.write(fd, b"go\r")
            deadline = time.monotonic() + scaled(60)
            while not model.tool_results and time.monotonic() < deadline:
                wait_for("\0", 0.5)
            assert model.tool_results, screen[-2000:]
            while len(model.main_requests()) < 2 and time.monotonic() < deadline:
                wait_for("\0", 0.5)  # the final answer after the tool result
            wait_for("\0", 2)
            during = _session_processes(root)
            os.write(fd, b"/exit\r")
            assert wait_for("RUN-DONE 0"), screen[-2000:]
            # only the shell that started `run` (it waits for the next line) is left in there
            assert set(_session_processes(root)) <= {pid}, _session_processes(root)
            os.write(fd, b"hello\n")
            assert wait_for("GOT:hello", 20), screen[-2000:]
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
            os.waitpid(pid, 0)
            os.close(fd)
    assert (root / "ok.txt").exists()
    daemon = int((root / "daemon.pid").read_text())
    assert daemon in during, (daemon, during)  # it was running during the session ...
    assert not os.path.exists(f"/proc/{daemon}")  # ... and is gone
    assert _session_processes(root) == []



def test_codex_confined_with_private_state(tmp_path: Path, var_home: Path) -> None:
    """The real Codex runs a turn under `run --harness codex`: its provider's base URL is pointed
    at the credential route (the real key reaches the mock, Codex holds the phantom), the real
    ~/.codex is neither writable nor its auth.json readable, and removing the user-level guard
    from the private state lasts only until the next start."""
    import tomllib

    from agentstack.sandbox.private_state import layout_for
    from tests.harness.drive import CODEX_MODEL, CODEX_OFFLINE_TOML

    codex = harness_bin("codex")
    root = (tmp_path / "codex-project").resolve()
    (var_home / ".codex").mkdir(exist_ok=True)
    (var_home / ".codex" / "auth.json").write_text('{"OPENAI_API_KEY": "DECOY-CODEX-KEY"}\n')
    steps = ["echo '[hooks]' >> ~/.codex/config.toml", "cat ~/.codex/auth.json",
             ': > "$CODEX_HOME/config.toml" && echo GUARD-REMOVED']
    plant = "case $1 in\n" + "".join(f"{i}) {c} ;;\n" for i, c in enumerate(steps)) + "esac\n"
    with MockModel([ToolCall("Bash", {"command": f"sh plant.sh {i}"})
                    for i in range(len(steps))]) as model:
        real_config = (
            f'model = "{CODEX_MODEL}"\nmodel_provider = "mock"\napproval_policy = "never"\n'
            'sandbox_mode = "danger-full-access"\n[model_providers.mock]\nname = "mock"\n'
            f'base_url = "{model.openai_base_url}"\nwire_api = "responses"\n'
            'env_key = "OPENAI_API_KEY"\n' + CODEX_OFFLINE_TOML)
        (var_home / ".codex" / "config.toml").write_text(real_config)
        make_project(root, f"""\
[project]
name = "codex-private"
harnesses = ["codex"]

[sandbox]
write_dirs = ["."]

[sandbox.credentials.openai]
upstream = "{model.url}"
secret = "openai"
env = "OPENAI_API_KEY"
""", files={"plant.sh": plant})
        env = {"HOME": str(var_home)}
        for args in (["lock"], ["trust", "--yes", "--accept-risk"], ["apply", "--write"]):
            result = run_cli(*args, cwd=root, env=env)
            assert result.returncode == 0, result.stderr
        assert run_cli("secret", "set", "openai", cwd=root, input=REAL_KEY + "\n",
                       env=env).returncode == 0
        after_apply = (var_home / ".codex" / "config.toml").read_bytes()
        run = run_cli("run", "--harness", "codex", "--", str(codex), "exec",
                      "--skip-git-repo-check", "go", cwd=root, env=env)
        assert run.returncode == 0, run.stdout + run.stderr
        keys = {r.header("authorization") for r in model.requests if r.api == "openai"}
        results = [r.text for r in model.tool_results]
    assert keys == {f"Bearer {REAL_KEY}"}, keys
    assert len(results) == 3, results
    assert "Permission denied" in results[0] and "Permission denied" in results[1], results
    assert "DECOY" not in results[1] and "GUARD-REMOVED" in results[2], results
    assert (var_home / ".codex" / "config.toml").read_bytes() == after_apply
    layout = layout_for(os.path.realpath(os.environ["AGENTSTACK_HOME"]), str(root))
    assert Path(layout.codex, "config.toml").read_text() == ""  # removed inside ...
    again = run_cli("run", "--harness", "codex", "--", "/bin/true", cwd=root, env=env)
    assert again.returncode == 0, again.stderr
    seeded = tomllib.loads(Path(layout.codex, "config.toml").read_text())  # ... back at start
    assert "agentstack._guard" in str(seeded["hooks"]["PreToolUse"])

"""Cline reads MCP servers only from the user's cline_mcp_settings.json, in every folder it runs
in: a trusted project's servers are rendered there behind the relay with `--only-in-project`, and
the relay starts one only where Cline runs in that project (the kernel's /proc/PID/cwd of the
relay's parent, Cline itself, measured with 3.0.65). Anywhere else it answers an MCP error naming
the reason and starts nothing.

In process: the check against real processes whose working directory is set (a folder cannot
forge it), and the refusal's JSON-RPC answers. With the real `cline` (3.0.65) against the mock
model: in the trusted project the server's tool is offered and a call runs; in another folder
(and in a project nested inside it) the tool is not offered and the server never ran (the file it
writes at start is absent).

Skips locally when `cline` is missing (scripts/install-harnesses); fails in CI (CI=true).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.apply.test_adapters_cline import MCP_SETTINGS, run_cline
from tests.harness.binaries import harness_bin
from tests.harness.deadline import scaled
from tests.harness.drive import NOTES_SERVER
from tests.harness.mock_model import ToolCall
from tests.support.adapters import locked_project, rendered, trust_and_apply

NOTE = ToolCall("notes__add_note", {"text": "ok"})
STARTED = "started.txt"  # the notes server writes it at start ($NOTES_TOKEN_FILE)


def _manifest(root: Path) -> str:
    return f"""\
[project]
name = "cline-scope"
harnesses = ["cline"]

[servers.notes]
command = {json.dumps(sys.executable)}
args = ["-I", {json.dumps(str(NOTES_SERVER))}]
env = {{ NOTES_FILE = {json.dumps(str(root / "notes.txt"))}, NOTES_TOKEN_FILE = {json.dumps(str(root / STARTED))} }}

[sandbox]
write_dirs = ["."]
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    where = tmp_path / "trusted project"
    return locked_project(where, _manifest(where.resolve()), {})


@contextmanager
def _in(folder: Path) -> Iterator[int]:
    """A real process working in `folder`: its pid."""
    with subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], cwd=folder,
                          stdin=subprocess.PIPE) as proc:
        try:
            yield proc.pid
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=scaled(30))


# ------------------------------------------------------------------------------ in process


def test_cline_renders_every_server_behind_the_relay_only_in_its_project(
        project: Path, isolated_home: Path) -> None:
    from adapters.cline import ONLY_IN_PROJECT
    from agentstack.launch import ONLY_IN_PROJECT as LAUNCH_OPTION
    from agentstack.launch import parse_all

    assert ONLY_IN_PROJECT == LAUNCH_OPTION
    servers = rendered(project, ["cline"])[str(isolated_home / MCP_SETTINGS)]
    args = servers.keys[("mcpServers", "notes")]["args"]
    assert args[args.index("--") - 1] == ONLY_IN_PROJECT
    _, relay, command = parse_all(args[3:])
    assert relay[ONLY_IN_PROJECT] == "" and relay["--project"] == str(project)
    assert command[:3] == ["/usr/bin/env", "-C", str(project)]


def test_the_option_goes_only_with_the_relay() -> None:
    from agentstack.launch import LaunchError, parse_all

    with pytest.raises(LaunchError, match="go together"):
        parse_all(["--only-in-project", "--", "true"])


def test_the_harness_must_work_in_the_servers_project(project: Path, tmp_path: Path) -> None:
    from agentstack.relay import outside_project

    inside = project / "src" / "deep"
    inside.mkdir(parents=True)
    for folder in (project, inside):
        with _in(folder) as pid:
            assert outside_project(str(project), pid) is None
    other = tmp_path / "other"
    other.mkdir()
    # A project nested inside it is a project of its own; a link to the project is the project.
    nested = project / "vendor"
    nested.mkdir()
    (nested / "agentstack.toml").write_text('[project]\nname = "nested"\n')
    (tmp_path / "link").symlink_to(project)
    with _in(tmp_path / "link") as pid:
        assert outside_project(str(project), pid) is None
    for folder, says in ((other, "no project"), (nested, f"project {nested}")):
        with _in(folder) as pid:
            reason = outside_project(str(project), pid)
        assert reason is not None and str(folder) in reason and says in reason, reason


def test_nothing_known_about_the_harness_refuses(project: Path) -> None:
    from agentstack.relay import outside_project

    with _in(project) as pid:
        pass  # gone now
    reason = outside_project(str(project), pid)
    assert reason is not None and "refused" in reason
    # The parent's directory removed while it runs.
    gone = project / "gone"
    gone.mkdir()
    with _in(gone) as pid:
        gone.rmdir()
        reason = outside_project(str(project), pid)
    assert reason is not None and "gone" in reason


def test_a_refused_server_answers_every_request_with_an_mcp_error() -> None:
    from agentstack.relay import REFUSED, refuse_start

    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        "not json",
        {"jsonrpc": "2.0", "id": "b", "method": "tools/list"},
    ]
    stdin = io.BytesIO(b"".join(
        (r if isinstance(r, str) else json.dumps(r)).encode() + b"\n" for r in requests))
    stdout = io.BytesIO()
    assert refuse_start("notes", "the harness is elsewhere", stdin=stdin, stdout=stdout) == 1
    answers = [json.loads(line) for line in stdout.getvalue().splitlines()]
    assert [a["id"] for a in answers] == [1, "b"]
    for answer in answers:
        assert answer["error"]["code"] == REFUSED and "result" not in answer
        assert answer["error"]["message"] == (
            "agentstack: MCP server 'notes' not started: the harness is elsewhere")


def test_the_launcher_refuses_before_the_server_or_its_secrets(project: Path, tmp_path: Path,
                                                               isolated_home: Path) -> None:
    """The launcher as Cline starts it, from another folder: an MCP error, and the command after
    `--` never ran (nor was a secret asked for: none is stored)."""
    other = tmp_path / "other"
    other.mkdir()
    ran = tmp_path / "ran"
    argv = [sys.executable, "-I", "-m", "agentstack.launch", "--server", "notes", "--project",
            str(project), "--state", str(isolated_home / "state"), "--only-in-project",
            "--secret", "TOKEN=never-stored", "--", "/usr/bin/touch", str(ran)]
    # Through a shell working in `other` (the launcher's parent, as Cline is).
    done = subprocess.run(["sh", "-c", '"$@"; exit $?', "sh", *argv], cwd=other,
                          capture_output=True, timeout=scaled(60),
                          input=json.dumps({"jsonrpc": "2.0", "id": 7, "method": "initialize",
                                            "params": {}}).encode() + b"\n")
    answer = json.loads(done.stdout)
    assert answer["id"] == 7 and "not this server's project" in answer["error"]["message"]
    assert done.returncode == 1 and not ran.exists()


def test_a_remote_server_is_reached_only_from_its_project(tmp_path: Path,
                                                           isolated_home: Path) -> None:
    """A remote (URL) server in Cline's user-level file goes through the relay's remote mode with
    the same option: from another folder the relay answers an MCP error and opens no connection
    (a listener on 127.0.0.1 accepts none)."""
    import socket

    from adapters.cline import ONLY_IN_PROJECT

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        listener.setblocking(False)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
        where = tmp_path / "remote project"
        project = locked_project(where, f"""\
[project]
name = "cline-remote"
harnesses = ["cline"]

[servers.far]
url = "{url}"
""", {})
        trust_and_apply(project)
        servers = rendered(project, ["cline"])[str(isolated_home / MCP_SETTINGS)]
        args = servers.keys[("mcpServers", "far")]["args"]
        assert args[args.index("--remote") - 1] == ONLY_IN_PROJECT and url in args
        assert "url" not in servers.keys[("mcpServers", "far")]
        other = tmp_path / "other"
        other.mkdir()
        argv = [servers.keys[("mcpServers", "far")]["command"], *args]
        done = subprocess.run(["sh", "-c", '"$@"; exit $?', "sh", *argv], cwd=other,
                              capture_output=True, timeout=scaled(60),
                              input=json.dumps({"jsonrpc": "2.0", "id": 3, "method": "initialize",
                                                "params": {}}).encode() + b"\n")
        answer = json.loads(done.stdout)
        assert answer["id"] == 3 and "not this server's project" in answer["error"]["message"]
        assert done.returncode == 1
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing connected


# ------------------------------------------------------------------------------- real cline


@pytest.mark.slow
def test_cline_starts_a_trusted_projects_server_only_in_that_project(
        project: Path, tmp_path: Path, isolated_home: Path) -> None:
    harness_bin("cline")
    trust_and_apply(project)
    started = project / STARTED

    ran, text, offered = run_cline(project, isolated_home, NOTE)
    assert "notes__add_note" in offered and ran, (offered, text)
    assert started.exists()

    # Another folder, and a project nested inside the trusted one: the server is read from the
    # same user-level file, and not started.
    other = tmp_path / "another folder"
    other.mkdir()
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    nested = project / "vendor"
    nested.mkdir()
    (nested / "agentstack.toml").write_text('[project]\nname = "nested"\nharnesses = ["cline"]\n')
    subprocess.run(["git", "init", "-q", str(nested)], check=True)
    settings = json.loads((isolated_home / MCP_SETTINGS).read_text())
    assert "notes" in settings["mcpServers"]
    for folder in (other, nested):
        started.unlink(missing_ok=True)
        ran, text, offered = run_cline(folder, isolated_home, NOTE)
        assert not ran and not any(name.startswith("notes__") for name in offered), (
            folder, offered, text)
        assert not started.exists(), folder

"""The confinement suite: real processes, real kernel denials (EACCES/EPERM), real decoys.

Every row of `agentstack.sandbox.verify.ROWS` (also run by `agentstack doctor --verify`) runs from
the confined process itself, from a grandchild and from a setsid-detached descendant. A denial row
passes only on a non-zero exit AND the kernel's EACCES/EPERM message; never on empty output or
ENOENT. Decoys exist and live outside /tmp (under /var/tmp). Unconfined controls show that each
probe does observe success when nothing stops it, so a pass is not an artefact of a broken probe.
Then the `agentstack run` command itself: trust gate, exit codes, signals, terminal, environment,
credential proxy, leftover descendants, refusals.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentstack.sandbox import verify
from agentstack.sandbox import watch as _watch
from tests.conftest import REPO, make_project, run_cli
from tests.harness.deadline import scaled
from tests.support.project import decoy_home, manifest
from tests.support.ptyspawn import pty_spawn

PYTHON = verify.system_python()
PROBE = REPO / "agentstack" / "sandbox" / "probe.py"
CASES = [(row, mode) for row in verify.ROWS for mode in row.modes]


@pytest.fixture(scope="module")
def scene() -> Iterator[verify.Scenario]:
    with verify.scenario() as sc:
        yield sc


# Every row under the launcher a process with other threads gets (a fresh interpreter running
# launch.py: pytest-xdist's worker has a thread of its own, and so does the scene's upstream). The
# launcher `agentstack run` uses from a single-threaded process (a clone born in the run's cgroup)
# runs the same launch.py code; it is never forced here (a clone of a process with other threads
# can hang for ever: tests/sandbox/test_launcher_threads.py, which also proves its denials in a process
# that has only one thread).
@pytest.mark.parametrize(("row", "mode"), CASES, ids=[f"{r.name}-{m}" for r, m in CASES])
def test_row(scene: verify.Scenario, row: verify.Row, mode: str) -> None:
    result = verify.run_row(scene, row, mode)
    if result.skipped:
        pytest.skip(result.detail)
    assert result.passed, (
        f"{row.what} [{mode}]: exit {result.exit_code}, output {result.output!r}; {result.detail}"
    )
    if row.expect == "deny":
        assert result.exit_code not in (0, None)
        pattern = verify.PROXY_DENIED_LINE if row.op == "proxy" else verify.DENIED_LINE
        assert pattern.search(result.output)
        assert "ENOENT" not in result.output
    else:
        assert result.exit_code == 0


# Rows whose probe would change the machine when it succeeds are not run unconfined.
DESTRUCTIVE = {"kill", "mount", "proc-sys-write", "execveat", "trust-log", "write-outside"}
ROOT_ONLY = {"etc-shadow", "raw-disk", "raw-socket", "packet-socket", "netlink-audit", "bpf",
             "perf", "ptrace", "vm-read", "setns", "unshare-user", "clone-user"}


@pytest.mark.parametrize(
    "row",
    [r for r in verify.ROWS
     if r.expect == "deny" and r.name not in DESTRUCTIVE and r.op != "proxy"],
    ids=lambda r: r.name,
)
def test_probe_observes_success_unconfined(scene: verify.Scenario, row: verify.Row) -> None:
    if row.name in ROOT_ONLY and os.geteuid() != 0:
        pytest.skip("needs root to succeed unconfined")
    if row.name == "raw-disk" and not scene.values["disk"]:
        pytest.skip("no block device backs /")
    argv = scene.argv(row, "direct")
    done = subprocess.run(argv, capture_output=True, text=True, cwd=scene.workdir, timeout=scaled(30),
                          stdin=subprocess.DEVNULL, check=False)
    output = done.stdout.strip()
    if row.name == "tiocsti":  # stdin is not a terminal: the ioctl reaches the tty layer
        assert "ENOTTY" in output, output
        return
    if row.name == "raw-disk" and output == "DENIED EPERM Operation not permitted":
        # A device cgroup (this machine's own container) refuses it before Landlock would;
        # confined, the denial is Landlock's EACCES (see the raw-disk rows).
        pytest.skip("the block device is closed to every process here (device cgroup)")
    if row.name == "sctp" and "EPROTONOSUPPORT" in output:
        pytest.skip("no SCTP in this kernel (confined, seccomp refuses the socket first)")
    if row.name == "io-uring" and "EPERM" in output:
        sysctl = Path("/proc/sys/kernel/io_uring_disabled")
        if sysctl.exists() and sysctl.read_text().strip() != "0":
            pytest.skip("io_uring is disabled by sysctl on this machine")
    assert done.returncode == 0 and output.startswith("ALLOWED"), (row.name, output)


# ------------------------------------------------------------------ `agentstack run`

MANIFEST = str(manifest("demo", "claude-code", "codex").sandbox(write_dirs=["."], env=["FOO"]))


@pytest.fixture(scope="module")
def var_home() -> Iterator[Path]:
    """A HOME outside /tmp with decoys that exist."""
    with decoy_home("agentstack-test-home-") as home:
        yield home


def _trusted(root: Path, env: dict[str, str] | None = None) -> Path:
    """Lock, then record trust in the (test's) trust log, as a user would."""
    assert run_cli("lock", cwd=root, env=env).returncode == 0
    trusted = run_cli("trust", "--yes", "--accept-risk", cwd=root, env=env)
    assert trusted.returncode == 0, trusted.stderr
    return root


def _explicit(root: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """Lock, then trust the digest explicitly (AGENTSTACK_TRUSTED_DIGESTS, as CI does)."""
    assert run_cli("lock", cwd=root, env=env).returncode == 0
    digest = run_cli("digest", cwd=root, env=env)
    assert digest.returncode == 0, digest.stderr
    return {**(env or {}), "AGENTSTACK_TRUSTED_DIGESTS": digest.stdout.strip()}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, var_home: Path) -> tuple[Path, dict[str, str]]:
    """One locked project for the tests that do not change its manifest, and the environment
    that trusts its digest explicitly (module scope: the per-test AGENTSTACK_HOME changes)."""
    base = tmp_path_factory.mktemp("shared")
    root = make_project(base / "demo", MANIFEST)
    shutil.copyfile(PROBE, root / "probe.py")
    state = {"AGENTSTACK_HOME": str(base / "state"), "AGENTSTACK_CACHE": str(base / "cache"),
             "XDG_CONFIG_HOME": str(base / "config"), "XDG_CACHE_HOME": str(base / "cache")}
    env = _explicit(root, state)
    return root, {"HOME": str(var_home),
                  "AGENTSTACK_TRUSTED_DIGESTS": env["AGENTSTACK_TRUSTED_DIGESTS"]}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = make_project(tmp_path / "demo", MANIFEST)
    shutil.copyfile(PROBE, root / "probe.py")
    return root


def test_run_refuses_an_untrusted_digest(project: Path) -> None:
    assert run_cli("lock", cwd=project).returncode == 0
    marker = project / "ran"
    done = run_cli("run", "--", "/bin/sh", "-c", f"touch {marker}", cwd=project)
    assert done.returncode == 1
    assert "not trusted" in done.stderr and "agentstack trust" in done.stderr
    assert not marker.exists()
    stale = project / "agentstack.toml"
    stale.write_text(MANIFEST.replace('env = ["FOO"]', 'env = ["BAR"]'))
    assert run_cli("run", "--", "/bin/true", cwd=project).returncode == 1


def test_run_confines_and_passes_the_exit_code(shared: tuple[Path, dict[str, str]],
                                               var_home: Path) -> None:
    project, env = shared
    denied = run_cli("run", "--", PYTHON or "python3", "-I", "probe.py", "direct", "read",
                     str(var_home / ".ssh" / "id_ed25519"), cwd=project, env=env)
    assert denied.returncode == 1, denied.stderr
    assert denied.stdout.strip() == "DENIED EACCES Permission denied"
    code = run_cli("run", "--", "/bin/sh", "-c", "echo hi > out.txt; exit 7", cwd=project, env=env)
    assert code.returncode == 7, code.stderr
    assert (project / "out.txt").read_text() == "hi\n"


def test_run_passes_a_fatal_signal_through(shared: tuple[Path, dict[str, str]],
                                           var_home: Path) -> None:
    project, env = shared
    done = run_cli("run", "--", "/bin/sh", "-c", "kill -TERM $$", cwd=project, env=env)
    assert done.returncode == -signal.SIGTERM


def _agentstack(args: list[str], cwd: Path, env: dict[str, str], **kw: object
                ) -> subprocess.Popen[str]:
    full = dict(os.environ, PYTHONPATH=str(REPO), **env)
    return subprocess.Popen([sys.executable, "-m", "agentstack", *args], cwd=cwd, env=full,
                            text=True, **kw)  # type: ignore[call-overload]


def test_sigterm_to_run_reaches_the_command(shared: tuple[Path, dict[str, str]],
                                            var_home: Path) -> None:
    project, env = shared
    script = ("import os, signal, time\n"
              "signal.signal(signal.SIGTERM, lambda *a: os._exit(42))\n"
              "os.write(1, b'ready\\n')\n"
              "time.sleep(60)\n")
    proc = _agentstack(["run", "--no-interactive", "--", PYTHON or "python3", "-c", script],
                       project, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=scaled(30)) == 42


def test_interactive_run_keeps_the_terminal(shared: tuple[Path, dict[str, str]],
                                            var_home: Path) -> None:
    project, env = shared
    script = ("import fcntl, os, struct, termios\n"
              "tty = os.open('/dev/tty', os.O_RDWR)\n"
              "rows = struct.unpack('HHHH', fcntl.ioctl(tty, termios.TIOCGWINSZ, bytes(8)))[0]\n"
              "print('TTY', os.isatty(0), os.isatty(1), os.tcgetpgrp(0) == os.getpgrp(), rows)\n")
    pid, fd = pty_spawn([sys.executable, "-m", "agentstack", "run", "--", PYTHON or "python3",
                         "-c", script], env={**env, "PYTHONPATH": str(REPO)}, cwd=project)
    output = b""
    deadline = time.monotonic() + scaled(60)
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    text = output.decode("utf-8", "replace")
    assert "TTY True True True" in text, text
    assert os.waitstatus_to_exitcode(status) == 0, text


def test_ctrl_c_on_the_terminal_reaches_the_harness(shared: tuple[Path, dict[str, str]],
                                                    var_home: Path) -> None:
    project, env = shared
    script = ("import os, signal, time\n"
              "signal.signal(signal.SIGINT, lambda *a: (os.write(1, b'GOT SIGINT\\n'), "
              "os._exit(33)))\n"
              "os.write(1, b'ready\\n')\n"
              "time.sleep(60)\n")
    pid, fd = pty_spawn([sys.executable, "-m", "agentstack", "run", "--", PYTHON or "python3",
                         "-c", script], env={**env, "PYTHONPATH": str(REPO)}, cwd=project)
    output = b""
    sent = False
    deadline = time.monotonic() + scaled(60)
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        if not sent and b"ready" in output:
            os.write(fd, b"\x03")  # the terminal's interrupt character
            sent = True
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert b"GOT SIGINT" in output, output
    assert os.waitstatus_to_exitcode(status) == 33, output


def test_environment_is_built_from_an_allowlist(shared: tuple[Path, dict[str, str]],
                                                var_home: Path) -> None:
    project, trusted = shared
    env = {**trusted, "FOO": "passed", "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1",
           "AWS_SECRET_ACCESS_KEY": "nope", "LD_PRELOAD": "/tmp/x.so"}
    done = run_cli("run", "--", PYTHON or "python3", "-c",
                   "import json, os; print(json.dumps(dict(os.environ)))", cwd=project, env=env)
    assert done.returncode == 0, done.stderr
    child = json.loads(done.stdout)
    assert child["FOO"] == "passed" and child["HOME"] == str(var_home)
    assert set(child) <= {"HOME", "PATH", "TERM", "LANG", "TMPDIR", "FOO", "LC_CTYPE"}, child
    run_dir = os.path.dirname(child["TMPDIR"])
    assert os.path.basename(run_dir).startswith("agentstack-run-")
    assert not os.path.exists(run_dir)  # removed after the run


def test_ssh_auth_sock_in_the_manifest_is_refused(tmp_path: Path) -> None:
    """Refused already at `lock` (exit 2, with the field's path): `run` could never accept it."""
    root = make_project(tmp_path / "demo", MANIFEST.replace('"FOO"', '"SSH_AUTH_SOCK"'))
    locked = run_cli("lock", cwd=root)
    assert locked.returncode == 2
    assert "sandbox.env[0]" in locked.stderr and "SSH_AUTH_SOCK never passes" in locked.stderr
    done = run_cli("run", "--", "/bin/true", cwd=root)
    assert done.returncode != 0


def test_unenforceable_manifest_is_refused_at_run(tmp_path: Path) -> None:
    root = make_project(tmp_path / "demo", MANIFEST.replace('write_dirs = ["."]',
                                                           'write_dirs = [".", "~"]'))
    marker = root / "ran"
    locked = run_cli("lock", cwd=root)  # refused at lock already: run could never accept it
    assert locked.returncode == 2 and "sandbox.write_dirs[1]" in locked.stderr
    assert "Landlock cannot deny a path under a granted directory" in locked.stderr
    done = run_cli("run", "--", "/bin/sh", "-c", f"touch {marker}", cwd=root)
    assert done.returncode != 0
    assert not marker.exists()


def test_disabled_sandbox_and_foreign_harness_are_refused(tmp_path: Path) -> None:
    root = make_project(tmp_path / "demo", MANIFEST + "\n")
    foreign = run_cli("run", "--harness", "gemini-cli", "--", "/bin/true", cwd=root,
                      env=_explicit(root))
    assert foreign.returncode == 1 and "does not target gemini-cli" in foreign.stderr
    (root / "agentstack.toml").write_text(MANIFEST.replace("[sandbox]\n", "[sandbox]\nenabled = false\n"))
    off = run_cli("run", "--", "/bin/true", cwd=root, env=_explicit(root))
    assert off.returncode == 1 and "never launches anything unconfined" in off.stderr


def test_leftover_descendants_are_killed(shared: tuple[Path, dict[str, str]],
                                         var_home: Path) -> None:
    project, env = shared
    done = run_cli("run", "--", "/bin/sh", "-c",
                   "setsid sleep 300 > /dev/null 2>&1 & echo $! > pid.txt", cwd=project, env=env)
    assert done.returncode == 0, done.stderr
    pid = int((project / "pid.txt").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_changes_to_git_hooks_are_rolled_back(project: Path, var_home: Path) -> None:
    """The workdir is writable, .git included; Landlock cannot carve .git/hooks out of it, so
    `run` rolls back a change to what git would execute outside the sandbox, and says so."""
    (project / ".git" / "hooks").mkdir(parents=True)
    (project / ".git" / "config").write_text("[core]\n")
    env = _explicit(project, {"HOME": str(var_home)})
    quiet = run_cli("run", "--", "/bin/true", cwd=project, env=env)
    assert quiet.returncode == 0 and "WARNING" not in quiet.stderr
    done = run_cli("run", "--", "/bin/sh", "-c",
                   "echo 'fsmonitor = ./evil' >> .git/config; touch .git/hooks/pre-commit",
                   cwd=project, env=env)
    assert done.returncode == 0
    assert ".git/config (restored)" in done.stderr
    assert ".git/hooks/pre-commit (removed)" in done.stderr
    assert "rolled back" in done.stderr and "WARNING" not in done.stderr
    assert (project / ".git" / "config").read_text() == "[core]\n"
    assert not (project / ".git" / "hooks" / "pre-commit").exists()


class _Upstream(http.server.ThreadingHTTPServer):
    seen: list[dict[str, str]]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Upstream

    def do_GET(self) -> None:
        self.server.seen.append({k.lower(): v for k, v in self.headers.items()})
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        return


@contextlib.contextmanager
def _upstream() -> Iterator[_Upstream]:
    server = _Upstream(("127.0.0.1", 0), _Handler)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_credential_proxy_end_to_end(tmp_path: Path, var_home: Path) -> None:
    env = {"HOME": str(var_home)}
    real = "sk-ant-real-0123456789"
    with _upstream() as upstream:
        port = upstream.server_address[1]
        manifest = MANIFEST + (
            "\n[sandbox.credentials.anthropic]\n"
            f'upstream = "http://127.0.0.1:{port}"\n'
            'secret = "anthropic"\nheader = "x-api-key"\n'
            'env = "ANTHROPIC_API_KEY"\nbase_url_env = "ANTHROPIC_BASE_URL"\n'
        )
        root = make_project(tmp_path / "demo", manifest)
        shutil.copyfile(PROBE, root / "probe.py")
        _trusted(root, env)
        missing = run_cli("run", "--", "/bin/true", cwd=root, env=env)
        assert missing.returncode == 1 and "agentstack secret set anthropic" in missing.stderr
        assert run_cli("secret", "set", "anthropic", cwd=root, input=real + "\n").returncode == 0
        done = run_cli("run", "--", PYTHON or "python3", "-I", "probe.py", "direct", "http",
                       "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "x-api-key", cwd=root, env=env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("ALLOWED status 200 body ok")
        assert real not in done.stdout
        child_env = json.loads(done.stdout.split(" env ", 1)[1])
        assert child_env["ANTHROPIC_API_KEY"] and child_env["ANTHROPIC_API_KEY"] != real
        assert child_env["ANTHROPIC_BASE_URL"].endswith("/anthropic")
        assert upstream.seen and upstream.seen[-1]["x-api-key"] == real
        # the upstream itself is not reachable directly: only the proxy's port is open
        direct = run_cli("run", "--", PYTHON or "python3", "-I", "probe.py", "direct", "connect",
                         "127.0.0.1", str(port), cwd=root, env=env)
        assert direct.returncode == 1 and "EACCES" in direct.stdout

        # Inside run, stat() of the store (which Landlock cannot deny) says nothing of a
        # secret's length; a secret an older version stored bare is padded before the sandbox
        # starts, and the upstream still receives exactly the secret.
        from agentstack.secrets import FILE_BYTES

        store = Path(os.environ["AGENTSTACK_HOME"]) / "secrets"
        (store / "anthropic").write_bytes(real.encode())  # as an older agentstack stored it
        assert run_cli("secret", "set", "other", cwd=root, input="x" * 500).returncode == 0
        sizes = run_cli("run", "--", PYTHON or "python3", "-I", "probe.py", "direct", "stat",
                        str(store / "anthropic"), str(store / "other"), cwd=root, env=env)
        assert sizes.returncode == 0, sizes.stdout + sizes.stderr
        seen = set(re.findall(r"size=(\d+),blocks=(\d+)", sizes.stdout))
        assert len(seen) == 1 and {int(s) for s, _ in seen} == {FILE_BYTES}, sizes.stdout
        read = run_cli("run", "--", PYTHON or "python3", "-I", "probe.py", "direct", "read",
                       str(store / "anthropic"), cwd=root, env=env)
        assert read.returncode == 1 and "DENIED EACCES" in read.stdout
        again = run_cli("run", "--", PYTHON or "python3", "-I", "probe.py", "direct", "http",
                        "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "x-api-key", cwd=root, env=env)
        assert again.returncode == 0 and upstream.seen[-1]["x-api-key"] == real


@pytest.mark.slow
def test_doctor_verify(tmp_path: Path) -> None:
    done = run_cli("doctor", "--verify", "--json", cwd=tmp_path)
    report = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr + json.dumps(report["verify"], indent=1)
    names = {c["name"] for c in report["checks"]}
    assert {"kernel", "landlock", "nono", "seccomp", "containment", "project"} <= names
    assert any(n.startswith("harness ") for n in names)
    assert report["verify"]["failed"] == 0
    assert report["verify"]["passed"] >= len(CASES) - 3


# ------------------------------------------------------------------ measured holes (docs/sandbox.md)


def _run_probe(scene: verify.Scenario, op: str, *args: str,
               policy: object | None = None) -> verify.RowResult:
    from dataclasses import replace

    row = verify.Row(f"hole-{op}", "measured hole", op, args, expect="allow", modes=("direct",))
    sc = scene if policy is None else replace(scene, policy=policy)
    return verify.run_row(sc, row, "direct")


def test_landlock_alone_would_reach_a_pathname_unix_socket(scene: verify.Scenario) -> None:
    """Why seccomp refuses socket(AF_UNIX): Landlock (ABI <= 7) does not mediate connect() on a
    pathname unix socket, so with Landlock alone a socket outside every grant (a D-Bus session
    bus, docker.sock, a database's socket) is reachable by path. With the whole sandbox the row
    `unix-path` gets EPERM. If the first half starts failing, the kernel closed the hole itself:
    update docs/sandbox.md."""
    path = scene.values["unix_path"]
    assert not scene.policy.decide_path(path, "read").allowed
    landlock_only = _run_probe(scene, "unix", path, policy=scene.policy._replace(seccomp=False))
    assert landlock_only.passed and "connected" in landlock_only.output, landlock_only.output
    whole = verify.run_row(scene, next(r for r in verify.ROWS if r.name == "unix-path"), "direct")
    assert whole.passed and "EPERM" in whole.output, whole.output


def test_measured_hole_allowed_ports_are_open_on_every_address(scene: verify.Scenario) -> None:
    """Landlock filters TCP connect() by port only: a port granted for localhost (the proxy's,
    sandbox.network.localhost_ports) is reachable on any address, and `why --host` says so.
    (Not demonstrated with a connection: tests only ever reach 127.0.0.1.)"""
    allowed, denied = scene.values["allowed_port"], scene.values["denied_port"]
    assert "known hole" in scene.policy.decide_net("192.0.2.1", int(allowed)).reason
    assert not scene.policy.decide_net("192.0.2.1", int(denied)).allowed


def test_readonly_files_for_the_guard(scene: verify.Scenario) -> None:
    from agentstack.sandbox.runner import RUN_RO_ENV, confined

    script = ("import os\n"
              f"d = os.environ[{RUN_RO_ENV!r}]\n"
              "print(open(os.path.join(d, 'snapshot.json')).read())\n"
              "for op in (lambda: open(os.path.join(d, 'snapshot.json'), 'a'),\n"
              "           lambda: open(os.path.join(d, 'new'), 'x')):\n"
              "    try:\n"
              "        op()\n"
              "        print('WRITABLE')\n"
              "    except PermissionError as exc:\n"
              "        print('DENIED', exc.errno)\n")
    with confined(scene.workdir, scene.policy, [PYTHON or "python3", "-I", "-c", script],
                  {"PATH": "/usr/bin:/bin"}, interactive=False, stdin=subprocess.DEVNULL,
                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                  readonly_files={"snapshot.json": b'{"snapshot": 1}'}) as child:
        out, _ = child.process.communicate(timeout=scaled(30))
    lines = out.decode().split("\n")
    assert lines[:3] == ['{"snapshot": 1}', "DENIED 13", "DENIED 13"], out


# ------------------------------------------------------------------ nothing outlives `run`

CHAIN = """\
n=$1
if [ "$n" -gt 0 ]; then sh ./chain.sh $((n - 1)) & fi
echo $$ >> pids.txt
exec sleep 300
"""
# A double-forked, setsid-detached daemon that keeps respawning children, and one that tries to
# join the group of `run` (the shell's group, when `run` is interactive).
DAEMONS = """\
import os, sys, time
def daemon(body):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            body()
        os._exit(0)
    os.wait()
def respawn():
    with open("pids.txt", "a") as out:
        out.write(f"{os.getpid()}\\n")
    while True:
        pid = os.fork()
        if pid == 0:
            with open("pids.txt", "a") as out:
                out.write(f"{os.getpid()}\\n")
            time.sleep(300)
            os._exit(0)
        time.sleep(0.01)
def joiner():
    with open("pids.txt", "a") as out:
        out.write(f"{os.getpid()}\\n")
    try:
        os.setpgid(0, int(sys.argv[1]))
        print("JOINED", flush=True)
    except OSError as exc:
        print("JOIN", exc.errno, flush=True)
    time.sleep(300)
daemon(respawn)
daemon(joiner)
# Until both daemons (and a respawned child) have written their pids: 101 + 3 lines. The bound
# only ends a hang; the test counts the lines itself.
end = time.monotonic() + 300
while time.monotonic() < end:
    with open("pids.txt") as handle:
        if len(handle.read().split()) >= 104:
            break
    time.sleep(0.01)
"""


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(pid)
    return out


@pytest.mark.parametrize("containment", ["cgroup", "process-tree"])
def test_nothing_outlives_run(scene: verify.Scenario, containment: str,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A 100-deep chain, a double-forked setsid daemon that keeps forking and a process that tries
    to join run's process group: none survives once `run_confined` returns, with the cgroup
    (cgroup.kill) and without it (the whole-tree kill loop, no round cap)."""
    from agentstack.sandbox import runner

    if containment == "process-tree":
        monkeypatch.setattr(runner.Cgroup, "create", classmethod(lambda cls: None))
    else:
        probe = runner.Cgroup.create()
        if probe is None:
            pytest.skip("this process cannot create a cgroup v2 here")
        probe.remove()
    work = scene.workdir
    (work / "chain.sh").write_text(CHAIN)
    (work / "daemons.py").write_text(DAEMONS)
    pids_file = work / "pids.txt"
    pids_file.unlink(missing_ok=True)
    script = ("sh ./chain.sh 100 & "
              "while [ \"$(wc -l < pids.txt 2>/dev/null || echo 0)\" -lt 101 ]; do sleep 0.05; done; "
              f"{PYTHON or 'python3'} -I daemons.py {os.getpgid(0)}; exit 0")
    log = scene.base / "outside" / "run.log"
    with log.open("wb") as out, runner.confined(
        work, scene.policy, ["/bin/sh", "-c", script], {"PATH": "/usr/bin:/bin"},
        interactive=False, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
    ) as child:  # a file, not a pipe: the survivors would hold a pipe open
        assert child.process.wait(timeout=scaled(60)) == 0, log.read_text()
        pids = [int(p) for p in pids_file.read_text().split()]
        assert len(pids) >= 104, len(pids)  # 101 in the chain, 2 daemons, >= 1 respawned child
        assert len(_alive(pids)) >= 100  # the command exited; its tree is still running
        if containment == "cgroup":
            assert child.cgroup is not None and set(_alive(pids)) <= child.cgroup.pids()
        else:
            assert child.cgroup is None
    assert _alive(pids) == [], "processes of the run survived it"
    output = log.read_text()
    assert "JOINED" not in output and "JOIN 1" in output, output  # EPERM: another session
    pids_file.unlink()


THIEF = """\
import os, sys, time
def daemon(body):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            body()
        os._exit(0)
    os.wait()
def thief():
    with open("pids.txt", "a") as out:
        out.write(f"{os.getpid()}\\n")
    try:
        os.setpgid(0, int(sys.argv[1]))  # the shell's process group
    except OSError:
        pass
    for path in ("/dev/tty", os.ttyname(0)):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        open("tried.txt", "w").close()
        with open("stolen.txt", "ab") as out:
            while True:
                try:
                    data = os.read(fd, 100)
                except OSError:
                    break
                out.write(data)
                out.flush()
    open("tried.txt", "w").close()
    time.sleep(300)
daemon(thief)
# Until the thief has opened a terminal (or found none it can open); the bound only ends a hang.
end = time.monotonic() + 300
while not os.path.exists("tried.txt") and time.monotonic() < end:
    time.sleep(0.01)
print("SESSION", os.isatty(0), os.ttyname(0) != sys.argv[2], flush=True)
"""


def test_interactive_run_owns_the_terminal_and_leaves_nothing(
    shared: tuple[Path, dict[str, str]], var_home: Path
) -> None:
    """On a real terminal: the confined session gets a pseudo-terminal that `run` owns and relays,
    not the user's; a detached descendant that tries to join the shell's group and read the
    terminal is gone when `run` returns, and the next line typed reaches the shell."""
    project, env = shared
    (project / "thief.py").write_text(THIEF)
    for name in ("pids.txt", "stolen.txt", "tried.txt"):
        (project / name).unlink(missing_ok=True)
    shell = (f'"{sys.executable}" -m agentstack run -- "{PYTHON or "python3"}" -I thief.py '
             '$$ "$(tty)"; echo "RUN-DONE $?"; read line; echo "GOT:$line"')
    pid, fd = pty_spawn(["/bin/sh", "-c", shell], env={**env, "PYTHONPATH": str(REPO)},
                        cwd=project)
    output = b""
    sent = False
    deadline = time.monotonic() + scaled(90)
    while time.monotonic() < deadline and b"GOT:" not in output:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        if not sent and b"RUN-DONE" in output:
            os.write(fd, b"hello\n")
            sent = True
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    text = output.decode("utf-8", "replace")
    assert "SESSION True True" in text, text  # a terminal, and not the user's
    assert "RUN-DONE 0" in text, text
    assert "GOT:hello" in text, text
    pids = [int(p) for p in (project / "pids.txt").read_text().split()]
    assert pids and _alive(pids) == []
    stolen = project / "stolen.txt"
    assert not stolen.exists() or b"hello" not in stolen.read_bytes()
    assert os.waitstatus_to_exitcode(status) == 0


def test_nono_alone_would_tunnel_and_the_gate_refuses(scene: verify.Scenario) -> None:
    """Control for the proxy rows: nono's own port tunnels to a non-allowed localhost port (the
    measured hole); the port the confined process gets is agentstack's gate, which refuses it,
    and nono's port is not among the ports Landlock opens."""
    import base64
    import socket

    from agentstack.sandbox.runner import confined

    target = f"127.0.0.1:{scene.values['denied_port']}"
    with confined(scene.workdir, scene.policy, ["/bin/sleep", "30"], {"PATH": "/usr/bin:/bin"},
                  interactive=False, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                  stderr=subprocess.DEVNULL) as child:
        proxy = child.proxy
        assert proxy is not None
        assert proxy.port != proxy.nono_port
        assert proxy.port in child.policy.tcp_ports
        assert proxy.nono_port not in child.policy.tcp_ports
        token = base64.b64encode(f"nono:{proxy.token}".encode()).decode()
        request = (f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
                   f"Proxy-Authorization: Basic {token}\r\n\r\n").encode()
        replies = {}
        for name, port in (("nono", proxy.nono_port), ("gate", proxy.port)):
            with socket.create_connection(("127.0.0.1", port), timeout=scaled(10)) as sock:
                sock.sendall(request)
                replies[name] = sock.recv(4096).split(b"\r\n", 1)[0]
        child.process.kill()
        refused = [e for e in proxy.audit() if e.get("source") == "agentstack-gate"]
    assert b" 200 " in replies["nono"], replies
    assert b" 403 " in replies["gate"], replies
    assert refused and refused[-1]["target"] == target


# ------------------------------------------------------------------ what runs after `run`

SHA = "0123456789abcdef0123456789abcdef01234567"
# What git executes is rolled back (level "rolled back"); the rest is reported.
PLANTS = [
    ("printf '[core]\\n\\tfsmonitor = ./evil\\n' >> .git/config", "rolled back",
     ".git/config (restored)"),
    ("echo ../../elsewhere > .git/commondir", "rolled back", ".git/commondir (removed)"),
    ("mkdir -p vendor/lib/.git && printf '[core]\\n' > vendor/lib/.git/config", "rolled back",
     "vendor/lib/.git/config (removed)"),
    ("mkdir -p wt && echo 'gitdir: ../.git/worktrees/x' > wt/.git", "rolled back",
     "wt/.git (removed)"),
    ("mkdir -p .git/modules/m/hooks && echo x > .git/modules/m/hooks/post-checkout",
     "rolled back", ".git/modules/m/hooks (removed)"),
    ("mkdir -p .git/worktrees/w && echo /x > .git/worktrees/w/commondir", "rolled back",
     ".git/worktrees/w/commondir (removed)"),
    (f"git update-index --add --cacheinfo 160000,{SHA},sub", "rolled back",
     ".git/index (removed)"),
    ("printf '[submodule \"s\"]\\n\\tpath = s\\n' > .gitmodules", "WARNING", ".gitmodules (added)"),
    ("rm -rf .git/hooks && ln -s /nonexistent .git/hooks", "rolled back", ".git/hooks (removed)"),
    ("echo 'export X=1' > .envrc", "WARNING", ".envrc (added)"),
    ("mkdir -p .vscode && echo '{}' > .vscode/tasks.json", "WARNING", ".vscode/tasks.json (added)"),
    ("mkdir -p .claude && echo '{}' > .claude/settings.json", "WARNING",
     ".claude/settings.json (added)"),
    ("git add probe.py", "note", ".git/index (added)"),
]


def test_everything_git_or_an_editor_runs_later_is_reported(tmp_path: Path,
                                                              var_home: Path) -> None:
    """Each way the confined process can make git (or direnv, an editor, the harness) run code
    later, outside the sandbox, is reported after the session. Measured before: commondir,
    gitlinks, nested and worktree git directories and on-open files went unreported."""
    from tests.conftest import git

    root = make_project(tmp_path / "demo", MANIFEST)
    shutil.copyfile(PROBE, root / "probe.py")
    git("init", "-q", cwd=root)  # the test's own repository
    env = _explicit(root, {"HOME": str(var_home)})
    pristine = tmp_path / "pristine"
    shutil.copytree(root, pristine, symlinks=True)
    for command, level, expected in PLANTS:
        done = run_cli("run", "--", "/bin/sh", "-c", command, cwd=root, env=env)
        assert done.returncode == 0, (command, done.stderr)
        assert expected in done.stderr, (command, done.stderr)
        assert f"agentstack: {level}" in done.stderr, (command, done.stderr)
        if level == "note":
            assert "WARNING" not in done.stderr, (command, done.stderr)
        if level == "rolled back":  # git's execution state is as it was before the session
            after = {p: e for p, e in _watch.snapshot(root).items() if e.category == "git-exec"
                     and e.kind != "dir"}
            before = {p: e for p, e in _watch.snapshot(pristine).items()
                      if e.category == "git-exec" and e.kind != "dir"}
            assert after == before, (command, done.stderr)
        shutil.rmtree(root)
        shutil.copytree(pristine, root, symlinks=True)


def test_checks_run_once_the_tree_is_gone(shared: tuple[Path, dict[str, str]]) -> None:
    """A detached descendant that would write .git/config after the command exits is killed
    before `run` takes its second look (it used to write after the check, unreported)."""
    project, env = shared
    (project / ".git").mkdir(exist_ok=True)
    config = project / ".git" / "config"
    config.write_text("[core]\n")
    late = "(setsid sh -c 'sleep 1; echo late >> .git/config' > /dev/null 2>&1 &); exit 0"
    done = run_cli("run", "--", "/bin/sh", "-c", late, cwd=project, env=env)
    assert done.returncode == 0, done.stderr
    time.sleep(scaled(2))  # the late writer (sleep 1) would have written by now
    assert config.read_text() == "[core]\n"
    assert "WARNING" not in done.stderr
    shutil.rmtree(project / ".git")


def test_run_seeds_the_private_state_with_the_rendered_guard(tmp_path: Path,
                                                             var_home: Path) -> None:
    """`run --harness codex` points the harness at its private state, which holds the user-level
    guard and project trust `apply` renders, and nothing of the user's own hooks or servers."""
    import tomllib

    root = make_project(tmp_path / "demo", MANIFEST)
    (var_home / ".codex").mkdir(exist_ok=True)
    real = var_home / ".codex" / "config.toml"
    real.write_text('model = "gpt-5"\nnotify = ["touch", "/x"]\n[mcp_servers.mine]\ncommand = "x"\n')
    env = _explicit(root, {"HOME": str(var_home)})
    done = run_cli("run", "--harness", "codex", "--", "/bin/sh", "-c",
                   'echo "$CODEX_HOME"; cat "$CODEX_HOME/config.toml"; echo "$CLAUDE_CONFIG_DIR"; '
                   'echo "$XDG_CONFIG_HOME"', cwd=root, env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    state = Path(os.environ["AGENTSTACK_HOME"]).resolve() / "projects"
    codex_home = Path(lines[0])
    assert codex_home.parent.parent.parent == state and codex_home.name == "codex"
    assert lines[-2] == str(codex_home.parent / "claude")
    assert lines[-1] == str(codex_home.parent / "xdg" / "config")
    config = tomllib.loads("\n".join(lines[1:-2]))
    assert config["model"] == "gpt-5"
    assert "notify" not in config and "mcp_servers" not in config
    assert config["projects"][str(root.resolve())]["trust_level"] == "trusted"
    guard = json.dumps(config["hooks"]["PreToolUse"])
    assert "guard" in guard and "--harness" in guard
    assert real.read_text().startswith('model = "gpt-5"\nnotify')  # the real file: untouched

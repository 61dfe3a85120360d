"""The confinement suite: every claim of confinement proved by a real process and the kernel.

Shared by `tests/sandbox/test_confinement.py` and `agentstack doctor --verify`. A scenario builds, outside
/tmp (under /var/tmp), a fake home with decoys that EXIST (an SSH key, AWS credentials, an
$AGENTSTACK_HOME with a trust log and a stored secret), a workdir, an ungranted sibling, real TCP
and UDP listeners on 127.0.0.1, a mock upstream HTTP server and an unconfined decoy process. Each
row runs the probe (`probe.py`, under the system Python) confined by `run_confined`'s machinery,
directly, from a grandchild, and from a setsid-detached descendant.

A denial row passes only when the probe exits non-zero AND prints the kernel's EACCES or EPERM
message (`DENIED EACCES Permission denied` / `DENIED EPERM Operation not permitted`): never on
empty output, never on ENOENT, never on a probe error.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentstack import layout
from agentstack.sandbox import watch as _watch
from agentstack.sandbox.policy import SandboxPolicy

MODES = ("direct", "grandchild", "detached")
DENIED_LINE = re.compile(r"^DENIED (EACCES Permission denied|EPERM Operation not permitted)$",
                         re.MULTILINE)
# A signal to a process outside a PID namespace of the sandbox's own (Landlock ABI 4-5: no
# signal scoping): the kernel finds no such process in the sandbox's namespace.
NO_SUCH_PROCESS_LINE = re.compile(r"^DENIED ESRCH No such process$", re.MULTILINE)
# The rows that name a process outside by its pid (or process group).
OUTSIDE_PROCESS_ROWS = frozenset({"kill", "join-group"})
# The credential proxy's refusal (an HTTP status from agentstack's gate, or a smuggled request
# dropped); such a row also needs the listener behind the denied port to have accepted nothing.
PROXY_DENIED_LINE = re.compile(r"^DENIED PROXY (403|407|404|dropped)$", re.MULTILINE)
PROBE_NAME = ".agentstack-probe.py"
SECRET_NAME = "VERIFY_KEY"  # noqa: S105 - the name of a decoy secret, not a secret
SHORT_SECRET_NAME = "VERIFY_SHORT"  # noqa: S105 - a second one, one character long
PHANTOM_ENV = "MOCK_API_KEY"
BASE_URL_ENV = "MOCK_BASE_URL"
ROW_TIMEOUT = 30.0  # on an idle machine; scaled to the load (agentstack.patience)
# Decoys live outside /tmp: nono's system_write group (and many sandboxes) grant /tmp.
DECOY_ROOT = "/var/tmp"  # noqa: S108 - a fresh mkdtemp directory is made under it


@dataclass(frozen=True)
class Row:
    name: str
    what: str
    op: str
    args: tuple[str, ...] = ()
    expect: Literal["deny", "allow", "gone", "reported"] = "deny"
    modes: tuple[str, ...] = MODES
    harness: str | None = None  # run under that harness's profile (private state, install dir)
    no_ports: bool = False  # under a policy without sandbox.network.localhost_ports


ROWS: tuple[Row, ...] = (
    Row("ssh-key", "read a ~/.ssh/id_ed25519 decoy", "read", ("{home}/.ssh/id_ed25519",)),
    Row("aws-credentials", "read a ~/.aws/credentials decoy", "read",
        ("{home}/.aws/credentials",)),
    Row("write-outside", "create a file outside the workdir", "create", ("{outside}",)),
    Row("sibling", "read an ungranted sibling of the workdir", "read", ("{sibling}/notes.txt",)),
    Row("trust-log", "append to $AGENTSTACK_HOME/trust.jsonl", "append",
        ("{agentstack_home}/" + layout.TRUST_LOG,)),
    Row("secret-store", "read a file of the secret store", "read",
        ("{agentstack_home}/secrets/" + SECRET_NAME,)),
    # Landlock cannot deny stat(): the store pads every secret to one size instead.
    Row("secret-size", "stat() stored secrets of different lengths: one size, one block count",
        "stat", ("{agentstack_home}/secrets/" + SECRET_NAME,
                 "{agentstack_home}/secrets/" + SHORT_SECRET_NAME), expect="allow"),
    Row("etc-shadow", "read /etc/shadow", "read", ("/etc/shadow",)),
    Row("raw-disk", "read the block device under /", "read", ("{disk}",)),
    Row("proc-sys-write", "write /proc/sys/kernel/hostname", "append",
        ("/proc/sys/kernel/hostname",)),
    Row("tcp-port", "connect to a non-allowed TCP port on 127.0.0.1 (a real listener)",
        "connect", ("127.0.0.1", "{denied_port}")),
    # TCP without connect(): the Fast Open path skips the LSM connect hook Landlock filters;
    # seccomp refuses MSG_FASTOPEN and TCP_FASTOPEN_CONNECT (listener on the denied port).
    Row("tfo-sendto", "TCP Fast Open sendto(MSG_FASTOPEN) to a non-allowed port", "fastopen",
        ("127.0.0.1", "{denied_port}", "sendto")),
    Row("tfo-sendmsg", "TCP Fast Open sendmsg(MSG_FASTOPEN) to a non-allowed port", "fastopen",
        ("127.0.0.1", "{denied_port}", "sendmsg")),
    Row("tfo-sendmmsg", "TCP Fast Open sendmmsg(MSG_FASTOPEN) to a non-allowed port", "fastopen",
        ("127.0.0.1", "{denied_port}", "sendmmsg")),
    Row("tfo-sendto-v6", "TCP Fast Open over IPv6 to ::ffff:127.0.0.1 (v4-mapped)", "fastopen",
        ("::ffff:127.0.0.1", "{denied_port}", "sendto")),
    Row("tfo-sendmsg-v6", "TCP Fast Open sendmsg over IPv6 (v4-mapped)", "fastopen",
        ("::ffff:127.0.0.1", "{denied_port}", "sendmsg")),
    Row("tfo-sendmmsg-v6", "TCP Fast Open sendmmsg over IPv6 (v4-mapped)", "fastopen",
        ("::ffff:127.0.0.1", "{denied_port}", "sendmmsg")),
    Row("tfo-connect-opt", "setsockopt(TCP_FASTOPEN_CONNECT) then connect and write", "fastopen",
        ("127.0.0.1", "{denied_port}", "connect-option")),
    Row("mptcp", "connect over MPTCP (not TCP to Landlock) to a non-allowed port",
        "stream_proto", ("mptcp", "127.0.0.1", "{denied_port}")),
    Row("sctp", "connect over SCTP (not TCP to Landlock) to a non-allowed port",
        "stream_proto", ("sctp", "127.0.0.1", "{denied_port}")),
    # Through the proxy: a denied port stays denied (nono alone tunnelled to any port of a
    # route's host; agentstack's gate refuses). Refused by the gate, proved by the listener.
    Row("proxy-tunnel", "CONNECT through the proxy (with its token) to a non-allowed port",
        "proxy", ("connect", "127.0.0.1:{denied_port}")),
    Row("proxy-route-host", "CONNECT through the proxy to the credential route's own upstream",
        "proxy", ("connect", "127.0.0.1:{upstream_port}")),
    Row("proxy-no-token", "CONNECT through the proxy without its token", "proxy",
        ("connect-no-token", "127.0.0.1:{denied_port}")),
    Row("proxy-absolute", "GET http://127.0.0.1:<denied port>/ through the proxy", "proxy",
        ("absolute", "127.0.0.1:{denied_port}")),
    Row("proxy-smuggle", "a CONNECT hidden after a route request in one connection", "proxy",
        ("smuggle", "127.0.0.1:{denied_port}")),
    Row("abstract-unix", "connect to an abstract unix socket outside (a real listener)",
        "unix", ("{abstract}",)),
    Row("unix-path", "connect to a pathname unix socket outside every grant (a real listener; "
        "Landlock does not mediate it, seccomp refuses socket(AF_UNIX))", "unix",
        ("{unix_path}",)),
    Row("udp", "send UDP to 127.0.0.1 (a real listener)", "udp", ("127.0.0.1", "{udp_port}")),
    Row("listen-unbound", "listen() on a TCP socket never bound (the kernel would pick a port on "
        "every address) under a policy with no localhost_ports", "listen", no_ports=True),
    Row("raw-socket", "open a raw ICMP socket", "socket", ("raw",)),
    Row("packet-socket", "open an AF_PACKET socket", "socket", ("packet",)),
    Row("netlink-audit", "open a NETLINK_AUDIT socket", "socket", ("netlink-audit",)),
    Row("join-group", "join the process group of a process outside (run's, the shell's)",
        "join_group", ("{parent}",)),
    Row("other-terminal", "open a terminal outside the session (a pseudo-terminal's slave)",
        "terminal", ("{terminal}",)),
    Row("ptrace", "ptrace a process outside", "ptrace", ("{decoy}",)),
    Row("kill", "kill a process outside", "kill", ("{decoy}",)),
    Row("vm-read", "process_vm_readv the parent", "vm_read", ("{parent}",)),
    Row("proc-environ", "read the parent's /proc/PID/environ", "environ", ("{parent}",)),
    Row("mount", "mount a tmpfs", "mount", ("{workdir}/mnt",)),
    Row("bpf", "create a BPF map", "bpf"),
    Row("io-uring", "io_uring_setup", "io_uring"),
    Row("unshare-user", "unshare(CLONE_NEWUSER)", "unshare_user"),
    Row("clone-user", "clone(CLONE_NEWUSER)", "clone_user"),
    Row("setns", "setns into a namespace", "setns"),
    Row("memfd", "memfd_create", "memfd"),
    Row("execveat", "execveat(AT_EMPTY_PATH) of a file descriptor", "execveat"),
    Row("keyctl", "keyctl on the session keyring", "keyctl"),
    Row("userfaultfd", "userfaultfd", "userfaultfd"),
    Row("perf", "perf_event_open", "perf"),
    Row("tiocsti", "TIOCSTI: push keystrokes into a terminal", "tiocsti"),
    # The harness's real user-level state and the credential files (issue: a confined harness
    # cannot change what runs after it), under the harness's own profile.
    Row("claude-settings", "write ~/.claude/settings.json (a user-level hook runs later)",
        "append", ("{home}/.claude/settings.json",), harness="claude-code"),
    Row("claude-json", "write ~/.claude.json", "append", ("{home}/.claude.json",),
        harness="claude-code"),
    Row("claude-credentials", "read ~/.claude/.credentials.json", "read",
        ("{home}/.claude/.credentials.json",), harness="claude-code"),
    Row("codex-config", "write ~/.codex/config.toml (the user-level guard lives there)",
        "append", ("{home}/.codex/config.toml",), harness="codex"),
    Row("codex-hooks", "write ~/.codex/hooks.json", "append", ("{home}/.codex/hooks.json",),
        harness="codex"),
    Row("codex-auth", "read ~/.codex/auth.json", "read", ("{home}/.codex/auth.json",),
        harness="codex"),
    Row("gh-hosts", "read ~/.config/gh/hosts.yml", "read", ("{home}/.config/gh/hosts.yml",),
        harness="claude-code"),
    Row("private-state", "the harness's private state is writable", "create",
        ("{claude_state}",), expect="allow", modes=("direct",), harness="claude-code"),
    Row("outlive", "nothing outlives run: a 100-deep chain and a forking setsid() daemon",
        "outlive", ("{workdir}/.outlive-pids",), expect="gone", modes=("direct",)),
    # Landlock cannot keep these read-only inside a writable workdir: run watches them instead,
    # and the row passes only when the watch reports every one once the tree is gone.
    Row("git-watch", "plant what git or an editor runs later (.git/config, commondir, hooks, "
        "info/attributes, a nested repository, a worktree's .git file, .gitmodules, .envrc, "
        ".vscode/tasks.json, .claude/settings.json): run reports each", "git_plant",
        ("{workdir}",), expect="reported"),
    Row("workdir", "the workdir and TMPDIR are readable and writable", "workdir",
        expect="allow", modes=("direct",)),
    Row("allowed-port", "connect to the allowed localhost port", "connect",
        ("127.0.0.1", "{allowed_port}"), expect="allow", modes=("direct",)),
    Row("proxy", "the proxy injects the real key upstream; the process holds only a phantom",
        "http", ("{base_url_env}", "{phantom_env}", "Authorization"), expect="allow",
        modes=("direct",)),
)


# Decoys of the harnesses' real user-level state and of credential files (they exist: a denial
# must be the kernel's, never ENOENT).
HARNESS_DECOYS = {
    ".claude/settings.json": '{"decoy": "real user-level settings"}\n',
    ".claude/.credentials.json": '{"claudeAiOauth": "DECOY-TOKEN"}\n',
    ".claude.json": '{"decoy": true}\n',
    ".codex/config.toml": "# decoy: the real Codex config (user-level guard)\n",
    ".codex/hooks.json": '{"decoy": true}\n',
    ".codex/auth.json": '{"OPENAI_API_KEY": "DECOY"}\n',
    ".config/gh/hosts.yml": "github.com:\n  oauth_token: DECOY\n",
}


@dataclass
class RowResult:
    row: str
    mode: str
    what: str
    passed: bool
    exit_code: int | None
    output: str
    detail: str = ""
    skipped: bool = False
    # At an emulated older Landlock ABI: the row needs a feature it lacks, and `run` refuses such
    # a policy there (never counted as passed).
    refused: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "row": self.row, "mode": self.mode, "what": self.what, "passed": self.passed,
            "skipped": self.skipped, "refused": self.refused, "exit_code": self.exit_code,
            "output": self.output, "detail": self.detail,
        }


class _Upstream(http.server.ThreadingHTTPServer):
    received: list[dict[str, str]]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Upstream

    def do_GET(self) -> None:
        self.server.received.append({k.lower(): v for k, v in self.headers.items()})
        body = b"upstream-ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def _listener(kind: int = socket.SOCK_STREAM, *, family: int = socket.AF_INET,
              address: str | tuple[str, int] = ("127.0.0.1", 0),
              accepted: list[str] | None = None) -> socket.socket:
    """A real listener (so ECONNREFUSED cannot pass for a denial); `accepted` collects one entry
    per connection it accepted, so a denial row can also show nothing arrived."""
    sock = socket.socket(family, kind)
    sock.bind(address)
    if kind == socket.SOCK_STREAM:
        sock.listen(64)

        def accept() -> None:
            while True:
                try:
                    conn, peer = sock.accept()
                except OSError:
                    return
                if accepted is not None:
                    accepted.append(str(peer))
                conn.close()

        threading.Thread(target=accept, daemon=True).start()
    return sock


def _root_block_device() -> str | None:
    try:
        dev = os.stat("/").st_dev
        uevent = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/uevent").read_text()
    except OSError:
        return None
    for line in uevent.splitlines():
        if line.startswith("DEVNAME="):
            path = "/dev/" + line.split("=", 1)[1]
            return path if os.path.exists(path) else None
    return None


def system_python() -> str | None:
    """A Python under a system grant (/usr/bin/python3): the venv's may live under $HOME."""
    for candidate in ("/usr/bin/python3", "/bin/python3", "/usr/local/bin/python3"):
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


@dataclass
class Scenario:
    base: Path
    home: Path
    agentstack_home: Path
    workdir: Path
    policy: SandboxPolicy
    values: dict[str, str]
    harness_policies: dict[str, SandboxPolicy]
    real_secret: str
    upstream: _Upstream
    decoy: subprocess.Popen[bytes]
    python: str
    sockets: list[socket.socket] = field(default_factory=list)
    denied_accepts: list[str] = field(default_factory=list)

    def policy_for(self, row: Row) -> SandboxPolicy:
        policy = self.policy if row.harness is None else self.harness_policies[row.harness]
        return policy._replace(localhost_ports=()) if row.no_ports else policy

    def argv(self, row: Row, mode: str) -> list[str]:
        args = [a.format(**self.values) for a in row.args]
        return [self.python, "-I", str(self.workdir / PROBE_NAME), mode, row.op, *args]


@contextlib.contextmanager
def scenario(root_dir: str = DECOY_ROOT) -> Iterator[Scenario]:
    """Decoys, listeners, a mock upstream and the policy, all torn down afterwards."""
    from agentstack.manifest.model import Sandbox
    from agentstack.sandbox.resolve import resolve_policy
    from agentstack.secrets import SecretStore

    python = system_python()
    if python is None:
        raise RuntimeError("the confinement suite needs a system python3 (/usr/bin/python3)")
    base = Path(tempfile.mkdtemp(dir=root_dir, prefix="agentstack-verify-")).resolve()
    sockets: list[socket.socket] = []
    upstream: _Upstream | None = None
    decoy: subprocess.Popen[bytes] | None = None
    terminals: tuple[int, ...] = ()
    try:
        home, workdir = base / "home", base / "work"
        state = home / ".config" / "agentstack"
        for directory in (home / ".ssh", home / ".aws", state, workdir / "mnt",
                          base / "sibling", base / "outside"):
            directory.mkdir(parents=True, exist_ok=True)
        (home / ".ssh" / "id_ed25519").write_text("DECOY-SSH-PRIVATE-KEY\n")
        for relative, text in HARNESS_DECOYS.items():
            (home / relative).parent.mkdir(parents=True, exist_ok=True)
            (home / relative).write_text(text)
        (home / ".aws" / "credentials").write_text("[default]\naws_secret_access_key=DECOY\n")
        (state / layout.TRUST_LOG).write_text('{"decoy": true}\n')
        (base / "sibling" / "notes.txt").write_text("DECOY-SIBLING\n")
        real_secret = "real-" + secrets.token_hex(16)
        SecretStore(state).set(SECRET_NAME, real_secret)
        SecretStore(state).set(SHORT_SECRET_NAME, "x")
        shutil.copyfile(Path(__file__).with_name("probe.py"), workdir / PROBE_NAME)
        _git_dir(workdir)

        denied_accepts: list[str] = []
        allowed, denied = _listener(), _listener(accepted=denied_accepts)
        udp = _listener(socket.SOCK_DGRAM)
        abstract = f"@agentstack-verify-{os.getpid()}-{secrets.token_hex(4)}"
        unix = _listener(socket.SOCK_STREAM, family=socket.AF_UNIX, address="\0" + abstract[1:])
        unix_path = base / "outside" / "agent.sock"
        by_path = _listener(socket.SOCK_STREAM, family=socket.AF_UNIX, address=str(unix_path))
        sockets.extend([allowed, denied, udp, unix, by_path])
        upstream = _Upstream(("127.0.0.1", 0), _Handler)
        upstream.received = []
        threading.Thread(target=upstream.serve_forever, daemon=True).start()
        decoy = subprocess.Popen(["sleep", "600"], start_new_session=True)
        terminal_master, terminal_slave = os.openpty()
        terminals = (terminal_master, terminal_slave)

        sandbox = Sandbox.model_validate(
            {
                "network": {"localhost_ports": [allowed.getsockname()[1]]},
                "credentials": {
                    "mock": {
                        "upstream": f"http://127.0.0.1:{upstream.server_address[1]}",
                        "secret": SECRET_NAME,
                        "env": PHANTOM_ENV,
                        "base_url_env": BASE_URL_ENV,
                    }
                },
            }
        )
        policy = resolve_policy(sandbox, workdir, home=home, agentstack_home=state)
        harness_policies = {
            name: resolve_policy(sandbox, workdir, home=home, agentstack_home=state,
                                 harness=name)
            for name in ("claude-code", "codex")
        }
        for harness_policy in harness_policies.values():
            from agentstack.sandbox.private_state import Layout, seed

            assert harness_policy.harness_state is not None
            seed(Layout(harness_policy.harness_state), workdir=str(workdir), home=str(home))
        values = {
            "home": str(home), "agentstack_home": str(state), "workdir": str(workdir),
            "sibling": str(base / "sibling"), "outside": str(base / "outside"),
            "allowed_port": str(allowed.getsockname()[1]),
            "denied_port": str(denied.getsockname()[1]), "udp_port": str(udp.getsockname()[1]),
            "decoy": str(decoy.pid), "parent": str(os.getpid()),
            "disk": _root_block_device() or "", "base_url_env": BASE_URL_ENV,
            "abstract": abstract, "terminal": os.ttyname(terminal_slave),
            "unix_path": str(unix_path),
            "upstream_port": str(upstream.server_address[1]),
            "claude_state": str(harness_policies["claude-code"].harness_state) + "/claude",
            "phantom_env": PHANTOM_ENV,
        }
        for row in ROWS:
            if row.op not in ("read", "append") or not row.args[0].startswith("{home}"):
                continue
            target = row.args[0].format(**values)
            row_policy = policy if row.harness is None else harness_policies[row.harness]
            if not os.path.exists(target) or row_policy.decide_path(target, "read").allowed:
                raise RuntimeError(f"decoy {target} is missing or granted; the suite is invalid")
        yield Scenario(
            base=base, home=home, agentstack_home=state, workdir=workdir, policy=policy,
            values=values, harness_policies=harness_policies, real_secret=real_secret, upstream=upstream, decoy=decoy,
            python=python, sockets=sockets, denied_accepts=denied_accepts,
        )
    finally:
        for fd in terminals:
            os.close(fd)
        if decoy is not None:
            decoy.kill()
            decoy.wait()
        if upstream is not None:
            upstream.shutdown()
            upstream.server_close()
        for sock in sockets:
            sock.close()
        shutil.rmtree(base, ignore_errors=True)


def run_row(sc: Scenario, row: Row, mode: str, landlock_abi: int | None = None) -> RowResult:
    from agentstack.patience import scaled
    from agentstack.sandbox.runner import confined

    policy = sc.policy_for(row)
    pid_namespace = False  # the row's denial is the PID namespace's (ESRCH), not Landlock's
    if landlock_abi is not None:
        from agentstack.sandbox import abi
        from agentstack.sandbox.runner import pid_namespace_available

        # Below ABI 6 every row runs in the PID namespace: a process outside is not there.
        pid_namespace = (row.name in OUTSIDE_PROCESS_ROWS and abi.needs_pid_namespace(
            landlock_abi) and pid_namespace_available())
        needs = abi.ROW_NEEDS.get(row.name)
        if needs is not None and not abi.feature_available(needs, landlock_abi):
            if abi.covered(needs, landlock_abi, pid_namespace=pid_namespace_available()):
                pass
            else:
                feature = next(f for f in abi.FEATURES if f.name == needs)
                return RowResult(row.name, mode, row.what, False, None, "",
                                 f"refused at Landlock ABI {landlock_abi}: {feature.detail}",
                                 skipped=True, refused=True)
        policy = policy._replace(landlock_abi=landlock_abi)
    if row.name == "raw-disk" and not sc.values["disk"]:
        return RowResult(row.name, mode, row.what, True, None, "", "no block device backs /",
                         skipped=True)
    before = len(sc.upstream.received)
    accepts_before = len(sc.denied_accepts)
    watched = _watch.snapshot(sc.workdir) if row.expect == "reported" else {}
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TERM": "dumb"}
    with confined(sc.workdir, policy, sc.argv(row, mode), env, interactive=False,
                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                  stderr=subprocess.STDOUT) as child:
        try:
            out, _ = child.process.communicate(timeout=scaled(ROW_TIMEOUT))
        except subprocess.TimeoutExpired:
            child.process.kill()
            out, _ = child.process.communicate()
            return RowResult(row.name, mode, row.what, False, None,
                             out.decode("utf-8", "replace"), "timed out")
        code = child.process.returncode
    text = out.decode("utf-8", "replace").strip()
    if row.expect == "gone":
        return _check_gone(row, mode, code, text, Path(row.args[0].format(**sc.values)))
    if row.expect == "reported":
        return _check_reported(sc, row, mode, code, text, watched)
    if row.expect == "deny":
        pattern = PROXY_DENIED_LINE if row.op == "proxy" else (
            NO_SUCH_PROCESS_LINE if pid_namespace else DENIED_LINE)
        passed = code != 0 and bool(pattern.search(text)) and "ENOENT" not in text
        detail = "" if passed else (
            "expected the proxy to refuse" if row.op == "proxy"
            else "expected a non-zero exit with ESRCH (outside the PID namespace)"
            if pid_namespace else "expected a non-zero exit with EACCES or EPERM")
        if passed and pid_namespace:
            detail = (f"covered at Landlock ABI {landlock_abi} by a PID namespace: the process "
                      "outside is not visible (ESRCH)")
        if row.name == "kill" and sc.decoy.poll() is not None:
            passed, detail = False, "the decoy process outside was killed"
        if passed and any("{denied_port}" in a for a in row.args):
            arrived = _arrived(sc, accepts_before)
            if arrived is None:
                passed, detail = False, "the listener on the denied port did not answer in time"
            elif arrived:
                passed, detail = False, "the listener on the denied port accepted a connection"
        return RowResult(row.name, mode, row.what, passed, code, text, detail)
    passed = code == 0 and text.startswith("ALLOWED")
    detail = "" if passed else "expected the operation to succeed"
    if passed and row.op == "stat":
        passed, detail = _check_sizes(text)
    if passed and row.name == "proxy":
        passed, detail = _check_proxy(sc, text, sc.upstream.received[before:])
    return RowResult(row.name, mode, row.what, passed, code, _redact(text, sc), detail)


def _arrived(sc: Scenario, before: int) -> list[str] | None:
    """What the listener on the denied port accepted since `before`, known for certain: a
    connection of our own goes in behind whatever the (exited) probe got through, and the accept
    queue is first in, first out, so once ours is accepted everything before it has been too.
    None: ours was not accepted within the (load-scaled) deadline, so nothing can be said."""
    from agentstack.patience import scaled

    with socket.create_connection(("127.0.0.1", int(sc.values["denied_port"])),
                                  timeout=scaled(10)) as sock:
        ours = str(sock.getsockname())
    deadline = time.monotonic() + scaled(10)
    while ours not in sc.denied_accepts[before:]:
        if time.monotonic() > deadline:
            return None
        time.sleep(0.005)
    got = sc.denied_accepts[before:]
    return got[: got.index(ours)]


def _check_reported(sc: Scenario, row: Row, mode: str, code: int | None, text: str,
                     before: dict[str, Any]) -> RowResult:
    """Everything the probe planted is reported by the watch `run` uses (taken once `confined`
    has returned, i.e. once the session's tree is gone); the plants are removed afterwards."""
    from agentstack.sandbox.probe import PLANTS

    changes = _watch.compare(before, _watch.snapshot(sc.workdir))
    lines = _watch.report(changes)
    reported = {c.path for c in changes if c.category in ("git-exec", "on-open", "harness")}
    expected = {".git/config", *PLANTS}
    missing = sorted(expected - reported)
    _unplant(sc.workdir)
    passed = code == 0 and text.startswith("ALLOWED") and not missing and bool(lines)
    detail = "" if passed else (
        f"not reported: {', '.join(missing)}" if missing else "the probe did not plant")
    return RowResult(row.name, mode, row.what, passed, code,
                     f"{text}; reported {len(reported)} paths", detail)


def _git_dir(workdir: Path) -> None:
    """A minimal git directory written by hand (no git is run): what the watch walks."""
    git = workdir / ".git"
    (git / "hooks").mkdir(parents=True, exist_ok=True)
    (git / "info").mkdir(exist_ok=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "config").write_text("[core]\n\trepositoryformatversion = 0\n\tbare = false\n")


def _unplant(workdir: Path) -> None:
    from agentstack.sandbox.probe import PLANTS

    for relative in PLANTS:
        with contextlib.suppress(OSError):
            (workdir / relative).unlink()
    for directory in ("nested", "wt", ".vscode", ".claude"):
        shutil.rmtree(workdir / directory, ignore_errors=True)
    _git_dir(workdir)


def _check_gone(row: Row, mode: str, code: int | None, text: str, pids_file: Path) -> RowResult:
    """The row's processes were running when the command exited; none is alive (or a zombie
    left unreaped) now that `confined` has returned."""
    try:
        pids = [int(p) for p in pids_file.read_text().split()]
        pids_file.unlink()
    except (OSError, ValueError):
        pids = []
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        alive.append(f"{pid}:{state}")
    passed = code == 0 and text.startswith("ALLOWED") and len(pids) >= 100 and not alive
    detail = "" if passed else (
        f"still alive after run: {', '.join(alive[:10])}" if alive
        else "the probe did not leave its processes behind")
    return RowResult(row.name, mode, row.what, passed, code,
                     f"{text}; alive after run: {len(alive)}", detail)


def _check_proxy(sc: Scenario, text: str, received: list[dict[str, str]]) -> tuple[bool, str]:
    if sc.real_secret in text:
        return False, "the real secret reached the confined process"
    if not received:
        return False, "the upstream received no request"
    auth = received[-1].get("authorization", "")
    if auth != f"Bearer {sc.real_secret}":
        return False, "the upstream did not receive the real key"
    match = re.search(r'"' + PHANTOM_ENV + r'": "([^"]+)"', text)
    if not match or match.group(1) == sc.real_secret:
        return False, "the process did not hold a phantom token"
    return True, "upstream got the real key; the process saw only a phantom token"


def _check_sizes(text: str) -> tuple[bool, str]:
    from agentstack.secrets import FILE_BYTES

    seen = set(re.findall(r"size=(\d+),blocks=(\d+)", text))
    sizes = {int(size) for size, _ in seen}
    if sizes != {FILE_BYTES} or len(seen) != 1:
        return False, f"stat() shows {sorted(seen)}: a secret's size tells its length"
    return True, f"every secret is {FILE_BYTES} bytes in the same blocks"


def _redact(text: str, sc: Scenario) -> str:
    return text.replace(sc.real_secret, "<REAL SECRET>")


def run_suite(
    rows: tuple[Row, ...] = ROWS,
    modes: tuple[str, ...] = MODES,
    progress: Callable[[RowResult], None] | None = None,
    landlock_abi: int | None = None,
) -> list[RowResult]:
    """Every row in every mode; `landlock_abi`: with Landlock restricted to that (older) ABI's
    rights, rows needing a missing feature reported as refused."""
    results: list[RowResult] = []
    with scenario() as sc:
        for row in rows:
            for mode in row.modes:
                if mode not in modes:
                    continue
                result = run_row(sc, row, mode, landlock_abi)
                results.append(result)
                if progress is not None:
                    progress(result)
    return results


def summary(results: list[RowResult]) -> tuple[int, int, int]:
    """(passed, failed, skipped)."""
    skipped = sum(1 for r in results if r.skipped)
    passed = sum(1 for r in results if r.passed and not r.skipped)
    return passed, len(results) - passed - skipped, skipped




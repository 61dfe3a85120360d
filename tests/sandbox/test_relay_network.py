"""A server behind the relay has no network but what is declared (none yet: docs/mcp-relay.md,
"What is left"): its TCP connect to a loopback listener and its UDP datagram get the kernel's
refusal (EPERM from the network seccomp filter, or Landlock's EACCES), while the same server started by its own command line (the
control) connects and sends. The server is `net_mcp.py`, a real process; the project is locked,
trusted and applied by the real CLI; the relay is the rendered command line. Loopback only."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from tests.conftest import make_project, run_cli_in_process
from tests.sandbox.test_relay import Session, rendered_command

NET_SERVER = Path(__file__).with_name("net_mcp.py")


def _project(tmp: Path) -> Path:
    root = (tmp / "proj").resolve()
    make_project(root, f"""\
[project]
name = "net"
harnesses = ["claude-code"]

[servers.net]
command = {json.dumps(sys.executable)}
args = ["-I", {json.dumps(str(NET_SERVER))}]
""")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    for args in (("lock",), ("trust", "--yes", "--accept-risk"), ("apply", "--write")):
        result = run_cli_in_process(*args, cwd=root)
        assert result.returncode == 0, result.stderr
    return root


def _outcomes(session: Session, port: int) -> dict[str, str]:
    session.start()
    out = {}
    for proto in ("tcp", "udp"):
        answer = session.request("tools/call", {"name": "connect", "arguments": {
            "proto": proto, "host": "127.0.0.1", "port": port}})
        assert "result" in answer, answer
        out[proto] = answer["result"]["content"][0]["text"]
    session.close()
    return out


def test_a_server_behind_the_relay_reaches_no_network_while_run_directly_it_does(
        tmp_path: Path) -> None:
    root = _project(tmp_path)
    argv, env = rendered_command(root, "net")
    with socket.socket() as listener, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        udp.bind(("127.0.0.1", port))
        confined = _outcomes(Session((argv, env)), port)
        # The kernel refuses both: nono's network seccomp baseline (EPERM, measured here), or
        # Landlock's TCP rule (EACCES) where it answers first.
        assert confined["tcp"] in ("error: EPERM", "error: EACCES"), confined
        assert confined["udp"] in ("error: EPERM", "error: EACCES"), confined
        direct = _outcomes(Session((argv[argv.index("--") + 1 :], env)), port)
        assert direct == {"tcp": "ok", "udp": "ok"}, direct
        assert udp.recv(16) == b"x"  # the control's datagram arrived


def test_an_unconfined_server_starts_with_sigpipe_at_its_default(tmp_path: Path) -> None:
    """`sandbox = false`: started by posix_spawn, with the dispositions Python ignores for itself
    (SIGPIPE, SIGXFSZ) back to the default, as subprocess (and the confined start) does: the
    server, a shell script, reports its ignored-signal mask from /proc."""
    import signal

    root = (tmp_path / "proj").resolve()
    make_project(root, f"""\
[project]
name = "sig"
harnesses = ["claude-code"]

[servers.sig]
command = "/bin/sh"
args = [{json.dumps(str(root / "sig_mcp.sh"))}]
sandbox = false
""")
    (root / "sig_mcp.sh").write_text(SIGNALS_SERVER)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    for args in (("lock",), ("trust", "--yes", "--accept-risk", "--pins-at-first-run"),
                 ("apply", "--write")):
        result = run_cli_in_process(*args, cwd=root)
        assert result.returncode == 0, result.stderr
    session = Session(rendered_command(root, "sig"))
    answer = session.request("initialize", {})
    session.close()
    ignored = int(answer["result"]["serverInfo"]["name"], 16)
    for number in (signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & (1 << (number - 1)), (number, hex(ignored))


SIGNALS_SERVER = """\
read line
mask=$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/self/status)
printf '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{},'
printf '"serverInfo":{"name":"%s"}}}\\n' "$mask"
cat >/dev/null
"""

"""A server that declares network (`servers.NAME.sandbox = { network = …, credentials = … }`)
reaches what it declared through its own proxy, and nothing else: the relay starts `run`'s proxy
(agentstack's gate in front of nono) for that server, confines the server with the gate's port as
its only TCP port, and the gate forwards only the declared hosts and ports (CONNECT and plain
HTTP), injects the declared secret, refuses the rest and keeps one receipt per request.

Real parts: the `net_mcp.py` server (a real process under Landlock + seccomp), test HTTP servers
on 127.0.0.1, the project locked, trusted and applied by the real CLI, the relay started by the
rendered command line, as a harness starts it. Loopback only."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentstack import layout
from agentstack.paths import agentstack_home
from tests.conftest import make_project, run_cli_in_process
from tests.sandbox.test_relay import Session, rendered_command

NET_SERVER = Path(__file__).with_name("net_mcp.py")
SECRET = "s3cr3t-server-network-value-7f21"


class _Upstream(ThreadingHTTPServer):
    seen: list[dict[str, str]]


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        server: Any = self.server
        server.seen.append({"path": self.path,
                            "authorization": self.headers.get("Authorization", ""),
                            "proxy": self.headers.get("Proxy-Authorization", "")})
        # `/echo`: an upstream that echoes the header it got (the relay must withhold it)
        body = (self.headers.get("Authorization", "") if self.path.endswith("/echo")
                else f"hello from {self.path}").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def upstreams() -> Iterator[tuple[_Upstream, _Upstream]]:
    """Two HTTP servers on 127.0.0.1: the declared one and one the server never declared."""
    servers = []
    for _ in range(2):
        server = _Upstream(("127.0.0.1", 0), _Handler)
        server.seen = []
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    yield servers[0], servers[1]
    for server in servers:
        server.shutdown()
        server.server_close()


def _project(tmp: Path, declared: int, upstream: int) -> Path:
    root = (tmp / "proj").resolve()
    make_project(root, f"""\
[project]
name = "netdecl"
harnesses = ["claude-code"]

[servers.net]
command = {json.dumps(sys.executable)}
args = ["-I", {json.dumps(str(NET_SERVER))}]

[servers.net.sandbox.network]
localhost_ports = [{declared}]

[servers.net.sandbox.credentials.api]
upstream = "http://127.0.0.1:{upstream}"
secret = "net-api"
env = "API_TOKEN"
base_url_env = "API_BASE"
""")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    stored = run_cli_in_process("secret", "set", "net-api", cwd=root, input=SECRET + "\n")
    assert stored.returncode == 0, stored.stderr
    result = run_cli_in_process("lock", cwd=root)
    assert result.returncode == 0, result.stderr
    review = run_cli_in_process("trust", "--yes", "--accept-risk", cwd=root)
    assert review.returncode == 0, review.stderr
    root.joinpath("review.txt").write_text(review.stdout + review.stderr)
    result = run_cli_in_process("apply", "--write", cwd=root)
    assert result.returncode == 0, result.stderr
    return root


def _call(session: Session, tool: str, **arguments: Any) -> str:
    answer = session.request("tools/call", {"name": tool, "arguments": arguments})
    assert "result" in answer, answer
    text: str = answer["result"]["content"][0]["text"]
    return text


def _receipts(root: Path) -> tuple[list[dict[str, Any]], str]:
    path = Path(layout.receipts_file(str(agentstack_home()), str(root)))
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()], text


@pytest.mark.slow
def test_a_server_reaches_what_it_declared_through_its_proxy_and_nothing_else(
        tmp_path: Path, upstreams: tuple[_Upstream, _Upstream]) -> None:
    declared, other = upstreams
    port, other_port = declared.server_address[1], other.server_address[1]
    root = _project(tmp_path, port, other_port)

    # The review showed the reach, with the hosts, and the secret by name only.
    review = root.joinpath("review.txt").read_text()
    assert f"may reach 127.0.0.1:{port}" in review, review
    assert "net-api" in review and SECRET not in review

    session = Session(rendered_command(root, "net")).start()
    try:
        # The declared port, through the proxy: plain HTTP and a CONNECT tunnel.
        assert _call(session, "proxied", url=f"http://127.0.0.1:{port}/declared") == (
            "HTTP/1.0 200 OK | hello from /declared")
        assert _call(session, "tunnel", host="127.0.0.1", port=port).endswith(
            "| hello from /tunnelled")
        # The proxy token never reaches the upstream.
        assert all(not seen["proxy"] for seen in declared.seen), declared.seen

        # An undeclared port, through the proxy: refused by the proxy.
        refused = _call(session, "proxied", url=f"http://127.0.0.1:{other_port}/undeclared")
        assert refused.startswith("HTTP/1.1 403"), refused
        assert _call(session, "tunnel", host="127.0.0.1", port=other_port).startswith(
            "HTTP/1.1 403"), "an undeclared tunnel"
        assert not any(seen["path"].startswith("/undeclared") or seen["path"] == "/tunnelled"
                       for seen in other.seen), other.seen

        # Bypassing the proxy: the kernel refuses the connect, in a real child process.
        for target in (port, other_port):
            bypass = _call(session, "child", host="127.0.0.1", port=target)
            assert bypass in ("exit 3: EACCES", "exit 3: EPERM"), bypass
        assert not any(seen["path"] == "/" for seen in declared.seen)

        # The credential route: the proxy injects the secret; the server holds a phantom.
        phantom = _call(session, "getenv", name="API_TOKEN")
        assert phantom not in ("<unset>", SECRET) and SECRET not in phantom
        routed = _call(session, "route", env="API_TOKEN", base_env="API_BASE")
        assert " 200 " in routed and routed.endswith("| hello from /check"), routed
        assert other.seen[-1]["authorization"] == f"Bearer {SECRET}", other.seen
        # An upstream that echoes the secret back: the relay withholds it from the harness.
        echoed = _call(session, "route", env="API_TOKEN", base_env="API_BASE", path="echo")
        assert SECRET not in echoed and "[secret withheld by agentstack]" in echoed, echoed
    finally:
        stderr = session.close()
    assert SECRET not in stderr

    # Its confinement names a port that is new at every start: never kept for a quick start.
    assert not Path(layout.box_file(str(agentstack_home()), str(root), "net")).exists()
    records, text = _receipts(root)
    proxied = [r for r in records if r.get("kind") == "proxy"]
    assert {(r["server"], r["host"], r["decision"]) for r in proxied} >= {
        ("net", f"127.0.0.1:{port}", "allow"),
        ("net", f"127.0.0.1:{other_port}", "deny"),
        ("net", "route:api", "allow"),
    }, proxied
    allowed = [r for r in proxied if r["host"] == f"127.0.0.1:{port}"]
    assert all(r["bytes_received"] > 0 for r in allowed), allowed
    assert all(set(r) == {"time", "kind", "server", "host", "decision", "bytes_sent",
                          "bytes_received"} for r in proxied), proxied
    # Never a secret, a path or a body.
    for forbidden in (SECRET, phantom, "/declared", "/undeclared", "hello from"):
        assert forbidden not in text, forbidden

    log = run_cli_in_process("log", cwd=root)
    assert log.returncode == 0, log.stderr
    assert f"deny   net  127.0.0.1:{other_port}" in log.stdout, log.stdout


def test_a_server_without_a_secret_it_declared_is_not_started(
        tmp_path: Path, upstreams: tuple[_Upstream, _Upstream]) -> None:
    declared, other = upstreams
    root = _project(tmp_path, declared.server_address[1], other.server_address[1])
    assert run_cli_in_process("secret", "rm", "net-api", cwd=root).returncode == 0
    session = Session(rendered_command(root, "net"))
    session.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    assert session.proc.wait(timeout=120) == 1
    stderr = session.close()
    assert "not started" in stderr and "net-api" in stderr, stderr
    assert "agentstack secret set net-api" in stderr and "unconfined" not in stderr, stderr


@pytest.mark.slow
def test_inside_run_the_broker_gives_the_server_its_proxy_too(
        tmp_path: Path, upstreams: tuple[_Upstream, _Upstream]) -> None:
    """`agentstack run`'s server broker (the launcher inside the sandbox only pumps bytes to it)
    starts the server with the same proxy: the declared port reached, another refused."""
    import socket

    from agentstack import serverbroker
    from agentstack.consent.document import current

    declared, other = upstreams
    port, other_port = declared.server_address[1], other.server_address[1]
    root = _project(tmp_path, port, other_port)
    _, _, document, digest = current(root)
    broker = serverbroker.Broker(root, document, digest)
    broker.serve()
    try:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=120) as conn:
            rfile, wfile = conn.makefile("rb"), conn.makefile("wb")

            def request(msg_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
                wfile.write((json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method,
                                         "params": params}) + "\n").encode())
                wfile.flush()
                answer: dict[str, Any] = json.loads(rfile.readline())
                return answer

            wfile.write((json.dumps({"server": "net", "token": broker.token}) + "\n").encode())
            wfile.flush()
            assert json.loads(rfile.readline()) == {"ok": True}
            assert "result" in request(1, "initialize", {"protocolVersion": "2025-06-18",
                                                         "capabilities": {}})
            reached = request(2, "tools/call", {"name": "proxied", "arguments": {
                "url": f"http://127.0.0.1:{port}/in-run"}})
            assert reached["result"]["content"][0]["text"].endswith("| hello from /in-run")
            refused = request(3, "tools/call", {"name": "proxied", "arguments": {
                "url": f"http://127.0.0.1:{other_port}/in-run"}})
            assert refused["result"]["content"][0]["text"].startswith("HTTP/1.1 403"), refused
            bypass = request(4, "tools/call", {"name": "child", "arguments": {
                "host": "127.0.0.1", "port": port}})
            assert bypass["result"]["content"][0]["text"] in ("exit 3: EACCES", "exit 3: EPERM")
    finally:
        broker.close()
    records, _ = _receipts(root)
    assert {(r.get("server"), r.get("host"), r.get("decision")) for r in records
            if r.get("kind") == "proxy"} >= {("net", f"127.0.0.1:{port}", "allow"),
                                              ("net", f"127.0.0.1:{other_port}", "deny")}


def _manifest_text(sandbox: str) -> str:
    return f"""\
[project]
name = "decl"
harnesses = ["claude-code"]

[servers.s]
command = "python3"
args = ["-c", "pass"]
{sandbox}
"""


@given(domains=st.lists(st.from_regex(r"[a-z]{1,8}\.(com|example)", fullmatch=True),
                        max_size=3, unique=True),
       ports=st.lists(st.integers(1, 65535), max_size=3, unique=True))
@settings(max_examples=40, deadline=None)
def test_the_table_is_left_to_the_models_and_digested_whole(domains: list[str],
                                                            ports: list[int]) -> None:
    """Both validators: `false` takes the fast path, a table goes to the models (whose digest
    drops its defaults); the models dump it whole, hosts and ports in the order written."""
    import tomllib

    from agentstack.manifest import fast
    from agentstack.manifest.model import parse_manifest
    from agentstack.manifest.view import ManifestView

    text = _manifest_text(f"sandbox = {{ network = {{ allow_domains = {json.dumps(domains)}, "
                          f"localhost_ports = {json.dumps(ports)} }} }}")
    assert fast.validated(tomllib.loads(text)) is None
    view = ManifestView.from_model(parse_manifest(text.encode()))
    box = view.servers["s"].dump()["sandbox"]
    assert box == {"network": {"allow_domains": domains, "localhost_ports": ports},
                   "credentials": {}}
    off = tomllib.loads(_manifest_text("sandbox = false"))
    assert fast.validated(off)["servers"]["s"]["sandbox"] is False
    other = ManifestView.from_model(parse_manifest(
        _manifest_text('sandbox = { network = { allow_domains = ["zz.other"] } }').encode()))
    assert other.digest != view.digest


@pytest.mark.parametrize(("sandbox", "problem"), [
    ('sandbox = { network = { allow_domains = ["evil.example:443"] } }', "not a host name"),
    ("sandbox = { network = { localhost_ports = [0] } }", "greater than or equal to 1"),
    ("sandbox = { network = { block = false } }", "unknown key 'block'"),
    ('sandbox = "yes"', "Input should be a valid boolean"),
    ('sandbox = { credentials = { a = { upstream = "https://a.example", secret = "k", '
     'env = "T" }, b = { upstream = "https://b.example", secret = "k", env = "T" } } }',
     "set by two credentials"),
])
def test_a_bad_table_is_refused_by_name(sandbox: str, problem: str) -> None:
    from agentstack.errors import ManifestInvalid
    from agentstack.manifest.model import parse_manifest

    with pytest.raises(ManifestInvalid) as caught:
        parse_manifest(_manifest_text(sandbox).encode())
    text = str(caught.value) + " ".join(str(p) for p in getattr(caught.value, "problems", []))
    assert "servers.s.sandbox" in text and problem in text, text
    assert len(caught.value.problems) == 1, caught.value.problems  # not one per union member


def test_the_review_rates_each_new_host_and_not_an_unchanged_one() -> None:
    from agentstack.consent.diff import consent_diff

    def diff_documents(old: dict[str, Any], new: dict[str, Any]) -> list[Any]:
        return consent_diff(old, new).findings

    def doc(network: dict[str, Any]) -> dict[str, Any]:
        return {"servers": {"s": {"transport": "stdio", "command": "python3", "args": [],
                                  "sandbox": {"network": network, "credentials": {}}}}}

    old = doc({"allow_domains": ["a.example"], "localhost_ports": []})
    new = doc({"allow_domains": ["a.example", "b.example"], "localhost_ports": [8080]})
    found = [(f.code, f.message) for f in diff_documents(old, new)
             if f.code == "server-network"]
    assert sorted(m for _, m in found) == [
        "the server may reach 127.0.0.1:8080 (through its proxy only)",
        "the server may reach b.example (through its proxy only)"]
    assert not [f for f in diff_documents(new, new) if f.code == "server-network"]

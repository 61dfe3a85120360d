"""agentstack's gate in front of nono's proxy (in-process, against a recording fake upstream on
127.0.0.1): what it forwards, what it refuses, and that nothing hidden behind a forwarded request
ever reaches the upstream. The confinement rows `proxy-*` prove the same from inside the sandbox."""

from __future__ import annotations

import base64
import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentstack.sandbox.gate import Gate, Refusal, forbidden_address, split_authority
from tests.harness.deadline import scaled

TOKEN = "t0ken"
AUTH = "Proxy-Authorization: Basic " + base64.b64encode(f"nono:{TOKEN}".encode()).decode()


class FakeUpstream:
    """Records every byte each connection sends; answers CONNECT with 200, anything else with a
    small 200 response, then closes."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        conn.settimeout(2)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            if data.startswith(b"CONNECT"):
                conn.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        finally:
            with self.lock:
                self.received.append(data)
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def gate() -> Iterator[tuple[Gate, FakeUpstream]]:
    upstream = FakeUpstream()
    g = Gate(upstream.port, TOKEN, routes=("mock",),
             allow_domains=("*.example.com", "api.github.com"))
    try:
        yield g, upstream
    finally:
        g.close()
        upstream.close()


def _exchange(port: int, request: bytes, *, close_write: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=scaled(5)) as sock:
        sock.sendall(request)
        if close_write:
            sock.shutdown(socket.SHUT_WR)
        data = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            data += chunk
    return data


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


def _settle(upstream: FakeUpstream, count: int) -> list[bytes]:
    import time

    deadline = time.monotonic() + scaled(3)
    while time.monotonic() < deadline:
        with upstream.lock:
            if len(upstream.received) >= count:
                break
        time.sleep(0.01)
    time.sleep(scaled(0.05))  # and nothing more arrives
    with upstream.lock:
        return list(upstream.received)


def test_route_requests_are_forwarded_once_with_connection_close(
    gate: tuple[Gate, FakeUpstream]
) -> None:
    g, upstream = gate
    reply = _exchange(g.port, b"GET /mock/v1/x HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n"
                               b"Authorization: Bearer phantom\r\n\r\n")
    assert _status(reply) == 200 and reply.endswith(b"ok")
    (seen,) = _settle(upstream, 1)
    assert seen.startswith(b"GET /mock/v1/x HTTP/1.1\r\n")
    assert b"connection: close" in seen and b"keep-alive" not in seen


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /other/x HTTP/1.1\r\nHost: a\r\n\r\n", 404),
        (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 404),
        (f"CONNECT 127.0.0.1:22 HTTP/1.1\r\n{AUTH}\r\n\r\n".encode(), 403),
        (b"CONNECT 127.0.0.1:22 HTTP/1.1\r\n\r\n", 407),
        (b"CONNECT a.example.com:443 HTTP/1.1\r\n\r\n", 407),
        (b"CONNECT a.example.com:443 HTTP/1.1\r\nProxy-Authorization: Basic "
         + base64.b64encode(b"nono:wrong") + b"\r\n\r\n", 407),
        (f"CONNECT a.example.com:22 HTTP/1.1\r\n{AUTH}\r\n\r\n".encode(), 403),
        (f"CONNECT example.com:443 HTTP/1.1\r\n{AUTH}\r\n\r\n".encode(), 403),
        (f"CONNECT evil.com:443 HTTP/1.1\r\n{AUTH}\r\n\r\n".encode(), 403),
        (f"CONNECT localhost:443 HTTP/1.1\r\n{AUTH}\r\n\r\n".encode(), 403),
        (f"CONNECT [::1]:443 HTTP/1.1\r\n{AUTH}\r\n\r\n".encode(), 403),
        (f"CONNECT [::ffff:127.0.0.1]:443 HTTP/1.1\r\n{AUTH}\r\n\r\n".encode(), 403),
        (f"CONNECT 10.0.0.1:443 HTTP/1.1\r\n{AUTH}\r\n\r\n".encode(), 403),
        (f"CONNECT 169.254.169.254:443 HTTP/1.1\r\n{AUTH}\r\n\r\n".encode(), 403),
        (f"CONNECT user@a.example.com:443 HTTP/1.1\r\n{AUTH}\r\n\r\n".encode(), 400),
        (f"GET http://127.0.0.1:8080/ HTTP/1.1\r\n{AUTH}\r\n\r\n".encode(), 403),
        (b"GET http://a.example.com/ HTTP/1.1\r\n\r\n", 407),
        (f"GET https://a.example.com/ HTTP/1.1\r\n{AUTH}\r\n\r\n".encode(), 400),
        (b"POST /mock/x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"POST /mock/x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
        (b"GET /mock/x HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", 400),
        (b"GET /mock/x HTTP/1.1\r\nX: a\nY: b\r\n\r\n", 400),
        (b"GET  /mock/x HTTP/1.1\r\n\r\n", 400),
        (b"GET /mock/x HTTP/2.0\r\n\r\n", 400),
        ("GET /mock/x HTTP/1.1\r\nX: \u00e9\r\n\r\n".encode(), 400),
        (b"GET /mock/x HTTP/1.1\r\nX" + b"a" * 70000 + b": b\r\n\r\n", 431),
    ],
)
def test_refusals_reach_nothing(gate: tuple[Gate, FakeUpstream], request_bytes: bytes,
                                status: int) -> None:
    g, upstream = gate
    reply = _exchange(g.port, request_bytes)
    assert _status(reply) == status, reply
    assert b"agentstack proxy: refused" in reply
    assert _settle(upstream, 0) == []
    assert g.log.refused


def test_an_allowed_tunnel_is_forwarded(gate: tuple[Gate, FakeUpstream]) -> None:
    g, upstream = gate
    reply = _exchange(g.port, f"CONNECT api.github.com:443 HTTP/1.1\r\n{AUTH}\r\n\r\n".encode())
    assert b"Connection Established" in reply
    (seen,) = _settle(upstream, 1)
    assert seen.startswith(b"CONNECT api.github.com:443 ")


@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_nothing_after_a_forwarded_request_reaches_the_upstream(
    gate: tuple[Gate, FakeUpstream], framing: str
) -> None:
    g, upstream = gate
    hidden = f"CONNECT 127.0.0.1:22 HTTP/1.1\r\n{AUTH}\r\n\r\n".encode()
    if framing == "length":
        first = b"POST /mock/x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
    else:
        first = (b"POST /mock/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"5\r\nhello\r\n0\r\n\r\n")
    reply = _exchange(g.port, first + hidden)
    assert reply.count(b"HTTP/1.1") == 1 and reply.endswith(b"ok")
    (seen,) = _settle(upstream, 1)
    assert b"hello" in seen and b"CONNECT" not in seen and b"127.0.0.1:22" not in seen


def test_close_ends_open_connections(gate: tuple[Gate, FakeUpstream]) -> None:
    g, _ = gate
    sock = socket.create_connection(("127.0.0.1", g.port), timeout=scaled(5))
    sock.sendall(b"GET /mock/x HTTP/1.1\r\n")  # never finishes its head
    g.close()
    # FIN, or RST when the gate had unread bytes: either way the connection is over
    with contextlib.suppress(ConnectionResetError):
        assert sock.recv(100) == b""
    sock.close()


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_authority_parsing_never_breaks(text: str) -> None:
    try:
        host, port = split_authority(text)
    except Refusal as refusal:
        assert refusal.status == 400
        return
    assert 0 < port < 65536 and host and host == host.lower()
    assert not any(c in host for c in "/\\@?#% ")


@settings(max_examples=200, deadline=None)
@given(st.ip_addresses())
def test_no_address_literal_outside_the_public_internet_passes(address: object) -> None:
    import ipaddress

    assert isinstance(address, ipaddress.IPv4Address | ipaddress.IPv6Address)
    plain = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) and \
        address.ipv4_mapped else address
    assert forbidden_address(str(address)) == (not plain.is_global)  # type: ignore[union-attr]


def test_a_route_request_sent_through_the_proxy_setting_is_a_route_request(
    gate: tuple[Gate, FakeUpstream]
) -> None:
    g, upstream = gate
    reply = _exchange(g.port, f"GET http://127.0.0.1:{g.port}/mock/v1/x HTTP/1.1\r\n"
                              "Host: 127.0.0.1\r\n\r\n".encode())
    assert _status(reply) == 200
    (seen,) = _settle(upstream, 1)
    assert seen.startswith(b"GET /mock/v1/x HTTP/1.1\r\n")
    other = _exchange(g.port, f"GET http://127.0.0.1:{g.port}/other HTTP/1.1\r\n\r\n".encode())
    assert _status(other) == 404


def test_expect_continue_and_oversized_bodies(gate: tuple[Gate, FakeUpstream]) -> None:
    g, upstream = gate
    with socket.create_connection(("127.0.0.1", g.port), timeout=scaled(5)) as sock:
        sock.sendall(b"POST /mock/x HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(b"hello")
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    assert reply.endswith(b"ok")
    (seen,) = _settle(upstream, 1)
    assert b"hello" in seen and b"expect" not in seen.lower()
    big = _exchange(g.port, b"POST /mock/x HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n")
    assert _status(big) == 413


def test_a_tunnel_to_the_gate_itself_ends_there(gate: tuple[Gate, FakeUpstream]) -> None:
    """Clients that tunnel even to a proxy on 127.0.0.1: the request inside the tunnel passes the
    same rules (a route request is forwarded; another CONNECT is refused)."""
    g, upstream = gate
    me = f"127.0.0.1:{g.port}"
    ok = _exchange(g.port, f"CONNECT {me} HTTP/1.1\r\n{AUTH}\r\n\r\n"
                           "GET /mock/v1/x HTTP/1.1\r\nHost: a\r\n\r\n".encode())
    assert ok.startswith(b"HTTP/1.1 200 Connection Established") and ok.endswith(b"ok")
    (seen,) = _settle(upstream, 1)
    assert seen.startswith(b"GET /mock/v1/x ")
    nested = _exchange(g.port, f"CONNECT {me} HTTP/1.1\r\n{AUTH}\r\n\r\n"
                               f"CONNECT 127.0.0.1:22 HTTP/1.1\r\n{AUTH}\r\n\r\n".encode())
    assert b" 400 " in nested
    assert _status(_exchange(g.port, f"CONNECT {me} HTTP/1.1\r\n\r\n".encode())) == 407
    assert len(_settle(upstream, 1)) == 1


@pytest.fixture
def server_gate() -> Iterator[tuple[Gate, FakeUpstream, FakeUpstream, list[dict[str, object]]]]:
    """An MCP server's gate: nono's port is `nono` (must see nothing of a loopback request), and
    `local` is the server's declared 127.0.0.1 port."""
    nono, local = FakeUpstream(), FakeUpstream()
    receipts: list[dict[str, object]] = []
    g = Gate(nono.port, TOKEN, routes=(), allow_domains=("api.example.com",),
             loopback_ports=(local.port,), receipt=receipts.append)
    try:
        yield g, nono, local, receipts
    finally:
        g.close()
        nono.close()
        local.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_declared_loopback_port_is_reached_by_the_gate_itself(
    server_gate: tuple[Gate, FakeUpstream, FakeUpstream, list[dict[str, object]]], host: str
) -> None:
    g, nono, local, receipts = server_gate
    reply = _exchange(g.port, f"GET http://{host}:{local.port}/p?q=1 HTTP/1.1\r\nHost: x\r\n"
                              f"{AUTH}\r\n\r\n".encode())
    assert _status(reply) == 200 and reply.endswith(b"ok")
    tunnel = _exchange(g.port, f"CONNECT {host}:{local.port} HTTP/1.1\r\n{AUTH}\r\n\r\n"
                               "inside".encode())
    assert tunnel.startswith(b"HTTP/1.1 200 Connection Established\r\n\r\n")
    seen = _settle(local, 2)
    plain = next(s for s in seen if s.startswith(b"GET"))
    assert plain.startswith(b"GET /p?q=1 HTTP/1.1\r\n")  # origin form
    assert b"proxy-authorization" not in plain.lower() and TOKEN.encode() not in plain
    assert any(s == b"inside" for s in seen), seen  # the tunnel's bytes, and no CONNECT head
    assert _settle(nono, 0) == []
    assert [(r["host"], r["decision"]) for r in receipts] == [
        (f"{host}:{local.port}", "allow")] * 2


@pytest.mark.parametrize("request_text", [
    "GET http://127.0.0.1:{other}/ HTTP/1.1\r\nHost: x\r\n{auth}\r\n\r\n",
    "CONNECT 127.0.0.1:{other} HTTP/1.1\r\n{auth}\r\n\r\n",
    "CONNECT 10.0.0.1:{local} HTTP/1.1\r\n{auth}\r\n\r\n",
    "GET http://127.0.0.2:{local}/ HTTP/1.1\r\nHost: x\r\n{auth}\r\n\r\n",
])
def test_an_undeclared_loopback_port_or_address_is_refused(
    server_gate: tuple[Gate, FakeUpstream, FakeUpstream, list[dict[str, object]]],
    request_text: str,
) -> None:
    g, nono, local, receipts = server_gate
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        other = spare.getsockname()[1]
        reply = _exchange(g.port, request_text.format(other=other, local=local.port,
                                                      auth=AUTH).encode())
    assert _status(reply) == 403, reply
    assert _settle(local, 0) == [] and _settle(nono, 0) == []
    assert [r["decision"] for r in receipts] == ["deny"]


def test_a_declared_loopback_port_still_needs_the_proxy_token(
    server_gate: tuple[Gate, FakeUpstream, FakeUpstream, list[dict[str, object]]]
) -> None:
    g, _, local, _ = server_gate
    for request in (f"GET http://127.0.0.1:{local.port}/ HTTP/1.1\r\nHost: x\r\n\r\n",
                    f"CONNECT 127.0.0.1:{local.port} HTTP/1.1\r\n\r\n"):
        assert _status(_exchange(g.port, request.encode())) == 407
    assert _settle(local, 0) == []


@given(host=st.sampled_from(["127.0.0.1", "localhost", "127.0.0.2", "[::1]", "0.0.0.0",
                             "api.example.com", "LOCALHOST"]),
       which=st.sampled_from(["declared", "other", "gate"]),
       connect=st.booleans(), token=st.booleans())
@settings(max_examples=12, deadline=None)
def test_only_a_declared_loopback_port_with_the_token_is_reached(
    host: str, which: str, connect: bool, token: bool
) -> None:
    """Whatever the host spelling, port or method: the declared 127.0.0.1 port is reached only as
    127.0.0.1 / localhost (any case) with the token, and nothing of it ever reaches nono."""
    nono, local = FakeUpstream(), FakeUpstream()
    receipts: list[dict[str, object]] = []
    g = Gate(nono.port, TOKEN, routes=(), allow_domains=("api.example.com",),
             loopback_ports=(local.port,), receipt=receipts.append)
    try:
        port = {"declared": local.port, "other": nono.port, "gate": g.port}[which]
        auth = f"{AUTH}\r\n" if token else ""
        request = (f"CONNECT {host}:{port} HTTP/1.1\r\n{auth}\r\nx" if connect else
                   f"GET http://{host}:{port}/ HTTP/1.1\r\nHost: x\r\n{auth}\r\n")
        reply = _exchange(g.port, request.encode())
        reached = _settle(local, 0)
        expected = (host.lower() in ("127.0.0.1", "localhost") and which == "declared"
                    and token)
        assert bool(reached) == expected, (request, reply, reached)
        if not expected and not (which == "gate" and connect and token):
            # (a tunnel to the gate itself is accepted: the request inside it is checked)
            assert reply == b"" or _status(reply) in (400, 403, 404, 407), reply
        assert not [r for r in _settle(nono, 0) if str(local.port).encode() in r]
        assert all(r["decision"] == ("allow" if expected else "deny") for r in receipts
                   if r["host"] != "?"), receipts
    finally:
        g.close()
        nono.close()
        local.close()

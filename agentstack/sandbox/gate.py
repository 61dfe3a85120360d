"""agentstack's gate in front of nono's proxy: the only network port a confined process reaches.

Measured: nono-py 0.16's proxy adds each credential route's upstream host (any port) to its CONNECT
allowlist and does not ask a CONNECT for the phantom token, so a confined process could tunnel to
every port of that host, and with a loopback upstream (a local model gateway) to every localhost
port. The gate listens on 127.0.0.1; Landlock lets the confined process connect to the gate's port
only (never to nono's), and the gate forwards to nono exactly one request per connection, and only:

- a request to a credential route (`/<route>/...`, origin form): nono checks the phantom token
  and injects the real secret; the route needs no tunnel;
- `CONNECT host:port`, only when `host` matches `sandbox.network.allow_domains` and `port` is 443,
  with the proxy token (Proxy-Authorization), and never to a loopback, private or link-local
  address literal or a loopback name;
- an absolute-form request (`GET http://host/...`) under the same rules, on port 80;
- for an MCP server's own gate (`servers.NAME.sandbox.network.localhost_ports`), `CONNECT` or an
  absolute-form request to `127.0.0.1:PORT` / `localhost:PORT` of a declared port, with the
  token: the gate connects to that port itself (nono never sees it; it is not a public host).

Everything else gets an HTTP error and the connection is closed; nothing reaches nono. A forwarded
request carries `Connection: close` and its body is forwarded by its own framing (Content-Length or
chunked), after which nothing more from the client is forwarded: a second request hidden in the
same connection never reaches nono.
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import ipaddress
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024
IDLE_TIMEOUT = 120.0
HEAD_TIMEOUT = 30.0
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
HOP_HEADERS = frozenset({"connection", "keep-alive", "proxy-connection", "upgrade", "te"})


class Refusal(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class GateLog:
    """What the gate refused (for the audit and the tests)."""

    refused: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, target: str, reason: str) -> None:
        with self.lock:
            self.refused.append((target, reason))

    def drain(self) -> list[tuple[str, str]]:
        with self.lock:
            out, self.refused = self.refused, []
        return out


def host_matches(host: str, pattern: str) -> bool:
    pattern = pattern.lower().rstrip(".")
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and host != pattern[2:]
    return host == pattern


def forbidden_address(host: str) -> bool:
    """A loopback name, or an address literal that is not a public unicast address."""
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return not address.is_global


def split_authority(authority: str) -> tuple[str, int]:
    """`host:port` / `[v6]:port` -> (lower-case host, port); Refusal(400) for anything else."""
    if any(c in authority for c in "/\\@?#% \t") or not authority.isascii():
        raise Refusal(400, "malformed authority")
    if authority.startswith("["):
        host, sep, rest = authority[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise Refusal(400, "malformed authority")
        port_text = rest[1:]
    else:
        host, sep, port_text = authority.rpartition(":")
        if not sep or ":" in host:
            raise Refusal(400, "malformed authority")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise Refusal(400, "malformed port")
    host = host.lower().rstrip(".")
    if not host:
        raise Refusal(400, "empty host")
    return host, int(port_text)


class Gate:
    """A thread per connection; `close()` stops accepting and ends every connection."""

    def __init__(
        self,
        upstream_port: int,
        token: str,
        *,
        routes: tuple[str, ...],
        allow_domains: tuple[str, ...],
        audit: Callable[[str, str], None] | None = None,
        receipt: Callable[[dict[str, object]], None] | None = None,
        loopback_ports: tuple[int, ...] = (),
    ) -> None:
        self.upstream_port = upstream_port
        self.loopback_ports = frozenset(loopback_ports)
        self.token = token.encode()
        self.routes = routes
        self.allow_domains = allow_domains
        self.log = GateLog()
        self._audit = audit
        # One receipt per request (agentstack log): where to, the decision, the bytes; never
        # a path, a query, a header or a body.
        self._receipt = receipt
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port = int(self._listener.getsockname()[1])
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="agentstack-gate", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ policy

    def allows_tunnel(self, host: str, port: int) -> str | None:
        """None when CONNECT host:port may pass, else why not."""
        if forbidden_address(host):
            return f"{host} is a loopback, private or link-local address"
        if port != 443:
            return f"port {port}: tunnels are allowed to port 443 only"
        if not any(host_matches(host, p) for p in self.allow_domains):
            return f"{host} is not in sandbox.network.allow_domains"
        return None

    def _loopback(self, host: str, port: int) -> bool:
        """A declared 127.0.0.1 port (an MCP server's `localhost_ports`), reached by the gate."""
        return host in ("127.0.0.1", "localhost") and port in self.loopback_ports

    def _check_token(self, headers: list[tuple[str, str]]) -> None:
        values = [v for k, v in headers if k == "proxy-authorization"]
        if len(values) != 1:
            raise Refusal(407, "the proxy token is required")
        scheme, _, encoded = values[0].strip().partition(" ")
        if scheme.lower() != "basic":
            raise Refusal(407, "the proxy token is required")
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True)
        except ValueError:
            raise Refusal(407, "the proxy token is required") from None
        _, _, password = decoded.partition(b":")
        if not hmac.compare_digest(password, self.token):
            raise Refusal(407, "wrong proxy token")

    # ------------------------------------------------------------------ serving

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self._open.add(conn)
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sockets = list(self._open)
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _forget(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)
        sock.close()

    def _handle(self, client: socket.socket) -> None:
        counts = [0, 0]  # bytes to the upstream, bytes back
        where: list[str] = ["?"]
        decision = self._handle_one(client, counts, where)
        if self._receipt is not None and decision is not None:
            import time

            with contextlib.suppress(Exception):  # a receipt lost never changes a decision
                self._receipt({
                    "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "kind": "proxy", "host": where[0], "decision": decision,
                    "bytes_sent": counts[0], "bytes_received": counts[1],
                })

    def _handle_one(self, client: socket.socket, counts: list[int], where: list[str]
                    ) -> str | None:
        upstream: socket.socket | None = None
        target = "?"
        try:
            client.settimeout(HEAD_TIMEOUT)
            head, rest = _read_head(client)
            method, target, version, headers = _parse_head(head)
            if method == "CONNECT" and self._is_self(*split_authority(target)):
                # A client that tunnels even to a proxy on 127.0.0.1 (Codex does): the tunnel
                # ends here, and the request inside it passes the same rules as any other.
                self._check_token(headers)
                client.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                head, rest = _read_head(client, rest)
                method, target, version, headers = _parse_head(head)
                if method == "CONNECT":
                    raise Refusal(400, "a CONNECT inside a tunnel to the proxy")
            if method == "CONNECT":
                host, port = split_authority(target)
                where[0] = f"{host}:{port}"
                self._check_token(headers)
                if self._loopback(host, port):
                    upstream = self._direct(port)
                    client.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                    if rest:
                        upstream.sendall(rest)
                    sent, counts[1] = _pipe(client, upstream)
                    counts[0] = sent + len(rest)
                    return "allow"
                why = self.allows_tunnel(host, port)
                if why is not None:
                    raise Refusal(403, why)
                upstream = self._upstream()
                upstream.sendall(head)
                if rest:
                    upstream.sendall(rest)
                counts[0], counts[1] = _pipe(client, upstream)
                return "allow"
            if not target.startswith("/"):
                host, port = _absolute_target(target)
                if self._is_self(host, port):
                    # a client that sends route requests through its HTTP proxy setting
                    target = "/" + target[7:].split("/", 1)[1] if "/" in target[7:] else "/"
            if target.startswith("/"):
                prefix = target[1:].split("/", 1)[0].split("?", 1)[0]
                where[0] = f"route:{prefix}" if prefix in self.routes else "route:?"
                if prefix not in self.routes:
                    raise Refusal(404, "no credential route here")
            direct = False
            if not target.startswith("/"):
                where[0] = f"{host}:{port}"
                self._check_token(headers)
                direct = self._loopback(host, port)
                if direct:  # to the server itself, in origin form, without the proxy token
                    after = target[7:].split("/", 1)
                    target = "/" + after[1] if len(after) == 2 else "/"
                    headers = [(k, v) for k, v in headers if k != "proxy-authorization"]
                elif port != 80:
                    raise Refusal(403, f"port {port}: plain HTTP through the proxy to port 80 only")
                elif forbidden_address(host) or not any(
                    host_matches(host, p) for p in self.allow_domains
                ):
                    raise Refusal(403, f"{host} is not in sandbox.network.allow_domains")
            if any(k == "expect" and v.lower() == "100-continue" for k, v in headers):
                client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")  # the body is read here
                headers = [(k, v) for k, v in headers if k != "expect"]
            body = _body_reader(headers, rest, client)
            upstream = self._direct(port) if direct else self._upstream()
            rewritten = _rewrite_head(method, target, version, headers)
            upstream.sendall(rewritten)
            counts[0] += len(rewritten)
            for chunk in body:
                upstream.sendall(chunk)
                counts[0] += len(chunk)
            counts[1] = _relay_response(upstream, client)
            return "allow"
        except Refusal as refusal:
            self.log.add(target, refusal.reason)
            if self._audit is not None:
                self._audit(target, refusal.reason)
            message = f"agentstack proxy: refused: {refusal.reason}\n".encode()
            with contextlib.suppress(OSError):
                client.sendall(
                    f"HTTP/1.1 {refusal.status} {_REASONS.get(refusal.status, 'Refused')}\r\n"
                    f"Content-Type: text/plain\r\nConnection: close\r\n"
                    f"Content-Length: {len(message)}\r\n\r\n".encode() + message
                )
            return "deny"
        except (OSError, ValueError):
            return "allow" if upstream is not None else None
        finally:
            if upstream is not None:
                upstream.close()
            self._forget(client)

    def _is_self(self, host: str, port: int) -> bool:
        return host in ("127.0.0.1", "localhost") and port == self.port

    def _direct(self, port: int) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port), timeout=HEAD_TIMEOUT)
        sock.settimeout(IDLE_TIMEOUT)
        return sock

    def _upstream(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=HEAD_TIMEOUT)
        sock.settimeout(IDLE_TIMEOUT)
        return sock


_REASONS = {400: "Bad Request", 403: "Forbidden", 404: "Not Found", 413: "Content Too Large",
            407:
            "Proxy Authentication Required", 411: "Length Required", 431:
            "Request Header Fields Too Large"}


def _read_head(sock: socket.socket, data: bytes = b"") -> tuple[bytes, bytes]:
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD:
            raise Refusal(431, "request head too large")
        chunk = sock.recv(65536)
        if not chunk:
            raise ValueError("closed before the request head ended")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    if len(head) > MAX_HEAD:
        raise Refusal(431, "request head too large")
    return head + b"\r\n\r\n", rest


def _parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise Refusal(400, "non-ASCII request head") from None
    lines = text[:-4].split("\r\n")
    if any("\n" in line or "\r" in line or "\0" in line for line in lines):
        raise Refusal(400, "bare CR or LF in the request head")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0") or not parts[0].isalpha():
        raise Refusal(400, "malformed request line")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line or line[0] in " \t":
            raise Refusal(400, "folded or empty header line")
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or not all(
            c.isalnum() or c in "!#$%&'*+-.^_`|~" for c in name
        ):
            raise Refusal(400, "malformed header")
        headers.append((name.lower(), value.strip()))
    return parts[0].upper(), parts[1], parts[2], headers


def _absolute_target(target: str) -> tuple[str, int]:
    if not target.lower().startswith("http://"):
        raise Refusal(400, "only http:// absolute targets (use CONNECT for https)")
    authority = target[7:].split("/", 1)[0]
    if ":" not in authority.rsplit("]", 1)[-1]:
        authority += ":80"
    return split_authority(authority)


def _rewrite_head(method: str, target: str, version: str,
                  headers: list[tuple[str, str]]) -> bytes:
    lines = [f"{method} {target} {version}"]
    lines += [f"{k}: {v}" for k, v in headers if k not in HOP_HEADERS]
    lines.append("connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def _body_reader(headers: list[tuple[str, str]], rest: bytes, sock: socket.socket) -> list[bytes]:
    """The request body by its own framing (read fully before forwarding; bodies are small)."""
    lengths = [v for k, v in headers if k == "content-length"]
    encodings = [v.lower() for k, v in headers if k == "transfer-encoding"]
    if lengths and encodings:
        raise Refusal(400, "both Content-Length and Transfer-Encoding")
    if len(lengths) > 1 or len(encodings) > 1:
        raise Refusal(400, "repeated framing header")
    if encodings:
        if encodings[0] != "chunked":
            raise Refusal(400, "unsupported transfer coding")
        return [_read_chunked(rest, sock)]
    if not lengths:
        return []
    if not lengths[0].isdigit():
        raise Refusal(400, "malformed Content-Length")
    size = int(lengths[0])
    if size > MAX_BODY:
        raise Refusal(413, "request body too large")
    data = rest
    while len(data) < size:
        chunk = sock.recv(min(1 << 20, size - len(data)))
        if not chunk:
            raise ValueError("closed in the body")
        data += chunk
    return [data[:size]]


def _read_chunked(rest: bytes, sock: socket.socket) -> bytes:
    data = rest
    out = b""
    position = 0

    def need(count: int) -> None:
        nonlocal data
        while len(data) - position < count:
            chunk = sock.recv(65536)
            if not chunk:
                raise ValueError("closed in a chunked body")
            data += chunk

    def line() -> bytes:
        nonlocal data, position
        while b"\r\n" not in data[position:]:
            if len(data) - position > MAX_HEAD:
                raise Refusal(400, "chunk line too long")
            need(len(data) - position + 1)
        end = data.index(b"\r\n", position)
        text = data[position:end]
        position = end + 2
        return text

    while True:
        size_line = line()
        size_text = size_line.split(b";", 1)[0].strip()
        if not size_text or any(c not in b"0123456789abcdefABCDEF" for c in size_text):
            raise Refusal(400, "malformed chunk size")
        size = int(size_text, 16)
        if len(out) + size > MAX_BODY:
            raise Refusal(413, "request body too large")
        out += size_line + b"\r\n"
        if size == 0:
            while True:  # trailers, then the empty line
                trailer = line()
                out += trailer + b"\r\n"
                if not trailer:
                    return out
        need(size + 2)
        out += data[position:position + size + 2]
        if data[position + size:position + size + 2] != b"\r\n":
            raise Refusal(400, "malformed chunk")
        position += size + 2


def _relay_response(upstream: socket.socket, client: socket.socket) -> int:
    client.settimeout(IDLE_TIMEOUT)
    total = 0
    while True:
        chunk = upstream.recv(65536)
        if not chunk:
            return total
        client.sendall(chunk)
        total += len(chunk)


def _pipe(a: socket.socket, b: socket.socket) -> tuple[int, int]:
    """Both directions until either side closes; (bytes a to b, bytes b to a)."""
    a.settimeout(None)
    b.settimeout(None)
    totals = {0: 0, 1: 0}

    def one_way(source: socket.socket, sink: socket.socket, which: int) -> None:
        try:
            while True:
                chunk = source.recv(65536)
                if not chunk:
                    break
                sink.sendall(chunk)
                totals[which] += len(chunk)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    other = threading.Thread(target=one_way, args=(b, a, 1), daemon=True)
    other.start()
    one_way(a, b, 0)
    other.join(IDLE_TIMEOUT)
    return totals[0], totals[1]


__all__ = ["Gate", "Refusal", "forbidden_address", "host_matches", "split_authority"]

"""The relay for a remote (URL) MCP server: MCP over stdio to the harness, Streamable HTTP to the
server, every message through the stdio relay's own checks (`agentstack.relay.Relay`).

`apply --write` renders a `url` server as a stdio command, never as the URL:

    <python> -I -m agentstack.launch --server NAME --project ROOT --state DIR --remote URL

so the harness starts the relay, and the relay alone talks to the remote. What it checks is what
the stdio relay checks, by the same code: the listings held to their pins (taken the first time
the trusted server lists), a changed entry withheld with a JSON-RPC error naming the change and
`agentstack trust`, `servers.NAME.tools` (allow / deny), a receipt per tool call. Where the
project is not trusted (or its trust is revoked) no connection is made at all.

The URL and the headers come from the trusted consent document (the `--remote` argument must be
the same URL, and is there so that a harness's `mcp list` shows where the relay connects); a
header `secret:NAME` is read from the secret store here and added to each request, so the
harness's config and environment never hold it. Only `https://` URLs, or `http://` to a loopback
IP address; a redirect is followed only to the same scheme, host and port (307/308), never to
another host. No proxy variable of the environment is read (the project can set those).

Streamable HTTP (MCP 2025-03-26 and later): each message from the harness is POSTed, JSON-RPC in
the body, `Accept: application/json, text/event-stream`; an answer comes as one JSON body or as
an event stream, where the remote may also send notifications and requests of its own before the
answer; `Mcp-Session-Id` from the answer to `initialize` goes on every later request; after
`notifications/initialized` a GET stream carries what the remote sends unasked. Nothing the remote
sends is forwarded unchecked: a body or event over 16 MiB, one that is not JSON-RPC, or an answer
to another request than the one POSTed is dropped, and the harness's request is answered with a
JSON-RPC error instead.

Standard library only (http.client): it starts with every remote server, and stays on the path of
every message.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import sys
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any
from urllib.parse import urljoin, urlsplit

from agentstack import relay

ACCEPT = "application/json, text/event-stream"
MAX_BODY = relay.MAX_LINE  # an answer (or an event) longer than this is dropped whole
MAX_REDIRECTS = 3
CONNECT_SECONDS = 30.0
IDLE_SECONDS = 600.0  # a connection silent this long is given up
# How a secret is read from the store: (store directory, name) -> value (agentstack.launch's
# read_secret, with the store's checks; handed in, so that this module imports no launcher).
SecretReader = Callable[[str, str], str]
USAGE = ("usage: python -I -m agentstack.launch --server NAME --project ROOT --state DIR "
         "[--only-in-project] "
         "--remote URL")
# Headers the relay sets itself: the manifest cannot name them.
OWN_HEADERS = frozenset({
    "accept", "content-type", "content-length", "host", "connection", "transfer-encoding",
    "mcp-session-id", "mcp-protocol-version", "last-event-id",
})


class RemoteError(Exception):
    """The remote cannot be used, or an exchange failed; the message says why."""


# ----------------------------------------------------------------------------- the URL


def is_loopback(host: str) -> bool:
    """A loopback IP literal (127.0.0.0/8, ::1). The name `localhost` is not one: a name is
    resolved, and the review (`plain-http:<host>`) counts it as not loopback too."""
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path) of a URL the relay may reach: https, or http to loopback."""
    parts = urlsplit(url)
    host = parts.hostname
    if parts.scheme not in ("https", "http") or not host:
        raise RemoteError(f"{url!r} is not an https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise RemoteError(f"{url!r} carries credentials; use headers with secret:NAME instead")
    try:
        port = parts.port
    except ValueError:
        raise RemoteError(f"{url!r} has a malformed port") from None
    if parts.scheme == "http" and not is_loopback(host):
        raise RemoteError(f"{url!r} is plain http to another host than this machine; agentstack "
                          "relays only https://, or http:// to a loopback IP address "
                          "(127.0.0.1, [::1])")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, host, port or (443 if parts.scheme == "https" else 80), path


# ----------------------------------------------------------------------------- the remote


class Remote:
    """One remote MCP endpoint: keep-alive connections (one per exchange in flight), the session
    id and protocol version it gave, the headers added to every request."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.scheme, self.host, self.port, self.path = check_url(url)
        self.url = url
        for name in headers:
            if name.lower() in OWN_HEADERS:
                raise RemoteError(f"header {name!r} is set by agentstack's relay; remove it from "
                                  "the server's headers")
        self.headers = dict(headers)
        self.session: str | None = None
        self.protocol: str | None = None
        self.lock = threading.Lock()
        self.idle: list[http.client.HTTPConnection] = []
        self._tls: Any = None

    @property
    def origin(self) -> tuple[str, str, int]:
        return self.scheme, self.host.lower(), self.port

    def _connect(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self.scheme == "https":
            import ssl

            if self._tls is None:
                self._tls = ssl.create_default_context()  # the system's roots, host checked
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=CONNECT_SECONDS,
                                               context=self._tls)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=CONNECT_SECONDS)
        conn.connect()
        if conn.sock is not None:
            conn.sock.settimeout(IDLE_SECONDS)
        return conn

    def _acquire(self) -> tuple[http.client.HTTPConnection, bool]:
        with self.lock:
            if self.idle:
                return self.idle.pop(), True
        return self._connect(), False

    def release(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse,
                *, whole: bool) -> None:
        """Back to the pool when the answer was read to its end, else closed."""
        if whole and response.isclosed() and not response.will_close:
            with self.lock:
                self.idle.append(conn)
        else:
            conn.close()

    def exchange(self, method: str, body: bytes | None,
                 accept: str) -> tuple[http.client.HTTPResponse, http.client.HTTPConnection]:
        """One request (same-origin 307/308 redirects followed); (response, its connection)."""
        path = self.path
        for _ in range(MAX_REDIRECTS + 1):
            response, conn = self._send(method, path, body, accept)
            if response.status not in (301, 302, 303, 307, 308):
                return response, conn
            location = response.getheader("Location") or ""
            conn.close()
            host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 literal
            target = urljoin(f"{self.scheme}://{host}:{self.port}{path}", location)
            parts = urlsplit(target)
            try:
                there = (parts.scheme, (parts.hostname or "").lower(),
                         parts.port or (443 if parts.scheme == "https" else 80))
            except ValueError:
                there = ("", "", 0)
            if there != self.origin:
                raise RemoteError(f"the remote redirected to {parts.scheme}://{parts.hostname}; "
                                  "agentstack follows no redirect to another host")
            if response.status not in (307, 308):
                raise RemoteError(f"the remote answered a {method} with a {response.status} "
                                  "redirect, which would drop the message")
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        raise RemoteError(f"more than {MAX_REDIRECTS} redirects")

    def _send(self, method: str, path: str, body: bytes | None,
              accept: str) -> tuple[http.client.HTTPResponse, http.client.HTTPConnection]:
        headers = {**self.headers, "Accept": accept}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self.session is not None:
            headers["Mcp-Session-Id"] = self.session
        if self.protocol is not None:
            headers["MCP-Protocol-Version"] = self.protocol
        for attempt in (0, 1):
            try:
                conn, reused = self._acquire()
            except (OSError, http.client.HTTPException) as exc:
                raise RemoteError(f"cannot reach {self.scheme}://{self.host}:{self.port}: "
                                  f"{_reason(exc)}") from None
            try:
                conn.request(method, path, body=body, headers=headers)
                return conn.getresponse(), conn
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                if reused and attempt == 0 and isinstance(
                    exc, (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)
                ):
                    continue  # a kept-alive connection the remote had closed: once more, anew
                raise RemoteError(f"the exchange with {self.scheme}://{self.host}:{self.port} "
                                  f"failed: {_reason(exc)}") from None
        raise RemoteError("unreachable")  # pragma: no cover - the loop returns or raises

    def take_session(self, response: http.client.HTTPResponse) -> None:
        """The session the remote started with its answer to `initialize`, if any."""
        session = response.getheader("Mcp-Session-Id")
        if session is None:
            return
        if not session or len(session) > 1024 or not all(0x21 <= ord(c) <= 0x7E for c in session):
            raise RemoteError("the remote gave a malformed Mcp-Session-Id")
        self.session = session

    def close(self) -> None:
        """End the session (DELETE, best effort) and drop the kept connections."""
        if self.session is not None:
            with contextlib.suppress(RemoteError, OSError, http.client.HTTPException):
                response, conn = self.exchange("DELETE", None, ACCEPT)
                response.read(64 * 1024)
                conn.close()
        with self.lock:
            idle, self.idle = self.idle, []
        for conn in idle:
            conn.close()


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


# ----------------------------------------------------------------------------- the answers


def content_type(response: http.client.HTTPResponse) -> str:
    return (response.getheader("Content-Type") or "").split(";")[0].strip().lower()


def messages(response: http.client.HTTPResponse) -> Iterator[Any]:
    """The JSON values an answer carries (a JSON body, or an event stream's `message` events),
    one at a time; what is not JSON is skipped. Raises RemoteError for an unusable answer."""
    kind = content_type(response)
    if kind == "application/json":
        data = response.read(MAX_BODY + 1)
        if len(data) > MAX_BODY:
            raise RemoteError(f"an answer larger than {MAX_BODY} bytes; dropped")
        value = _json(data)
        if value is None:
            raise RemoteError("an answer that is not JSON; dropped")
        yield from (value if isinstance(value, list) else [value])
    elif kind == "text/event-stream":
        for event, data in events(response):
            if event == "message":
                value = _json(data)
                if value is not None:
                    yield from (value if isinstance(value, list) else [value])
    else:
        raise RemoteError(f"an answer of type {kind or '(none)'!r}, not JSON or an event stream")


def events(stream: IO[bytes]) -> Iterator[tuple[str, bytes]]:
    """(event type, data) of each whole event of a text/event-stream; an event with more than
    MAX_BODY bytes of data, or a line longer than that, is skipped whole."""
    data: list[bytes] = []
    size = 0
    event = "message"
    skipping = False
    while True:
        line = stream.readline(MAX_BODY + 1)
        if not line:
            return  # an event the stream ends in the middle of is never dispatched
        if len(line) > MAX_BODY and not line.endswith(b"\n"):
            while True:
                rest = stream.readline(MAX_BODY)
                if not rest or rest.endswith(b"\n"):
                    break
            skipping = True
            continue
        line = line.rstrip(b"\n").rstrip(b"\r")
        if not line:
            if data and not skipping:
                yield event, b"\n".join(data)
            data, size, event, skipping = [], 0, "message", False
            continue
        if line.startswith(b":"):
            continue  # a comment (a keep-alive)
        field, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if field == b"data":
            size += len(value) + 1
            if size > MAX_BODY:
                skipping = True
            elif not skipping:
                data.append(value)
        elif field == b"event":
            event = value.decode("utf-8", "replace")


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def _encoded(value: Any) -> bytes:
    """One JSON value as the line the relay's checks read."""
    return (json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


# ----------------------------------------------------------------------------- the bridge


class Bridge:
    """Lines from the harness to the remote and back, each through `checks` (the stdio relay's
    `Relay`): the same decisions, the same pins, the same receipts."""

    def __init__(self, checks: relay.Relay, remote: Remote, out: IO[bytes],
                 err: IO[str] | None = None) -> None:
        self.checks = checks
        self.remote = remote
        self.out = out
        self.err = err if err is not None else sys.stderr
        self.out_lock = threading.Lock()
        self.say_lock = threading.Lock()
        self.listening = False
        self.workers: list[threading.Thread] = []

    def to_harness(self, lines: list[bytes]) -> None:
        if not lines:
            return
        with self.out_lock:
            self.out.write(b"".join(lines))
            self.out.flush()

    def say(self) -> None:
        with self.say_lock:
            while self.checks.notices:
                self.err.write(self.checks.notices.pop(0) + "\n")
            self.err.flush()

    def from_harness(self, line: bytes) -> None:
        forward, answer = self.checks.from_harness(line)
        self.to_harness(answer)
        for checked in forward:
            message = _json(checked)
            if not isinstance(message, dict):
                continue
            if "method" in message and "id" in message and message["method"] != "initialize":
                # A request: its answer may take long (a tool call), and others go on meanwhile.
                worker = threading.Thread(target=self.post, args=(checked, message), daemon=True,
                                          name="agentstack-remote-post")
                self.workers.append(worker)
                worker.start()
            else:
                # `initialize` (the session starts with its answer), a notification, an answer
                # to the remote: in order, before the next line.
                self.post(checked, message)
                if message.get("method") == "notifications/initialized" and not self.listening:
                    self.listening = True
                    threading.Thread(target=self.listen, daemon=True,
                                     name="agentstack-remote-listen").start()
        self.workers = [w for w in self.workers if w.is_alive()]
        self.say()

    def post(self, line: bytes, message: dict[str, Any]) -> None:
        """POST one message; what comes back goes through the checks to the harness. A request
        that gets no answer that passes is answered with a JSON-RPC error saying why."""
        request = "method" in message and "id" in message
        expected = relay._id_key(message["id"]) if request else None
        failure = "the remote sent no answer"
        answered = False
        try:
            response, conn = self.remote.exchange("POST", line, ACCEPT)
            whole = False
            try:
                if request and message["method"] == "initialize" and response.status < 300:
                    self.remote.take_session(response)
                if response.status in (202, 204):
                    response.read(64 * 1024)
                    whole = True
                elif not request:
                    pass  # a notification or an answer is accepted with 202: nothing to read
                elif response.status == 404 and self.remote.session is not None:
                    failure = ("the remote ended the session (HTTP 404); restart the server in "
                               "the harness")
                elif response.status >= 400 and content_type(response) != "application/json":
                    failure = f"the remote answered HTTP {response.status} {response.reason[:80]}"
                else:
                    answered, whole = self._answers(response, expected)
                    if not answered and response.status >= 400:
                        failure = f"the remote answered HTTP {response.status} {response.reason[:80]}"
            finally:
                self.remote.release(conn, response, whole=whole)
        except RemoteError as exc:
            failure = str(exc)
        except (OSError, http.client.HTTPException) as exc:
            failure = f"the exchange with the remote failed: {_reason(exc)}"
        except Exception as exc:  # noqa: BLE001 - whatever failed, the harness is answered
            failure = f"agentstack's relay failed ({type(exc).__name__}); nothing was forwarded"
        if request and not answered:
            name = self.checks.setup.server
            self.to_harness(self.checks.abandon(
                message["id"], f"agentstack: remote server {name!r}: {failure}"))
        self.say()

    def _answers(self, response: http.client.HTTPResponse,
                 expected: str | None) -> tuple[bool, bool]:
        """Relay what one answer carries; (the request was answered, the answer read whole)."""
        for value in messages(response):
            if not isinstance(value, dict):
                continue
            if "method" not in value and (expected is None
                                          or relay._id_key(value.get("id")) != expected):
                continue  # an answer to another request than the one POSTed here: dropped
            lines = self.checks.from_server(_encoded(value))
            if "method" not in value and lines:
                self._note_protocol(value)
                self.to_harness(lines)
                return True, content_type(response) == "application/json"
            self.to_harness(lines)
        return False, True

    def _note_protocol(self, answer: dict[str, Any]) -> None:
        result = answer.get("result")
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        if (self.remote.protocol is None and isinstance(version, str) and 0 < len(version) <= 64
                and all(0x21 <= ord(c) <= 0x7E for c in version)):
            self.remote.protocol = version

    def listen(self) -> None:
        """What the remote sends unasked, on a GET stream (when it offers one): its notifications
        and requests, through the checks. An answer there answers nothing asked: dropped."""
        try:
            response, conn = self.remote.exchange("GET", None, "text/event-stream")
        except RemoteError:
            return
        # Whatever ends the stream (an error too), nothing of it was forwarded unchecked.
        with contextlib.suppress(Exception), contextlib.closing(conn):
            if response.status != 200 or content_type(response) != "text/event-stream":
                return  # 405: the remote offers no such stream
            for value in messages(response):
                if isinstance(value, dict) and "method" in value:
                    self.to_harness(self.checks.from_server(_encoded(value)))
                    self.say()


def serve(checks: relay.Relay, remote: Remote, *, stdin: IO[bytes] | None = None,
          stdout: IO[bytes] | None = None) -> int:
    """Relay the harness's stdio to the remote until the harness closes its side."""
    bridge = Bridge(checks, remote, stdout if stdout is not None else sys.stdout.buffer)
    try:
        for line in relay.read_lines(stdin if stdin is not None else sys.stdin.buffer):
            bridge.from_harness(line)
    except (OSError, ValueError):
        pass
    for worker in bridge.workers:
        worker.join()  # answers in flight reach the harness before the session ends
    remote.close()
    return 0


# ----------------------------------------------------------------------------- the process


# A server rendered where the harness reads it in every folder (agentstack.launch's flag).
ONLY_IN_PROJECT = "--only-in-project"


def parse(argv: list[str]) -> dict[str, str]:
    options: dict[str, str] = {}
    names = ("--server", "--project", "--state", "--remote")
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == ONLY_IN_PROJECT and arg not in options:  # a flag: no value
            options[arg] = ""
            index += 1
            continue
        if arg not in names or arg in options or index + 1 >= len(argv):
            raise RemoteError(f"unexpected argument {arg!r}")
        value = argv[index + 1]
        if not value or "\0" in value:
            raise RemoteError(f"{arg} needs a value")
        if arg in ("--project", "--state") and not value.startswith("/"):
            raise RemoteError(f"{arg} {value!r}: an absolute path is needed")
        options[arg] = value
        index += 2
    if len(set(options) & set(names)) != len(names):
        raise RemoteError("--server, --project, --state and --remote go together")
    return options


def remote_entry(setup: relay.Setup, name: str, url: str) -> dict[str, Any]:
    """The server's trusted consent entry, which must be a remote one at this very URL."""
    servers = setup.consent.get("servers") if isinstance(setup.consent, dict) else None
    entry = servers.get(name) if isinstance(servers, dict) else None
    if not isinstance(entry, dict) or entry.get("transport") != "http":
        raise RemoteError(f"server {name!r} is not a remote server in the trusted consent; run "
                          "'agentstack apply --write'")
    if entry.get("url") != url:
        raise RemoteError(f"the URL {url!r} is not the trusted one for server {name!r}; run "
                          "'agentstack apply --write'")
    return entry


def headers_of(entry: dict[str, Any], state: str,
               read_secret: SecretReader) -> tuple[dict[str, str], list[str]]:
    """The headers to add (literal, or read from the secret store) and the secret values."""
    from agentstack import layout

    headers: dict[str, str] = {}
    values: list[str] = []
    declared = entry.get("headers") or {}
    if not isinstance(declared, dict):
        raise RemoteError("the trusted consent's headers are not a table")
    for key, source in sorted(declared.items()):
        if not isinstance(source, dict):
            raise RemoteError(f"header {key!r} has no value in the trusted consent")
        if "literal" in source:
            headers[key] = str(source["literal"])
            continue
        try:
            headers[key] = read_secret(layout.secrets_dir(state), str(source.get("secret")))
        except Exception as exc:  # noqa: BLE001 - the store refused: nothing is reached
            raise RemoteError(str(exc)) from None
        values.append(headers[key])
    return headers, values


def prepare(state: str, project: str, name: str, url: str,
            read_secret: SecretReader) -> tuple[relay.Relay, Remote]:
    """The checks and the remote for server `name` of the trusted project; RemoteError saying
    why not (the project not trusted, the URL not the trusted one, a secret not stored), before
    any connection is made."""
    setup = relay.load_setup(state, project, name)
    if setup.closed is not None:
        raise RemoteError(setup.closed)
    entry = remote_entry(setup, name, url)
    headers, secret_values = headers_of(entry, state, read_secret)
    return relay.Relay(setup, secret_values), Remote(str(entry["url"]), headers)


def main(argv: list[str], *, read_secret: SecretReader,
         store_closed: Callable[[str], bool]) -> int:
    """`agentstack.launch --server … --remote URL`: the process the harness starts (`store_closed`:
    whether the kernel closes the state directory here, as inside `agentstack run`)."""
    try:
        options = parse(argv)
    except RemoteError as exc:
        sys.stderr.write(f"agentstack launch: {exc}\n{USAGE}\n")
        return 2
    name = options["--server"]
    if ONLY_IN_PROJECT in options:
        # Before anything of the server (its secrets, a connection) is touched.
        reason = relay.outside_project(options["--project"])
        if reason is not None:
            return relay.refuse_start(name, reason)
    address = relay.broker_address(options["--project"])
    if address is not None and store_closed(options["--state"]):
        # Inside `agentstack run`: the relay runs in run's broker, outside the harness's sandbox,
        # where the secret store and the pins are (agentstack.serverbroker).
        return relay.pump_to_broker(address, name)
    try:
        checks, remote = prepare(options["--state"], options["--project"], name,
                                 options["--remote"], read_secret)
    except RemoteError as exc:
        # Nothing of an untrusted project is reached: not even a connection is opened.
        sys.stderr.write(f"agentstack launch: {name}: not started: {exc}\n")
        return 1
    return serve(checks, remote)

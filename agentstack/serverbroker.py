"""`agentstack run`'s MCP server broker: each stdio server runs outside the harness's sandbox,
in its own, with its secrets; the harness reaches it only as a stream of MCP messages.

Inside `run` the harness starts its servers through the rendered launcher, in the harness's own
sandbox, where the secret store, the pins and the receipts (all under `$AGENTSTACK_HOME`) are
closed. So before the harness starts, `run` listens on a loopback port (the one port besides the
credential proxy's that the sandbox may connect to, never bind before us) and writes the port and
a token into the run's read-only copies (`ro/mcp-pins.json`). The launcher inside the sandbox
connects, names its server, and from then on only pumps bytes. Here, in the unconfined parent:

- the server's command line, directory and literal environment come from the trusted consent
  document (never from the request), its `secret:NAME` values from the store;
- the relay (`agentstack.relay`) checks every message, as outside `run`: pins recorded and
  checked, tools allowed by name, receipts kept;
- the server starts under its own sandbox (`agentstack.serverbox`), unless the manifest opted it
  out (`sandbox = false`).

A secret therefore reaches only the server's own process: never the harness's environment, its
files or anything its sandbox can read. A server whose secret is not stored gets one accurate
line: `no secret 'NAME': run 'agentstack secret set NAME'`.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import secrets as _random
import socket
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import subprocess

HELLO_BYTES = 4096
HELLO_TIMEOUT = 30.0
BASE_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR")


class Broker:
    def __init__(self, root: Path, document: dict[str, Any], digest: str) -> None:
        from agentstack.paths import agentstack_home

        self.root = root.resolve()
        self.document = document
        self.digest = digest
        self.state_home = str(agentstack_home())
        self.token = _random.token_hex(16)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port: int = self.listener.getsockname()[1]
        self.children: list[subprocess.Popen[bytes]] = []
        self.lock = threading.Lock()
        self.closed = False
        self.thread: threading.Thread | None = None

    def serve(self) -> None:
        """Start answering (a thread): only once `run`'s launcher is started, which wants this
        process single-threaded. Until then connections wait in the listen queue."""
        if self.thread is None:
            self.thread = threading.Thread(target=self._accept, name="agentstack-broker",
                                           daemon=True)
            self.thread.start()

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        with self.lock:
            children = list(self.children)
        for child in children:
            if child.poll() is None:
                child.kill()
            with contextlib.suppress(Exception):
                child.wait(timeout=10)
            from agentstack import serverbox

            serverbox.release(child)

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="agentstack-broker-conn",
                             daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            rfile = conn.makefile("rb")
            wfile = conn.makefile("wb")
            try:
                name = self._hello(conn, rfile)
            except ValueError as exc:
                _say(wfile, {"error": str(exc)})
                return
            if self.document["servers"][name].get("transport") == "http":
                self._remote(name, wfile, rfile)
                return
            try:
                argv, env, cwd, secret_values = self._server(name)
            except ValueError as exc:
                _say(wfile, {"error": str(exc)})
                return
            _say(wfile, {"ok": True})
            self._relay(name, argv, env, cwd, secret_values, rfile, wfile)

    def _hello(self, conn: socket.socket, rfile: IO[bytes]) -> str:
        conn.settimeout(HELLO_TIMEOUT)
        line = rfile.readline(HELLO_BYTES)
        conn.settimeout(None)
        try:
            hello = json.loads(line)
        except ValueError:
            raise ValueError("not a request of agentstack's launcher") from None
        token = hello.get("token") if isinstance(hello, dict) else None
        name = hello.get("server") if isinstance(hello, dict) else None
        if not isinstance(token, str) or not hmac.compare_digest(token, self.token):
            raise ValueError("not a request of agentstack's launcher")
        if not isinstance(name, str) or name not in self.document.get("servers", {}):
            raise ValueError(f"server {name!r} is not in the trusted consent")
        return name

    def _remote(self, name: str, wfile: IO[bytes], rfile: IO[bytes]) -> None:
        """A remote (URL) server: the relay's remote mode here, with the secrets of its headers
        (agentstack.remoterelay); the harness's sandbox reaches only this broker."""
        from agentstack import remoterelay
        from agentstack.launch import read_secret

        try:
            checks, remote = remoterelay.prepare(self.state_home, str(self.root), name,
                                                 str(self.document["servers"][name].get("url")),
                                                 read_secret)
        except remoterelay.RemoteError as exc:
            _say(wfile, {"error": str(exc)})
            return
        _say(wfile, {"ok": True})
        remoterelay.serve(checks, remote, stdin=rfile, stdout=wfile)

    def _server(self, name: str) -> tuple[list[str], dict[str, str], str, list[str]]:
        from agentstack.secrets import SecretStore, server_env

        server = self.document["servers"][name]
        if server.get("transport") == "http" or not server.get("command"):
            raise ValueError(f"server {name!r} is not a stdio server")
        env = {k: v for k, v in os.environ.items() if k in BASE_ENV}
        values = server_env(server.get("env", {}), env, SecretStore())
        argv = [str(server["command"]), *(str(a) for a in server.get("args", []))]
        cwd = os.path.realpath(os.path.join(self.root, server.get("cwd", ".")))
        return argv, env, cwd, values

    def _relay(self, name: str, argv: list[str], env: dict[str, str], cwd: str,
               secret_values: list[str], rfile: IO[bytes], wfile: IO[bytes]) -> None:
        from agentstack import layout, relay, serverbox

        setup = relay.load_setup(self.state_home, str(self.root), name)
        if setup.closed is not None or setup.consent is None:
            _mcp_error(wfile, f"agentstack: server {name!r} not started: {setup.closed}")
            return
        consent = setup.consent
        if serverbox.wanted(consent, name):
            secret_values = [*secret_values,
                             *serverbox.credential_values(consent, name, self.state_home)]

        def start(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
            import subprocess

            if serverbox.wanted(consent, name):
                child = serverbox.start(
                    str(self.root), consent, name, argv, env, cwd=cwd,
                    cache=layout.box_file(self.state_home, str(self.root), name),
                    key=[setup.digest, str(self.root), name], state_home=self.state_home)
            else:
                child = subprocess.Popen(
                    argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=cwd,
                    bufsize=0)
            with self.lock:
                self.children.append(child)
            return child

        try:
            relay.serve(relay.Relay(setup, secret_values), argv, env, start=start,
                        stdin=rfile, stdout=wfile)
        except serverbox.ServerConfinementError as exc:
            _mcp_error(wfile, f"agentstack: server {name!r} not started: {exc}")
        finally:
            with self.lock:
                started = list(self.children)
            for child in started:
                if child.poll() is not None:
                    serverbox.release(child)  # its network proxy, if it has one


def _say(wfile: IO[bytes], message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        wfile.write((json.dumps(message) + "\n").encode("utf-8"))
        wfile.flush()


def _mcp_error(wfile: IO[bytes], text: str) -> None:
    """Nothing to relay to: the launcher reports it on stderr (it reads the hello line first)."""
    _say(wfile, {"jsonrpc": "2.0", "method": "notifications/message",
                 "params": {"level": "error", "data": text}})


def has_stdio_servers(document: dict[str, Any]) -> bool:
    return any(s.get("transport") != "http" for s in document.get("servers", {}).values())


def run_bundle(root: Path, document: dict[str, Any], digest: str, broker: Broker | None) -> bytes:
    """`ro/mcp-pins.json`: where the launchers inside the run reach the broker."""
    data: dict[str, Any] = {"project": str(root.resolve()), "digest": digest}
    if broker is not None:
        data["broker"] = {"port": broker.port, "token": broker.token}
    return json.dumps(data, sort_keys=True).encode("utf-8")

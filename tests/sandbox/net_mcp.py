"""A stdio MCP server for the relay's network tests (standard library only). Its tools:

- `connect` ({"proto": "tcp" | "udp", "host": str, "port": int}): opens a TCP connection (or
  sends one UDP datagram) and answers `ok` or `error: <ERRNO NAME>` (the kernel's refusal);
- `child` ({"host", "port"}): the same TCP connect from a child process, which prints the errno
  and exits 3 when refused: answers `exit <code>: <its output>`;
- `proxied` ({"url"}): a GET of an `http://` URL through the proxy `HTTP_PROXY` names (with its
  token), as a client honouring `HTTP_PROXY` sends it: answers the status line and the body;
- `tunnel` ({"host", "port"}): a CONNECT through that proxy, then a GET inside the tunnel;
- `route` ({"env", "base_env"}): a GET of `$base_env/check` with `Authorization: Bearer $env`
  (a credential route of the proxy): answers the status line and the body;
- `getenv` ({"name"}): the value of an environment variable (or `<unset>`)."""

from __future__ import annotations

import base64
import errno
import json
import os
import socket
import subprocess
import sys
from typing import Any

TOOLS = [{"name": "connect", "description": "Connect to host:port (tcp) or send a datagram (udp).",
          "inputSchema": {"type": "object", "properties": {
              "proto": {"type": "string"}, "host": {"type": "string"},
              "port": {"type": "integer"}}}}]
TOOLS += [{"name": name, "description": f"The {name} probe.", "inputSchema": {"type": "object"}}
          for name in ("child", "proxied", "tunnel", "route", "getenv")]

CHILD = """
import errno, socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=120).close()
except OSError as exc:
    print(errno.errorcode.get(exc.errno or 0, str(exc)))
    sys.exit(3)
print("connected")
"""


def _proxy() -> tuple[str, int, str]:
    from urllib.parse import urlsplit

    parts = urlsplit(os.environ["HTTP_PROXY"])
    token = base64.b64encode(f"{parts.username}:{parts.password}".encode()).decode()
    return str(parts.hostname), int(parts.port or 80), token


def _read_all(sock: socket.socket) -> str:
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0].decode() + " | " + body.decode("utf-8", "replace")


def probe(name: str, arguments: dict[str, Any]) -> str:
    try:
        if name == "child":
            done = subprocess.run([sys.executable, "-I", "-c", CHILD, str(arguments["host"]),
                                   str(arguments["port"])], capture_output=True, text=True,
                                  timeout=120, check=False)
            return f"exit {done.returncode}: {(done.stdout + done.stderr).strip()}"
        if name == "getenv":
            return os.environ.get(str(arguments["name"]), "<unset>")
        if name == "route":
            from urllib.parse import urlsplit

            base = urlsplit(os.environ[str(arguments["base_env"])])
            with socket.create_connection((str(base.hostname), int(base.port or 80)),
                                          timeout=120) as sock:
                path = str(arguments.get("path", "check"))
                sock.sendall(f"GET {base.path}/{path} HTTP/1.1\r\nHost: {base.netloc}\r\n"
                             f"Authorization: Bearer {os.environ[str(arguments['env'])]}\r\n"
                             "Connection: close\r\n\r\n".encode())
                return _read_all(sock)
        host, port, token = _proxy()
        with socket.create_connection((host, port), timeout=120) as sock:
            if name == "tunnel":
                target = f"{arguments['host']}:{arguments['port']}"
                sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
                             f"Proxy-Authorization: Basic {token}\r\n\r\n".encode())
                reply = b""
                while b"\r\n\r\n" not in reply:
                    chunk = sock.recv(1)
                    if not chunk:
                        return "closed: " + reply.decode("utf-8", "replace")
                    reply += chunk
                if b" 200 " not in reply.split(b"\r\n", 1)[0]:
                    return reply.split(b"\r\n", 1)[0].decode() + " | refused"
                sock.sendall(f"GET /tunnelled HTTP/1.1\r\nHost: {target}\r\n"
                             "Connection: close\r\n\r\n".encode())
                return _read_all(sock)
            url = str(arguments["url"])
            authority = url.split("/", 3)[2]
            sock.sendall(f"GET {url} HTTP/1.1\r\nHost: {authority}\r\n"
                         f"Proxy-Authorization: Basic {token}\r\nConnection: close\r\n\r\n"
                         .encode())
            return _read_all(sock)
    except OSError as exc:
        return f"error: {errno.errorcode.get(exc.errno or 0, str(exc))}"


def attempt(arguments: dict[str, Any]) -> str:
    host, port = str(arguments.get("host", "127.0.0.1")), int(arguments.get("port", 0))
    try:
        if arguments.get("proto") == "udp":
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.sendto(b"x", (host, port))
        else:
            socket.create_connection((host, port), timeout=120).close()  # refused at once when denied
    except OSError as exc:
        return f"error: {errno.errorcode.get(exc.errno or 0, str(exc))}"
    return "ok"


def answer(message: dict[str, Any]) -> dict[str, Any] | None:
    method, msg_id = message.get("method"), message.get("id")
    if msg_id is None:
        return None
    if method == "initialize":
        result: Any = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                       "serverInfo": {"name": "net", "version": "0"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        params = message.get("params") or {}
        arguments = params.get("arguments") or {}
        name = params.get("name")
        text = attempt(arguments) if name == "connect" else probe(str(name), arguments)
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    else:
        return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32601, "message": "no method"}}
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


def main() -> None:
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        out = answer(message) if isinstance(message, dict) else None
        if out is not None:
            sys.stdout.write(json.dumps(out) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()

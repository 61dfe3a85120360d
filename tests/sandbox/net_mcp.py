"""A stdio MCP server for the relay's network tests (standard library only): one tool, `connect`
({"proto": "tcp" | "udp", "host": str, "port": int}), that opens a TCP connection (or sends one
UDP datagram) and answers `ok` or `error: <ERRNO NAME>` (the kernel's refusal, as it came)."""

from __future__ import annotations

import errno
import json
import socket
import sys
from typing import Any

TOOLS = [{"name": "connect", "description": "Connect to host:port (tcp) or send a datagram (udp).",
          "inputSchema": {"type": "object", "properties": {
              "proto": {"type": "string"}, "host": {"type": "string"},
              "port": {"type": "integer"}}}}]


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
        result = {"content": [{"type": "text", "text": attempt(params.get("arguments") or {})}],
                  "isError": False}
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

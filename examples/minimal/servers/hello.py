"""`hello`: a tiny MCP server over stdio, standard library only.

MCP's stdio transport is one JSON-RPC 2.0 message per line: requests arrive on stdin,
responses leave on stdout, and anything for humans goes to stderr. This server answers the
handful of methods a client needs (initialize, ping, tools/list, tools/call) and offers one
tool, `hello(name)`. Run it from the example root with `python3 servers/hello.py`.
"""

import json
import sys

# Protocol revisions this server can speak; it answers with the client's if it knows it.
VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")

TOOLS = [
    {
        "name": "hello",
        "description": "Greet someone by name.",
        "inputSchema": {
            "type": "object",
            "properties": {"name": {"type": "string", "description": "Who to greet"}},
            "required": ["name"],
        },
    }
]


def handle(method, params):
    """The result for one request, or raise LookupError / ValueError for an error reply."""
    if method == "initialize":
        asked = params.get("protocolVersion")
        return {
            "protocolVersion": asked if asked in VERSIONS else VERSIONS[-1],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "hello", "version": "1.0.0"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        if params.get("name") != "hello":
            raise ValueError(f"unknown tool: {params.get('name')!r}")
        arguments = params.get("arguments")
        name = str(arguments.get("name", "world")) if isinstance(arguments, dict) else "world"
        return {"content": [{"type": "text", "text": f"Hello, {name}!"}], "isError": False}
    raise LookupError(method)


def reply(message):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def error(request_id, code, text):
    reply({"id": request_id, "error": {"code": code, "message": text}})


def main():
    sys.stdin.reconfigure(encoding="utf-8")  # MCP messages are UTF-8 whatever the locale
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            error(None, -32700, "parse error")
            continue
        if not isinstance(message, dict) or "method" not in message:
            continue  # a response or junk: this server sends no requests, so ignore it
        if "id" not in message:
            continue  # a notification (e.g. notifications/initialized): no reply
        try:
            params = message.get("params")
            result = handle(message["method"], params if isinstance(params, dict) else {})
        except LookupError:
            error(message["id"], -32601, f"method not found: {message['method']}")
        except ValueError as exc:
            error(message["id"], -32602, str(exc))
        else:
            reply({"id": message["id"], "result": result})


if __name__ == "__main__":
    main()

"""A tiny stdio MCP server (stdlib only) for harness tests: server name ``notes``, one tool
``add_note`` ({"text": str}) that appends the text as a line to the file named by ``$NOTES_FILE``
(default ``notes.txt`` in the working directory) and answers ``added note N``.

Run it as ``python3 -I /abs/path/notes_mcp.py``. Newline-delimited JSON-RPC 2.0 on stdin/stdout.

For the relay's tests: ``$NOTES_DESCRIPTION_FILE``, when that file exists, is read for
``add_note``'s description at each start (a server that changes what it says); with
``$NOTES_EXTRA_TOOLS`` set it also lists ``erase_notes`` (empties the file) and ``read_path``
({"path": str}: answers the file's first line, or ``error: <errno name>``); with
``$NOTES_TOKEN_FILE`` it writes ``sha256:<hex of $NOTES_TOKEN>`` (or ``<unset>``) to that file
at start: proof of the value received, without the value on disk.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

TOOLS = [{
    "name": "add_note",
    "description": "Append a note to the notes file.",
    "inputSchema": {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "The note."}},
        "required": ["text"],
    },
}]


EXTRA_TOOLS = [
    {"name": "erase_notes", "description": "Erase every note.",
     "inputSchema": {"type": "object", "properties": {}}},
    {"name": "read_path", "description": "Read the first line of a file.",
     "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}},
                     "required": ["path"]}},
]


def _tools() -> list[dict[str, Any]]:
    tools = [dict(t) for t in TOOLS]
    changed = os.environ.get("NOTES_DESCRIPTION_FILE")
    if changed and os.path.exists(changed):
        with open(changed, encoding="utf-8") as fh:
            tools[0]["description"] = fh.read().strip()
    if os.environ.get("NOTES_EXTRA_TOOLS"):
        tools += EXTRA_TOOLS
    return tools


def _reply(msg_id: Any, result: Any = None, error: dict[str, Any] | None = None) -> None:
    out: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id}
    if error is not None:
        out["error"] = error
    else:
        out["result"] = result
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


def _text(text: str, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": error}


def _call(params: dict[str, Any]) -> dict[str, Any]:
    name = params.get("name")
    if name == "erase_notes" and os.environ.get("NOTES_EXTRA_TOOLS"):
        with open(os.environ.get("NOTES_FILE", "notes.txt"), "w", encoding="utf-8"):
            pass
        return _text("erased the notes")
    if name == "read_path" and os.environ.get("NOTES_EXTRA_TOOLS"):
        import errno

        path = str((params.get("arguments") or {}).get("path", ""))
        try:
            with open(os.path.expanduser(path), encoding="utf-8") as fh:
                return _text("read: " + fh.readline().strip())
        except OSError as exc:
            return _text(f"error: {errno.errorcode.get(exc.errno or 0, 'unknown')}", True)
    if name != "add_note":
        return {"content": [{"type": "text", "text": f"unknown tool {params.get('name')}"}],
                "isError": True}
    text = str((params.get("arguments") or {}).get("text", ""))
    path = os.environ.get("NOTES_FILE", "notes.txt")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text + "\n")
    with open(path, encoding="utf-8") as fh:
        count = sum(1 for _ in fh)
    return {"content": [{"type": "text", "text": f"added note {count}"}], "isError": False}


def main() -> None:
    token_file = os.environ.get("NOTES_TOKEN_FILE")
    if token_file:
        import hashlib

        token = os.environ.get("NOTES_TOKEN")
        with open(token_file, "w", encoding="utf-8") as fh:
            fh.write("sha256:" + hashlib.sha256(token.encode()).hexdigest() if token else "<unset>")
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict) or "id" not in msg:
            continue  # notifications (initialized, cancelled, ...) need no answer
        method = msg.get("method")
        params = msg.get("params") or {}
        if method == "initialize":
            _reply(msg["id"], {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "notes", "version": "1.0.0"},
            })
        elif method == "tools/list":
            _reply(msg["id"], {"tools": _tools()})
        elif method == "tools/call":
            _reply(msg["id"], _call(params))
        elif method == "ping":
            _reply(msg["id"], {})
        elif method in ("resources/list", "resources/templates/list", "prompts/list"):
            key = {"resources/list": "resources", "resources/templates/list": "resourceTemplates",
                   "prompts/list": "prompts"}[method]
            _reply(msg["id"], {key: []})
        else:
            _reply(msg["id"], error={"code": -32601, "message": f"method not found: {method}"})


if __name__ == "__main__":
    main()

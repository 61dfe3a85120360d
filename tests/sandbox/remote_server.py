"""A real Streamable-HTTP MCP server on 127.0.0.1 for the remote relay's tests: the `mcp`
package's own server (MCPServer, served by uvicorn in a thread of the test process), which keeps
a record of every HTTP request it received (method, session, the headers the tests look for) and
of every tool it ran, and whose tool description the test can change while it runs.

Tools: `add_note(text)` (sends a log notification while it runs, then answers), `erase_notes()`
(the one a manifest denies: it must never run) and `whoami()` (answers the Authorization header
it was sent, which the relay must withhold from what the harness reads)."""

from __future__ import annotations

import socket
import threading
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer

from tests.harness.deadline import wait_for

DESCRIPTION = "Append a note to the notes file."


class Notes(MCPServer):
    """The listing's description of add_note is read from `self.description` at every listing."""

    description_now = DESCRIPTION

    async def list_tools(self) -> Any:
        tools = await super().list_tools()
        for tool in tools:
            if tool.name == "add_note":
                tool.description = self.description_now
        return tools


class RemoteServer:
    """Serves until `stop()`; `url` is where; `requests` and `ran` are what it saw."""

    def __init__(self, *, json_response: bool = False) -> None:
        self.requests: list[dict[str, str]] = []
        self.ran: list[str] = []
        self.lock = threading.Lock()
        self.mcp = Notes("notes")
        self._tools()
        app = self.mcp.streamable_http_app(json_response=json_response)

        async def recorded(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                           for k, v in scope["headers"]}
                with self.lock:
                    self.requests.append({"method": scope["method"], "path": scope["path"],
                                          **{k: headers.get(k, "") for k in (
                                              "authorization", "x-team", "mcp-session-id",
                                              "mcp-protocol-version", "accept")}})
            await app(scope, receive, send)

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port: int = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.server = uvicorn.Server(uvicorn.Config(recorded, log_level="error", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True, name="remote-mcp")
        self.thread.start()
        assert wait_for(lambda: self.server.started, 60), "the test MCP server did not start"

    def _tools(self) -> None:
        @self.mcp.tool(description=DESCRIPTION)
        async def add_note(text: str, ctx: Context) -> str:
            await ctx.log("info", f"adding a note of {len(text)} characters")
            with self.lock:
                self.ran.append(f"add_note:{text}")
            return f"added note {text!r}"

        @self.mcp.tool(description="Erase every note.")
        async def erase_notes() -> str:
            with self.lock:
                self.ran.append("erase_notes")
            return "erased"

        @self.mcp.tool(description="Say which credentials this request carried.")
        async def whoami(ctx: Context) -> str:
            with self.lock:
                self.ran.append("whoami")
            return f"you sent {(ctx.headers or {}).get('authorization')}"

    def seen(self) -> list[dict[str, str]]:
        with self.lock:
            return list(self.requests)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)
        self.sock.close()

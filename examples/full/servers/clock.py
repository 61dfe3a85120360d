"""`clock`: an MCP server over stdio with two tools, `now()` and `add(a, b)`.

Start it from the example root with `python3 servers/clock.py`; it then speaks MCP
(newline-delimited JSON-RPC) on stdin/stdout until stdin closes. It needs the `mcp`
package (2.x) to be importable by that `python3`.
"""

from datetime import UTC, datetime

from mcp.server.mcpserver import MCPServer

server = MCPServer(
    "clock", version="1.0.0", instructions="Tells the time in UTC and adds integers."
)


@server.tool()
def now() -> str:
    """The current time in UTC, as an ISO 8601 string such as 2025-01-31T12:00:00+00:00."""
    return datetime.now(UTC).isoformat(timespec="seconds")


@server.tool()
def add(a: int, b: int) -> int:
    """The sum of two integers."""
    return a + b


if __name__ == "__main__":
    server.run("stdio")

"""`notes`: an MCP server over stdio that keeps notes in memory (they vanish when it exits).

Tools: `add_note(text)` and `list_notes()`. Start it from the example root with
`python3 servers/notes.py`; it needs the `mcp` package (2.x) importable by that `python3`.

Environment (set by the manifest's `env` table):
  NOTES_LOG_LEVEL  logging level on stderr (default "warning"); stdout is the protocol.
  NOTES_API_TOKEN  only reported as present or absent, never required and never printed:
                   it shows how a `secret:NAME` value reaches a server.
"""

import logging
import os
import sys

from mcp.server.mcpserver import MCPServer

LEVEL = os.environ.get("NOTES_LOG_LEVEL", "warning").upper()
logging.basicConfig(
    stream=sys.stderr,
    level=getattr(logging, LEVEL, logging.WARNING),
    format="notes: %(levelname)s %(message)s",
)
log = logging.getLogger("notes")

server = MCPServer(
    "notes", version="1.0.0", instructions="Keeps short text notes for this session."
)
NOTES: list[str] = []


@server.tool()
def add_note(text: str) -> str:
    """Store a note; returns a confirmation with its number."""
    NOTES.append(text)
    log.info("stored note %d", len(NOTES))
    return f"note {len(NOTES)} saved"


@server.tool()
def list_notes() -> list[str]:
    """Every note stored so far, oldest first."""
    return list(NOTES)


if __name__ == "__main__":
    log.info("token %s", "present" if os.environ.get("NOTES_API_TOKEN") else "absent")
    server.run("stdio")

"""VS Code: `.vscode/mcp.json` (`servers`), the guard in `.github/hooks/agentstack.json` (the
Copilot hooks file, which VS Code's Copilot sessions run), `AGENTS.md`, `.agents/skills/`.

Not verified by a binary (VS Code has no installable command-line harness that runs headless);
from VS Code's MCP configuration reference: `servers.<n>` is `{type: "stdio", command, args, env,
envFile}` or `{type: "http", url, headers}`, and `${env:VAR}` is read from VS Code's environment
(so secrets are references, never values). VS Code asks the user before it starts a workspace
server; agentstack's consent comes first, it does not replace that prompt.
"""

from __future__ import annotations

from typing import Any

from .base import FileOperation, OwnedBlock, RenderContext
from .common import (
    header_values,
    instructions_text,
    remote_launched,
    servers_file,
    skill_files,
    stdio_server,
)
from .copilot import hooks_file_operation

NAME = "vscode"


def _server(context: RenderContext, server: dict[str, Any]) -> dict[str, Any]:
    relayed = remote_launched(context, server) if server["transport"] == "http" else None
    if relayed is not None:  # through the relay: the config holds a command, never the URL
        return {"type": "stdio", "command": relayed[0], "args": relayed[1]}
    if server["transport"] == "http":
        out: dict[str, Any] = {"type": "http", "url": server["url"]}
        if server["headers"]:
            out["headers"] = header_values(server, "${{env:{var}}}")
        return out
    command, args, literal = stdio_server(context, server)  # no documented cwd key
    out = {"type": "stdio", "command": command, "args": args}
    if literal:
        out["env"] = literal
    return out


class VSCodeAdapter:
    @property
    def name(self) -> str:
        return NAME

    def render(self, context: RenderContext) -> list[FileOperation]:
        ops: list[FileOperation] = [
            servers_file(context, ".vscode/mcp.json", "servers", _server),
            # The same file, byte for byte, as Copilot CLI's: the two merge.
            hooks_file_operation(context),
        ]
        ops.extend(skill_files(context, ".agents/skills"))
        if context.consent["instructions"]:
            ops.append(OwnedBlock(path="AGENTS.md", text=instructions_text(context)))
        return ops

"""Cline CLI: the guard as `.clinerules/hooks/PreToolUse`, the locked servers in the user's
`~/.cline/data/settings/cline_mcp_settings.json`, `AGENTS.md` and `.agents/skills/`.

Facts (measured with Cline CLI 3.0.65):
* Cline has no trust of its own: an executable `PreToolUse` in `.clinerules/hooks/` (or
  `.cline/hooks/`) of its workspace root (the checkout's top) runs before every tool call as soon
  as Cline starts there (the review says so);
* the hook gets JSON on stdin (`tool_call: {name, input}`, `preToolUse.parameters` as JSON
  texts) and blocks only by printing `{"cancel": true, ...}`, which aborts the run; its exit code
  does not block (an exit 2 lets the tool run): the rendered hook prints a cancel unless the guard
  allowed, also when the guard cannot be started;
* Cline reads MCP servers only from `<data dir>/settings/cline_mcp_settings.json` (the data
  directory `~/.cline/data`, or `--data-dir`; the file `CLINE_MCP_SETTINGS_PATH`): there is no
  project file, so the locked servers are rendered at user level (every one behind the relay,
  named with its project) and `revoke` removes them;
* it starts each server as its own child, in its own working directory and environment: the
  relay reads that directory from the kernel (/proc/PID/cwd of its parent) and starts a server
  only where Cline runs in the server's project (`--only-in-project`); in any other folder the
  relay answers `initialize` with an MCP error and nothing of the server runs;
* its MCP tools are named `<server>__<tool>`; without a `timeout` (seconds) it gives a server 3 s
  to answer `initialize` and skips it otherwise;
* it leaves a hub daemon (`cline --cline-hub-daemon --cwd DIR`) running after a command.
"""

from __future__ import annotations

import shlex
from typing import Any

from .base import FileOperation, OwnedBlock, OwnedKeys, RenderContext, WholeFile
from .common import (
    GENERATED_NOTE,
    guard_command,
    header_values,
    instructions_text,
    launched,
    remote_launched,
    skill_files,
)

NAME = "cline"
ONLY_IN_PROJECT = "--only-in-project"  # agentstack.launch.ONLY_IN_PROJECT (a test ties them)
HOOK = ".clinerules/hooks/PreToolUse"
MCP_SETTINGS = (".cline", "data", "settings", "cline_mcp_settings.json")
# Seconds Cline gives a server to answer (its `timeout`; without one it gives `initialize` 3 s,
# too little for a server behind the relay on a busy machine).
SERVER_TIMEOUT_S = 60
# What the hook prints when the guard did not allow (and said nothing Cline reads).
_CANCEL = '{"cancel": true, "errorMessage": "agentstack guard: the guard could not be run; '\
    'denying to stay safe"}'

# Cline blocks only on a printed cancel: the guard's answer is printed when it denied (its deny
# shape is Cline's), a cancel of ours when it said nothing, and `{"cancel": false}` only when it
# allowed (exit 0). The hook itself always exits 0 (Cline reads nothing from its exit code).
_HOOK_TEMPLATE = """\
#!/bin/sh
# {note}
# The agentstack guard for Cline: every tool call is checked by the guard first; it runs only
# when the guard allows it, and is cancelled otherwise and on any error.
answer=$({guard})
if [ "$?" -eq 0 ]; then
  printf '%s\\n' '{{"cancel": false}}'
elif [ -n "$answer" ]; then
  printf '%s\\n' "$answer"
else
  printf '%s\\n' {cancel}
fi
exit 0
"""


def hook_source(context: RenderContext) -> str:
    return _HOOK_TEMPLATE.format(note=GENERATED_NOTE, guard=guard_command(context, NAME),
                                 cancel=shlex.quote(_CANCEL))


def _server(context: RenderContext, server: dict[str, Any]) -> dict[str, Any]:
    relayed = remote_launched(context, server) if server["transport"] == "http" else None
    if relayed is not None:  # through the relay: the config holds a command, never the URL
        # Read in every folder Cline runs in: reached only where Cline runs in this project.
        remote_args = list(relayed[1])
        remote_args.insert(remote_args.index("--remote"), ONLY_IN_PROJECT)
        return {"command": relayed[0], "args": remote_args, "timeout": SERVER_TIMEOUT_S}
    if server["transport"] == "http":
        out: dict[str, Any] = {"type": "streamableHttp", "url": server["url"],
                               "timeout": SERVER_TIMEOUT_S}
        if server["headers"]:
            out["headers"] = header_values(server, "${{{var}}}")
        return out
    # The file is the user's, read wherever Cline starts: every server starts in its own
    # directory (env -C), never in Cline's working directory.
    command, args = launched(context, server, "/usr/bin/env",
                             ["-C", str(context.root / server.get("cwd", ".")),
                              server["command"], *server["args"]])
    if "--server" in args:
        # Read in every folder Cline runs in: the relay starts it only where Cline runs in this
        # project, and answers an MCP error everywhere else (agentstack.relay.outside_project).
        args.insert(args.index("--"), ONLY_IN_PROJECT)
    literal = {k: v["literal"] for k, v in sorted(server["env"].items()) if "literal" in v}
    out = {"command": command, "args": args, "timeout": SERVER_TIMEOUT_S}
    if literal:
        out["env"] = literal
    return out


REVIEW_NOTE = (
    "Cline has no trust of its own: once 'apply --write' renders .clinerules/hooks, Cline runs "
    "them as soon as it starts in this checkout, without asking (the agentstack guard hook then "
    "checks every tool call). Cline reads MCP servers only from the user's "
    "~/.cline/data/settings/cline_mcp_settings.json: the locked servers are written there, "
    "read in every folder Cline runs in; agentstack's relay starts a stdio server only where "
    "Cline runs in this project and reaches a remote (URL) server only from there (elsewhere it "
    "answers an MCP error and starts or reaches nothing), and 'revoke' removes them."
)


class ClineAdapter:
    @property
    def name(self) -> str:
        return NAME

    @property
    def review_note(self) -> str:
        """Shown in the `trust` review (optional, not part of the Adapter protocol)."""
        return REVIEW_NOTE

    def render(self, context: RenderContext) -> list[FileOperation]:
        ops: list[FileOperation] = [
            WholeFile(path=HOOK, content=hook_source(context).encode("utf-8"), executable=True)
        ]
        ops.extend(skill_files(context, ".agents/skills"))
        if context.consent["instructions"]:
            ops.append(OwnedBlock(path="AGENTS.md", text=instructions_text(context)))
        servers = context.consent["servers"]
        if servers:
            ops.append(
                OwnedKeys(
                    path=str(context.user_home.joinpath(*MCP_SETTINGS)),
                    format="json",
                    keys={("mcpServers", n): _server(context, s)
                          for n, s in sorted(servers.items())},
                    user_level=True,
                )
            )
        return ops

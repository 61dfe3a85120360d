"""`guard`: the pre-tool-use hook as a command (rendered hooks run `python -I -m
agentstack._guard` directly, without the command table)."""

from __future__ import annotations

from typing import Annotated

import typer

from agentstack.cli._app import Command, commands

app = commands()


@app.command(cls=Command)
def guard(
    harness: Annotated[str, typer.Option("--harness", help="The calling harness.")] = "",
    state: Annotated[str, typer.Option("--state", help="The state directory.")] = "",
    project: Annotated[str, typer.Option("--project", help="The project rendered for.")] = "",
    user_level: Annotated[bool, typer.Option("--user-level", help="No project.")] = False,
    event: Annotated[str, typer.Option("--event", help="The hook event.")] = "PreToolUse",
) -> None:
    """The pre-tool-use hook (stdin: the harness's JSON). Rendered hooks call
    `python -I -m agentstack._guard` directly; this is the same code."""
    from agentstack._guard import main as guard_main

    argv = ["--harness", harness, "--state", state, "--event", event]
    argv += ["--user-level"] if user_level else ["--project", project]
    guard_main(argv)

"""The `agentstack` command line on typer: one module per command group (`agentstack.cli.trust`,
`agentstack.cli.keys`, ...) over the library, which returns data and exit codes.

`dispatch` imports typer and the one module that holds the command named on the command line
(`agentstack.cli._app.COMMANDS`); `--help` lists every command from that table without importing
them. The commands that must start fast (the guard, `status`/`digest`/`show`, a simple `run`, an
unchanged `lock`) never get here: `agentstack.entry` runs them without typer.
"""

from __future__ import annotations


def dispatch(argv: list[str]) -> int | None:
    """Run `agentstack ARGV` in this process: the exit code (usage errors: 2); a command's
    AgentstackError propagates (`entry.run` maps it to its exit code)."""
    from agentstack.cli._app import dispatch as run_table

    return run_table(argv)


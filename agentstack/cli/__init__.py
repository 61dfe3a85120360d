"""The `agentstack` command line on typer: one module per command group (`agentstack.cli.trust`,
`agentstack.cli.keys`, ...) over the library, which returns data and exit codes.

`dispatch` imports typer and the one module that holds the command named on the command line
(`agentstack.cli._app.COMMANDS`); `--help` lists every command from that table without importing
them. The commands that must start fast (the guard, `status`/`digest`/`show`, a simple `run`, an
unchanged `lock`) never get here: `agentstack.entry` runs them without typer.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import NoReturn


def dispatch(argv: list[str]) -> int | None:
    """Run `agentstack ARGV` in this process: the exit code (usage errors: 2); a command's
    AgentstackError propagates (`entry.run` maps it to its exit code)."""
    from agentstack.cli._app import dispatch as run_table

    return run_table(argv)


def main() -> NoReturn:
    """Kept for `agentstack.cli:main` callers; the console script is `agentstack.entry:main`."""
    from agentstack.entry import main as entry_main

    entry_main()

"""`lock`: resolve every item and pin it into agentstack.lock (`agentstack.lock.command`). An
unchanged `lock` never gets here: `agentstack.entry` answers it from the re-lock record."""

from __future__ import annotations

from typing import Annotated

import typer

from agentstack.cli._app import Command, commands
from agentstack.cli._common import Json, User, state, use_user

app = commands()



@app.command(cls=Command)
def lock(
    check: Annotated[bool, typer.Option(
        "--check", help="Exit 1 if re-locking would change the lock.")] = False,
    frozen: Annotated[bool, typer.Option(
        "--frozen", help="Use the lock as it is; exit 1 if it does not match.")] = False,
    update: Annotated[bool, typer.Option(
        "--update", help="Re-resolve git revisions to their newest commits.")] = False,
    as_json: Json = False,
    max_file_size: Annotated[int | None, typer.Option(
        "--max-file-size", min=1, metavar="N", help="Refuse a file larger than N bytes.")] = None,
    max_files: Annotated[int | None, typer.Option(
        "--max-files", min=1, metavar="N", help="Refuse to pin more than N files.")] = None,
    max_total_size: Annotated[int | None, typer.Option(
        "--max-total-size", min=1, metavar="N",
        help="Refuse to pin more than N bytes in all.")] = None,
    user: User = False,
) -> int:
    """Resolve every item and pin it into agentstack.lock."""
    from agentstack.lock.command import limits_from, run_lock

    use_user(user)

    return run_lock(
        project=state.project,
        check=check,
        frozen=frozen,
        update=update,
        as_json=as_json,
        limits=limits_from(max_file_size, max_files, max_total_size),
    )

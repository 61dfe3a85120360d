"""`apply`: render each harness's native config from the trusted declaration
(`agentstack.apply.command`)."""

from __future__ import annotations

from typing import Annotated

import typer

from agentstack.cli._app import Command, commands
from agentstack.cli._common import Json, User, root_dir, store, use_user

app = commands()


@app.command(cls=Command)
def apply(
    harness: Annotated[list[str] | None, typer.Option(
        "--harness", help="Only this harness; repeatable.")] = None,
    write: Annotated[bool, typer.Option(
        "--write", help="Write the files (only when trusted).")] = False,
    check: Annotated[bool, typer.Option("--check", help="Exit 1 if anything would change.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Overwrite hand edits (backed up first).")] = False,
    no_git_hooks: Annotated[bool, typer.Option(
        "--no-git-hooks",
        help="Do not install the git hooks that re-check the surface after "
        "pull/checkout/merge/rebase.")] = False,
    as_json: Json = False,
    user: User = False,
) -> int:
    """Render native harness config: without --write, show the planned diff and write nothing."""
    from agentstack.apply.command import run_apply
    from agentstack.consent.document import current

    use_user(user)
    root = root_dir()
    _, _, document, digest = current(root)
    code, _ = run_apply(
        root, document, digest, store(), harness=harness or None, write=write,
        check=check, force=force, as_json=as_json, git_hooks=not (no_git_hooks or user),
    )  # fmt: skip
    return code

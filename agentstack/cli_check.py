"""`agentstack check --boundary FILE`: is this setup within a boundary?"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from agentstack.cli import JsonOpt, _current, _root_dir, app
from agentstack.entry import print_json
from agentstack.errors import InvalidInput


@app.command()
def check(
    boundary: Annotated[
        Path | None,
        typer.Option(
            "--boundary",
            help="A boundary file (default: $AGENTSTACK_HOME/boundary.toml).",
            dir_okay=False,
        ),
    ] = None,
    allow_unsupported: Annotated[
        bool,
        typer.Option(
            "--allow-unsupported", help="Exit 0 when the only problem is something unmodelled."
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Check the setup against a boundary: within_boundary, exceeds_boundary with a
    counterexample per domain, or unsupported with the reason. Exit 0 only when within."""
    import os

    from agentstack.boundary import check_document, describe, load_boundary, user_boundary_path

    path = boundary if boundary is not None else user_boundary_path()
    if boundary is None and not path.is_file():
        raise InvalidInput(
            f"no boundary: {path} does not exist and --boundary was not given",
            hint="write a boundary file (docs/boundary.md) and pass it with --boundary FILE",
        )
    home = os.path.realpath(str(Path.home()))
    compiled = load_boundary(path, home=home)
    root = _root_dir()
    _, _, document, _ = _current(root)
    result = check_document(document, root, compiled, home=home)
    if as_json:
        print_json(result.to_json())
    else:
        sys.stdout.write("\n".join(describe(result)) + "\n")
    ok = result.result == "within_boundary" or (
        result.result == "unsupported" and allow_unsupported
    )
    if not ok:
        raise typer.Exit(1)

"""`agentstack check --boundary FILE`: is this setup within a boundary? (`agentstack.consent.boundary`)"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from agentstack.cli._app import Command, commands
from agentstack.cli._common import Format, Json, User, root_dir, use_user
from agentstack.errors import InvalidInput
from agentstack.output import print_json

app = commands()


@app.command(cls=Command)
def check(
    boundary: Annotated[Path | None, typer.Option(
        "--boundary", dir_okay=False,
        help="A boundary file (default: $AGENTSTACK_HOME/boundary.toml).")] = None,
    allow_unsupported: Annotated[bool, typer.Option(
        "--allow-unsupported",
        help="Exit 0 when the only problem is something unmodelled.")] = False,
    as_json: Json = False,
    output_format: Format = None,
    user: User = False,
) -> int:
    """Check the setup against a boundary: within_boundary, exceeds_boundary with a
    counterexample per domain, or unsupported with the reason. Exit 0 only when within."""
    import os

    from agentstack.consent.sarif import output_format as chosen_format

    fmt = chosen_format(output_format, as_json)
    use_user(user)
    from agentstack.consent.boundary import (
        check_document,
        describe,
        load_boundary,
        user_boundary_path,
    )

    path = boundary if boundary is not None else user_boundary_path()
    if boundary is None and not path.is_file():
        raise InvalidInput(
            f"no boundary: {path} does not exist and --boundary was not given",
            hint="write a boundary file (docs/boundary.md) and pass it with --boundary FILE",
        )
    home = os.path.realpath(str(Path.home()))
    compiled = load_boundary(path, home=home)
    from agentstack.consent.document import current

    root = root_dir()
    manifest, _, document, _ = current(root)
    from agentstack.paths import is_user_root
    from agentstack.sandbox.session import check_policies

    # The policy `run` would enforce resolves, or the same error. The user-level setup's servers
    # work in the directory their harness starts them in (its root, $AGENTSTACK_HOME, is closed to
    # every sandbox): its policy is resolved for the directory `check` runs in.
    check_policies(manifest, Path.cwd() if is_user_root(root) else root)
    result = check_document(document, root, compiled, home=home)
    if fmt == "sarif":
        from agentstack.consent.sarif import ManifestLines, check_findings, print_sarif

        print_sarif(check_findings(result.to_json(), ManifestLines.of(root)), command="check",
                    root=root)
    elif fmt == "json":
        print_json(result.to_json())
    else:
        sys.stdout.write("\n".join(describe(result)) + "\n")
    ok = result.result == "within_boundary" or (
        result.result == "unsupported" and allow_unsupported
    )
    return 0 if ok else 1

"""`shims install|remove`: launchers ahead on PATH that check a project's harness surface before
the real harness starts (`agentstack.shim`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from agentstack.cli._app import Command, commands, group
from agentstack.cli._common import Json, root_dir
from agentstack.errors import Refused
from agentstack.output import echo, print_json

app = commands()
shims_app = group(
    "Launchers for the harness binaries (claude, codex, gemini, opencode, copilot, …) ahead "
    "on PATH that check the harness surface first."
)
app.add_typer(shims_app, name="shims")

Dir = Annotated[Path | None, typer.Option(
    "--dir", help="Where to put the launchers (default: $AGENTSTACK_HOME/shims).")]
GitHooks = Annotated[bool, typer.Option(
    "--git-hooks",
    help="Also install post-checkout/post-merge/post-rewrite hooks in this project's git "
    "repository that re-check the surface and withdraw harness trust on a difference.")]


def _shim_dir(directory: Path | None) -> Path:
    from agentstack import layout
    from agentstack.paths import agentstack_home

    return (directory or Path(layout.shims_dir(str(agentstack_home())))).expanduser().resolve()


@shims_app.command("install", cls=Command)
def shims_install(
    directory: Dir = None, git_hooks: GitHooks = False, as_json: Json = False
) -> None:
    """Write a launcher for each harness binary agentstack renders for (`claude`, `codex`,
    `gemini`, `opencode`, `copilot`, …); put their directory first on PATH to use them."""
    import shlex

    hooks: list[str] = []
    if git_hooks:
        from agentstack import githooks

        hooks = [str(p) for p in githooks.install(root_dir().resolve())]
    from agentstack import harnesses
    from agentstack.fsutil import write_atomic
    from agentstack.shim import MARKER

    target = _shim_dir(directory)
    target.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    for harness in harnesses.ALL:
        if not harness.has_adapter:
            continue
        command = shlex.join(
            [sys.executable, "-I", "-m", "agentstack.shim", str(target), harness.binary]
        )
        text = (
            f"#!/bin/sh\n{MARKER} for {harness.display}: checks the project's harness surface "
            f"against the trusted digest, then runs the real {harness.binary}.\n"
            f'exec {command} "$@"\n'
        )
        path = target / harness.binary
        if path.exists() and MARKER.encode() not in path.read_bytes()[:512]:
            raise Refused(f"{path} exists and is not an agentstack shim; nothing was written")
        write_atomic(path, text.encode(), 0o755)
        written.append(str(path))
    if as_json:
        print_json({"dir": str(target), "shims": written, "git_hooks": hooks})
        return
    for shown in [*written, *hooks]:
        echo(f"wrote {shown}")
    echo(f'put the shims first on PATH, e.g. in your shell profile: export PATH="{target}:$PATH"')


@shims_app.command("remove", cls=Command)
def shims_remove(
    directory: Dir = None, git_hooks: GitHooks = False, as_json: Json = False
) -> None:
    """Remove the launchers `shims install` wrote (nothing else); with --git-hooks, also this
    project's git hooks (chained hooks are put back)."""
    from agentstack import harnesses
    from agentstack.shim import MARKER

    target = _shim_dir(directory)
    removed = []
    if git_hooks:
        from agentstack import githooks

        removed += [str(p) for p in githooks.remove(root_dir().resolve())]
    for harness in harnesses.ALL:
        path = target / harness.binary
        try:
            if MARKER.encode() in path.read_bytes()[:512]:
                path.unlink()
                removed.append(str(path))
        except FileNotFoundError:
            continue
    if as_json:
        print_json({"dir": str(target), "removed": removed})
    else:
        echo("\n".join(f"removed {p}" for p in removed) or "no shims to remove")

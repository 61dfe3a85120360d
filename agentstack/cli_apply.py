"""`apply`: render each harness's native config from the trusted declaration."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from agentstack.cli import JsonOpt, _current, _root_dir, app
from agentstack.entry import echo, print_json
from agentstack.errors import Refused


def _sanitized(text: str) -> str:
    from agentstack.sanitize import sanitize

    return sanitize(text, keep_newlines=True)


@app.command()
def apply(
    harness: Annotated[
        list[str] | None, typer.Option("--harness", help="Only this harness; repeatable.")
    ] = None,
    write: Annotated[
        bool, typer.Option("--write", help="Write the files (only when trusted).")
    ] = False,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 if anything would change.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite hand edits (backed up first).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Render native harness config: without --write, show the planned diff and write nothing."""
    from agentstack import apply as engine
    from agentstack.cli_trust import _store

    root = _root_dir()
    _, _, document, digest = _current(root)
    state = _store().state(root, digest) if write else None
    if write and (state is None or not state.trusted):
        raise Refused(
            f"not trusted: {digest} has not been trusted for {root.resolve()}; nothing was written",
            hint="review it with 'agentstack trust' first",
        )
    plan = engine.plan(root, document, digest, harness)
    report: dict[str, Any] = {
        "digest": digest,
        "changes": [c.display for c in plan.pending],
        "conflicts": {c.display: c.conflicts for c in plan.conflicts},
        "written": False,
    }
    if write:
        exclude = root / ".git" / "info" / "exclude"
        excluded_before = _read_or_none(exclude)
        backups = engine.write(plan, force=force)
        exclude_changed = _read_or_none(exclude) != excluded_before
        from agentstack.snapshot import write_snapshot

        for item in write_snapshot(root, document, digest):
            echo(
                f"warning: kept {item}, which is not in agentstack.toml: the guard blocks "
                "every tool call while it is there; declare it in agentstack.toml or remove it"
            )
        report.update(
            written=True,
            backups=[str(b) for b in backups],
            git_exclude=str(exclude) if exclude_changed else None,
        )
        if as_json:
            print_json(report)
        else:
            for change in plan.pending:
                echo(
                    f"wrote {change.display}"
                    if change.new is not None or change.link_target
                    else f"removed {change.display}"
                )
            for backup in backups:
                echo(f"backed up a hand-edited file to {backup}")
            if exclude_changed:
                echo(
                    "updated .git/info/exclude: rendered files are per machine, so git ignores "
                    "them (never committed)"
                )
            echo(f"{len(plan.pending)} file(s) changed; rendered from {digest}")
            from agentstack.cli_trust import _missing_secrets

            for entry in _missing_secrets(document):
                echo(
                    f"warning: {entry['item']} needs secret:{entry['secret']}, which is not "
                    f"stored; it cannot start until 'agentstack secret set {entry['secret']}'"
                )
        return
    if as_json:
        report["diff"] = plan.diff_text()
        print_json(report)
    else:
        sys.stdout.write(_sanitized(plan.diff_text()))
        for change in plan.conflicts:
            echo(f"conflict: {change.display}: {', '.join(change.conflicts)}")
        if not plan.pending:
            echo("nothing to change")
        elif not check:
            echo(
                f"{len(plan.pending)} file(s) would change; 'agentstack apply --write' writes "
                "them once the digest is trusted"
            )
    if check and (plan.pending or plan.conflicts):
        raise typer.Exit(1)


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def harness_notes(document: dict[str, Any]) -> list[str]:
    """What the trust review should say about the manifest's harnesses (an adapter's optional
    `review_note`), e.g. that a harness has no trust gate of its own."""
    from agentstack_adapters import load_adapters

    harnesses = list(document["project"]["harnesses"])
    adapters = load_adapters(harnesses)
    notes = [getattr(adapters.get(h), "review_note", None) for h in harnesses]
    return [n for n in notes if isinstance(n, str) and n]


def user_level_changes(root: Path, document: dict[str, Any], digest: str) -> list[str]:
    """What `apply --write` will change outside the project (shown in the trust review)."""
    from agentstack_adapters import MEMBER, OwnedKeys

    from agentstack.apply import render_operations
    from agentstack.view import toml_value

    lines = []
    for op in render_operations(root.resolve(), document, digest):
        if isinstance(op, OwnedKeys) and op.user_level:
            for key, value in op.keys.items():
                if len(key) >= 2 and key[-2] == MEMBER:  # one item added to a list
                    lines.append(f"{op.path}: {'.'.join(key[:-2])} += {key[-1]}")
                else:
                    lines.append(f"{op.path}: {'.'.join(key)} = {toml_value(value)}")
    return lines

"""`digest`, `show`, `diff`, `log` and `schema`: reading the consent state (`agentstack.readcmds`,
`agentstack.consent.diff`). `digest` and `show` with simple arguments never get here: `agentstack.entry`
runs them without the command table."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from agentstack.cli._app import Command, commands
from agentstack.cli._common import Format, Json, User, root_dir, use_user
from agentstack.errors import InvalidInput, Refused
from agentstack.output import print_json

app = commands()


@app.command(cls=Command)
def digest(as_json: Json = False, user: User = False) -> None:
    """Print the consent digest (b3:<64 hex>) of the current manifest and lock."""
    from agentstack import readcmds

    use_user(user)

    readcmds.digest(root_dir(), as_json)


@app.command(cls=Command)
def show(as_json: Json = False, user: User = False) -> None:
    """The consent view: what will run and what the model will read.

    In a project, the user-level setup's items are listed after it (a project item shadows a
    user-level item of the same name)."""
    from agentstack import readcmds

    use_user(user)

    readcmds.show(root_dir(), as_json)


def _current(root: Path) -> dict[str, Any]:
    from agentstack.consent.document import current

    return current(root)[2]


def _load_document(path: Path) -> dict[str, Any]:
    import json

    try:
        raw = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise InvalidInput(
            f"{path}: not a JSON consent document ({exc})",
            hint="write one with 'agentstack show --json > FILE'",
        ) from None
    if not isinstance(raw, dict) or raw.get("consent") != 1:
        raise InvalidInput(
            f"{path}: not a consent document (format 1)",
            hint="write one with 'agentstack show --json > FILE'",
        )
    return raw


@app.command(cls=Command)
def diff(
    old: Annotated[str | None, typer.Argument(
        metavar="[OLD]", show_default=False,
        help="A trusted digest or a consent document (default: the last trusted).")] = None,
    new: Annotated[Path | None, typer.Argument(
        metavar="[NEW]", show_default=False,
        help="A later document (default: the project).")] = None,
    as_json: Json = False,
    output_format: Format = None,
) -> None:
    """Consent diff against the last trusted (or given) digest or document, risk findings first."""
    from agentstack.canonical import is_digest
    from agentstack.consent.sarif import output_format as chosen_format

    fmt = chosen_format(output_format, as_json)
    from agentstack.consent.diff import consent_diff

    before: dict[str, Any] | None
    if old is not None and not is_digest(old):
        before = _load_document(Path(old))
        after = _load_document(new) if new is not None else _current(root_dir())
    else:
        from agentstack.trust.review import TrustStore

        root = root_dir()
        after = _load_document(new) if new is not None else _current(root)
        store = TrustStore()
        if old is None:
            last = store.last_trusted(root)
            if last is None:
                raise Refused(
                    "nothing was trusted for this project yet, so there is nothing to compare with",
                    hint="'agentstack show' displays the whole consent "
                    "view; 'agentstack trust' reviews it",
                )
            old = last.digest
        before = store.load_consent(old)
        if before is None:
            raise Refused(
                f"no stored consent document for {old}",
                hint="only digests trusted on this machine are stored; pass a "
                "document written by 'agentstack show --json' instead",
            )
    result = consent_diff(before, after)
    pins: list[Any] = []
    if new is None:
        from agentstack import pinreview

        pins = pinreview.pending_changes(root_dir().resolve(), sorted(after.get("servers", {})))
    if fmt == "sarif":
        from agentstack.consent.sarif import ManifestLines, diff_findings, print_sarif

        project = root_dir() if new is None else None
        lines = ManifestLines.of(project) if project is not None else ManifestLines("")
        print_sarif(diff_findings([f.to_json() for f in result.findings], lines),
                    command="diff", root=project)
        return
    if fmt == "json":
        print_json({**result.to_json(), "pins": [c.to_json() for c in pins]})
        return
    from agentstack.consent.render import console, diff_renderable
    from agentstack.trust.contentstore import Contents, ContentStore, collect

    found = collect(root_dir(), after) if new is None else {}
    kept = ContentStore()
    console().print(diff_renderable(result, contents=Contents(kept, found)))
    for problem in kept.problems:  # its texts were shown by size and hash
        print(f"warning: {problem}; not used", file=sys.stderr)
    if pins:
        from agentstack import pinreview

        print(f"{len(pins)} listing change(s) the relay withheld (review with 'agentstack trust'):")
        for change in pins:
            for line in pinreview.change_lines(change):
                print(line)


@app.command(cls=Command)
def log(as_json: Json = False) -> None:
    """The receipts of the project's MCP tool calls and proxied requests (no bodies, no secrets)."""
    from agentstack import readcmds

    readcmds.receipts(root_dir(), as_json)


@app.command(cls=Command)
def schema(
    which: Annotated[str, typer.Argument(
        metavar="[WHICH]", help="manifest, lock or boundary")] = "manifest",
) -> None:
    """Print the JSON Schema of agentstack.toml (or of the lock, or of a boundary file)."""
    from agentstack.schema import SCHEMA_FILES, schema_for

    if which not in SCHEMA_FILES:
        raise InvalidInput(f"unknown schema {which!r}", hint="manifest, lock or boundary")
    print_json(schema_for(which))

"""The read-only commands `digest`, `show` and `status`, for the command table (`agentstack.cli.read`,
`agentstack.cli.trust`) and for the entry point's fast path (`agentstack.entry`), which runs them
without the command table (typer) when their arguments are simple.

What they import is what their data needs: the manifest view (from the manifest cache), the lock
check, the consent document and, for `status`, the trust log and the guard snapshot. Never pydantic,
the adapters' renderers, rich (except for `show` without --json) or another command's module; a
test pins that (tests/test_import_hygiene.py).
"""

from __future__ import annotations

import sys

from agentstack.output import echo, print_json, result

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from pathlib import Path

    from agentstack.trust.review import TrustStore

COMMANDS = ("digest", "show", "status")


def digest(root: Path, as_json: bool) -> int:
    """`agentstack digest [--json]`."""
    from agentstack.consent.document import current

    _, _, _, value = current(root)
    if as_json:
        print_json({"digest": value, "project": str(root)})
    else:
        sys.stdout.write(value + "\n")
    return 0


def show(root: Path, as_json: bool) -> int:
    """`agentstack show [--json]`."""
    from agentstack.consent.document import current

    _, _, doc, value = current(root)
    if as_json:
        print_json(doc)
        return 0
    from agentstack.consent.render import consent_renderable, console

    console().print(consent_renderable(doc, value))
    lines = user_level_lines(root, doc)
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
    return 0


def user_level_lines(root: Path, doc: dict[str, object]) -> list[str]:
    """`show` in a project: the user-level setup's items too, and which the project shadows."""
    import os
    from pathlib import Path

    from agentstack import layout

    user_root = layout.home()
    if os.path.realpath(root) == os.path.realpath(user_root) or not os.path.isfile(
        os.path.join(user_root, "agentstack.toml")
    ):
        return []
    from agentstack.errors import AgentstackError
    from agentstack.userlevel import composed, user_document

    try:
        found = user_document()
    except AgentstackError as exc:
        return [f"user-level setup ({user_root}/agentstack.toml): cannot be read: {exc.message}"]
    if found is None:
        return []
    user_doc, digest = found
    from agentstack.trust.review import TrustStore

    state = TrustStore(explicit=[]).state(Path(user_root).resolve(), digest).state
    lines = [f"user-level setup ({user_root}/agentstack.toml, {digest}, {state}):"]
    for rows in composed(doc, user_doc).values():
        for row in rows:
            if row["from"] == "user":
                lines.append(f"  {row['name']}  from the user-level setup")
            elif row["shadows_user"] and row["name"].startswith("skills."):
                # Measured with Claude Code 2.1.332: it lists the user-level copy, not the
                # project's; the guard wants both setups to hold for a Skill call naming it.
                lines.append(f"  {row['name']}  both (Claude Code loads the user-level one; "
                             "the guard wants both setups to hold)")
            elif row["shadows_user"]:
                lines.append(f"  {row['name']}  the project's (shadows the user-level one)")
    return lines if len(lines) > 1 else []


def status(root: Path, store: TrustStore, as_json: bool, *, sarif: bool = False) -> int:
    """`agentstack status [--json | --format sarif]`: exit 0 when the lock is fresh and its
    digest trusted."""
    from agentstack.progress import quiet, step
    from agentstack.projectstatus import project_status, status_lines

    quiet(as_json)
    with step("status: checking the pinned files"):
        report = project_status(root, store)
    ok = report.pop("ok")
    if sarif:
        from agentstack.consent.sarif import ManifestLines, print_sarif, status_findings

        print_sarif(status_findings(report, ManifestLines.of(root)), command="status", root=root)
    elif as_json:
        print_json(report)
    else:
        from agentstack.columns import fit

        result("\n".join(fit(status_lines(report), 10)))
        for path in report.get("withdrawn", []):
            echo(
                f"withdrew agentstack's harness-side trust from {path} until the change is "
                "reviewed ('agentstack trust', then 'agentstack apply --write')"
            )
    return 0 if ok else 1


def fast(argv: list[str]) -> tuple[str, bool] | None:
    """(command, --json) for exactly `digest`, `show` or `status`, optionally followed by `--json`
    (no root option, nothing else: anything more goes through the command table), else None."""
    if not argv or argv[0] not in COMMANDS or len(argv) > 2:
        return None
    if len(argv) == 2 and argv[1] != "--json":
        return None
    return argv[0], len(argv) == 2


def run_fast(command: str, as_json: bool) -> int:
    """Run a command `fast` recognised, as the command table would (no --project, no
    --trust-digest: the project found from the working directory, the user's trust store)."""
    from agentstack.paths import find_project

    root = find_project(explicit=None)
    if command == "digest":
        return digest(root, as_json)
    if command == "show":
        return show(root, as_json)
    from agentstack.trust.review import TrustStore

    return status(root, TrustStore(explicit=[]), as_json)


def receipts(root: Path, as_json: bool) -> int:
    """`agentstack log`: the project's receipts, oldest first (a torn last line is skipped)."""
    import json
    import os

    from agentstack import layout
    from agentstack.paths import agentstack_home

    path = layout.receipts_file(str(agentstack_home()), str(root.resolve()))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        if not as_json:
            echo("no receipts yet: nothing went through the relay or the proxy for this project")
        return 0
    with os.fdopen(fd, "rb") as handle:
        data = handle.read()
    records = []
    for line in data.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    for record in records:
        if as_json:
            print(json.dumps(record, sort_keys=True))
            continue
        what = record.get("tool") if record.get("kind") == "tool" else record.get("host")
        where = record.get("server", "proxy")
        size = f"{record.get('bytes_sent', 0)}B out, {record.get('bytes_received', 0)}B in"
        print(f"{record.get('time', '?')}  {record.get('decision', '?'):5}  {where}  {what}  {size}")
    return 0

"""The read-only commands `digest`, `show` and `status`, for the command table (`agentstack.cli`,
`agentstack.cli_trust`) and for the entry point's fast path (`agentstack.entry`), which runs them
without the command table or argparse when their arguments are simple.

What they import is what their data needs: the manifest view (from the manifest cache), the lock
check, the consent document and, for `status`, the trust log and the guard snapshot. Never pydantic,
the adapters' renderers, rich (except for `show` without --json) or another command's module; a
test pins that (tests/test_import_hygiene.py).
"""

from __future__ import annotations

import sys

from agentstack.entry import echo, print_json, result

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from pathlib import Path

    from agentstack.trust import TrustStore

COMMANDS = ("digest", "show", "status")


def digest(root: Path, as_json: bool) -> int:
    """`agentstack digest [--json]`."""
    from agentstack.consent import current

    _, _, _, value = current(root)
    if as_json:
        print_json({"digest": value, "project": str(root)})
    else:
        sys.stdout.write(value + "\n")
    return 0


def show(root: Path, as_json: bool) -> int:
    """`agentstack show [--json]`."""
    from agentstack.consent import current

    _, _, doc, value = current(root)
    if as_json:
        print_json(doc)
        return 0
    from agentstack.view import consent_renderable, console

    console().print(consent_renderable(doc, value))
    return 0


def status(root: Path, store: TrustStore, as_json: bool) -> int:
    """`agentstack status [--json]`: exit 0 when the lock is fresh and its digest trusted."""
    from agentstack.progress import quiet, step
    from agentstack.status import project_status, status_lines

    quiet(as_json)
    with step("status: checking the pinned files"):
        report = project_status(root, store)
    ok = report.pop("ok")
    if as_json:
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
    from agentstack.trust import TrustStore

    return status(root, TrustStore(explicit=[]), as_json)

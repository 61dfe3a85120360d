"""`trust`, `trust list`, `trust log`, `revoke` and `status`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from agentstack.cli import JsonOpt, _current, _root_dir, _state, app
from agentstack.entry import echo, print_json
from agentstack.errors import InvalidInput, Refused

trust_app = typer.Typer(
    help="Review the consent view (or what changed since you last trusted) and record trust.",
    invoke_without_command=True,
)
app.add_typer(trust_app, name="trust")


def _store() -> Any:
    from agentstack.trust import TrustStore

    TrustStore.check_explicit(_state.trust_digests, "--trust-digest")
    return TrustStore(explicit=_state.trust_digests)


def _lock_hash(root: Path) -> str:
    from agentstack.canonical import b3
    from agentstack.manifest import LOCK_NAME

    return b3((root / LOCK_NAME).read_bytes())


def _ask(question: str) -> str:
    sys.stderr.write(question)
    sys.stderr.flush()
    try:
        return input().strip()
    except EOFError:
        return ""


@trust_app.callback()
def trust(
    ctx: typer.Context,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Trust without asking (after review).")
    ] = False,
    digest: Annotated[
        str | None,
        typer.Option("--digest", help="Refuse unless the current digest is exactly this."),
    ] = None,
    accept_risk: Annotated[
        bool, typer.Option("--accept-risk", help="Accept new high-risk findings (with --yes).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Review and record trust for the current consent digest."""
    if ctx.invoked_subcommand is not None:
        return
    from agentstack.diff import consent_diff
    from agentstack.view import consent_renderable, console, diff_renderable

    root = _root_dir()
    _, _, document, current = _current(root)
    if digest is not None and digest != current:
        raise Refused(
            f"the current consent digest is {current}, not {digest}",
            hint="the project changed since that digest was reviewed; run 'agentstack trust' "
            "to review the change",
        )
    store = _store()
    state = store.state(root, current)
    if state.trusted and state.source == "log":
        if as_json:
            print_json(
                {
                    "digest": current,
                    "project": str(root.resolve()),
                    "state": "trusted",
                    "recorded": False,
                }
            )
        else:
            echo(f"already trusted: {current} for {root.resolve()}")
        return
    previous = store.last_trusted(root)
    before = store.load_consent(previous.digest) if previous is not None else None
    result = consent_diff(before, document)
    out = console(stderr=as_json)
    if state.moved_from:
        out.print(
            f"This digest was trusted for {state.moved_from}; trust is bound to the "
            f"project's location, so a moved or copied project ({root.resolve()}) is "
            "reviewed again.",
            markup=False,
            highlight=False,
        )
    if state.state == "revoked":
        out.print(
            "This digest was revoked for this project; trusting it again needs a new review.",
            markup=False,
        )
    if before is None:
        out.print(consent_renderable(document, current))
        out.print(diff_renderable(result).renderables[0])  # the risk findings
    else:
        out.print(
            f"Changes since the digest you trusted on {previous.time if previous else ''}:",
            markup=False,
        )
        out.print(diff_renderable(result))
    # A re-review (something was trusted before) needs --accept-risk for high-risk findings, even
    # when the earlier consent document is gone and everything shows as new.
    high = result.high_risk if previous is not None else []
    from agentstack.cli_apply import harness_notes, user_level_changes

    for note in harness_notes(document):
        out.print(note, markup=False)
    outside = user_level_changes(root, document, current)
    if outside:
        out.print(
            "'agentstack apply --write' will also record this outside the project "
            "('agentstack revoke' removes the project's entries; a user-level guard hook stays, "
            "and allows outside agentstack projects):",
            markup=False,
        )
        from agentstack.view import lines

        out.print(lines(*outside))
    if not yes:
        if not sys.stdin.isatty():
            raise Refused(
                "not trusted: no terminal to ask on",
                hint="review the output above, then re-run with --yes"
                + (" --accept-risk" if high else ""),
            )
        word = "accept-risk" if high else "y"
        prompt = (
            f"{len(high)} new high-risk finding(s) above. Type 'accept-risk' to trust {current}: "
            if high
            else f"Trust {current} for {root.resolve()}? [y/N] "
        )
        if _ask(prompt).lower() not in ({word} if high else {"y", "yes"}):
            raise Refused("not trusted: declined")
    elif high and not accept_risk:
        raise Refused(
            f"not trusted: {len(high)} new high-risk finding(s) need explicit acceptance",
            hint="review them above, then re-run with --yes --accept-risk",
        )
    record = store.trust(root, current, document, _lock_hash(root))
    from agentstack.snapshot import write_snapshot

    for item in write_snapshot(root, document, current):
        echo(
            f"warning: {item} is not in agentstack.toml: the guard blocks every tool call "
            "while it is there"
        )
    if as_json:
        print_json(
            {
                "digest": current,
                "project": record.project,
                "state": "trusted",
                "recorded": True,
                "seq": record.seq,
                "findings": [f.to_json() for f in result.findings],
            }
        )
    else:
        echo(f"trusted {current} for {record.project} (trust log record {record.seq})")


@trust_app.command("list")
def trust_list(as_json: JsonOpt = False) -> None:
    """Currently trusted digests, per project."""
    from agentstack.trust import current_trusts

    store = _store()
    trusted = current_trusts(store.log.records())
    rows = [
        {"project": r.project, "digest": r.digest, "time": r.time, "action": r.action}
        for r in sorted(trusted, key=lambda r: (r.project, r.seq))
    ]
    if as_json:
        print_json({"trusted": rows})
        return
    if not rows:
        echo("nothing is trusted yet")
        return
    from rich.table import Table

    from agentstack.view import console, t

    table = Table(title="Trusted consent digests", title_justify="left")
    for column in ("project", "digest", "since"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(t(row["project"]), t(row["digest"]), t(row["time"]))
    console().print(table)


@trust_app.command("log")
def trust_log(
    verify: Annotated[
        bool, typer.Option("--verify", help="Check the hash chain and the head.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Print the trust log; --verify checks its chain (exit 1 naming the first bad record)."""
    store = _store()
    if verify:
        report = store.log.verify()
        if as_json:
            print_json(
                {
                    "ok": report.ok,
                    "count": report.count,
                    "head": report.head,
                    "first_bad": report.first_bad,
                    "problem": report.problem,
                    "path": str(store.log.path),
                }
            )
        if not report.ok:
            if not as_json:
                echo(f"trust log does not verify: {report.problem}\nlog: {store.log.path}")
            raise typer.Exit(1)
        if not as_json:
            echo(f"trust log verifies: {report.count} records, head {report.head}")
        return
    records = store.log.records()
    if as_json:
        print_json({"records": [r.to_json() for r in records]})
        return
    from agentstack.sanitize import sanitize

    for r in records:
        sys.stdout.write(
            sanitize(f"{r.seq:>5} {r.time} {r.action:<8} {r.digest} {r.project}") + "\n"
        )


@app.command()
def revoke(
    digest: Annotated[
        str | None, typer.Argument(help="Digest to revoke (default: the current one).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Record revocation of a trusted digest for this project."""
    from agentstack.canonical import is_digest

    root = _root_dir()
    store = _store()
    if digest is None:
        last = store.last_trusted(root)
        try:
            digest = _current(root)[3]
        except Refused:
            if last is None:
                raise
            digest = last.digest  # the lock is stale: revoke what was last trusted
    if not is_digest(digest):
        raise InvalidInput(f"{digest!r} is not a consent digest (b3:<64 hex>)")
    if store.log.state_for(str(root.resolve()), digest) != "trusted":
        raise Refused(
            f"{digest} is not trusted for {root.resolve()}; nothing to revoke",
            hint="see 'agentstack trust list'",
        )
    record = store.revoke(root, digest)
    from agentstack.apply import remove_user_level

    if not store.log.trusted_digests(record.project):  # another digest may still be trusted
        for path in remove_user_level(root):
            echo(f"removed agentstack's harness-side trust entries from {path}")
    if as_json:
        print_json(
            {"digest": digest, "project": record.project, "state": "revoked", "seq": record.seq}
        )
    else:
        echo(f"revoked {digest} for {record.project}")


@app.command()
def status(as_json: JsonOpt = False) -> None:
    """Lock freshness, trust state of the current digest, and what changed since the trusted one.

    Exit 0 when the lock is fresh and its digest trusted; 1 otherwise."""
    from agentstack.diff import changed_items, consent_diff
    from agentstack.errors import StaleLock

    root = _root_dir()
    store = _store()
    report: dict[str, Any] = {"project": str(root.resolve())}
    try:
        _, _, document, current = _current(root)
    except StaleLock as exc:
        report.update(lock="stale", lock_problem=exc.message, digest=None, trust="unknown")
        document, current = None, None
    else:
        report.update(lock="fresh", digest=current)
        state = store.state(root, current)
        report.update(trust=state.state, trust_source=state.source, moved_from=state.moved_from)
    last = store.last_trusted(root)
    report["last_trusted"] = last.digest if last else None
    if document is not None and last is not None and last.digest != current:
        before = store.load_consent(last.digest)
        if before is not None:
            changes = consent_diff(before, document)
            report["findings"] = [f.to_json() for f in changes.findings]
            report["changed"] = changed_items(changes)
    report.update(_rendered_state(root))
    report["guard_expected"] = _snapshot_expected(root, report)
    ok = (
        report["lock"] == "fresh"
        and report["trust"] == "trusted"
        and not report["drift"]
        and (report["snapshot"] or not _snapshot_expected(root, report))
    )
    if as_json:
        print_json(report)
    else:
        _print_status(report)
    if not ok:
        raise typer.Exit(1)


def _snapshot_expected(root: Path, report: dict[str, Any]) -> bool:
    """A guard snapshot exists once `trust` recorded trust or `apply --write` rendered files."""
    from agentstack.apply import load_ledger

    return report.get("trust_source") == "log" or bool(load_ledger(root).get("files"))


def _rendered_state(root: Path) -> dict[str, Any]:
    """Drift of every fingerprinted file (the guard's own check), per harness file, and rendered
    files that git tracks (they are per machine and must not be committed)."""
    import json as _json

    from agentstack._guard import drifted
    from agentstack.paths import project_state_dir

    snapshot_path = project_state_dir(root) / "guard.json"
    try:
        snapshot = _json.loads(snapshot_path.read_bytes())
    except (OSError, ValueError):
        return {"drift": [], "rendered": [], "tracked": [], "snapshot": False}
    real = str(root.resolve())
    drift, rendered = [], []
    for path, entry in sorted(snapshot.get("files", {}).items()):
        shown = path[len(real) + 1 :] if path.startswith(real + "/") else path
        if entry.get("role") == "rendered":
            rendered.append(shown)
        if drifted(path, entry):
            drift.append(shown)
    # Only files agentstack created are per machine; a user's own CLAUDE.md or AGENTS.md holding
    # an agentstack block stays theirs to commit.
    from agentstack.apply import load_ledger

    created = {
        path[len(real) + 1 :]
        for path, recorded in load_ledger(root).get("files", {}).items()
        if path.startswith(real + "/")
        and (recorded.get("kind") == "whole" or recorded.get("created"))
    }
    tracked = _tracked(root, sorted(created & set(rendered)))
    return {"drift": drift, "rendered": rendered, "tracked": tracked, "snapshot": True}


def _tracked(root: Path, paths: list[str]) -> list[str]:
    """Which rendered files git tracks. Only called for a trusted project's own files, with
    fsmonitor and hooks disabled on the command line (ls-files never runs repo hooks)."""
    import subprocess

    if not paths or not (root / ".git").exists():
        return []
    try:
        result = subprocess.run(
            [
                "git",
                "-c",
                "core.fsmonitor=false",
                "-c",
                "core.hooksPath=/dev/null",
                "ls-files",
                "-z",
                "--",
                *paths,
            ],
            cwd=root,
            capture_output=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return sorted(p for p in result.stdout.decode("utf-8", "replace").split("\0") if p)


def _print_status(report: dict[str, Any]) -> None:
    lines = [f"project   {report['project']}"]
    if report["lock"] == "fresh":
        lines.append(f"lock      fresh; digest {report['digest']}")
    else:
        lines.append(f"lock      STALE: {report['lock_problem']} (run 'agentstack lock')")
    trust_line = {
        "trusted": "trusted",
        "revoked": "REVOKED",
        "untrusted": "NOT TRUSTED",
        "unknown": "unknown (the lock is stale)",
    }[report["trust"]]
    if report.get("trust_source") in ("env", "flag"):
        trust_line += (
            " (explicitly, by "
            + (
                "AGENTSTACK_TRUSTED_DIGESTS"
                if report["trust_source"] == "env"
                else "--trust-digest"
            )
            + ")"
        )
    if report.get("moved_from"):
        trust_line += f"; it was trusted for {report['moved_from']} (trust binds the location)"
    lines.append(f"trust     {trust_line}")
    if report["last_trusted"] and report["last_trusted"] != report.get("digest"):
        lines.append(f"last trusted digest {report['last_trusted']}")
        for finding in report.get("findings", []):
            lines.append(f"  {finding['severity']:<6} {finding['item']}: {finding['message']}")
        if report.get("changed"):
            lines.append("  changed: " + ", ".join(report["changed"]))
    if report["trust"] == "trusted" and not report.get("snapshot") and report.get("guard_expected"):
        lines.append(
            "guard     no readable guard snapshot: the guard denies every tool call; "
            "run 'agentstack apply --write'"
        )
    for path in report.get("drift", []):
        lines.append(
            f"drift     {path} changed since agentstack last wrote or pinned it "
            "(the guard blocks every tool call until this is resolved)"
        )
    for path in report.get("tracked", []):
        lines.append(
            f"warning   {path} is tracked by git, but it is rendered per machine: "
            f"'git rm --cached {path}'"
        )
    if report["trust"] != "trusted":
        lines.append(
            "next: 'agentstack trust' to review"
            + (" after 'agentstack lock'" if report["lock"] != "fresh" else "")
        )
    echo("\n".join(lines))

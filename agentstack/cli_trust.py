"""`trust`, `trust list`, `trust log`, `revoke` and `status`."""

from __future__ import annotations

import contextlib
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


ACCEPT_WORD = "accept-risk"


def _contents(root: Path, document: dict[str, Any]) -> Any:
    """The bytes a review shows: the files on disk now (checked against the lock), then the
    content store (what was trusted before)."""
    from agentstack.contentstore import Contents, ContentStore, collect

    return Contents(ContentStore(), collect(root, document))


def _keep_contents(store: Any, contents: Any | None) -> None:
    """After a trust decision: keep the trusted files' bytes, drop what nothing trusted names."""
    from agentstack.contentstore import ContentStore, keep_trusted

    content_store = contents.store if contents is not None else ContentStore()
    if contents is not None:
        content_store.put_all(contents.found)
    with contextlib.suppress(OSError):  # a cache that cannot be pruned is only a cache
        keep_trusted(content_store, store)


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
        bool, typer.Option("--accept-risk", help="Accept high-risk findings (with --yes).")
    ] = False,
    boundary: Annotated[
        Path | None,
        typer.Option(
            "--boundary",
            help="Refuse unless the setup is within this boundary file (default: "
            "$AGENTSTACK_HOME/boundary.toml when it exists).",
            dir_okay=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Review and record trust for the current consent digest."""
    if ctx.invoked_subcommand is not None:
        return
    from agentstack.diff import consent_diff
    from agentstack.view import (
        consent_renderable,
        console,
        diff_renderable,
        findings_renderable,
        outside_renderable,
    )

    root = _root_dir()
    _, _, document, current = _current(root)
    if digest is not None and digest != current:
        raise Refused(
            f"the current consent digest is {current}, not {digest}",
            hint="the project changed since that digest was reviewed; run 'agentstack trust' "
            "to review the change",
        )
    from agentstack.boundary import enforce as enforce_boundary

    enforce_boundary(document, root, boundary_file=boundary)
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
    if state.state == "superseded":
        from agentstack.diff import Finding

        result.findings.insert(
            0,
            Finding(
                severity="medium",
                code="returns-to-earlier",
                item="project",
                message=f"returns to a setup you trusted on {state.trusted_on or 'an earlier date'}"
                ", which a later trust replaced",
            ),
        )
    contents = _contents(root, document)
    if before is None:
        out.print(consent_renderable(document, current))
        out.print(findings_renderable(result))
    else:
        out.print(
            f"Changes since the digest you trusted on {previous.time if previous else ''}:",
            markup=False,
        )
        out.print(diff_renderable(result, contents=contents))
    # One rule for every review, first or later: high-risk findings need an explicit acceptance.
    high = result.high_risk
    from agentstack.cli_apply import harness_notes, user_level_changes

    for note in harness_notes(document):
        out.print(note, markup=False)
    outside = user_level_changes(root, document, current)
    if outside:
        from agentstack.view import Wrapped, t

        out.print(
            Wrapped(
                t(
                    "'agentstack apply --write' will also record this outside the project "
                    "('agentstack revoke' removes the project's entries; a user-level guard hook "
                    "stays, and allows outside agentstack projects):"
                )
            )
        )
        out.print(outside_renderable(outside))
    if not yes:
        if not sys.stdin.isatty():
            raise Refused(
                "not trusted: no terminal to ask on",
                hint="review the output above, then re-run with --yes"
                + (" --accept-risk" if high else ""),
            )
        if high:
            prompt = (
                f"{len(high)} high-risk finding(s) above. To trust {current} for "
                f"{root.resolve()}, type accept-risk (anything else declines): "
            )
            if _ask(prompt).lower() != ACCEPT_WORD:
                raise Refused(
                    "not trusted: declined (high-risk findings need the word accept-risk)"
                )
        elif _ask(f"Trust {current} for {root.resolve()}? [y/N] ").lower() not in {"y", "yes"}:
            raise Refused("not trusted: declined")
    elif high and not accept_risk:
        raise Refused(
            f"not trusted: {len(high)} high-risk finding(s) need explicit acceptance",
            hint="review them above, then re-run with --yes --accept-risk",
        )
    record = store.trust(root, current, document, _lock_hash(root))
    _keep_contents(store, contents)
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
    from rich.text import Text

    from agentstack.view import Wrapped, console, t

    out = console()
    out.print(Text("Trusted consent digests", style="bold underline"))
    latest = {r["project"]: r["digest"] for r in rows}  # rows are in trust order per project
    for row in rows:
        note = "" if latest[row["project"]] == row["digest"] else " (superseded by a later trust)"
        out.print(Wrapped(t(row["project"]), 4))
        out.print(Wrapped(t(row["digest"]), 6, first=Text("    ")))
        out.print(Wrapped(t(f"trusted {row['time']}{note}"), 6, first=Text("    ")))


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
    digest_arg: Annotated[
        str | None,
        typer.Argument(metavar="DIGEST", help="Same as --digest.", show_default=False),
    ] = None,
    digest: Annotated[
        str | None,
        typer.Option("--digest", help="Revoke only this digest (default: every trusted one)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Withdraw trust: every digest trusted for this project (or --digest), and harness entries.

    The harness-side trust entries go whenever no digest matching the files on disk stays
    trusted; the output lists every digest revoked and every file changed."""
    from agentstack.canonical import is_digest

    root = _root_dir()
    store = _store()
    realpath = str(root.resolve())
    if digest_arg is not None and digest is not None and digest_arg != digest:
        raise InvalidInput("give the digest once: as an argument or with --digest")
    one = digest if digest is not None else digest_arg
    if one is not None:
        if not is_digest(one):
            raise InvalidInput(f"{one!r} is not a consent digest (b3:<64 hex>)")
        if store.log.state_for(realpath, one) != "trusted":
            raise Refused(
                f"{one} is not trusted for {realpath}; nothing to revoke",
                hint="see 'agentstack trust list'",
            )
        targets = [one]
    else:
        targets = store.trusted_digests(root)
        from agentstack.apply import remove_user_level  # what a revoke that failed left behind

        if not targets and (left := remove_user_level(root)):
            return echo("nothing left to revoke; removed agentstack's harness-side trust entries "
                        f"for this project from {', '.join(map(str, left))}")
        if not targets:
            raise Refused(
                f"nothing is trusted for {realpath}; nothing to revoke",
                hint="see 'agentstack trust list'",
            )
    records = [store.revoke(root, value) for value in targets]
    _keep_contents(store, None)
    # The harness-side entries stay only while a digest matching the files on disk is trusted.
    from agentstack.errors import AgentstackError

    try:
        current: str | None = _current(root)[3]
    except AgentstackError:
        current = None  # a stale lock or a broken manifest: nothing on disk is trusted
    keep = current is not None and store.state(root, current).trusted
    removed: list[str] = []
    if not keep:
        from agentstack.apply import remove_user_level

        removed = [str(path) for path in remove_user_level(root)]
    remaining = store.trusted_digests(root)
    if as_json:
        print_json(
            {
                "project": realpath,
                "revoked": [{"digest": r.digest, "seq": r.seq} for r in records],
                "removed_entries": removed,
                "still_trusted": remaining,
                "state": "revoked",
            }
        )
        return
    for record in records:
        echo(f"revoked {record.digest} for {realpath} (trust log record {record.seq})")
    for path in removed:
        echo(f"removed agentstack's harness-side trust entries for this project from {path}")
    if keep:
        echo("harness-side trust entries kept: the files on disk match a digest still trusted")
    elif not removed:
        echo("no harness-side trust entries to remove")
    for value in remaining:
        echo(f"still trusted: {value} ('agentstack revoke' without --digest withdraws it too)")


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
    report["missing_secrets"] = _missing_secrets(document)
    report["export"] = _header_exports(document)
    report["guard_expected"] = _snapshot_expected(root, report)
    ok = (
        report["lock"] == "fresh"
        and report["trust"] == "trusted"
        and not report["drift"]
        and (report["snapshot"] or not _snapshot_expected(root, report))
    )
    if not ok and last is not None:
        # Harness-side trust follows the digest: what the harness would load is not what was
        # trusted, so it must not start with the folder pre-trusted (agentstack.surface).
        from agentstack.surface import withdraw_harness_trust

        report["withdrawn"] = [str(p) for p in withdraw_harness_trust(root)]
    if as_json:
        print_json(report)
    else:
        _print_status(report)
        for path in report.get("withdrawn", []):
            echo(
                f"withdrew agentstack's harness-side trust from {path} until the change is "
                "reviewed ('agentstack trust', then 'agentstack apply --write')"
            )
    if not ok:
        raise typer.Exit(1)


def _missing_secrets(document: dict[str, Any] | None) -> list[dict[str, str]]:
    """Secrets the servers name that the store does not hold (the server cannot start)."""
    if document is None:
        return []
    from agentstack.secrets import SecretStore

    store = SecretStore()
    missing = []
    for name, server in sorted(document.get("servers", {}).items()):
        for table in ("env", "headers"):
            for key, source in sorted(server.get(table, {}).items()):
                if "secret" in source and not store.exists(source["secret"]):
                    missing.append(
                        {"item": f"servers.{name}", "key": key, "secret": source["secret"]}
                    )
    return missing


def _header_exports(document: dict[str, Any] | None) -> list[dict[str, str]]:
    """A remote server's header secrets are sent by the harness itself, which reads them from its
    environment: these variables must be exported where the harness starts."""
    if document is None:
        return []
    from agentstack_adapters.common import secret_env_var

    out = []
    for name, server in sorted(document.get("servers", {}).items()):
        for key, source in sorted(server.get("headers", {}).items()):
            if "secret" in source:
                out.append(
                    {
                        "item": f"servers.{name}",
                        "header": key,
                        "secret": source["secret"],
                        "variable": secret_env_var(source["secret"]),
                    }
                )
    return out


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
        return {"drift": [], "drift_roles": {}, "rendered": [], "tracked": [], "snapshot": False}
    real = str(root.resolve())
    drift, rendered = [], []
    roles: dict[str, str] = {}
    for path, entry in sorted(snapshot.get("files", {}).items()):
        shown = path[len(real) + 1 :] if path.startswith(real + "/") else path
        if entry.get("role") == "rendered":
            rendered.append(shown)
        if drifted(path, entry):
            drift.append(shown)
            roles[shown] = str(entry.get("role", ""))
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
    return {
        "drift": drift,
        "drift_roles": roles,
        "rendered": rendered,
        "tracked": tracked,
        "snapshot": True,
    }


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


def _drift_line(path: str, report: dict[str, Any]) -> str:
    """What changed, and whether agentstack itself made the change (add, lock) or something else
    did it behind agentstack's back."""
    role = report.get("drift_roles", {}).get(path, "")
    if role == "rendered":
        return (
            f"{path} was edited behind agentstack's back (not by 'agentstack apply'): "
            "'agentstack apply' shows how; 'agentstack apply --write --force' restores it"
        )
    if role == "watched":
        return (
            f"{path} changed outside agentstack, and agentstack.toml does not declare it: "
            "remove it, or declare it, lock and trust"
        )
    if path in ("agentstack.toml", "agentstack.lock") and report["lock"] == "fresh":
        return (
            f"{path} changed since you trusted (an agentstack edit: add, remove or lock): "
            "review it with 'agentstack trust'"
        )
    if report["lock"] == "fresh":
        return f"{path} changed since you trusted it and is locked: review it with 'agentstack trust'"
    return (
        f"{path} changed since it was locked and trusted: run 'agentstack lock', then review "
        "it with 'agentstack trust'"
    )


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
        "superseded": "NOT TRUSTED (an older setup; a later trust replaced it: review it again)",
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
        lines.append(f"drift     {_drift_line(path, report)}")
    if report.get("drift"):
        lines.append("          (the guard blocks every tool call until this is resolved)")
    for entry in report.get("missing_secrets", []):
        lines.append(
            f"secret    {entry['item']} needs secret:{entry['secret']} (as {entry['key']}), "
            f"which is not stored: 'agentstack secret set {entry['secret']}'"
        )
    for entry in report.get("export", []):
        lines.append(
            f"export    {entry['variable']} where the harness starts: {entry['item']} sends "
            f"header {entry['header']} from secret:{entry['secret']}; a remote server is not "
            "started by agentstack, so the harness reads the value from its environment"
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

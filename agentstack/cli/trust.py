"""`trust` (and `trust --apply`), `trust list`, `trust log`, `revoke` and `status`: thin
commands over `agentstack.trust` (the review rules) and `agentstack.projectstatus`. `status` with simple
arguments never gets here: `agentstack.entry` runs it without the command table."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from agentstack.cli._app import Command, commands, group
from agentstack.cli._common import Format, Json, User, ask, root_dir, store, use_user
from agentstack.cli._common import store as trust_store
from agentstack.errors import InvalidInput, Refused
from agentstack.output import echo, print_json, result

app = commands()
trust_app = group(None, default=True)
app.add_typer(trust_app, name="trust",
              short_help="Review the consent view (or what changed since you last trusted) and "
              "record trust.")


@trust_app.callback()
def trust(
    ctx: typer.Context,
    yes: Annotated[bool, typer.Option(
        "--yes", "-y", help="Trust without asking (after review).")] = False,
    digest: Annotated[str | None, typer.Option(
        "--digest", help="Refuse unless the current digest is exactly this.")] = None,
    accept_risk: Annotated[bool, typer.Option(
        "--accept-risk", help="Accept high-risk findings (with --yes).")] = False,
    boundary: Annotated[Path | None, typer.Option(
        "--boundary", dir_okay=False,
        help="Refuse unless the setup is within this boundary file (default: "
        "$AGENTSTACK_HOME/boundary.toml when it exists).")] = None,
    apply: Annotated[bool, typer.Option(
        "--apply", help="Then render the harness files, as 'apply --write' (one step: review, "
        "trust, apply).")] = False,
    lock: Annotated[bool, typer.Option(
        "--lock", help="Lock first when agentstack.lock is missing or stale (as "
        "'agentstack lock').")] = False,
    harness: Annotated[list[str] | None, typer.Option(
        "--harness", help="With --apply: only this harness; repeatable.")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="With --apply: overwrite hand edits (backed up first).")] = False,
    pins_at_first_run: Annotated[bool, typer.Option(
        "--pins-at-first-run", help="Start no server at review: the relay pins what each stdio "
        "server first lists when it runs, unreviewed (default: each server without a pin is "
        "started confined after you accept the review, and its listing shown).")] = False,
    as_json: Json = False,
    user: User = False,
) -> int | None:
    """Review and record trust for the current consent digest.

    With --apply, the same process then writes the harness files ('apply --write'); with --lock,
    it first brings a missing or stale agentstack.lock up to date. The review, its prompts and
    its refusals are the same as without them."""
    if ctx.invoked_subcommand is not None:
        return None  # `trust list`, `trust log`: the group's own review does not run
    import agentstack.trust.review as rules
    from agentstack.consent.document import current
    from agentstack.errors import StaleLock

    harness = harness or None
    if (harness or force) and not apply:
        raise InvalidInput("--harness and --force apply to --apply", hint="add --apply")
    use_user(user)
    root = root_dir()
    try:
        _, _, document, value = current(root)
    except StaleLock as exc:
        if not lock:
            raise StaleLock(
                exc.message,
                hint=(exc.hint + "; " if exc.hint else "")
                + "or 'agentstack trust --lock' locks, then reviews",
            ) from None
        from agentstack.lock.command import run_lock

        code = run_lock(project=root, check=False, frozen=False, update=False, as_json=False)
        if code:
            return code
        _, _, document, value = current(root)
    if digest is not None and digest != value:
        raise Refused(
            f"the current consent digest is {value}, not {digest}",
            hint="the project changed since that digest was reviewed; run 'agentstack trust' "
            "to review the change",
        )
    from agentstack import layout
    from agentstack.paths import agentstack_home

    if boundary is not None or os.path.isfile(layout.boundary_file(str(agentstack_home()))):
        # Only then: the boundary module (and its models) costs ~0.1 s of start-up.
        from agentstack.consent.boundary import enforce as enforce_boundary

        enforce_boundary(document, root, boundary_file=boundary)
    from agentstack.teampolicy import enforce as enforce_policy

    enforce_policy(document, root, action="trust")  # the team policy in force, if any
    the_store = store()
    reviewed = rules.review(the_store, root, document, value)
    result: dict[str, Any]
    if reviewed.already_trusted:
        result = {"digest": value, "project": str(root.resolve()), "state": "trusted",
                  "recorded": False}
        if not as_json:
            echo(f"already trusted: {value} for {root.resolve()}")
    else:
        contents = _show_review(reviewed, as_json)
        high = len(reviewed.high_risk)
        rules.require_acceptance(
            high,
            yes=yes,
            accept_risk=accept_risk,
            interactive=sys.stdin.isatty(),
            ask=ask,
            prompt_high=f"{high} high-risk finding(s) above. To trust {value} for "
            f"{root.resolve()}, type accept-risk (anything else declines): ",
            prompt_plain=f"Trust {value} for {root.resolve()}? [y/N] ",
        )
        # Accepted: only now does anything of the project run (its servers, confined, to list).
        listings = _listings_at_review(root.resolve(), document, reviewed.before, value, yes=yes,
                                       accept_risk=accept_risk, as_json=as_json,
                                       first_run=pins_at_first_run)
        done = rules.record(the_store, reviewed, contents)
        undeclared: list[str] = []
        # With --apply, apply writes the guard's snapshot (and warns) right after: once is enough.
        if not apply:
            from agentstack.apply.snapshot import write_snapshot

            undeclared = list(write_snapshot(reviewed.root, reviewed.document, reviewed.digest))
        if listings:
            from agentstack import pinreview

            pinreview.record_listings(root.resolve(), listings, value)
        for item in undeclared:
            echo(
                f"warning: {item} is not in agentstack.toml: the guard blocks every tool call "
                "while it is there"
            )
        result = {
            "digest": value,
            "project": done.project,
            "state": "trusted",
            "recorded": True,
            "seq": done.seq,
            "findings": [f.to_json() for f in reviewed.result.findings],
        }
        if listings:
            result["listings"] = [listing.to_json() for listing in listings]
        if not as_json:
            echo(f"trusted {value} for {done.project} (trust log record {done.seq})")
    pins = _review_pins(root.resolve(), document, value, yes=yes, accept_risk=accept_risk,
                        as_json=as_json)
    if pins:
        result["pins"] = pins
    code = 0
    if apply:
        from agentstack.apply.command import run_apply

        code, applied = run_apply(
            root, document, value, the_store, harness=harness, write=True, force=force,
            as_json=as_json, report_only=True,
        )  # fmt: skip
        result["apply"] = applied
    if as_json:
        print_json(result)
    return code


def _listings_at_review(root: Path, document: dict[str, Any], before: dict[str, Any] | None,
                        digest: str, *, yes: bool, accept_risk: bool, as_json: bool,
                        first_run: bool) -> list[Any]:
    """Once the review is accepted: each stdio server without a pin started confined (no network,
    the project read-only) and asked for its listings, shown as the text the model will read and
    accepted a second time. A server that cannot be listed is a high-risk finding (trusted, it
    is pinned at its first run). `first_run`: no server is started here."""
    import agentstack.trust.review as rules
    from agentstack import pinreview

    say = (lambda line: print(line, file=sys.stderr)) if as_json else echo
    unpinned = pinreview.unpinned_servers(root, document)
    remote = pinreview.unpinned_remote_servers(root, document)
    if remote:
        say(f"not listed at review: {', '.join(remote)} (remote; the relay pins what each first "
            "lists when it runs)")
    # One trusted before without a listing, and unchanged since: its pins stay for its first run
    # (accepted then; it is not started, or flagged, again at every review).
    kept = pinreview.unchanged_servers(unpinned, document, before)
    if kept:
        say(f"not started at review: {', '.join(kept)} (unchanged since trusted without a "
            "listing; the relay pins what each first lists when it runs)")
    servers = [name for name in unpinned if name not in kept]
    if not servers:
        return []
    if first_run:
        say(f"not started at review (--pins-at-first-run): {', '.join(servers)}; the relay pins "
            "what each first lists when it runs")
        return []
    say(f"Starting {len(servers)} server(s) confined (no network, no $HOME, the project "
        "read-only) to read what each lists, the text the model will read:")
    listings = pinreview.probe_servers(root, document, digest, servers)
    for listing in listings:
        for line in pinreview.listing_lines(listing):
            say(line)
    failed = [listing.server for listing in listings if listing.error is not None]
    if failed:
        say(f"{len(failed)} server(s) could not be listed at review ({', '.join(failed)}): "
            "trusted, their pins are taken when each first runs behind the relay (high risk: "
            "what they list is not reviewed here)")
    rules.require_acceptance(
        len(failed), yes=yes, accept_risk=accept_risk, interactive=sys.stdin.isatty(), ask=ask,
        prompt_high=f"To trust {', '.join(failed)} without reviewing what they list, type "
        "accept-risk (anything else declines): ",
        prompt_plain="Trust them with these listings as their pins? [y/N] ",
        high_declined=" (a server not listed at review needs the word accept-risk; fix it, or "
        "re-run with --pins-at-first-run)",
    )
    return listings


def _review_pins(root: Path, document: dict[str, Any], digest: str, *, yes: bool,
                 accept_risk: bool, as_json: bool) -> list[dict[str, Any]]:
    """What the relay withheld (a server's changed or new tools, prompts, resources): shown as
    lines, and once accepted recorded as the servers' new pins."""
    import agentstack.trust.review as rules
    from agentstack import pinreview

    changes = pinreview.pending_changes(root, sorted(document.get("servers", {})))
    if not changes:
        return []
    say = (lambda line: print(line, file=sys.stderr)) if as_json else echo
    say(f"{len(changes)} listing change(s) the relay withheld since the servers were pinned "
        "(the text the model would read):")
    for change in changes:
        for line in pinreview.change_lines(change):
            say(line)
    rules.require_acceptance(
        0, yes=yes, accept_risk=accept_risk, interactive=sys.stdin.isatty(), ask=ask,
        prompt_high="", prompt_plain="Record them as the servers' pins? [y/N] ",
        refusal="pins not recorded",
    )
    pinreview.record(root, changes, digest)
    say(f"recorded {len(changes)} listing change(s) as the servers' pins")
    return [c.to_json() for c in changes]


def _show_review(reviewed: Any, as_json: bool) -> Any:
    """Print the review (the whole consent view the first time, else the diff against the last
    trusted document; on stderr with --json). Returns the contents it showed."""
    from agentstack.apply.preview import user_level_changes
    from agentstack.consent.render import (
        consent_renderable,
        console,
        diff_renderable,
        findings_renderable,
        outside_renderable,
    )
    from agentstack.trust.review import harness_notes, review_contents

    root, state, document, value = reviewed.root, reviewed.state, reviewed.document, reviewed.digest
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
    contents = review_contents(root, document)
    if reviewed.first:
        out.print(consent_renderable(document, value))
        out.print(findings_renderable(reviewed.result))
    else:
        previous = reviewed.previous
        out.print(
            f"Changes since the digest you trusted on {previous.time if previous else ''}:",
            markup=False,
        )
        out.print(diff_renderable(reviewed.result, contents=contents))
        for problem in contents.store.problems:  # its texts were shown by size and hash
            out.print(f"warning: {problem}; not used", markup=False, highlight=False)
    for note in harness_notes(document):
        out.print(note, markup=False)
    outside = user_level_changes(root, document, value)
    from agentstack.paths import is_user_root
    from agentstack.userlevel import foreign, foreign_skills

    if is_user_root(root):
        for line in foreign(root, document, value):
            out.print(f"foreign (not in the user-level setup; the guard refuses its servers' "
                      f"tools while it is there; 'agentstack adopt --user' moves it in): {line}",
                      markup=False, highlight=False)
        for line in foreign_skills(document):
            out.print(f"foreign skill (not in the user-level setup; it stays and loads as "
                      f"before; 'agentstack adopt --user' moves it in): {line}",
                      markup=False, highlight=False)
    if outside:
        from agentstack.consent.render import Wrapped, t

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
    return contents


@trust_app.command("list", cls=Command)
def trust_list(as_json: Json = False) -> None:
    """Currently trusted digests, per project."""
    from agentstack.trust.review import current_trusts

    store = trust_store()
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

    from agentstack.consent.render import Wrapped, console, t

    out = console()
    out.print(Text("Trusted consent digests", style="bold underline"))
    latest = {r["project"]: r["digest"] for r in rows}  # rows are in trust order per project
    for row in rows:
        note = "" if latest[row["project"]] == row["digest"] else " (superseded by a later trust)"
        out.print(Wrapped(t(row["project"]), 4))
        out.print(Wrapped(t(row["digest"]), 6, first=Text("    ")))
        out.print(Wrapped(t(f"trusted {row['time']}{note}"), 6, first=Text("    ")))


@trust_app.command("log", cls=Command)
def trust_log(
    verify: Annotated[bool, typer.Option(
        "--verify", help="Check the hash chain and the head.")] = False,
    as_json: Json = False,
) -> int:
    """Print the trust log; --verify checks its chain (exit 1 naming the first bad record)."""
    store = trust_store()
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
                result(f"trust log does not verify: {report.problem}\nlog: {store.log.path}")
            return 1
        if not as_json:
            result(f"trust log verifies: {report.count} records, head {report.head}")
        return 0
    records = store.log.records()
    if as_json:
        print_json({"records": [r.to_json() for r in records]})
        return 0
    from agentstack.sanitize import sanitize

    for r in records:
        sys.stdout.write(
            sanitize(f"{r.seq:>5} {r.time} {r.action:<8} {r.digest} {r.project}") + "\n"
        )
    return 0


@app.command(cls=Command)
def revoke(
    digest_arg: Annotated[str | None, typer.Argument(
        metavar="[DIGEST]", show_default=False, help="Same as --digest.")] = None,
    digest: Annotated[str | None, typer.Option(
        "--digest", help="Revoke only this digest (default: every trusted one).")] = None,
    as_json: Json = False,
    user: User = False,
) -> None:
    """Withdraw trust: every digest trusted for this project (or --digest), and harness entries.

    The harness-side trust entries go whenever no digest matching the files on disk stays
    trusted; the output lists every digest revoked and every file changed."""
    from agentstack.canonical import is_digest
    from agentstack.trust.review import keep_contents

    use_user(user)
    root = root_dir()
    store = trust_store()
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
        from agentstack.apply.engine import (
            remove_user_level,  # what a revoke that failed left behind
        )

        if not targets and (left := remove_user_level(root)):
            return echo("nothing left to revoke; removed agentstack's harness-side trust entries "
                        f"for this project from {', '.join(map(str, left))}")
        if not targets:
            raise Refused(
                f"nothing is trusted for {realpath}; nothing to revoke",
                hint="see 'agentstack trust list'",
            )
    records = [store.revoke(root, value) for value in targets]
    keep_contents(store, None)
    # The harness-side entries stay only while a digest matching the files on disk is trusted.
    from agentstack.errors import AgentstackError

    try:
        from agentstack.consent.document import current as consent_now

        current: str | None = consent_now(root)[3]
    except AgentstackError:
        current = None  # a stale lock or a broken manifest: nothing on disk is trusted
    keep = current is not None and store.state(root, current).trusted
    removed: list[str] = []
    if not keep:
        from agentstack.apply.engine import remove_user_level

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


@app.command(cls=Command)
def status(as_json: Json = False, output_format: Format = None, user: User = False) -> int:
    """Lock freshness, trust state of the current digest, and what changed since the trusted one.

    Exit 0 when the lock is fresh and its digest trusted; 1 otherwise. When something trusted
    before no longer holds (a stale lock, a changed file), status also withdraws agentstack's
    harness-side trust entries from user-level files (~/.claude.json, ~/.codex/config.toml, …)
    so the harness stops loading the project's servers and hooks, and says so ("withdrew ...";
    in --json: "withdrawn"); 'agentstack apply --write' restores them once trusted again."""
    from agentstack import readcmds
    from agentstack.consent.sarif import output_format as chosen_format

    fmt = chosen_format(output_format, as_json)
    use_user(user)
    return readcmds.status(root_dir(), store(), fmt == "json", sarif=fmt == "sarif")

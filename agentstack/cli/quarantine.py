"""`receive` and `quarantine list|show|release|discard`: a received bundle is held, reviewed and
released into a project (`agentstack.share.quarantine`); nothing in it runs before that."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from agentstack.cli._app import Command, commands, group
from agentstack.cli._common import Json, ask
from agentstack.errors import Refused
from agentstack.output import echo, print_json

app = commands()
quarantine_app = group("Review received bundles and release them into a project.")
app.add_typer(quarantine_app, name="quarantine")

Ident = Annotated[str, typer.Argument(metavar="ID")]


@app.command(cls=Command)
def receive(
    bundle_path: Annotated[Path, typer.Argument(metavar="FILE")], as_json: Json = False,
) -> None:
    """Verify a bundle, then hold it in quarantine (nothing in it runs); prints its id."""
    from agentstack.share.quarantine import receive as do_receive

    result = do_receive(bundle_path)
    meta = result.held.meta
    if result.contents is not None:  # checked on the way in: no second pass over the files
        from agentstack.consent.boundary import report

        checked = report(result.contents.document, None)
    else:
        checked = _boundary_report(result.held, None)
    if as_json:
        print_json({**meta, "new": result.new,
                    "boundary": checked.to_json() if checked is not None else None})
        return
    if checked is not None:
        from agentstack.consent.boundary import describe

        echo("boundary in force: " + "\n".join(describe(checked)))
    sys.stdout.write(result.held.id + "\n")
    who = ", ".join(meta["signer"]) or f"an UNKNOWN signer ({meta['fingerprint']})"
    echo(
        ("received " if result.new else "already in quarantine: ")
        + f"{meta['name']} {meta['version']} signed by {who}\n"
        f"next: 'agentstack quarantine show {result.held.id[:12]}', then "
        f"'agentstack quarantine release {result.held.id[:12]} --into DIR'"
        + (" --allow-unknown-signer" if not meta["signer"] else "")
    )


def _current_signers() -> dict[str, list[str]]:
    """Key fingerprint -> the principals allowed_signers trusts it as for bundles, now."""
    import agentstack.share.sshsig as sshsig
    from agentstack.share.keys import allowed_signers

    out: dict[str, list[str]] = {}
    moment = time.time()
    for line in allowed_signers().lines():
        if line.allows(sshsig.NAMESPACE, moment):
            names = out.setdefault(line.key.fingerprint, [])
            names.extend(p for p in line.principals.split(",") if p and p not in names)
    return out


@quarantine_app.command("list", cls=Command)
def quarantine_list(as_json: Json = False) -> None:
    """Bundles held in quarantine."""
    from agentstack.share.quarantine import list_held

    held = list_held()
    rows: list[dict[str, Any]] = [
        {
            "id": h.id,
            **{
                k: h.meta.get(k)
                for k in (
                    "name",
                    "version",
                    "signer",
                    "fingerprint",
                    "received",
                    "state",
                    "expires",
                )
            },
        }
        for h in held
    ]
    # Who the signer is now (a key trusted since `receive` counts; one withdrawn since does not).
    now = _current_signers()
    for row in rows:
        row["signer"] = now.get(str(row.get("fingerprint") or ""), [])
        if row.get("state") in ("held", "unknown-signer"):
            row["state"] = "held" if row["signer"] else "unknown-signer"
    if as_json:
        print_json({"quarantine": rows})
        return
    if not rows:
        echo("nothing in quarantine")
        return
    from agentstack.sanitize import sanitize

    for row in rows:
        who = ",".join(row["signer"] or []) or "unknown-signer"
        sys.stdout.write(
            sanitize(
                f"{row['id'][:12]}  {row['name']} {row['version']}  {row['state']}  "
                f"signer {who}  received {row['received']}"
            )
            + "\n"
        )


def _boundary_report(held: Any, dest: Path | None) -> Any:
    """The user's boundary in force checked against a quarantined setup (None: no boundary)."""
    from agentstack.consent.boundary import report
    from agentstack.share.quarantine import verify_held

    _, contents, _ = verify_held(held)
    return report(contents.document, dest)


def _diff_against(dest: Path | None, document: dict[str, Any]) -> tuple[Any, Any]:
    """The consent diff against what the user trusted at `dest`, when `dest` holds a project."""
    from agentstack.consent.diff import consent_diff
    from agentstack.consent.document import consent_digest
    from agentstack.manifest.view import MANIFEST_NAME
    from agentstack.trust.review import TrustStore, review

    if dest is None or not (dest / MANIFEST_NAME).is_file():
        return None, consent_diff(None, document)
    # The same review as 'agentstack trust' there: against the last digest trusted for DIR.
    reviewed = review(TrustStore(), dest, document, consent_digest(document))
    return reviewed.previous, reviewed.result


def _review(held: Any, contents: Any, principals: list[str], dest: Path | None, out: Any) -> Any:
    from agentstack.consent.render import consent_renderable, diff_renderable

    meta = held.meta
    who = (
        ", ".join(principals)
        or f"UNKNOWN signer {meta.get('fingerprint')} (not in allowed_signers)"
    )
    from agentstack.sanitize import sanitize

    out.print(
        sanitize(
            f"quarantine {held.id[:12]}: {meta.get('name')} {meta.get('version')} signed by "
            f"{who}; received {meta.get('received')}, expires {meta.get('expires')}"
        ),
        markup=False, highlight=False,
    )  # fmt: skip
    last, result = _diff_against(dest, contents.document)
    if last is None:
        out.print(consent_renderable(contents.document, contents.digest))
        out.print(diff_renderable(result).renderables[0])
    else:
        out.print(
            sanitize(f"Changes against the digest you trusted in {dest} on {last.time}:"),
            markup=False, highlight=False,
        )  # fmt: skip
        out.print(diff_renderable(result))
    return result


@quarantine_app.command("show", cls=Command)
def quarantine_show(
    ident: Ident,
    into: Annotated[Path | None, typer.Option(
        "--into", help="Also diff against what you trusted in DIR.")] = None,
    as_json: Json = False,
) -> None:
    """The consent view of a quarantined bundle (and the diff against DIR's trusted setup)."""
    from agentstack.consent.boundary import describe, report
    from agentstack.consent.render import console
    from agentstack.share.quarantine import find, verify_held

    held = find(ident)
    _, contents, principals = verify_held(held)
    dest = into.expanduser().resolve() if into is not None else None
    checked = report(contents.document, dest)
    if as_json:
        _, result = _diff_against(into, contents.document)
        print_json(
            {"id": held.id, "meta": held.meta, "signer_now": principals, "digest": contents.digest,
             "consent": contents.document, "diff": result.to_json(),
             "boundary": checked.to_json() if checked is not None else None}
        )  # fmt: skip
        return
    _review(held, contents, principals, into, console())
    if checked is not None:
        echo("boundary in force: " + "\n".join(describe(checked)))


@quarantine_app.command("release", cls=Command)
def quarantine_release(
    ident: Ident,
    into: Annotated[Path, typer.Option(
        "--into", help="The project directory to copy the setup into.")],
    trust: Annotated[bool, typer.Option("--trust", help="Also trust the digest for DIR.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace differing files (backed up first).")] = False,
    allow_unknown_signer: Annotated[bool, typer.Option(
        "--allow-unknown-signer", help="Release a bundle from a signer you do not trust.")] = False,
    yes: Annotated[bool, typer.Option(
        "--yes", "-y", help="Release without asking (after review).")] = False,
    accept_risk: Annotated[bool, typer.Option(
        "--accept-risk", help="Accept new high-risk findings (with --yes --trust).")] = False,
    as_json: Json = False,
) -> None:
    """Review, then copy a quarantined setup into DIR and record the decision in the trust log."""
    from agentstack.consent.render import console
    from agentstack.share.quarantine import find, release, verify_held

    held = find(ident)
    statement, contents, principals = verify_held(held)
    if not principals and not allow_unknown_signer:
        raise Refused(
            f"{held.id[:12]} is signed by a key you do not trust ({held.meta.get('fingerprint')})",
            hint="review it with 'agentstack quarantine show ID'; release with "
            "--allow-unknown-signer, or trust the signer first ('agentstack keys trust')",
        )
    dest = into.expanduser().resolve()
    from agentstack.teampolicy import enforce as enforce_policy

    enforce_policy(contents.document, dest, action="release")  # before anything is written
    if trust:  # trusting is refused beyond the boundary in force, before anything is written
        from agentstack.consent.boundary import enforce

        enforce(contents.document, dest)
    result = _review(held, contents, principals, dest, console(stderr=as_json))
    # The one rule of every review: trusting high-risk findings needs an explicit acceptance.
    from agentstack.trust.review import require_acceptance

    high = len(result.high_risk) if trust else 0
    require_acceptance(
        high,
        yes=yes,
        accept_risk=accept_risk,
        interactive=sys.stdin.isatty(),
        ask=ask,
        prompt_high=f"{high} high-risk finding(s) above. Type 'accept-risk' to release "
        f"{held.id[:12]} into {dest} and trust it: ",
        prompt_plain=f"Release {held.id[:12]} into {dest}? [y/N] ",
        refusal="not released",
        new="new ",
        high_declined="",
    )
    done = release(
        held, dest, contents=contents, statement=statement, principals=principals,
        trust=trust, force=force, allow_unknown_signer=allow_unknown_signer,
    )  # fmt: skip
    if as_json:
        print_json(
            {"id": held.id, "into": str(done.dest), "digest": done.digest, "written": done.written,
             "backup": str(done.backup) if done.backup else None, "trusted": done.trusted}
        )  # fmt: skip
        return
    echo(
        f"released {held.meta.get('name')} {held.meta.get('version')} into {done.dest} "
        f"({len(done.written)} files written; digest {done.digest})"
        + (f"; replaced files are in {done.backup}" if done.backup else "")
        + (
            "; trusted"
            if done.trusted
            else "; next: 'agentstack trust' there to review and trust it"
        )
    )


@quarantine_app.command("discard", cls=Command)
def quarantine_discard(ident: Ident) -> None:
    """Delete a quarantined bundle (recorded in the trust log)."""
    from agentstack.share.quarantine import discard, find

    held = find(ident)
    discard(held)
    echo(f"discarded {held.id[:12]}")

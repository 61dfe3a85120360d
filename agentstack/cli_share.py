"""`keys`, `share`, `inspect`, `receive` and `quarantine`: handing a setup to a teammate."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from agentstack.cli_base import JSON, Arg, Opt, app, ask, root_dir
from agentstack.entry import echo, print_json
from agentstack.errors import InvalidInput, Refused

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any

keys_app = app.group("keys", "Signing keys and the signers you accept bundles from.")
quarantine_app = app.group(
    "quarantine", "Review received bundles and release them into a project."
)


# ------------------------------------------------------------------------------ keys


@keys_app.command(Arg("name", "NAME"), JSON, name="generate")
def keys_generate(name: str, as_json: bool = False) -> None:
    """Create an Ed25519 signing key (OpenSSH format, 0600) under $AGENTSTACK_HOME/keys."""
    from agentstack import keys

    info = keys.generate(name)
    if as_json:
        print_json(
            {"name": info.name, "path": str(info.path), "fingerprint": info.public.fingerprint,
             "public_key": info.public.openssh(info.name)}
        )  # fmt: skip
        return
    echo(f"created {info.path} ({info.public.fingerprint})")
    sys.stdout.write(info.public.openssh(info.name) + "\n")
    echo(
        "give the line above to your teammates; each runs "
        f"'agentstack keys trust YOUR-NAME \"{info.public.openssh()}\"'"
    )


@keys_app.command(JSON, name="list")
def keys_list(as_json: bool = False) -> None:
    """Your signing keys and the signers you trust."""
    from agentstack import keys

    mine = [
        {"name": k.name, "fingerprint": k.public.fingerprint, "path": str(k.path)}
        for k in keys.list_keys()
    ]
    signers = [
        {
            "principals": line.principals,
            "fingerprint": line.key.fingerprint,
            "namespaces": list(line.namespaces) if line.namespaces is not None else None,
        }
        for line in keys.allowed_signers().lines()
    ]
    if as_json:
        print_json(
            {"keys": mine, "signers": signers, "allowed_signers": str(keys.allowed_signers().path)}
        )
        return
    from agentstack.sanitize import sanitize

    out = ["signing keys:"] + [f"  {k.name}  {k.public.fingerprint}" for k in keys.list_keys()]
    if not mine:
        out.append("  (none: 'agentstack keys generate NAME')")
    out.append("trusted signers:")
    out += [
        f"  {sanitize(line.principals)}  {line.key.fingerprint}"
        + ("" if line.namespaces is None else f"  ({','.join(line.namespaces)})")
        for line in keys.allowed_signers().lines()
    ] or ["  (none: 'agentstack keys trust PRINCIPAL PUBKEY')"]
    sys.stdout.write("\n".join(out) + "\n")


@keys_app.command(Arg("name", "NAME"), name="export")
def keys_export(name: str) -> None:
    """Print a key's OpenSSH public key line."""
    from agentstack import keys

    key = keys.load(name)
    sys.stdout.write(key.public.openssh(name) + "\n")


@keys_app.command(
    Arg("principal", "PRINCIPAL", "A name for the signer, such as an email."),
    Arg("pubkey", "PUBKEY", "An OpenSSH public key line, or a .pub file."),
    name="trust",
)
def keys_trust(principal: str, pubkey: str) -> None:
    """Accept bundles signed by PUBKEY, as PRINCIPAL (adds an allowed_signers line)."""
    from agentstack import keys
    from agentstack.sshsig import check_principal

    check_principal(principal)
    key = keys.read_public_key(pubkey)
    signers = keys.allowed_signers()
    if signers.add(principal, key):
        echo(f"trusted {principal} ({key.fingerprint}) in {signers.path}")
    else:
        echo(f"{principal} ({key.fingerprint}) was already trusted")


@keys_app.command(Arg("principal", "PRINCIPAL"), name="untrust")
def keys_untrust(principal: str) -> None:
    """Stop accepting bundles from PRINCIPAL."""
    from agentstack import keys

    signers = keys.allowed_signers()
    if not signers.remove(principal):
        raise Refused(f"{principal!r} is not in {signers.path}", hint="see 'agentstack keys list'")
    echo(f"{principal} is no longer trusted ({signers.path})")


# ------------------------------------------------------------------------------ share / inspect


_DURATION = re.compile(r"([0-9]{1,5})([hdw])")


def parse_expires(value: str, now: float) -> int:
    """`90d`, `12h`, `2w`, or a UTC date/time (`2027-01-31`, `2027-01-31T12:00:00Z`) -> seconds."""
    match = _DURATION.fullmatch(value.strip())
    if match:
        return int(match.group(1)) * {"h": 3600, "d": 86400, "w": 7 * 86400}[match.group(2)]
    import calendar

    for fmt in ("%Y-%m-%d", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return int(calendar.timegm(time.strptime(value, fmt)) - now)
        except ValueError:
            continue
    raise InvalidInput(
        f"--expires {value!r} is not a duration or a date",
        hint="for example 30d, 12h, 2w or 2027-01-31",
    )


@app.command(
    Opt(("-o", "--output"), "output", "The .astack file (default: NAME-VERSION.astack).",
        type=Path),
    Opt(("--key",), "key", "A key from 'keys list'."),
    Opt(("--ssh-key",), "ssh_key", "An unencrypted OpenSSH ed25519 key file.", type=Path),
    Opt(("--name",), "name", "Bundle name (default: the project's)."),
    Opt(("--version",), "version", "Bundle version, e.g. 3 or 1.4.0 (default: from the time)."),
    Opt(("--expires",), "expires", "Lifetime (30d, 12h, 2w) or a UTC date (2027-01-31).",
        default="90d"),
    JSON,
)
def share(
    output: Path | None = None,
    key: str | None = None,
    ssh_key: Path | None = None,
    name: str | None = None,
    version: str | None = None,
    expires: str = "90d",
    as_json: bool = False,
) -> None:
    """Write a signed bundle of the locked, trusted setup (deterministic: same inputs, same bytes)."""
    import os

    from agentstack import bundle
    from agentstack.fsutil import write_atomic

    if output is not None and not output.parent.is_dir():
        raise InvalidInput(
            f"-o {output}: the directory {output.parent} does not exist; nothing was written",
            hint=f"create it first ('mkdir -p {output.parent}') or write the bundle elsewhere",
        )
    root = root_dir()
    signing_key = _key(key, ssh_key)
    now = (
        float(os.environ["SOURCE_DATE_EPOCH"])
        if os.environ.get("SOURCE_DATE_EPOCH")
        else time.time()
    )
    built = bundle.build(
        root, signing_key, name=name, version=version, now=now,
        lifetime_s=parse_expires(expires, now),
    )  # fmt: skip
    if output is None:
        output = Path(f"{built.statement.name}-{built.statement.version}.astack")
    write_atomic(output, built.data, 0o644)
    summary = {
        "bundle": built.digest,
        "file": str(output),
        "name": built.statement.name,
        "version": built.statement.version,
        "expires": built.statement.expires,
        "consent": built.statement.consent,
        "members": len(built.statement.members),
        "signer": signing_key.public.fingerprint,
    }
    if as_json:
        print_json(summary)
    else:
        echo(
            f"wrote {output}: {built.statement.name} {built.statement.version}, "
            f"{len(built.statement.members)} files, digest {built.statement.consent}, "
            f"signed by {signing_key.public.fingerprint}, expires {built.statement.expires}"
        )


@app.command(
    Arg("bundle_path", "BUNDLE", type=Path),
    Opt(("--statement",), "statement",
        "Write the signed statement to OUT and its signature to OUT.sig.", type=Path),
    JSON,
)
def inspect(bundle_path: Path, statement: Path | None = None, as_json: bool = False) -> None:
    """Show a bundle's signed statement without receiving it (its members are not read)."""
    from agentstack import bundle
    from agentstack.fsutil import write_atomic

    try:
        handle = open(bundle_path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise InvalidInput(f"{bundle_path}: cannot read it ({exc.strerror})") from None
    with handle:
        opened = bundle.open_bundle(handle, check_time=False)
    st = opened.statement
    now = time.time()
    validity = (
        "expired" if bundle.parse_utc(st.expires) <= now
        else "not yet valid" if bundle.parse_utc(st.created) > now + bundle.CLOCK_SKEW_S
        else "valid"
    )  # fmt: skip
    if statement is not None:
        write_atomic(statement, opened.statement_bytes, 0o644)
        write_atomic(Path(f"{statement}.sig"), opened.signature, 0o644)
    report = {
        **{k: v for k, v in st.to_json().items() if k != "members"},
        "members": len(st.members),
        "size": sum(m.size for m in st.members),
        "validity": validity,
        "fingerprint": opened.signer_key.fingerprint,
        "signer": opened.principals,
    }
    if as_json:
        print_json(report)
        return
    from agentstack.sanitize import sanitize

    signer = ", ".join(opened.principals) or "UNKNOWN (not in allowed_signers)"
    lines = [
        f"bundle    {st.name} {st.version}",
        f"signed by {sanitize(signer)} ({opened.signer_key.fingerprint}); signature verifies",
        f"created   {st.created}; expires {st.expires} ({validity})",
        f"consent   {st.consent}",
        f"lock      {st.lock}",
        f"members   {len(st.members)} files, {report['size']} bytes",
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    if statement is not None:
        echo(
            f"wrote {statement} and {statement}.sig; check them with: ssh-keygen -Y verify "
            f"-n agentstack-bundle -f ALLOWED_SIGNERS -I PRINCIPAL -s {statement}.sig < {statement}"
        )


# ------------------------------------------------------------------------------ receive


@app.command(Arg("bundle_path", "FILE", type=Path), JSON)
def receive(bundle_path: Path, as_json: bool = False) -> None:
    """Verify a bundle, then hold it in quarantine (nothing in it runs); prints its id."""
    from agentstack.quarantine import receive as do_receive

    result = do_receive(bundle_path)
    meta = result.held.meta
    checked = _boundary_report(result.held, None)
    if as_json:
        print_json({**meta, "new": result.new,
                    "boundary": checked.to_json() if checked is not None else None})
        return
    if checked is not None:
        from agentstack.boundary import describe

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


# ------------------------------------------------------------------------------ quarantine


def _current_signers() -> dict[str, list[str]]:
    """Key fingerprint -> the principals allowed_signers trusts it as for bundles, now."""
    from agentstack import sshsig
    from agentstack.keys import allowed_signers

    out: dict[str, list[str]] = {}
    moment = time.time()
    for line in allowed_signers().lines():
        if line.allows(sshsig.NAMESPACE, moment):
            names = out.setdefault(line.key.fingerprint, [])
            names.extend(p for p in line.principals.split(",") if p and p not in names)
    return out


@quarantine_app.command(JSON, name="list")
def quarantine_list(as_json: bool = False) -> None:
    """Bundles held in quarantine."""
    from agentstack.quarantine import list_held

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
    from agentstack.boundary import report
    from agentstack.quarantine import verify_held

    _, contents, _ = verify_held(held)
    return report(contents.document, dest)


def _diff_against(dest: Path | None, document: dict[str, Any]) -> tuple[Any, Any]:
    """The consent diff against what the user trusted at `dest`, when `dest` holds a project."""
    from agentstack.consent import consent_digest
    from agentstack.diff import consent_diff
    from agentstack.manifestview import MANIFEST_NAME
    from agentstack.trust import TrustStore, review

    if dest is None or not (dest / MANIFEST_NAME).is_file():
        return None, consent_diff(None, document)
    # The same review as 'agentstack trust' there: against the last digest trusted for DIR.
    reviewed = review(TrustStore(), dest, document, consent_digest(document))
    return reviewed.previous, reviewed.result


def _review(held: Any, contents: Any, principals: list[str], dest: Path | None, out: Any) -> Any:
    from agentstack.view import consent_renderable, diff_renderable

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


@quarantine_app.command(
    Arg("ident", "ID"),
    Opt(("--into",), "into", "Also diff against what you trusted in DIR.", type=Path),
    JSON,
    name="show",
)
def quarantine_show(ident: str, into: Path | None = None, as_json: bool = False) -> None:
    """The consent view of a quarantined bundle (and the diff against DIR's trusted setup)."""
    from agentstack.boundary import describe, report
    from agentstack.quarantine import find, verify_held
    from agentstack.view import console

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


@quarantine_app.command(
    Arg("ident", "ID"),
    Opt(("--into",), "into", "The project directory to copy the setup into.", type=Path,
        required=True),
    Opt(("--trust",), "trust", "Also trust the digest for DIR.", kind="flag"),
    Opt(("--force",), "force", "Replace differing files (backed up first).", kind="flag"),
    Opt(("--allow-unknown-signer",), "allow_unknown_signer",
        "Release a bundle from a signer you do not trust.", kind="flag"),
    Opt(("--yes", "-y"), "yes", "Release without asking (after review).", kind="flag"),
    Opt(("--accept-risk",), "accept_risk",
        "Accept new high-risk findings (with --yes --trust).", kind="flag"),
    JSON,
    name="release",
)
def quarantine_release(
    ident: str,
    into: Path,
    trust: bool = False,
    force: bool = False,
    allow_unknown_signer: bool = False,
    yes: bool = False,
    accept_risk: bool = False,
    as_json: bool = False,
) -> None:
    """Review, then copy a quarantined setup into DIR and record the decision in the trust log."""
    from agentstack.quarantine import find, release, verify_held
    from agentstack.view import console

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
        from agentstack.boundary import enforce

        enforce(contents.document, dest)
    result = _review(held, contents, principals, dest, console(stderr=as_json))
    # The one rule of every review: trusting high-risk findings needs an explicit acceptance.
    from agentstack.trust import require_acceptance

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


@quarantine_app.command(Arg("ident", "ID"), name="discard")
def quarantine_discard(ident: str) -> None:
    """Delete a quarantined bundle (recorded in the trust log)."""
    from agentstack.quarantine import discard, find

    held = find(ident)
    discard(held)
    echo(f"discarded {held.id[:12]}")


def _key(key: str | None, ssh_key: Path | None) -> Any:
    from agentstack import keys

    return keys.signing_key(key, ssh_key)

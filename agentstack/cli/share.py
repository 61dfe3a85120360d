"""`share` and `inspect`: a signed bundle of the locked, trusted setup for a teammate
(`agentstack.share.bundle`)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from agentstack.cli._app import Command, commands
from agentstack.cli._common import Json, root_dir
from agentstack.errors import InvalidInput
from agentstack.output import echo, print_json

app = commands()


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


@app.command(cls=Command)
def share(
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="The .astack file (default: NAME-VERSION.astack).")] = None,
    key: Annotated[str | None, typer.Option("--key", help="A key from 'keys list'.")] = None,
    ssh_key: Annotated[Path | None, typer.Option(
        "--ssh-key", help="An unencrypted OpenSSH ed25519 key file.")] = None,
    name: Annotated[str | None, typer.Option(
        "--name", help="Bundle name (default: the project's).")] = None,
    version: Annotated[str | None, typer.Option(
        "--version", help="Bundle version, e.g. 3 or 1.4.0 (default: from the time).")] = None,
    expires: Annotated[str, typer.Option(
        "--expires", help="Lifetime (30d, 12h, 2w) or a UTC date (2027-01-31).")] = "90d",
    as_json: Json = False,
) -> None:
    """Write a signed bundle of the locked, trusted setup (deterministic: same inputs, same bytes)."""
    import os

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
    built, output = _write_bundle(
        output, root, signing_key, name=name, version=version, now=now,
        lifetime_s=parse_expires(expires, now),
    )  # fmt: skip
    summary = {
        "bundle": built.digest,
        "file": str(output),
        "name": built.statement.name,
        "version": built.statement.version,
        "expires": built.statement.expires,
        "consent": built.statement.consent,
        "members": built.statement.member_count,
        "signer": signing_key.public.fingerprint,
    }
    if as_json:
        print_json(summary)
    else:
        echo(
            f"wrote {output}: {built.statement.name} {built.statement.version}, "
            f"{built.statement.member_count} files, digest {built.statement.consent}, "
            f"signed by {signing_key.public.fingerprint}, expires {built.statement.expires}"
        )


@app.command(cls=Command)
def inspect(
    bundle_path: Annotated[Path, typer.Argument(metavar="BUNDLE")],
    statement: Annotated[Path | None, typer.Option(
        "--statement",
        help="Write the signed statement to OUT and its signature to OUT.sig.")] = None,
    as_json: Json = False,
) -> None:
    """Show a bundle's signed statement without receiving it (its members are not read)."""
    import agentstack.share.bundle as bundle
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
        **{k: v for k, v in st.to_json().items() if k not in ("members", "manifest")},
        "format": st.format,
        "members": st.member_count,
        "size": st.member_bytes,
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
        f"members   {st.member_count} files, {report['size']} bytes"
        + (f" (format {st.format}: listed in the statement)" if st.manifest is None else ""),
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    if statement is not None:
        echo(
            f"wrote {statement} and {statement}.sig; check them with: ssh-keygen -Y verify "
            f"-n agentstack-bundle -f ALLOWED_SIGNERS -I PRINCIPAL -s {statement}.sig < {statement}"
        )


def _write_bundle(output: Path | None, root: Path, signing_key: Any, **how: Any) -> tuple[Any, Path]:
    """Build the bundle straight into its file (streamed: memory does not grow with the size of
    the files), atomically: on any refusal part way nothing is created or replaced."""
    import agentstack.share.bundle as bundle
    from agentstack.fsutil import write_atomic_with

    if output is None:
        output = Path(bundle.default_file_name(root, how.get("name"), how.get("version"),
                                               how["now"]))  # fmt: skip
    built = write_atomic_with(output, lambda handle: bundle.build(root, signing_key, out=handle,
                                                                   **how), 0o644)  # fmt: skip
    return built, output


def _key(key: str | None, ssh_key: Path | None) -> Any:
    import agentstack.share.keys as keys

    return keys.signing_key(key, ssh_key)

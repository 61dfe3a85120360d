"""`keys generate|list|export|trust|untrust`: signing keys and the signers whose bundles you
accept (`agentstack.share.keys`)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from agentstack.cli._app import Command, commands, group
from agentstack.cli._common import Json
from agentstack.errors import Refused
from agentstack.output import echo, print_json

app = commands()
keys_app = group("Signing keys and the signers you accept bundles from.")
app.add_typer(keys_app, name="keys")

Name = Annotated[str, typer.Argument(metavar="NAME")]


@keys_app.command("generate", cls=Command)
def keys_generate(name: Name, as_json: Json = False) -> None:
    """Create an Ed25519 signing key (OpenSSH format, 0600) under $AGENTSTACK_HOME/keys."""
    import agentstack.share.keys as keys

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


@keys_app.command("list", cls=Command)
def keys_list(as_json: Json = False) -> None:
    """Your signing keys and the signers you trust."""
    import agentstack.share.keys as keys

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


@keys_app.command("export", cls=Command)
def keys_export(name: Name) -> None:
    """Print a key's OpenSSH public key line."""
    import agentstack.share.keys as keys

    key = keys.load(name)
    sys.stdout.write(key.public.openssh(name) + "\n")


@keys_app.command("trust", cls=Command)
def keys_trust(
    principal: Annotated[str, typer.Argument(
        metavar="PRINCIPAL", help="A name for the signer, such as an email.")],
    pubkey: Annotated[str, typer.Argument(
        metavar="PUBKEY", help="An OpenSSH public key line, or a .pub file.")],
) -> None:
    """Accept bundles signed by PUBKEY, as PRINCIPAL (adds an allowed_signers line)."""
    import agentstack.share.keys as keys
    from agentstack.share.sshsig import check_principal

    check_principal(principal)
    key = keys.read_public_key(pubkey)
    signers = keys.allowed_signers()
    if signers.add(principal, key):
        echo(f"trusted {principal} ({key.fingerprint}) in {signers.path}")
    else:
        echo(f"{principal} ({key.fingerprint}) was already trusted")


@keys_app.command("untrust", cls=Command)
def keys_untrust(
    principal: Annotated[str, typer.Argument(metavar="PRINCIPAL")],
) -> None:
    """Stop accepting bundles from PRINCIPAL."""
    import agentstack.share.keys as keys

    signers = keys.allowed_signers()
    if not signers.remove(principal):
        raise Refused(f"{principal!r} is not in {signers.path}", hint="see 'agentstack keys list'")
    echo(f"{principal} is no longer trusted ({signers.path})")

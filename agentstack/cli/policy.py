"""`agentstack policy`: the team policy a member follows (`agentstack.teampolicy`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from agentstack.cli._app import Command, commands, group
from agentstack.cli._common import Json, root_dir
from agentstack.output import echo, print_json

app = commands()
policy_app = group("The team policy your setups must stay within (signed, fetched from git).")
app.add_typer(policy_app, name="policy")


@policy_app.command("add", cls=Command)
def policy_add(
    url: Annotated[str, typer.Argument(
        metavar="URL", help="The policy's git repository (https, ssh or file://).")],
    signer: Annotated[str, typer.Option(
        "--signer", metavar="KEY",
        help="The team's public key: an OpenSSH line or a .pub file.")],
    ref: Annotated[str, typer.Option(
        "--ref", help="The branch or tag to follow (default: the repository's HEAD).",
        show_default=False)] = "HEAD",
    as_json: Json = False,
) -> None:
    """Follow a team policy: fetch it, verify its signature by KEY, pin it by commit."""
    from agentstack import teampolicy
    from agentstack.share.keys import read_public_key

    key = read_public_key(signer)
    current = teampolicy.add(url, key.openssh(), ref=ref)
    if as_json:
        print_json(current.to_json())
        return
    echo(f"policy in force: {current.label()}\n"
         "trust, apply, receive and quarantine release now refuse what it forbids")


@policy_app.command("update", cls=Command)
def policy_update(as_json: Json = False) -> None:
    """Fetch the policy again; install a newer signed version (shown as a diff)."""
    from agentstack import teampolicy

    result = teampolicy.update()
    if as_json:
        print_json({"updated": result.after is not None,
                    "before": result.before.to_json(),
                    "after": result.after.to_json() if result.after else None,
                    "diff": result.diff})
        return
    if result.after is None:
        echo(f"up to date: {result.before.label()}")
        return
    sys.stdout.write(result.diff)
    echo(f"policy in force: {result.after.label()}")


@policy_app.command("show", cls=Command)
def policy_show(as_json: Json = False) -> int:
    """The policy in force (verified now) and its rules."""
    from agentstack import teampolicy

    current = teampolicy.in_force()
    if current is None:
        if as_json:
            print_json({"policy": None})
        else:
            echo("no team policy ('agentstack policy add URL --signer KEY')")
        return 0
    if as_json:
        print_json({"policy": current.to_json(), "text": current.text.decode("utf-8", "replace")})
        return 0
    echo(f"policy in force: {current.label()}")
    sys.stdout.write(current.text.decode("utf-8", "replace"))
    return 0


@policy_app.command("check", cls=Command)
def policy_check(as_json: Json = False) -> int:
    """Check the project against the policy in force; exit 1 naming each rule it breaks."""
    from agentstack import teampolicy
    from agentstack.consent.document import current as current_setup

    found = teampolicy.in_force()
    if found is None:
        from agentstack.errors import InvalidInput

        raise InvalidInput("no team policy was added",
                           hint="add one with 'agentstack policy add URL --signer KEY'")
    root = root_dir()
    _, _, document, _ = current_setup(root)
    breaches = teampolicy.check(found.policy, document, root)
    if as_json:
        print_json({"policy": found.to_json(), "breaches": [b.to_json() for b in breaches]})
    else:
        sys.stdout.write("".join(f"{b.rule}: {b.detail}\n" for b in breaches)
                         or f"within the team policy {found.policy.name} "
                         f"v{found.policy.version}\n")
    return 1 if breaches else 0


@policy_app.command("remove", cls=Command)
def policy_remove() -> None:
    """Stop following the team policy."""
    from agentstack import teampolicy

    echo("removed the team policy" if teampolicy.remove() else "no team policy to remove")


@policy_app.command("sign", cls=Command)
def policy_sign(
    file: Annotated[Path, typer.Argument(
        metavar="FILE", help="The policy file (agentstack-policy.toml).")],
    key: Annotated[str | None, typer.Option("--key", help="A key from 'keys list'.")] = None,
    ssh_key: Annotated[Path | None, typer.Option(
        "--ssh-key", help="An unencrypted OpenSSH ed25519 key file.")] = None,
) -> None:
    """Sign a policy file (for the team): checks it, writes FILE.sig next to it."""
    from agentstack import teampolicy

    out = teampolicy.sign(file, _key(key, ssh_key))
    echo(f"wrote {out}; commit both files to the policy repository")


def _key(key: str | None, ssh_key: Path | None) -> Any:
    import agentstack.share.keys as keys

    return keys.signing_key(key, ssh_key)

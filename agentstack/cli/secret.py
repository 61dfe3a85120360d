"""`secret set|list|rm`: the secrets `run`'s credential proxy injects (`agentstack.secrets`)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from agentstack.cli._app import Command, commands, group
from agentstack.cli._common import Json
from agentstack.errors import InvalidInput, Refused
from agentstack.output import echo, print_json

app = commands()
secret_app = group(
    "Secrets referenced as secret:NAME (stored under $AGENTSTACK_HOME/secrets, 0600)."
)
app.add_typer(secret_app, name="secret")


def _secret_store() -> Any:
    from agentstack.secrets import SecretStore

    return SecretStore()


@secret_app.command("set", cls=Command)
def secret_set(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The secret's name (as in secret:NAME).")],
) -> None:
    """Store a secret; the value comes from stdin, or a hidden prompt on a terminal."""
    store = _secret_store()
    store.check_name(name)
    if sys.stdin.isatty():
        import getpass

        value = getpass.getpass(f"value for {name} (hidden): ")
        again = getpass.getpass("again: ")
        if value != again:
            raise InvalidInput("the two entries differ; nothing was stored")
    else:
        value = sys.stdin.read()
        if value.endswith("\r\n"):
            value = value[:-2]
        elif value.endswith("\n"):
            value = value[:-1]
    path = store.set(name, value)
    echo(f"stored secret {name} ({path}, mode 0600)")


@secret_app.command("list", cls=Command)
def secret_list(as_json: Json = False) -> None:
    """Names of the stored secrets (never their values)."""
    names = _secret_store().names()
    if as_json:
        print_json({"secrets": names})
        return
    if not names:
        echo("no secrets stored")
        return
    sys.stdout.write("".join(f"{n}\n" for n in names))


@secret_app.command("rm", cls=Command)
def secret_rm(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The secret's name.")],
) -> None:
    """Delete a stored secret."""
    store = _secret_store()
    if not store.remove(name):
        raise Refused(f"no secret {name!r}", hint="see 'agentstack secret list'")
    echo(f"removed secret {name}")

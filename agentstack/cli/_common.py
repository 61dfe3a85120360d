"""What the command modules share: the root options' state (`--project`, `--trust-digest`), the
project root, the trust store, the `--json` and `--user` options, and one answer from the
terminal. Command modules import this and `_app`, never each other."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

TYPE_CHECKING = False
if TYPE_CHECKING:
    from agentstack.trust.review import TrustStore


class State:
    def __init__(self) -> None:
        self.project: Path | None = None
        self.trust_digests: list[str] = []


state = State()

# Options shared by many commands.
Json = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
User = Annotated[bool, typer.Option(
    "--user", help="The user-level setup ($AGENTSTACK_HOME/agentstack.toml), not a project.")]
Format = Annotated[str | None, typer.Option(
    "--format", metavar="FORMAT", help="text, json or sarif (SARIF 2.1.0 for code scanning).")]


def root_dir() -> Path:
    from agentstack.paths import find_project

    return find_project(explicit=state.project)


def store() -> TrustStore:
    """The user's trust store, with the digests `--trust-digest` names (checked first)."""
    from agentstack.trust.review import TrustStore

    TrustStore.check_explicit(state.trust_digests, "--trust-digest")
    return TrustStore(explicit=state.trust_digests)


def ask(question: str) -> str:
    """One answer from the terminal (the question on stderr); EOF is an empty answer."""
    sys.stderr.write(question)
    sys.stderr.flush()
    try:
        return input().strip()
    except EOFError:
        return ""


def use_user(user: bool, *, must_exist: bool = True) -> None:
    """`--user`: every later `root_dir()` is the user-level setup's root ($AGENTSTACK_HOME)."""
    if not user:
        return
    from agentstack.errors import InvalidInput
    from agentstack.userlevel import require_manifest, user_root

    if state.project is not None:
        raise InvalidInput("--user and --project name two setups; give one of them")
    state.project = require_manifest() if must_exist else user_root()

"""The `agentstack` command line. Heavy modules are imported inside each command, so `--help`
loads nothing it does not print (and never GitPython)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from agentstack.entry import echo, print_json
from agentstack.errors import InvalidInput, Refused

if TYPE_CHECKING:
    from agentstack.manifest import Manifest

app = typer.Typer(
    name="agentstack",
    help="Consent for what your coding agents run: lock it, review it, trust it.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
add_app = typer.Typer(
    help="Add an item to agentstack.toml (comments and layout are kept).", no_args_is_help=True
)
app.add_typer(add_app, name="add")

ProjectOpt = Annotated[
    Path | None,
    typer.Option(
        "--project",
        help="Project directory (default: search upward from the cwd).",
        file_okay=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


class _State:
    def __init__(self) -> None:
        self.project: Path | None = None
        self.trust_digests: list[str] = []


_state = _State()


@app.callback()
def _root(
    project: ProjectOpt = None,
    trust_digest: Annotated[
        list[str] | None,
        typer.Option(
            "--trust-digest", help="Treat this consent digest as trusted (CI); repeatable."
        ),
    ] = None,
) -> None:
    _state.project = project
    _state.trust_digests = list(trust_digest or [])


def _root_dir() -> Path:
    from agentstack.lock_command import project_root

    return project_root(_state.project)


def _current(root: Path) -> tuple[Manifest, dict[str, Any], dict[str, Any], str]:
    from agentstack.consent import consent_digest, consent_document
    from agentstack.lockfile import fresh_lock
    from agentstack.manifest import load_manifest

    manifest = load_manifest(root)
    lock = fresh_lock(root, manifest)
    doc = consent_document(manifest, lock)
    return manifest, lock, doc, consent_digest(doc)


# ------------------------------------------------------------------ init / add / remove


@app.command()
def init(
    harness: Annotated[
        list[str] | None, typer.Option("--harness", help="Harness target; repeatable.")
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="Project name (default: the directory name).")
    ] = None,
) -> None:
    """Write a starter agentstack.toml."""
    import re

    from agentstack.edit import init as do_init

    root = (_state.project or Path.cwd()).resolve()
    default = re.sub(r"[^a-z0-9._-]+", "-", root.name.lower()).strip("-._") or "project"
    path = do_init(root, name or default, harness or ["claude-code", "codex"])
    echo(f"wrote {path}\nnext: 'agentstack add server NAME -- CMD ARG…', then 'agentstack lock'")


def _editor() -> Any:
    from agentstack.edit import ManifestEditor

    return ManifestEditor(_root_dir())


def _pairs(items: list[str] | None, option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidInput(f"{option} {item!r} must be KEY=VALUE (VALUE may be secret:NAME)")
        out[key] = value
    return out


@add_app.command("server")
def add_server(
    name: str,
    command: Annotated[
        list[str] | None, typer.Argument(help="After --: the command and its arguments.")
    ] = None,
    url: Annotated[
        str | None, typer.Option(help="A remote (HTTP) server instead of a command.")
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", help="KEY=VALUE or KEY=secret:NAME")
    ] = None,
    header: Annotated[
        list[str] | None, typer.Option("--header", help="NAME=VALUE or NAME=secret:NAME")
    ] = None,
    cwd: Annotated[
        str | None, typer.Option(help="Working directory, relative to the project.")
    ] = None,
    replace: Annotated[bool, typer.Option(help="Replace an existing server of that name.")] = False,
) -> None:
    """Add an MCP server: `add server NAME -- CMD ARG…` or `add server NAME --url URL`."""
    values: dict[str, Any] = {}
    if url is not None:
        if command:
            raise InvalidInput("give either a command after -- or --url, not both")
        if env or cwd:
            raise InvalidInput(
                "--env and --cwd apply to a command, not to --url",
                hint="a remote server takes --header NAME=VALUE",
            )
        values["url"] = url
        if header:
            values["headers"] = _pairs(header, "--header")
    else:
        if not command:
            raise InvalidInput(
                "give the server's command after --, or --url URL",
                hint="agentstack add server files -- npx -y @scope/pkg@1.2.3",
            )
        if header:
            raise InvalidInput(
                "--header applies to --url, not to a command",
                hint="a command takes --env KEY=VALUE",
            )
        values["command"] = command[0]
        if command[1:]:
            values["args"] = command[1:]
        if env:
            values["env"] = _pairs(env, "--env")
        if cwd:
            values["cwd"] = cwd
    editor = _editor()
    editor.add_item("servers", name, values, replace=replace)
    editor.save()
    echo(f"added servers.{name}; run 'agentstack lock'")


@add_app.command("skill")
def add_skill(
    name: str,
    path: Annotated[str | None, typer.Argument(help="A local skill directory.")] = None,
    git: Annotated[str | None, typer.Option(help="A git repository URL.")] = None,
    rev: Annotated[str | None, typer.Option(help="Tag, branch or full commit id.")] = None,
    subdir: Annotated[str | None, typer.Option(help="Directory inside the repository.")] = None,
    replace: Annotated[bool, typer.Option(help="Replace an existing skill of that name.")] = False,
) -> None:
    """Add a skill: `add skill NAME PATH` or `add skill NAME --git URL --rev REV [--subdir D]`."""
    if (path is None) == (git is None):
        raise InvalidInput("give either a PATH or --git URL --rev REV")
    if git is not None and rev is None:
        raise InvalidInput(
            "--git needs --rev (a tag, branch or full commit id)",
            hint="agentstack add skill NAME --git URL --rev v1.2.0",
        )
    if path is not None and (rev is not None or subdir is not None):
        raise InvalidInput("--rev and --subdir apply to --git, not to a local PATH")
    values: dict[str, Any] = {"path": path} if path is not None else {"git": git, "rev": rev}
    if subdir is not None:
        values["subdir"] = subdir
    editor = _editor()
    editor.add_item("skills", name, values, replace=replace)
    editor.save()
    echo(f"added skills.{name}; run 'agentstack lock'")


@add_app.command("instructions")
def add_instructions(path: str) -> None:
    """Append an instruction file (read by the model, in order)."""
    editor = _editor()
    editor.add_instructions(path)
    editor.save()
    echo(f"added {path} to instructions.files; run 'agentstack lock'")


@add_app.command("hook")
def add_hook(
    name: str,
    command: Annotated[list[str], typer.Argument(help="After --: the command and its arguments.")],
    event: Annotated[
        str, typer.Option(help="PreToolUse, PostToolUse, UserPromptSubmit, SessionStart or Stop.")
    ],
    matcher: Annotated[str | None, typer.Option(help="Tool-name regular expression.")] = None,
    replace: Annotated[bool, typer.Option(help="Replace an existing hook of that name.")] = False,
) -> None:
    """Add a hook: `add hook NAME --event E [--matcher M] -- CMD…`."""
    values: dict[str, Any] = {"event": event}
    if matcher is not None:
        values["matcher"] = matcher
    values["command"] = command
    editor = _editor()
    editor.add_item("hooks", name, values, replace=replace)
    editor.save()
    echo(f"added hooks.{name}; run 'agentstack lock'")


_KINDS = {"server": "servers", "skill": "skills", "hook": "hooks", "instructions": "instructions"}


@app.command()
def remove(
    kind: Annotated[str, typer.Argument(help="server, skill, hook or instructions")],
    name: Annotated[str, typer.Argument(help="The item's name (for instructions: its path).")],
) -> None:
    """Remove an item from agentstack.toml."""
    section = _KINDS.get(kind)
    if section is None:
        raise InvalidInput(f"unknown kind {kind!r}", hint="one of: " + ", ".join(_KINDS))
    editor = _editor()
    if section == "instructions":
        editor.remove_instructions(name)
    else:
        editor.remove_item(section, name)
    editor.save()
    echo(f"removed {section}.{name}; run 'agentstack lock'")


# ------------------------------------------------------------------ lock / digest / show / diff


@app.command()
def lock(
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 if re-locking would change the lock.")
    ] = False,
    frozen: Annotated[
        bool, typer.Option("--frozen", help="Use the lock as it is; exit 1 if it does not match.")
    ] = False,
    update: Annotated[
        bool, typer.Option("--update", help="Re-resolve git revisions to their newest commits.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Resolve every item and pin it into agentstack.lock."""
    from agentstack.lock_command import run_lock

    code = run_lock(
        project=_state.project, check=check, frozen=frozen, update=update, as_json=as_json
    )
    if code:
        raise typer.Exit(code)


@app.command()
def digest(as_json: JsonOpt = False) -> None:
    """Print the consent digest (b3:<64 hex>) of the current manifest and lock."""
    root = _root_dir()
    _, _, _, value = _current(root)
    if as_json:
        print_json({"digest": value, "project": str(root)})
    else:
        sys.stdout.write(value + "\n")


@app.command()
def show(as_json: JsonOpt = False) -> None:
    """The consent view: what will run and what the model will read."""
    root = _root_dir()
    _, _, doc, value = _current(root)
    if as_json:
        print_json(doc)
        return
    from agentstack.view import consent_renderable, console

    console().print(consent_renderable(doc, value))


def _load_document(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise InvalidInput(
            f"{path}: not a JSON consent document ({exc})",
            hint="write one with 'agentstack show --json > FILE'",
        ) from None
    if not isinstance(raw, dict) or raw.get("consent") != 1:
        raise InvalidInput(
            f"{path}: not a consent document (format 1)",
            hint="write one with 'agentstack show --json > FILE'",
        )
    return raw


@app.command()
def diff(
    old: Annotated[
        str | None,
        typer.Argument(help="A trusted digest or a consent document (default: the last trusted)."),
    ] = None,
    new: Annotated[
        Path | None, typer.Argument(help="A later document (default: the project).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Consent diff against the last trusted (or given) digest or document, risk findings first."""
    from agentstack.canonical import is_digest
    from agentstack.diff import consent_diff

    before: dict[str, Any] | None
    if old is not None and not is_digest(old):
        before = _load_document(Path(old))
        after = _load_document(new) if new is not None else _current(_root_dir())[2]
    else:
        from agentstack.trust import TrustStore

        root = _root_dir()
        after = _load_document(new) if new is not None else _current(root)[2]
        store = TrustStore()
        if old is None:
            last = store.last_trusted(root)
            if last is None:
                raise Refused(
                    "nothing was trusted for this project yet, so there is nothing to compare with",
                    hint="'agentstack show' displays the whole consent "
                    "view; 'agentstack trust' reviews it",
                )
            old = last.digest
        before = store.load_consent(old)
        if before is None:
            raise Refused(
                f"no stored consent document for {old}",
                hint="only digests trusted on this machine are stored; pass a "
                "document written by 'agentstack show --json' instead",
            )
    result = consent_diff(before, after)
    if as_json:
        print_json(result.to_json())
        return
    from agentstack.view import console, diff_renderable

    console().print(diff_renderable(result))


@app.command()
def schema(
    which: Annotated[str, typer.Argument(help="manifest or lock")] = "manifest",
) -> None:
    """Print the JSON Schema of agentstack.toml (or of the lock) for editor completion."""
    from agentstack.schemas import schema_for

    if which not in ("manifest", "lock"):
        raise InvalidInput(f"unknown schema {which!r}", hint="manifest or lock")
    print_json(schema_for(which))


# ------------------------------------------------------------------ entry point

from agentstack import cli_apply, cli_trust  # noqa: E402,F401 - registers their commands
from agentstack import cli_sandbox as cli_sandbox  # noqa: E402 - registers run, why, doctor and secret
from agentstack import cli_surface as cli_surface  # noqa: E402 - registers adopt and shims


@app.command()
def guard(
    harness: Annotated[str, typer.Option("--harness", help="The calling harness.")] = "",
) -> None:
    """The pre-tool-use hook (stdin: the harness's JSON). Rendered hooks call
    `python -I -m agentstack._guard` directly; this is the same code."""
    from agentstack._guard import main as guard_main

    guard_main(["--harness", harness])


def main() -> NoReturn:
    """Kept for `agentstack.cli:main` callers; the console script is `agentstack.entry:main`."""
    from agentstack.entry import main as entry_main

    entry_main()

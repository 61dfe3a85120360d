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


def _plain_help_types() -> None:
    """Help names what to type (TEXT, DIR, KEY=VALUE), never Python types (`<bool>`,
    `<list[str]>`); a flag shows no type at all."""
    from typer import core

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        if self.metavar is not None:  # an argument's metavar is already its name column
            return None if self.param_type_name == "argument" else str(self.metavar)
        desc = getattr(self, "type_descriptor", None)
        annotation = getattr(desc, "annotation", None)
        if desc is None or annotation is bool:
            return None
        if getattr(desc, "is_path", False):
            label = "DIR" if str(getattr(desc, "path_type", "")) == "directory" else "PATH"
        else:
            label = "INTEGER" if annotation is int else "TEXT"
        return label + ("..." if getattr(desc, "is_list", False) else "")

    for cls in (core.TyperOption, core.TyperArgument):
        if hasattr(cls, "display_type_rich"):
            cls.display_type_rich = display_type_rich  # type: ignore[method-assign]


_plain_help_types()


def _version(value: bool) -> None:
    if value:
        from agentstack import __version__

        sys.stdout.write(f"agentstack {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", callback=_version, is_eager=True
        ),
    ] = False,
    project: ProjectOpt = None,
    trust_digest: Annotated[
        list[str] | None,
        typer.Option(
            "--trust-digest",
            metavar="DIGEST",
            help="Treat this consent digest as trusted (CI); repeatable.",
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
        list[str] | None,
        typer.Option("--harness", metavar="NAME", help="Harness target; repeatable."),
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


def _must_exist(rel: str, kind: str, what: str) -> None:
    """`add` names a file or directory that `lock` will pin: it must be there already."""
    root = _root_dir()
    path = root / rel
    ok = path.is_dir() if kind == "dir" else path.is_file()
    if not ok:
        noun = "directory" if kind == "dir" else "file"
        hint = (
            f"create it first (a skill is a directory with a SKILL.md: mkdir -p {rel})"
            if kind == "dir"
            else f"create it first, then run 'agentstack add {what} {rel}' again"
        )
        raise InvalidInput(f"{rel}: no such {noun} in {root}; nothing was added", hint=hint)


@add_app.command("server")
def add_server(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The server's name.")],
    command: Annotated[
        list[str] | None,
        typer.Argument(metavar="-- CMD [ARG]...", help="The command and its arguments."),
    ] = None,
    url: Annotated[
        str | None, typer.Option(help="A remote (HTTP) server instead of a command.")
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option("--env", metavar="KEY=VALUE", help="KEY=VALUE or KEY=secret:NAME; repeatable."),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option(
            "--header", metavar="NAME=VALUE", help="NAME=VALUE or NAME=secret:NAME; repeatable."
        ),
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
    name: Annotated[str, typer.Argument(metavar="NAME", help="The skill's name.")],
    path: Annotated[
        str | None, typer.Argument(metavar="PATH", help="A local skill directory.")
    ] = None,
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
    if path is not None:
        _must_exist(path, "dir", "skill")
    values: dict[str, Any] = {"path": path} if path is not None else {"git": git, "rev": rev}
    if subdir is not None:
        values["subdir"] = subdir
    editor = _editor()
    editor.add_item("skills", name, values, replace=replace)
    editor.save()
    echo(f"added skills.{name}; run 'agentstack lock'")


@add_app.command("instructions")
def add_instructions(
    path: Annotated[str, typer.Argument(metavar="PATH", help="A file in the project.")],
) -> None:
    """Append an instruction file (read by the model, in order)."""
    _must_exist(path, "file", "instructions")
    editor = _editor()
    from pathlib import PurePosixPath

    from agentstack_adapters.registry import instruction_targets

    from agentstack.manifest import DEFAULT_HARNESSES

    project = editor.doc.get("project") or {}
    targets = instruction_targets([str(h) for h in project.get("harnesses", DEFAULT_HARNESSES)])
    harness = targets.get(str(PurePosixPath(path)))
    if harness is not None:
        raise InvalidInput(
            f"{path} is where agentstack writes {harness}'s instructions, so it cannot also be "
            "their source; nothing was added",
            hint=f"rename it (e.g. git mv {path} {path.removesuffix('.md')}.base.md) and add the "
            f"new name; agentstack renders its text into {path}",
        )
    editor.add_instructions(path)
    editor.save()
    echo(f"added {path} to instructions.files; run 'agentstack lock'")


@add_app.command("hook")
def add_hook(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The hook's name.")],
    command: Annotated[
        list[str],
        typer.Argument(metavar="-- CMD [ARG]...", help="The command and its arguments."),
    ],
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
    max_file_size: Annotated[
        int | None,
        typer.Option("--max-file-size", min=1, help="Refuse a file larger than N bytes."),
    ] = None,
    max_files: Annotated[
        int | None, typer.Option("--max-files", min=1, help="Refuse to pin more than N files.")
    ] = None,
    max_total_size: Annotated[
        int | None,
        typer.Option("--max-total-size", min=1, help="Refuse to pin more than N bytes in all."),
    ] = None,
) -> None:
    """Resolve every item and pin it into agentstack.lock."""
    from agentstack.lock_command import limits_from, run_lock

    code = run_lock(
        project=_state.project,
        check=check,
        frozen=frozen,
        update=update,
        as_json=as_json,
        limits=limits_from(max_file_size, max_files, max_total_size),
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
    from agentstack.contentstore import Contents, ContentStore, collect
    from agentstack.view import console, diff_renderable

    found = collect(_root_dir(), after) if new is None else {}
    console().print(diff_renderable(result, contents=Contents(ContentStore(), found)))


@app.command()
def schema(
    which: Annotated[str, typer.Argument(help="manifest, lock or boundary")] = "manifest",
) -> None:
    """Print the JSON Schema of agentstack.toml (or of the lock, or of a boundary file)."""
    from agentstack.schemas import SCHEMA_FILES, schema_for

    if which not in SCHEMA_FILES:
        raise InvalidInput(f"unknown schema {which!r}", hint="manifest, lock or boundary")
    print_json(schema_for(which))


# ------------------------------------------------------------------ entry point

from agentstack import cli_apply, cli_trust  # noqa: E402,F401 - registers their commands
from agentstack import cli_check as cli_check  # noqa: E402 - registers check
from agentstack import cli_sandbox as cli_sandbox  # noqa: E402 - registers run, why, doctor and secret
from agentstack import cli_share as cli_share  # noqa: E402 - registers keys, share, inspect, receive, quarantine
from agentstack import cli_surface as cli_surface  # noqa: E402 - registers adopt and shims


@app.command()
def guard(
    harness: Annotated[str, typer.Option("--harness", help="The calling harness.")] = "",
    state: Annotated[str, typer.Option("--state", help="The state directory.")] = "",
    project: Annotated[str, typer.Option("--project", help="The project rendered for.")] = "",
    user_level: Annotated[bool, typer.Option("--user-level", help="No project.")] = False,
    event: Annotated[str, typer.Option("--event", help="The hook event.")] = "PreToolUse",
) -> None:
    """The pre-tool-use hook (stdin: the harness's JSON). Rendered hooks call
    `python -I -m agentstack._guard` directly; this is the same code."""
    from agentstack._guard import main as guard_main

    argv = ["--harness", harness, "--state", state, "--event", event]
    argv += ["--user-level"] if user_level else ["--project", project]
    guard_main(argv)


# Options of `add server` / `add hook` themselves; any other dash word before `--` was meant for
# the server's command.
_ADD_OPTIONS = {
    "server": {"--url", "--env", "--header", "--cwd", "--replace", "--no-replace", "-h", "--help"},
    "hook": {"--event", "--matcher", "--replace", "--no-replace", "-h", "--help"},
}


def dashdash_hint(argv: list[str]) -> str | None:
    """For `add server NAME npx -y pkg` (no `--`): the words agentstack would take as its own
    options, and what to type instead."""
    try:
        start = argv.index("add")
    except ValueError:
        return None
    rest = argv[start + 1 :]
    if not rest or rest[0] not in _ADD_OPTIONS or "--" in rest:
        return None
    known = _ADD_OPTIONS[rest[0]]
    stray = [
        word
        for word in rest[1:]
        if word.startswith("-") and word.split("=", 1)[0] not in known
    ]
    if not stray:
        return None
    return (
        f"{stray[0]} is not an option of 'agentstack add {rest[0]}': put the command after "
        f"'--', e.g. agentstack add {rest[0]} NAME -- CMD {stray[0]} …"
    )


def main() -> NoReturn:
    """Kept for `agentstack.cli:main` callers; the console script is `agentstack.entry:main`."""
    from agentstack.entry import main as entry_main

    entry_main()

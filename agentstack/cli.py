"""The `agentstack` command line: thin commands over the library (`agentstack.consent`,
`agentstack.trust`, `agentstack.status`, ...). Parsing is the standard library's argparse
(`agentstack.cli_base`); heavy modules are imported inside each command, so `--help` loads nothing
it does not print (never pydantic, rich or GitPython)."""

from __future__ import annotations

from pathlib import Path

from agentstack.cli_base import JSON, USER, Arg, Opt, app, root_dir, state, use_user
from agentstack.entry import echo, print_json
from agentstack.errors import InvalidInput, Refused

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from agentstack.manifestview import ManifestView


add_app = app.group("add", "Add an item to agentstack.toml (comments and layout are kept).")

# Kept for callers of the old private names; the library is `agentstack.consent.current`.
_state = state
_root_dir = root_dir


def _current(root: Path) -> tuple[ManifestView, dict[str, Any], dict[str, Any], str]:
    from agentstack.consent import current

    return current(root)


# ------------------------------------------------------------------ init / add / remove


@app.command(
    Opt(("--harness",), "harness", "Harness target; repeatable.", kind="list", metavar="NAME"),
    Opt(("--name",), "name", "Project name (default: the directory name)."),
    USER,
)
def init(harness: list[str] | None = None, name: str | None = None, user: bool = False) -> None:
    """Write a starter agentstack.toml."""
    import re

    from agentstack.edit import init as do_init
    from agentstack.harnesses import DEFAULT_NAMES

    use_user(user, must_exist=False)

    root = (_state.project or Path.cwd()).resolve()
    default = re.sub(r"[^a-z0-9._-]+", "-", root.name.lower()).strip("-._") or "project"
    path = do_init(root, name or default, harness or list(DEFAULT_NAMES))
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


@add_app.command(
    Arg("name", "NAME", "The server's name."),
    Arg("command", "-- CMD [ARG]...", "The command and its arguments.", nargs="*", rest=True),
    Opt(("--url",), "url", "A remote (HTTP) server instead of a command."),
    Opt(("--env",), "env", "KEY=VALUE or KEY=secret:NAME; repeatable.", kind="list",
        metavar="KEY=VALUE"),
    Opt(("--header",), "header", "NAME=VALUE or NAME=secret:NAME; repeatable.", kind="list",
        metavar="NAME=VALUE"),
    Opt(("--cwd",), "cwd", "Working directory, relative to the project."),
    Opt(("--replace",), "replace", "Replace an existing server of that name.", kind="pair",
        default=False),
    USER,
    name="server",
)
def add_server(
    name: str,
    command: list[str] | None = None,
    url: str | None = None,
    env: list[str] | None = None,
    header: list[str] | None = None,
    cwd: str | None = None,
    replace: bool = False,
    user: bool = False,
) -> None:
    """Add an MCP server: `add server NAME -- CMD ARG…` or `add server NAME --url URL`."""
    use_user(user)
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


@add_app.command(
    Arg("name", "NAME", "The skill's name."),
    Arg("path", "PATH", "A local skill directory.", nargs="?"),
    Opt(("--git",), "git", "A git repository URL."),
    Opt(("--rev",), "rev", "Tag, branch or full commit id."),
    Opt(("--subdir",), "subdir", "Directory inside the repository."),
    Opt(("--replace",), "replace", "Replace an existing skill of that name.", kind="pair",
        default=False),
    name="skill",
)
def add_skill(
    name: str,
    path: str | None = None,
    git: str | None = None,
    rev: str | None = None,
    subdir: str | None = None,
    replace: bool = False,
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


@add_app.command(Arg("path", "PATH", "A file in the project."), name="instructions")
def add_instructions(path: str) -> None:
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


@add_app.command(
    Arg("name", "NAME", "The hook's name."),
    Arg("command", "-- CMD [ARG]...", "The command and its arguments.", nargs="+", rest=True),
    Opt(("--event",), "event", "PreToolUse, PostToolUse, UserPromptSubmit, SessionStart or Stop.",
        required=True),
    Opt(("--matcher",), "matcher", "Tool-name regular expression."),
    Opt(("--replace",), "replace", "Replace an existing hook of that name.", kind="pair",
        default=False),
    name="hook",
)
def add_hook(
    name: str,
    command: list[str] | None,
    event: str,
    matcher: str | None = None,
    replace: bool = False,
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


@app.command(
    Arg("kind", "KIND", "server, skill, hook or instructions"),
    Arg("name", "NAME", "The item's name (for instructions: its path)."),
)
def remove(kind: str, name: str) -> None:
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


@app.command(
    Opt(("--check",), "check", "Exit 1 if re-locking would change the lock.", kind="flag"),
    Opt(("--frozen",), "frozen", "Use the lock as it is; exit 1 if it does not match.",
        kind="flag"),
    Opt(("--update",), "update", "Re-resolve git revisions to their newest commits.", kind="flag"),
    JSON,
    Opt(("--max-file-size",), "max_file_size", "Refuse a file larger than N bytes.", type=int,
        minimum=1),
    Opt(("--max-files",), "max_files", "Refuse to pin more than N files.", type=int, minimum=1),
    Opt(("--max-total-size",), "max_total_size", "Refuse to pin more than N bytes in all.",
        type=int, minimum=1),
    USER,
)
def lock(
    check: bool = False,
    frozen: bool = False,
    update: bool = False,
    as_json: bool = False,
    max_file_size: int | None = None,
    max_files: int | None = None,
    max_total_size: int | None = None,
    user: bool = False,
) -> int:
    """Resolve every item and pin it into agentstack.lock."""
    from agentstack.lock_command import limits_from, run_lock

    use_user(user)

    code = run_lock(
        project=_state.project,
        check=check,
        frozen=frozen,
        update=update,
        as_json=as_json,
        limits=limits_from(max_file_size, max_files, max_total_size),
    )
    return code


@app.command(JSON, USER)
def digest(as_json: bool = False, user: bool = False) -> None:
    """Print the consent digest (b3:<64 hex>) of the current manifest and lock."""
    from agentstack import readcmds

    use_user(user)

    readcmds.digest(_root_dir(), as_json)


@app.command(JSON, USER)
def show(as_json: bool = False, user: bool = False) -> None:
    """The consent view: what will run and what the model will read.

    In a project, the user-level setup's items are listed after it (a project item shadows a
    user-level item of the same name)."""
    from agentstack import readcmds

    use_user(user)

    readcmds.show(_root_dir(), as_json)


def _load_document(path: Path) -> dict[str, Any]:
    import json

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


@app.command(
    Arg("old", "OLD", "A trusted digest or a consent document (default: the last trusted).",
        nargs="?"),
    Arg("new", "NEW", "A later document (default: the project).", nargs="?", type=Path),
    JSON,
    Opt(("--format",), "output_format", "text, json or sarif (SARIF 2.1.0 for code scanning).",
        metavar="FORMAT"),
)
def diff(
    old: str | None = None, new: Path | None = None, as_json: bool = False,
    output_format: str | None = None,
) -> None:
    """Consent diff against the last trusted (or given) digest or document, risk findings first."""
    from agentstack.canonical import is_digest
    from agentstack.sarif import output_format as chosen_format

    fmt = chosen_format(output_format, as_json)
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
    pins: list[Any] = []
    if new is None:
        from agentstack import pinreview

        pins = pinreview.pending_changes(_root_dir().resolve(), sorted(after.get("servers", {})))
    if fmt == "sarif":
        from agentstack.sarif import ManifestLines, diff_findings, print_sarif

        project = _root_dir() if new is None else None
        lines = ManifestLines.of(project) if project is not None else ManifestLines("")
        print_sarif(diff_findings([f.to_json() for f in result.findings], lines),
                    command="diff", root=project)
        return
    if fmt == "json":
        print_json({**result.to_json(), "pins": [c.to_json() for c in pins]})
        return
    from agentstack.contentstore import Contents, ContentStore, collect
    from agentstack.view import console, diff_renderable

    found = collect(_root_dir(), after) if new is None else {}
    console().print(diff_renderable(result, contents=Contents(ContentStore(), found)))
    if pins:
        from agentstack import pinreview

        print(f"{len(pins)} listing change(s) the relay withheld (review with 'agentstack trust'):")
        for change in pins:
            for line in pinreview.change_lines(change):
                print(line)


@app.command(JSON)
def log(as_json: bool = False) -> None:
    """The receipts of the project's MCP tool calls and proxied requests (no bodies, no secrets)."""
    from agentstack import readcmds

    readcmds.receipts(_root_dir(), as_json)


@app.command(Arg("which", "WHICH", "manifest, lock or boundary", nargs="?", default="manifest"))
def schema(which: str = "manifest") -> None:
    """Print the JSON Schema of agentstack.toml (or of the lock, or of a boundary file)."""
    from agentstack.schemas import SCHEMA_FILES, schema_for

    if which not in SCHEMA_FILES:
        raise InvalidInput(f"unknown schema {which!r}", hint="manifest, lock or boundary")
    print_json(schema_for(which))


@app.command(
    Opt(("--harness",), "harness", "The calling harness.", default=""),
    Opt(("--state",), "state", "The state directory.", default=""),
    Opt(("--project",), "project", "The project rendered for.", default=""),
    Opt(("--user-level",), "user_level", "No project.", kind="flag"),
    Opt(("--event",), "event", "The hook event.", default="PreToolUse"),
)
def guard(
    harness: str = "",
    state: str = "",
    project: str = "",
    user_level: bool = False,
    event: str = "PreToolUse",
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


# ------------------------------------------------------------------ entry point


def load_commands() -> None:
    """Declare every command: each `cli_*` module registers its own on `cli_base.app` (they
    import `cli_base`, never each other or this module)."""
    from agentstack import (  # noqa: F401 - imported for their declarations
        cli_apply,
        cli_check,
        cli_policy,
        cli_sandbox,
        cli_share,
        cli_surface,
        cli_trust,
    )


def dispatch(argv: list[str]) -> int | None:
    """Run `agentstack ARGV` in this process: the exit code (usage errors: 2); a command's
    AgentstackError propagates (`entry.run` maps it to its exit code)."""
    from agentstack.cli_base import dispatch as parse_and_run

    load_commands()
    hint = dashdash_hint(argv)
    if hint is not None:
        echo(f"error: {hint}")
        return 2
    return parse_and_run(argv)


def main() -> NoReturn:
    """Kept for `agentstack.cli:main` callers; the console script is `agentstack.entry:main`."""
    from agentstack.entry import main as entry_main

    entry_main()

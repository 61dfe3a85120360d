"""`init`, `add server|skill|instructions|hook` and `remove`: editing agentstack.toml (comments
and layout kept; `agentstack.manifest.edit`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from agentstack.cli._app import Command, commands, group
from agentstack.cli._common import User, root_dir, state, use_user
from agentstack.errors import InvalidInput
from agentstack.output import echo

app = commands()
add_app = group("Add an item to agentstack.toml (comments and layout are kept).")
app.add_typer(add_app, name="add")

ReplaceServer = Annotated[bool, typer.Option(
    "--replace/--no-replace", help="Replace an existing server of that name.")]
ReplaceSkill = Annotated[bool, typer.Option(
    "--replace/--no-replace", help="Replace an existing skill of that name.")]
ReplaceHook = Annotated[bool, typer.Option(
    "--replace/--no-replace", help="Replace an existing hook of that name.")]
Rest = typer.Argument(metavar="-- CMD [ARG]...", help="The command and its arguments.",
                      show_default=False)


@app.command(cls=Command)
def init(
    harness: Annotated[list[str] | None, typer.Option(
        "--harness", metavar="NAME", help="Harness target; repeatable.")] = None,
    name: Annotated[str | None, typer.Option(
        "--name", help="Project name (default: the directory name).")] = None,
    user: User = False,
) -> None:
    """Write a starter agentstack.toml."""
    import re

    from agentstack.harnesses import DEFAULT_NAMES
    from agentstack.manifest.edit import init as do_init

    use_user(user, must_exist=False)

    root = (state.project or Path.cwd()).resolve()
    default = re.sub(r"[^a-z0-9._-]+", "-", root.name.lower()).strip("-._") or "project"
    path = do_init(root, name or default, harness or list(DEFAULT_NAMES))
    echo(f"wrote {path}\nnext: 'agentstack add server NAME -- CMD ARG…', then 'agentstack lock'")


def _editor() -> Any:
    from agentstack.manifest.edit import ManifestEditor

    return ManifestEditor(root_dir())


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
    root = root_dir()
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


@add_app.command("server", cls=Command)
def add_server(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The server's name.")],
    command: Annotated[list[str] | None, Rest] = None,
    url: Annotated[str | None, typer.Option(
        "--url", help="A remote (HTTP) server instead of a command.")] = None,
    env: Annotated[list[str] | None, typer.Option(
        "--env", metavar="KEY=VALUE", help="KEY=VALUE or KEY=secret:NAME; repeatable.")] = None,
    header: Annotated[list[str] | None, typer.Option(
        "--header", metavar="NAME=VALUE",
        help="NAME=VALUE or NAME=secret:NAME; repeatable.")] = None,
    cwd: Annotated[str | None, typer.Option(
        "--cwd", help="Working directory, relative to the project.")] = None,
    replace: ReplaceServer = False,
    user: User = False,
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
            values["args"] = list(command[1:])
        if env:
            values["env"] = _pairs(env, "--env")
        if cwd:
            values["cwd"] = cwd
    editor = _editor()
    editor.add_item("servers", name, values, replace=replace)
    editor.save()
    echo(f"added servers.{name}; run 'agentstack lock'")


@add_app.command("skill", cls=Command)
def add_skill(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The skill's name.")],
    path: Annotated[str | None, typer.Argument(
        metavar="[PATH]", help="A local skill directory.", show_default=False)] = None,
    git: Annotated[str | None, typer.Option("--git", help="A git repository URL.")] = None,
    rev: Annotated[str | None, typer.Option("--rev", help="Tag, branch or full commit id.")] = None,
    subdir: Annotated[str | None, typer.Option(
        "--subdir", help="Directory inside the repository.")] = None,
    replace: ReplaceSkill = False,
    user: User = False,
) -> None:
    """Add a skill: `add skill NAME PATH` or `add skill NAME --git URL --rev REV [--subdir D]`."""
    use_user(user)  # --user: PATH is relative to $AGENTSTACK_HOME
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


@add_app.command("instructions", cls=Command)
def add_instructions(
    path: Annotated[str, typer.Argument(metavar="PATH", help="A file in the project.")],
    user: User = False,
) -> None:
    """Append an instruction file (read by the model, in order)."""
    use_user(user)  # --user: PATH is relative to $AGENTSTACK_HOME
    _must_exist(path, "file", "instructions")
    editor = _editor()
    from pathlib import PurePosixPath

    from agentstack_adapters.registry import instruction_targets

    from agentstack.manifest.model import DEFAULT_HARNESSES

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


@add_app.command("hook", cls=Command)
def add_hook(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The hook's name.")],
    command: Annotated[list[str], Rest],
    event: Annotated[str, typer.Option(
        "--event", help="PreToolUse, PostToolUse, UserPromptSubmit, SessionStart or Stop.")],
    matcher: Annotated[str | None, typer.Option(
        "--matcher", help="Tool-name regular expression.")] = None,
    replace: ReplaceHook = False,
    user: User = False,
) -> None:
    """Add a hook: `add hook NAME --event E [--matcher M] -- CMD…`."""
    use_user(user)
    values: dict[str, Any] = {"event": event}
    if matcher is not None:
        values["matcher"] = matcher
    values["command"] = list(command)
    editor = _editor()
    editor.add_item("hooks", name, values, replace=replace)
    editor.save()
    echo(f"added hooks.{name}; run 'agentstack lock'")


_KINDS = {"server": "servers", "skill": "skills", "hook": "hooks", "instructions": "instructions"}


@app.command(cls=Command)
def remove(
    kind: Annotated[str, typer.Argument(metavar="KIND",
                                        help="server, skill, hook or instructions")],
    name: Annotated[str, typer.Argument(
        metavar="NAME", help="The item's name (for instructions: its path).")],
    user: User = False,
) -> None:
    """Remove an item from agentstack.toml."""
    use_user(user)
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

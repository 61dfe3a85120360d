"""The command table on typer: which module holds each command (imported only when that command
runs), the root options, and what a mistyped command line gets (the usage, where help is, one
`error:` line with the closest command or option; exit 2).

Help is typer's plain (click) formatter, not its rich panels: `typer.rich_utils` alone costs
about nine times `python -I -c pass` to import, more than a table command may take in all.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer import _click  # typer >= 0.26 carries its own click; its exceptions are these
from typer.core import TyperCommand, TyperGroup

from agentstack.cli._common import state

EXIT_USAGE = 2

# Every top-level command: the module of agentstack.cli that declares it, and its one-line help
# (the commands list shows it without importing the module; a test holds it equal to the
# command's own). Commands first, then the groups of commands, in this order.
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("manifest", "Write a starter agentstack.toml."),
    "remove": ("manifest", "Remove an item from agentstack.toml."),
    "lock": ("lock", "Resolve every item and pin it into agentstack.lock."),
    "digest": ("read", "Print the consent digest (b3:<64 hex>) of the current manifest and lock."),
    "show": ("read", "The consent view: what will run and what the model will read."),
    "diff": ("read", "Consent diff against the last trusted (or given) digest or document, risk "
             "findings first."),
    "log": ("read", "The receipts of the project's MCP tool calls and proxied requests (no "
            "bodies, no secrets)."),
    "schema": ("read", "Print the JSON Schema of agentstack.toml (or of the lock, or of a "
               "boundary file)."),
    "guard": ("guard", "The pre-tool-use hook (stdin: the harness's JSON). Rendered hooks call "
              "`python -I -m agentstack._guard` directly; this is the same code."),
    "apply": ("apply", "Render native harness config: without --write, show the planned diff "
              "and write nothing."),
    "check": ("check", "Check the setup against a boundary: within_boundary, exceeds_boundary "
              "with a counterexample per domain, or unsupported with the reason. Exit 0 only "
              "when within."),
    "run": ("sandbox", "Launch the harness (or CMD) under the kernel sandbox built from the "
            "trusted declaration."),
    "why": ("sandbox", "Explain a sandbox decision: `why --path P --op read|write` or `why "
            "--host H [--port N]`."),
    "doctor": ("sandbox", "Landlock ABI, nono, seccomp, harness binaries, and the project's "
               "trust and lock state."),
    "share": ("share", "Write a signed bundle of the locked, trusted setup (deterministic: same "
              "inputs, same bytes)."),
    "inspect": ("share", "Show a bundle's signed statement without receiving it (its members "
                "are not read)."),
    "receive": ("quarantine", "Verify a bundle, then hold it in quarantine (nothing in it runs); "
                "prints its id."),
    "adopt": ("adopt", "Move the servers and hooks already in the project's native configs into "
              "agentstack.toml."),
    "revoke": ("trust", "Withdraw trust: every digest trusted for this project (or --digest), "
               "and harness entries."),
    "status": ("trust", "Lock freshness, trust state of the current digest, and what changed "
               "since the trusted one."),
    "add": ("manifest", "Add an item to agentstack.toml (comments and layout are kept)."),
    "policy": ("policy", "The team policy your setups must stay within (signed, fetched from "
               "git)."),
    "secret": ("secret", "Secrets referenced as secret:NAME (stored under "
               "$AGENTSTACK_HOME/secrets, 0600)."),
    "keys": ("keys", "Signing keys and the signers you accept bundles from."),
    "quarantine": ("quarantine", "Review received bundles and release them into a project."),
    "shims": ("shims", "Launchers for the harness binaries (claude, codex, gemini, opencode, "
              "copilot, …) ahead on PATH that check the harness surface first."),
    "trust": ("trust", "Review the consent view (or what changed since you last trusted) and "
              "record trust."),
}

# -h as well as --help; help as wide as the terminal up to 120 columns.
CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 120}

# Commands that hand the terminal to another program, or speak a protocol on it: never a bar.
_OWN_TERMINAL = frozenset({"run", "guard"})


def first_paragraph(text: str | None) -> str:
    """A help text's first paragraph on one line (what the commands list shows)."""
    return " ".join((text or "").strip().split("\n\n")[0].split())


def short_help(command: _click.Command) -> str:
    return command.short_help or first_paragraph(command.help)


# ------------------------------------------------------------------ command and group classes


def _call(func: Any, kwargs: dict[str, Any], label: str = "working") -> int | None:
    """Run a command's function: --json quiets the progress bar; a bar only once the command has
    worked for a while (on a terminal), never over a harness or the guard."""
    return _run(lambda: func(**kwargs), bool(kwargs.get("as_json")), label)


def _run(thunk: Any, as_json: bool, label: str) -> int | None:
    from agentstack.progress import quiet

    quiet(as_json)  # --json: one JSON document, nothing drawn on the terminal
    if label.split(" ")[-1] in _OWN_TERMINAL:
        result = thunk()  # the terminal is the harness's (or the hook's): never a bar
        return result if isinstance(result, int) else None
    from agentstack.progress import step

    with step(label):
        result = thunk()
    return result if isinstance(result, int) else None


# What a value option's help shows it takes (typer 0.28 writes `<str>`, `<file>`).
_METAVARS = {"text": "TEXT", "str": "TEXT", "integer": "INTEGER", "int": "INTEGER",
             "path": "PATH", "file": "FILE", "directory": "DIR"}


class _Words:
    """Help in the words a user types: TEXT, PATH, INTEGER for an option's value, and a required
    argument's name as it is (`NAME`, not typer's `{NAME}`)."""

    params: list[_click.Parameter]

    def _name_values(self) -> None:
        for param in self.params:
            if (param.param_type_name == "option" and param.metavar is None
                    and not getattr(param, "is_flag", False)):
                param.metavar = _METAVARS.get(param.type.name, param.type.name.upper())

    def collect_usage_pieces(self, ctx: _click.Context) -> list[str]:
        pieces: list[str] = super().collect_usage_pieces(ctx)  # type: ignore[misc]
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in pieces]


class Command(_Words, TyperCommand):
    """A command: its function runs under `_call` (progress bar, --json quiet)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._name_values()

    def invoke(self, ctx: _click.Context) -> Any:
        return _run(lambda: super(Command, self).invoke(ctx), bool(ctx.params.get("as_json")),
                    ctx.command_path)


class PassThrough(Command):
    """`run`: the words after the first one that is not an option are the command's own
    (`run codex --model x`); with `--`, only those after it, and an unknown option before it is
    a usage error."""

    allow_interspersed_args = False
    ignore_unknown_options = True

    def parse_args(self, ctx: _click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            ctx.ignore_unknown_options = False
        return super().parse_args(ctx, args)


class Group(_Words, TyperGroup):
    """A group of commands: the commands list shows each one's first paragraph; an unknown
    command is a usage error naming the closest ones."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._name_values()

    def _rows(self, ctx: _click.Context) -> list[tuple[str, str]]:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, short_help(command)))
        return rows

    def format_commands(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        rows = self._rows(ctx)
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def resolve_command(
        self, ctx: _click.Context, args: list[str]
    ) -> tuple[str | None, _click.Command | None, list[str]]:
        name = args[0]
        command = self.get_command(ctx, name)
        if command is None and not ctx.resilient_parsing:
            from agentstack.didyoumean import hint

            if name.startswith("-"):
                self.parse_args(ctx, args)  # an option after all: its own error
            ctx.fail(f"no such command {name!r}" + hint(name, self.list_commands(ctx)))
        return (name if command else None), command, args[1:]

    def invoke(self, ctx: _click.Context) -> Any:
        if ctx._protected_args or not self.invoke_without_command:
            return super().invoke(ctx)
        # A group that is also a command (`trust` reviews; `trust list` lists).
        return _run(lambda: super(Group, self).invoke(ctx), bool(ctx.params.get("as_json")),
                    ctx.command_path)


_loaded: dict[str, _click.Command] = {}


def load(name: str) -> _click.Command | None:
    """The command `name` of the table, importing only the module that declares it."""
    entry = COMMANDS.get(name)
    if entry is None:
        return None
    module = entry[0]
    if module not in _loaded:
        declared = importlib.import_module(f"agentstack.cli.{module}").app
        _loaded[module] = typer.main.get_command(declared)
    command = _loaded[module]
    if isinstance(command, TyperGroup):
        return command.get_command(_click.Context(command), name)
    return command if command.name == name else None


class Root(Group):
    """`agentstack`: its commands come from COMMANDS, each loaded when named."""

    def list_commands(self, ctx: _click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
        return load(cmd_name)

    def _rows(self, ctx: _click.Context) -> list[tuple[str, str]]:
        return [(name, text) for name, (_, text) in COMMANDS.items()]

    def shell_complete(self, ctx: _click.Context, incomplete: str) -> list[Any]:
        from typer._click.shell_completion import CompletionItem

        found: list[Any] = [CompletionItem(name, help=text)
                            for name, (_, text) in COMMANDS.items() if name.startswith(incomplete)]
        return found + _click.Command.shell_complete(self, ctx, incomplete)


def group(help: str | None, *, default: bool = False) -> typer.Typer:
    """A group of commands (`agentstack keys …`); `default`: the group is also a command (its
    help is then its callback's)."""
    return typer.Typer(cls=Group, help=help or typer.models.Default(None), add_completion=False, rich_markup_mode=None,
                       no_args_is_help=not default, invoke_without_command=default,
                       context_settings=CONTEXT)


def commands() -> typer.Typer:
    """A module's own table: its top-level commands and groups (`load` picks one by name)."""
    return typer.Typer(cls=Group, add_completion=False, rich_markup_mode=None,
                       context_settings=CONTEXT)


# ------------------------------------------------------------------ the root


def _version(value: bool) -> None:
    if value:
        from agentstack import __version__

        sys.stdout.write(f"agentstack {__version__}\n")
        raise typer.Exit(0)


root = typer.Typer(cls=Root, name="agentstack", rich_markup_mode=None, context_settings=CONTEXT,
                   help="Consent for what your coding agents run: lock it, review it, trust it.")


@root.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.",
                                          is_eager=True, callback=_version)] = False,
    project: Annotated[Path | None, typer.Option(
        "--project", metavar="DIR", file_okay=False,
        help="Project directory (default: search upward from the cwd).")] = None,
    trust_digest: Annotated[list[str] | None, typer.Option(
        "--trust-digest", metavar="DIGEST",
        help="Treat this consent digest as trusted (CI); repeatable.")] = None,
) -> None:
    state.project = project
    state.trust_digests = list(trust_digest or [])


# ------------------------------------------------------------------ usage errors


def _options(command: _click.Command) -> list[str]:
    names = ["--help"]
    for param in command.params:
        if param.param_type_name == "option":
            names += [n for n in (*param.opts, *param.secondary_opts) if n.startswith("--")]
    return names


def _message(exc: _click.exceptions.UsageError) -> str:
    """Click's message as one `error:` line: lower case, no final period, the closest option."""
    if isinstance(exc, _click.exceptions.NoSuchOption):
        from agentstack.didyoumean import hint

        known = _options(exc.ctx.command) if exc.ctx is not None else []
        return f"no such option: {exc.option_name}" + hint(exc.option_name, known)
    text = exc.format_message().strip()
    if len(text) > 1 and text[0].isupper() and text[1].islower():
        text = text[0].lower() + text[1:]
    return text.removesuffix(".")


def usage_error(exc: _click.exceptions.UsageError) -> int:
    """What a mistyped command line gets: the usage, where help is, the error; exit 2."""
    from agentstack.sanitize import sanitize

    ctx = exc.ctx
    usage = ctx.get_usage() if ctx is not None else "Usage: agentstack [OPTIONS] COMMAND [ARGS]..."
    path = ctx.command_path if ctx is not None else "agentstack"
    sys.stderr.write(f"{usage}\nTry '{path} --help' for help.\n\n"
                     f"error: {sanitize(_message(exc), keep_newlines=True)}\n")
    return EXIT_USAGE


# ------------------------------------------------------------------ dispatch

# Options of `add server` / `add hook` themselves; any other dash word before `--` was meant for
# the server's command.
_ADD_OPTIONS = {
    "server": {"--url", "--env", "--header", "--cwd", "--replace", "--no-replace", "--user",
               "-h", "--help"},
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
    stray = [word for word in rest[1:]
             if word.startswith("-") and word.split("=", 1)[0] not in known]
    if not stray:
        return None
    return (
        f"{stray[0]} is not an option of 'agentstack add {rest[0]}': put the command after "
        f"'--', e.g. agentstack add {rest[0]} NAME -- CMD {stray[0]} …"
    )


def command() -> _click.Command:
    return typer.main.get_command(root)


def dispatch(argv: list[str]) -> int | None:
    """Parse `agentstack ARGV` and run the command it names: its exit code (usage errors: 2)."""
    hint = dashdash_hint(argv)
    if hint is not None:
        from agentstack.sanitize import sanitize

        sys.stderr.write(f"error: {sanitize(hint)}\n")
        return EXIT_USAGE
    table = command()
    if not argv:
        argv = ["--help"]  # bare `agentstack`: the help, exit 0
    import os

    if os.environ.get("_AGENTSTACK_COMPLETE"):
        table.main(argv, prog_name="agentstack")  # a shell asking for completions; exits
    try:
        with table.make_context("agentstack", list(argv)) as ctx:
            result = table.invoke(ctx)
    except _click.exceptions.NoArgsIsHelpError as exc:  # a group without its command
        sys.stdout.write(exc.format_message() + "\n")
        return EXIT_USAGE
    except _click.exceptions.UsageError as exc:
        return usage_error(exc)
    except typer.Exit as exc:  # --help, --version
        return exc.exit_code
    return result if isinstance(result, int) else None

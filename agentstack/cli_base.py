"""The command-line layer's own small framework: commands declared once (name, options, help),
parsed with the standard library's argparse, and the state every command shares (`--project`,
`--trust-digest`).

Only what a command needs is imported: parsing and `--help` load neither pydantic nor rich nor
any command's dependencies. Each `cli_*` module declares its commands here; `agentstack.cli`
imports them all and dispatches (so no command module imports another).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from agentstack.trust import TrustStore

EXIT_USAGE = 2


# ------------------------------------------------------------------ declarations


class Opt:
    """An option. `kind`: "flag" (--x), "pair" (--x/--no-x, None when absent), "value" (--x V),
    "list" (--x V, repeatable)."""

    __slots__ = ("default", "dest", "flags", "help", "kind", "metavar", "minimum", "path_kind",
                 "required", "type")

    def __init__(
        self,
        flags: tuple[str, ...],
        dest: str,
        help: str = "",
        *,
        kind: str = "value",
        metavar: str | None = None,
        type: Callable[[str], Any] = str,
        default: Any = None,
        required: bool = False,
        minimum: int | None = None,
        path_kind: str | None = None,  # "dir": must not be a file; "file": must not be a directory
    ) -> None:
        self.flags, self.dest, self.help, self.kind = flags, dest, help, kind
        self.metavar, self.type, self.default, self.required = metavar, type, default, required
        self.minimum, self.path_kind = minimum, path_kind


class Arg:
    """A positional argument; `nargs` "?" (optional), "*" (any number) or None (exactly one).
    `rest=True`: the words after `--` (and any unknown option words), as a list."""

    __slots__ = ("default", "dest", "help", "metavar", "nargs", "rest", "type")

    def __init__(
        self,
        dest: str,
        metavar: str,
        help: str = "",
        *,
        nargs: str | None = None,
        type: Callable[[str], Any] = str,
        default: Any = None,
        rest: bool = False,
    ) -> None:
        self.dest, self.metavar, self.help, self.nargs = dest, metavar, help, nargs
        self.type, self.default, self.rest = type, default, rest


class Command:
    def __init__(
        self,
        name: str,
        func: Callable[..., Any] | None,
        params: tuple[Opt | Arg, ...],
        help: str,
        group: Group | None = None,
    ) -> None:
        self.name, self.func, self.params, self.help, self.group = name, func, params, help, group

    @property
    def short(self) -> str:
        return first_sentence(self.help)


class Group:
    def __init__(self, name: str, help: str, parent: Group | None = None) -> None:
        self.name, self.help, self.parent = name, help, parent
        self.commands: dict[str, Command | Group] = {}
        # A group that is also a command (`trust` reviews; `trust list` lists).
        self.callback: Command | None = None

    @property
    def short(self) -> str:
        return first_sentence(self.help)

    def command(
        self, *params: Opt | Arg, name: str | None = None
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            called = name or func.__name__.replace("_", "-")
            self.commands[called] = Command(called, func, params, func.__doc__ or "", self)
            return func

        return register

    def group(self, name: str, help: str) -> Group:
        sub = Group(name, help, parent=self)
        self.commands[name] = sub
        return sub

    def default(self, *params: Opt | Arg) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """The group's own command (run when no subcommand is named)."""

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            self.callback = Command(self.name, func, params, func.__doc__ or self.help, self)
            return func

        return register


def first_sentence(text: str) -> str:
    """The help's first paragraph, on one line (the commands list shows it)."""
    return " ".join(text.strip().split("\n\n")[0].split())


# Options shared by many commands.
JSON = Opt(("--json",), "as_json", "Print one JSON document on stdout.", kind="flag")

app = Group("agentstack", "Consent for what your coding agents run: lock it, review it, trust it.")
ROOT_OPTIONS: tuple[Opt, ...] = (
    Opt(("--version",), "version", "Print the version and exit.", kind="flag"),
    Opt(
        ("--project",),
        "project",
        "Project directory (default: search upward from the cwd).",
        metavar="DIR",
        type=Path,
        path_kind="dir",
    ),
    Opt(
        ("--trust-digest",),
        "trust_digest",
        "Treat this consent digest as trusted (CI); repeatable.",
        kind="list",
        metavar="DIGEST",
    ),
)


# ------------------------------------------------------------------ shared state


class State:
    def __init__(self) -> None:
        self.project: Path | None = None
        self.trust_digests: list[str] = []


state = State()


def root_dir() -> Path:
    from agentstack.lock_command import project_root

    return project_root(state.project)


def store() -> TrustStore:
    """The user's trust store, with the digests `--trust-digest` names (checked first)."""
    from agentstack.trust import TrustStore

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


# ------------------------------------------------------------------ help


def _path(node: Command | Group) -> str:
    names = []
    cur: Group | None = node if isinstance(node, Group) else node.group
    if isinstance(node, Command) and node.group is not None and node.group.callback is not node:
        names.append(node.name)
    while cur is not None:
        names.append(cur.name)
        cur = cur.parent
    return " ".join(reversed(names))


def _opt_label(opt: Opt) -> str:
    label = ", ".join(opt.flags)
    if opt.kind == "pair":
        label = f"{opt.flags[0]}/--no-{opt.flags[0][2:]}"
    elif opt.kind in ("value", "list"):
        label += " " + (opt.metavar or _type_name(opt))
    return label


def _type_name(opt: Opt) -> str:
    if opt.type is int:
        return "INTEGER"
    if opt.type is Path:
        return "DIR" if opt.path_kind == "dir" else "PATH"
    return "TEXT"


def _usage(node: Command | Group) -> str:
    path = _path(node)
    if isinstance(node, Group):
        more = "[COMMAND [ARGS]...]" if node.callback is not None else "COMMAND [ARGS]..."
        return f"Usage: {path} [OPTIONS] {more}"
    words = [path, "[OPTIONS]"]
    for p in node.params:
        if isinstance(p, Arg):
            if p.rest:
                words.append("[-- CMD [ARG]...]" if p.nargs != "+" else "-- CMD [ARG]...")
            elif p.nargs == "?":
                words.append(f"[{p.metavar}]")
            elif p.nargs == "*":
                words.append(f"[{p.metavar}]...")
            else:
                words.append(p.metavar)
    return "Usage: " + " ".join(words)


def _table(rows: list[tuple[str, str]], width: int) -> list[str]:
    import textwrap

    if not rows:
        return []
    left = min(max(len(a) for a, _ in rows), 28) + 2
    out = []
    for a, b in rows:
        text = textwrap.wrap(b, max(width - left - 2, 20)) or [""]
        if len(a) + 2 > left:
            out.append("  " + a)
            out.extend(" " * (left + 2) + line for line in text)
        else:
            out.append("  " + a.ljust(left) + text[0])
            out.extend(" " * (left + 2) + line for line in text[1:])
    return out


def help_text(node: Command | Group) -> str:
    import os
    import textwrap

    try:
        width = max(60, min(int(os.environ.get("COLUMNS", "100")), 120))
    except ValueError:
        width = 100
    command = node.callback if isinstance(node, Group) and node.callback else node
    lines = [_usage(node), ""]
    for para in command.help.strip().split("\n\n"):
        lines.extend(textwrap.wrap(" ".join(para.split()), width - 2, initial_indent="  ",
                                   subsequent_indent="  "))
        lines.append("")
    params: tuple[Opt | Arg, ...] = ()
    if isinstance(command, Command):
        params = command.params
    elif node is app:
        params = ROOT_OPTIONS
    args = [(p.metavar, p.help) for p in params if isinstance(p, Arg) and p.help]
    if args:
        lines += ["Arguments:", *_table(args, width), ""]
    opts = [(_opt_label(p), p.help + (" [required]" if p.required else ""))
            for p in params if isinstance(p, Opt)]
    opts.append(("-h, --help", "Show this message and exit."))
    lines += ["Options:", *_table(opts, width), ""]
    if isinstance(node, Group):
        # Commands first, then the groups of commands (each in the order declared).
        rows = [(name, sub.short) for name, sub in node.commands.items() if isinstance(sub, Command)]
        rows += [(name, sub.short) for name, sub in node.commands.items() if isinstance(sub, Group)]
        lines += ["Commands:", *_table(rows, width), ""]
    return "\n".join(lines)


# ------------------------------------------------------------------ parsing


class UsageError(Exception):
    def __init__(self, node: Command | Group, message: str) -> None:
        super().__init__(message)
        self.node = node
        self.message = message


def usage_error(node: Command | Group, message: str) -> int:
    """What a mistyped command line gets: the usage, where help is, the error; exit 2."""
    from agentstack.sanitize import sanitize

    path = _path(node)
    sys.stderr.write(
        f"{_usage(node)}\nTry '{path} --help' for help.\n\n"
        f"error: {sanitize(message, keep_newlines=True)}\n"
    )
    return EXIT_USAGE


def _parser(node: Command | Group, params: tuple[Opt | Arg, ...]) -> argparse.ArgumentParser:
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> Any:
            prefix = "unrecognized arguments: "
            if message.startswith(prefix):
                message += _option_hint(message[len(prefix):].split(), params)
            raise UsageError(node, message)

    parser = Parser(prog=_path(node), add_help=False, allow_abbrev=False)
    for p in params:
        if isinstance(p, Arg):
            if p.rest:
                continue
            kwargs: dict[str, Any] = {"metavar": p.metavar, "type": p.type}
            if p.nargs is not None:
                kwargs.update(nargs=p.nargs, default=p.default)
            parser.add_argument(p.dest, **kwargs)
            continue
        if p.kind == "flag":
            parser.add_argument(*p.flags, dest=p.dest, action="store_true", default=False)
        elif p.kind == "pair":
            parser.add_argument(
                *p.flags, dest=p.dest, action=argparse.BooleanOptionalAction, default=p.default
            )
        elif p.kind == "list":
            parser.add_argument(*p.flags, dest=p.dest, action="append", default=None,
                                metavar=p.metavar or _type_name(p))
        else:
            parser.add_argument(*p.flags, dest=p.dest, type=p.type, default=p.default,
                                required=p.required, metavar=p.metavar or _type_name(p))
    return parser


def _option_hint(words: list[str], params: tuple[Opt | Arg, ...]) -> str:
    from agentstack.didyoumean import hint

    known = [f for p in params if isinstance(p, Opt) for f in p.flags if f.startswith("--")]
    for p in params:
        if isinstance(p, Opt) and p.kind == "pair":
            known += ["--no-" + f[2:] for f in p.flags if f.startswith("--")]
    known += ["--help"]
    first = next((w for w in words if w.startswith("-")), None)
    return hint(first, known) if first else ""


def _check_values(node: Command | Group, params: tuple[Opt | Arg, ...], values: dict[str, Any]) -> None:
    for p in params:
        if not isinstance(p, Opt):
            continue
        value = values.get(p.dest)
        if value is None:
            continue
        if p.minimum is not None and value < p.minimum:
            raise UsageError(node, f"{p.flags[0]} {value}: must be at least {p.minimum}")
        if p.path_kind == "dir" and Path(value).is_file():
            raise UsageError(node, f"{p.flags[0]} {value}: is a file, not a directory")
        if p.path_kind == "file" and Path(value).is_dir():
            raise UsageError(node, f"{p.flags[0]} {value}: is a directory, not a file")


def parse(node: Command | Group, params: tuple[Opt | Arg, ...], argv: list[str]) -> dict[str, Any]:
    """argv -> keyword arguments for the command (UsageError on a mistyped line)."""
    rest_param = next((p for p in params if isinstance(p, Arg) and p.rest), None)
    rest: list[str] | None = None
    if rest_param is not None and "--" in argv:
        at = argv.index("--")
        argv, rest = argv[:at], argv[at + 1 :]
    parser = _parser(node, params)
    if rest_param is not None:
        namespace, unknown = parser.parse_known_args(argv)
        if rest is None:
            rest = unknown
        elif unknown:
            raise UsageError(node, "unrecognized arguments: " + " ".join(unknown)
                             + _option_hint(unknown, params))
        values = vars(namespace)
        if rest_param.nargs == "+" and not rest:
            raise UsageError(node, f"missing {rest_param.metavar}")
        values[rest_param.dest] = rest or None
    else:
        values = vars(parser.parse_args(argv))
    _check_values(node, params, values)
    return values


def wants_help(argv: list[str]) -> bool:
    """-h/--help among the words before any `--`."""
    words = argv[: argv.index("--")] if "--" in argv else argv
    return "-h" in words or "--help" in words


def dispatch(argv: list[str]) -> int | None:
    """Parse `agentstack ARGV` and run the command it names. Returns the exit code."""
    try:
        return _dispatch(argv)
    except UsageError as exc:
        return usage_error(exc.node, exc.message)


def _dispatch(argv: list[str]) -> int | None:
    # The root's own options come before the command name.
    i = 0
    root_words: list[str] = []
    value_options = {"--project", "--trust-digest"}
    while i < len(argv) and argv[i].startswith("-"):
        word = argv[i]
        root_words.append(word)
        if word in value_options and i + 1 < len(argv):
            root_words.append(argv[i + 1])
            i += 1
        i += 1
    if "-h" in root_words or "--help" in root_words or not argv:
        sys.stdout.write(help_text(app))
        return 0
    values = parse(app, ROOT_OPTIONS, root_words)  # an unknown option: a usage error (exit 2)
    if values["version"]:
        from agentstack import __version__

        sys.stdout.write(f"agentstack {__version__}\n")
        return 0
    if i >= len(argv):
        raise UsageError(app, "missing command")
    state.project = values["project"]
    state.trust_digests = list(values["trust_digest"] or [])
    node: Command | Group = app
    rest = argv[i:]
    while isinstance(node, Group):
        if rest and rest[0] in node.commands:
            node, rest = node.commands[rest[0]], rest[1:]
            continue
        if (rest and not rest[0].startswith("-")) or node.callback is None:
            if wants_help(rest) or not rest:
                sys.stdout.write(help_text(node))
                return 0 if rest else EXIT_USAGE
            from agentstack.didyoumean import hint

            raise UsageError(node, f"no such command {rest[0]!r}" + hint(rest[0], node.commands))
        # A group that is also a command: its options.
        if wants_help(rest):
            sys.stdout.write(help_text(node))
            return 0
        kwargs = parse(node, node.callback.params, rest)
        assert node.callback.func is not None
        return _call(node.callback.func, kwargs, _path(node))
    if wants_help(rest):
        sys.stdout.write(help_text(node))
        return 0
    kwargs = parse(node, node.params, rest)
    assert node.func is not None
    return _call(node.func, kwargs, _path(node))


def _call(func: Callable[..., Any], kwargs: dict[str, Any], label: str = "working") -> int | None:
    from agentstack.progress import quiet

    quiet(bool(kwargs.get("as_json")))  # --json: one JSON document, nothing drawn on the terminal
    if label.split(" ")[-1] in _OWN_TERMINAL:
        result = func(**kwargs)  # the terminal is the harness's (or the hook's): never a bar
        return result if isinstance(result, int) else None
    from agentstack.progress import step

    with step(label):  # a bar only once the command has worked for a while (on a terminal)
        result = func(**kwargs)
    return result if isinstance(result, int) else None


# ------------------------------------------------------------------ the user-level setup

USER = Opt(("--user",), "user",
           "The user-level setup ($AGENTSTACK_HOME/agentstack.toml), not a project.", kind="flag")


def use_user(user: bool, *, must_exist: bool = True) -> None:
    """`--user`: every later `root_dir()` is the user-level setup's root ($AGENTSTACK_HOME)."""
    if not user:
        return
    from agentstack.errors import InvalidInput
    from agentstack.userlevel import require_manifest, user_root

    if state.project is not None:
        raise InvalidInput("--user and --project name two setups; give one of them")
    state.project = require_manifest() if must_exist else user_root()


# Commands that hand the terminal to another program, or speak a protocol on it.
_OWN_TERMINAL = frozenset({"run", "guard"})

"""Code roots: which project trees a server or hook loads code from.

A command line names an entry point; the interpreter then loads more: Python imports from the
script's directory (or the working directory for `-m` and `-c`), Node resolves from the
`package.json` tree, `npm start` runs a script from `package.json`, loader variables such as
`PYTHONPATH` or `LD_PRELOAD` add more. Each such tree is a **code root**, pinned like a skill. Where
agentstack cannot tell what a command loads, it says so (`unpinnable:` facts) instead of guessing;
`pin = [...]` in the manifest then names the roots by hand and replaces the inference.

Nothing here runs anything: the analysis reads the argv, the env literals and the project's
directory entries only.
"""

from __future__ import annotations

import os
import posixpath
import re
import shlex
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

# Directories never pinned inside a code root. Caches are written by the code itself (pinning them
# would make every lock stale after the first run); installed dependencies are too large to
# review and are reported (`excluded:` facts) so the user knows they run unreviewed.
SILENT_EXCLUDES = frozenset({".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
REPORTED_EXCLUDES = frozenset({"node_modules", ".venv"})
EXCLUDES = SILENT_EXCLUDES | REPORTED_EXCLUDES

_PYTHON = re.compile(r"^(python|pypy)(\d+(\.\d+)*)?$")
_NODE = frozenset({"node", "nodejs", "tsx", "ts-node", "bun", "deno"})
_PACKAGE_MANAGERS = frozenset({"npm", "pnpm", "yarn"})
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh"})
_INTERPRETERS = frozenset({"ruby", "perl", "php", "lua", "luajit", "Rscript", "java", "osascript"})
# Tools that read their instructions from the working directory (a Makefile, a justfile, ...).
_PROJECT_TOOLS = frozenset(
    {
        "make",
        "gmake",
        "just",
        "task",
        "cargo",
        "go",
        "gradle",
        "mvn",
        "rake",
        "tox",
        "nox",
        "pytest",
    }
)
_RUNNERS = frozenset({"npx", "bunx", "pnpx", "uvx", "pipx", "docker", "podman"})
_SHELL_INERT = frozenset({"echo", "printf", "true", "false", "exit", ":", "test", "[", "sleep"})
# Python options that take a value (the value is the next argument unless attached).
_PY_VALUE = frozenset({"-W", "-X", "--check-hash-based-pycs"})
_NODE_VALUE = frozenset({"-r", "--require", "--import", "--loader", "--experimental-loader"})

# Loader environment: variables that change which code an interpreter or the dynamic linker loads.
# value kind: "dirs" (a path list), "file", "options" (a command line that may name files),
# "command" (a command line that runs).
LOADER_ENV: dict[str, str] = {
    "PYTHONPATH": "dirs",
    "PYTHONHOME": "dirs",
    "PYTHONSTARTUP": "file",
    "PYTHONUSERBASE": "dirs",
    "PYTHONPYCACHEPREFIX": "dirs",
    "PYTHONEXECUTABLE": "file",
    "NODE_OPTIONS": "options",
    "NODE_PATH": "dirs",
    "LD_PRELOAD": "dirs",
    "LD_LIBRARY_PATH": "dirs",
    "LD_AUDIT": "dirs",
    "PERL5LIB": "dirs",
    "PERLLIB": "dirs",
    "PERL5OPT": "options",
    "RUBYLIB": "dirs",
    "RUBYOPT": "options",
    "BASH_ENV": "file",
    "ENV": "file",
    "ZDOTDIR": "dirs",
    "JAVA_TOOL_OPTIONS": "options",
    "_JAVA_OPTIONS": "options",
    "JDK_JAVA_OPTIONS": "options",
    "GIT_SSH": "file",
    "GIT_SSH_COMMAND": "command",
    "GIT_ASKPASS": "file",
    "SSH_ASKPASS": "file",
    "GIT_EDITOR": "command",
    "GIT_PAGER": "command",
    "GIT_EXTERNAL_DIFF": "command",
    "GIT_PROXY_COMMAND": "command",
    "GIT_EXEC_PATH": "dirs",
    "GIT_TEMPLATE_DIR": "dirs",
    "GIT_DIR": "dirs",
    "GIT_CONFIG": "file",
    "GIT_CONFIG_GLOBAL": "file",
    "GIT_CONFIG_SYSTEM": "file",
    "GIT_CONFIG_PARAMETERS": "command",
    "EDITOR": "command",
    "VISUAL": "command",
    "PAGER": "command",
}
_LOADER_PREFIXES = ("LD_", "DYLD_", "GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")


def is_loader_env(name: str) -> bool:
    """Whether setting `name` can change what code a process loads (PATH counts when it names a
    project directory; that is decided where the value is known)."""
    return name in LOADER_ENV or name.startswith(_LOADER_PREFIXES)


def is_file(path: Path | str) -> bool:
    """Whether `path` is a regular file (links followed). A string that cannot be a path (too
    long for the kernel, a NUL, any error of the probe) is no file: an argument such as a
    5,000-character `python -c` program is probed like any other and must never fail the lock."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def is_dir(path: Path | str) -> bool:
    """Whether `path` is a directory (links followed); False for what cannot be a path."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


class Root(NamedTuple):  # NamedTuples, not dataclasses: `digest` and `status` import this
    """A directory to pin as a tree; `origin` says why (shown in the review)."""

    path: str
    origin: str


class Analysis:
    __slots__ = ("facts", "files", "roots")

    def __init__(self) -> None:
        self.roots: list[Root] = []
        self.files: list[tuple[str, str]] = []  # (project path, origin)
        self.facts: list[str] = []

    def fact(self, text: str) -> None:
        if text not in self.facts:
            self.facts.append(text)


class Analyser:
    """Works out the code roots of one command line in one project (read-only)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.real_root = os.path.realpath(root)

    # ------------------------------------------------------------------------------- paths

    def project_path(self, text: str, base: str) -> str | None:
        """`text` as a normalised project path (relative to `base`), if it exists in the project.
        An absolute path inside the project is a project path too."""
        if not text or "\0" in text:
            return None
        if posixpath.isabs(text):
            for prefix in {str(self.root), self.real_root}:
                if text == prefix or text.startswith(prefix.rstrip("/") + "/"):
                    text = text[len(prefix) :].lstrip("/") or "."
                    base = "."
                    break
            else:
                return None
        rel = posixpath.normpath(posixpath.join(base, text))
        if rel == ".." or rel.startswith("../"):
            return None
        return rel if os.path.lexists(self.root / rel) else None

    def is_file(self, rel: str) -> bool:
        return is_file(self.root / rel)

    def is_dir(self, rel: str) -> bool:
        return is_dir(self.root / rel)

    # ------------------------------------------------------------------------------ analysis

    def command(
        self, argv: list[str], cwd: str, env: dict[str, str | None], out: Analysis, depth: int = 0
    ) -> None:
        if not argv or depth > 4:
            return
        program = posixpath.basename(argv[0])
        args = argv[1:]
        wrapped = self._wrapper(program, args, cwd, out)
        if wrapped is not None:
            self.command(wrapped, cwd, env, out, depth + 1)
            return
        own = self.project_path(argv[0], cwd) if "/" in argv[0] else None
        if own is not None and self.is_file(own):
            self._script(own, f"runs {own}", out, shebang=True)
        elif _PYTHON.match(program):
            self._python(args, cwd, out)
        elif program in _NODE:
            self._node(program, args, cwd, out)
        elif program in _PACKAGE_MANAGERS:
            self._package_manager(program, args, cwd, out)
        elif program in _SHELLS:
            self._shell(program, args, cwd, env, out, depth)
        elif program in _INTERPRETERS:
            self._interpreter(program, args, cwd, out)
        elif program in _RUNNERS:
            self._runner(program, args, cwd, out)
        elif program in _PROJECT_TOOLS:
            self._directory(cwd, f"{program} reads its instructions from {cwd}", out)
        else:
            named = [p for a in args if (p := self.project_path(a, cwd)) is not None]
            if named:
                for rel in named:
                    self._script(rel, f"named by {program}", out)
                out.fact(
                    f"unpinnable:{program} is not an interpreter agentstack knows; it is given "
                    f"{', '.join(named)}"
                )
            elif cwd != ".":
                self._directory(cwd, f"working directory of {program}", out)

    def _wrapper(self, program: str, args: list[str], cwd: str, out: Analysis) -> list[str] | None:
        """The command a wrapper runs (`env A=1 cmd`, `nice cmd`, `timeout 5 cmd`, `uv run cmd`),
        or None when `program` is not a wrapper. `env` assignments are loader environment too."""
        if program == "env":
            assigned: dict[str, str | None] = {}
            rest = list(args)
            while rest and (rest[0].startswith("-") or "=" in rest[0]):
                word = rest.pop(0)
                if word in ("-u", "--unset", "-C", "--chdir", "-S", "--split-string") and rest:
                    rest.pop(0)
                elif "=" in word and not word.startswith("-"):
                    name, _, value = word.partition("=")
                    assigned[name] = value
            self.loader_env(assigned, cwd, out)
            return rest
        if program in ("nice", "nohup", "exec", "stdbuf", "setsid", "time", "timeout"):
            rest = _leading_options(args, ("-n", "-s", "-k", "--signal", "--kill-after"))
            return rest[1:] if program == "timeout" else rest  # timeout DURATION CMD
        if program in ("uv", "poetry", "pipenv", "pdm", "hatch", "rye") and args[:1] == ["run"]:
            return _leading_options(
                args[1:], ("--with", "--python", "-p", "--project", "--directory", "--env-file")
            )
        return None

    def _directory(self, rel: str, origin: str, out: Analysis) -> None:
        if rel == ".":
            out.fact(f"unpinnable:{origin.split(' ', 1)[0]} loads code from the project root")
        else:
            out.roots.append(Root(rel, origin))

    def _script(self, rel: str, origin: str, out: Analysis, *, shebang: bool = False) -> None:
        """A script file: pinned itself, and the directory it sits in as its code root."""
        if self.is_dir(rel):
            self._directory(rel, origin, out)
            return
        out.files.append((rel, origin))
        parent = posixpath.dirname(rel) or "."
        if parent != ".":
            out.roots.append(Root(parent, f"directory of {rel}"))
            return
        python = rel.endswith(".py") or (shebang and "python" in self._shebang(rel))
        if python:
            self._python_path(".", f"import path of {rel}", out)
        elif not rel.endswith((".md", ".txt", ".json", ".toml", ".yaml", ".yml")):
            out.fact(f"unpinnable:{rel} may load code from the project root")

    def _shebang(self, rel: str) -> str:
        try:
            with open(self.root / rel, "rb") as handle:
                first = handle.readline(256)
        except OSError:
            return ""
        return first.decode("utf-8", "replace") if first.startswith(b"#!") else ""

    def _python_path(self, rel: str, origin: str, out: Analysis) -> None:
        """A directory on Python's import path. In the project root only what Python can import
        from it is pinned: its top-level modules and its regular packages."""
        if rel != ".":
            out.roots.append(Root(rel, origin))
            return
        try:
            names = sorted(os.listdir(self.root))
        except OSError:
            return
        for name in names:
            path = self.root / name
            if name in EXCLUDES:
                continue
            if is_file(path) and name.endswith((".py", ".pyc", ".so", ".pyd", ".pth")):
                out.files.append((name, origin))
            elif is_dir(path) and is_file(path / "__init__.py"):
                out.roots.append(Root(name, origin))

    def _python(self, args: list[str], cwd: str, out: Analysis) -> None:
        safe_path = False  # -I or -P: the working directory is not on the import path
        index = 0
        while index < len(args):
            arg = args[index]
            index += 1
            if arg in _PY_VALUE:
                index += 1
                continue
            if arg.startswith("--"):
                continue
            if arg.startswith("-") and len(arg) > 1:
                flags = arg[1:]
                for pos, flag in enumerate(flags):
                    safe_path = safe_path or flag in "IP"
                    if flag in "cmWX":
                        value = flags[pos + 1 :]
                        if not value and index < len(args):
                            value = args[index]
                            index += 1
                        if flag == "m":
                            self._python_module(value, cwd, safe_path, out)
                            return
                        if flag == "c":
                            if not safe_path:
                                self._python_path(cwd, "working directory of python -c", out)
                            return
                        break
                continue
            if arg == "-":
                out.fact("unpinnable:python reads its program from stdin")
                return
            rel = self.project_path(arg, cwd)
            if rel is not None:
                self._script(rel, f"python runs {rel}", out)
            return
        # No program: an interactive interpreter; nothing runs from the project by itself.

    def _python_module(self, module: str, cwd: str, safe_path: bool, out: Analysis) -> None:
        if safe_path:
            return  # -I / -P: the working directory is not on the import path
        self._python_path(cwd, f"working directory of python -m {module}", out)

    def _package_json_root(self, rel: str) -> str:
        """The nearest directory at or above `rel` (below the project root) with a package.json;
        `rel` itself when there is none."""
        here = rel
        while here not in (".", ""):
            if is_file(self.root / here / "package.json"):
                return here
            here = posixpath.dirname(here) or "."
        return rel

    def _node(self, program: str, args: list[str], cwd: str, out: Analysis) -> None:
        index = 0
        if program == "deno" and args[:1] == ["run"]:
            index = 1
        if program == "bun" and args[:1] == ["run"]:
            index = 1
        while index < len(args):
            arg = args[index]
            if arg in _NODE_VALUE or any(arg.startswith(o + "=") for o in _NODE_VALUE):
                value = args[index + 1] if arg in _NODE_VALUE and index + 1 < len(args) else ""
                value = value or arg.split("=", 1)[-1]
                rel = self.project_path(value, cwd)
                if rel is not None:
                    self._node_entry(rel, f"{program} preloads {rel}", out)
                index += 2 if arg in _NODE_VALUE else 1
                continue
            if arg in ("-e", "--eval", "-p", "--print"):
                self._node_entry(cwd, f"working directory of {program} {arg}", out)
                return
            if arg.startswith("-"):
                index += 1
                continue
            rel = self.project_path(arg, cwd)
            if rel is not None:
                self._node_entry(rel, f"{program} runs {rel}", out)
            elif program == "bun":
                self._package_manager("npm", ["run", arg], cwd, out)
            return

    def _node_entry(self, rel: str, origin: str, out: Analysis) -> None:
        if self.is_file(rel):
            out.files.append((rel, origin))
            rel = posixpath.dirname(rel) or "."
        self._directory(self._package_json_root(rel), origin, out)

    def _package_manager(self, program: str, args: list[str], cwd: str, out: Analysis) -> None:
        where = cwd
        rest: list[str] = []
        index = 0
        while index < len(args):
            arg = args[index]
            if arg in ("--prefix", "-C", "--dir", "--cwd") and index + 1 < len(args):
                rel = self.project_path(args[index + 1], cwd)
                if rel is None:
                    out.fact(f"unpinnable:{program} runs in {args[index + 1]}, not a project path")
                    return
                where = rel
                index += 2
                continue
            rest.append(arg)
            index += 1
        if rest[:1] == ["exec"] or (program == "npm" and rest[:1] == ["x"]):
            return  # a registry package: an `unpinned-package` fact when it is not pinned
        if not is_file(self.root / where / "package.json"):
            out.fact(f"unpinnable:{program} {' '.join(rest[:2])} has no package.json in {where}")
            return
        out.files.append((posixpath.join(where, "package.json"), f"{program} reads it"))
        self._directory(where, f"{program} runs scripts of {where}/package.json", out)

    def _runner(self, program: str, args: list[str], cwd: str, out: Analysis) -> None:
        # `npx ./tool` or `npx path/to/dir` runs local code; a package name runs registry code.
        for arg in args:
            if arg.startswith("-"):
                continue
            if arg.startswith((".", "/")) or "/" in arg.split("@", 1)[0][1:]:
                rel = self.project_path(arg, cwd)
                if rel is not None:
                    self._node_entry(rel, f"{program} runs {rel}", out)
            return

    def _interpreter(self, program: str, args: list[str], cwd: str, out: Analysis) -> None:
        for arg in args:
            if arg in ("-e", "-E", "-r") and program != "Rscript":
                self._directory(cwd, f"working directory of {program} {arg}", out)
                return
            if arg.startswith("-"):
                continue
            rel = self.project_path(arg, cwd)
            if rel is not None:
                self._script(rel, f"{program} runs {rel}", out)
            return

    def _shell(
        self,
        program: str,
        args: list[str],
        cwd: str,
        env: dict[str, str | None],
        out: Analysis,
        depth: int,
    ) -> None:
        for index, arg in enumerate(args):
            if arg.startswith("-") and not arg.startswith("--") and "c" in arg:
                script = args[index + 1] if index + 1 < len(args) else ""
                self._shell_script(program, script, cwd, env, out, depth)
                return
            if arg.startswith("-"):
                continue
            rel = self.project_path(arg, cwd)
            if rel is not None:
                self._script(rel, f"{program} runs {rel}", out)
            else:
                out.fact(f"unpinnable:{program} runs {arg}, which is not a project file")
            return
        out.fact(f"unpinnable:{program} reads its commands from stdin")

    def _shell_script(
        self,
        program: str,
        script: str,
        cwd: str,
        env: dict[str, str | None],
        out: Analysis,
        depth: int,
    ) -> None:
        """`sh -c SCRIPT`: a script made only of plain simple commands is analysed command by
        command; anything else (expansions, substitutions, globs, subshells) cannot be told."""
        if re.search(r"[$`(){}*?\[\]<~\\]|\bsource\b|(^|[;&|]\s*)\.\s", script) or "'" in script:
            out.fact(f"unpinnable:{program} -c runs a script agentstack cannot follow: {script}")
            return
        try:
            lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|>")
            lexer.whitespace_split = True
            tokens = list(lexer)
        except ValueError:
            out.fact(f"unpinnable:{program} -c runs a script agentstack cannot parse: {script}")
            return
        commands: list[list[str]] = [[]]
        redirect = False
        for token in tokens:
            if redirect:
                redirect = False
                if token.startswith("&") or token.isdigit() or token == "/dev/null":  # noqa: S105
                    continue
                out.fact(f"unpinnable:{program} -c redirects to {token}")
                return
            if token in (";", "&&", "||", "|", "&"):
                commands.append([])
            elif set(token) <= {">", "&"} or re.fullmatch(r"\d?>+&?\d?", token):
                redirect = not token.endswith(tuple("0123456789"))
            else:
                commands[-1].append(token)
        for argv in commands:
            if argv and argv[0] not in _SHELL_INERT:
                self.command(argv, cwd, {}, out, depth + 1)

    # ---------------------------------------------------------------------- loader environment

    def loader_env(self, env: dict[str, str | None], cwd: str, out: Analysis) -> None:
        """`env` maps a name to its literal value, or to None for a secret reference."""
        for name in sorted(env):
            value = env[name]
            if name == "PATH":
                if value is None:
                    continue
                inside = [p for p in _split_paths(value) if self.project_path(p, cwd) is not None]
                if not inside:
                    continue
            elif not is_loader_env(name):
                continue
            out.fact(f"loader-env:{name}")
            if value is None:
                out.fact(f"unpinnable:{name} comes from a secret, so what it loads is unknown")
                continue
            kind = LOADER_ENV.get(name, "dirs")
            if kind in ("options", "command"):
                words = _words(value)
                paths = [w.split("=", 1)[-1] for w in words]
                paths += [w[2:] for w in words if w[:2] in ("-I", "-r") and len(w) > 2]
                paths += [w.split(":", 1)[1] for w in words if w.startswith("-javaagent:")]
            else:
                paths = _split_paths(value)
            for text in paths:
                rel = self.project_path(text, cwd)
                if rel is None:
                    continue
                origin = f"named by {name}"
                if self.is_dir(rel):
                    if name.startswith("PYTHON"):
                        self._python_path(rel, origin, out)
                    else:
                        self._directory(rel, origin, out)
                else:
                    self._script(rel, origin, out)


def _leading_options(args: list[str], with_value: tuple[str, ...]) -> list[str]:
    """`args` without a wrapper's own leading options (and the values of those that take one)."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option == "--":
            break
        if option in with_value and rest:
            rest.pop(0)
    return rest


def _split_paths(value: str) -> list[str]:
    return [p for p in re.split(r"[:\s]+", value) if p]


def _words(value: str) -> list[str]:
    try:
        return shlex.split(value)
    except ValueError:
        return value.split()


def analyse(
    root: Path, argv: list[str], cwd: str, env: dict[str, str | None], pin: Iterable[str] = ()
) -> Analysis:
    """The code roots, extra files and facts of one command line. With `pin`, the pinned paths
    replace what is inferred from the command line; what loader variables name is always pinned
    (the manifest declares those paths itself)."""
    analyser = Analyser(root)
    out = Analysis()
    pins = list(pin)
    if pins:
        for rel in pins:
            normal = posixpath.normpath(rel)
            if is_dir(root / normal):
                out.roots.append(Root(normal, "pin"))
            else:
                out.files.append((normal, "pin"))
    else:
        analyser.command(argv, cwd, env, out)
    loaders = Analysis()
    analyser.loader_env(env, cwd, loaders)
    out.roots += loaders.roots
    out.files += loaders.files
    for fact in loaders.facts:
        if not (pins and fact.startswith("unpinnable:")):
            out.fact(fact)
    return out


def merge_roots(roots: list[Root]) -> list[Root]:
    """One root per tree: a root inside another root is covered by it (the outer one wins), and
    duplicates collapse; the result is sorted by path."""
    unique: dict[str, Root] = {}
    for item in roots:
        unique.setdefault(item.path, item)
    paths = sorted(unique, key=lambda p: (p.count("/"), p))
    kept: list[str] = []
    for path in paths:
        if any(
            path.startswith(outer + "/") and not _excluded_inside(path, outer) for outer in kept
        ):
            continue
        kept.append(path)
    return [unique[p] for p in sorted(kept, key=lambda p: p.encode("utf-8"))]


def _excluded_inside(path: str, outer: str) -> bool:
    """Whether `path` lies in a directory the walk of `outer` skips (then it needs its own root)."""
    return any(part in EXCLUDES for part in path[len(outer) + 1 :].split("/"))


# ------------------------------------------------------------------------- shared code roots
#
# A tree that several commands load (servers whose scripts share `servers/`) is pinned once: the
# lock's `code_roots` table holds its files under its path, and each command's root entry keeps
# its path, origin, digest and excluded list without the files. The tree digest in each entry
# binds the command to exactly those files, so the consent document (which carries the table as
# `code_roots`) covers every file each command can run. A root only one command loads stays inline,
# so a lock without shared trees is written as before.

_COMMANDS = ("servers", "hooks")


def share_roots(lock: dict[str, Any]) -> None:
    """Move each code root that two or more commands load into `lock["code_roots"]`."""
    uses: dict[str, int] = {}
    for section in _COMMANDS:
        items = lock.get(section)
        if not isinstance(items, dict):
            continue
        for item in items.values():
            for root in item.get("roots", ()):
                uses[root["path"]] = uses.get(root["path"], 0) + 1
    shared = {path for path, count in uses.items() if count > 1}
    if not shared:
        return
    table: dict[str, dict[str, Any]] = {}
    for section in _COMMANDS:
        for item in lock.get(section, {}).values():
            roots = item.get("roots")
            if not roots:
                continue
            compact = []
            for root in roots:
                if root["path"] in shared:
                    table.setdefault(
                        root["path"],
                        {
                            "path": root["path"],
                            "digest": root["digest"],
                            "excluded": list(root["excluded"]),
                            "files": root["files"],
                        },
                    )
                    root = {k: v for k, v in root.items() if k != "files"}
                compact.append(root)
            item["roots"] = compact
    lock["code_roots"] = {path: table[path] for path in sorted(table, key=lambda p: p.encode())}


def root_files(document: dict[str, Any], root: dict[str, Any]) -> list[dict[str, Any]]:
    """The files of one code root entry of a lock or consent document: its own, or (a shared
    root) those of `document["code_roots"]` under its path, which must carry the same digest."""
    files = root.get("files")
    if isinstance(files, list):
        return files
    table = document.get("code_roots")
    shared = table.get(root.get("path")) if isinstance(table, dict) else None
    if not isinstance(shared, dict) or shared.get("digest") != root.get("digest"):
        raise ValueError(f"code root {root.get('path')!r} is not in the lock's code_roots table")
    found = shared.get("files")
    if not isinstance(found, list):
        raise ValueError(f"code root {root.get('path')!r} has no files in code_roots")
    return found


def with_root_files(document: dict[str, Any]) -> dict[str, Any]:
    """`document` (a lock or consent document) with every shared root entry carrying its files
    (shallow copies; the file lists themselves are shared, not copied)."""
    if not document.get("code_roots"):
        return document
    out = dict(document)
    for section in _COMMANDS:
        items = document.get(section)
        if not isinstance(items, dict):
            continue
        copied = {}
        for name, item in items.items():
            roots = item.get("roots") if isinstance(item, dict) else None
            if roots and any("files" not in r for r in roots):
                item = {
                    **item,
                    "roots": [{**r, "files": root_files(document, r)} for r in roots],
                }
            copied[name] = item
        out[section] = copied
    return out

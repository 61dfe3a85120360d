"""Opt-in git hooks (`agentstack shims install --git-hooks`): after git changes the working tree
(`post-checkout`, `post-merge`, `post-rewrite`: a `git pull`, a checkout, a rebase), re-check the
harness surface against the trusted digest and withdraw the harness-side trust on a difference,
so a harness started after `git pull` finds no trust entry instead of loading what nobody
reviewed.

Installing reads the repository's layout and configuration *files* directly: no git command runs
(one would run the project's fsmonitor or other configured programs). The hooks run agentstack
from the user's own installation (the absolute path of the interpreter that installed them, with
`-I`: no environment variables, no current directory on `sys.path`), never anything from the
project. An existing hook is kept and chained (moved aside and run after the check with the same
arguments and input), never overwritten.
"""

from __future__ import annotations

import os
import shlex
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from agentstack.errors import Refused

MARKER = "# agentstack git hook"
HOOKS = ("post-checkout", "post-merge", "post-rewrite")
CHAINED = ".agentstack-chained"
_MAX_INCLUDES = 10


# ------------------------------------------------------------------------- git config (read only)


def _unquote(raw: str) -> str:
    """A git-config value: quotes removed, escapes applied, an unquoted `#`/`;` comment cut."""
    out: list[str] = []
    quoted = False
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw):
            out.append({"n": "\n", "t": "\t", "b": "\b"}.get(raw[i + 1], raw[i + 1]))
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        elif ch in "#;" and not quoted:
            break
        else:
            out.append(ch)
        i += 1
    return "".join(out).strip() if not quoted else "".join(out)


def parse_config(text: str) -> list[tuple[str, str, str | None]]:
    """(section.subsection, key, value) triples of a git config file, in order; names are
    lower-cased except the subsection (as git compares them). Only what is needed here: sections,
    `key = value`, bare keys (true), quotes, escapes, comments and continuation lines."""
    entries: list[tuple[str, str, str | None]] = []
    section = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        while line.endswith("\\") and not line.endswith("\\\\") and i < len(lines):
            line = line[:-1] + lines[i].strip()
            i += 1
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            end = line.find("]")
            header = line[1:end] if end > 0 else line[1:]
            if '"' in header:
                name, _, sub = header.partition(" ")
                section = name.strip().lower() + "." + sub.strip().strip('"')
            else:
                name, dot, sub = header.strip().partition(".")
                section = name.lower() + (("." + sub.lower()) if dot else "")
            rest = line[end + 1 :].strip() if end > 0 else ""
            if not rest or rest[0] in "#;":
                continue
            line = rest  # `[core] hooksPath = x` on one line
        key, eq, value = line.partition("=")
        entries.append((section, key.strip().lower(), _unquote(value.strip()) if eq else None))
    return entries


@dataclass
class _Found:
    value: str | None = None
    source: Path | None = None
    conditional: bool = False  # the value came through an `includeIf` (not evaluated here)


def _read_config(path: Path, found: _Found, depth: int = 0) -> None:
    """Fold `core.hooksPath` from `path` (and the files it includes) into `found`."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    for section, key, value in parse_config(text):
        if section == "core" and key == "hookspath" and value is not None:
            found.value, found.source, found.conditional = value, path, False
        elif (section == "include" or section.startswith("includeif.")) and key == "path":
            if value is None or depth >= _MAX_INCLUDES:
                continue
            # `includeIf` conditions are not evaluated: a hooks path set under one makes the
            # answer uncertain, and `hooks_dir` refuses rather than guess.
            included = Path(os.path.expanduser(value))
            if not included.is_absolute():
                included = path.parent / included
            inner = _Found()
            _read_config(included, inner, depth + 1)
            if inner.value is not None:
                found.value, found.source = inner.value, inner.source
                found.conditional = inner.conditional or section.startswith("includeif.")


def _global_configs() -> list[Path]:
    files: list[Path] = []
    if not os.environ.get("GIT_CONFIG_NOSYSTEM"):
        files.append(Path(os.environ.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig"))
    explicit = os.environ.get("GIT_CONFIG_GLOBAL")
    if explicit:
        files.append(Path(explicit))
    else:
        xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
        files += [Path(xdg, "git", "config"), Path.home() / ".gitconfig"]
    return files


# ------------------------------------------------------------------------------ repository layout


@dataclass(frozen=True)
class HooksDir:
    worktree: Path
    path: Path
    configured: bool  # from core.hooksPath


def _git_dirs(worktree: Path) -> tuple[Path, Path]:
    """(the worktree's git dir, the common dir), read from `.git` without running git."""
    dot_git = worktree / ".git"
    try:
        st = os.lstat(dot_git)
    except FileNotFoundError:
        raise Refused(f"{worktree} is not the top of a git working tree (no .git)") from None
    if stat.S_ISLNK(st.st_mode):
        raise Refused(f"{dot_git} is a symbolic link; not installing git hooks through it")
    if stat.S_ISDIR(st.st_mode):
        git_dir = dot_git
    else:
        text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
        if not text.startswith("gitdir:"):
            raise Refused(f"{dot_git} is neither a directory nor a 'gitdir:' file")
        git_dir = Path(text.removeprefix("gitdir:").strip())
        if not git_dir.is_absolute():
            git_dir = (worktree / git_dir).resolve()
    common = git_dir
    commondir = git_dir / "commondir"
    if commondir.is_file():
        value = Path(commondir.read_text(encoding="utf-8", errors="replace").strip())
        common = value if value.is_absolute() else (git_dir / value).resolve()
    return git_dir, common


def hooks_dir(worktree: Path) -> HooksDir:
    """Where git runs this working tree's hooks (Refused where installing there is unsafe)."""
    worktree = worktree.resolve()
    git_dir, common = _git_dirs(worktree)
    local = _Found()
    _read_config(common / "config", local)
    _read_config(git_dir / "config.worktree", local)
    shared = _Found()
    for path in _global_configs():
        _read_config(path, shared)
    value, source = local.value, local.source
    for one in (local, shared):
        if one.conditional:
            raise Refused(
                f"core.hooksPath comes from an includeIf in {one.source}, whose condition "
                "agentstack does not evaluate; not guessing where git runs hooks",
                hint="set core.hooksPath unconditionally in the repository, or add the hooks by hand",
            )
    if value is None and shared.value is not None:
        raise Refused(
            f"core.hooksPath is set to {shared.value!r} in {shared.source}, which other "
            "repositories share; not installing a hook that checks this project there",
            hint="set a repository-local core.hooksPath, or add the hooks by hand",
        )
    if value is None:
        path, configured = common / "hooks", False
    else:
        expanded = Path(os.path.expanduser(value))
        path, configured = (expanded if expanded.is_absolute() else worktree / expanded), True
        path = Path(os.path.abspath(path))
    try:
        inside_tree = path.relative_to(worktree).parts
    except ValueError:
        inside_tree = None
    if configured and inside_tree is not None and inside_tree[:1] != (".git",):
        raise Refused(
            f"core.hooksPath ({value!r}, from {source}) points into the working tree: the next "
            "pull could replace agentstack's hook with the repository's own",
            hint="point core.hooksPath outside the working tree (or into .git), then install",
        )
    from agentstack.fsutil import check_no_links

    base = worktree if inside_tree is not None else path.parent
    try:
        check_no_links(path, base)
    except OSError as exc:
        raise Refused(f"the hooks path {path} goes through a symbolic link ({exc}); "
                      "not installing git hooks there") from None
    return HooksDir(worktree=worktree, path=path, configured=configured)


# ---------------------------------------------------------------------------- install / remove


def _ours(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and MARKER.encode() in os.read(fd, 512)
    finally:
        os.close(fd)


def hook_text(project: Path, event: str, chained: Path, python: str | None = None) -> str:
    check = shlex.join(
        [python or sys.executable, "-I", "-m", "agentstack.githooks", str(project), event]
    )
    quoted = shlex.quote(str(chained))
    return (
        "#!/bin/sh\n"
        f"{MARKER} ({event}): re-check the harness surface against the trusted digest after git\n"
        "# changed the working tree; on a difference, withdraw the harness-side trust.\n"
        "# Written by 'agentstack shims install --git-hooks'; removed by "
        "'agentstack shims remove --git-hooks'.\n"
        f"{check} </dev/null || true\n"
        f"if [ -x {quoted} ]; then exec {quoted} \"$@\"; fi\n"
        "exit 0\n"
    )


def worktree_of(project: Path) -> Path:
    """The top of the git working tree holding `project` (the nearest directory with `.git`)."""
    project = project.resolve()
    for candidate in (project, *project.parents):
        if os.path.lexists(candidate / ".git"):
            return candidate
    raise Refused(f"{project} is not inside a git working tree; there is nowhere to put hooks")


def install(project: Path, python: str | None = None) -> list[Path]:
    """Write the three hooks for the agentstack project `project` (chaining any existing hook);
    returns the hook files written."""
    from agentstack.fsutil import write_atomic

    project = project.resolve()
    where = hooks_dir(worktree_of(project))
    where.path.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for event in HOOKS:
        hook = where.path / event
        chained = where.path / (event + CHAINED)
        text = hook_text(project, event, chained, python)
        if _ours(hook) and hook.read_text(encoding="utf-8") != text:
            raise Refused(f"{hook} is an agentstack hook for another project or interpreter; "
                          "remove it first with 'agentstack shims remove --git-hooks' there")
        if os.path.lexists(hook) and not _ours(hook):
            if os.path.lexists(chained):
                raise Refused(f"{hook} exists and so does {chained.name}; move one of them "
                              "away first (nothing was written for this hook)")
            os.rename(hook, chained)  # kept as it is (a link stays a link), and still run
        write_atomic(hook, text.encode(), 0o755, base=where.path)
        written.append(hook)
    return written


def remove(project: Path) -> list[Path]:
    """Delete the hooks `install` wrote and put chained ones back; nothing else."""
    where = hooks_dir(worktree_of(project))
    removed: list[Path] = []
    for event in HOOKS:
        hook = where.path / event
        chained = where.path / (event + CHAINED)
        if _ours(hook):
            hook.unlink()
            removed.append(hook)
            if os.path.lexists(chained):
                os.rename(chained, hook)
    return removed


# ------------------------------------------------------------------------------ the hook itself


def check(project: Path) -> str | None:
    """Run from a hook: the problem found (trust withdrawn then), or None."""
    from agentstack.apply.prestart import withdraw_harness_trust
    from agentstack.manifest.view import MANIFEST_NAME
    from agentstack.paths import guard_snapshot_path
    from agentstack.shim import problem

    root = project.resolve()
    if not os.path.lexists(root / MANIFEST_NAME) and not os.path.lexists(guard_snapshot_path(root)):
        return None  # never an agentstack project on this machine
    # A manifest deleted (or replaced by a link or a directory) by the commit is a problem too.
    found = problem(root)
    if found is not None:
        withdraw_harness_trust(root)
    return found


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        sys.stderr.write("usage: python -I -m agentstack.githooks PROJECT EVENT\n")
        return 2
    try:
        found = check(Path(argv[0]))
    except Exception as exc:  # noqa: BLE001 - a hook must not break git; fail closed
        found = f"the surface check failed ({type(exc).__name__}: {exc})"
        try:
            from agentstack.apply.prestart import withdraw_harness_trust

            withdraw_harness_trust(Path(argv[0]).resolve())
        except Exception:  # noqa: BLE001, S110 - reported below either way
            pass
    if found is not None:
        sys.stderr.write(
            f"agentstack ({argv[1]}): {found}\n"
            "agentstack: withdrew the harness trust for this project; review with "
            "'agentstack status', 'agentstack trust' and 'agentstack apply --write'\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

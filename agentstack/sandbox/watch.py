"""What `run` compares before and after a session: files that make something run outside the
sandbox later, in the workdir the confined process may write.

Landlock cannot keep `.git/hooks` or `.git/config` read-only inside a writable workdir: its rights
are inherited down the hierarchy, so the right to create a file at the top of the workdir is the
right to create (or rename into) `.git/hooks/pre-commit`. `run` therefore records, before the
session and again once every process of it is gone, without following a single link and without
running git:

- every git directory in the tree (the top one, nested repositories, `.git/modules/*`,
  `.git/worktrees/*`), all of it except object stores, and every `.git` *file* (the `gitdir:` link
  of a worktree or submodule), `.gitmodules`, `.gitattributes`, `.lfsconfig`, and the gitlinks
  (submodule entries) the index names;
- files other tools run or load when they open the directory (`.envrc`, `.vscode/tasks.json`, ...);
- the harnesses' project configuration (`.claude/`, `.codex/`, `.mcp.json`, instruction files).

`compare()` reports each change as what it is. Nothing here is executed or trusted.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, NamedTuple

Category = Literal["git-exec", "git-state", "on-open", "harness"]
MAX_ENTRIES = 500_000
MAX_FILE = 64 * 1024 * 1024

# Relative paths (or directory prefixes, ending in "/") that other tools run or load on open.
ON_OPEN = (
    ".envrc", ".env.local", ".vscode/", ".devcontainer/", ".idea/", ".mise.toml", "mise.toml",
    ".mise/", ".tool-versions", ".npmrc", ".yarnrc", ".yarnrc.yml", ".pnpmfile.cjs",
    ".cargo/config", ".cargo/config.toml", ".pre-commit-config.yaml", ".husky/", ".lefthook.yml",
    "lefthook.yml", ".direnv/", ".gitattributes", ".gitmodules", ".lfsconfig",
)
# The harnesses' project-level configuration and instructions.
HARNESS = (
    ".claude/", ".codex/", ".mcp.json", "CLAUDE.md", "CLAUDE.local.md", "AGENTS.md",
    "AGENTS.override.md", ".gemini/", "GEMINI.md", ".cursor/", ".cursorrules", ".github/copilot/",
    ".github/copilot-instructions.md", ".github/hooks/", ".opencode/", "opencode.json",
    ".agents/",
)
GIT_EXEC_NAMES = frozenset({"config", "config.worktree", "commondir", "gitdir"})
GIT_FILES = frozenset({".gitmodules", ".gitattributes", ".lfsconfig"})


class Entry(NamedTuple):
    kind: Literal["file", "link", "dir", "other", "gitlink"]
    fingerprint: str
    category: Category


class Change(NamedTuple):
    path: str
    what: Literal["added", "removed", "changed"]
    category: Category

    def describe(self) -> str:
        return f"{self.path} ({self.what})"


def _compile(patterns: tuple[str, ...]) -> tuple[frozenset[str], tuple[str, ...]]:
    """(the names a path may equal, the directory prefixes it may start with)."""
    return (frozenset(p.removesuffix("/") for p in patterns),
            tuple(p for p in patterns if p.endswith("/")))


_ON_OPEN, _HARNESS = _compile(ON_OPEN), _compile(HARNESS)


def _matches(relative: str, patterns: tuple[str, ...]) -> bool:
    """`relative` is one of `patterns` (a directory pattern ends in "/": the directory itself,
    whatever its type, or anything under it)."""
    names, prefixes = _compile(patterns)
    return _matched(relative, names, prefixes)


def _matched(relative: str, names: frozenset[str], prefixes: tuple[str, ...]) -> bool:
    # Called for every entry of the tree: one set lookup and one C-level prefix test.
    return relative in names or relative.startswith(prefixes)


def _file_fingerprint(path: str, info: os.stat_result) -> str:
    from agentstack.canonical import b3

    mode = "x" if info.st_mode & 0o111 else "-"
    if info.st_size > MAX_FILE:
        # Not hashed: the inode and ctime too, which no process can set back (mtime it can).
        return (
            f"{mode}:size={info.st_size}:mtime={info.st_mtime_ns}:ctime={info.st_ctime_ns}"
            f":ino={info.st_ino}"
        )
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        return f"unreadable:{exc.errno}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "not-a-file"
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    return f"{mode}:{b3(b''.join(chunks))}"


def _entry(path: str, info: os.stat_result, category: Category) -> Entry:
    if stat.S_ISLNK(info.st_mode):
        try:
            return Entry("link", os.readlink(path), category)
        except OSError:
            return Entry("link", "?", category)
    if stat.S_ISREG(info.st_mode):
        return Entry("file", _file_fingerprint(path, info), category)
    if stat.S_ISDIR(info.st_mode):
        return Entry("dir", "", category)
    return Entry("other", oct(stat.S_IFMT(info.st_mode)), category)


def _git_category(parts: tuple[str, ...]) -> Category:
    """`parts`: the path inside a git directory."""
    if parts and (parts[-1] in GIT_EXEC_NAMES or "hooks" in parts):
        return "git-exec"
    if parts[:2] == ("info", "attributes"):
        return "git-exec"
    return "git-state"


def _walk_git_dir(root: str, git_dir: str, out: dict[str, Entry]) -> None:
    stack = [git_dir]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for item in entries:
            try:
                info = item.stat(follow_symlinks=False)
            except OSError:
                continue
            relative = os.path.relpath(item.path, root)
            inner = tuple(os.path.relpath(item.path, git_dir).split(os.sep))
            if stat.S_ISDIR(info.st_mode):
                if item.name == "objects" and os.path.exists(os.path.join(directory, "HEAD")):
                    continue  # an object store: content-addressed, never executed
                if item.name == "lfs" and directory == git_dir:
                    continue
                out[relative] = _entry(item.path, info, _git_category(inner))
                stack.append(item.path)
                continue
            out[relative] = _entry(item.path, info, _git_category(inner))
            if inner == ("index",):
                for path in gitlinks(item.path):
                    out[f"{relative} gitlink {path}"] = Entry("gitlink", path, "git-exec")
        if len(out) > MAX_ENTRIES:
            return


def snapshot(root: Path) -> dict[str, Entry]:
    """Fingerprints of everything described in the module docstring, by path relative to
    `root`. Never follows a link, never runs git."""
    base = os.path.realpath(str(root))
    out: dict[str, Entry] = {}
    stack = [base]
    while stack and len(out) <= MAX_ENTRIES:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for item in entries:
            is_dir = item.is_dir(follow_symlinks=False)  # d_type: no stat for most entries
            relative = item.path[len(base) + 1:]
            if item.name == ".git" or item.name in GIT_FILES:
                category: Category | None = "git-exec"
            else:
                probe = relative + ("/" if is_dir else "")
                category = (
                    "on-open" if _matched(probe, *_ON_OPEN)
                    else "harness" if _matched(probe, *_HARNESS)
                    else None
                )
            if category is not None:
                try:
                    info = item.stat(follow_symlinks=False)
                except OSError:
                    continue
                if item.name == ".git" and is_dir:
                    out[relative] = Entry("dir", "", "git-exec")
                    _walk_git_dir(base, item.path, out)
                    continue
                # a .git file is a gitdir: link, and a link decides where git looks: recorded
                out[relative] = _entry(item.path, info, category)
            if is_dir and item.name != ".git":
                stack.append(item.path)
    return out


def _under(relative: str, patterns: tuple[str, ...]) -> bool:
    return any(p.endswith("/") and relative.startswith(p) for p in patterns)


def compare(before: dict[str, Entry], after: dict[str, Entry]) -> list[Change]:
    out: list[Change] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        if old is None:
            assert new is not None
            out.append(Change(path, "added", new.category))
        elif new is None:
            out.append(Change(path, "removed", old.category))
        elif old.kind == "dir" and new.kind == "dir":
            continue
        else:
            category = "git-exec" if "git-exec" in (old.category, new.category) else new.category
            out.append(Change(path, "changed", category))
    return out


def gitlinks(index_path: str) -> list[str]:
    """Paths of the gitlink (submodule) entries of a git index (versions 2-4); [] when it
    cannot be read. Parsed, never handed to git."""
    try:  # the project's file: never follow a link, never block on a FIFO, regular files only
        fd = os.open(index_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return []
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return ["<not a regular file>"]
        data = handle.read(MAX_FILE)
    out: list[str] = []
    try:
        out.extend(_gitlinks(data))
    except (ValueError, IndexError, struct.error):
        out.append("<unparsable index>")
    return out


def _gitlinks(data: bytes) -> Iterator[str]:
    if len(data) < 12 or data[:4] != b"DIRC":
        return
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3, 4):
        return
    position = 12
    previous = b""
    for _ in range(count):
        if position + 62 > len(data):
            return
        mode = struct.unpack(">I", data[position + 24:position + 28])[0]
        flags = struct.unpack(">H", data[position + 60:position + 62])[0]
        cursor = position + 62
        if version >= 3 and flags & 0x4000:
            cursor += 2
        if version == 4:
            strip, cursor = _varint(data, cursor)
            end = data.index(b"\0", cursor)
            name = previous[:len(previous) - strip] + data[cursor:end]
            cursor = end + 1
        else:
            end = data.index(b"\0", cursor)
            name = data[cursor:end]
            entry_length = end - position + 1
            cursor = position + ((entry_length + 7) // 8) * 8
        previous = name
        position = cursor
        if mode >> 12 == 0o16:  # 0160000: a gitlink
            yield name.decode("utf-8", "replace")


def _varint(data: bytes, position: int) -> tuple[int, int]:
    byte = data[position]
    value = byte & 0x7F
    position += 1
    while byte & 0x80:
        byte = data[position]
        value = ((value + 1) << 7) | (byte & 0x7F)
        position += 1
    return value, position


MESSAGES: dict[Category, str] = {
    "git-exec": "changed what git executes outside the sandbox (config, hooks, git directories "
    "and links, submodules, attributes)",
    "on-open": "changed files other tools run or load when they open this directory",
    "harness": "changed the harness's project configuration or instructions (the harness loads "
    "them in its next session)",
    "git-state": "changed git's state (index, refs, logs)",
}


def report(changes: list[Change]) -> list[str]:
    """One line per category, most dangerous first."""
    lines: list[str] = []
    for category in ("git-exec", "on-open", "harness", "git-state"):
        items = [c for c in changes if c.category == category]
        if not items:
            continue
        shown = ", ".join(c.describe() for c in items[:20])
        more = f" and {len(items) - 20} more" if len(items) > 20 else ""
        lines.append(f"{MESSAGES[category]}: {shown}{more}")
    return lines


__all__ = ["Change", "Entry", "compare", "gitlinks", "report", "snapshot"]

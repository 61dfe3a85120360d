"""Git metadata inside pinned trees: one rule for `lock`, `share`, `receive`, `release` and the
surface (docs/lockfile.md, "Git metadata").

A pinned tree never holds git metadata. A repository inside a skill or any other pinned directory
runs its own configuration on the next git command there (`core.fsmonitor` on `git status`, hooks,
`core.pager`), so it would be code that runs without ever being shown as code. Git metadata is:

- an entry git itself treats as `.git`: `.git` in any case, with the trailing dots or spaces and
  the `git~1` short name NTFS ignores, with the code points HFS+ ignores (git's own
  `is_hfs_dotgit` / `is_ntfs_dotgit`), or an alternate data stream of one (`.git::$DATA`), whether
  a directory, a file (`gitdir: …`) or a link;
- a directory git would take for a repository by itself (a bare repository, discovered by git's
  `is_git_directory`): one holding `HEAD` together with `objects/`, `refs/` or `commondir`.

Stdlib only and cheap: it runs over every path a lock pins.
"""

from __future__ import annotations

from collections.abc import Iterable

# The code points HFS+ drops when it compares names (git: is_hfs_dotgit, next_hfs_char).
_HFS_IGNORED = frozenset(
    chr(c)
    for c in (
        *range(0x200C, 0x2010),
        *range(0x202A, 0x202F),
        *range(0x206A, 0x2070),
        0xFEFF,
    )
)
_GITDIR_SIBLINGS = ("objects", "refs", "commondir")

HINT = (
    "remove it from the pinned directory (keep the repository elsewhere); to pin a skill from a "
    "repository, use git = URL and rev = … in agentstack.toml"
)


def _fold(name: str) -> str:
    if not name.isascii():
        name = "".join(c for c in name if c not in _HFS_IGNORED)
    return name.casefold()


def is_git_name(component: str) -> bool:
    """A path component git (or the file system under it) resolves to `.git`."""
    folded = _fold(component)
    if "git" not in folded:
        return False
    folded = folded.split(":", 1)[0].rstrip(" .")
    return folded in (".git", "git~1")


def git_metadata(paths: Iterable[str]) -> str | None:
    """The first of `paths` (relative, `/`-separated, one tree; by raw bytes) that is git
    metadata, or None. Linear in the number of path components."""
    listed = list(paths)
    hits: list[str] = []
    heads: dict[str, str] = {}  # folded directory prefix ("" or "a/b/") -> its HEAD path
    for path in listed:
        folded = path.lower() if path.isascii() else _fold(path)
        if "git" in folded and any(is_git_name(part) for part in path.split("/")):
            hits.append(path)
        elif folded == "head" or folded.endswith("/head"):
            heads.setdefault(folded[:-4], path)
    if heads and not hits:
        for path in listed:
            parts = (path.lower() if path.isascii() else _fold(path)).split("/")
            prefix = ""
            for part in parts:
                if part in _GITDIR_SIBLINGS and prefix in heads:
                    hits.append(heads[prefix])
                    break
                prefix += part + "/"
    if not hits:
        return None
    return min(hits, key=lambda p: p.encode("utf-8", "surrogatepass"))


def describe(path: str, where: str = "") -> str:
    """The refusal's one line: what was found and why it is refused."""
    place = f"{where}: " if where else ""
    return (
        f"{place}{path} is git metadata inside a pinned tree (a repository there would run its "
        "own configuration, such as core.fsmonitor or hooks, on the next git command)"
    )


def pinned_paths(lock: dict[str, object]) -> dict[str, list[str]]:
    """Every path a lock pins, by tree: "." for the project (local trees, single files, the
    surface; project-relative), `URL@COMMIT:SUBDIR` for a git-sourced tree (tree-relative). A file
    entry is any table with a `path`, a `digest` and a `kind`, wherever it is."""
    import posixpath

    out: dict[str, list[str]] = {}

    def walk(node: object, base: str, tree: str | None) -> None:
        if isinstance(node, dict):
            path = node.get("path")
            if (
                isinstance(path, str)
                and "digest" in node
                and "kind" in node
                and "files" not in node
            ):
                if tree is None:
                    out.setdefault(".", []).append(posixpath.normpath(f"{base}/{path}"))
                else:
                    out.setdefault(tree, []).append(path)
                return
            if isinstance(node.get("files"), list):
                git, commit = node.get("git"), node.get("commit")
                if isinstance(git, str) and isinstance(commit, str):
                    tree = f"{git}@{commit}:{node.get('subdir') or ''}"
                elif isinstance(path, str):
                    base = posixpath.normpath(f"{base}/{path}")
            for value in node.values():
                walk(value, base, tree)
        elif isinstance(node, list):
            for value in node:
                walk(value, base, tree)

    walk({k: v for k, v in lock.items() if k not in ("version", "manifest")}, ".", None)
    return out


def lock_problem(lock: dict[str, object]) -> tuple[str, str] | None:
    """(where, path) of the first git metadata a lock pins, or None: `where` names the lock
    entry (`skills.NAME`, `servers.NAME`, `surface`) for a project path, the source for a git
    tree."""
    for tree, paths in sorted(pinned_paths(lock).items()):
        found = git_metadata(paths)
        if found is not None:
            return (_owner(lock, found) if tree == "." else tree), found
    return None


def _owner(lock: dict[str, object], path: str) -> str:
    surface = lock.get("surface")
    if isinstance(surface, dict) and path in surface:
        return "surface"
    for section in ("skills", "servers", "hooks"):
        items = lock.get(section)
        if not isinstance(items, dict):
            continue
        for name, item in sorted(items.items()):
            if not isinstance(item, dict):
                continue
            roots = [item, *(r for r in item.get("roots", []) if isinstance(r, dict))]
            if any(
                isinstance(r.get("path"), str) and path.startswith(str(r["path"]).rstrip("/") + "/")
                for r in roots
            ):
                return f"{section}.{name}"
    return "."

"""What git runs later is not left writable by a session: `run` rolls back, before it returns,
every change the session made to git's execution state, and reports it.

Landlock cannot deny a path under a granted writable parent (the workdir), so `.git/config`,
`.git/hooks`, `commondir`, `info/attributes` and the git directories of nested repositories and
submodules are writable *during* the session. Once every process of the session is gone (nothing
can race the restore), `run` puts back what git would execute:

- a changed or removed file of git's execution state (`watch._git_category`: `config`,
  `config.worktree`, `commondir`, `gitdir`, anything under `hooks/`, `info/attributes`, in any git
  directory of the tree) gets its bytes and mode from before the session;
- such a file, link or `hooks` directory the session *added* is removed, and so is a `.git` file
  or link it planted (a worktree's or submodule's `gitdir:` link); an added git directory keeps
  its objects and refs (a `git init` the agent ran is not thrown away) but loses its config and
  hooks;
- when the gitlinks (submodule entries) of an index changed, that index is restored (the
  session's staging is undone, and said so): a gitlink is how a planted repository's own config
  would run in the user's next `git status`.

Every path is reached through directory descriptors opened with `O_NOFOLLOW` from the workdir: a
link the session planted on the way is removed, never followed. What cannot be restored is
reported as such (the warning stays). `.gitmodules`, `.gitattributes` and `.lfsconfig` are
project content the agent may edit: reported, not rolled back.

Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping
from typing import NamedTuple

from agentstack.sandbox.watch import GIT_FILES, Change, Entry

MAX_BACKUP = 64 * 1024 * 1024


class Backup(NamedTuple):
    data: bytes
    mode: int


class Outcome(NamedTuple):
    restored: tuple[str, ...]
    removed: tuple[str, ...]
    failed: tuple[tuple[str, str], ...]  # (path, why)

    @property
    def done(self) -> tuple[str, ...]:
        return (*self.restored, *self.removed)


def _open_dir(root: str, parts: list[str], create: bool = False) -> int:
    """A descriptor of root/parts..., every component opened with O_NOFOLLOW (raises OSError
    when one is a link or not a directory, or is missing and `create` is false)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                            dir_fd=fd)
            os.close(fd)
            fd = inner
    except OSError:
        os.close(fd)
        raise
    return fd


def _read(root: str, relative: str) -> Backup | None:
    parts = relative.split("/")
    try:
        parent = _open_dir(root, parts[:-1])
    except OSError:
        return None
    try:
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=parent)
    except OSError:
        return None
    finally:
        os.close(parent)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BACKUP:
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return Backup(b"".join(chunks), stat.S_IMODE(info.st_mode))
    finally:
        os.close(fd)


def _is_git_exec_file(relative: str, entry: Entry) -> bool:
    return (entry.category == "git-exec" and entry.kind == "file"
            and os.path.basename(relative) not in GIT_FILES and " gitlink " not in relative)


def _index_paths(snapshot: Mapping[str, Entry]) -> list[str]:
    """The index files of the git directories in a snapshot."""
    return sorted(p for p, e in snapshot.items()
                  if e.kind == "file" and os.path.basename(p) == "index"
                  and (os.path.dirname(p).endswith(".git") or "/.git/" in f"/{p}"))


def backups(root: str, before: Mapping[str, Entry]) -> dict[str, Backup]:
    """The bytes to restore: every file of git's execution state, and every index."""
    base = os.path.realpath(root)
    out: dict[str, Backup] = {}
    for relative in [p for p, e in before.items() if _is_git_exec_file(p, e)] + _index_paths(
        before
    ):
        saved = _read(base, relative)
        if saved is not None:
            out[relative] = saved
    return out


def _remove(parent: int, name: str) -> None:
    info = os.lstat(name, dir_fd=parent)
    if stat.S_ISDIR(info.st_mode):
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=parent)
        try:
            for child in os.listdir(fd):
                _remove(fd, child)
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=parent)
    else:
        os.unlink(name, dir_fd=parent)


def _write(root: str, relative: str, backup: Backup) -> None:
    parts = relative.split("/")
    parent = _open_dir(root, parts[:-1], create=True)
    try:
        temporary = f".{parts[-1]}.agentstack-restore"
        with contextlib.suppress(FileNotFoundError):
            _remove(parent, temporary)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600, dir_fd=parent)
        try:
            view = memoryview(backup.data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, backup.mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            info = os.lstat(parts[-1], dir_fd=parent)
            if stat.S_ISDIR(info.st_mode):
                _remove(parent, parts[-1])
        except FileNotFoundError:
            pass
        os.rename(temporary, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
    finally:
        os.close(parent)


def _unlink(root: str, relative: str) -> None:
    parts = relative.split("/")
    parent = _open_dir(root, parts[:-1])
    try:
        _remove(parent, parts[-1])
    finally:
        os.close(parent)


def roll_back(root: str, before: Mapping[str, Entry], after: Mapping[str, Entry],
              changes: list[Change], saved: Mapping[str, Backup]) -> Outcome:
    """Undo the session's changes to git's execution state (see the module docstring)."""
    base = os.path.realpath(root)
    restored: list[str] = []
    removed: list[str] = []
    failed: list[tuple[str, str]] = []
    exec_changes = [c for c in changes if c.category == "git-exec"
                    and os.path.basename(c.path.split(" gitlink ")[0]) not in GIT_FILES]
    # Links first, shallowest first: a link planted on the way to anything else goes before it.
    planted_links = sorted((c.path for c in exec_changes
                            if " gitlink " not in c.path and c.path in after
                            and after[c.path].kind == "link"), key=lambda p: p.count("/"))
    for path in planted_links:
        try:
            _unlink(base, path)
            removed.append(path)
        except OSError as exc:
            failed.append((path, exc.strerror or str(exc)))
    indexes: set[str] = set()
    for change in exec_changes:
        path = change.path
        if " gitlink " in path:
            indexes.add(path.split(" gitlink ")[0])
            continue
        if path in planted_links:
            old = before.get(path)
            if old is not None and old.kind == "file" and path in saved:
                _restore(base, path, saved, restored, failed)
            continue
        new = after.get(path)
        old = before.get(path)
        try:
            if change.what == "added" and new is not None:
                name = os.path.basename(path)
                if new.kind == "dir" and name != "hooks" and "/hooks/" not in f"/{path}/":
                    continue  # a git directory (or its info/): its exec files go one by one
                if any(path.startswith(p + "/") for p in removed):
                    continue
                _unlink(base, path)
                removed.append(path)
            elif old is not None and old.kind == "file":
                _restore(base, path, saved, restored, failed)
        except FileNotFoundError:
            continue  # already gone with a directory removed before it
        except OSError as exc:
            failed.append((path, exc.strerror or str(exc)))
    for index in sorted(indexes):
        if index in before:
            _restore(base, index, saved, restored, failed)
            continue
        try:  # no index before the session: the one it made (with the gitlink) goes
            _unlink(base, index)
            removed.append(index)
        except OSError as exc:
            failed.append((index, exc.strerror or str(exc)))
    return Outcome(tuple(restored), tuple(removed), tuple(failed))


def _restore(base: str, path: str, saved: Mapping[str, Backup], restored: list[str],
             failed: list[tuple[str, str]]) -> None:
    backup = saved.get(path)
    if backup is None:
        failed.append((path, "no copy from before the session"))
        return
    try:
        _write(base, path, backup)
        restored.append(path)
    except OSError as exc:
        failed.append((path, exc.strerror or str(exc)))


def report_lines(outcome: Outcome) -> list[str]:
    lines = []
    if outcome.done:
        shown = ", ".join([*(f"{p} (restored)" for p in outcome.restored),
                           *(f"{p} (removed)" for p in outcome.removed)][:20])
        lines.append("agentstack: rolled back the session's changes to what git executes: "
                     + shown)
        if any(os.path.basename(p) == "index" for p in outcome.done):
            lines.append("agentstack: note: an index was restored (the session added or changed "
                         "a submodule entry), so the session's staging there is undone")
    for path, why in outcome.failed:
        lines.append(f"agentstack: WARNING: could not roll back {path}: {why}; review it before "
                     "running git here")
    return lines

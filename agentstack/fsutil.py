"""Atomic file replacement that never follows a link: a reader (or a crash) sees the old file or
the new one, never half; and a symbolic link on the way is a refusal, not a detour.

`base` is the directory the caller trusts (the project root, the user's home): every component of
the path below it is opened one at a time with O_NOFOLLOW (a directory with O_DIRECTORY too),
relative to the previous one's descriptor, so a committed link (`.claude/skills -> ../.git/hooks`)
cannot send a write anywhere else, not even by being swapped in between a check and the write.
The new content goes to a temp file created with O_CREAT|O_EXCL|O_NOFOLLOW in the final directory,
is fsync'd, renamed over the target (renameat, which replaces a name and never follows it), and
the directory is fsync'd.

Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class LinkInPath(OSError):
    """A symbolic link (or something that is not a directory) where a directory was expected."""

    def __init__(self, link: Path, target: Path) -> None:
        super().__init__(f"{link} is a symbolic link (on the way to {target}); refusing to follow it")
        self.link = link
        self.target = target


def _split(path: Path, base: Path | None) -> tuple[Path, list[str]]:
    """(the trusted base directory, the components below it)."""
    path = Path(os.path.abspath(path))
    if base is None:
        # The caller trusts everything above the file itself (its own state directory).
        return Path(os.path.realpath(path.parent)), [path.name]
    real_base = Path(os.path.realpath(base))
    try:
        rel = path.relative_to(Path(os.path.abspath(base)))
    except ValueError:
        try:
            rel = path.relative_to(real_base)
        except ValueError:
            raise ValueError(f"{path} is not under {base}") from None
    parts = [p for p in rel.parts if p not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"{path} is not a file under {base}")
    return real_base, parts


@contextlib.contextmanager
def open_parent(path: Path, base: Path | None = None, *, create: bool = True) -> Iterator[int]:
    """A descriptor of `path`'s directory, reached from `base` one component at a time without
    following a link (missing directories created 0755 when `create`). Yields the descriptor."""
    if base is None and create:
        Path(os.path.abspath(path)).parent.mkdir(parents=True, exist_ok=True)
    root, parts = _split(path, base)
    fd = os.open(root, _DIR_FLAGS)
    walked = root
    try:
        for name in parts[:-1]:
            walked = walked / name
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError:
                    raise LinkInPath(walked, path) from None
            except OSError as exc:  # ELOOP (a link) or ENOTDIR (a file, or a link to one)
                if exc.errno in (40, 20):
                    raise LinkInPath(walked, path) from None
                raise
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def check_no_links(path: Path, base: Path, *, final_may_be_link: bool = False) -> None:
    """Raise LinkInPath when a component of `path` below `base` is a symbolic link (the last one
    too, unless `final_may_be_link`); a missing component ends the check (it will be created)."""
    root, parts = _split(path, base)
    walked = root
    for index, name in enumerate(parts):
        walked = walked / name
        try:
            st = os.lstat(walked)
        except FileNotFoundError:
            return
        last = index == len(parts) - 1
        if stat.S_ISLNK(st.st_mode) and not (last and final_may_be_link):
            raise LinkInPath(walked, path)
        if not last and not stat.S_ISDIR(st.st_mode):
            raise LinkInPath(walked, path)


def _final_mode(dir_fd: int, name: str, mode: int | None) -> int:
    if mode is not None:
        return mode
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return 0o644
    return stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else 0o644


def write_atomic(path: Path, data: bytes, mode: int | None = None, *,
                 base: Path | None = None) -> None:
    """Write `data` to a temp file beside `path`, fsync it, rename it over `path`, fsync the dir.

    `mode`: the new file's permissions; by default an existing file's are kept (else 0644).
    `base`: the trusted directory; no component of `path` below it may be a link (LinkInPath)."""
    path = Path(path)
    try:
        _write_atomic(path, data, mode, base)
    except OSError as exc:
        from agentstack.storage import storage_error

        raise storage_error(
            exc, path, f"writing {path} (left as it was: it is replaced whole or not at all)"
        ) from exc


def _write_atomic(path: Path, data: bytes, mode: int | None, base: Path | None) -> None:
    with open_parent(path, base) as dir_fd:
        name = path.name
        final = _final_mode(dir_fd, name, mode)
        tmp = f".{name}.agentstack-{os.urandom(6).hex()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dir_fd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fchmod(fd, final)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        try:
            os.fsync(dir_fd)
        except OSError as exc:
            from agentstack.storage import storage_error

            raise storage_error(
                exc, path, f"making {path} durable (it is written; the disk may not keep it)"
            ) from exc


def link_atomic(path: Path, target: str, *, base: Path | None = None) -> None:
    """Make `path` a symbolic link to `target` (created beside it, renamed over it)."""
    path = Path(path)
    with open_parent(path, base) as dir_fd:
        tmp = f".{path.name}.agentstack-{os.urandom(6).hex()}"
        os.symlink(target, tmp, dir_fd=dir_fd)
        try:
            os.rename(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.fsync(dir_fd)


def unlink(path: Path, *, base: Path | None = None) -> None:
    """Remove `path` (a link itself, never what it points to); missing is fine."""
    path = Path(path)
    try:
        with open_parent(path, base, create=False) as dir_fd:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path.name, dir_fd=dir_fd)
            os.fsync(dir_fd)
    except FileNotFoundError:
        return


def read_nofollow(path: Path, base: Path) -> bytes | None:
    """The bytes of regular file `path`, reached without following a link (None when missing).
    A link at the end raises LinkInPath too: callers that render links read them with lstat."""
    path = Path(path)
    try:
        with open_parent(path, base, create=False) as dir_fd:
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == 40:
            raise LinkInPath(path, path) from None
        raise
    with os.fdopen(fd, "rb") as handle:
        return handle.read()

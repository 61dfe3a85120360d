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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, TypeVar

T = TypeVar("T")

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class LinkInPath(OSError):
    """A symbolic link (or something that is not a directory) where a directory was expected."""

    def __init__(self, link: Path, target: Path) -> None:
        super().__init__(f"{link} is a symbolic link (on the way to {target}); refusing to follow it")
        self.link = link
        self.target = target


_REAL: dict[str, Path] = {}  # a trusted base's real path, taken once per process


def _real(base: Path) -> Path:
    """os.path.realpath of a trusted base (the project root, the home), remembered: an apply
    reaches thousands of files from the same one or two bases."""
    key = os.fspath(base)
    found = _REAL.get(key)
    if found is None:
        if len(_REAL) > 64:
            _REAL.clear()
        found = _REAL[key] = Path(os.path.realpath(base))
    return found


def _split(path: Path, base: Path | None) -> tuple[Path, list[str]]:
    """(the trusted base directory, the components below it)."""
    path = Path(os.path.abspath(path))
    if base is None:
        # The caller trusts everything above the file itself (its own state directory).
        return Path(os.path.realpath(path.parent)), [path.name]
    real_base = _real(base)
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


def write_atomic_with(path: Path, produce: Callable[[BinaryIO], T], mode: int | None = None, *,
                      base: Path | None = None) -> T:
    """`write_atomic` of what `produce(handle)` writes (streamed, for content too large to hold):
    the same temp file, fsync, rename and directory fsync; when `produce` raises, the temp file
    is removed and `path` is left as it was. Returns what `produce` returns."""
    path = Path(path)
    try:
        with open_parent(path, base) as dir_fd:
            name = path.name
            final = _final_mode(dir_fd, name, mode)
            tmp = f".{name}.agentstack-{os.urandom(6).hex()}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600, dir_fd=dir_fd)
            try:
                try:
                    with os.fdopen(fd, "wb", closefd=False) as handle:
                        result = produce(handle)
                    os.fchmod(fd, final)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)
                raise
            os.fsync(dir_fd)
            return result
    except OSError as exc:
        from agentstack.storage import storage_error

        raise storage_error(
            exc, path, f"writing {path} (left as it was: it is replaced whole or not at all)"
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


def syncfs(fd: int) -> None:
    """Flush every file and directory of the filesystem holding `fd` to the disk (Linux syncfs;
    os.sync elsewhere: all filesystems, a superset). One call gives each file written before it
    the durability an fsync of the file and of its directory would."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    call = getattr(libc, "syncfs", None)
    if call is None:
        os.sync()
        return
    if call(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


BATCH_DIRS = 256  # directories held open at once by write_batch


def write_batch(
    items: list[tuple[Path, bytes, int | None]], *, base: Path | None = None
) -> None:
    """write_atomic of every (path, data, mode), with the durability of write_atomic for each
    file but two filesystem syncs per BATCH_DIRS directories instead of two fsyncs per file: the
    temp files of a batch are written (O_EXCL|O_NOFOLLOW, each directory reached without
    following a link, as write_atomic does), the filesystem is synced (every temp's bytes are on
    the disk before any rename), each temp is renamed over its name, and the filesystem is synced
    again (every rename on the disk before this returns). A failure while writing the temps
    removes them all and renames nothing of that batch; the first failure in `items` order is
    raised."""
    by_dir: dict[Path, list[tuple[int, str, bytes, int | None]]] = {}
    for index, (path, data, mode) in enumerate(items):
        path = Path(path)
        by_dir.setdefault(Path(os.path.abspath(path)).parent, []).append(
            (index, path.name, data, mode)
        )
    groups = list(by_dir.items())
    for start in range(0, len(groups), BATCH_DIRS):
        _write_group(groups[start : start + BATCH_DIRS], base)


def _write_group(
    groups: list[tuple[Path, list[tuple[int, str, bytes, int | None]]]], base: Path | None
) -> None:
    stack = contextlib.ExitStack()
    temps: list[tuple[int, int, str, str]] = []  # (index, dir fd, temp name, final name)
    with stack:
        failure: tuple[int, BaseException] | None = None
        for directory, files in groups:
            try:
                dir_fd = stack.enter_context(open_parent(directory / files[0][1], base))
            except BaseException as exc:  # noqa: BLE001 - the first in order is raised below
                failure = min(failure or (files[0][0], exc), (files[0][0], exc), key=_first)
                continue
            for index, name, data, mode in files:
                if failure is not None and failure[0] < index:
                    continue
                try:
                    temps.append((index, dir_fd, _write_temp(dir_fd, name, data, mode), name))
                except BaseException as exc:  # noqa: BLE001
                    failure = min(failure or (index, exc), (index, exc), key=_first)
        if failure is not None:
            for _index, dir_fd, tmp, _name in temps:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)
            if isinstance(failure[1], OSError) and not isinstance(failure[1], LinkInPath):
                path = Path(str(failure[1].filename or "")) if failure[1].filename else None
                from agentstack.storage import storage_error

                raise storage_error(
                    failure[1], path or Path(groups[0][0]),
                    f"writing {len(temps) + 1} files under {groups[0][0]} (none replaced: each "
                    "is replaced whole or not at all)",
                ) from failure[1]
            raise failure[1]
        if not temps:
            return
        try:
            devices = {os.fstat(dir_fd).st_dev: dir_fd for _i, dir_fd, _t, _n in temps}
            for dir_fd in devices.values():
                syncfs(dir_fd)
            for _index, dir_fd, tmp, name in temps:
                os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            for dir_fd in devices.values():
                syncfs(dir_fd)
        except OSError as exc:
            for _index, dir_fd, tmp, _name in temps:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)
            from agentstack.storage import storage_error

            raise storage_error(
                exc, Path(groups[0][0]),
                f"making the files under {groups[0][0]} durable (the disk may not keep them)",
            ) from exc


def _first(item: tuple[int, BaseException]) -> int:
    return item[0]


def _write_temp(dir_fd: int, name: str, data: bytes, mode: int | None) -> str:
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
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    return tmp

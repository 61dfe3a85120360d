"""An unchanged re-lock without resolving anything (docs/lockfile.md, "The re-lock record").

A full `lock` resolves the manifest, walks every tree, scans the harness surface and renders the
lock to learn that nothing changed. After a lock, when it can be proved cheaply, a *record* is
written next to the project's stat cache: what the resolution depended on, as stat fingerprints
and directory listings. The next `lock` checks the record first; when every fingerprint and
listing is the same, the lock on disk is the lock a resolution would render, and `lock` says so
without importing the resolver. Anything that differs, or anything the record cannot vouch for,
falls through to the full resolution (which writes a fresh record).

What a record vouches for, and why that is enough:

- **Every directory of the project** (except inside `.git`) is listed after the resolution (and
  before the lock is written), and the listings are compared name for name: a file added, removed
  or renamed anywhere in the project is a difference. A directory whose times show a change since
  the racy window before the resolution began is not recorded (a name added and removed during the
  resolution leaves its listing equal); the root, where `lock` writes, must have the listing and
  times it had when the resolution began. `agentstack.lock` itself is left out of the root's
  listing (its bytes are compared instead).
- **Every other entry of the project** (files, links, anything else) has its `lstat` fingerprint
  `(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns, st_mode)` recorded, taken before its bytes
  were read (the walk's own stat) or after the resolution. The racy-timestamp rule holds for every
  one: a fingerprint whose `max(mtime, ctime)` is not older than `RACY_SLACK_NS` before the
  resolution began makes the record unwritable, so a same-size edit within one clock tick of a
  read can never pass as unchanged.
- **The lock's bytes** are hashed (BLAKE3) and compared, so a hand-edited lock is re-resolved.
- **Outside the project**: the project's real path (the record is named by it), the apply ledger
  the surface scan reads (its path, its fingerprint and the BLAKE3 of its bytes: a ledger an
  unchanged `apply --write` rewrote with the same bytes still matches), the installed
  agentstack code (a fingerprint of every file of its packages and the Python version), the
  lock limits (the totals must fit the limits in force) and, for a project in a plain directory, the home directory and every
  `.git` path above it the surface scan found absent (each must still be absent).
- **Not recorded at all** (the lock is always resolved): git skills (their pins and mirror); a
  manifest that names a `.git` path or uses `\\u` escapes; a pinned path inside a `.git`
  directory; a symbolic link in the project that leads outside it; a surface import of an
  absolute, `~` or `.git` path (`agentstack.surface.scan.outside_lookups`).

The record lives in the user's cache (`$AGENTSTACK_CACHE`), which the project cannot write; it is
used only when it is a regular file owned by the user and writable by nobody else. It serves
`lock` and the consent pipeline (`agentstack.consent.document.project_consent`: `status`, `digest`,
`show`, `run`), which writes the record `lock` would write when its full check finds the lock fresh,
and keeps the consent document beside it (`keep_consent`, `known_consent`); `lock --frozen` and the
other freshness checks resolve in full.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import time

from agentstack import layout
from agentstack.layout import read_own

TYPE_CHECKING = False
if TYPE_CHECKING:
    from agentstack.lock.treehash import Limits

MAGIC = "agentstack-relock-v3"
LOCK_NAME = "agentstack.lock"
_FIELDS = 6  # st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns, st_mode
_DIR_FIELDS = 5  # a quiet directory's st_dev, st_ino, st_mtime_ns, st_ctime_ns, st_mode
# treehash.RACY_SLACK_NS and Limits()'s (max_files, max_total_bytes, max_file_bytes), not
# imported for start-up cost (a test checks that they agree).
_RACY_SLACK_NS = 1_000_000_000
DEFAULT_LIMITS = (200_000, 4 << 30, 256 << 20)


def record_path(cache_dir: str, real_root: str) -> str:
    """`$AGENTSTACK_CACHE/statcache-v3/<project>.relock`, beside the project's stat cache."""
    import blake3

    name = blake3.blake3(os.fsencode(real_root)).hexdigest()[:32]
    return os.path.join(layout.stat_cache(cache_dir), name + ".relock")


def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # agentstack/ (lock/..)


def _package_dirs() -> list[str]:
    """agentstack/, each of its packages (the stages, sandbox/) and the adapters' package, found
    without importing it."""
    here = _package_root()
    dirs = [here]
    for name in sorted(os.listdir(here)):
        if os.path.isfile(os.path.join(here, name, "__init__.py")):
            dirs.append(os.path.join(here, name))
    adapters = sys.modules.get("agentstack_adapters")
    origin = getattr(adapters, "__file__", None)
    if origin is None:
        from importlib.util import find_spec

        spec = find_spec("agentstack_adapters")
        origin = spec.origin if spec is not None else None
    if origin is not None:
        dirs.append(os.path.dirname(os.path.abspath(origin)))
    return dirs


def _code_token(dirs: list[str]) -> str:
    """What code would resolve the lock: every file of agentstack's packages, by fingerprint."""
    import blake3

    parts = [sys.version]
    for directory in dirs:
        parts.append(directory)
        for name in sorted(os.listdir(directory)):
            if name == "__pycache__":
                continue
            st = os.lstat(os.path.join(directory, name))
            parts.append(f"{name}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}")
    return blake3.blake3("\n".join(parts).encode("utf-8", "surrogateescape")).hexdigest()


def _home() -> str:
    """The home directory as the surface scan's `checkout_above` takes it ("" when none)."""
    expanded = os.path.expanduser("~")
    return os.path.realpath(expanded) if os.path.isabs(expanded) else ""


def _still_absent(probes: str) -> bool:
    """The home directory is the recorded one, and no `.git` the scan found absent above the
    project (a plain directory: no checkout around it) exists now."""
    home, *paths = probes.split("\0")
    if home != _home():
        return False
    for path in paths:
        try:
            os.lstat(path)
        except FileNotFoundError:
            continue
        return False  # created since (or unreadable now): the scan may find a checkout
    return True


def _fingerprint(st: os.stat_result) -> tuple[int, int, int, int, int, int]:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode


def _ledger(real_root: str) -> tuple[str, str]:
    path = layout.apply_ledger(layout.home(), real_root)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path, "-"
    return path, ":".join(map(str, _fingerprint(st)))


def _ledger_digest(path: str) -> str | None:
    """BLAKE3 of the ledger's bytes, read as a regular file (never through a link); None when
    it is none."""
    import blake3

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        return str(blake3.blake3(handle.read()).hexdigest())


def _ledger_same(real_root: str, recorded_path: str, recorded: str) -> bool:
    """The apply ledger is the one the record was sealed with: the same fingerprint, or (an
    `apply --write` that changed nothing rewrites it) a regular file with the same bytes. The
    surface scan reads only its bytes, so equal bytes resolve alike."""
    path, now = _ledger(real_root)
    if path != recorded_path:
        return False
    fingerprint, _, digest = recorded.partition("/")
    if now == fingerprint:
        return True
    return now != "-" and bool(digest) and _ledger_digest(path) == digest


# ------------------------------------------------------------------------------ the fast check


def unchanged(real_root: str, limits: Limits | None) -> bool:
    """True when the record proves that `lock` would leave the lock at `real_root` as it is."""
    return proof(real_root, limits) is not None


def proof(real_root: str, limits: Limits | None) -> tuple[str, str] | None:
    """(BLAKE3 of the lock's bytes, the code's token) when the record proves that a resolution
    would render the lock at `real_root` as it is, else None."""
    try:
        return _proof(real_root, limits)
    except Exception:  # noqa: BLE001 - a damaged record (or anything odd) costs a full resolution
        return None


def _proof(real_root: str, limits: Limits | None) -> tuple[str, str] | None:
    import blake3

    try:  # first: no lock (a first lock), no record to read
        with open(os.path.join(real_root, LOCK_NAME), "rb") as handle:
            lock_bytes = handle.read()
    except OSError:
        return None
    data = read_own(record_path(layout.cache(), real_root))
    if data is None:
        return None
    header_end = data.index(b"\n\n")
    header = data[:header_end].decode("utf-8", "surrogateescape").split("\n")
    (
        magic,
        root,
        code_dirs,
        code,
        ledger_path,
        ledger_print,
        lock_digest,
        totals,
        sizes,
        probes,
    ) = header
    if magic != MAGIC or root != real_root:
        return None
    if probes != "-" and not _still_absent(probes):
        return None
    files_seen, bytes_seen, biggest = (int(v) for v in totals.split(" "))
    max_files, max_total, max_file = (
        DEFAULT_LIMITS
        if limits is None
        else (limits.max_files, limits.max_total_bytes, limits.max_file_bytes)
    )
    if files_seen > max_files or bytes_seen > max_total or biggest > max_file:
        return None
    if not _ledger_same(real_root, ledger_path, ledger_print):
        return None
    dirs = code_dirs.split("\0")
    if dirs[0] != _package_root() or code != _code_token(dirs):
        return None
    if blake3.blake3(lock_bytes).hexdigest() != lock_digest:
        return None
    n_dirs, n_files, block_len, n_quiet = (int(v) for v in sizes.split(" "))
    start = header_end + 2
    names = data[start : start + block_len].split(b"\0")
    if len(names) != 4 * n_dirs:
        return None
    packed = memoryview(data)[start + block_len :]
    if len(packed) != 8 * (_FIELDS * n_files + _DIR_FIELDS * n_quiet):
        return None
    ints = packed.cast("q").tolist()  # native int64s (no `array` import: start-up cost)
    expected = ints[: _FIELDS * n_files]
    quiet_prints = ints[_FIELDS * n_files :]
    quiet_seen: list[int] = []
    # Per directory: its listing, then one lstat (relative to the open directory) per entry that
    # is not a directory; the fingerprints are compared in one go at the end.
    seen: list[int] = []
    add = seen.extend
    listdir, lstat, open_, close = os.listdir, os.lstat, os.open, os.close
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    top = os.fsencode(real_root)
    from agentstack.progress import tick

    for index in range(n_dirs):
        tick(len(seen) // 6, n_files)
        directory = names[index]
        if names[3 * n_dirs + index]:
            # A quiet directory (no entry of it is pinned, on a surface or anything but a
            # directory or a regular file): its own stat proves its listing, as git's untracked
            # cache does; a name added, removed or renamed in it moves its mtime and ctime.
            st = lstat(directory)
            quiet_seen.extend((st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_mode))
            continue
        fd = open_(directory, flags)
        try:
            listing = listdir(fd)
            if directory == top:
                listing.remove(LOCK_NAME)
            if "/".join(listing).encode("utf-8", "surrogateescape") != names[n_dirs + index]:
                return None
            files = names[2 * n_dirs + index]
            if files:
                for name in files.split(b"/"):
                    st = lstat(name, dir_fd=fd)
                    add(
                        (
                            st.st_dev,
                            st.st_ino,
                            st.st_size,
                            st.st_mtime_ns,
                            st.st_ctime_ns,
                            st.st_mode,
                        )
                    )
        finally:
            close(fd)
    if seen != expected or quiet_seen != quiet_prints:
        return None
    return lock_digest, code


def rendered_here(real_root: str, lock_bytes: bytes) -> bool:
    """The record says `lock_bytes` are what a resolution by this very code rendered (its lock
    digest and code token): then each item's text in them is that item's rendering, and a re-lock
    can tell which items changed by their text, without parsing the old lock."""
    try:
        import blake3

        data = read_own(record_path(layout.cache(), real_root))
        if data is None:
            return False
        header = data[: data.index(b"\n\n")].decode("utf-8", "surrogateescape").split("\n")
        root, code_dirs, code, lock_digest = header[1], header[2], header[3], header[6]
        if header[0] != MAGIC or root != real_root:
            return False
        if blake3.blake3(lock_bytes).hexdigest() != lock_digest:
            return False
        dirs = code_dirs.split("\0")
        return dirs[0] == _package_root() and code == _code_token(dirs)
    except Exception:  # noqa: BLE001 - not vouched for: the old lock is parsed
        return False


# ----------------------------------------------------------------------------- writing a record


class Recorder:
    """Collects what one `lock` resolution depends on. Create it before the resolution begins,
    `seal` it after the resolution and before the lock is written, then `finish` it: the record
    is written, or a stale one removed."""

    def __init__(self, real_root: str) -> None:
        self.root = real_root
        self.started_ns = time.time_ns()
        self._root_before = _root_state(real_root)
        import agentstack.surface.scan as surface

        self._outside = surface.outside_lookups
        self._probes = len(surface.outside_probes)
        self._touched = len(surface.touched)
        self._sealed: tuple[list[str], bytes] | None = None

    def seal(
        self,
        *,
        manifest: bytes,
        lock_text: bytes,
        observed: list[tuple[str, os.stat_result]] | None,
        totals: tuple[int, int, int],
        git: bool,
        lock: dict[str, object] | None = None,
    ) -> None:
        """Take the project's listings and fingerprints now that the resolution is done (and
        before the lock is written into the root); nothing is recorded if any of them may have
        changed since the resolution began. `lock`: the resolved lock (the data of `lock_text`),
        whose pinned paths let the record prove the other directories by their own stat."""
        try:
            self._sealed = (
                None if git else self._seal(manifest, lock_text, observed or [], totals, lock)
            )
        except (OSError, ValueError, OverflowError):
            self._sealed = None

    def keep(self, lock_text: bytes) -> bool:
        """Write the record when it was sealed for `lock_text` (the lock on disk, which a freshness
        check found a resolution renders); unlike `finish`, remove nothing otherwise. Whether a
        record was written."""
        if self._sealed is None:
            return False
        self.finish(lock_text)
        return True

    def finish(self, lock_text: bytes | None) -> None:
        """Write the record when `lock_text` is now the lock on disk (None: it is not the sealed
        one); otherwise remove the project's record."""
        path = record_path(layout.cache(), self.root)
        if lock_text is None or self._sealed is None:
            with contextlib.suppress(OSError):
                os.unlink(path)
            return
        import blake3

        from agentstack.lock.treehash import write_private

        header, body = self._sealed
        header[6] = blake3.blake3(lock_text).hexdigest()
        data = "\n".join(header).encode("utf-8", "surrogateescape") + b"\n\n" + body
        with contextlib.suppress(OSError):  # an optimisation: never fail a lock on it
            write_private(path, data)

    def _seal(
        self,
        manifest: bytes,
        lock_text: bytes,
        observed: list[tuple[str, os.stat_result]],
        totals: tuple[int, int, int],
        lock: dict[str, object] | None = None,
    ) -> tuple[list[str], bytes] | None:
        import array

        import agentstack.surface.scan as surface

        if self.root == "/" or surface.outside_lookups != self._outside:
            return None
        found = surface.outside_probes[self._probes :]
        homes = {home for _, home in found}
        if len(homes) > 1 or (homes and homes != {_home()}):
            return None
        probes = (
            "\0".join([_home(), *dict.fromkeys(path for path, _ in found)]) if found else "-"
        )  # never empty: the header ends at its first empty line
        if not _plain_manifest(manifest) or _names_git(lock_text):
            return None
        grants = _names_grants(manifest)
        # What the lock's bytes depend on besides the listings: the paths it pins, the files the
        # surface scans matched or read (whose bytes decide what is on the surface), and, with
        # sandbox grants, whatever those name (then no directory is quiet).
        matters = None if lock is None or grants else _what_matters(self.root, lock)
        if matters is not None:
            matters.update(surface.touched[self._touched :])
            matters.update(path for path, _ in observed)
        limit = self.started_ns - _RACY_SLACK_NS
        # Directories: listed, then stat'ed. A directory whose entries changed since the racy
        # window before the resolution began is not vouched for (a name added and removed again
        # during the resolution would leave the listing equal); the root, where `lock` itself
        # writes, must instead be exactly as it was when the resolution began. Every other entry:
        # its fingerprint (the stat its digest was made from, when the walk read it), under the
        # racy-timestamp rule.
        known = dict(observed)
        lstat = os.lstat
        flat: list[int] = []
        add = flat.extend
        links: dict[str, str] = {}
        skip = len(self.root) + 1
        count = 0
        # (directory, listing, entries, their fingerprints, the directory's own when quiet)
        seen_dirs: list[tuple[str, str, list[str], list[int], tuple[int, ...] | None]] = []
        pending = [self.root]
        while pending:
            directory = pending.pop()
            names = os.listdir(directory)
            top = directory == self.root
            if top:
                if LOCK_NAME in names:
                    names.remove(LOCK_NAME)
                if (names, _dir_times(directory)) != self._root_before:
                    return None
                own = None
            else:
                own = lstat(directory)
                if own.st_mtime_ns >= limit or own.st_ctime_ns >= limit:
                    return None
            # Quiet: not the root, and every entry a directory (recorded itself) or a regular
            # file the lock does not depend on; its own stat then stands for its listing.
            quiet = own is not None and matters is not None and ".git" not in names
            files: list[str] = []
            prints: list[int] = []
            prefix = directory + "/"
            for name in names:
                if name == ".git":
                    continue  # never resolved into (see `_plain_manifest`, `_names_git`)
                path = prefix + name
                st = known.get(path)
                if st is None:
                    st = lstat(path)
                mode = st.st_mode
                if stat.S_ISDIR(mode):
                    pending.append(path)
                    continue
                if st.st_mtime_ns >= limit or st.st_ctime_ns >= limit:
                    return None  # racily clean: cannot be vouched for by its stat
                if stat.S_ISLNK(mode):
                    links[path[skip:]] = os.readlink(path)
                if quiet and (not stat.S_ISREG(mode) or path in matters):  # type: ignore[operator]
                    quiet = False
                prints.extend(
                    (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, mode)
                )
                files.append(name)
            fingerprint: tuple[int, ...] | None = None
            if quiet and own is not None:
                fingerprint = (
                    own.st_dev, own.st_ino, own.st_mtime_ns, own.st_ctime_ns, own.st_mode
                )  # fmt: skip
            seen_dirs.append((directory, "/".join(names), files, prints, fingerprint))
        # A link in the project lets a harness read a directory's files under another name than
        # the one the lock pins (`.claude -> config`): then no directory is quiet.
        dirs: list[tuple[str, str, list[str], bool]] = []
        quiet_prints: list[int] = []
        for directory, listing, files, prints, own_print in seen_dirs:
            if own_print is not None and not links:
                quiet_prints.extend(own_print)
                dirs.append((directory, listing, [], True))
                continue
            add(prints)
            dirs.append((directory, listing, files, False))
            count += len(files)
        ints = array.array("q", flat + quiet_prints)
        if links and not _links_stay_inside(links):
            return None
        ledger_path, ledger_print = _ledger(self.root)
        if ledger_print != "-":
            mtime, ctime, mode = (int(v) for v in ledger_print.split(":")[3:6])
            if max(mtime, ctime) >= limit or not stat.S_ISREG(mode):
                return None  # a link's target could change under an unchanged link
            digest = _ledger_digest(ledger_path)
            if digest is None or _ledger(self.root)[1] != ledger_print:
                return None  # replaced while it was read
            ledger_print += "/" + digest
        package_dirs = _package_dirs()
        block = "\0".join(
            [
                *(d for d, _, _, _ in dirs),
                *(listing for _, listing, _, _ in dirs),
                *("/".join(files) for _, _, files, _ in dirs),
                *("q" if quiet else "" for _, _, _, quiet in dirs),
            ]
        ).encode("utf-8", "surrogateescape")
        header = [
            MAGIC,
            self.root,
            "\0".join(package_dirs),
            _code_token(package_dirs),
            ledger_path,
            ledger_print,
            "",  # the lock's digest, when it is written (finish)
            " ".join(map(str, totals)),
            f"{len(dirs)} {count} {len(block)} {len(quiet_prints) // _DIR_FIELDS}",
            probes,
        ]
        if any("\n" in field for field in header):
            return None
        return header, block + ints.tobytes()


def _dir_times(directory: str) -> tuple[int, int]:
    st = os.lstat(directory)
    return st.st_mtime_ns, st.st_ctime_ns


def _root_state(root: str) -> tuple[list[str], tuple[int, int]] | None:
    """The root's listing (without the lock) and then its times, before the resolution."""
    try:
        names = os.listdir(root)
        times = _dir_times(root)
    except OSError:
        return None
    if LOCK_NAME in names:
        names.remove(LOCK_NAME)
    return names, times


def _plain_manifest(manifest: bytes) -> bool:
    """A manifest whose paths the record can vouch for: no key or string of it, as TOML reads
    it (escapes and line continuations resolved), has a `.git` path component (in any case:
    filesystems that fold case). What a `.git` path finds is not in the record's listings."""
    import tomllib

    try:
        data = tomllib.loads(manifest.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    stack: list[object] = [data]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str):
            parts = value.replace("\\", "/").split("/")
            if any(part.casefold() == ".git" for part in parts):
                return False
    return True


_GRANT_KEYS = frozenset({"read_dirs", "write_dirs", "read_files", "write_files"})


def _names_grants(manifest: bytes) -> bool:
    """The manifest grants a sandbox paths anywhere (what they name is checked by `lock`, outside
    the lock's bytes): then the record proves every directory by its listing and entries."""
    import tomllib

    stack: list[object] = [tomllib.loads(manifest.decode("utf-8"))]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if any(value.get(key) for key in _GRANT_KEYS):
                return True
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def _what_matters(real_root: str, lock: dict[str, object]) -> set[str]:
    """The absolute paths of every project file `lock` pins (skills' and servers' trees, single
    files, the surface)."""
    from agentstack.lock.gitmeta import pinned_paths

    prefix = real_root + "/"
    return {prefix + rel for rel in pinned_paths(lock).get(".", []) if not rel.startswith("../")}


def _names_git(lock_text: bytes) -> bool:
    """A pinned path with a `.git` component (only a surface or tree path can have one)."""
    return b".git" in lock_text and any(
        marker in lock_text for marker in (b'".git/', b"/.git/", b'/.git"', b'".git"')
    )


def _links_stay_inside(links: dict[str, str]) -> bool:
    """Every link in the project leads inside it (followed through the others as the kernel
    would), and neither through nor into a `.git` entry (not fingerprinted)."""
    from agentstack.lock.treehash import _resolve_link

    for rel, target in links.items():
        if ".git" in target.split("/"):
            return False
        try:
            parts = _resolve_link(rel, links)
        except Exception:  # noqa: BLE001 - a loop or anything odd: not recorded
            return False
        if parts is None or ".git" in parts:
            return False
    return True


# ------------------------------------------------------------------------ the kept consent entry
#
# `status`, `digest`, `show` and `run` need the consent document of a fresh lock. When the record
# proves the lock fresh, the document is a function of the manifest's bytes, the lock's bytes and
# agentstack's code alone (the view is validated from the manifest's bytes, the document built
# from the view and the lock), so it is kept beside the record, keyed by the BLAKE3 of exactly the
# bytes it was computed from and by the code's token, and used only when the record proves the lock
# fresh for that same code and those same lock bytes, and the manifest hashes to its key.

CONSENT_MAGIC = b"agentstack-consent-v1"
_CONSENT_LIMIT = 64 << 20


def consent_path(cache_dir: str, real_root: str) -> str:
    """`$AGENTSTACK_CACHE/statcache-v3/<project>.consent`, beside the project's record."""
    return record_path(cache_dir, real_root)[: -len(".relock")] + ".consent"


def known_consent(real_root: str) -> dict[str, object] | None:
    """The kept consent entry (`keep_consent`'s fields) when the record proves the lock at
    `real_root` fresh and the entry was computed from the manifest and lock bytes on disk now, by
    this code; None whenever anything is in doubt (the caller then computes in full)."""
    return consent_state(real_root)[1]


def consent_state(real_root: str) -> tuple[bool, dict[str, object] | None]:
    """(whether the record proves the lock fresh, the kept entry `known_consent` returns)."""
    try:
        proved = _proof(real_root, None)
    except Exception:  # noqa: BLE001 - a damaged record (or anything odd) proves nothing
        return False, None
    if proved is None:
        return False, None
    try:
        return True, _known_consent(real_root, proved)
    except Exception:  # noqa: BLE001 - a damaged entry (or anything odd) costs a full check
        return True, None


def _known_consent(real_root: str, proved: tuple[str, str]) -> dict[str, object] | None:
    import blake3

    data = read_own(consent_path(layout.cache(), real_root), limit=_CONSENT_LIMIT)
    if data is None:
        return None
    magic, check, text = data.split(b"\n", 2)
    if magic != CONSENT_MAGIC or check != blake3.blake3(text).hexdigest().encode():
        return None  # not an entry, or a damaged one
    import json

    entry = json.loads(text)
    if (
        not isinstance(entry, dict)
        or entry.get("root") != real_root
        or (entry.get("lock"), entry.get("code")) != proved
    ):
        return None
    manifest = _manifest_now(real_root)
    if manifest is None or blake3.blake3(manifest).hexdigest() != entry.get("manifest"):
        return None
    return entry


def _manifest_now(real_root: str) -> bytes | None:
    try:  # as `read_manifest` reads it: never blocking on a FIFO, a regular file only
        fd = os.open(os.path.join(real_root, "agentstack.toml"), os.O_RDONLY | os.O_NONBLOCK
                     | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        return handle.read()


def keep_consent(real_root: str, manifest: bytes, lock_text: bytes, fields: dict[str, object]) -> None:
    """Keep `fields` (the view's data and digest, the lock, the consent document and its digest),
    computed from exactly the manifest bytes `manifest` and the lock bytes `lock_text`, for
    `known_consent`. Only while a record exists (without one the entry is never used); never
    fails the caller."""
    cache = layout.cache()
    if not os.path.isfile(record_path(cache, real_root)):
        return
    try:
        import json

        import blake3

        from agentstack.lock.treehash import write_private

        entry = {
            **fields,
            "root": real_root,
            "code": _code_token(_package_dirs()),
            "lock": blake3.blake3(lock_text).hexdigest(),
            "manifest": blake3.blake3(manifest).hexdigest(),
        }
        text = json.dumps(entry, separators=(",", ":"), sort_keys=True).encode("utf-8")
        if json.loads(text) != entry:
            return  # not plain JSON data: not kept
        data = CONSENT_MAGIC + b"\n" + blake3.blake3(text).hexdigest().encode() + b"\n" + text
        path = consent_path(cache, real_root)
        if read_own(path, limit=_CONSENT_LIMIT) != data:
            write_private(path, data)
    except (OSError, ValueError, TypeError, RecursionError):
        return  # an optimisation: never fail a command on it


def enforceable(sandbox: object, root: str) -> bool:
    """`lock` would not refuse this sandbox table (agentstack.lock.command's
    `_refuse_unenforceable`): a record a freshness check writes vouches for no more than `lock`
    itself would."""
    if not getattr(sandbox, "enabled", False) or not any(
        getattr(sandbox, key) for key in ("read_dirs", "write_dirs", "read_files", "write_files")
    ):
        return True
    from pathlib import Path

    from agentstack.sandbox.resolve import lock_problems

    return not lock_problems(sandbox, Path(root))  # type: ignore[arg-type]


def report_unchanged(real_root: str, *, check: bool, as_json: bool) -> None:
    """What `lock` says when the record proved the lock unchanged (the same words as after a full
    resolution that found it so)."""
    from agentstack.output import echo, print_json

    if as_json:
        print_json({"lock": "fresh", "changed": []})
        return
    message = f"{LOCK_NAME} is up to date" if check else f"unchanged: {real_root}/{LOCK_NAME}"
    if message.isascii() and message.isprintable():  # what the sanitiser leaves as it is
        sys.stderr.write(message + "\n")
    else:
        echo(message)

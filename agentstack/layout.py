"""Where agentstack keeps its state: every file and directory under `$AGENTSTACK_HOME`, the cache
and a confined run's private directory, named once; and the one rule that finds a project.

Standard library only, and cheap: it imports `os` and nothing else, because the guard (run before
every tool call) reads its state through it. Paths are `str` here; `agentstack.paths` wraps them
in `pathlib.Path` for the rest of the library. Nothing outside this module spells a state file's
name (a test scans the package's string constants for them).

    $AGENTSTACK_HOME/                  (else $XDG_CONFIG_HOME/agentstack, else ~/.config/agentstack)
      trust.jsonl                      the hash-chained trust log (append-only)
      trust.head                       its head: record count, last hash, size
      trust.lock                       the writers' lock
      trust.jsonl.torn                 the bytes of a torn tail moved aside by the next writer
      consents/<digest>.json           what was reviewed, per consent digest (for later diffs)
      keys/<name>, keys/<name>.pub     signing keys (OpenSSH)
      allowed_signers                  the signers `receive` trusts
      secrets/<NAME>                   the secret store
      boundary.toml                    the user's boundary
      shims/<harness>                  the launchers `agentstack shims install` writes
      quarantine/<id>/                 received bundles, held; meta.json describes each
      backups/<time>-<id>/             what `release --force` moved aside
      projects/<id>/                   one directory per project (id: project_id(realpath))
        guard.json                     the guard's snapshot (written by trust / apply --write)
        apply.json                     the apply ledger: what agentstack rendered, by hash
        harness-state/                 the private harness state `agentstack run` grants
        mcp-pins/<server>.json         what each server listed (tools, prompts, resources) when
                                       first run trusted; <server>.pending.json: a changed
                                       listing the relay withheld, for `trust` to review
        receipts.jsonl                 one line per tool call and proxied request (no bodies)
        backups/<time>/<path>          what `apply --write` replaced (0600)
    $AGENTSTACK_CACHE/                 (else $XDG_CACHE_HOME/agentstack, else ~/.cache/agentstack)
      git/<url-hash>.git               bare mirrors of locked git sources
      content/<digest>                 the content store (locked bytes by digest)
      statcache-v3/<project>.json      the lock's stat cache (and `.relock`, its re-lock record;
                                       `.consent`, the consent document kept beside it)
      crash/crash-<time>-<pid>.txt     crash reports
    <temp dir>/agentstack-run-*/       one confined run's private directory (removed on exit)
      ro/                              read-only copies of what the guard reads
                                       (guard.json, trust.head, trust.jsonl); named by
                                       $AGENTSTACK_RUN_RO
"""

from __future__ import annotations

import os
import stat

# Variables that locate state. Read by the CLI only: the guard takes its state directory from
# its rendered command line, never from the environment (the project can set the environment).
HOME_ENV = "AGENTSTACK_HOME"
CACHE_ENV = "AGENTSTACK_CACHE"
RUN_RO_ENV = "AGENTSTACK_RUN_RO"

# The project's own files (at its root).
MANIFEST = "agentstack.toml"
LOCK = "agentstack.lock"

# Under $AGENTSTACK_HOME.
TRUST_LOG = "trust.jsonl"
TRUST_HEAD = "trust.head"
TRUST_LOCK = "trust.lock"
TRUST_TORN = "trust.jsonl.torn"
CONSENTS = "consents"
KEYS = "keys"
ALLOWED_SIGNERS = "allowed_signers"
SECRETS = "secrets"
BOUNDARY = "boundary.toml"
SHIMS = "shims"
QUARANTINE = "quarantine"
QUARANTINE_META = "meta.json"
PROJECTS = "projects"

# Under $AGENTSTACK_HOME/projects/<id>/.
GUARD_SNAPSHOT = "guard.json"
APPLY_LEDGER = "apply.json"
HARNESS_STATE = "harness-state"
BACKUPS = "backups"
SECCOMP_PROGRAMS = "seccomp-programs"
MCP_PINS = "mcp-pins"
PIN_SUFFIX = ".json"
PENDING_SUFFIX = ".pending.json"
RECEIPTS = "receipts.jsonl"
RUN_PINS = "mcp-pins.json"  # in a confined run's ro/: every server's pin and tool policy

# Under the cache.
GIT_MIRRORS = "git"
CONTENT_STORE = "content"
STAT_CACHE = "statcache-v3"
CRASH_REPORTS = "crash"
TRACKED = "tracked"
MANIFEST_CACHE = "manifests"  # the manifest cache (agentstack.manifest.load)

# A confined run's private directory (in the system's temp directory) and its read-only copies.
RUN_DIR_PREFIX = "agentstack-run-"
RUN_READONLY = "ro"
RUN_READONLY_FILES = (GUARD_SNAPSHOT, TRUST_HEAD, TRUST_LOG, RUN_PINS)

# Names a test keeps out of every other module of the package (the distinctive ones anywhere; the
# generic directory names, which are also ordinary words and keys, wherever they are joined into
# a path).
STATE_FILES = (
    TRUST_LOG, TRUST_HEAD, TRUST_LOCK, TRUST_TORN, ALLOWED_SIGNERS, BOUNDARY, GUARD_SNAPSHOT,
    APPLY_LEDGER, HARNESS_STATE, STAT_CACHE, RUN_DIR_PREFIX, SECCOMP_PROGRAMS, MCP_PINS,
    RECEIPTS, RUN_PINS,
)
STATE_DIRS = (
    CONSENTS, KEYS, SECRETS, SHIMS, QUARANTINE, QUARANTINE_META, PROJECTS, GIT_MIRRORS,
    CONTENT_STORE, CRASH_REPORTS, RUN_READONLY, BACKUPS, TRACKED,
)


def _load_sha256() -> object:
    for name in ("_sha256", "_sha2"):  # CPython's builtin module (renamed in 3.12): no OpenSSL
        try:
            return __import__(name).sha256
        except (ImportError, AttributeError):
            continue
    from hashlib import sha256

    return sha256


_sha256: object = _load_sha256()


# ------------------------------------------------------------------------------- the two roots


def home() -> str:
    """$AGENTSTACK_HOME, else $XDG_CONFIG_HOME/agentstack, else ~/.config/agentstack. For the CLI:
    the guard's decision never reads it (the rendered hook names its state directory)."""
    explicit = os.environ.get(HOME_ENV)
    if explicit:
        return os.path.expanduser(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "agentstack")


def cache() -> str:
    """$AGENTSTACK_CACHE, else $XDG_CACHE_HOME/agentstack, else ~/.cache/agentstack."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return os.path.expanduser(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "agentstack")


# --------------------------------------------------------------------------- under the home


def trust_log(state_home: str) -> str:
    return os.path.join(state_home, TRUST_LOG)


def trust_head(state_home: str) -> str:
    return os.path.join(state_home, TRUST_HEAD)


def consent_file(state_home: str, digest: str) -> str:
    """Where the consent document of `digest` ("blake3:<hex>") is kept (the caller checks it is a
    digest: it becomes a file name)."""
    return os.path.join(state_home, CONSENTS, digest.replace(":", "-") + ".json")


def keys_dir(state_home: str) -> str:
    return os.path.join(state_home, KEYS)


def allowed_signers(state_home: str) -> str:
    return os.path.join(state_home, ALLOWED_SIGNERS)


def secrets_dir(state_home: str) -> str:
    return os.path.join(state_home, SECRETS)


def boundary_file(state_home: str) -> str:
    return os.path.join(state_home, BOUNDARY)


def shims_dir(state_home: str) -> str:
    return os.path.join(state_home, SHIMS)


def quarantine_dir(state_home: str) -> str:
    return os.path.join(state_home, QUARANTINE)


def seccomp_programs(state_home: str) -> str:
    return os.path.join(state_home, SECCOMP_PROGRAMS)


def project_id(root: str) -> str:
    """A stable directory name for a project's state: the sha256 of its realpath, 32 hex."""
    digest = _sha256(os.fsencode(os.path.realpath(root)))  # type: ignore[operator]
    return str(digest.hexdigest())[:32]


def project_dir(state_home: str, root: str) -> str:
    return os.path.join(state_home, PROJECTS, project_id(root))


def guard_snapshot(state_home: str, root: str) -> str:
    return os.path.join(project_dir(state_home, root), GUARD_SNAPSHOT)


def apply_ledger(state_home: str, root: str) -> str:
    return os.path.join(project_dir(state_home, root), APPLY_LEDGER)


def pins_dir(state_home: str, root: str) -> str:
    return os.path.join(project_dir(state_home, root), MCP_PINS)


def pin_file(state_home: str, root: str, server: str, *, pending: bool = False) -> str:
    return os.path.join(pins_dir(state_home, root), server + (PENDING_SUFFIX if pending else PIN_SUFFIX))


def box_file(state_home: str, root: str, server: str) -> str:
    """The relay's cached confinement of one server (agentstack.serverbox)."""
    return os.path.join(pins_dir(state_home, root), server + ".box")


def receipts_file(state_home: str, root: str) -> str:
    return os.path.join(project_dir(state_home, root), RECEIPTS)


def harness_state(state_home: str, root: str) -> str:
    return os.path.join(project_dir(state_home, root), HARNESS_STATE)


# -------------------------------------------------------------------------- under the cache


def git_mirrors(cache_dir: str) -> str:
    return os.path.join(cache_dir, GIT_MIRRORS)


def content_store(cache_dir: str) -> str:
    return os.path.join(cache_dir, CONTENT_STORE)


def stat_cache(cache_dir: str) -> str:
    return os.path.join(cache_dir, STAT_CACHE)


def crash_dir(cache_dir: str) -> str:
    return os.path.join(cache_dir, CRASH_REPORTS)


def tracked_cache(cache_dir: str, root: str) -> str:
    return os.path.join(cache_dir, TRACKED, project_id(root) + ".json")


# --------------------------------------------------------------------------- finding a project


def find_project(start: str, explicit: str | None = None) -> str | None:
    """The one rule that decides which project a command is about (None: there is none).

    * `explicit` (`--project DIR`): that directory exactly, resolved; it is the project only when
      it holds agentstack.toml (no upward search from it: an explicit choice is never widened);
    * otherwise the nearest directory at or above `start` (resolved: links and `..` first) that
      holds agentstack.toml as a file, up to and including `/`. The search does not stop at $HOME
      or at a mount point: a project is where its manifest is.

    The guard's user-level check (`_guard.enclosing_project`) is deliberately wider: a directory
    with a snapshot on this machine encloses too, and an error counts as a project."""
    if explicit is not None:
        root = os.path.realpath(explicit)
        return root if os.path.isfile(os.path.join(root, MANIFEST)) else None
    here = os.path.realpath(start)
    while True:
        if os.path.isfile(os.path.join(here, MANIFEST)):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


# --------------------------------------------------------------------------- reading our own state


def read_own(path: str, limit: int | None = None) -> bytes | None:
    """The file's bytes when it is a regular file owned by this user and writable by nobody else
    (opened without following a link, never blocking), and no larger than `limit`: how
    agentstack reads its own caches (this record, the manifest cache, `status`'s git answer)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (
            not stat.S_ISREG(st.st_mode)
            or st.st_uid != os.geteuid()
            or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
            or (limit is not None and st.st_size > limit)
        ):
            return None
        chunks = []
        while chunk := os.read(fd, max(st.st_size + 1, 1 << 16)):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)

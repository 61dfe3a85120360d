"""The guard: `python -I -m agentstack._guard --harness H --state S (--project R | --user-level)
[--event E]`, run by the harness before every tool call (E = PreToolUse) and before every prompt
is sent (E = UserPromptSubmit).

Every harness fails OPEN when a hook crashes, times out or prints garbage, so this module never
does: any error, any doubt, becomes an explicit deny in the calling harness's protocol (JSON on
stdout, the reason on stderr, exit 2 — the code every harness treats as blocking). It answers well
inside the rendered timeout (an alarm denies at ALARM_S).

It takes nothing from the project. Its configuration is fixed in the rendered command: S is the
state directory (AGENTSTACK_HOME when `apply` rendered it) and R the project it was rendered for.
No environment variable is read to decide anything: harnesses hand the `env` of project settings
to hooks, so every variable is the project's to set. (One exception, verified before use: under
`agentstack run` the real state is closed to the harness, and `run` names a read-only copy in
AGENTSTACK_RUN_RO; see `_run_copies`.)

What it checks, against the snapshot that `trust` / `apply --write` wrote to
S/projects/<id>/guard.json (never inside the project):
1. trust still holds: the trust log head is unchanged since the snapshot, or the log (re-verified)
   still trusts the digest; CI trust (an explicit digest) was recorded at `apply` time, and a
   revocation in the log wins over it;
2. nothing fingerprinted changed: the manifest (by meaning), the lock, and every rendered, pinned
   or watched file (stat first; bytes re-hashed only when the stat changed or is racily clean;
   a missing file proved missing by the stat of the directory above it), and no surface name in a
   directory created since; what had to be re-proved is recorded once settled (`refresh_snapshot`),
   so the next call needs stats only;
3. on a tool call, the call itself, parsed exactly and totally (`check_call`): an MCP tool must
   resolve to exactly one locked server; file tools respect the sandbox paths and never write the
   harness's configuration or git's execution files; web tools go only to allowed hosts; a tool it
   does not know that names a path, a URL or a server is denied; every malformed shape is denied.
A hook rendered for a project denies when the project's snapshot is missing. Only the user-level
guard (`--user-level`, kept by Codex so a revoked project stays blocked) allows, and only where no
agentstack project encloses the directory; there, a tool of a server of the user-level setup
($AGENTSTACK_HOME/agentstack.toml) is decided by that setup's own snapshot (`_guard_more`), as it
is in a project where no project server of that name shadows it.

Standard library only on this path (an import-hygiene test enforces it); a trusted, unchanged call
takes about as long as `python -I -c pass` (benchmarks/guard.py).
"""

import os
import stat as _stat  # loaded by `os` already
import sys
import time

# Every import is paid on every tool call, so the trusted-and-unchanged path imports nothing that
# `python -I -c pass` does not, beyond CPython's builtin `_signal` and the `_json` and `_sha256`
# accelerators: no `json` package (its decoder and encoder load `re`, and `re` loads `enum`), no
# `signal` (it builds enums), no `re`, `tomllib`, `typing` or `pathlib` (each is imported where a
# slower path needs it), and the hook runs `-c` rather than `-m` (which loads `runpy`). An
# import-hygiene test pins this.
# Annotations are evaluated (no `from __future__ import annotations`: one import more), so the
# typing names are plain `object` at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn
else:
    Any = NoReturn = object


def _load_sha256() -> Any:
    for name in ("_sha256", "_sha2"):  # CPython's builtin module (renamed in 3.12)
        try:
            return __import__(name).sha256
        except (ImportError, AttributeError):
            continue
    from hashlib import sha256

    return sha256


_sha256 = _load_sha256()

SNAPSHOT_VERSION = 1
MAX_INPUT = 8 * 1024 * 1024
ALARM_S = 5
RACY_SLACK_NS = 1_000_000_000
BLOCK_BEGIN = "<!-- agentstack:begin (managed by agentstack; edit agentstack.toml instead) -->"
BLOCK_END = "<!-- agentstack:end -->"
PRE_TOOL = "PreToolUse"
PRE_PROMPT = "UserPromptSubmit"
EVENTS = (PRE_TOOL, PRE_PROMPT)
HARNESSES = ("claude-code", "codex", "gemini-cli", "opencode", "copilot", "cursor", "vscode")
FIX_RENDERED = (
    "'agentstack apply' shows the difference and 'agentstack apply --write --force' restores "
    "what agentstack rendered; a server or hook added next to them must be removed, or declared "
    "in agentstack.toml"
)
FIX_DRIFT = (
    "run 'agentstack status' to see what changed, then 'agentstack lock', "
    "'agentstack trust' and 'agentstack apply --write'"
)


class Deny(Exception):
    """A decision to block, with the reason shown to the model and the user."""


_MORE: Any = None


def _more() -> Any:
    """agentstack._guard_more: the slower paths, loaded only when a call needs one."""
    global _MORE
    if _MORE is None:
        from agentstack import _guard_more

        _MORE = _guard_more
    return _MORE


def __getattr__(name: str) -> Any:
    """The names of the slower paths, re-exported (`_guard.check_url`, `_guard.fingerprint` ...)."""
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return getattr(_more(), name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


# ------------------------------------------------------------------------------------ JSON


class _Decoder:
    """What `_json.make_scanner` reads from a decoder: json.loads's defaults, exactly."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {
        "-Infinity": float("-inf"),
        "Infinity": float("inf"),
        "NaN": float("nan"),
    }.__getitem__


_scan: Any = None


def loads(text: str) -> Any:
    """json.loads(text) for a str, through the same C scanner, without importing `json` (whose
    decoder compiles regular expressions): same values, same errors (ValueError)."""
    global _scan
    if _scan is None:
        try:
            from _json import make_scanner

            _scan = make_scanner(_Decoder)  # type: ignore[arg-type]
        except ImportError:  # an interpreter without the accelerator
            import json

            return json.loads(text)
    if text.startswith("\ufeff"):
        raise ValueError("Unexpected UTF-8 BOM (decode using utf-8-sig)")
    start = len(text) - len(text.lstrip(" \t\n\r"))
    try:
        value, end = _scan(text, start)
    except StopIteration:
        raise ValueError(f"Expecting value at {start}") from None
    except SystemError:
        # The scanner builds its error from json.decoder, found only when already imported:
        # malformed JSON, then, is left to json.loads, which raises what it always raises.
        import json

        return json.loads(text)
    if text[end:].strip(" \t\n\r"):
        raise ValueError(f"Extra data at {end}")
    return value


def _not_serializable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps(
    value: Any,
    *,
    sort_keys: bool = False,
    separators: tuple[str, str] = (", ", ": "),
    ensure_ascii: bool = True,
    default: Any = None,
) -> str:
    """json.dumps(value, ...) without an indent, through the same C encoder json.dumps uses,
    without importing `json`: the same text."""
    try:
        from _json import encode_basestring, encode_basestring_ascii, make_encoder
    except ImportError:
        import json

        return json.dumps(
            value,
            sort_keys=sort_keys,
            separators=separators,
            ensure_ascii=ensure_ascii,
            default=default,
        )
    encode = make_encoder(
        {},
        default or _not_serializable,
        encode_basestring_ascii if ensure_ascii else encode_basestring,
        None,
        separators[1],
        separators[0],
        sort_keys,
        False,
        True,
    )
    return "".join(encode(value, 0))


# ------------------------------------------------------------------------------- protocol


def deny_body(harness: str, reason: str, event: str = PRE_TOOL) -> dict[str, Any]:
    if event == PRE_PROMPT:
        # The one shape that blocks a prompt everywhere it was measured (with exit 2 and the
        # reason on stderr): Codex, Gemini and Copilot read the JSON, Claude Code the exit code.
        return {"decision": "block", "reason": reason}
    if harness in ("claude-code", "codex", "vscode"):
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }
        }
    if harness in ("gemini-cli", "opencode"):
        return {"decision": "deny", "reason": reason}
    if harness == "copilot":
        return {"permissionDecision": "deny", "permissionDecisionReason": reason}
    if harness == "cursor":
        return {"permission": "deny", "user_message": reason, "agent_message": reason}
    # unknown harness: every known deny shape at once, and the blocking exit code
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        },
        "decision": "deny",
        "reason": reason,
        "permissionDecision": "deny",
        "permissionDecisionReason": reason,
        "permission": "deny",
        "user_message": reason,
        "agent_message": reason,
    }


def emit_deny(harness: str, reason: str, event: str = PRE_TOOL) -> NoReturn:
    reason = "agentstack guard: " + reason
    data = (dumps(deny_body(harness, reason, event)) + "\n").encode()
    try:
        os.write(1, data)
        os.write(2, (reason + "\n").encode("utf-8", "replace"))
    finally:
        os._exit(2)


def emit_allow() -> NoReturn:
    os._exit(0)


# ---------------------------------------------------------------------------- fingerprints


def _sha(data: bytes) -> str:
    return str(_sha256(data).hexdigest())


def stat_key(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _racy(key: list[int], hashed_ns: int, mark: list[int] | None = None) -> bool:
    """The stat key's timestamps are too close to when it was taken to prove anything: a change in
    the same timestamp tick would leave them as they are. Settled (not racy) when both are more
    than RACY_SLACK_NS older than `hashed_ns`, or older than the snapshot's `mark` (see _mark_of)
    on the mark's filesystem."""
    newest = key[3] if key[3] > key[4] else key[4]
    if newest < hashed_ns - RACY_SLACK_NS:
        return False
    return mark is None or key[0] != mark[0] or newest >= mark[1]


def _mark_of(snapshot: dict[str, Any]) -> list[int] | None:
    """The snapshot's settling mark, [st_dev, timestamp_ns]: a timestamp the filesystem `st_dev`
    gave (to a probe file `agentstack` wrote there) after the files were written and before any
    stat key in the snapshot was taken. Any change made after a stat key was taken gets a
    timestamp at least as late as the mark, so a key on that filesystem whose mtime and ctime
    are both earlier than the mark proves its file unchanged. None when absent or malformed."""
    mark = snapshot.get("mark")
    if (
        type(mark) is list
        and len(mark) == 2
        and type(mark[0]) is int
        and type(mark[1]) is int
        and mark[1] > 0
    ):
        return mark
    return None


def drifted(path: str, entry: dict[str, Any], mark: list[int] | None = None) -> bool:
    """`path` is no longer what `entry` trusted; `mark`: its snapshot's settling mark (_mark_of),
    which lets a stat key taken within the racy slack prove its file unchanged, as in the guard."""
    return recheck(path, entry, time.time_ns(), None, mark) is None


def recheck(
    path: str,
    entry: dict[str, Any],
    started: int,
    files: dict[str, Any] | None,
    mark: list[int] | None = None,
) -> dict[str, Any] | None:
    """None when `path` is no longer what was trusted; else the snapshot entries to record for it
    ({} when the stat alone proved it unchanged). `files`: the whole snapshot, to judge
    directories created since it was taken (None: not judged); `mark`: its settling mark."""
    try:
        st: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        key = stat_key(st)
        if entry.get("stat") == key and not _racy(key, int(entry["hashed_ns"]), mark):
            return {}  # same stat, not racy: unchanged without reading a byte
    try:
        if _more().content_hash(path, entry) != entry.get("hash"):
            return None
        found: dict[str, Any] = {}
        if (
            entry["kind"] == "listing"
            and entry.get("names") is not None
            and files is not None
            and st is not None
            and _stat.S_ISDIR(st.st_mode)
        ):
            new = _more()._new_directories(path, entry["names"], files, started)
            if new is None:
                return None
            found = new
    except (OSError, ValueError):
        return None  # unreadable or unparseable now: not what was trusted
    fresh = {k: v for k, v in entry.items() if k != "anchor"}
    fresh["hashed_ns"] = started
    if st is None:
        anchor = _more()._anchor_of(path)
        if os.path.lexists(path):
            return {}  # it appeared meanwhile: the next call judges it
        fresh["stat"] = None
        if anchor is not None:
            fresh["anchor"] = anchor
    else:
        fresh["stat"] = stat_key(st)
    found[path] = fresh
    return found


def _settled(entry: dict[str, Any], mark: list[int] | None = None) -> bool:
    """The entry proves its file unchanged from its stat alone (no longer racy); `mark`: the
    snapshot's settling mark (_mark_of)."""
    key = entry.get("stat") or (entry.get("anchor") or [None, None])[1]
    return key is not None and not _racy(key, int(entry["hashed_ns"]), mark)


# ------------------------------------------------------------------------------- where state is


def home() -> str:
    """The default state directory, for the CLI (never read by the guard on its decision path:
    the rendered hook names its state directory as an argument)."""
    explicit = os.environ.get("AGENTSTACK_HOME")
    if explicit:
        return os.path.expanduser(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "agentstack")


def project_id(root: str) -> str:
    return _sha(os.fsencode(os.path.realpath(root)))[:32]


def snapshot_path(state_home: str, root: str) -> str:
    return os.path.join(state_home, "projects", project_id(root), "guard.json")


def enclosing_project(directory: str, state_home: str) -> str | None:
    """The nearest ancestor of `directory` that is an agentstack project (it holds a manifest, or
    this machine holds a snapshot for it), for the user-level guard."""
    here = os.path.realpath(directory)
    while True:
        try:
            if os.path.lexists(snapshot_path(state_home, here)) or os.path.lexists(
                os.path.join(here, "agentstack.toml")
            ):
                return here
        except (OSError, ValueError):
            return here  # cannot tell: treat it as a project (its checks will deny)
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _read_snapshot_bytes(path: str, stat_out: list[list[int]] | None = None) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if stat_out is not None:
            stat_out.append(stat_key(os.fstat(fd)))
        chunks = []
        size = 0
        while size <= 16 * 1024 * 1024:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def parse_snapshot(data: bytes, path: str) -> dict[str, Any]:
    try:
        snapshot = loads(data.decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError included
        raise Deny(
            f"the guard snapshot {path} is unreadable ({exc}); run 'agentstack apply --write' "
            "to write it again"
        ) from None
    if not isinstance(snapshot, dict) or snapshot.get("v") != SNAPSHOT_VERSION:
        raise Deny(
            f"the guard snapshot {path} has an unknown format; run 'agentstack apply "
            "--write' to write it again"
        )
    return snapshot


def load_snapshot(path: str) -> dict[str, Any]:
    """The snapshot at `path`, for tools and tests (the guard itself goes through load_state)."""
    try:
        return parse_snapshot(_read_snapshot_bytes(path), path)
    except FileNotFoundError:
        raise Deny(NOT_TRUSTED) from None


NOT_TRUSTED = (
    "this project has not been trusted on this machine; run 'agentstack trust' "
    "and 'agentstack apply --write'"
)


def load_state(state_home: str, root: str) -> tuple[dict[str, Any], str]:
    """(snapshot, the directory holding the trust log to check it against)."""
    snapshot, trust_home, _ = _load_state(state_home, root)
    return snapshot, trust_home


def _load_state(
    state_home: str, root: str
) -> tuple[dict[str, Any], str, tuple[str, list[int]] | None]:
    """load_state, and (the snapshot's path, its stat when read) when the guard may refresh it
    there: not for the read-only copies under `agentstack run`."""
    path = snapshot_path(state_home, root)
    try:
        read: list[list[int]] = []
        snapshot = parse_snapshot(_read_snapshot_bytes(path, read), path)
        return snapshot, state_home, (path, read[0])
    except FileNotFoundError:
        raise Deny(NOT_TRUSTED) from None
    except PermissionError:
        # Closed to this process: under `agentstack run`, $AGENTSTACK_HOME is outside the sandbox.
        copies = _run_copies()
        path = os.path.join(copies, "guard.json")
        try:
            return parse_snapshot(_read_snapshot_bytes(path), path), copies, None
        except OSError as exc:
            raise Deny(f"the read-only copy of the guard snapshot is unreadable ({exc})") from None
    except OSError as exc:
        raise Deny(
            f"the guard snapshot {path} is unreadable ({exc}); run 'agentstack apply --write' "
            "to write it again"
        ) from None


def _run_copies() -> str:
    """The read-only copies `agentstack run` made of the guard's state, proved to be run's own.

    The variable that names them is only a pointer (the project could set it): the directory is
    accepted only as `<sticky temp dir>/agentstack-run-*/ro`, with `agentstack-run-*` owned by this
    user, mode 0700, and yet refusing to let this process create a file in it. Permission bits
    allow that create; only the kernel sandbox `run` applied refuses it. Everything a process in
    `run` can write is granted read-write (the create would succeed), a git checkout carries no
    sticky bit, and nothing under `run` can create a directory beside its own run directory."""
    pointer = os.environ.get("AGENTSTACK_RUN_RO", "")
    refusal = (
        "the guard's state directory is closed to this process, and no read-only copy made by "
        "'agentstack run' was found"
    )
    if not pointer or not os.path.isabs(pointer) or "\0" in pointer:
        raise Deny(refusal)
    ro = os.path.normpath(pointer)
    run_dir, leaf = os.path.split(ro)
    temp_dir, run_name = os.path.split(run_dir)
    if os.path.realpath(ro) != ro or leaf != "ro" or not run_name.startswith("agentstack-run-"):
        raise Deny(refusal + f" ({pointer!r} is not one)")
    try:
        parent = os.lstat(temp_dir)
        run = os.lstat(run_dir)
        copies = os.lstat(ro)
    except OSError:
        raise Deny(refusal) from None
    uid = os.geteuid()
    if not (
        _stat.S_ISDIR(parent.st_mode)
        and parent.st_mode & _stat.S_ISVTX
        and _stat.S_ISDIR(run.st_mode)
        and run.st_uid == uid
        and _stat.S_IMODE(run.st_mode) == 0o700
        and _stat.S_ISDIR(copies.st_mode)
        and copies.st_uid == uid
    ):
        raise Deny(refusal + f" ({pointer!r} is not one)")
    probe = os.path.join(run_dir, f".agentstack-guard-probe-{os.getpid()}")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except PermissionError:
        return ro  # the kernel holds it: this is the directory `run` confined us around
    except OSError:
        raise Deny(refusal) from None
    os.close(fd)
    os.unlink(probe)
    raise Deny(refusal + f" ({pointer!r} is writable here, so not one)")


# ---------------------------------------------------------------------------------- trust


def check_trust(snapshot: dict[str, Any], state_home: str) -> list[Any] | None:
    """Deny unless trust holds. Returns the log's head when it had moved on and was re-verified
    (read before the verification, so it is never newer than what was verified), for the guard
    to record: the next call then needs no verification. None when nothing is to be recorded."""
    digest = snapshot["digest"]
    source = snapshot.get("trust_source")
    if source not in ("log", "explicit") or not isinstance(digest, str):
        raise Deny("the guard snapshot records no trust; run 'agentstack trust'")
    current = _log_head(state_home)
    if current is not None and snapshot.get("trust_head") == current:
        # The log trusted this digest (or, for CI trust recorded at apply time, held no revocation
        # of it) and nothing was appended since.
        return None
    # The log moved on: read it, verified. A revocation recorded there wins, even over CI trust
    # recorded at apply time. (blake3 is loaded only on this path.)
    from pathlib import Path

    from agentstack.trustlog import TrustLog

    log = TrustLog(Path(state_home))
    explicit = source == "explicit"
    if explicit and not os.path.lexists(log.path):
        return None
    try:
        state = log.state_for(snapshot["project"], digest)
    except Exception as exc:  # noqa: BLE001 - a log that does not verify trusts nothing
        raise Deny(
            f"the trust log does not verify ({exc}); inspect it with "
            "'agentstack trust log --verify'"
        ) from None
    if state == "revoked":
        raise Deny(f"trust in {digest} was revoked; run 'agentstack trust' to review again")
    if state != "trusted" and not explicit:
        raise Deny(f"{digest} is not trusted for {snapshot['project']}; run 'agentstack trust'")
    return current


def _log_head(state_home: str) -> list[Any] | None:
    """[count, head, size of the log] as the snapshot records them; None when unreadable."""
    try:
        with open(os.path.join(state_home, "trust.head"), "rb") as handle:
            head = loads(handle.read(4096).decode("utf-8"))
        size = os.stat(os.path.join(state_home, "trust.jsonl")).st_size
    except (OSError, ValueError):
        return None
    if not isinstance(head, dict):
        return None
    return [head.get("count"), head.get("head"), size]


def check_files(snapshot: dict[str, Any], refreshed: dict[str, Any] | None = None) -> None:
    """Deny when a fingerprinted file, or a directory's surface, is not what was trusted.
    `refreshed` receives the entries whose stat had to be re-proved by their content (and the
    directories created since), for the guard to record once they are no longer racy."""
    files = snapshot["files"]
    started = time.time_ns()
    anchors: dict[str, os.stat_result | None] = {}
    changed = []
    lstat = os.lstat
    mark = _mark_of(snapshot)
    mark_dev, mark_ns = mark if mark is not None else (-1, -1)
    for path, entry in files.items():
        key = entry.get("stat")
        if key is not None:  # the steady case, inline: the same stat, not racy (_racy)
            try:
                now = lstat(path)
            except OSError:
                pass  # judged below
            else:
                if (
                    now.st_mtime_ns == key[3]
                    and now.st_ctime_ns == key[4]
                    and now.st_ino == key[1]
                    and now.st_size == key[2]
                    and now.st_dev == key[0]
                ):
                    newest = key[3] if key[3] > key[4] else key[4]
                    if newest < int(entry["hashed_ns"]) - RACY_SLACK_NS or (
                        newest < mark_ns and key[0] == mark_dev
                    ):
                        continue
        anchor = entry.get("anchor")
        if anchor is not None and key is None:
            # Absent at the snapshot: still absent while the directory above it is unchanged.
            if anchor[0] not in anchors:
                try:
                    anchors[anchor[0]] = os.lstat(anchor[0])
                except OSError:
                    anchors[anchor[0]] = None
            st = anchors[anchor[0]]
            if st is not None:
                key = stat_key(st)
                if key == anchor[1] and not _racy(key, int(entry["hashed_ns"]), mark):
                    continue
        found = recheck(path, entry, started, files, mark)
        if found is None:
            changed.append((path, entry))
        elif refreshed is not None:
            refreshed.update(found)
    changed.sort(key=lambda item: item[0])
    if changed:
        root = snapshot["project"]
        shown = [os.path.relpath(p, root) if p.startswith(root + os.sep) else p for p, _ in changed]
        rendered_only = all(entry.get("role") == "rendered" for _, entry in changed)
        raise Deny(
            f"changed behind agentstack's back: {', '.join(shown[:5])}"
            + (f" and {len(shown) - 5} more" if len(shown) > 5 else "")
            + f"; {FIX_RENDERED if rendered_only else FIX_DRIFT}"
        )


# ---------------------------------------------------------------------------- the call itself

# Tools, exactly as each harness names them (case matters), and the arguments that name what they
# touch. Kinds: "read"/"write" a path, "pattern" a path pattern read, "url", "server" (an MCP
# server's name), "patch" (apply_patch's text), "regex"/"opaque" (named, but nothing to judge).
# A trailing "?" marks an optional argument. Any other argument that would name a path, URL or
# server (NAMING_KEYS) is not the tool's: denied.
# A tool with no entry in TOOLS and none in INERT is unknown: denied when it names anything.
TOOLS: dict[str, dict[str, tuple[str, ...]]] = {
    "claude-code": {
        "Read": ("file_path:read",),
        "NotebookRead": ("notebook_path:read",),
        "Write": ("file_path:write",),
        "Edit": ("file_path:write",),
        "MultiEdit": ("file_path:write",),
        "NotebookEdit": ("notebook_path:write",),
        "Glob": ("pattern:pattern", "path:read?"),
        "Grep": ("path:read?", "glob:pattern?", "pattern:regex?"),
        "LS": ("path:read",),
        "WebFetch": ("url:url",),
        "ListMcpResourcesTool": ("server:server",),
        "ReadMcpResourceTool": ("server:server", "uri:opaque?"),
        "Workflow": ("scriptPath:read?",),  # a script file it runs
    },
    "codex": {
        "apply_patch": ("*:patch",),
        "view_image": ("path:read",),
        "read_mcp_resource": ("server:server", "uri:opaque?"),
        "list_mcp_resources": ("server:server",),
        "list_mcp_resource_templates": ("server:server",),
        "Bash": ("workdir:read?",),
        "shell": ("workdir:read?",),
        "exec_command": ("workdir:read?",),
        "shell_command": ("workdir:read?",),
        "local_shell": ("workdir:read?",),
        # Sub-agents, named by their ids (`target` is an agent id, not a path).
        "multi_agent_v1__close_agent": ("target:opaque",),
        "multi_agent_v1__send_input": ("target:opaque",),
    },
    "gemini-cli": {
        "read_file": ("absolute_path:read?", "file_path:read?", "path:read?"),
        "read_many_files": ("paths:read?",),
        "list_directory": ("path:read?", "dir_path:read?"),
        "glob": ("pattern:pattern", "path:read?", "dir_path:read?"),
        "search_file_content": ("path:read?", "dir_path:read?", "include:pattern?"),
        "grep_search": ("dir_path:read?", "include_pattern:pattern?", "pattern:regex?"),
        "write_file": ("file_path:write?", "absolute_path:write?"),
        "replace": ("file_path:write?", "absolute_path:write?"),
        "web_fetch": ("prompt:urls",),
    },
    "copilot": {
        "view": ("path:read",),
        "create": ("path:write",),
        "edit": ("path:write",),
        "str_replace": ("path:write",),
        "web_fetch": ("url:url",),
        "apply_patch": ("*:patch",),
        "glob": ("pattern:pattern", "paths:read?"),
        "rg": ("paths:read?", "glob:pattern?", "pattern:regex?"),
        "session_store_sql": ("source:opaque?",),  # `cloud` or `local`: which session store
    },
    "opencode": {
        "read": ("filePath:read",),
        "list": ("path:read?",),
        "glob": ("pattern:pattern", "path:read?"),
        "grep": ("path:read?", "include:pattern?"),
        "write": ("filePath:write",),
        "edit": ("filePath:write",),
        "patch": ("*:patch",),
        "webfetch": ("url:url",),
    },
}
# Codex names its hook tools after Claude Code's where they are the same ("Bash"): the two share
# one table, so a name either one uses is judged the same way by both.
TOOLS["claude-code"] = TOOLS["codex"] = {**TOOLS["claude-code"], **TOOLS["codex"]}
TOOLS["vscode"] = TOOLS["cursor"] = TOOLS["claude-code"]
# Tools that name nothing the guard judges (shells run under the sandbox, not the guard; plans,
# todos and questions touch nothing; a sub-agent's own calls come back through this hook).
INERT = {
    "claude-code": {
        "Bash",
        "BashOutput",
        "KillShell",
        "KillBash",
        "Task",
        "Agent",
        "TodoWrite",
        "TodoRead",
        "ExitPlanMode",
        "EnterPlanMode",
        "AskUserQuestion",
        "SlashCommand",
        "Skill",
        "TaskOutput",
        "TaskStop",
        "TaskCreate",
        "TaskGet",
        "TaskList",
        "TaskUpdate",
        "WebSearch",
        "Monitor",
        "SendMessage",
        "ListAgents",
        "ReportFindings",
        "ScheduleWakeup",
        "CronCreate",
        "CronDelete",
        "CronList",
        "ToolSearch",
        "DeferredToolPlaceholder",
    },
    "codex": {
        "update_plan",
        "write_stdin",
        "web_search",
        "request_user_input",
        "create_goal",
        "get_goal",
        "update_goal",
        "multi_agent_v1__spawn_agent",
        "multi_agent_v1__resume_agent",
        "multi_agent_v1__wait_agent",
    },
    "gemini-cli": {
        "run_shell_command",
        "google_web_search",
        "save_memory",
        "write_todos",
        "activate_skill",
        "enter_plan_mode",
        "invoke_agent",
        "list_background_processes",
        "read_background_output",
        "update_topic",
    },
    "copilot": {
        "bash",
        "write_bash",
        "read_bash",
        "stop_bash",
        "list_bash",
        "report_intent",
        "skill",
        "task",
        "read_agent",
        "list_agents",
        "write_agent",
        "sql",  # the session's own database
        "semantic_code_search",  # a query to GitHub's code search for a named repository
        "fetch_copilot_cli_documentation",
    },
    "opencode": {"bash", "todowrite", "todoread", "task", "skill"},
}
INERT["claude-code"] = INERT["codex"] = INERT["claude-code"] | INERT["codex"]
INERT["vscode"] = INERT["cursor"] = INERT["claude-code"]
# Tools a harness offers that the guard refuses whatever their input, with the reason.
REFUSED: dict[str, dict[str, str]] = {
    "claude-code": {
        "EnterWorktree": "it creates a git worktree under .claude/, which no tool may write",
        "ExitWorktree": "it can remove a git worktree under .claude/, which no tool may write",
    },
    "copilot": {
        "lsp": (
            "it asks language servers started from configuration (and its rename edits files "
            "the guard never sees)"
        ),
    },
}
REFUSED["codex"] = REFUSED["vscode"] = REFUSED["cursor"] = REFUSED["claude-code"]
# Every tool name in these tables is one a pinned harness version offers, or did (the captures
# in tests/harness/tools/, compared with each harness in CI): any other name is denied.
# Keys that, in the input of a tool the guard does not know, name something it would judge.
NAMING_KEYS = frozenset(
    {
        "path",
        "paths",
        "file",
        "files",
        "file_path",
        "filePath",
        "filepath",
        "filename",
        "notebook_path",
        "absolute_path",
        "dir",
        "dir_path",
        "directory",
        "cwd",
        "workdir",
        "root",
        "target",
        "destination",
        "dest",
        "source",
        "src",
        "pattern",
        "glob",
        "include",
        "url",
        "urls",
        "uri",
        "href",
        "link",
        "host",
        "hostname",
        "endpoint",
        "location",
        "server",
        "server_name",
        "serverName",
        "mcp_server",
        "namespace",
    }
)


def _tool_of(harness: str, event: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if harness == "copilot" and "toolName" in event:
        tool, arguments = event.get("toolName"), event.get("toolArgs")
        if isinstance(arguments, str):
            try:
                arguments = loads(arguments)
            except ValueError:
                raise Deny("the tool's arguments are not JSON") from None
    else:
        tool, arguments = event.get("tool_name"), event.get("tool_input")
    if not isinstance(tool, str) or not tool:
        raise Deny("the hook input names no tool")
    if not isinstance(arguments, dict):
        raise Deny(f"the input of tool {tool!r} is not a JSON object")
    return tool, arguments


def check_server_tool(snapshot: dict[str, Any], server: str, tool: str) -> None:
    """Deny a tool `servers.NAME.tools` does not allow (deny wins; a non-empty allow is the
    whole list). The snapshot holds the trusted table; a malformed one allows nothing."""
    tables = snapshot.get("tools", {})
    table = tables.get(server) if isinstance(tables, dict) else None
    if table is None and isinstance(tables, dict):
        return
    allow = table.get("allow", []) if isinstance(table, dict) else None
    deny = table.get("deny", []) if isinstance(table, dict) else None
    if not isinstance(allow, list) or not isinstance(deny, list):
        raise Deny(f"the guard snapshot's tool table for server {server!r} is malformed; denied")
    if tool in deny or (allow and tool not in allow):
        raise Deny(
            f"tool {tool!r} of MCP server {server!r} is not allowed by servers.{server}.tools "
            "in agentstack.toml"
        )


def check_call(
    snapshot: dict[str, Any], event: dict[str, Any], cwd: str, harness: str = "claude-code",
    state: str | None = None,
) -> None:
    tool, arguments = _tool_of(harness, event)
    servers = [s for s in snapshot["servers"] if isinstance(s, str)]
    policy = snapshot["policy"]
    context = event.get("mcp_context")
    if context is not None and harness != "gemini-cli":
        raise Deny(f"hook input for {harness} carries an unexpected 'mcp_context'; denied")
    if context is not None:  # Gemini names the server itself
        name = context.get("server_name") if isinstance(context, dict) else None
        if not tool.startswith("mcp_"):
            raise Deny(f"tool {tool!r} carries an MCP server but is not named as an MCP tool")
        if not isinstance(name, str) or name not in servers:
            raise Deny(
                f"tool {tool!r} belongs to MCP server {name!r}, which is not in agentstack.lock; "
                "add it to agentstack.toml, lock and trust it"
            )
        prefix = "mcp_" + name + "_"
        check_server_tool(snapshot, name, tool[len(prefix):] if tool.startswith(prefix) else tool)
        return
    if harness == "cursor" and tool.startswith("MCP:"):
        # Cursor names an MCP tool `MCP:<server>:<tool>`: one reading only.
        parts = tool.split(":")
        if len(parts) != 3 or not parts[2]:
            raise Deny(f"tool {tool!r} cannot be tied to exactly one locked server; denied")
        if parts[1] not in servers:
            raise Deny(
                f"tool {tool!r} belongs to MCP server {parts[1]!r}, which is not in "
                "agentstack.lock; add it to agentstack.toml, lock and trust it"
            )
        check_server_tool(snapshot, parts[1], parts[2])
        return
    if tool[:3].lower() == "mcp":
        if not tool.startswith("mcp__"):
            raise Deny(f"tool {tool!r} looks like an MCP tool but is not named as one; denied")
        try:
            server = _more().resolve_server(tool, servers)
        except Deny as first:
            if state is None:
                raise
            # Not a project server: a server of the user-level setup, by that setup's own trust
            # (a project server of the same name shadows it).
            _more().user_server_call(tool, servers, state, first)
            return
        check_server_tool(snapshot, server, tool[5 + len(server) + 2 :])
        return
    if "-" in tool and (harness == "copilot" or os.environ.get("COPILOT_CLI") == "1"):
        # Copilot CLI names MCP tools `<server>-<tool>`, also in the Claude Code hook files it
        # runs (there only its COPILOT_CLI=1 tells; a project that sets it gains nothing: Claude
        # Code's own tools have no '-', so such a name can only be a Copilot MCP tool, allowed
        # when it resolves to exactly one locked server). Its own tools have no '-' either.
        _more().copilot_server(tool, servers)
        return
    spec = TOOLS.get(harness, {}).get(tool)
    if spec is None:
        if tool in INERT.get(harness, ()):
            extra = sorted(k for k in arguments if k in NAMING_KEYS)
            if extra:
                raise Deny(f"tool {tool!r} was given {extra[0]!r}, which it has not; denied")
            return
        refused = REFUSED.get(harness, {}).get(tool)
        if refused is not None:
            raise Deny(f"tool {tool!r} is refused: {refused}; denied")
        raise Deny(
            f"tool {tool!r} is not in the guard's tool table for {harness} (a tool it does not "
            "know could read, write or run anything); denied"
        )
    known = {item.split(":")[0] for item in spec}
    extra = sorted(k for k in arguments if k in NAMING_KEYS and k not in known)
    if extra and "*" not in known:
        raise Deny(f"tool {tool!r} was given {extra[0]!r}, which it has not; denied")
    for item in spec:
        key, kind = item.split(":")
        optional = kind.endswith("?")
        kind = kind.rstrip("?")
        if kind == "patch":
            _more().check_patch(policy, arguments, cwd)
            continue
        if kind in ("regex", "opaque"):  # a search pattern; a resource the locked server names
            continue
        if key not in arguments:
            if optional:
                continue
            if kind == "server":
                raise Deny(f"tool {tool!r} must name the MCP server it reaches; denied")
            raise Deny(f"tool {tool!r} has no {key!r}; denied")
        value = arguments[key]
        if kind == "server":
            if not isinstance(value, str) or value not in servers:
                raise Deny(
                    f"tool {tool!r} reaches MCP server {value!r}, which is not in "
                    "agentstack.lock; add it to agentstack.toml, lock and trust it"
                )
        elif kind == "url":
            _more().check_url(policy, value)
        elif kind == "urls":
            if not isinstance(value, str):
                raise Deny(f"tool {tool!r}: {key!r} is not a string; denied")
            for url in _more()._rx("url_in_text").findall(value):
                _more().check_url(policy, url if "://" in url else "https://" + url)
        elif kind == "pattern":
            bases = arguments.get("paths", [arguments.get("path", arguments.get("dir_path", cwd))])
            for base in bases if isinstance(bases, list) and bases else [bases]:
                _more().check_pattern(
                    policy, _more()._path_text(base, "path"), _more()._path_text(value, key), cwd
                )
        else:
            values = value if key == "paths" and isinstance(value, list) else [value]
            for one in values:
                _more().check_path(
                    policy, _more()._absolute(_more()._path_text(one, key), cwd), kind
                )


# ---------------------------------------------------------------------------------- main


def decide(
    harness: str,
    raw: bytes,
    *,
    state: str | None = None,
    project: str | None = None,
    event_name: str = PRE_TOOL,
) -> None:
    """Raise Deny, or return to allow. `project` None: the user-level guard."""
    if harness not in HARNESSES:
        raise Deny(f"unknown harness {harness!r}")
    if event_name not in EVENTS:
        raise Deny(f"unknown hook event {event_name!r}")
    if not state or not os.path.isabs(state):
        raise Deny(
            "this hook does not name its state directory (rendered by an older agentstack?); "
            "run 'agentstack apply --write'"
        )
    if project is not None and not os.path.isabs(project):
        raise Deny(f"the rendered project {project!r} is not an absolute path")
    if len(raw) > MAX_INPUT:
        raise Deny("hook input is too large")
    try:
        event = loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise Deny("hook input is not JSON") from None
    if not isinstance(event, dict):
        raise Deny("hook input is not a JSON object")
    said = event.get("hook_event_name")
    if harness in ("claude-code", "codex") and said is not None and said != event_name:
        raise Deny(f"hook input is for {said!r}, but this hook was rendered for {event_name!r}")
    cwd = event.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not os.path.isabs(cwd) or "\0" in cwd):
        raise Deny("hook input has a cwd that is not an absolute path")
    here = os.getcwd()
    cwd = cwd or here
    if project is None:
        # The user-level guard: allow only where no agentstack project encloses the session.
        for directory in dict.fromkeys((here, cwd)):
            found = enclosing_project(directory, state)
            if found is not None:
                project = found
                break
        if project is None:
            if event_name == PRE_TOOL:
                _more().user_level_call(state, event, harness)
            return
    root = os.path.realpath(project)
    snapshot, trust_home, writable = _load_state(state, root)
    if snapshot.get("project") != root:
        raise Deny(f"the guard snapshot is for {snapshot.get('project')}, not {root}")
    trust_head = check_trust(snapshot, trust_home)
    refreshed: dict[str, Any] = {}
    check_files(snapshot, refreshed)
    if event_name == PRE_TOOL:
        check_call(snapshot, event, cwd, harness, state=state)
    if writable is not None and (
        trust_head is not None
        or any(_settled(entry, _mark_of(snapshot)) for entry in refreshed.values())
    ):
        # What had to be re-proved (by content, or the trust log by verification) is settled now:
        # record it, so the next call proves it by stats alone (the steady state, from the first
        # call after `apply`, or after another project's `trust`).
        fresh = {**snapshot, "files": {**snapshot["files"], **refreshed}}
        if trust_head is not None:
            fresh["trust_head"] = trust_head
        try:  # noqa: SIM105 - contextlib is one import more on every call
            _more().refresh_snapshot(writable[0], writable[1], fresh)
        except OSError:
            pass  # a state directory it cannot write: the decision stands, the next call re-proves


def parse_args(argv: list[str]) -> dict[str, str]:
    """--harness, --state, --project, --event (each at most once) and --user-level."""
    out: dict[str, str] = {}
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--user-level":
            key, value = "user-level", "1"
        elif "=" in arg and arg.split("=", 1)[0] in (
            "--harness",
            "--state",
            "--project",
            "--event",
        ):
            key, value = arg[2:].split("=", 1)
        elif arg in ("--harness", "--state", "--project", "--event") and index + 1 < len(argv):
            key, value = arg[2:], argv[index + 1]
            index += 1
        else:
            raise Deny(f"unexpected argument {arg!r}")
        if key in out:
            raise Deny(f"--{key} given twice")
        out[key] = value
        index += 1
    if ("project" in out) == ("user-level" in out):
        raise Deny(
            "the hook names neither a project nor --user-level (rendered by an older agentstack?); "
            "run 'agentstack apply --write'"
        )
    return out


def _read_stdin() -> bytes:
    chunks = []
    size = 0
    while size <= MAX_INPUT:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def main(argv: list[str] | None = None) -> NoReturn:
    args = sys.argv[1:] if argv is None else argv
    harness = ""
    event_name = PRE_TOOL
    for index, arg in enumerate(args):  # for the deny shape, before anything else can fail
        if arg == "--harness" and index + 1 < len(args):
            harness = args[index + 1]
        elif arg.startswith("--harness="):
            harness = arg.split("=", 1)[1]
        elif arg == "--event=" + PRE_PROMPT or (
            arg == "--event" and args[index + 1 : index + 2] == [PRE_PROMPT]
        ):
            event_name = PRE_PROMPT
    try:

        def on_alarm(signum: int, frame: object) -> None:
            raise Deny(f"the guard did not decide within {ALARM_S} s")

        # `_signal`, not `signal`: the same calls without building the Signals enums.
        import _signal  # type: ignore[import-not-found]

        _signal.signal(_signal.SIGALRM, on_alarm)
        _signal.alarm(ALARM_S)
        options = parse_args(args)
        decide(
            options.get("harness", ""),
            _read_stdin(),
            state=options.get("state"),
            project=options.get("project"),
            event_name=options.get("event", PRE_TOOL),
        )
        _signal.alarm(0)
    except Deny as deny:
        emit_deny(harness, str(deny), event_name)
    except BaseException as exc:  # noqa: BLE001 - fail closed on anything, even a bug
        emit_deny(
            harness,
            f"internal error ({type(exc).__name__}: {exc}); denying to stay safe",
            event_name,
        )
    emit_allow()


if __name__ == "__main__":
    main()

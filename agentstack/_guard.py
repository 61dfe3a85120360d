"""The pre-tool-use guard: `python -I -m agentstack._guard --harness H`, run on every tool call.

Every harness fails OPEN when a hook crashes, times out or prints garbage, so this module never
does: any error, any doubt, becomes an explicit deny in the calling harness's protocol (JSON deny on
stdout, the reason on stderr, exit 2 — the code every harness treats as blocking). It answers well
inside the rendered timeout (an alarm denies at ALARM_S).

What it checks, against the snapshot that `trust` / `apply --write` wrote under
$AGENTSTACK_HOME/projects/<id>/guard.json (never inside the project):
1. trust still holds: the trust log head is unchanged since the snapshot, or the log (re-verified)
   still trusts the digest, or CI passed the digest explicitly;
2. nothing fingerprinted changed: the manifest (by meaning), the lock, and every rendered or pinned
   file (stat first; bytes re-hashed only when the stat changed or is racily clean);
3. the call itself: an MCP tool must belong to a locked server; file tools must respect the
   sandbox paths; web tools its hosts.
Outside any agentstack project it allows: it must not break the user's other projects.

Standard library only on this path (an import-hygiene test enforces it): it starts in tens of ms.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time

# Every import is paid on every tool call: `typing` only for the type checker, and sha256 from
# CPython's own module rather than through hashlib (which loads OpenSSL).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn


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

READ_TOOLS = {
    "Read": ("file_path",),
    "Glob": ("path",),
    "Grep": ("path",),
    "LS": ("path",),
    "read_file": ("absolute_path", "file_path", "path"),
    "list_directory": ("path", "dir_path"),
    "glob": ("path", "dir_path"),
    "search_file_content": ("path", "dir_path"),
    "view": ("path",),
    "read": ("filePath", "path"),
    "list": ("path",),
    "grep": ("path",),
}
WRITE_TOOLS = {
    "Write": ("file_path",),
    "Edit": ("file_path",),
    "MultiEdit": ("file_path",),
    "NotebookEdit": ("notebook_path",),
    "write_file": ("file_path", "absolute_path"),
    "replace": ("file_path", "absolute_path"),
    "create": ("path",),
    "edit": ("path", "filePath"),
    "write": ("filePath", "path"),
}
WEB_TOOLS = {"WebFetch": ("url",), "web_fetch": ("url",), "webfetch": ("url",), "fetch": ("url",)}


class Deny(Exception):
    """A decision to block, with the reason shown to the model and the user."""


# ------------------------------------------------------------------------------- protocol


def emit_deny(harness: str, reason: str) -> NoReturn:
    reason = "agentstack guard: " + reason
    if harness in ("claude-code", "codex", "vscode"):
        body: dict[str, Any] = {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }
        }
    elif harness in ("gemini-cli", "opencode"):
        body = {"decision": "deny", "reason": reason}
    elif harness == "copilot":
        body = {"permissionDecision": "deny", "permissionDecisionReason": reason}
    elif harness == "cursor":
        body = {"permission": "deny", "user_message": reason, "agent_message": reason}
    else:  # unknown harness: every known deny shape at once, and the blocking exit code
        body = {
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
    data = (json.dumps(body) + "\n").encode()
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


def _canonical(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    ).encode("utf-8")


def _key_value(doc: Any, path: list[str]) -> Any:
    node = doc
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def content_hash(path: str, entry: dict[str, Any]) -> str | None:
    """The hash of what matters in `path` for this kind of entry; None when it is missing."""
    kind = entry["kind"]
    try:
        if os.path.islink(path):
            return _sha(b"link:" + os.fsencode(os.readlink(path)))
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        if kind == "keys":  # a missing config file holds none of the keys: compare as empty
            return _sha(_canonical(keys_view({}, entry)))
        return None
    if kind == "manifest":  # by meaning: comments, whitespace and quoting do not count
        import tomllib

        return _sha(_canonical(tomllib.loads(data.decode("utf-8"))))
    if kind == "keys":
        if entry["format"] == "json":
            doc = json.loads(data.decode("utf-8") or "{}")
        else:
            import tomllib

            doc = tomllib.loads(data.decode("utf-8"))
        return _sha(_canonical(keys_view(doc, entry)))
    if kind == "block":
        text = data.decode("utf-8", "replace")
        start = text.find(BLOCK_BEGIN)
        end = text.find(BLOCK_END, start)
        return _sha(text[start:end].encode()) if start >= 0 and end >= 0 else _sha(b"")
    # The executable bit counts too: a rendered script made executable is not what was trusted.
    executable = os.stat(path).st_mode & 0o100
    return _sha((b"x:" if executable else b"-:") + data)


def shape(value: Any) -> Any:
    """A guarded container as the guard sees it: the names in it (or the value itself)."""
    return sorted(value) if isinstance(value, dict) else value


def keys_view(doc: Any, entry: dict[str, Any]) -> dict[str, Any]:
    """What of a shared config file the guard compares: the values of the keys agentstack owns,
    and the shape of each guarded container (a server or hook added next to them shows)."""
    return {
        "owned": {k: _key_value(doc, json.loads(k)) for k in entry["keys"]},
        "guarded": {g: shape(_key_value(doc, json.loads(g))) for g in entry.get("guarded", [])},
    }


def stat_key(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def fingerprint(path: str, entry: dict[str, Any]) -> dict[str, Any]:
    """Used when the snapshot is written: the stat key, the content hash and when it was taken."""
    started = time.time_ns()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {**entry, "stat": None, "hash": None, "hashed_ns": started}
    return {**entry, "stat": stat_key(st), "hash": content_hash(path, entry), "hashed_ns": started}


def drifted(path: str, entry: dict[str, Any]) -> bool:
    try:
        st: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        st = None
    if (
        st is not None
        and entry.get("stat") == stat_key(st)
        and max(st.st_mtime_ns, st.st_ctime_ns) < int(entry["hashed_ns"]) - RACY_SLACK_NS
    ):
        return False  # same stat, not racy: unchanged without reading a byte
    try:
        return content_hash(path, entry) != entry.get("hash")
    except (OSError, ValueError):
        return True  # unreadable or unparseable now: not what was trusted


# -------------------------------------------------------------------------------- checks


def home() -> str:
    explicit = os.environ.get("AGENTSTACK_HOME")
    if explicit:
        return os.path.expanduser(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "agentstack")


def project_id(root: str) -> str:
    return _sha(os.fsencode(os.path.realpath(root)))[:32]


def find_project(cwd: str, state_home: str) -> tuple[str, str] | None:
    """(project root, snapshot path) for the nearest ancestor that is an agentstack project."""
    here = os.path.realpath(cwd)
    while True:
        snapshot = os.path.join(state_home, "projects", project_id(here), "guard.json")
        if os.path.exists(snapshot) or os.path.isfile(os.path.join(here, "agentstack.toml")):
            return here, snapshot
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def load_snapshot(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            snapshot = json.loads(handle.read(16 * 1024 * 1024))
    except FileNotFoundError:
        raise Deny(
            "this project has not been trusted on this machine; run 'agentstack trust' "
            "and 'agentstack apply --write'"
        ) from None
    except (OSError, ValueError) as exc:
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


def check_trust(snapshot: dict[str, Any], state_home: str) -> None:
    digest = snapshot["digest"]
    explicit = digest in os.environ.get("AGENTSTACK_TRUSTED_DIGESTS", "").split()
    if (
        not explicit
        and snapshot.get("trust_source") == "log"
        and _log_unchanged(snapshot, state_home)
    ):
        return  # the log trusted this digest and nothing was appended since (no revocation)
    # The log moved on, or trust was explicit (CI): read the log itself, verified. A revocation
    # recorded there wins even over an explicit digest. (blake3 is loaded only on this path.)
    from pathlib import Path

    from agentstack.trustlog import TrustLog

    log = TrustLog(Path(state_home))
    if explicit and not log.path.exists():
        return
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


def _log_unchanged(snapshot: dict[str, Any], state_home: str) -> bool:
    """The head and the log's size are what they were when the digest was trusted. (The size
    catches a record whose writer died before it could update the head.)"""
    try:
        with open(os.path.join(state_home, "trust.head"), "rb") as handle:
            head = json.loads(handle.read(4096))
        size = os.stat(os.path.join(state_home, "trust.jsonl")).st_size
    except (OSError, ValueError):
        return False
    return isinstance(head, dict) and snapshot.get("trust_head") == [
        head.get("count"),
        head.get("head"),
        size,
    ]


def check_files(snapshot: dict[str, Any]) -> None:
    changed = [
        (path, entry) for path, entry in sorted(snapshot["files"].items()) if drifted(path, entry)
    ]
    if changed:
        root = snapshot["project"]
        shown = [os.path.relpath(p, root) if p.startswith(root + os.sep) else p for p, _ in changed]
        rendered_only = all(entry.get("role") == "rendered" for _, entry in changed)
        raise Deny(
            f"changed behind agentstack's back: {', '.join(shown[:5])}"
            + (f" and {len(shown) - 5} more" if len(shown) > 5 else "")
            + f"; {FIX_RENDERED if rendered_only else FIX_DRIFT}"
        )


def _under(path: str, prefixes: list[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def _normalise_server(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)


def check_call(snapshot: dict[str, Any], event: dict[str, Any], cwd: str) -> None:
    tool = event.get("tool_name") or event.get("toolName") or event.get("tool") or ""
    if not isinstance(tool, str):
        raise Deny("the hook input names no tool")
    arguments = event.get("tool_input")
    if arguments is None:
        arguments = event.get("toolArgs", event.get("args", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            arguments = {}
    if not isinstance(arguments, dict):
        arguments = {}
    servers = {_normalise_server(s) for s in snapshot["servers"]}
    server = None
    if tool.startswith("mcp__"):
        server = tool.split("__")[1] if tool.count("__") >= 2 else ""
    elif isinstance(event.get("mcp_context"), dict):
        server = str(event["mcp_context"].get("server_name", ""))
    elif os.environ.get("COPILOT_CLI") == "1" and "-" in tool:
        # Copilot CLI names MCP tools `<server>-<tool>` (also in Claude-format hooks it runs);
        # its own tools have no "-". The longest locked server that prefixes the name, else the
        # part before the first "-" (not locked: denied below).
        prefixes = sorted((s for s in servers if tool.startswith(s + "-")), key=len)
        server = prefixes[-1] if prefixes else tool.split("-", 1)[0]
    if server is not None:
        if _normalise_server(server) not in servers:
            raise Deny(
                f"tool {tool!r} belongs to MCP server {server!r}, which is not in "
                "agentstack.lock; add it to agentstack.toml, lock and trust it"
            )
        return
    policy = snapshot["policy"]
    for table, op in ((WRITE_TOOLS, "write"), (READ_TOOLS, "read")):
        if tool in table:
            for key in table[tool]:
                value = arguments.get(key)
                if isinstance(value, str) and value:
                    check_path(policy, os.path.join(cwd, os.path.expanduser(value)), op)
            return
    if tool in WEB_TOOLS:
        url = arguments.get("url")
        if isinstance(url, str):
            check_host(policy, url)


def check_path(policy: dict[str, Any], path: str, op: str) -> None:
    real = os.path.realpath(path)
    if _under(real, policy["deny"]) or _under(os.path.abspath(path), policy["deny"]):
        raise Deny(f"{op} of {path} is denied by the sandbox policy (a protected location)")
    allowed = policy["write"] if op == "write" else policy["read"] + policy["write"]
    if not _under(real, allowed):
        raise Deny(
            f"{op} of {path} is outside what the sandbox policy grants; add it to "
            f"[sandbox] {op}_dirs in agentstack.toml if it is needed"
        )


def check_host(policy: dict[str, Any], url: str) -> None:
    from urllib.parse import urlsplit

    host = (urlsplit(url).hostname or "").lower()
    if not policy["network_block"]:
        return
    for allowed in policy["hosts"]:
        allowed = allowed.lower()
        if host == allowed or (allowed.startswith("*.") and host.endswith(allowed[1:])):
            return
    raise Deny(
        f"{host or url!r} is not an allowed host of the sandbox policy; add it to "
        "[sandbox.network] allow_domains in agentstack.toml if it is needed"
    )


# ---------------------------------------------------------------------------------- main


def decide(harness: str, raw: bytes) -> None:
    """Raise Deny, or return to allow."""
    if harness not in HARNESSES:
        raise Deny(f"unknown harness {harness!r}")
    if len(raw) > MAX_INPUT:
        raise Deny("hook input is too large")
    try:
        event = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise Deny("hook input is not JSON") from None
    if not isinstance(event, dict):
        raise Deny("hook input is not a JSON object")
    cwd = event.get("cwd")
    if not isinstance(cwd, str) or not os.path.isabs(cwd):
        cwd = os.getcwd()
    state_home = home()
    # Which project is this session in? The harness starts hooks in the project (and says so in
    # its project-dir variable); the event's cwd follows the agent's `cd`, so it alone is not
    # enough: an agent that cd's to /tmp is still in the project's session.
    found = None
    candidates = (
        os.environ.get("CLAUDE_PROJECT_DIR"),
        os.environ.get("GEMINI_PROJECT_DIR"),
        os.getcwd(),
        cwd,
    )
    for index, candidate in enumerate(candidates):
        # Each distinct directory is walked up once (usually they are all the same one).
        if candidate and os.path.isabs(candidate) and candidate not in candidates[:index]:
            found = find_project(candidate, state_home)
            if found is not None:
                break
    if found is None:
        return  # not an agentstack project: not ours to judge
    root, snapshot_path = found
    confined = os.environ.get("AGENTSTACK_RUN_RO")
    if confined and os.path.isabs(confined):
        # Under `agentstack run`, $AGENTSTACK_HOME is closed to the harness (and so to this hook):
        # `run` hands over read-only copies of the snapshot and the trust log instead.
        state_home = confined
        snapshot_path = os.path.join(confined, "guard.json")
    snapshot = load_snapshot(snapshot_path)
    if snapshot.get("project") != root:
        raise Deny(f"the guard snapshot is for {snapshot.get('project')}, not {root}")
    check_trust(snapshot, state_home)
    check_files(snapshot)
    check_call(snapshot, event, cwd)


def _parse_harness(argv: list[str]) -> str:
    for index, arg in enumerate(argv):
        if arg == "--harness" and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("--harness="):
            return arg.split("=", 1)[1]
    return ""


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
    harness = ""
    try:
        harness = _parse_harness(sys.argv[1:] if argv is None else argv)

        def on_alarm(signum: int, frame: object) -> None:
            raise Deny(f"the guard did not decide within {ALARM_S} s")

        signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(ALARM_S)
        decide(harness, _read_stdin())
        signal.alarm(0)
    except Deny as deny:
        emit_deny(harness, str(deny))
    except BaseException as exc:  # noqa: BLE001 - fail closed on anything, even a bug
        emit_deny(harness, f"internal error ({type(exc).__name__}: {exc}); denying to stay safe")
    emit_allow()


if __name__ == "__main__":
    main()

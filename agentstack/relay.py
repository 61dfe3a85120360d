"""The MCP relay: between a harness and a stdio server, every message checked on its way.

`agentstack.launch --server NAME --project ROOT --state DIR -- CMD…` starts the server as its
child and relays newline-delimited JSON-RPC both ways. What the server lists (`tools/list`,
`prompts/list`, `resources/list`, `resources/templates/list`) goes into the model's context, so the
relay holds it to a pin bound to the consent:

- the first time a trusted server lists a kind of thing (the project's consent digest trusted, as
  the guard proves it), every entry is recorded, whole, in
  `$AGENTSTACK_HOME/projects/<id>/mcp-pins/<server>.json` with the digest it was taken under;
- later, an entry that differs from its pin, or that the pin does not hold, is withheld from the
  listing (the rest pass) and kept in `<server>.pending.json`; `agentstack trust` shows the change
  as lines and records the new pin; `notifications/tools/list_changed` only makes the harness ask
  again, and that answer is checked the same way;
- `servers.NAME.tools` (allow / deny, from the trusted consent document) filters the listing and
  refuses a `tools/call` of a tool not allowed, as it does one of a withheld or never-listed tool.

It never fails open: a line it cannot parse is dropped (never forwarded); a response it did not
see the request for is dropped; a listing is never forwarded as the server wrote it, only rebuilt
from entries that passed; where the pins or the consent cannot be read, nothing is listed and each
listing answers a JSON-RPC error saying why. The server's secrets (given to the relay, never to
the harness) are replaced in anything the server sends back. One receipt line per tool call
(time, server, tool, decision, bytes; never a body) goes to `receipts.jsonl` beside the pins.

Standard library only: it starts with every server, and stays on the path of every message.
"""

from __future__ import annotations

import _thread
import os
import stat
import sys
import time

from agentstack import _guard, layout

# It starts with every server: nothing is imported that `python -I -S` does not load already but
# agentstack's own small modules (`_guard`'s JSON through CPython's C scanner and encoder, not the
# `json` package, which loads `re`; `_thread`, not `threading`; no `typing`, `contextlib` or
# `collections`).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable, Iterable
    from typing import IO, Any

MAX_LINE = 16 * 1024 * 1024  # a longer line is dropped whole
PIN_FORMAT = 1
# What a listing holds and the field that names an entry.
LISTINGS = {
    "tools/list": ("tools", "name"),
    "prompts/list": ("prompts", "name"),
    "resources/list": ("resources", "uri"),
    "resources/templates/list": ("resourceTemplates", "uriTemplate"),
}
KEY_FIELDS = dict(LISTINGS.values())  # kind -> the field that names an entry
REFUSED = -32001  # JSON-RPC server error: agentstack refused
INVALID_PARAMS = -32602
REDACTED = "[secret withheld by agentstack]"
REVIEW = "agentstack trust"


def canonical(value: Any) -> str:
    return _guard.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def loads(data: bytes) -> Any:
    """json.loads of UTF-8 bytes (ValueError, RecursionError as json.loads raises them)."""
    return _guard.loads(data.decode("utf-8"))


# ----------------------------------------------------------------------------- state on disk


class Pins:
    """One server's pin: {kind: {key: entry}} and the digest it was first taken under."""

    def __init__(self, lists: dict[str, dict[str, Any]] | None = None, digest: str = "") -> None:
        self.lists: dict[str, dict[str, Any]] = lists or {}
        self.digest = digest

    @classmethod
    def parse(cls, data: Any) -> Pins:
        if not isinstance(data, dict) or data.get("v") != PIN_FORMAT:
            raise ValueError("not a pin of this agentstack")
        lists = data.get("lists")
        if not isinstance(lists, dict) or not all(
            isinstance(k, str) and isinstance(v, dict) for k, v in lists.items()
        ):
            raise ValueError("a pin without its lists")
        digest = data.get("digest", "")
        return cls({k: dict(v) for k, v in lists.items()}, digest if isinstance(digest, str) else "")

    def to_json(self, server: str) -> dict[str, Any]:
        return {"v": PIN_FORMAT, "server": server, "digest": self.digest, "lists": self.lists}


def _read_private(path: str, limit: int = 64 * 1024 * 1024) -> bytes | None:
    """A regular file of ours, links not followed; None when absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise PermissionError(f"{path} is not a regular file of yours")
        return handle.read(limit)


def _write_private(path: str, data: bytes) -> None:
    """Atomic 0600 write in agentstack's own directory (created 0700); links never followed."""
    directory = os.path.dirname(path)
    try:  # noqa: SIM105 - contextlib: an import more at start-up
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise PermissionError(f"{directory} is not a directory of yours")
    temp = f"{path}.tmp-{os.getpid()}-{_thread.get_ident()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        try:  # noqa: SIM105 - contextlib: an import more at start-up
            os.unlink(temp)
        except OSError:
            pass
        raise


def load_pins(state_home: str, root: str, server: str, *, pending: bool = False) -> Pins | None:
    data = _read_private(layout.pin_file(state_home, root, server, pending=pending))
    if data is None:
        return None
    return Pins.parse(loads(data))


def save_pins(state_home: str, root: str, server: str, pins: Pins, *, pending: bool = False) -> None:
    import json  # recording a pin is rare: the indented form needs the json package

    data = json.dumps(pins.to_json(server), sort_keys=True, indent=1).encode("utf-8")
    # At `trust --apply` the project's state directory may not be there yet.
    os.makedirs(layout.project_dir(state_home, root), 0o700, exist_ok=True)
    _write_private(layout.pin_file(state_home, root, server, pending=pending), data)


def drop_pending(state_home: str, root: str, server: str) -> None:
    try:  # noqa: SIM105 - contextlib: an import more at start-up
        os.unlink(layout.pin_file(state_home, root, server, pending=True))
    except FileNotFoundError:
        pass


def append_receipt(state_home: str, root: str, record: dict[str, Any]) -> None:
    """One line, one write(2) with O_APPEND (lines stay whole between writers); best effort."""
    line = (canonical(record) + "\n").encode("utf-8")
    try:  # noqa: SIM105 - contextlib: an import more at start-up
        os.mkdir(layout.project_dir(state_home, root), 0o700)
    except OSError:
        pass
    try:
        fd = os.open(
            layout.receipts_file(state_home, root),
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
    except OSError:
        return  # inside `agentstack run` the state directory is closed: run keeps no receipt
    try:
        os.write(fd, line)
    except OSError:
        pass
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- the policy


class ToolPolicy:
    """`servers.NAME.tools`: allow (empty: every tool) and deny (wins)."""

    def __init__(self, allow: Iterable[str] = (), deny: Iterable[str] = ()) -> None:
        self.allow = frozenset(allow)
        self.deny = frozenset(deny)

    @classmethod
    def of(cls, server: Any) -> ToolPolicy:
        tools = server.get("tools") if isinstance(server, dict) else None
        if tools is None:
            return cls()
        if not isinstance(tools, dict):
            raise ValueError("servers.NAME.tools is not a table")
        allow, deny = tools.get("allow", []), tools.get("deny", [])
        if not all(isinstance(x, list) and all(isinstance(t, str) for t in x) for x in (allow, deny)):
            raise ValueError("servers.NAME.tools allow/deny are not lists of names")
        return cls(allow, deny)

    def allows(self, tool: str) -> bool:
        return tool not in self.deny and (not self.allow or tool in self.allow)


class Setup:
    """What the relay checks against, read once at start: the pins, the tool policy, whether the
    consent is trusted (pins may be recorded), or why nothing can be listed (`closed`)."""

    def __init__(
        self,
        *,
        server: str,
        pins: Pins | None,
        policy: ToolPolicy,
        digest: str = "",
        trusted: bool = False,
        closed: str | None = None,
        save: Callable[[Pins, bool], None] | None = None,
        receipt: Callable[[dict[str, Any]], None] | None = None,
        root: str = "",
        consent: dict[str, Any] | None = None,
    ) -> None:
        self.server = server
        self.pins = pins
        self.policy = policy
        self.digest = digest
        self.trusted = trusted
        self.closed = closed
        self.save = save
        self.receipt = receipt
        self.root = root
        # The trusted consent document, when read from the state directory (outside `run`): the
        # server is then started under its own sandbox (agentstack.serverbox).
        self.consent = consent


def load_setup(state_home: str, root: str, server: str) -> Setup:
    """The relay's view of the trusted state; never raises (a failure closes every listing)."""
    try:
        return _load_setup(state_home, root, server)
    except Exception as exc:  # noqa: BLE001 - whatever it is, the relay lists nothing
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return Setup(server=server, pins=None, policy=ToolPolicy(), closed=reason)


def _load_setup(state_home: str, root: str, server: str) -> Setup:
    root = os.path.realpath(root)
    try:
        data = _read_private(layout.guard_snapshot(state_home, root))
    except PermissionError:
        return _setup_from_run(root, server)
    if data is None:
        raise ValueError("this project has no trusted state here; run 'agentstack trust', then "
                         "'agentstack apply --write'")
    return _setup_from_home(state_home, root, server, data)


def _setup_from_home(state_home: str, root: str, server: str, data: bytes, *,
                     quick: bool = False) -> Setup:
    """`quick` (the start path, without `site`): a trust log that moved on since the snapshot is
    not verified here (that needs blake3) but raises Slow, for the full path to verify it."""
    from agentstack._guard import Deny, snapshot_header

    try:
        snapshot: Any = snapshot_header(data, layout.guard_snapshot(state_home, root))
    except Deny as exc:
        raise ValueError(str(exc)) from None
    if quick and (snapshot.get("trust_head") is None
                  or snapshot.get("trust_head") != _guard._log_head(state_home)):
        raise Slow("the trust log moved on since the snapshot: verified on the full path")
    digest = snapshot.get("digest") if isinstance(snapshot, dict) else None
    if not isinstance(digest, str) or not digest.startswith("b3:") or "/" in digest:
        raise ValueError("the guard snapshot names no trusted digest; run 'agentstack trust'")
    consent_data = _read_private(layout.consent_file(state_home, digest))
    if consent_data is None:
        raise ValueError(f"no reviewed consent for {digest}; run 'agentstack trust'")
    consent = loads(consent_data)
    servers = consent.get("servers") if isinstance(consent, dict) else None
    if not isinstance(servers, dict) or server not in servers:
        raise ValueError(f"server {server!r} is not in the trusted consent; run 'agentstack trust'")
    policy = ToolPolicy.of(servers[server])
    trusted = _trust_holds(snapshot, state_home)
    if not trusted:
        # Revoked, or the trust log no longer proves this digest: the server is not started
        # (its pins, taken at trust, would otherwise still list it).
        raise ValueError(f"{digest} is not trusted for this project now (revoked, or the trust "
                         "log does not prove it); run 'agentstack trust'")
    pins = load_pins(state_home, root, server)

    def save(pins: Pins, pending: bool) -> None:
        save_pins(state_home, root, server, pins, pending=pending)

    def receipt(record: dict[str, Any]) -> None:
        append_receipt(state_home, root, record)

    return Setup(server=server, pins=pins, policy=policy, digest=digest, trusted=trusted,
                 save=save, receipt=receipt, root=root, consent=consent)


def _trust_holds(snapshot: dict[str, Any], state_home: str) -> bool:
    try:
        head = _guard.check_trust(snapshot, state_home)
    except Exception:  # noqa: BLE001 - not proved trusted: no new pin is recorded
        return False
    if head is not None:
        _record_trust_head(state_home, snapshot, head)
    return True


def _record_trust_head(state_home: str, header: dict[str, Any], head: list[Any]) -> None:
    """The trust log moved on (another project's `trust`) and was verified again: record its head
    in the snapshot as the guard does once it re-verified (`_guard.decide`), so the next start
    proves the trust by the head alone (the quick start). Only the head changes, in the snapshot
    read now, unless `trust` or `apply` wrote another since; best effort."""
    try:
        root = header["project"]
        snapshot, trust_home, writable = _guard._load_state(state_home, root)
        if writable is None or trust_home != state_home or any(
            snapshot.get(k) != header.get(k) for k in ("project", "digest", "trust_source")
        ):
            return
        fresh = {k: v for k, v in snapshot.items() if k != _guard._TABLE}
        fresh["files"] = _guard.all_files(snapshot)
        fresh["trust_head"] = head
        _guard._more().refresh_snapshot(writable[0], writable[1], fresh)
    except Exception:  # noqa: BLE001, S110 - unrecorded: the next start verifies the log again
        pass


def _setup_from_run(root: str, server: str) -> Setup:
    """Inside `agentstack run` the state directory is closed: the relay runs in run's broker
    instead (`broker_address`), never in here."""
    raise ValueError("the state directory is closed here and agentstack run's broker was not "
                     "found")


def broker_address(root: str) -> tuple[int, str] | None:
    """(port, token) of `agentstack run`'s server broker, from run's read-only copies (proved to
    be run's own, as the guard proves them); None outside run."""
    from agentstack import _guard

    try:
        ro = _guard._run_copies()
        data = _read_private(os.path.join(ro, layout.RUN_PINS))
    except (_guard.Deny, OSError):
        return None
    if data is None:
        return None
    try:
        bundle = loads(data)
        broker = bundle["broker"]
        port, token = broker["port"], broker["token"]
    except (ValueError, KeyError, TypeError):
        return None
    if bundle.get("project") != os.path.realpath(root) or not isinstance(port, int) or not (
        isinstance(token, str)
    ):
        return None
    return port, token


def pump_to_broker(address: tuple[int, str], server: str) -> int:
    """Inside `run`: hand this server's stdio to the broker, which runs the relay and the server
    outside the harness's sandbox; only bytes pass here."""
    import socket

    port, token = address
    try:
        conn = socket.create_connection(("127.0.0.1", port), timeout=30)
    except OSError as exc:
        sys.stderr.write(f"agentstack launch: {server}: cannot reach agentstack run's server "
                         f"broker: {exc.strerror or exc}\n")
        return 1
    conn.settimeout(None)
    rfile, wfile = conn.makefile("rb"), conn.makefile("wb")
    wfile.write((canonical({"server": server, "token": token}) + "\n").encode())
    wfile.flush()
    answer = _parse_plain(rfile.readline(64 * 1024))
    if answer is None or answer.get("ok") is not True:
        why = answer.get("error") if answer is not None else None
        sys.stderr.write(f"agentstack launch: {server}: not started: "
                         f"{why if isinstance(why, str) else 'the broker refused'}\n")
        return 1
    out = sys.stdout.buffer

    def upstream() -> None:
        try:
            while True:
                chunk = os.read(0, 65536)  # what is there (nothing was read from stdin yet)
                if not chunk:
                    break
                wfile.write(chunk)
                wfile.flush()
        except (OSError, ValueError):
            pass
        finally:
            try:  # noqa: SIM105 - contextlib: an import more at start-up
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    _thread.start_new_thread(upstream, ())
    try:
        while True:
            chunk = rfile.read1(65536)
            if not chunk:
                break
            out.write(chunk)
            out.flush()
    except (OSError, ValueError):
        pass
    return 0


def _parse_plain(line: bytes) -> dict[str, Any] | None:
    try:
        value = loads(line)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


# ----------------------------------------------------------------------------- the checks


class Relay:
    """The checks, on whole lines: `from_harness` and `from_server` each return the lines to send
    on (to the server, to the harness). Thread-safe; no I/O of its own but `setup.save`/`receipt`."""

    def __init__(self, setup: Setup, secrets: Iterable[str] = ()) -> None:
        self.setup = setup
        self.lock = _thread.allocate_lock()
        self.pending: dict[str, tuple[str, str, float, int]] = {}  # id -> (method, tool, t, bytes)
        self.withheld: dict[str, set[str]] = {}  # kind -> keys withheld from the last listing
        self.recording: set[str] = set()  # kinds this session records (no pin for them yet)
        self.notices: list[str] = []  # said on stderr by the process (a change, a refusal)
        self.changes = Pins(digest=setup.digest)  # what this session withheld, for `trust`
        self.secrets = [s for s in secrets if len(s) >= 4]
        self._escaped = [_guard.dumps(s, ensure_ascii=False)[1:-1] for s in self.secrets]
        self._ascii = [_guard.dumps(s)[1:-1] for s in self.secrets]

    # -- harness -> server

    def from_harness(self, line: bytes) -> tuple[list[bytes], list[bytes]]:
        """(lines for the server, lines answered to the harness by the relay itself)."""
        message = _parse(line)
        if message is None:
            return [], []
        if "method" in message and "id" in message:
            key = _id_key(message["id"])
            if key is None:
                return [], []
            method = message["method"]
            if not isinstance(method, str):
                return [], [_error(message["id"], INVALID_PARAMS, "the method is not a string")]
            tool = ""
            if method == "tools/call":
                params = message.get("params")
                named = params.get("name") if isinstance(params, dict) else None
                if not isinstance(named, str):
                    return [], [_error(message["id"], INVALID_PARAMS, "tools/call names no tool")]
                tool = named
                refusal = self.refuse_call(tool)
                if refusal is not None:
                    self._receipt(tool, "deny", len(line), 0)
                    return [], [_error(message["id"], REFUSED, refusal)]
            elif method in LISTINGS and self.setup.closed is not None:
                return [], [_error(message["id"], REFUSED, self._closed_message())]
            with self.lock:
                self.pending[key] = (method, tool, time.time(), len(line))
            return [_line(line)], []
        if "method" in message or "id" in message:
            return [_line(line)], []  # a notification, or the harness answering the server
        return [], []

    def refuse_call(self, tool: str) -> str | None:
        name = self.setup.server
        if not self.setup.policy.allows(tool):
            return f"agentstack: tool {tool!r} of server {name!r} is not allowed (servers.{name}.tools)"
        if self.setup.closed is not None:
            return self._closed_message()
        pinned = (self.setup.pins.lists.get("tools", {}) if self.setup.pins else {})
        with self.lock:
            withheld = tool in self.withheld.get("tools", set())
        if withheld:
            return (f"agentstack: tool {tool!r} of server {name!r} changed since it was pinned; "
                    f"review it with '{REVIEW}'")
        if tool not in pinned:
            return f"agentstack: tool {tool!r} of server {name!r} was never listed and pinned"
        return None

    # -- server -> harness

    def from_server(self, line: bytes) -> list[bytes]:
        message = _parse(line)
        if message is None:
            return []
        if "method" in message:
            return [self._redacted(line, message)]  # a request or notification of the server's
        if "id" not in message:
            return []
        key = _id_key(message["id"])
        with self.lock:
            request = self.pending.pop(key, None) if key is not None else None
        if request is None:
            return []  # an answer to nothing the harness asked: dropped
        method, tool, started, size = request
        if method in LISTINGS:
            return [self._listing(method, message)]
        if method == "tools/call":
            self._receipt(tool, "allow", size, len(line), started)
        return [self._redacted(line, message)]

    def abandon(self, msg_id: Any, text: str) -> list[bytes]:
        """The harness's request `msg_id` gets no answer from the server (a remote's exchange
        failed, or what it sent did not pass): a JSON-RPC error instead, at most once."""
        key = _id_key(msg_id)
        with self.lock:
            request = self.pending.pop(key, None) if key is not None else None
        if request is None:
            return []
        method, tool, started, size = request
        if method == "tools/call":
            self._receipt(tool, "error", size, 0, started)
        return [_error(msg_id, -32603, self._redact_text(text))]

    def _listing(self, method: str, message: dict[str, Any]) -> bytes:
        msg_id = message["id"]
        if "error" in message:
            error = message["error"]
            text = error.get("message") if isinstance(error, dict) else None
            code = error.get("code") if isinstance(error, dict) else None
            return _error(
                msg_id,
                code if isinstance(code, int) and not isinstance(code, bool) else -32603,
                self._redact_text(text if isinstance(text, str) else "the server failed"),
            )
        try:
            result = self.check_listing(method, message.get("result"))
        except ValueError as exc:
            return _error(msg_id, REFUSED, f"agentstack: {self.setup.server}: {exc}")
        return (canonical({"jsonrpc": "2.0", "id": msg_id, "result": result}) + "\n").encode()

    def check_listing(self, method: str, result: Any) -> dict[str, Any]:
        """The listing to forward: only entries that match the pin (or are recorded now) and the
        tool policy allows. Raises ValueError when the listing cannot be checked."""
        if self.setup.closed is not None:
            raise ValueError(self._closed_message())
        kind, key_field = LISTINGS[method]
        if not isinstance(result, dict) or not isinstance(result.get(kind), list):
            raise ValueError(f"a {method} answer without its {kind} list; nothing listed")
        cursor = result.get("nextCursor")
        if cursor is not None and not isinstance(cursor, str):
            raise ValueError(f"a {method} answer with a malformed cursor; nothing listed")
        entries: dict[str, Any] = {}
        for entry in result[kind]:
            key = entry.get(key_field) if isinstance(entry, dict) else None
            if not isinstance(key, str) or not key or key in entries:
                raise ValueError(f"a {method} answer with an unnamed or repeated entry; nothing listed")
            if self._holds_secret(canonical(entry)):
                raise ValueError(f"a {method} answer holding a secret; nothing listed")
            entries[key] = entry
        with self.lock:
            return self._check_entries(method, kind, entries, cursor)

    def _check_entries(
        self, method: str, kind: str, entries: dict[str, Any], cursor: str | None
    ) -> dict[str, Any]:
        setup = self.setup
        pins = setup.pins if setup.pins is not None else Pins(digest=setup.digest)
        pinned = pins.lists.get(kind)
        if pinned is None and (setup.trusted or kind in self.recording):
            self.recording.add(kind)  # the first listing under a trusted consent: recorded
        if kind in self.recording:
            pinned = pins.lists.setdefault(kind, {})
            added = {k: v for k, v in entries.items() if k not in pinned}
            if added:
                pinned.update(added)
                if not pins.digest:
                    pins.digest = setup.digest
                setup.pins = pins
                self._save(pins, pending=False)
        if pinned is None:
            raise ValueError(
                f"{kind} were never pinned and this consent is not proved trusted here; run "
                f"'{REVIEW}'")
        passed, changed = [], {}
        for key, entry in entries.items():
            old = pinned.get(key)
            if old is not None and canonical(old) == canonical(entry):
                if kind != "tools" or setup.policy.allows(key):
                    passed.append(entry)
            else:
                changed[key] = entry
        withheld = self.withheld.setdefault(kind, set())
        if cursor is None:
            withheld.clear()
        withheld.update(changed)
        if changed:
            self._keep_pending(kind, changed)
            what = ", ".join(sorted(changed))
            self.notices.append(
                f"agentstack: server {setup.server!r} changed {kind} since they were pinned "
                f"({what}); withheld until '{REVIEW}' reviews the change")
        out: dict[str, Any] = {kind: passed}
        if cursor is not None:
            out["nextCursor"] = cursor
        return out

    def _keep_pending(self, kind: str, changed: dict[str, Any]) -> None:
        self.changes.lists.setdefault(kind, {}).update(changed)
        self._save(self.changes, pending=True)

    def _save(self, pins: Pins, *, pending: bool) -> None:
        if self.setup.save is None:
            return
        try:
            self.setup.save(pins, pending)
        except Exception as exc:  # noqa: BLE001 - unrecorded: the next start records again
            self.notices.append(f"agentstack: cannot record the pins of {self.setup.server!r}: {exc}")

    # -- helpers

    def _closed_message(self) -> str:
        return (f"agentstack: server {self.setup.server!r} lists nothing: {self.setup.closed}")

    def _receipt(self, tool: str, decision: str, sent: int, received: int,
                 started: float | None = None) -> None:
        if self.setup.receipt is None:
            return
        now = time.time()
        record: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            "kind": "tool", "server": self.setup.server, "tool": tool, "decision": decision,
            "bytes_sent": sent, "bytes_received": received,
        }
        if started is not None:
            record["ms"] = round((now - started) * 1000, 3)
        try:  # noqa: SIM105 - contextlib: an import more at start-up
            self.setup.receipt(record)
        except Exception:  # noqa: BLE001, S110 - a receipt lost never changes a decision
            pass

    def _holds_secret(self, text: str) -> bool:
        return any(s in text for s in (*self.secrets, *self._escaped))

    def _redact_text(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return text

    def _redacted(self, line: bytes, message: dict[str, Any]) -> bytes:
        """The line as it came, or re-written without the server's secrets in it."""
        if self.secrets:
            text = line.decode("utf-8", "replace")
            if any(s in text for s in (*self.secrets, *self._escaped, *self._ascii)):
                return (canonical(_scrub(message, self._redact_text)) + "\n").encode()
        return _line(line)


def _scrub(value: Any, redact: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_scrub(v, redact) for v in value]
    if isinstance(value, dict):
        return {redact(k): _scrub(v, redact) for k, v in value.items()}
    return value


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        message = loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return None
    return message


def _id_key(msg_id: Any) -> str | None:
    if isinstance(msg_id, bool) or not isinstance(msg_id, int | str):
        return None
    return canonical(msg_id)


def _line(line: bytes) -> bytes:
    return line if line.endswith(b"\n") else line + b"\n"


def _error(msg_id: Any, code: int, message: str) -> bytes:
    body = {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}
    return (canonical(body) + "\n").encode("utf-8")


# ------------------------------------------------------- a project's server, for its project only


def outside_project(root: str, parent: int | None = None) -> str | None:
    """Why the harness that started this relay is not running for the project at `root` (None:
    it is). A server rendered into a user-level file the harness reads in every folder (Cline's
    cline_mcp_settings.json) starts only where the harness works in that project.

    The harness is the relay's parent (measured with Cline 3.0.65: it starts each server as its
    own child, the server's cwd and environment being its own). The project it runs for is the
    one `layout.find_project` finds from the working directory the kernel reports for that
    process (/proc/PID/cwd): a folder cannot set it by any file or variable. Nothing known (the
    parent gone, /proc unreadable) refuses."""
    pid = os.getppid() if parent is None else parent
    try:
        where = os.readlink(f"/proc/{pid}/cwd")
    except OSError as exc:
        return f"the harness's working directory cannot be read ({exc.strerror}); refused"
    if parent is None and os.getppid() != pid:
        return "the harness that started this server is gone; refused"
    if where.endswith(" (deleted)") or not os.path.isabs(where):
        return f"the harness's working directory {where!r} is gone; refused"
    found = layout.find_project(where)
    if found != os.path.realpath(root):
        return (f"the harness is running in {where}, which is not this server's project {root} "
                f"({'no project' if found is None else 'project ' + found} there): a "
                "project's servers start only where the harness runs in that project")
    return None


def refuse_start(server: str, reason: str, *, stdin: IO[bytes] | None = None,
                 stdout: IO[bytes] | None = None) -> int:
    """Stand in for a server that is not started: every request is answered with a JSON-RPC
    error naming the reason (notifications get nothing), until the harness closes the pipe."""
    harness_in = stdin if stdin is not None else sys.stdin.buffer
    harness_out = stdout if stdout is not None else sys.stdout.buffer
    message = f"agentstack: MCP server {server!r} not started: {reason}"
    sys.stderr.write(message + "\n")
    for line in read_lines(harness_in):
        request = _parse(line)
        if request is None or "id" not in request or "method" not in request:
            continue
        harness_out.write(_error(request["id"], REFUSED, message))
        harness_out.flush()
    return 1


# ----------------------------------------------------------------------------- the process


def read_lines(stream: IO[bytes]) -> Iterable[bytes]:
    """Lines of at most MAX_LINE bytes; a longer one is skipped whole."""
    while True:
        line = stream.readline(MAX_LINE + 1)
        if not line:
            return
        if len(line) > MAX_LINE and not line.endswith(b"\n"):
            while True:
                rest = stream.readline(MAX_LINE)
                if not rest or rest.endswith(b"\n"):
                    break
            continue
        if line.strip():
            yield line


if TYPE_CHECKING:
    Starter = Callable[[list[str], dict[str, str]], "subprocess.Popen[bytes]"]


def start_plain(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    import subprocess

    return subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0,
    )


def serve(relay: Relay, argv: list[str], env: dict[str, str], *, start: Starter = start_plain,
          stdin: IO[bytes] | None = None, stdout: IO[bytes] | None = None) -> int:
    """Run the server (`start`: how) and relay until it exits; its exit status."""
    harness_in = stdin if stdin is not None else sys.stdin.buffer
    harness_out = stdout if stdout is not None else sys.stdout.buffer
    out_lock = _thread.allocate_lock()
    try:
        child = start(argv, env)
    except OSError as exc:
        sys.stderr.write(f"agentstack launch: cannot start {argv[0]!r}: {exc.strerror}\n")
        return 1
    child_in, child_out = child.stdin, child.stdout
    assert child_in is not None and child_out is not None
    if not hasattr(child_out, "peek"):  # unbuffered: readline would read a byte at a time
        import io  # loaded by the interpreter already

        child_out = io.BufferedReader(child_out)  # type: ignore[type-var]

    def to_harness(lines: list[bytes]) -> None:
        if not lines:
            return
        with out_lock:
            harness_out.write(b"".join(lines))
            harness_out.flush()

    def say() -> None:
        while relay.notices:
            sys.stderr.write(relay.notices.pop(0) + "\n")

    def pump_in() -> None:
        try:
            for line in read_lines(harness_in):
                forward, answer = relay.from_harness(line)
                to_harness(answer)
                if forward:
                    child_in.write(b"".join(forward))
                    child_in.flush()
                say()
        except (OSError, ValueError):
            pass
        finally:
            try:  # noqa: SIM105 - contextlib: an import more at start-up
                child_in.close()
            except OSError:
                pass

    _thread.start_new_thread(pump_in, ())
    try:
        for line in read_lines(child_out):
            to_harness(relay.from_server(line))
            say()
    except (OSError, ValueError):
        pass
    finally:
        child_out.close()
    return child.wait()


class Slow(Exception):
    """Not the common start (agentstack.relayboot): the full path (`site`, the resolver, its
    messages) takes it."""

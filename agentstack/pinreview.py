"""What the relay withheld, for review: each server's pending listing against its pin, as lines.

The relay (`agentstack.relay`) keeps a changed or new tool, prompt or resource in
`<server>.pending.json` instead of listing it. `agentstack diff` and `trust` show each change
here as the text the model would read, and `trust` (once accepted) records it into the pin; the
next start of the server lists it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentstack import relay
from agentstack.paths import agentstack_home

_NOUNS = {"tools": "tool", "prompts": "prompt", "resources": "resource",
          "resourceTemplates": "resource template"}


@dataclass(frozen=True)
class PinChange:
    server: str
    kind: str
    key: str
    old: Any  # None: not pinned before
    new: Any

    @property
    def label(self) -> str:
        noun = _NOUNS.get(self.kind, self.kind)
        verb = "new" if self.old is None else "changed"
        return f"server {self.server}: {verb} {noun} {self.key}"

    def to_json(self) -> dict[str, Any]:
        return {"server": self.server, "kind": self.kind, "key": self.key, "old": self.old,
                "new": self.new}


def pending_changes(root: Path, servers: list[str]) -> list[PinChange]:
    """Every withheld entry of the given servers that still differs from its pin."""
    home = str(agentstack_home())
    changes: list[PinChange] = []
    for server in sorted(servers):
        try:
            pending = relay.load_pins(home, str(root), server, pending=True)
            pins = relay.load_pins(home, str(root), server)
        except (OSError, ValueError):
            continue
        if pending is None:
            continue
        for kind, entries in sorted(pending.lists.items()):
            pinned = pins.lists.get(kind, {}) if pins is not None else {}
            for key, entry in sorted(entries.items()):
                old = pinned.get(key)
                if old is None or relay.canonical(old) != relay.canonical(entry):
                    changes.append(PinChange(server, kind, key, old, entry))
    return changes


def _text_lines(value: Any) -> list[str]:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


def change_lines(change: PinChange) -> list[str]:
    """The change as lines: `- ` what was pinned, `+ ` what the server lists now, per field."""
    lines = [change.label]
    old = change.old if isinstance(change.old, dict) else {}
    new = change.new if isinstance(change.new, dict) else {}
    for field in sorted(set(old) | set(new)):
        if field in old and field in new and relay.canonical(old[field]) == relay.canonical(new[field]):
            continue
        if field in old:
            lines += [f"  - {field}: {line}" for line in _text_lines(old[field])]
        if field in new:
            lines += [f"  + {field}: {line}" for line in _text_lines(new[field])]
    return lines


def record(root: Path, changes: list[PinChange], digest: str) -> None:
    """Accepted: each change into its server's pin; the pending files removed."""
    home = str(agentstack_home())
    by_server: dict[str, list[PinChange]] = {}
    for change in changes:
        by_server.setdefault(change.server, []).append(change)
    for server, items in by_server.items():
        pins = relay.load_pins(home, str(root), server) or relay.Pins(digest=digest)
        for change in items:
            pins.lists.setdefault(change.kind, {})[change.key] = change.new
        pins.digest = digest
        relay.save_pins(home, str(root), server, pins)
        relay.drop_pending(home, str(root), server)


# ----------------------------------------------------------------------------- pins at `trust`
#
# The order (docs/mcp-relay.md, "Pins at trust"): `trust` shows the review and the user accepts it
# first; only then is each stdio server without a pin started, under its own sandbox made
# stricter (no network at all, every grant read-only but a private scratch directory that is its
# HOME and TMPDIR, nothing of $HOME or $AGENTSTACK_HOME), asked `initialize` and its listings, and
# stopped. Its listings are shown as text and accepted a second time; trust and the pins are then
# recorded together. A server that cannot be listed refuses the trust, unless the user says the
# pins are to be taken at its first run (`--pins-at-first-run`).

PROTOCOL = "2025-06-18"
PROBE_SECONDS = 20.0  # per server, idle machine; stretched by the load (agentstack.patience)
MAX_PAGES = 100
_CAPABILITY = {"tools/list": "tools", "prompts/list": "prompts", "resources/list": "resources",
               "resources/templates/list": "resources"}
_PROBE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TERM")


@dataclass
class Listing:
    """What one server listed at review (`lists`: kind -> key -> entry, everything it listed,
    denied tools too), or why it could not be listed (`error`)."""

    server: str
    lists: dict[str, dict[str, Any]]
    error: str | None = None
    denied: frozenset[str] = frozenset()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"server": self.server}
        if self.error is not None:
            out["error"] = self.error
        else:
            out["lists"] = self.lists
        return out


def unpinned_servers(root: Path, document: dict[str, Any]) -> list[str]:
    """The stdio servers of the document this project holds no pin for yet."""
    home = str(agentstack_home())
    out = []
    for name, entry in sorted(document.get("servers", {}).items()):
        if entry.get("transport") == "http" or not entry.get("command"):
            continue
        try:
            pinned = relay.load_pins(home, str(root), name)
        except (OSError, ValueError):
            pinned = None  # unreadable: listed again, and the pin rewritten once accepted
        if pinned is None:
            out.append(name)
    return out


def unpinned_remote_servers(root: Path, document: dict[str, Any]) -> list[str]:
    """The remote (URL) servers this project holds no pin for yet: not listed at review, their
    pins are taken when each first lists behind the relay (docs/mcp-relay.md)."""
    home = str(agentstack_home())
    out = []
    for name, entry in sorted(document.get("servers", {}).items()):
        if entry.get("transport") != "http":
            continue
        try:
            pinned = relay.load_pins(home, str(root), name)
        except (OSError, ValueError):
            pinned = None
        if pinned is None:
            out.append(name)
    return out


def unchanged_servers(names: list[str], document: dict[str, Any],
                      before: dict[str, Any] | None) -> list[str]:
    """Those of `names` whose consent entry is the same in the last trusted document."""
    if not isinstance(before, dict):
        return []
    previous = before.get("servers")
    if not isinstance(previous, dict):
        return []
    return [name for name in names if name in previous
            and relay.canonical(previous[name]) == relay.canonical(document["servers"][name])]


def probe_servers(root: Path, document: dict[str, Any], digest: str,
                  servers: list[str], *, seconds: float | None = None) -> list[Listing]:
    """Each server started confined for review and asked for its listings (never raises: a
    failure is that server's `error`). Only call once the user accepted the rest of the review.
    `seconds`: how long each may take (default PROBE_SECONDS, stretched by the load)."""
    return [probe(root, document, digest, name, seconds=seconds) for name in servers]


def probe(root: Path, document: dict[str, Any], digest: str, name: str, *,
          seconds: float | None = None) -> Listing:
    import shutil
    import tempfile

    entry = document["servers"][name]
    try:
        env, secret_values = _probe_env(entry)
    except ValueError as exc:
        return Listing(name, {}, error=str(exc))
    scratch = tempfile.mkdtemp(prefix="agentstack-review-")
    try:
        env.update(HOME=scratch, TMPDIR=scratch)
        return _probe_in(root, document, digest, name, env, secret_values, scratch, seconds)
    except Exception as exc:  # noqa: BLE001 - whatever failed, the server was not listed
        return Listing(name, {}, error=f"{type(exc).__name__}: {exc}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _probe_env(entry: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    import os

    from agentstack.secrets import server_env

    env = {k: v for k, v in os.environ.items() if k in _PROBE_ENV}
    return env, server_env(entry.get("env") or {}, env)


def _probe_in(root: Path, document: dict[str, Any], digest: str, name: str,
              env: dict[str, str], secret_values: list[str], scratch: str,
              seconds: float | None) -> Listing:
    import os
    import tempfile

    from agentstack import layout, serverbox
    from agentstack.patience import scaled

    entry = document["servers"][name]
    argv = [str(entry["command"]), *(str(a) for a in entry.get("args", []))]
    user_level = os.path.realpath(root) == os.path.realpath(layout.home())
    cwd = scratch if user_level else os.path.realpath(os.path.join(root, entry.get("cwd", ".")))
    policy = serverbox.review_policy(str(root), document, name, argv, scratch, cwd=cwd)
    setup = relay.Setup(server=name, pins=None, policy=relay.ToolPolicy.of(entry), digest=digest,
                        trusted=True)
    checks = relay.Relay(setup, secret_values)
    with tempfile.TemporaryFile() as errors:
        try:
            child = serverbox.start(str(root), document, name, argv, env, cwd=cwd, policy=policy,
                                    stderr=errors.fileno())
        except serverbox.ServerConfinementError as exc:
            if exc.stage == "exec":
                return Listing(name, {}, error=f"cannot start it: {exc}")
            return Listing(name, {}, error=f"its sandbox cannot be enforced here: {exc}")
        talk = _Conversation(child, checks,
                             scaled(PROBE_SECONDS) if seconds is None else seconds)
        try:
            problem = talk.run()
        finally:
            talk.stop()
        if problem is not None:
            errors.seek(0)
            said = [line for line in errors.read(64 * 1024).decode("utf-8", "replace")
                    .splitlines() if line.strip()]
            if said:
                problem += f" (its last line on stderr: {checks._redact_text(said[-1])[:300]})"
            return Listing(name, {}, error=problem)
    lists = setup.pins.lists if setup.pins is not None else {}
    denied = frozenset(k for k in lists.get("tools", {}) if not setup.policy.allows(k))
    return Listing(name, lists, denied=denied)


class _Conversation:
    """`initialize`, then each listing the server declares (tools always), pages followed; every
    answer through the relay's own checks, which record the entries."""

    def __init__(self, child: Any, checks: relay.Relay, seconds: float) -> None:
        import queue
        import threading
        import time

        self.child = child
        self.checks = checks
        self.deadline = time.monotonic() + seconds
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True, name="agentstack-review").start()

    def _read(self) -> None:
        try:
            for line in relay.read_lines(self.child.stdout):
                self.lines.put(line)
        except (OSError, ValueError):
            pass
        self.lines.put(None)

    def _send(self, line: bytes) -> None:
        self.child.stdin.write(line)
        self.child.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The answer (as the relay passes it on), or raises ValueError saying why not."""
        import queue
        import time

        self.next_id += 1
        msg_id = f"agentstack-review-{self.next_id}"
        line = (relay.canonical({"jsonrpc": "2.0", "id": msg_id, "method": method,
                                 "params": params}) + "\n").encode()
        forward, _ = self.checks.from_harness(line)
        self._send(b"".join(forward))
        while True:
            left = self.deadline - time.monotonic()
            try:
                got = self.lines.get(timeout=max(left, 0.001))
            except queue.Empty:
                raise ValueError(f"no answer to {method} in time") from None
            if got is None:
                raise ValueError(f"it closed its output before answering {method} "
                                 f"(exit status {self.child.poll()})")
            message = relay._parse(got)
            if message is not None and "method" in message and "id" in message:
                # The server asks something (roots, sampling): nothing is offered at review.
                self._send(relay._error(message["id"], -32601, "not available during review"))
                continue
            for out in self.checks.from_server(got):
                answer = relay._parse(out)
                if answer is not None and answer.get("id") == msg_id:
                    if "error" in answer:
                        error = answer["error"]
                        text = error.get("message") if isinstance(error, dict) else None
                        raise ValueError(f"{method} failed: {text}")
                    result = answer.get("result")
                    if not isinstance(result, dict):
                        raise ValueError(f"{method} answered no result")
                    return result

    def run(self) -> str | None:
        try:
            init = self.request("initialize", {
                "protocolVersion": PROTOCOL, "capabilities": {},
                "clientInfo": {"name": "agentstack-review", "version": "1"}})
            self._send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
            capabilities = init.get("capabilities")
            declared = capabilities if isinstance(capabilities, dict) else {}
            for method, capability in _CAPABILITY.items():
                if method != "tools/list" and capability not in declared:
                    continue
                params: dict[str, Any] = {}
                for _ in range(MAX_PAGES):
                    result = self.request(method, params)
                    cursor = result.get("nextCursor")
                    if not isinstance(cursor, str):
                        break
                    params = {"cursor": cursor}
                else:
                    return f"{method} did not end after {MAX_PAGES} pages"
        except (OSError, ValueError) as exc:
            return str(exc) if isinstance(exc, ValueError) else f"cannot write to it: {exc}"
        return None

    def stop(self) -> None:
        import contextlib

        for stream in (self.child.stdin, self.child.stdout):
            with contextlib.suppress(OSError):
                stream.close()
        if self.child.poll() is None:
            self.child.kill()
        self.child.wait()


def listing_lines(listing: Listing) -> list[str]:
    """A server's listing as the text the model reads, every string sanitized for the terminal."""
    from agentstack.sanitize import sanitize

    if listing.error is not None:
        return [f"server {listing.server}: NOT LISTED at review: {sanitize(listing.error)}"]
    counts = ", ".join(f"{len(v)} {_NOUNS.get(k, k)}(s)" for k, v in sorted(listing.lists.items()))
    lines = [f"server {listing.server} lists {counts or 'nothing'}:"]
    for kind, entries in sorted(listing.lists.items()):
        for key, entry in sorted(entries.items()):
            note = (f"  (denied by servers.{listing.server}.tools: never shown to the model)"
                    if kind == "tools" and key in listing.denied else "")
            lines.append(f"  {_NOUNS.get(kind, kind)} {sanitize(key)}{note}")
            fields = entry if isinstance(entry, dict) else {}
            named_by = relay.KEY_FIELDS.get(kind)
            for field in sorted(fields):
                if field == named_by:
                    continue  # the key, shown above
                value = fields[field]
                text = value.split("\n") if isinstance(value, str) else _text_lines(value)
                lines += [f"    {sanitize(field)}: {sanitize(text[0])}",
                          *(f"    {sanitize(t)}" for t in text[1:])]
    return lines


def record_listings(root: Path, listings: list[Listing], digest: str) -> None:
    """Accepted with the trust: each listing as its server's pin, under the digest trusted."""
    home = str(agentstack_home())
    for listing in listings:
        if listing.error is None:
            relay.save_pins(home, str(root), listing.server, relay.Pins(listing.lists, digest))
            relay.drop_pending(home, str(root), listing.server)

"""The guard snapshot: what the guard compares against on every tool call.

Written by `trust` and `apply --write` to $AGENTSTACK_HOME/projects/<id>/guard.json — never inside
the project, which the agent can write. It holds the trusted digest, the trust-log head at the time,
a fingerprint of the manifest, the lock, every pinned project file and every rendered file, the
locked server names, and the compiled tool policy. The fingerprint code is the guard's own, so the
two can never disagree on what "unchanged" means.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agentstack import harnesses as _harnesses
from agentstack.fingerprints import SNAPSHOT_VERSION, encode_snapshot, fingerprint, keys_view
from agentstack.fingerprints import canonical as _canonical
from agentstack.fingerprints import sha256_hex as _sha
from agentstack.fsutil import write_atomic
from agentstack.manifest.view import LOCK_NAME, MANIFEST_NAME
from agentstack.paths import (
    agentstack_home,
    ensure_private_dir,
    guard_snapshot_path,
    is_user_root,
    project_state_dir,
)
from agentstack.protect import compile_rules
from agentstack.sandbox.credentials import GUARD_DENY_PATHS

# Credential stores, histories and shell start-up files the guard never lets a file tool touch: the
# very list `agentstack run` closes at the kernel (the sandbox's credential list and nono's deny
# groups, `agentstack.sandbox.credentials`), plus agentstack's own state.
CREDENTIAL_PATHS = GUARD_DENY_PATHS
SYSTEM_READ = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/opt", "/tmp", "/var/tmp")  # noqa: S108


def _resolve(root: Path, path: str) -> str:
    expanded = Path(os.path.expanduser(path))
    return os.path.realpath(expanded if expanded.is_absolute() else root / expanded)


def compile_policy(root: Path, document: dict[str, Any]) -> dict[str, Any]:
    """The file and host rules the guard applies to file and web tools (plain JSON)."""
    sandbox = document["sandbox"]
    home = Path.home()
    deny = [os.path.realpath(home / p) for p in CREDENTIAL_PATHS]
    deny.append(os.path.realpath(agentstack_home()))
    read = [
        str(root),
        *(_resolve(root, p) for p in sandbox["read_dirs"] + sandbox["read_files"]),
        *SYSTEM_READ,
    ]
    # The workdir is read-write, as under `agentstack run`.
    write = [
        str(root),
        *(_resolve(root, p) for p in sandbox["write_dirs"] + sandbox["write_files"]),
    ]
    network = sandbox["network"]
    return {
        "deny": sorted(set(deny)),
        "read": sorted(set(read)),
        "write": sorted(set(write)),
        "network_block": bool(network["block"]),
        "hosts": list(network["allow_domains"]),
        # What a file tool never writes (from harnesses.py).
        "protect": compile_rules(document.get("project", {}).get("harnesses")),
    }


def _pinned_files(root: Path, document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    files: dict[str, dict[str, Any]] = {
        str(root / MANIFEST_NAME): {"kind": "manifest", "role": "source"},
        str(root / LOCK_NAME): {"kind": "raw", "role": "source"},
    }
    from agentstack.lock.coderoots import root_files

    done: set[str] = set()
    for section in ("servers", "hooks"):
        for item in document[section].values():
            for entry in item.get("files", []):
                files[str(root / entry["path"])] = {"kind": "raw", "role": "source"}
            for tree in item.get("roots", []):  # code roots: every file the command may load
                if tree["path"] in done:
                    continue  # a tree several commands load (`code_roots`): once
                done.add(tree["path"])
                for entry in root_files(document, tree):
                    files[str(root / tree["path"] / entry["path"])] = {
                        "kind": "raw",
                        "role": "source",
                    }
    for entry in document["instructions"]:
        files[str(root / entry["path"])] = {"kind": "raw", "role": "source"}
    for plugin in document.get("plugins", {}).values():
        if plugin.get("source") == "path":  # a plugin in the project: its files are its source
            for entry in plugin["files"]:
                files[str(root / plugin["path"] / entry["path"])] = {"kind": "raw", "role": "source"}
    return files


def _watch_code_roots(root: Path, document: dict[str, Any], entries: dict[str, Any]) -> None:
    """Every directory of every code root, by its listing: a file a pull adds next to a pinned
    server script (`servers/json.py`, imported before the standard library's) is drift for the
    guard as it is for the lock. What the lock leaves out of a root (`coderoots.EXCLUDES`: caches
    the code writes as it runs, installed dependencies the review reports) is left out of the
    listing too (`skip`), unless the root is such a directory itself, pinned whole. Where the
    surface already lists a directory, its surface names are kept, so a directory created in a
    left-out one (`servers/node_modules/CLAUDE.md`) is still walked for them."""
    from agentstack.lock.coderoots import EXCLUDES

    done: set[str] = set()
    for section in ("servers", "hooks"):
        for item in document[section].values():
            for tree in item.get("roots", []):
                if tree["path"] in done:
                    continue  # a tree several commands load: walked once
                done.add(tree["path"])
                top = root / tree["path"]
                skip = [] if os.path.basename(tree["path"]) in EXCLUDES else sorted(EXCLUDES)
                for here, dirs, _ in os.walk(top):  # links are not followed (nor pinned so)
                    dirs[:] = sorted(d for d in dirs if d not in skip)
                    current = entries.get(here)
                    if (
                        current is not None
                        and current.get("kind") == "listing"
                        and current.get("names") is None
                        and current.get("skip") is None
                    ):
                        continue  # a surface tree's directory: listed whole already
                    entry: dict[str, Any] = {"kind": "listing", "skip": skip, "role": "source"}
                    if current is not None and current.get("names") is not None:
                        entry["names"] = current["names"]
                    entries[here] = entry


# Project files a harness loads that agentstack does not render, and the keys in them that would
# run code or switch the guard off (each harness description's `watched`). They must hold none of
# these (declare hooks and servers in agentstack.toml instead): the guard blocks while they do.
WATCHED: dict[str, tuple[tuple[str, str, tuple[tuple[str, ...], ...]], ...]] = {
    h.name: h.watched for h in _harnesses.ALL if h.watched
}


def _watched_files(root: Path, document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    files: dict[str, dict[str, Any]] = {}
    for harness in document["project"]["harnesses"]:
        for rel, fmt, guarded in WATCHED.get(harness, ()):
            files[str(root / rel)] = {
                "kind": "keys",
                "format": fmt,
                "keys": [],
                "guarded": sorted(json.dumps(list(g)) for g in guarded),
                "role": "watched",
            }
    return files


def plugin_servers(document: dict[str, Any]) -> list[str]:
    """The MCP servers the declared plugins bring (of the enabled kinds), by the name their
    harness gives them: Claude Code `plugin_<plugin>_<server>` (its tools are
    `mcp__plugin_<plugin>_<server>__<tool>`, measured with 2.1.332), Gemini CLI the server's own
    name. Reviewed with the plugin, so the guard lets their tools through as it does a locked
    server's."""
    out = []
    for plugin in (document.get("plugins") or {}).values():
        components = plugin.get("components", {})
        for server in components.get("servers", {}):
            if plugin.get("harness") == "claude-code":
                out.append(f"plugin_{components.get('name')}_{server}")
            elif plugin.get("harness") == "gemini-cli":
                out.append(str(server))
    return out


def _plugin_cache() -> str:
    """`$AGENTSTACK_CACHE/plugins/` (agentstack.apply.engine.plugin_cache_dir), with a trailing slash."""
    from agentstack.apply.engine import plugin_cache_dir

    return str(plugin_cache_dir()) + os.sep


def _rendered_files(root: Path) -> dict[str, dict[str, Any]]:
    from agentstack.apply.engine import load_ledger
    from agentstack.paths import is_user_root

    # The user-level setup's rendered files are user-level by definition: watched by their owned
    # keys and guarded containers only (the harness rewrites the rest of them constantly).
    user_setup = is_user_root(root)
    files: dict[str, dict[str, Any]] = {}
    plugins = _plugin_cache()
    for path, recorded in load_ledger(root).get("files", {}).items():
        if path.startswith(plugins) and recorded.get("kind") == "whole":
            # A plugin's materialized marketplace: the copy the harness loads, so a byte changed
            # or a file added there is drift, by file and by directory listing.
            files[path] = {"kind": "raw", "role": "rendered"}
            top = path[len(plugins) :].split(os.sep, 1)[0]
            for here, dirs, _ in os.walk(plugins + top):
                dirs.sort()
                files.setdefault(here, {"kind": "listing", "role": "rendered"})
            continue
        if recorded.get("kind") == "whole" and not path.startswith(str(root) + os.sep):
            # A whole file outside the project: a plugin's copy the harness loads (Codex's
            # installed copy) or a Gemini CLI extension's link to its plugin. Every directory
            # from the `agentstack-<key>` one down is watched by its listing too.
            files[path] = {"kind": "raw", "role": "rendered"}
            top = os.path.dirname(path)
            while top != os.path.dirname(top) and not os.path.basename(top).startswith(
                "agentstack-"
            ):
                top = os.path.dirname(top)
            if os.path.basename(top).startswith("agentstack-"):
                for here, dirs, _ in os.walk(top):
                    dirs.sort()
                    files.setdefault(here, {"kind": "listing", "role": "rendered"})
            elif user_setup:
                # A user-level skill's file: its directory is watched by its listing too (a file
                # added next to it is loaded with the skill).
                files.setdefault(os.path.dirname(path), {"kind": "listing", "role": "rendered"})
            continue
        if not path.startswith(str(root) + os.sep) and not (
            user_setup and recorded.get("kind") in ("keys", "block")
        ):
            continue  # user-level harness files: the harness itself rewrites them constantly
        kind = recorded.get("kind")
        if kind == "keys":
            files[path] = {
                "kind": "keys",
                "format": recorded["format"],
                "keys": sorted(recorded["keys"]),
                "guarded": sorted(recorded.get("guarded", [])),
                "role": "rendered",
            }
        elif kind == "block":
            files[path] = {"kind": "block", "role": "rendered"}
        else:
            files[path] = {"kind": "raw", "role": "rendered"}
    return files


def user_context(root: Path, document: dict[str, Any], entries: dict[str, Any]) -> dict[str, Any]:
    """What the user-level setup puts in every session's context besides its servers, for the
    guard: its skills by name; `carriers`, the rendered files and blocks that carry its skills
    and instructions (one found there again once the setup is revoked is refused); `context`,
    every watched entry whose change changes a session's context or hooks (those carriers, their
    directories' listings, and with hooks the files that hold them)."""
    inside = str(root) + os.sep
    carriers = {
        path: entry["kind"] for path, entry in sorted(entries.items())
        if entry.get("role") == "rendered" and entry["kind"] in ("raw", "block")
        and not path.startswith(inside)
    }
    dirs = {os.path.dirname(path) for path in carriers}
    context = set(carriers) | {p for p, e in entries.items() if e["kind"] == "listing" and p in dirs}
    if document["hooks"]:
        context |= {
            path for path, entry in entries.items()
            if entry["kind"] == "keys" and not path.startswith(inside)
            and any(json.loads(key)[:1] == ["hooks"] for key in entry["keys"])
        }
    return {"skills": sorted(document["skills"]), "carriers": carriers, "context": sorted(context)}


def _load_doc(path: str, fmt: str) -> Any:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return {}  # as the guard reads it: a missing file holds none of the keys
    if fmt == "json":
        return json.loads(data.decode("utf-8") or "{}")
    import tomllib

    return tomllib.loads(data.decode("utf-8"))


def expected_keys_view(path: str, entry: dict[str, Any]) -> dict[str, Any] | None:
    """The keys view as agentstack rendered it: owned values as on disk (just written), and each
    guarded container holding only what agentstack owns in it. None if the file cannot be read."""
    try:
        actual = keys_view(_load_doc(path, entry["format"]), entry)
    except (OSError, ValueError):
        return None
    owned = [tuple(json.loads(k)) for k in entry["keys"]]
    expected_guarded: dict[str, Any] = {}
    for key_id in entry.get("guarded", []):
        guarded = tuple(json.loads(key_id))
        if guarded in owned:
            expected_guarded[key_id] = actual["guarded"][key_id]
        else:
            children = {
                k[len(guarded)]
                for k in owned
                if len(k) > len(guarded) and k[: len(guarded)] == guarded
            }
            expected_guarded[key_id] = sorted(children) if children else None
    return {"owned": actual["owned"], "guarded": expected_guarded}


def foreign_entries(path: str, entry: dict[str, Any]) -> list[str]:
    """Entries in guarded containers that agentstack did not render (for warnings)."""
    expected = expected_keys_view(path, entry)
    if expected is None:
        return []
    actual = keys_view(_load_doc(path, entry["format"]), entry)["guarded"]
    out: list[str] = []
    for key_id, wanted in expected["guarded"].items():
        have = actual.get(key_id)
        container = ".".join(json.loads(key_id))
        if isinstance(have, list) and (wanted is None or isinstance(wanted, list)):
            out += [f"{container}.{name}" for name in have if name not in (wanted or [])]
        elif have != wanted:
            out.append(container)
    return out


def _fingerprint(path: str, entry: dict[str, Any]) -> dict[str, Any]:
    try:
        taken = fingerprint(path, entry)
    except (ValueError, UnicodeDecodeError):
        # A watched file the guard cannot read as JSON (e.g. with comments): it cannot tell what
        # is in it, so it denies until the file is readable (or gone).
        return {**entry, "stat": None, "hash": "unreadable", "hashed_ns": 0}
    if entry["kind"] != "keys":
        return taken
    expected = expected_keys_view(path, entry)
    expected_hash = None if expected is None else _sha(_canonical(expected))
    if expected_hash != taken["hash"]:
        # Something agentstack did not render sits in a guarded container: the guard must see a
        # difference on every call, so the stat shortcut is disabled for this file.
        taken = {k: v for k, v in taken.items() if k != "anchor"}
        taken["stat"] = None
    return {**taken, "hash": expected_hash}


# How long `write_snapshot` may wait for the filesystem's clock to tick past the files just written
# (one scheduler tick, 1-10 ms, on a kernel without fine-grained file timestamps; none with them).
MARK_WAIT_S = 0.02


class SettleMark:
    """The snapshot's settling mark (`agentstack._guard._mark_of`): a timestamp the filesystem
    holding `directory` gives a probe file after everything written there so far, strictly later
    than any timestamp it gave before the probe was opened.

    The racy-timestamp rule exists because a change made within the same timestamp tick as a
    file's stat leaves the stat as it was. The guard's default slack (RACY_SLACK_NS, 1 s of the
    system clock) covers any filesystem, so the snapshot `apply --write` takes right after its
    writes would prove nothing by stats alone for a second. The mark proves the same with the
    filesystem's own clock and granularity: a probe is opened there (an unnamed O_TMPFILE inode:
    nothing appears in the project, the directory does not change), its timestamps read
    (`floor`: no earlier write got a later one), then it is written again until its timestamps
    are past `floor`. Every stat key taken after that, and every change made after a stat key was
    taken, has timestamps at least the mark's; so a key on that device whose mtime and ctime are
    both *below* the mark can only change by getting different timestamps.

    Opened before the snapshot's other work (listing the surface) and taken (`take`) right before
    the first stat key, so a wait for the clock to tick overlaps that work (with fine-grained
    file timestamps, Linux 6.13+, there is none; else at most one scheduler tick). No mark (None)
    when the probe cannot be made (a filesystem without unnamed files, NFS or FAT), the
    timestamps are coarse (whole milliseconds: 1 s or 2 s on some filesystems, a tick too far
    away), the tick does not come within MARK_WAIT_S, or the mark is later than the system clock:
    the guard then keeps its 1 s slack, and settles the snapshot itself on a later call."""

    def __init__(self, directory: Path) -> None:
        self.fd: int | None = None
        self.floor = 0
        try:
            self.fd = self._open(str(directory))
            st = os.fstat(self.fd)
            self.floor = max(st.st_mtime_ns, st.st_ctime_ns)
            self.dev = st.st_dev
        except OSError:
            self.close()

    @staticmethod
    def _open(directory: str) -> int:
        """An unnamed file on `directory`'s filesystem: nothing appears in the project, and the
        directory itself does not change. (A filesystem without them, NFS or FAT, gives no mark.)"""
        tmpfile = getattr(os, "O_TMPFILE", 0)
        if not tmpfile:
            raise OSError("no O_TMPFILE on this platform")
        return os.open(directory, os.O_WRONLY | os.O_CLOEXEC | tmpfile, 0o600)

    def take(self) -> list[int] | None:
        """[st_dev, the mark's timestamp_ns], or None (see the class); closes the probe."""
        if self.fd is None:
            return None
        import time

        try:
            if self.floor % 1_000_000 == 0:
                return None  # coarse timestamps: a tick is too far away
            deadline = time.monotonic() + MARK_WAIT_S
            while True:
                os.write(self.fd, b"\0")  # sets mtime and ctime: now, on this filesystem's clock
                st = os.fstat(self.fd)
                mark = min(st.st_mtime_ns, st.st_ctime_ns)
                if mark > self.floor:
                    break
                if time.monotonic() >= deadline:
                    return None
                time.sleep(0.0005)
            if st.st_dev != self.dev or mark > time.time_ns():
                return None
            return [st.st_dev, mark]
        except OSError:
            return None
        finally:
            self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def write_snapshot(root: Path, document: dict[str, Any], digest: str) -> list[str]:
    """Write the snapshot; returns what sits in guarded containers without being rendered (the
    guard will block until it is gone), for the caller to warn about."""
    from agentstack.trust.store import TrustLog

    root = root.resolve()
    probe = SettleMark(root)  # opened after every write the snapshot fingerprints
    log = TrustLog(agentstack_home())
    count, head = log.head()
    try:
        size = log.path.stat().st_size
    except FileNotFoundError:
        size = 0
    # "log": the log trusts this pair now, so an unchanged log is proof enough for the guard.
    # "explicit": CI passed the digest; the guard then wants it passed again on every call.
    source = "log" if log.state_for(str(root), digest) == "trusted" else "explicit"
    entries = {
        **_pinned_files(root, document),
        **_rendered_files(root),
        **_watched_files(root, document),
    }
    from agentstack.surface.watch import snapshot_entries

    if not is_user_root(root):  # $AGENTSTACK_HOME is no directory a harness works in
        entries.update(snapshot_entries(root, document, entries))  # the harness surface, watched
    _watch_code_roots(root, document, entries)
    mark = probe.take()  # before the first stat key below is taken
    snapshot = {
        "v": SNAPSHOT_VERSION,
        "project": str(root),
        "digest": digest,
        "trust_source": source,
        "trust_head": [count, head, size],
        "servers": sorted([*document["servers"], *plugin_servers(document)]),
        # servers.NAME.tools: the tools the guard lets through by name (as the relay does).
        "tools": {
            name: server["tools"]
            for name, server in sorted(document["servers"].items())
            if server.get("tools") is not None
        },
        "policy": compile_policy(root, document),
        "files": {path: _fingerprint(path, entry) for path, entry in sorted(entries.items())},
    }
    if mark is not None:
        snapshot["mark"] = mark
    if is_user_root(root):
        snapshot["user"] = user_context(root, document, entries)
    foreign = [
        f"{path}: {item}"
        for path, entry in sorted(entries.items())
        if entry["kind"] == "keys"
        for item in foreign_entries(path, entry)
    ]
    ensure_private_dir(project_state_dir(root))
    # The guard's format (agentstack._guard.SNAPSHOT_MAGIC): a steady call parses the header and
    # an index of stat keys by directory, and decodes an entry only when its stat does not prove it.
    write_atomic(guard_snapshot_path(root), encode_snapshot(snapshot), 0o600)
    return foreign

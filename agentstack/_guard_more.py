"""The guard's less frequent paths, split from `agentstack._guard` so that a trusted, unchanged
call loads less bytecode: content hashes and fingerprints (when a stat moved, and when the snapshot
is written), the new-directory walk, the snapshot refresh, and the checks of file, pattern, patch,
URL and MCP-server arguments. `agentstack._guard` imports this module where it needs it and
re-exports every name here. Standard library only, like the guard.
"""

import os
import stat as _stat
import time

from agentstack._guard import (
    _TABLE,
    _UNSET,
    BLOCK_BEGIN,
    BLOCK_END,
    SNAPSHOT_MAGIC,
    Deny,
    _body_check,
    _mark_of,
    _racy,
    _sha,
    dumps,
    loads,
    stat_key,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    import re
    from typing import Any
else:
    Any = object


_REGEX: "dict[str, re.Pattern[str]]" = {}


_PATTERNS = {
    "control": r"[\x00-\x20\x7f]",
    "host_label": r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?",
    "ipv4": r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}",
    "url_in_text": r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]*|www\.[^\s\"'<>]+",
    "not_server_char": r"[^A-Za-z0-9_-]",
    "patch_header": r"\*\*\*\s*(Add File|Update File|Delete File|Move to):\s*(.+)",
    "url": r"([A-Za-z][A-Za-z0-9+.-]*):(//)?([^/?#]*)([/?#].*)?",
    "ipv6": r"\[([0-9A-Fa-f:.]+)\](?::([0-9]{0,5}))?",
    "port": r"[0-9]{0,5}",
}


def _rx(name: str) -> "re.Pattern[str]":
    """A compiled pattern, compiled (and `re` imported) the first time a check needs it."""
    pattern = _REGEX.get(name)
    if pattern is None:
        import re

        pattern = _REGEX[name] = re.compile(_PATTERNS[name])
    return pattern


def _canonical(value: Any) -> bytes:
    return dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    ).encode("utf-8")


def _canonical_names(names: list[str]) -> bytes:
    """_canonical(names) for a list of strings, without loading `json` (its encoder's own C
    string encoder, so the bytes are the same)."""
    try:
        from _json import encode_basestring
    except ImportError:
        return _canonical(names)
    return ("[" + ",".join(map(encode_basestring, names)) + "]").encode("utf-8")


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
        if kind == "listing":  # a surface directory: a new entry in it (or a named one) is drift
            names = os.listdir(path)
            skip = entry.get("skip")
            if skip is not None:  # a code root's directory: every entry the lock does not leave out
                return _sha(_canonical_names(sorted(n for n in names if n not in skip)))
            wanted = entry.get("names")
            if wanted is None:
                return _sha(_canonical_names(sorted(names)))
            # A surface name that is an empty directory loads nothing: as if absent (the guard
            # watches it whole from then on, `_new_directories`).
            return _sha(_canonical_names(sorted(
                n for n in names if n in wanted and not empty_directory(os.path.join(path, n))
            )))
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        if kind == "keys":  # a missing config file holds none of the keys: compare as empty
            return _sha(_canonical(keys_view({}, entry)))
        if kind == "listing" and (
            entry.get("empty") or (entry.get("names") is not None and entry.get("skip") is None)
        ):
            return _sha(b"[]")  # a directory gone holds none of the surface names
        return None
    if kind == "manifest":  # by meaning: comments, whitespace and quoting do not count
        if entry.get("raw") is not None and _sha(data) == entry["raw"]:
            return str(entry["hash"])  # the same bytes as when it was hashed: the same meaning
        return _manifest_hash(data)
    if kind == "keys":
        if entry["format"] == "json":
            doc = loads(data.decode("utf-8") or "{}")
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


def _manifest_hash(data: bytes) -> str:
    import tomllib

    return _sha(_canonical(tomllib.loads(data.decode("utf-8"))))


def shape(value: Any) -> Any:
    """A guarded container as the guard sees it: the names in it (or the value itself)."""
    return sorted(value) if isinstance(value, dict) else value


def keys_view(doc: Any, entry: dict[str, Any]) -> dict[str, Any]:
    """What of a shared config file the guard compares: the values of the keys agentstack owns,
    and the shape of each guarded container (a server or hook added next to them shows)."""
    return {
        "owned": {k: _key_value(doc, loads(k)) for k in entry["keys"]},
        "guarded": {g: shape(_key_value(doc, loads(g))) for g in entry.get("guarded", [])},
    }


def fingerprint(path: str, entry: dict[str, Any]) -> dict[str, Any]:
    """Used when the snapshot is written: the stat key, the content hash and when it was taken.
    An absent path also records its anchor: the nearest existing directory above it, whose stat
    (taken before the path was found absent) proves it still absent without probing it."""
    started = time.time_ns()
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        anchor = _anchor_of(path)
        if os.path.lexists(path):  # it appeared meanwhile
            return fingerprint(path, entry)
        absent = _sha(_canonical(keys_view({}, entry))) if entry["kind"] == "keys" else None
        taken = {**entry, "stat": None, "hash": absent, "hashed_ns": started}
        return {**taken, "anchor": anchor} if anchor is not None else taken
    if entry["kind"] == "manifest" and _stat.S_ISREG(st.st_mode):
        # Its meaning and its bytes, from one read: unchanged bytes need no TOML parse later.
        with open(path, "rb") as handle:
            data = handle.read()
        meaning = _manifest_hash(data)
        return {
            **entry,
            "stat": stat_key(st),
            "hash": meaning,
            "raw": _sha(data),
            "hashed_ns": started,
        }
    return {**entry, "stat": stat_key(st), "hash": content_hash(path, entry), "hashed_ns": started}


def _anchor_of(path: str) -> list[Any] | None:
    """[the nearest existing ancestor directory of `path`, its stat key], or None when it is not a
    plain directory (a link's own stat would not change when its target's entries do)."""
    here = os.path.dirname(path)
    while True:
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            parent = os.path.dirname(here)
            if parent == here:
                return None
            here = parent
            continue
        except OSError:
            return None
        return [here, stat_key(st)] if _stat.S_ISDIR(st.st_mode) else None


MAX_NEW_DIRECTORIES = 10_000


def empty_directory(path: str) -> bool:
    """`path` is a directory (not a link to one) with nothing in it: nothing a harness could load.
    Codex's sandbox makes such directories while a session runs, as the mount targets of the
    paths it keeps read-only (`.agents` in the workdir), and does not always remove them. False
    when it cannot be listed (fail closed: then it counts as an entry)."""
    try:
        if not _stat.S_ISDIR(os.lstat(path).st_mode):
            return False
        with os.scandir(path) as listing:
            return next(listing, None) is None
    except OSError:
        return False


def _new_directories(
    directory: str, names: list[str], files: dict[str, Any], started: int
) -> dict[str, Any] | None:
    """Directories below the watched `directory` that the snapshot does not watch (created since
    it was taken), as entries to watch from now on; None when one of them holds a surface name
    (a nested CLAUDE.md, a `.claude/` ...) that the snapshot does not pin: that is drift. More
    than MAX_NEW_DIRECTORIES new directories is drift too: a directory the guard cannot record
    would go unwatched from the next call on (a surface file created in it later unseen).
    A surface name in `directory` itself that is an empty directory the snapshot does not watch
    (a Codex mount target, `empty_directory`) is recorded as watched whole, empty: any entry
    that appears in it later is drift, its removal is not."""
    wanted = set(names)
    out: dict[str, Any] = {}
    stack: list[tuple[str, list[int] | None]] = [(directory, None)]
    while stack:
        here, key = stack.pop()
        try:
            with os.scandir(here) as listing:
                children = [(c.name, c.is_dir(follow_symlinks=False)) for c in listing]
        except FileNotFoundError:
            continue  # gone again: it holds nothing
        if key is None:
            for name, is_dir in children:
                full = os.path.join(here, name)
                if name not in wanted or not is_dir or full in files:
                    continue
                try:
                    found = stat_key(os.lstat(full))  # its stat before its listing
                except FileNotFoundError:
                    continue
                if not empty_directory(full):
                    return None  # a surface directory with something in it: drift
                out[full] = {
                    "kind": "listing",
                    "empty": True,
                    "role": "surface",
                    "stat": found,
                    "hash": _sha(b"[]"),
                    "hashed_ns": started,
                }
            children = [(n, d) for n, d in children if os.path.join(here, n) not in out]
        if key is not None:  # a new directory: no surface name may be in it
            for name, _ in children:
                if name in wanted and os.path.join(here, name) not in files:
                    return None
            if len(out) >= MAX_NEW_DIRECTORIES:
                return None  # fail closed: re-apply to take a new snapshot
            out[here] = {
                "kind": "listing",
                "names": names,
                "role": "surface",
                "stat": key,
                "hash": _sha(_canonical_names(sorted(n for n, _ in children if n in wanted))),
                "hashed_ns": started,
            }
        for name, is_dir in children:
            full = os.path.join(here, name)
            if not is_dir or name == ".git" or full in files:
                continue  # a watched directory is judged by its own entry
            try:
                stack.append((full, stat_key(os.lstat(full))))  # its stat before its listing
            except FileNotFoundError:
                continue
    return out


GLOB_CHARS = frozenset("*?[{")


def _normalise_server(name: str) -> str:
    """The server part of an MCP tool name, as Claude Code and Codex form it."""
    return _rx("not_server_char").sub("_", name)


def resolve_server(tool: str, servers: list[str]) -> str:
    """The one locked server an `mcp__<server>__<tool>` name belongs to, or Deny.

    Both harnesses name an MCP tool `mcp__` + the server's name with every character outside
    [A-Za-z0-9_-] replaced by `_` + `__` + the tool's name. A name is accepted only when it can be
    read one way: the server part is a locked server's name, unchanged by that replacement (else a
    server named with `_` where the locked one has `.` would read the same), and no other split
    point exists (no `__` or leading `_` after it, none inside the server's name), so no server
    outside the lock could have produced the same name."""
    rest = tool[5:]
    candidates = [s for s in servers if rest.startswith(_normalise_server(s) + "__")]
    if not candidates:
        server = rest.split("__", 1)[0]
        raise Deny(
            f"tool {tool!r} belongs to MCP server {server!r}, which is not in agentstack.lock; "
            "add it to agentstack.toml, lock and trust it"
        )
    if len(candidates) > 1:
        raise Deny(f"tool {tool!r} could belong to more than one locked server; denied")
    (server,) = candidates
    name = _normalise_server(server)
    tool_part = rest[len(name) + 2 :]
    if (
        name != server
        or "__" in name
        or name.endswith("_")
        or not tool_part
        or "__" in tool_part
        or tool_part.startswith("_")
        or sum(1 for s in servers if _normalise_server(s) == name) != 1
    ):
        raise Deny(
            f"tool {tool!r} cannot be tied to exactly one locked server (a server outside the "
            "lock could have the same tool name); name servers with [a-z0-9-] only"
        )
    return server


def copilot_server(tool: str, servers: list[str]) -> str:
    """The one locked server a Copilot `<server>-<tool>` name belongs to, or Deny. The name is
    accepted only when it splits one way: a locked server's name, one '-', a tool name without
    '-' (else a server outside the lock, named with a '-', could produce the same name)."""
    server, _, rest = tool.partition("-")
    if server not in servers:
        raise Deny(
            f"tool {tool!r} belongs to MCP server {server!r}, which is not in agentstack.lock; "
            "add it to agentstack.toml, lock and trust it"
        )
    if not rest or "-" in rest:
        raise Deny(
            f"tool {tool!r} cannot be tied to exactly one locked server (a server outside the "
            "lock could have the same tool name); for Copilot, name servers and tools without '-'"
        )
    return server


def _path_text(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value or "\0" in value:
        raise Deny(f"{key!r} is not a path (a non-empty string); denied")
    return value


def _absolute(path: str, cwd: str) -> str:
    """A tool's path as the harness reads it: `~` and `~/` are the home directory (any other `~`
    form is ambiguous), a relative path is relative to the session's directory."""
    if path.startswith("~"):
        if path != "~" and not path.startswith("~/"):
            raise Deny(f"{path!r} names another user's home; denied")
        path = _home() + path[1:]
    return os.path.normpath(os.path.join(cwd, path))


def _home() -> str:
    """The home `~` means. $HOME is what the harness expands `~` with, but the project's settings
    can set it: when it is not this account's home, `~` could be read two ways, and is denied."""
    import pwd

    account = pwd.getpwuid(os.getuid()).pw_dir
    env = os.environ.get("HOME") or account
    if os.path.realpath(env) != os.path.realpath(account):
        raise Deny(
            "a path starts with '~', but $HOME is not this account's home directory, so it could "
            "be read two ways; give the absolute path"
        )
    return account


def _under(path: str, prefixes: list[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in prefixes)


def _component(pattern: str, name: str) -> bool:
    if pattern == name:
        return True
    if not any(c in pattern for c in "*?["):
        return False
    from fnmatch import fnmatchcase

    return fnmatchcase(name, pattern)


def protected(path: str, rules: Any) -> bool:
    """`path` is in the write-protected set: what a harness loads as configuration or code, or
    what git executes, wherever it lies. `rules`: the snapshot policy's `protect`, compiled from
    the harness descriptions (agentstack.protect): [[components...], tail] each, `tail` meaning
    the components end the path (a file), else they may be followed by anything (a directory)."""
    if type(rules) is not list or not rules:
        raise Deny(
            "the guard snapshot holds no write-protected set (written by an older agentstack?); "
            "run 'agentstack apply --write'"
        )
    parts = path.split("/")
    count = len(parts)
    for rule in rules:
        if type(rule) is not list or len(rule) != 2 or type(rule[0]) is not list or not rule[0]:
            raise Deny("the guard snapshot's write-protected set is malformed; denied")
        sequence, tail = rule
        size = len(sequence)
        starts = [count - size] if tail else range(count - size + 1)
        for start in starts:
            if start >= 0 and all(
                _component(sequence[i], parts[start + i]) for i in range(size)
            ):
                return True
    return False


def check_path(policy: dict[str, Any], path: str, op: str) -> None:
    real = os.path.realpath(path)
    if _under(real, policy["deny"]) or _under(os.path.abspath(path), policy["deny"]):
        raise Deny(f"{op} of {path} is denied by the sandbox policy (a protected location)")
    protect = policy.get("protect")
    if op == "write" and (protected(os.path.abspath(path), protect) or protected(real, protect)):
        raise Deny(
            f"write of {path} is denied: it is harness configuration or a file git executes "
            "(declare hooks, servers and settings in agentstack.toml instead)"
        )
    allowed = policy["write"] if op == "write" else policy["read"] + policy["write"]
    if not _under(real, allowed):
        raise Deny(
            f"{op} of {path} is outside what the sandbox policy grants; add it to "
            f"[sandbox] {op}_dirs in agentstack.toml if it is needed"
        )


def check_pattern(policy: dict[str, Any], base: str, pattern: str, cwd: str) -> None:
    """A glob pattern is read where its fixed part points: the components before the first one
    with a wildcard, joined to the tool's base directory, checked like a path. A `..` after a
    wildcard could climb anywhere: denied."""
    if pattern.startswith("~"):
        full = _absolute(pattern, cwd)
    else:
        full = os.path.join(_absolute(base, cwd), pattern)
    fixed: list[str] = []
    parts = full.split("/")
    for index, part in enumerate(parts):
        if any(c in GLOB_CHARS for c in part) or "\\" in part:
            if ".." in parts[index:]:
                raise Deny(f"pattern {pattern!r} climbs with '..' after a wildcard; denied")
            break
        fixed.append(part)
    check_path(policy, os.path.normpath("/".join(fixed) or "/"), "read")


def check_patch(policy: dict[str, Any], arguments: dict[str, Any], cwd: str) -> None:
    """apply_patch: every file the patch adds, updates, deletes or moves to is a write."""
    # Wherever the harness puts the patch text (`input`, `patch`, `command` as a string or in an
    # argv list, or any other key): it must be there exactly once.
    texts = []
    for value in arguments.values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and "*** Begin Patch" in item:
                texts.append(item)
    if len(texts) != 1:
        raise Deny("apply_patch input holds no single patch the guard can read; denied")
    base = arguments.get("workdir", cwd)
    base = _absolute(_path_text(base, "workdir"), cwd)
    targets = []
    for line in texts[0].splitlines():
        stripped = line.strip()
        if not stripped.startswith("***"):
            continue
        if stripped in ("*** Begin Patch", "*** End Patch", "*** End of File"):
            continue
        match = _rx("patch_header").fullmatch(stripped)
        if match is None:
            raise Deny(f"apply_patch header {stripped[:80]!r} is not one the guard knows; denied")
        targets.append(match.group(2).strip())
    if not targets:
        raise Deny("apply_patch names no file; denied")
    for target in targets:
        check_path(policy, _absolute(_path_text(target, "patch file"), base), "write")


def check_url(policy: dict[str, Any], url: Any) -> None:
    """A URL read the way a WHATWG parser (Node's) reads it, or denied when it could be read more
    than one way: only http(s) with `//`, no whitespace, control characters or backslashes
    (WHATWG strips or rewrites them), no user info, no percent-encoded or non-ASCII host (decoded
    and IDNA-mapped), no IPv4 shorthand (`0x7f.1`, `2130706433`), no trailing dot."""
    if not isinstance(url, str) or not url or len(url) > 8192:
        raise Deny("the URL is not a string; denied")
    shown = url[:120]
    if _rx("control").search(url) or "\\" in url or not url.isascii():
        raise Deny(
            f"URL {shown!r} holds whitespace, control characters, a backslash or non-ASCII; denied"
        )
    match = _rx("url").fullmatch(url)
    if match is None or match.group(1).lower() not in ("http", "https") or not match.group(2):
        raise Deny(f"URL {shown!r} is not an http(s) URL with a host; denied")
    authority = match.group(3)
    if "@" in authority or "%" in authority:
        raise Deny(f"URL {shown!r} carries user info or an encoded host; denied")
    if authority.startswith("["):
        literal = _rx("ipv6").fullmatch(authority)
        if literal is None:
            raise Deny(f"URL {shown!r} has a malformed IPv6 host; denied")
        host = "[" + literal.group(1).lower() + "]"
    else:
        parts = authority.rsplit(":", 1) if ":" in authority else [authority]
        if len(parts) == 2 and not _rx("port").fullmatch(parts[1]):
            raise Deny(f"URL {shown!r} has a malformed port; denied")
        host = parts[0].lower()
        labels = host.split(".")
        if not host or not all(_rx("host_label").fullmatch(label) for label in labels):
            raise Deny(f"URL {shown!r} has a host that is not a plain name; denied")
        numeric = labels[-1].isdigit() or labels[-1].startswith("0x")
        if numeric and not _rx("ipv4").fullmatch(host):
            raise Deny(f"URL {shown!r} has an IPv4 address in a shorthand form; denied")
    if not policy["network_block"]:
        return
    for allowed in policy["hosts"]:
        allowed = allowed.lower()
        if host == allowed or (allowed.startswith("*.") and host.endswith(allowed[1:])):
            return
    raise Deny(
        f"{host!r} is not an allowed host of the sandbox policy; add it to "
        "[sandbox.network] allow_domains in agentstack.toml if it is needed"
    )


def check_host(policy: dict[str, Any], url: str) -> None:  # the earlier name, kept for callers
    check_url(policy, url)


def index_of(
    files: dict[str, Any], mark: list[int] | None
) -> tuple[list[Any], list[Any], Any, int, Any]:
    """The guard's index of `files` (see agentstack._guard.SNAPSHOT_MAGIC): the entries grouped by
    directory, each with the stat key that proves it unchanged by itself or -1s (racy, or no key:
    its content decides), the missing files whose anchor directory proves them still missing,
    and a function giving the (path, entry) at a position."""
    groups: list[Any] = []
    anchors: list[Any] = []
    pairs: list[tuple[str, dict[str, Any]]] = []
    unset = [_UNSET] * 5
    last = None
    for path in sorted(files, key=os.path.split):
        entry = files[path]
        directory, name = os.path.split(path)
        if directory != last:
            groups.append([directory, [], []])
            last = directory
        names, keys = groups[-1][1], groups[-1][2]
        key = entry.get("stat")
        anchor = entry.get("anchor")
        hashed = int(entry.get("hashed_ns") or 0)
        if key is not None and not _racy(key, hashed, mark):
            keys.extend(key)
        else:
            keys.extend(unset)
            if key is None and anchor is not None and not _racy(anchor[1], hashed, mark):
                anchors.append([len(pairs), anchor[0], anchor[1]])
        names.append(name)
        pairs.append((path, entry))
    return groups, anchors, pairs.__getitem__, len(pairs), lambda: pairs


def encode_snapshot(snapshot: dict[str, Any]) -> bytes:
    """The bytes of `snapshot` (its header fields and "files") in the guard's format 2."""
    files = snapshot["files"]
    header = {k: v for k, v in snapshot.items() if k not in ("files", _TABLE)}
    groups, anchors, pair, count, _ = index_of(files, _mark_of(snapshot))
    compact = (",", ":")
    head = dumps(header, sort_keys=True, separators=compact).encode("utf-8")
    index = dumps([groups, anchors], separators=compact).encode("utf-8")
    entries = "\n".join(
        dumps([*pair(n)], sort_keys=True, separators=compact) for n in range(count)
    ).encode("utf-8")
    body = head + index + entries
    first = SNAPSHOT_MAGIC + f"{len(head)} {len(index)} {len(entries)} {_body_check(body)}\n".encode()
    return first + body


def refresh_snapshot(path: str, read_key: list[int], snapshot: dict[str, Any]) -> bool:
    """Replace the snapshot at `path` with `snapshot` the way agentstack.fsutil.write_atomic does
    (a temp file created O_CREAT|O_EXCL|O_NOFOLLOW beside it, fsync'd, renamed over it, the
    directory fsync'd), unless the file is no longer the one read (stat key `read_key`): `trust` or
    `apply` wrote a newer one, which wins. True when written."""
    directory, name = os.path.split(path)
    data = encode_snapshot(snapshot)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        tmp = f".{name}.agentstack-{os.getpid()}-{time.time_ns()}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            if stat_key(os.stat(name, dir_fd=dir_fd, follow_symlinks=False)) != read_key:
                os.unlink(tmp, dir_fd=dir_fd)
                return False
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:  # noqa: SIM105
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
            raise
        os.fsync(dir_fd)
        return True
    finally:
        os.close(dir_fd)


# ------------------------------------------------------------------ the user-level setup


def user_servers(state: str) -> list[str] | None:
    """The servers of the user-level setup (`$AGENTSTACK_HOME/agentstack.toml`, whose root is the
    state directory itself) while its own trust holds and nothing it pinned or rendered changed
    (its manifest and lock, the owned keys and watched containers of the user-level configs);
    None when this machine holds no snapshot for it. Deny, naming why, otherwise."""
    from agentstack import _guard as guard

    root = os.path.realpath(state)
    path = guard.snapshot_path(state, root)
    if not os.path.lexists(path):
        return None
    try:
        snapshot, trust_home, _ = guard._load_state(state, root)
        if snapshot.get("project") != root:
            raise Deny(f"its snapshot is for {snapshot.get('project')}, not {root}")
        guard.check_trust(snapshot, trust_home)
        guard.check_files(snapshot, {})
    except Deny as exc:
        raise Deny(f"the user-level setup ({root}/agentstack.toml) does not hold: {exc}") from None
    return [s for s in snapshot["servers"] if isinstance(s, str)]


def user_server_call(tool: str, shadowed: list[str], state: str, first: Deny) -> None:
    """An `mcp__` tool that no project server resolves: allowed only when it resolves to exactly
    one server of the user-level setup that no project server shadows, and that setup holds;
    else `first` (the project's own refusal) or the user-level setup's reason."""
    from agentstack import _guard as guard

    path = guard.snapshot_path(state, os.path.realpath(state))
    if not os.path.lexists(path):
        raise first
    names = {_normalise_server(s) for s in shadowed}
    declared = [s for s in _declared_user_servers(path) if _normalise_server(s) not in names]
    if not any(tool[5:].startswith(_normalise_server(s) + "__") for s in declared):
        raise first  # not the user-level setup's either
    servers = user_servers(state)  # Deny when that setup does not hold
    assert servers is not None
    resolve_server(tool, [s for s in servers if _normalise_server(s) not in names])


def user_server_named(name: str, state: str, first: Deny) -> None:
    """A tool whose hook input names its server (Gemini CLI's `mcp_context`) and no project
    server has that name: allowed only when the user-level setup declares it and holds; else
    `first` (the project's own refusal) or the user-level setup's reason."""
    from agentstack import _guard as guard

    path = guard.snapshot_path(state, os.path.realpath(state))
    if not os.path.lexists(path) or name not in _declared_user_servers(path):
        raise first
    servers = user_servers(state)  # Deny when that setup does not hold
    if servers is None or name not in servers:
        raise first


def user_declared(state: str, first: Deny) -> list[str]:
    """The server names the user-level snapshot lists (unverified); none: `first`."""
    from agentstack import _guard as guard

    path = guard.snapshot_path(state, os.path.realpath(state))
    if not os.path.lexists(path):
        raise first
    return _declared_user_servers(path)


def droid_owner(tool: str, state: str, first: Deny) -> str:
    """The one server of the user-level setup a Droid tool `<server>___<tool>` names; else
    `first`."""
    from agentstack import _guard as guard

    path = guard.snapshot_path(state, os.path.realpath(state))
    if not os.path.lexists(path):
        raise first
    owners = [s for s in _declared_user_servers(path)
              if tool.startswith(s + "___") and len(tool) > len(s) + 3]
    if len(owners) != 1:
        raise first
    return owners[0]


def user_level_call(state: str, event: dict[str, Any], harness: str) -> None:
    """The user-level guard outside any agentstack project: a tool of a server the user-level
    setup declares is decided by that setup's trust and drift; every other call is left as it
    was (outside agentstack's projects, only the user-level setup is agentstack's to decide)."""
    from agentstack import _guard as guard

    context = event.get("mcp_context")
    if context is not None and "mcp_context" in guard.HOOK_INPUT.get(harness, ()):
        name = context.get("server_name") if isinstance(context, dict) else None
        path = guard.snapshot_path(state, os.path.realpath(state))
        if not isinstance(name, str) or not os.path.lexists(path):
            return  # not the user-level setup's server: not agentstack's to decide here
        if name in _declared_user_servers(path):
            user_server_named(name, state, Deny(f"MCP server {name!r} is not the user-level "
                                                "setup's"))
        return
    if "toolName" in event and "server-tool" in guard.HOOK_INPUT.get(harness, ()):
        named, _ = guard._tool_of(harness, event)  # Copilot CLI: `<server>-<tool>`
        path = guard.snapshot_path(state, os.path.realpath(state))
        if "-" not in named or not os.path.lexists(path):
            return
        if named.partition("-")[0] in _declared_user_servers(path):
            server = copilot_server(named, _declared_user_servers(path))
            user_server_named(server, state, Deny(f"tool {named!r} is not the user-level setup's"))
        return
    tool = event.get("tool_name")
    if (isinstance(tool, str) and "___" in tool
            and "server___tool" in guard.HOOK_INPUT.get(harness, ())):
        path = guard.snapshot_path(state, os.path.realpath(state))
        if not os.path.lexists(path):
            return
        owners = [s for s in _declared_user_servers(path)
                  if tool.startswith(s + "___") and len(tool) > len(s) + 3]
        if owners:  # else not the user-level setup's server: not agentstack's to decide here
            denied = Deny(f"tool {tool!r} cannot be tied to exactly one server of the "
                          "user-level setup")
            user_server_named(droid_owner(tool, state, denied), state, denied)
        return
    if not isinstance(tool, str) or not tool.startswith("mcp__"):
        return
    root = os.path.realpath(state)
    if not os.path.lexists(guard.snapshot_path(state, root)):
        return
    declared = _declared_user_servers(guard.snapshot_path(state, root))
    rest = tool[5:]
    if not any(rest.startswith(_normalise_server(s) + "__") for s in declared):
        return  # not a user-level server: not agentstack's to decide here
    servers = user_servers(state)
    assert servers is not None
    resolve_server(tool, servers)


def _declared_user_servers(path: str) -> list[str]:
    """The server names the user-level snapshot lists, read without verifying anything (only to
    tell whether a tool is the user-level setup's at all); unreadable: Deny."""
    from agentstack import _guard as guard

    try:
        snapshot = guard.snapshot_header(guard._read_snapshot_bytes(path), path)
        servers = snapshot["servers"]
        if not isinstance(servers, list):
            raise ValueError("no server list")
    except (OSError, ValueError, KeyError, TypeError, Deny) as exc:
        raise Deny(f"the user-level setup's guard snapshot {path} is unreadable ({exc}); "
                   "run 'agentstack apply --user --write'") from None
    return [s for s in servers if isinstance(s, str)]


def user_context_call(state: str, event: "dict[str, Any]", harness: str) -> None:
    """Every call and prompt, in or out of a project, while a user-level setup renders skills,
    instructions or hooks (they reach every session, whatever the directory): denied while a
    file or block carrying them changed behind agentstack's back (the session's context is not
    what was trusted), or while that setup is revoked or untrusted and one of them is there
    again (restored by hand). A `Skill` call naming one of its skills is the setup's to decide:
    denied whenever the setup does not hold."""
    from agentstack import _guard as guard

    root = os.path.realpath(state)
    path = guard.snapshot_path(state, root)
    try:
        unverified = guard.snapshot_header(guard._read_snapshot_bytes(path), path)
    except FileNotFoundError:
        return
    except (OSError, ValueError, Deny) as exc:
        raise Deny(f"the user-level setup's guard snapshot {path} is unreadable ({exc}); "
                   "run 'agentstack apply --user --write'") from None
    user = unverified.get("user") if isinstance(unverified, dict) else None
    if not isinstance(user, dict):
        return  # servers only (decided by user_server_call / user_level_call)
    carriers = user.get("carriers")
    carriers = carriers if isinstance(carriers, dict) else {}
    context = {p for p in user.get("context", []) if isinstance(p, str)}
    arguments = event.get("tool_input")
    skill = arguments.get("skill") if isinstance(arguments, dict) else None
    names_skill = (event.get("tool_name") == "Skill" and isinstance(skill, str)
                   and skill in user.get("skills", []))
    if not context and not names_skill:
        return
    where = f"the user-level setup ({root}/agentstack.toml)"
    try:
        snapshot, trust_home, _ = guard._load_state(state, root)
        if snapshot.get("project") != root:
            raise Deny(f"its snapshot is for {snapshot.get('project')}, not {root}")
        guard.check_trust(snapshot, trust_home)
    except Deny as exc:
        present = [p for p, kind in sorted(carriers.items()) if _carries(p, kind)]
        if present:
            raise Deny(f"{where} does not hold ({exc}), and what it rendered is there again: "
                       f"{', '.join(present[:3])}; remove it, or trust and apply it again "
                       "('agentstack trust --user', 'agentstack apply --user --write')") from None
        if names_skill:
            raise Deny(f"skill {skill!r} is {where}'s, which does not hold: {exc}") from None
        return
    files = guard.all_files(snapshot)
    watched = {p: e for p, e in files.items() if p in context} if not names_skill else files
    header = {k: v for k, v in snapshot.items() if k != guard._TABLE}
    try:
        guard.check_files({**header, "files": watched}, {})
    except Deny as exc:
        raise Deny(f"{where} does not hold: {exc}") from None


def _carries(path: str, kind: object) -> bool:
    """Whether a rendered file (kind "raw"), or the agentstack block of a file ("block"), is on
    disk; unreadable counts as there."""
    if kind != "block":
        return os.path.lexists(path)
    try:
        with open(path, "rb") as handle:
            return BLOCK_BEGIN.encode() in handle.read(4 * 1024 * 1024)
    except FileNotFoundError:
        return False
    except OSError:
        return True

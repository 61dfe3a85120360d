"""The apply engine: plan the adapters' file operations, diff them, detect hand edits, write.

Rules (docs/rendering.md):
* keys and files agentstack does not own are preserved (TOML comments included);
* the ledger in $AGENTSTACK_HOME/projects/<id>/apply.json records a hash of everything agentstack
  wrote, so an item removed from the manifest is removed from the native files, and a managed file
  or key edited by hand since is a conflict (exit 1; `--force` overwrites and keeps a backup);
* an existing file that does not parse is never replaced;
* every file is replaced atomically (temp file + fsync + os.replace, or for a large set the
  temp files, a filesystem sync, the renames and a second sync): a crash leaves each file either
  old or new, never half-written.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentstack_adapters import (
    MEMBER,
    FileOperation,
    KeyPath,
    OwnedBlock,
    OwnedKeys,
    RenderContext,
    WholeFile,
    load_adapters,
)

from agentstack import layout
from agentstack.apply.ledger import LEDGER_VERSION as LEDGER_VERSION  # the ledger, read by status
from agentstack.apply.ledger import load_ledger as load_ledger
from agentstack.canonical import b3, canonical_bytes
from agentstack.errors import AgentstackError, InvalidInput, Refused, StaleLock
from agentstack.fingerprints import BLOCK_BEGIN, BLOCK_END
from agentstack.fingerprints import key_value as _key_value
from agentstack.fsutil import (
    LinkInPath,
    check_no_links,
    link_atomic,
    read_nofollow,
    write_atomic,
)
from agentstack.fsutil import unlink as fs_unlink
from agentstack.paths import agentstack_home, apply_ledger_path, ensure_private_dir

EXCLUDE_BEGIN = "# agentstack:begin (rendered per machine by 'agentstack apply')"
EXCLUDE_END = "# agentstack:end"


class ApplyConflict(Refused):
    """A managed file or key was edited by hand since agentstack last wrote it."""


GUARD_CODE = "from agentstack._guard import main; main()"


def guard_command() -> list[str]:
    """The guard hook: the absolute interpreter, isolated mode, no PATH lookup and no shim. `-c`
    with an import rather than `-m` (which loads `runpy` on every tool call); the module is the
    same `agentstack._guard`, loaded from its cached bytecode."""
    return [sys.executable, "-I", "-c", GUARD_CODE]


# ------------------------------------------------------------------------------------ keys


def _canon(value: Any) -> str:
    return b3(canonical_bytes(_plain(value)))


def _plain(value: Any) -> Any:
    unwrap = getattr(value, "unwrap", None)
    return unwrap() if callable(unwrap) else value


def _key_id(path: KeyPath) -> str:
    return json.dumps(list(path), ensure_ascii=False)


def _get(doc: Any, path: KeyPath) -> Any:
    if len(path) >= 2 and path[-2] == MEMBER:  # one item of a shared list: True if present
        items = _key_value(doc, list(path[:-2]))
        return True if isinstance(items, list) and path[-1] in items else None
    return _key_value(doc, list(path))  # the guard's own lookup: both must agree


def _delete(doc: Any, path: KeyPath) -> None:
    if len(path) >= 2 and path[-2] == MEMBER:
        items = _key_value(doc, list(path[:-2]))
        if isinstance(items, list) and path[-1] in items:
            items.remove(path[-1])
            if not items:
                _delete(doc, path[:-2])
        return
    parents = []
    node = doc
    for key in path[:-1]:
        if not isinstance(node, dict) or key not in node:
            return
        parents.append((node, key))
        node = node[key]
    if isinstance(node, dict) and path[-1] in node:
        del node[path[-1]]
    for parent, key in reversed(parents):  # drop containers this left empty
        child = parent[key]
        if isinstance(child, dict) and not child:
            del parent[key]
        else:
            break


def _json_set(doc: dict[str, Any], path: KeyPath, value: Any) -> None:
    if len(path) >= 2 and path[-2] == MEMBER:
        items = _key_value(doc, list(path[:-2]))
        if not isinstance(items, list):
            items = []
            _json_set(doc, path[:-2], items)
        if path[-1] not in items:
            items.append(path[-1])
        return
    node = doc
    for key in path[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[path[-1]] = value


def _toml_item(value: Any, nested: bool) -> Any:
    import tomlkit

    if isinstance(value, dict):
        table: Any = tomlkit.inline_table() if nested else tomlkit.table()
        for key, item in value.items():
            table.append(key, _toml_item(item, True))
        return table
    if isinstance(value, list):
        array = tomlkit.array()
        for item in value:
            array.append(_toml_item(item, True))
        return array
    return value


def _toml_set(doc: Any, path: KeyPath, value: Any) -> None:
    import tomlkit

    node = doc
    for key in path[:-1]:
        if key not in node or not isinstance(node[key], dict):
            node[key] = tomlkit.table(is_super_table=True)
        node = node[key]
    node[path[-1]] = _toml_item(value, False)


class _JsoncDocument(dict[str, Any]):
    """A JSONC file's object, with the comment block that precedes it (written back as is)."""

    header = ""


_JSONC_HEADER = re.compile(r"\A(?:[ \t]*(?://[^\n]*)?\r?\n)*")


def _parse_jsonc(text: str) -> _JsoncDocument:
    """JSON preceded by `//` comment lines (as Copilot CLI writes its config.json). A comment
    anywhere else could not be written back, so it is refused rather than dropped."""
    header = _JSONC_HEADER.match(text)
    start = header.end() if header else 0
    body = text[start:]
    parsed = json.loads(body) if body.strip() else {}
    if not isinstance(parsed, dict):
        raise ValueError("the top level is not an object")
    doc = _JsoncDocument(parsed)
    doc.header = text[:start]
    return doc


# --------------------------------------------------------------------------------- the plan


@dataclass
class FileChange:
    path: Path
    display: str
    old: bytes | None
    new: bytes | None  # None: delete
    executable: bool = False
    link_target: str | None = None
    old_link: str | None = None
    ledger: dict[str, Any] | None = None  # the ledger entry after the write (None: forget)
    conflicts: list[str] = field(default_factory=list)
    read_only: bool = False  # written without write permission (a materialized plugin)

    @property
    def changed(self) -> bool:
        if self.link_target is not None or self.old_link is not None:
            return self.link_target != self.old_link or self.new is None
        if self.old != self.new:
            return True
        if self.new is None:
            return False
        try:
            mode = self.path.stat().st_mode
        except OSError:
            return True
        return bool(mode & 0o100) != self.executable

    def unified(self) -> str:
        def lines(data: bytes | None, link: str | None) -> list[str]:
            if link is not None:
                return [f"-> {link}\n"]
            if data is None:
                return []
            try:
                return data.decode("utf-8").splitlines(keepends=True)
            except UnicodeDecodeError:
                return [f"<binary, {len(data)} bytes, {b3(data)[3:15]}>\n"]

        before = lines(self.old, self.old_link)
        after = lines(self.new, self.link_target)
        text = "".join(
            difflib.unified_diff(
                before,
                after,
                f"a/{self.display}" if before else "/dev/null",
                f"b/{self.display}" if self.new is not None else "/dev/null",
            )
        )
        if not text and self.changed:
            text = f"mode {self.display}: executable={self.executable}\n"
        return text


@dataclass
class Plan:
    root: Path
    digest: str
    changes: list[FileChange]
    ledger_path: Path

    @property
    def pending(self) -> list[FileChange]:
        return [c for c in self.changes if c.changed]

    @property
    def conflicts(self) -> list[FileChange]:
        return [c for c in self.changes if c.conflicts]

    def diff_text(self) -> str:
        return "".join(c.unified() for c in self.pending)


class Planner:
    def __init__(self, root: Path, digest: str, ledger: dict[str, Any], home: Path) -> None:
        self.root = root
        self.digest = digest
        self.ledger_files: dict[str, dict[str, Any]] = ledger.get("files", {})
        self.home = home
        self.bases = WriteBases(root, home)

    def absolute(self, op_path: str, user_level: bool) -> Path:
        if user_level:
            return Path(op_path)
        rel = Path(op_path)
        if rel.is_absolute() or ".." in rel.parts:
            raise InvalidInput(f"adapter asked to write {op_path!r} outside the project")
        return self.root / rel

    def display(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            try:
                return "~/" + str(path.relative_to(self.home))
            except ValueError:
                return str(path)

    def base(self, path: Path) -> Path:
        return self.bases.of(path)

    def _read(self, path: Path, *, link_ok: bool = False) -> tuple[bytes | None, str | None]:
        """The current bytes (or link target, where agentstack renders links) of `path`, reached
        without following a link: a link on the way is a refusal naming it. One walk of the
        components (read_nofollow's descriptors); a link at the end is read as a link only where
        agentstack renders links (`link_ok`), else refused like any other."""
        try:
            try:
                return read_nofollow(path, self.base(path)), None
            except LinkInPath as exc:
                if not link_ok or exc.link != path:
                    raise
                return None, os.readlink(path)
        except FileNotFoundError:
            return None, None
        except LinkInPath as exc:
            raise link_refusal(exc) from None
        except IsADirectoryError:
            raise Refused(
                f"{path} is a directory where agentstack renders a file",
                hint="move it away, then re-run apply",
            ) from None

    def whole(self, path: Path, op: WholeFile) -> FileChange:
        old, old_link = self._read(path, link_ok=True)
        change = FileChange(
            path=path,
            display=self.display(path),
            old=old,
            new=op.content,
            executable=op.executable,
            link_target=op.link_target,
            old_link=old_link,
            read_only=op.read_only,
        )
        new_digest = b3(op.link_target.encode() if op.link_target is not None else op.content)
        change.ledger = {"kind": "whole", "digest": new_digest, "executable": op.executable}
        if op.tree is not None and not op.user_level:
            change.ledger["tree"] = str(self.absolute(op.tree, False))
        current = (
            b3(old_link.encode()) if old_link is not None else b3(old) if old is not None else None
        )
        previous = self.ledger_files.get(str(path))
        if current is not None and current != new_digest:
            if previous is None:
                change.conflicts.append("exists and was not written by agentstack")
            elif previous.get("digest") != current:
                change.conflicts.append("edited by hand since the last apply")
        return change

    def keys(self, path: Path, ops: list[OwnedKeys]) -> FileChange:
        fmt = ops[0].format
        old, _ = self._read(path)
        doc = self._parse(path, old, fmt)
        previous = self.ledger_files.get(str(path), {})
        previous_keys: dict[str, str] = previous.get("keys", {})
        wanted: dict[KeyPath, Any] = {}
        for op in ops:
            for key, value in op.keys.items():
                if key in wanted and _canon(wanted[key]) != _canon(value):
                    raise AgentstackError(
                        f"two adapters render different values for {'.'.join(key)} in {path}"
                    )
                wanted[key] = value
        change = FileChange(path=path, display=self.display(path), old=old, new=None)
        wanted_ids = {_key_id(k): k for k in wanted}
        for key_id, recorded in previous_keys.items():
            if key_id not in wanted_ids:
                key = tuple(json.loads(key_id))
                current = _get(doc, key)
                if current is not None and _canon(current) != recorded:
                    change.conflicts.append(f"{'.'.join(key)}: edited by hand since the last apply")
                _delete(doc, key)
        for key_id, key in wanted_ids.items():
            current = _get(doc, key)
            value = wanted[key]
            if current is not None and _canon(current) != _canon(value):
                recorded_value = previous_keys.get(key_id)
                if recorded_value is None:
                    change.conflicts.append(
                        f"{'.'.join(key)}: exists and was not written by agentstack"
                    )
                elif recorded_value != _canon(current):
                    change.conflicts.append(f"{'.'.join(key)}: edited by hand since the last apply")
            if fmt == "toml":
                _toml_set(doc, key, value)
            else:
                _json_set(doc, key, value)
        created = previous.get("created", old is None)
        if not wanted and created and not _plain(doc):
            change.new = None  # we created it and nothing of ours is left: remove it
            change.ledger = None
        else:
            change.new = self._dump(doc, fmt)
            change.ledger = {
                "kind": "keys",
                "format": fmt,
                "created": created,
                "keys": {k: _canon(wanted[v]) for k, v in wanted_ids.items()},
                "guarded": sorted({_key_id(g) for op in ops for g in op.guarded}),
                "keep_on_revoke": sorted(
                    {_key_id(k) for op in ops if op.keep_on_revoke for k in op.keys}
                ),
            }
        return change

    def _parse(self, path: Path, data: bytes | None, fmt: str) -> Any:
        return self._parse_static(path, data, fmt, self.display(path))

    @staticmethod
    def _parse_static(path: Path, data: bytes | None, fmt: str, shown: str = "") -> Any:
        if data is None:
            if fmt in ("json", "jsonc"):
                return _JsoncDocument() if fmt == "jsonc" else {}
            import tomlkit

            return tomlkit.document()
        try:
            text = data.decode("utf-8")
            if fmt == "jsonc":
                return _parse_jsonc(text)
            if fmt == "json":
                parsed = json.loads(text) if text.strip() else {}
                if not isinstance(parsed, dict):
                    raise ValueError("the top level is not an object")
                return parsed
            import tomlkit

            return tomlkit.parse(text)
        except Exception as exc:  # noqa: BLE001 - any parse failure: refuse, never replace
            raise Refused(
                f"{shown or path} cannot be parsed as {fmt.upper()} ({exc})",
                hint="agentstack never replaces a file it cannot read: fix it, or move it "
                "away, then re-run apply",
            ) from None

    @staticmethod
    def _dump(doc: Any, fmt: str) -> bytes:
        if fmt in ("json", "jsonc"):
            header = doc.header if isinstance(doc, _JsoncDocument) else ""
            return (header + json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        import tomlkit

        return tomlkit.dumps(doc).encode("utf-8")

    def block(self, path: Path, op: OwnedBlock | None) -> FileChange:
        old, _ = self._read(path)
        text = old.decode("utf-8", "replace") if old is not None else ""
        previous = self.ledger_files.get(str(path), {})
        pattern = re.compile(
            re.escape(BLOCK_BEGIN) + r"\n(.*?)" + re.escape(BLOCK_END) + r"\n?", re.S
        )
        match = pattern.search(text)
        change = FileChange(path=path, display=self.display(path), old=old, new=None)
        if match and previous and b3(match.group(1).encode()) != previous.get("digest"):
            change.conflicts.append("the agentstack block was edited by hand since the last apply")
        if match and not previous:
            change.conflicts.append("has an agentstack block that this project did not write")
        created = previous.get("created", old is None)
        if op is None:
            new_text = pattern.sub("", text) if match else text
            if created and not new_text.strip():
                change.ledger = None
                return change
            change.new = new_text.encode("utf-8")
            change.ledger = None
            return change
        body = op.text if op.text.endswith("\n") else op.text + "\n"
        block = f"{BLOCK_BEGIN}\n{body}{BLOCK_END}\n"
        if match:
            new_text = text[: match.start()] + block + text[match.end() :]
        else:
            new_text = (
                text
                + ("\n" if text and not text.endswith("\n") else "")
                + ("\n" if text else "")
                + block
            )
        change.new = new_text.encode("utf-8")
        change.ledger = {"kind": "block", "digest": b3(body.encode()), "created": created}
        return change

    def removal(self, path: Path, recorded: dict[str, Any]) -> FileChange:
        kind = recorded.get("kind")
        if kind == "keys":
            return self.keys(
                path, [OwnedKeys(path=str(path), format=recorded.get("format", "json"), keys={})]
            )
        if kind == "block":
            return self.block(path, None)
        old, old_link = self._read(path, link_ok=True)
        change = FileChange(
            path=path, display=self.display(path), old=old, new=None, old_link=old_link
        )
        current = (
            b3(old_link.encode()) if old_link is not None else b3(old) if old is not None else None
        )
        if current is not None and current != recorded.get("digest"):
            change.conflicts.append(
                "edited by hand since the last apply (agentstack would remove it)"
            )
        return change


def _context(root: Path, consent: dict[str, Any], digest: str,
             skill_bytes: bool = True) -> RenderContext:
    from agentstack.apply.materialize import Materializer

    materializer = Materializer(root, consent)
    read_skill_file = materializer.skill_file if skill_bytes else (lambda _name, _entry: b"")
    return RenderContext(
        root=root,
        consent=consent,
        digest=digest,
        guard_command=guard_command(),
        state_home=agentstack_home(),
        user_home=Path.home(),
        env=dict(os.environ),
        read_skill_file=read_skill_file,
        read_project_file=materializer.project_file,
        read_plugin_file=materializer.plugin_file,
        plugin_cache=plugin_cache_dir(),
    )


def plugin_cache_dir() -> Path:
    """Where the plugins' materialized marketplaces live: `$AGENTSTACK_CACHE/plugins/`."""
    from agentstack.paths import agentstack_cache
    from agentstack.plugins import PLUGINS_DIR

    return agentstack_cache() / PLUGINS_DIR


def render_operations(
    root: Path, consent: dict[str, Any], digest: str, harnesses: list[str] | None = None, *,
    skill_bytes: bool = True,
) -> list[FileOperation]:
    """`skill_bytes=False`: the skills' copies are rendered with no bytes (nothing of a skill's
    tree is read): for a caller that uses only the paths and the owned keys (the trust review's
    preview of the user-level changes)."""
    from agentstack.paths import is_user_root

    if is_user_root(root):  # the user-level setup renders into the user-level configs only
        from agentstack.apply.user import render_user

        return render_user(_context(root, consent, digest, skill_bytes), harnesses)
    from agentstack.harnesses import NO_GUARD

    # A harness no guard can protect is described (its surface pinned) but rendered nothing.
    targets = [h for h in harnesses or list(consent["project"]["harnesses"]) if h not in NO_GUARD]
    adapters = load_adapters(targets)
    unknown = [h for h in targets if h not in adapters]
    if unknown:
        raise InvalidInput(
            f"no adapter for harness {', '.join(unknown)}",
            hint="available: " + ", ".join(sorted(adapters)),
        )
    context = _context(root, consent, digest, skill_bytes)
    ops: list[FileOperation] = []
    for harness in targets:
        ops.extend(adapters[harness].render(context))
    return ops


def plan(
    root: Path, consent: dict[str, Any], digest: str, harnesses: list[str] | None = None
) -> Plan:
    root = root.resolve()
    ledger = load_ledger(root)
    planner = Planner(root, digest, ledger, Path.home())
    ops = render_operations(root, consent, digest, harnesses)
    by_path: dict[Path, list[FileOperation]] = {}
    for op in ops:
        user_level = getattr(op, "user_level", False)
        by_path.setdefault(planner.absolute(op.path, user_level), []).append(op)
    others = [h for h in consent["project"]["harnesses"] if h not in (harnesses or [])]
    if harnesses is not None and others:
        # A partial apply still renders what the other harnesses own in a file it shares with
        # them (.mcp.json, AGENTS.md, ...), so that their keys in it are kept, not removed.
        for op in render_operations(root, consent, digest, others):
            path = planner.absolute(op.path, getattr(op, "user_level", False))
            if path in by_path:
                by_path[path].append(op)
    changes: list[FileChange] = []
    for path, path_ops in by_path.items():
        kinds = {type(op) for op in path_ops}
        if len(kinds) != 1:
            raise AgentstackError(f"adapters disagree on how to render {path}")
        first = path_ops[0]
        if isinstance(first, WholeFile):
            if any(op != first for op in path_ops):
                raise AgentstackError(f"two adapters render different content for {path}")
            changes.append(planner.whole(path, first))
        elif isinstance(first, OwnedKeys):
            changes.append(planner.keys(path, [op for op in path_ops if isinstance(op, OwnedKeys)]))
        else:
            texts = {op.text for op in path_ops if isinstance(op, OwnedBlock)}
            if len(texts) != 1:
                raise AgentstackError(f"two adapters render different blocks for {path}")
            changes.append(planner.block(path, first))
    if harnesses is None:  # a partial apply never removes what other harnesses own
        for recorded_path, recorded in sorted(planner.ledger_files.items()):
            if Path(recorded_path) not in by_path:
                changes.append(planner.removal(Path(recorded_path), recorded))
    changes.sort(key=lambda c: c.display)
    return Plan(
        root=root,
        digest=digest,
        changes=changes,
        ledger_path=apply_ledger_path(root),
    )


# ------------------------------------------------------------------------------- writing


def _file_mode(path: Path, executable: bool, root: Path) -> int:
    """Executable bit as rendered; otherwise keep an existing file's mode (~/.claude.json is
    0600), and make new files outside the project private."""
    if executable:
        return 0o755
    try:
        return path.stat().st_mode & 0o777 & ~0o111
    except FileNotFoundError:
        return 0o644 if root in path.parents else 0o600


def _write_atomic(
    path: Path,
    data: bytes,
    executable: bool,
    mode: int | None = None,
    *,
    base: Path | None = None,
) -> None:
    write_atomic(
        path, data, mode if mode is not None else (0o755 if executable else 0o644), base=base
    )


def write_base(path: Path, root: Path, home: Path) -> Path:
    """The directory a rendered path is trusted from: the project root for project files, the
    user's home for user-level files (~/.claude.json, ~/.codex/config.toml); every component below
    it is opened without following a link."""
    return WriteBases(root, home).of(path)


class WriteBases:
    """write_base for every path of one apply: the realpaths of the root and the home taken once
    (not twice per rendered file), a base found by a prefix test on the path's text (the lexical
    ancestors, as `Path.parents`)."""

    def __init__(self, root: Path, home: Path) -> None:
        self.candidates = [
            (candidate, str(candidate).rstrip("/") + "/")
            for base in (root, home)
            for candidate in (base, Path(os.path.realpath(base)))
        ]

    def of(self, path: Path) -> Path:
        text = str(path)
        for candidate, prefix in self.candidates:
            if text.startswith(prefix) and text != prefix:
                return candidate
        return Path(os.path.realpath(path.parent))  # e.g. $CODEX_HOME elsewhere: the user's choice


def link_refusal(exc: LinkInPath) -> Refused:
    return Refused(
        f"{exc.link} is a symbolic link on the way to {exc.target}; agentstack never writes "
        "through a link (a committed link could send a write anywhere, .git/hooks included)",
        hint="remove the link (or replace it with a real directory), then re-run apply",
    )


def _backup(plan: Plan, change: FileChange) -> Path | None:
    if change.old is None and change.old_link is None:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%S")
    target = plan.ledger_path.parent / layout.BACKUPS / stamp / change.display.lstrip("~/")
    ensure_private_dir(target.parent)
    if change.old_link is not None:
        write_atomic(target, f"symlink -> {change.old_link}\n".encode(), 0o600)
    elif change.old is not None:
        write_atomic(target, change.old, 0o600)
    return target


def guard_code_inside(root: Path) -> str | None:
    """Where agentstack's own code (the guard the hooks run: its interpreter, environment and
    package) lies inside the project at `root`, or None. Everything in the project is writable by
    the agent, so a guard loaded from there (a changed module, a `.pth` file in its
    site-packages) would be the agent's to change."""
    import agentstack

    real_root = os.path.realpath(root)
    for path in (sys.prefix, sys.executable, os.path.dirname(agentstack.__file__)):
        real = os.path.realpath(path)
        if real == real_root or real.startswith(real_root + os.sep):
            return real
    return None


def write(
    plan: Plan, *, force: bool = False, after_each: Callable[[FileChange], None] | None = None
) -> list[Path]:
    """Write every pending change; refuse on conflicts unless `force` (then back them up).
    Removals and links are made in plan order, then the files several at a time (_write_files);
    `after_each` is called in plan order once everything is written."""
    inside = guard_code_inside(plan.root)
    if inside is not None:
        raise Refused(
            f"agentstack itself is installed inside this project ({inside}): the guard the hooks "
            "run would load code the agent can change; nothing was written",
            hint="install agentstack outside the project (e.g. 'pipx install agentstack-consent', "
            "or a virtualenv in another directory) and apply from there",
        )
    if plan.conflicts and not force:
        raise ApplyConflict(
            "hand edits would be lost: "
            + "; ".join(f"{c.display}: {', '.join(c.conflicts)}" for c in plan.conflicts),
            hint="keep your edit by moving it into agentstack.toml, or re-run with --force to "
            "overwrite (the current files are backed up first)",
        )
    home = Path.home()
    bases = WriteBases(plan.root, home)
    # Every path is checked before anything is written: a link on the way to any of them is a
    # refusal with nothing changed. (The writes themselves never follow one either.)
    try:
        for change in plan.changes:
            if change.changed:
                check_no_links(
                    change.path,
                    bases.of(change.path),
                    final_may_be_link=change.link_target is not None or change.old_link is not None,
                )
    except LinkInPath as exc:
        raise link_refusal(exc) from None
    ensure_private_dir(plan.ledger_path.parent)
    backups = [b for c in plan.conflicts if (b := _backup(plan, c)) is not None] if force else []
    ledger = load_ledger(plan.root)
    files: dict[str, Any] = ledger.get("files", {})
    # Removals and links first, in plan order (a removal may prune a directory a write then
    # makes again); then the files, several at a time (_write_files).
    writes: list[tuple[Path, bytes, bool, int, Path]] = []
    for change in plan.changes:
        if not change.changed:
            continue
        base = bases.of(change.path)
        try:
            if change.changed:
                if change.new is None and change.link_target is None:
                    fs_unlink(change.path, base=base)
                    _prune_empty_dirs(change.path.parent, plan.root)
                elif change.link_target is not None:
                    link_atomic(change.path, change.link_target, base=base)
                else:
                    assert change.new is not None
                    mode = _file_mode(change.path, change.executable, plan.root)
                    if change.read_only:
                        mode &= ~0o222
                    writes.append((change.path, change.new, change.executable, mode, base))
        except LinkInPath as exc:
            raise link_refusal(exc) from None
    # The project's files first; the user-level ones (the harness's trust of this project among
    # them) only once every project file is written: a harness must never be told to trust a
    # project whose guard hook failed to land.
    inside = str(plan.root).rstrip("/") + "/"
    _write_files([w for w in writes if str(w[0]).startswith(inside)])
    _write_files([w for w in writes if not str(w[0]).startswith(inside)])
    for change in plan.changes:
        if change.ledger is None:
            files.pop(str(change.path), None)
        else:
            files[str(change.path)] = change.ledger
        if after_each is not None:
            after_each(change)
    ledger.update(v=LEDGER_VERSION, project=str(plan.root), digest=plan.digest, files=files)
    _write_atomic(
        plan.ledger_path, json.dumps(ledger, indent=2, sort_keys=True).encode(), False, 0o600
    )
    trees: dict[str, set[str]] = {}
    for p, e in files.items():
        if e.get("kind") == "whole" and isinstance(e.get("tree"), str):
            trees.setdefault(e["tree"], set()).add(p)
    update_git_exclude(
        plan.root,
        [Path(p) for p, e in files.items() if e.get("kind") == "whole" or e.get("created")],
        trees,
    )
    return backups


WRITERS = 8  # files written at once by `write`
BATCH_MIN = 64  # from this many files on, `write` makes them durable by filesystem syncs


def _write_files(jobs: list[tuple[Path, bytes, bool, int, Path]]) -> None:
    """Write each (path, data, executable, mode, base), each file replaced whole. Up to BATCH_MIN
    files: _write_parallel (two fsyncs each). From BATCH_MIN on (a rendered skill tree): one batch
    per base (fsutil.write_batch): every temp file written, the filesystem synced, every temp
    renamed over its name, the filesystem synced again: each file as durable as write_atomic
    makes it, for two filesystem syncs per BATCH_DIRS directories instead of two fsyncs per file
    (a failure before the renames renames nothing of its batch; the first failure in plan order
    is raised, a link met on the way as the usual refusal)."""
    if len(jobs) < BATCH_MIN:
        _write_parallel(jobs)
        return
    from agentstack.fsutil import write_batch

    by_base: dict[Path, list[tuple[Path, bytes, int | None]]] = {}
    for path, data, _executable, mode, base in jobs:
        by_base.setdefault(base, []).append((path, data, mode))
    for base, items in by_base.items():
        try:
            write_batch(items, base=base)
        except LinkInPath as exc:
            raise link_refusal(exc) from None


def _write_parallel(jobs: list[tuple[Path, bytes, bool, int, Path]]) -> None:
    """Write each (path, data, executable, mode, base) with write_atomic, up to WRITERS at a time.
    Each file is exactly as durable as when written alone (its bytes fsync'd before its rename,
    its directory fsync'd after); concurrent fsyncs share the filesystem's journal commits, so a
    project's rendered files cost a few commits instead of two each (57 files: ~150 ms -> ~20 ms
    on the development machine's ext4). After a failure no further write starts; the writes under
    way run to their end, then the first failure in plan order is raised (as a refusal, for a
    link met on the way)."""
    if len(jobs) < 2:
        for path, data, executable, mode, base in jobs:
            try:
                _write_atomic(path, data, executable, mode, base=base)
            except LinkInPath as exc:
                raise link_refusal(exc) from None
        return
    import threading

    errors: list[BaseException | None] = [None] * len(jobs)
    pending = list(range(len(jobs) - 1, -1, -1))
    lock = threading.Lock()
    failed = False  # set under `lock` with the first error: one test per job, not a scan

    def work() -> None:
        nonlocal failed
        while True:
            with lock:
                if not pending or failed:
                    return
                index = pending.pop()
            path, data, executable, mode, base = jobs[index]
            try:
                _write_atomic(path, data, executable, mode, base=base)
            except BaseException as exc:  # noqa: BLE001 - raised below, in the caller's thread
                with lock:
                    errors[index] = exc
                    failed = True

    threads = [threading.Thread(target=work, daemon=False) for _ in range(min(WRITERS, len(jobs)))]
    for thread in threads:
        thread.start()
    from agentstack.progress import tick

    for thread in threads:
        while thread.is_alive():
            thread.join(timeout=0.1)
            tick(len(jobs) - len(pending), len(jobs))  # from this thread only
    for error in errors:
        if isinstance(error, LinkInPath):
            raise link_refusal(error) from None
        if error is not None:
            raise error


def _prune_empty_dirs(directory: Path, root: Path) -> None:
    while directory != root and root in directory.parents:
        try:
            directory.rmdir()
        except OSError:
            return
        directory = directory.parent


def _only_these(tree: str, members: set[str]) -> bool:
    """Everything under directory `tree` (walked without following a link) is one of `members`:
    then one pattern for the tree ignores exactly what listing each member would."""
    try:
        if not stat.S_ISDIR(os.lstat(tree).st_mode):
            return False
    except OSError:
        return False
    failed: list[OSError] = []
    for directory, dirs, names in os.walk(tree, onerror=failed.append):
        for name in names:
            if os.path.join(directory, name) not in members:
                return False
        for name in dirs:  # a link to a directory is listed with the directories
            path = os.path.join(directory, name)
            if os.path.islink(path) and path not in members:
                return False
    return not failed


def update_git_exclude(
    root: Path, rendered: list[Path], trees: dict[str, set[str]] | None = None
) -> None:
    """List rendered project files in .git/info/exclude (never committed: they are per machine).
    A rendered tree (`trees`: its directory -> the rendered files in it, e.g. a skill) that holds
    nothing but its rendered files is listed by one pattern, `/<dir>/`, instead of one line per
    file: git ignores exactly the same paths, and `git status` stays as fast as without agentstack
    (20,000 patterns, each matched against every path, made it 64 times slower). Written
    directly: running git in the project would be needless risk."""
    git_dir = root / ".git"
    if git_dir.is_symlink() or not git_dir.is_dir():
        return
    inside = str(root).rstrip("/") + "/"
    wanted = {"/" + str(p)[len(inside):] for p in rendered if str(p).startswith(inside)}
    for tree, members in sorted((trees or {}).items()):
        if tree.startswith(inside) and _only_these(tree, members):
            wanted.difference_update("/" + m[len(inside):] for m in members)
            wanted.add("/" + tree[len(inside):].rstrip("/") + "/")
    entries = sorted(wanted)
    exclude = git_dir / "info" / "exclude"
    try:
        text = (read_nofollow(exclude, root) or b"").decode("utf-8")
    except LinkInPath as exc:
        raise link_refusal(exc) from None
    pattern = re.compile(
        re.escape(EXCLUDE_BEGIN) + r"\n.*?" + re.escape(EXCLUDE_END) + r"\n?", re.S
    )
    text = pattern.sub("", text)
    if entries:
        if text and not text.endswith("\n"):
            text += "\n"
        text += EXCLUDE_BEGIN + "\n" + "".join(f"{e}\n" for e in entries) + EXCLUDE_END + "\n"
    try:
        _write_atomic(exclude, text.encode("utf-8"), False, base=root)
    except LinkInPath as exc:
        raise link_refusal(exc) from None


def _kept_keys(
    path: Path, recorded: dict[str, Any], user_setup: bool = False
) -> dict[KeyPath, Any]:
    """The keys of a user-level file that survive `revoke`, with their current values."""
    keep = recorded.get("keep_on_revoke", [])
    if not keep:
        return {}
    try:
        data = read_nofollow(path, write_base(path, Path.home(), Path.home()))
        doc = Planner._parse_static(path, data, recorded.get("format", "json"))
    except (OSError, AgentstackError):
        return {}
    kept: dict[KeyPath, Any] = {}
    for key_id in keep:
        key = tuple(json.loads(key_id))
        value = _get(doc, key)
        if value is not None:
            kept[key] = _guard_only(_plain(value)) if user_setup else _plain(value)
    return kept


def _guard_only(value: Any) -> Any:
    """A kept hook list of the user-level setup keeps the user-level guard's groups only: the
    setup's own hooks, rendered after the guard in the same list, go with the revocation."""
    if isinstance(value, list) and value and all(
        isinstance(g, dict) and isinstance(g.get("hooks"), list) for g in value
    ):
        return [g for g in value if g["hooks"] and all(
            isinstance(h, dict) and "--user-level" in str(h.get("command", "")).split()
            for h in g["hooks"])]
    return value


def remove_user_level(root: Path) -> list[Path]:
    """`revoke`: remove the user-level harness trust entries agentstack wrote for this project."""
    from agentstack.paths import is_user_root

    root = root.resolve()
    user_setup = is_user_root(root)
    ledger = load_ledger(root)
    home = Path.home()
    planner = Planner(root, ledger.get("digest", ""), ledger, home)
    removed: list[Path] = []
    changes = []
    for path_text, recorded in sorted(ledger.get("files", {}).items()):
        path = Path(path_text)
        if recorded.get("kind") == "whole" and root not in path.parents:
            # A materialized plugin (and a Gemini CLI extension's link to it): removed, so the
            # harness has nothing left to load.
            changes.append(planner.removal(path, recorded))
            continue
        if recorded.get("kind") == "block" and root not in path.parents:
            # The user-level setup's instructions (~/.claude/CLAUDE.md): its block goes.
            changes.append(planner.block(path, None))
            continue
        if recorded.get("kind") == "keys" and root not in path.parents:
            kept = _kept_keys(path, recorded, user_setup)
            op = OwnedKeys(
                path=str(path),
                format=recorded.get("format", "json"),
                keys=kept,
                user_level=True,
                keep_on_revoke=True,
            )
            changes.append(planner.keys(path, [op]))
    if not changes:
        return removed
    removal = Plan(
        root=root,
        digest=ledger.get("digest", ""),
        changes=changes,
        ledger_path=apply_ledger_path(root),
    )
    try:
        write(removal, force=True)
    except OSError as exc:
        from agentstack.storage import storage_error

        where = ", ".join(str(c.path) for c in changes)
        raise storage_error(
            exc, exc.filename or home, f"removing agentstack's harness-side trust entries for "
            f"{root} from {where} (each file is replaced whole or not at all)",
            next_step="make room (see 'df -h'), then run 'agentstack revoke' again: it removes "
            "the entries that are left", restate=True,
        ) from exc
    return [c.path for c in changes]


def check_fresh(message: str) -> StaleLock:
    return StaleLock(message, hint="run 'agentstack lock' and 'agentstack trust'")

"""`agentstack.lock`: every byte the manifest refers to, pinned.

The lock is deterministic: sorted, no timestamps, nothing machine-specific (paths are
project-relative; git sources are pinned by URL, full commit id and tree). It records the digest of
the manifest it was resolved from, so a stale lock is detected without guessing.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import re
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from agentstack.canonical import digest_of
from agentstack.errors import (
    InvalidInput,
    ManifestInvalid,
    Problem,
    Refused,
    StaleLock,
    TreeHashError,
)
from agentstack.lock.treehash import (
    Limits,
    Row,
    StatCache,
    TreeEntry,
    hash_file,
    tree_digest,
    tree_digest_rows,
    walk_rows,
)
from agentstack.manifest.view import (
    LOCK_NAME,
    MANIFEST_NAME,
    HookView,
    ManifestView,
    ServerView,
    SkillView,
    as_view,
    is_secret,
)

if TYPE_CHECKING:
    from agentstack.lock.coderoots import Analyser, Root
    from agentstack.lock.relock import Recorder
    from agentstack.manifest.model import Hook, Manifest, Server, Skill

LOCK_VERSION = 1


def manifest_digest(manifest: Manifest | ManifestView) -> str:
    """Digest of the manifest's meaning: comments, whitespace, key order and quoting drop out."""
    if isinstance(manifest, ManifestView):
        return manifest.digest  # computed the same way when the view was made
    return digest_of(manifest.model_dump(mode="json", exclude_defaults=True))


def entry_json(entry: TreeEntry) -> dict[str, Any]:
    return {
        "path": entry.path,
        "kind": entry.kind,
        "executable": entry.executable,
        "size": entry.size,
        "digest": entry.digest,
    }


def _path_of(row: Row) -> str:
    return row[0]


_ROOT_HINT = "name the directories and files the code loads with pin = [...]"


class Resolver:
    """Resolves each manifest item into its lock entry, collecting every problem. (A plain class:
    defining a dataclass costs ~1 ms, and `digest` and `status` import this module.)"""

    def __init__(
        self,
        root: Path,
        cache_dir: Path,
        stat_cache: StatCache,
        previous: dict[str, Any] | None,
        offline_git: bool = False,
        update_git: bool = False,
        # None: no limits (the freshness check re-hashes what an earlier `lock` accepted).
        limits: Limits | None = None,
    ) -> None:
        self.root, self.cache_dir, self.stat_cache, self.previous = (
            root, cache_dir, stat_cache, previous
        )  # fmt: skip
        self.offline_git, self.update_git, self.limits = offline_git, update_git, limits
        self.problems: list[Problem] = []
        self.real_root = self.root.resolve()
        self._code: Analyser | None = None
        self._walked: dict[str, dict[str, Any]] = {}  # code roots walked, by project path
        self.files_seen = 0
        self.bytes_seen = 0
        self.biggest = 0  # the largest file pinned by a tree (what --max-file-size checks)
        self.harnesses: list[str] = []

    def problem(self, path: str, message: str, hint: str = "") -> None:
        self.problems.append(Problem(file=MANIFEST_NAME, path=path, message=message, hint=hint))

    def _inside(self, rel: str, where: str) -> tuple[Path, Path] | None:
        """(project path, real path) of `rel`, refusing one that leaves the project."""
        candidate = self.root / rel
        try:
            real = candidate.resolve(strict=True)
        except (FileNotFoundError, NotADirectoryError):
            self.problem(
                where,
                f"{rel!r} does not exist in the project",
                "create it or fix the path (paths are relative to agentstack.toml)",
            )
            return None
        except (OSError, RuntimeError, ValueError) as exc:  # too long, a loop, a NUL
            self.problem(where, f"{rel!r} cannot be resolved: {exc}")
            return None
        if real != self.real_root and self.real_root not in real.parents:
            self.problem(where, f"{rel!r} leads outside the project through a symbolic link")
            return None
        return candidate, real

    def _file(self, rel: str, where: str, *, follow: bool = False) -> dict[str, Any] | None:
        """Pin one file. With `follow`, an in-project symlink pins the file it points to."""
        located = self._inside(rel, where)
        if located is None:
            return None
        path = located[1] if follow else located[0]
        try:
            entry = hash_file(path, self.stat_cache)
        except TreeHashError as exc:
            self.problem(where, exc.message, exc.hint)
            return None
        return {**entry_json(entry), "path": str(PurePosixPath(rel))}

    def _referenced_files(
        self, argv: list[str], cwd: str | None, label: Callable[[int], str]
    ) -> list[dict[str, Any]]:
        """Project files named on a command line: they execute, so their bytes are pinned."""
        files: dict[str, dict[str, Any]] = {}
        base = PurePosixPath(cwd or ".")
        for index, arg in enumerate(argv):
            if not arg or arg.startswith("-") or "\0" in arg:
                continue
            if PurePosixPath(arg).is_absolute():
                # An in-project path written as an absolute path is a project path.
                inside = self._analyser().project_path(arg, ".")
                if inside is None:
                    continue
                arg = inside
            rel = os.path.normpath(str(base / arg))
            if rel == ".." or rel.startswith("../") or rel in files:
                continue
            from agentstack.lock.coderoots import is_file

            # Follows links (a link to a project file counts too); an argument that cannot be a
            # path (too long, any error of the probe) names no file.
            if not is_file(self.root / rel):
                continue
            entry = self._file(rel, label(index), follow=True)
            if entry is not None:
                files[rel] = entry
        return [files[k] for k in sorted(files, key=lambda p: p.encode())]

    def _analyser(self) -> Analyser:
        from agentstack.lock.coderoots import Analyser

        if self._code is None:
            self._code = Analyser(self.root)
        return self._code

    def _with_code(
        self,
        where: str,
        entry: dict[str, Any],
        argv: list[str],
        cwd: str,
        env: dict[str, str | None],
        pin: list[str],
    ) -> dict[str, Any]:
        """Add the code roots of a command (and the files they name) to its lock entry."""
        from agentstack.lock.coderoots import REPORTED_EXCLUDES, analyse, merge_roots

        found = analyse(self.root, argv, cwd, env, pin)
        files = {f["path"]: f for f in entry["files"]}
        for rel, _origin in found.files:
            if rel not in files:
                pinned = self._file(rel, f"{where}.pin" if pin else where, follow=True)
                if pinned is not None:
                    files[rel] = pinned
        entry["files"] = [files[k] for k in sorted(files, key=lambda p: p.encode())]
        roots = [self._root(where, item, bool(pin)) for item in merge_roots(found.roots)]
        kept = list({r["path"]: r for r in roots if r is not None}.values())
        covered = {r["path"] for r in kept}
        for root in kept:
            for rel in root["excluded"]:
                full = f"{root['path']}/{rel}"
                if full not in covered and posixpath.basename(rel) in REPORTED_EXCLUDES:
                    found.fact(f"excluded:{full}")
        entry["risks"] = entry["risks"] + found.facts
        if kept:
            entry["roots"] = kept
        return entry

    def _root(self, where: str, root: Root, pinned: bool) -> dict[str, Any] | None:
        from agentstack.lock.coderoots import EXCLUDES, REPORTED_EXCLUDES, Root

        label = f"{where}.pin" if pinned else where
        located = self._inside(root.path, label)
        if located is None:
            return None
        excluded: list[str] = []
        # A root reached through an in-project symlink (`srv -> servers`) is pinned where it is.
        real = (
            located[1].relative_to(self.real_root).as_posix()
            if located[1] != self.real_root
            else "."
        )
        if real == ".":
            self.problem(label, f"code root {root.path!r} is the project root", _ROOT_HINT)
            return None
        if real != root.path:
            root = Root(real, root.origin)
        # A tree several commands load (servers/*.py sharing servers/) is walked, hashed and
        # counted once: the commands' entries share its file list (`coderoots.share_roots` then
        # pins it once, in the lock's `code_roots` table).
        walked = self._walked.get(root.path)
        if walked is None:
            # A root that is itself an excluded name (pin = ["app/node_modules"]) is pinned whole.
            exclude = frozenset() if posixpath.basename(root.path) in EXCLUDES else EXCLUDES
            try:
                rows = walk_rows(located[1], self.stat_cache, exclude=exclude, excluded=excluded)
            except TreeHashError as exc:
                self.problem(label, f"code root {root.path!r}: {exc.message}", exc.hint)
                return None
            self.count_rows(label, rows)
            walked = self._tree_rows({"path": root.path}, rows)
            # Only left-out dependencies are recorded: a cache appearing when the code first runs
            # (`__pycache__`) must not make the lock stale.
            reported = [p for p in excluded if posixpath.basename(p) in REPORTED_EXCLUDES]
            walked["excluded"] = sorted(reported, key=lambda p: p.encode())
            self._walked[root.path] = walked
        return {**walked, "origin": root.origin, "excluded": list(walked["excluded"])}

    def count(self, where: str, entries: list[TreeEntry]) -> None:
        """Apply the limits (file count, total size, file size) to what is being pinned."""
        limits = self.limits
        if limits is None:
            return
        self.files_seen += len(entries)
        self.bytes_seen += sum(e.size for e in entries)
        big = max(entries, key=lambda e: e.size, default=None)
        self.biggest = max(self.biggest, big.size if big is not None else 0)
        if big is not None and big.size > limits.max_file_bytes:
            raise limits.file_too_big(where, big.path, big.size)
        if self.files_seen > limits.max_files:
            raise limits.too_many_files(where)
        if self.bytes_seen > limits.max_total_bytes:
            raise limits.too_many_bytes(where)

    def count_rows(self, where: str, rows: list[Row]) -> None:
        """`count` for walked rows (path, kind, executable, size, digest)."""
        limits = self.limits
        if limits is None:
            return
        self.files_seen += len(rows)
        self.bytes_seen += sum(r[3] for r in rows)
        big = max(rows, key=lambda r: r[3], default=None)
        self.biggest = max(self.biggest, big[3] if big is not None else 0)
        if big is not None and big[3] > limits.max_file_bytes:
            raise limits.file_too_big(where, big[0], big[3])
        if self.files_seen > limits.max_files:
            raise limits.too_many_files(where)
        if self.bytes_seen > limits.max_total_bytes:
            raise limits.too_many_bytes(where)

    def server(self, name: str, server: Server | ServerView) -> dict[str, Any]:
        from agentstack.lock.facts import command_facts, url_facts

        where = f"servers.{name}"
        if server.command is not None:
            argv = [server.command, *server.args]
            if server.cwd is not None:
                located = self._inside(server.cwd, f"{where}.cwd")
                if located is not None and not located[1].is_dir():
                    self.problem(f"{where}.cwd", f"{server.cwd!r} is not a directory")

            def label(index: int) -> str:
                return f"{where}.command" if index == 0 else f"{where}.args[{index - 1}]"

            entry = {
                "files": self._referenced_files(argv, server.cwd, label),
                "risks": command_facts(argv),
            }
            env = {k: (None if is_secret(v) else v) for k, v in server.env.items()}
            cwd = posixpath.normpath(server.cwd) if server.cwd else "."
            return self._with_code(where, entry, argv, cwd, env, list(server.pin))
        assert server.url is not None
        return {"files": [], "risks": url_facts(server.url)}

    def skill(self, name: str, skill: Skill | SkillView) -> dict[str, Any] | None:
        where = f"skills.{name}"
        if skill.path is not None:
            located = self._inside(skill.path, f"{where}.path")
            if located is None:
                return None
            try:
                rows = walk_rows(located[0], self.stat_cache)
            except TreeHashError as exc:
                self.problem(f"{where}.path", exc.message, exc.hint)
                return None
            self.count_rows(f"{where}.path", rows)
            return self._tree_rows({"source": "path", "path": skill.path}, rows)
        return self._git_skill(name, skill)

    def _git_skill(self, name: str, skill: Skill | SkillView) -> dict[str, Any] | None:
        return self._git_item("skills", name, skill)

    def _git_item(
        self, section: str, name: str, skill: Any, extra: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        where = f"{section}.{name}"
        assert skill.git is not None and skill.rev is not None
        wanted = {
            **(extra or {}),
            "source": "git",
            "git": skill.git,
            "rev": skill.rev,
            "subdir": skill.subdir or "",
        }
        previous = ((self.previous or {}).get(section) or {}).get(name)
        reuse = (
            not self.update_git
            and isinstance(previous, dict)
            and all(previous.get(k) == v for k, v in wanted.items())
        )
        if reuse and self.offline_git:
            # No git here (digest, show): the pin must at least be self-consistent.
            assert isinstance(previous, dict)
            if not self._consistent(previous):
                self.problem(
                    where,
                    "the pinned entry in agentstack.lock is inconsistent "
                    "(its digest does not match its files)",
                    "run 'agentstack lock'",
                )
                return None
            return previous
        if self.offline_git:
            self.problem(where, "is not pinned in agentstack.lock yet", "run 'agentstack lock'")
            return None
        import agentstack.lock.gitsource as gitsource

        try:
            if reuse:
                # A pin stands until the manifest changes it or --update is given, but its content
                # is re-read at the pinned commit, so a hand-edited lock entry cannot pass.
                assert isinstance(previous, dict)
                resolved = gitsource.read_pinned(
                    self.cache_dir,
                    skill.git,
                    str(previous.get("commit")),
                    skill.subdir,
                    limits=self.limits,
                )
            else:
                resolved = gitsource.resolve(
                    self.cache_dir, skill.git, skill.rev, skill.subdir, limits=self.limits
                )
        except gitsource.GitSourceError as exc:
            self.problem(f"{where}.{exc.field}", exc.message, exc.hint)
            return None
        except TreeHashError as exc:
            self.problem(f"{where}.git", exc.message, exc.hint)
            return None
        self.count(where, resolved.entries)
        return self._tree(
            {**wanted, "commit": resolved.commit, "git_tree": resolved.git_tree}, resolved.entries
        )

    def plugin(self, name: str, plugin: Any) -> dict[str, Any] | None:
        """A plugin: its tree pinned like a skill's, plus what it contributes (`components`,
        agentstack.plugins.expand), derived from the pinned bytes."""
        from agentstack import plugins

        where = f"plugins.{name}"
        if plugin.harness not in self.harnesses:
            self.problem(
                f"{where}.harness",
                f"{plugin.harness} is not one of project.harnesses",
                f"add {plugin.harness!r} to project.harnesses, or remove the plugin",
            )
            return None
        read: Callable[[str], bytes]
        if plugin.path is not None:
            located = self._inside(plugin.path, f"{where}.path")
            if located is None:
                return None
            if located[1] == self.real_root:
                self.problem(
                    f"{where}.path",
                    "is the project root; a plugin is a directory of its own",
                    "move the plugin into a directory (e.g. plugins/NAME) and point path at it",
                )
                return None
            try:
                rows = walk_rows(located[0], self.stat_cache)
            except TreeHashError as exc:
                self.problem(f"{where}.path", exc.message, exc.hint)
                return None
            self.count_rows(f"{where}.path", rows)
            entry = self._tree_rows(
                {"harness": plugin.harness, "source": "path", "path": plugin.path}, rows
            )
            top = located[1]

            def read(rel: str) -> bytes:
                return (top / rel).read_bytes()

        else:
            previous = ((self.previous or {}).get("plugins") or {}).get(name)
            found = self._git_item("plugins", name, plugin, {"harness": plugin.harness})
            if found is None:
                return None
            if found is previous and isinstance(previous, dict):
                # Reused offline: its expansion was derived from these bytes when it was pinned
                # (lock --check and apply derive it again from the mirror).
                return previous if "components" in previous else None
            entry = {k: v for k, v in found.items() if k != "components"}
            read = self._git_reader(plugin.git, entry["git_tree"])
        try:
            entry["components"] = plugins.expand(plugin.harness, entry["files"], read)
        except plugins.PluginError as exc:
            self.problem(where, f"{exc.file}: {exc.message}" if exc.file else exc.message,
                         exc.hint)
            return None
        except OSError as exc:
            self.problem(where, f"cannot read the plugin: {exc}")
            return None
        return entry

    def _git_reader(self, url: str, tree: str) -> Callable[[str], bytes]:
        from git import Tree

        import agentstack.lock.gitsource as gitsource

        repo = gitsource.open_mirror(self.cache_dir, url)
        root = Tree(repo, bytes.fromhex(tree), mode=0o40000, path="")

        def read(rel: str) -> bytes:
            data: bytes = (root / rel).data_stream.read()
            return data

        return read

    @staticmethod
    def _consistent(entry: dict[str, Any]) -> bool:
        try:
            entries = [TreeEntry(**f) for f in entry.get("files", [])]
        except TypeError:
            return False
        return tree_digest(entries) == entry.get("digest")

    @staticmethod
    def _tree(source: dict[str, Any], entries: list[TreeEntry]) -> dict[str, Any]:
        ordered = sorted(entries, key=lambda e: e.path.encode("utf-8"))
        return {**source, "digest": tree_digest(ordered), "files": [entry_json(e) for e in ordered]}

    @staticmethod
    def _tree_rows(source: dict[str, Any], rows: list[Row]) -> dict[str, Any]:
        # By path: str order is code-point order, which is the order of the UTF-8 bytes (the
        # walk refuses names that are not UTF-8), so no key has to be encoded.
        ordered = sorted(rows, key=_path_of)
        return {
            **source,
            "digest": tree_digest_rows(ordered),
            "files": [
                {"path": p, "kind": k, "executable": x, "size": n, "digest": d}
                for p, k, x, n, d in ordered
            ],
        }

    def hook(self, name: str, hook: Hook | HookView) -> dict[str, Any]:
        from agentstack.lock.facts import command_facts

        where = f"hooks.{name}"
        files: list[dict[str, Any]] = []
        argv: list[str]
        if hook.script is not None:
            entry = self._file(hook.script, f"{where}.script")
            if entry is not None:
                files.append(entry)
                if not entry["executable"]:
                    self.problem(
                        f"{where}.script",
                        f"{hook.script!r} is not executable",
                        f"chmod +x {hook.script}",
                    )
            argv = [hook.script, *hook.args]
            extra = self._referenced_files(hook.args, None, lambda i: f"{where}.args[{i}]")
        else:
            assert hook.command is not None
            argv = hook.command
            extra = self._referenced_files(hook.command, None, lambda i: f"{where}.command[{i}]")
        known = {f["path"] for f in files}
        files += [f for f in extra if f["path"] not in known]
        entry = {"files": files, "risks": command_facts(argv)}
        # A hook script is a project file the harness runs by its path (`check.sh` included).
        run = ["./" + hook.script, *hook.args] if hook.script is not None else argv
        return self._with_code(where, entry, run, ".", {}, list(hook.pin))

    def resolve(self, manifest: Manifest | ManifestView) -> dict[str, Any]:
        manifest = as_view(manifest)
        lock: dict[str, Any] = {
            "version": LOCK_VERSION,
            "manifest": manifest_digest(manifest),
            "servers": {n: self.server(n, s) for n, s in sorted(manifest.servers.items())},
            "skills": {},
            "instructions": [],
            "hooks": {n: self.hook(n, h) for n, h in sorted(manifest.hooks.items())},
        }
        from agentstack.lock.coderoots import share_roots

        share_roots(lock)  # a tree several commands load: pinned once, in `code_roots`
        for name, skill in sorted(manifest.skills.items()):
            resolved = self.skill(name, skill)
            if resolved is not None:
                lock["skills"][name] = resolved
        self.harnesses = list(manifest.project.harnesses)
        for name, plugin in sorted(manifest.plugins.items()):
            pinned = self.plugin(name, plugin)
            if pinned is not None:
                lock.setdefault("plugins", {})[name] = pinned
        targets = _instruction_targets(manifest)
        for index, rel in enumerate(manifest.instructions.files):
            if str(PurePosixPath(rel)) in targets:
                self.problem(
                    f"instructions.files[{index}]",
                    f"{rel} is where agentstack writes {targets[str(PurePosixPath(rel))]}'s "
                    "instructions, so it cannot also be their source",
                    f"rename it (e.g. git mv {rel} {rel.removesuffix('.md')}.base.md), list the "
                    "new name in "
                    f"instructions.files, and agentstack renders its text into {rel}",
                )
                continue
            entry = self._file(rel, f"instructions.files[{index}]")
            if entry is not None:
                lock["instructions"].append(entry)
        if self.problems:
            raise ManifestInvalid(self.problems)
        from agentstack.surface.scan import scan

        # What the harnesses load from the project besides what agentstack renders (absent when
        # there is none, so a project without a foreign surface keeps its digest).
        surface = scan(self.root, list(manifest.project.harnesses), lock)
        if surface:
            lock["surface"] = surface
        from agentstack.lock.gitmeta import HINT, describe, lock_problem

        found = lock_problem(lock)
        if found is not None:
            where, path = found
            raise Refused(describe(path, "" if where == "." else where), hint=HINT)
        return lock


def _instruction_targets(manifest: ManifestView) -> dict[str, str]:
    if not manifest.instructions.files:
        return {}
    from agentstack.harnesses import instruction_targets  # the adapters' renders_into

    return instruction_targets(list(manifest.project.harnesses))


# ---------------------------------------------------------------------------------------------
# Reading and writing the lock file (TOML, emitted by hand so the bytes are ours to fix).

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_string(value: str) -> str:
    if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return f'"{value}"'  # nothing to escape (the bulk of a lock: paths)
    # JSON string escapes are valid TOML basic-string escapes; DEL must be escaped in TOML too.
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _toml_string(key)  # `$` also matches before "\n"


_FILE_KEYS = ("digest", "executable", "kind", "path", "size")
_FILE_KEYSET = frozenset(_FILE_KEYS)


def _toml_value(value: Any) -> str:
    if isinstance(value, dict) and value.keys() == _FILE_KEYSET:
        # A pinned file (the bulk of a large lock): one f-string, same bytes as the generic path.
        return (
            f'{{ digest = "{value["digest"]}", executable = '
            f'{"true" if value["executable"] else "false"}, kind = "{value["kind"]}", '
            f"path = {_toml_string(value['path'])}, size = {int(value['size'])} }}"
        )
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        if not value:
            return "[]"
        return "[\n" + "".join(f"  {_toml_value(v)},\n" for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in sorted(value.items()))
        return "{ " + inner + " }" if inner else "{}"
    raise TypeError(f"cannot write {type(value).__name__} to the lock")


# The lock's tables, in the order they are written (`code_roots`: the trees several commands load,
# present only when there is one).
SECTIONS = ("servers", "skills", "hooks", "code_roots", "plugins", "surface")


def dumps_lock(lock: dict[str, Any]) -> str:
    lines = [
        "# agentstack.lock: generated by 'agentstack lock'. Do not edit by hand.",
        f"version = {lock['version']}",
        f"manifest = {_toml_string(lock['manifest'])}",
        f"instructions = {_toml_value(lock['instructions'])}",
    ]
    for section in SECTIONS:
        for name, item in sorted(lock.get(section, {}).items()):
            _emit_table(lines, f"{section}.{_toml_key(name)}", item)
    return "\n".join(lines) + "\n"


def _is_table_array(value: Any) -> bool:
    """A list of tables that are not file entries (code roots): written as [[a.b.key]] sections,
    so a large tree is one file entry per line rather than one huge inline table."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, dict) and v.keys() != _FILE_KEYSET for v in value)
    )


def _emit_table(
    lines: list[str], header: str, table: dict[str, Any], *, array: bool = False
) -> None:
    lines.append("")
    lines.append(f"[[{header}]]" if array else f"[{header}]")
    nested = []
    for key, value in sorted(table.items()):
        if _is_table_array(value):
            nested.append((key, value))
        else:
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    for key, value in nested:
        for element in value:
            _emit_table(lines, f"{header}.{_toml_key(key)}", element, array=True)


def parse_lock(data: bytes) -> dict[str, Any]:
    """Parse lock bytes; an unknown major version is an error, never a guess."""
    import tomllib

    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput(
            f"{LOCK_NAME} is not valid TOML: {exc}", hint="delete it and run 'agentstack lock'"
        ) from None
    version = raw.get("version")
    if version != LOCK_VERSION:
        raise InvalidInput(
            f"{LOCK_NAME} has format version {version!r}; this agentstack reads version "
            f"{LOCK_VERSION}",
            hint="upgrade agentstack, or delete the lock and run 'agentstack lock'",
        )
    from agentstack.lock.model import LockModel

    LockModel.validate_lock(raw)
    for section in ("servers", "skills", "hooks"):
        raw.setdefault(section, {})
    raw.setdefault("instructions", [])
    return raw


def read_lock(root: Path) -> dict[str, Any] | None:
    try:
        data = (root / LOCK_NAME).read_bytes()
    except FileNotFoundError:
        return None
    return parse_lock(data)


def stat_cache_path(root: Path) -> Path:
    """The project's stat cache, `$AGENTSTACK_CACHE/statcache-v3/<project>.json`: one file per
    project (named by BLAKE3 of its real path), so a lock loads only its own project's entries."""
    import blake3

    from agentstack import layout
    from agentstack.paths import agentstack_cache

    name = blake3.blake3(os.fsencode(str(root.resolve()))).hexdigest()[:32]
    return Path(layout.stat_cache(str(agentstack_cache()))) / f"{name}.json"


def resolver_for(
    root: Path, previous: dict[str, Any] | None, *, limits: Limits | None = None, **kwargs: bool
) -> Resolver:
    from agentstack.paths import agentstack_cache

    cache = agentstack_cache()
    return Resolver(
        root=root,
        cache_dir=cache,
        stat_cache=StatCache(stat_cache_path(root)),
        previous=previous,
        limits=limits,
        **kwargs,
    )


def fresh_lock(
    root: Path,
    manifest: Manifest | ManifestView,
    *,
    verify_git: bool = False,
    recorder: Recorder | None = None,
) -> dict[str, Any]:
    """The lock on disk, checked against the manifest and every local byte it pins.

    Raises StaleLock (exit 1) when re-locking would change anything: the digest is only ever
    computed over a lock that describes what is on disk. With `recorder` (an
    `agentstack.lock.relock.Recorder` made before the manifest was read), a lock found fresh by
    rendering its bytes again gets the re-lock record `lock` would write for it.
    """
    manifest = as_view(manifest)
    fast = _fresh_by_bytes(root, manifest, verify_git=verify_git, recorder=recorder)
    if fast is not None:
        return fast
    try:
        return _fresh_by_parsing(root, manifest, verify_git=verify_git)
    except StaleLock:
        # The next `lock` resolves in full, whatever its re-lock record says (defence in depth:
        # a record is only ever written for the lock a resolution rendered).
        import agentstack.lock.relock as relock
        from agentstack import layout

        with contextlib.suppress(OSError):
            os.unlink(relock.record_path(layout.cache(), os.path.realpath(root)))
        raise


def loads_unvalidated(data: bytes) -> dict[str, Any] | None:
    """The lock's TOML data without validation (None when it is not TOML of this version): only
    for reusing git pins when the result is then checked byte for byte against `data`."""
    import tomllib

    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    return raw if raw.get("version") == LOCK_VERSION else None


def has_git_skills(manifest: ManifestView) -> bool:
    """Whether the manifest has git sources (skills or plugins), whose pins the lock keeps."""
    return any(skill.git is not None for skill in manifest.skills.values()) or any(
        plugin.git is not None for plugin in manifest.plugins.values()
    )


def _fresh_by_bytes(
    root: Path,
    manifest: ManifestView,
    *,
    verify_git: bool = False,
    recorder: Recorder | None = None,
) -> dict[str, Any] | None:
    """The re-resolved lock when it renders to exactly the bytes on disk (then the lock on disk
    is this lock: the bytes say so, and there is nothing to parse or validate), else None (the
    caller decides, with the parsing path's own errors)."""
    try:
        on_disk = (root / LOCK_NAME).read_bytes()
    except OSError:
        return None
    previous = None
    if has_git_skills(manifest):
        previous = loads_unvalidated(on_disk)  # git pins to reuse; checked by the bytes below
        if previous is None:
            return None
    resolver = resolver_for(root, previous, offline_git=not verify_git)
    if recorder is not None and previous is None:
        resolver.stat_cache.observed = []
    try:
        relocked = resolver.resolve(manifest)
    except Exception:  # noqa: BLE001 - any problem is reported by the parsing path
        return None
    finally:
        resolver.stat_cache.save()
    if dumps_lock(relocked).encode("utf-8") != on_disk:
        return None
    if recorder is not None and previous is None:
        _record_fresh(root, manifest, recorder, resolver, on_disk, relocked)
    return relocked


def _record_fresh(
    root: Path,
    manifest: ManifestView,
    recorder: Recorder,
    resolver: Resolver,
    on_disk: bytes,
    lock: dict[str, Any],
) -> None:
    """The re-lock record of a lock a resolution just rendered again (as `lock` writes it), when
    `lock` itself would accept the manifest (its sandbox grants are enforceable here)."""
    import agentstack.lock.relock as relock

    try:
        if not relock.enforceable(manifest.sandbox, str(root)):
            return
        manifest_bytes = (root / MANIFEST_NAME).read_bytes()
    except Exception:  # noqa: BLE001 - a record only saves work
        return
    recorder.seal(
        manifest=manifest_bytes,
        lock_text=on_disk,
        observed=resolver.stat_cache.observed,
        totals=(resolver.files_seen, resolver.bytes_seen, resolver.biggest),
        git=False,
        lock=lock,
    )
    recorder.keep(on_disk)


def _fresh_by_parsing(
    root: Path, manifest: ManifestView, *, verify_git: bool = False
) -> dict[str, Any]:
    current = read_lock(root)
    if current is None:
        raise StaleLock(f"no {LOCK_NAME} in {root}", hint="run 'agentstack lock'")
    if current["manifest"] != manifest_digest(manifest):
        raise StaleLock(
            f"{LOCK_NAME} does not match {MANIFEST_NAME}",
            hint="run 'agentstack lock' and review the change",
        )
    resolver = resolver_for(root, current, offline_git=not verify_git)
    try:
        relocked = resolver.resolve(manifest)
    except ManifestInvalid as exc:
        # A pinned file that vanished or changed kind: the lock no longer describes the disk.
        raise StaleLock(
            f"{LOCK_NAME} is stale: " + "; ".join(p.render() for p in exc.problems),
            hint="fix the problem, then run 'agentstack lock'",
        ) from None
    finally:
        resolver.stat_cache.save()
    if relocked != current:
        changed = changed_items(current, relocked)
        raise StaleLock(
            f"{LOCK_NAME} is stale: {', '.join(changed)} changed on disk",
            hint="run 'agentstack lock' and review the change",
        )
    return current


def changed_by_text(old_text: bytes, new_text: bytes, new: dict[str, Any]) -> list[str]:
    """`changed_items(old, new)` for an `old_text` that `dumps_lock` rendered (as it rendered
    `new_text` from `new`): an item's text is a function of the item alone, so the items whose
    text differs are exactly the items that differ, and only the headers of items that are gone
    are parsed. An item is its `[section.key]` line and the lines up to the next such line; the
    manifest's digest and the instructions are lines of the text before the first item."""

    def split(text: bytes) -> tuple[bytes, bytes, dict[bytes, bytes]]:
        head, *tables = text.removesuffix(b"\n").split(b"\n\n[")  # the last item like others
        chunks: dict[bytes, bytes] = {}
        current = b""
        for table in tables:
            line = table.split(b"\n", 1)[0]
            if not line.startswith(b"["):  # `[section.key]`, not `[[section.key.root]]`
                current = line
                chunks[current] = b""
            chunks[current] += b"\n\n[" + table
        at = head.index(b"\ninstructions = ")
        manifest = next(line for line in head[:at].split(b"\n") if line.startswith(b"manifest = "))
        return manifest, head[at:], chunks

    old_manifest, old_instructions, old_items = split(old_text)
    new_manifest, new_instructions, new_items = split(new_text)
    names: dict[bytes, tuple[str, str]] = {}
    for section in SECTIONS:
        for name in new.get(section, {}):
            names[f"{section}.{_toml_key(name)}]".encode()] = (section, name)
    for header in old_items.keys() - new_items.keys():  # gone: its name from its header
        import tomllib

        ((section, table),) = tomllib.loads("[" + header.decode("utf-8")).items()
        ((name, _),) = table.items()
        names[header] = (section, name)
    differ = {
        names[header]
        for header in old_items.keys() | new_items.keys()
        if old_items.get(header) != new_items.get(header)
    }
    changed = [
        f"{section}.{name}"
        for section in ("servers", "skills", "hooks", "plugins")
        for name in sorted(n for s, n in differ if s == section)
    ]
    if old_instructions != new_instructions:
        changed.append("instructions")
    changed += [f"surface[{rel}]" for rel in sorted(n for s, n in differ if s == "surface")]
    changed += [f"code_roots[{rel}]" for rel in sorted(n for s, n in differ if s == "code_roots")]
    if old_manifest != new_manifest:
        changed.append("manifest")
    return changed or ["lock format"]


def changed_items(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Dotted names of the lock items that differ (for messages)."""
    changed: list[str] = []
    for section in ("servers", "skills", "hooks", "plugins"):
        before, after = old.get(section, {}), new.get(section, {})
        for name in sorted(set(before) | set(after)):
            if before.get(name) != after.get(name):
                changed.append(f"{section}.{name}")
    if old.get("instructions") != new.get("instructions"):
        changed.append("instructions")
    before_surface, after_surface = old.get("surface", {}), new.get("surface", {})
    for rel in sorted(set(before_surface) | set(after_surface)):
        if before_surface.get(rel) != after_surface.get(rel):
            changed.append(f"surface[{rel}]")
    before_roots, after_roots = old.get("code_roots", {}), new.get("code_roots", {})
    for rel in sorted(set(before_roots) | set(after_roots)):
        if before_roots.get(rel) != after_roots.get(rel):
            changed.append(f"code_roots[{rel}]")
    if old.get("manifest") != new.get("manifest"):
        changed.append("manifest")
    return changed or ["lock format"]

"""Git sources: fetched into a bare mirror under $AGENTSTACK_CACHE and pinned by commit.

Safety: nothing here runs in a repository we do not own. The source is cloned `--mirror` into the
cache (a clone copies no config and no hooks), and only plumbing that never consults
`core.fsmonitor` is used (`fetch`, `rev-parse`, object reads). `git status`, `diff`, `ls-files` and
`add` are never run: a repo-local `core.fsmonitor` executes on them. `import git` costs ~170 ms and
spawns `git` twice, so this module is imported only when a git source must be resolved.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3

from agentstack import layout
from agentstack.errors import Refused, TreeHashError
from agentstack.lock.treehash import Limits, TreeEntry, _collision_key, check_links, check_name

GIT_TIMEOUT_S = 120
FULL_COMMIT = re.compile(r"^[0-9a-f]{40}$")
# Hardened options for every git invocation: no fsmonitor, no prompts, no hooks, no protocol the
# user did not write (file:// is allowed: teams share local mirrors and the tests use it).
_GIT_CONFIG = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "protocol.allow=never",
    "protocol.https.allow=always",
    "protocol.ssh.allow=always",
    "protocol.file.allow=always",
    "credential.interactive=never",
)


class GitSourceError(Exception):
    """Resolution failed; `field` names the manifest key at fault (git, rev or subdir)."""

    def __init__(self, field: str, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.message = message
        self.hint = hint


# git's words for "the network failed", as opposed to "no such repository" (a manifest problem).
_NETWORK_FAILURE = re.compile(
    r"could not resolve host|unable to access|failed to connect|connection (refused|timed out|"
    r"reset)|network is unreachable|temporary failure in name resolution|operation timed out|"
    r"could not read from remote repository.*\n?.*connection",
    re.IGNORECASE,
)


class GitUnreachable(Refused):
    """A fetch failed (offline, unreachable host, no access): not a manifest problem, exit 1."""


@dataclass(frozen=True, kw_only=True)
class ResolvedGit:
    commit: str
    git_tree: str
    entries: list[TreeEntry]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        GIT_TERMINAL_PROMPT="0",
        GIT_ASKPASS="/bin/false",
        SSH_ASKPASS="/bin/false",
        GIT_SSH_COMMAND="ssh -oBatchMode=yes",
        GIT_CONFIG_NOSYSTEM="1",
    )
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY"):
        env.pop(key, None)
    return env


def mirror_path(cache: Path, url: str) -> Path:
    return Path(layout.git_mirrors(str(cache))) / (blake3.blake3(url.encode()).hexdigest()[:32] + ".git")


def _git_args() -> list[str]:
    args: list[str] = []
    for item in _GIT_CONFIG:
        args += ["-c", item]
    return args


def _run(cmd: list[str], cwd: Path | None = None) -> str:
    import git  # lazy: see the module docstring

    runner = git.Git(str(cwd) if cwd else None)
    return str(
        runner.execute(
            ["git", *_git_args(), *cmd],
            env=_env(),
            kill_after_timeout=GIT_TIMEOUT_S,
            stdout_as_string=True,
        )
    )


def _fetch(cache: Path, url: str) -> Path:
    import git

    mirror = mirror_path(cache, url)
    try:
        if not (mirror / "HEAD").exists():
            mirror.parent.mkdir(parents=True, exist_ok=True)
            tmp = mirror.with_name(mirror.name + f".tmp{os.getpid()}")
            try:
                _run(["clone", "--mirror", "--quiet", "--", url, str(tmp)])
                os.replace(tmp, mirror)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        else:
            _run(["fetch", "--quiet", "--prune", "--tags", "--force", "origin"], cwd=mirror)
    except git.GitCommandError as exc:
        detail = (exc.stderr or "").strip().replace("\n", " ")[-300:]
        if _NETWORK_FAILURE.search(detail):
            raise GitUnreachable(
                f"cannot reach {url!r} (network): {detail}; nothing was written",
                hint="check the network connection, then run the command again",
            ) from None
        raise GitSourceError(
            "git",
            f"cannot fetch {url!r}: {detail or 'git failed'}",
            "check the URL and that you can reach it (git ls-remote URL)",
        ) from None
    return mirror


def _open(mirror: Path) -> Any:
    import git

    repo = git.Repo(str(mirror))
    repo.git.update_environment(**_env())  # object reads (cat-file) run hardened too
    return repo


def _read(
    repo: Any, commit_id: str, subdir: str | None, url: str, limits: Limits | None = None
) -> ResolvedGit:
    commit = repo.commit(commit_id)
    tree = commit.tree
    if subdir:
        try:
            tree = tree / subdir
        except KeyError:
            raise GitSourceError(
                "subdir", f"{subdir!r} does not exist at {commit_id[:12]} of {url!r}"
            ) from None
        if tree.type != "tree":
            raise GitSourceError("subdir", f"{subdir!r} is not a directory at {commit_id[:12]}")
    entries = _entries(repo, tree.hexsha, url, limits)
    return ResolvedGit(commit=commit_id, git_tree=tree.hexsha, entries=entries)


def open_mirror(cache: Path, url: str) -> Any:
    return _open(mirror_path(cache, url))


def read_pinned(
    cache: Path, url: str, commit_id: str, subdir: str | None, *, limits: Limits | None = None
) -> ResolvedGit:
    """Re-read a pinned commit (fetching only when the mirror lacks it)."""
    import git

    if not FULL_COMMIT.match(commit_id):
        raise GitSourceError("rev", f"the lock pins {commit_id!r}, which is not a full commit id")
    mirror = mirror_path(cache, url)
    if not _has_commit(mirror, commit_id):
        mirror = _fetch(cache, url)
        if not _has_commit(mirror, commit_id):
            raise GitSourceError(
                "rev",
                f"pinned commit {commit_id} is no longer in {url!r}",
                "run 'agentstack lock --update' and review the change",
            )
    try:
        return _read(_open(mirror), commit_id, subdir, url, limits)
    except (git.GitCommandError, ValueError) as exc:
        raise GitSourceError("git", f"cannot read {commit_id[:12]} of {url!r}: {exc}") from None


def _has_commit(mirror: Path, commit_id: str) -> bool:
    import git

    if not (mirror / "HEAD").exists():
        return False
    try:
        _run(["cat-file", "-e", f"{commit_id}^{{commit}}"], cwd=mirror)
    except git.GitCommandError:
        return False
    return True


def resolve(
    cache: Path, url: str, rev: str, subdir: str | None, *, limits: Limits | None = None
) -> ResolvedGit:
    """Fetch `url`, pin `rev` to a full commit id, and read the (sub)tree's entries."""
    import git

    mirror = _fetch(cache, url)
    commit_id = _commit_of(mirror, url, rev)
    try:
        return _read(_open(mirror), commit_id, subdir, url, limits)
    except (git.GitCommandError, ValueError) as exc:
        raise GitSourceError("git", f"cannot read {commit_id[:12]} of {url!r}: {exc}") from None


def fetch_and_resolve(cache: Path, url: str, rev: str) -> str:
    """Fetch `url` into its mirror and pin `rev` to a full commit id (plumbing only; for files
    read as git objects afterwards, such as a team policy)."""
    return _commit_of(_fetch(cache, url), url, rev)


def _commit_of(mirror: Path, url: str, rev: str) -> str:
    """The full commit id `rev` names in the mirror (rev-parse: plumbing only)."""
    import git

    try:
        return _run(
            ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"],
            cwd=mirror,
        ).strip()
    except git.GitCommandError:
        raise GitSourceError(
            "rev", f"{rev!r} is not a branch, tag or commit of {url!r}", "check 'git ls-remote URL'"
        ) from None


_MODES = {"100644": False, "100755": True, "120000": False}


def _entries(repo: Any, tree_id: str, url: str, limits: Limits | None) -> list[TreeEntry]:
    """Every blob under a tree, from `git ls-tree` (sizes known before any byte is read), each
    hashed from a stream: a huge blob never sits in memory whole."""
    where = f"{url}"
    listing = _run(["ls-tree", "-r", "-z", "-l", "--full-tree", tree_id], cwd=Path(repo.git_dir))
    items: list[tuple[str, str, str, int]] = []
    total = 0
    for record in listing.split("\0"):
        if not record:
            continue
        meta, _, rel = record.partition("\t")
        mode, kind, sha, size_text = meta.split()
        if kind == "commit" or mode == "160000":
            raise GitSourceError(
                "git",
                f"{rel} in {url!r} is a submodule; submodules cannot be pinned",
                "vendor its files into the repository, or point 'subdir' at a directory "
                "without submodules",
            )
        if kind != "blob" or mode not in _MODES:
            raise TreeHashError(f"{where}: {rel} has git mode {mode}, which cannot be pinned")
        size = int(size_text)
        if limits is not None and size > limits.max_file_bytes:
            raise limits.file_too_big(f"{where}", rel, size)
        total += size
        items.append((rel, mode, sha, size))
    if limits is not None and len(items) > limits.max_files:
        raise limits.too_many_files(where)
    if limits is not None and total > limits.max_total_bytes:
        raise limits.too_many_bytes(where)
    seen: dict[str, dict[str, str]] = {}
    for rel, _mode, _sha, _size in items:
        parent = ""
        for name in rel.split("/"):
            check_name(name, f"{where}: {rel}")
            key = _collision_key(name)
            siblings = seen.setdefault(parent, {})
            if siblings.get(key, name) != name:
                raise TreeHashError(f"{where}: {rel} collides with {siblings[key]!r} ignoring case")
            siblings[key] = name
            parent = f"{parent}/{name}"
    entries: list[TreeEntry] = []
    links: dict[str, str] = {}
    for rel, mode, sha, size in items:
        digest = _stream_digest(repo, sha)
        if mode == "120000":
            data = repo.odb.stream(bytes.fromhex(sha)).read()
            links[rel] = data.decode("utf-8", "surrogateescape")
            entries.append(
                TreeEntry(path=rel, kind="link", executable=False, size=size, digest=digest)
            )
        else:
            entries.append(
                TreeEntry(path=rel, kind="file", executable=_MODES[mode], size=size, digest=digest)
            )
    check_links(where, links)
    return entries


def _stream_digest(repo: Any, sha: str) -> str:
    stream = repo.odb.stream(bytes.fromhex(sha))
    hasher = blake3.blake3()
    while chunk := stream.read(1 << 20):
        hasher.update(chunk)
    return "b3:" + hasher.hexdigest()

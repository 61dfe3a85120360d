"""An unchanged `apply --write` without planning anything (docs/rendering.md, "The apply record").

A full `apply --write` renders every adapter's operations, reads every rendered file back, plans,
writes what changed, and fingerprints the surface again for the guard snapshot. When nothing
changed since the last `apply --write`, all of that produces the files, the ledger and the
snapshot already on disk. So after a full `apply --write`, a *record* is written next to the
ledger (`$AGENTSTACK_HOME/projects/<id>/apply-record.json`, which the project cannot write): what
that apply's outcome depended on, as `lstat` fingerprints. The next `apply --write` (after the
consent pipeline proved the lock fresh and the digest trusted, as always) checks the record; when
every fingerprint is the same, it reports "0 file(s) changed" without planning. Anything that
differs, or anything the record cannot vouch for, falls through to the full apply, which writes a
fresh record.

What a record vouches for:

- the **inputs**: the consent digest (which covers the manifest, the lock and every pinned byte),
  the harnesses asked for, the installed agentstack code and adapters (the re-lock record's code
  fingerprint), the interpreter, the uid and the environment the adapters render from;
- **every path the apply planned** (each rendered file, project-level and user-level, and each
  path it planned while absent), by `lstat` fingerprint `(st_dev, st_ino, st_size, st_mtime_ns,
  st_ctime_ns, st_mode)` or its absence: a rendered file edited, added, removed, chmod'ed or
  replaced by a link is a difference;
- **every directory** of the project (except inside `.git`) and every directory between the home
  directory and a planned path below it (the writes' trusted bases are the project and the home),
  by fingerprint: a name added, removed or renamed anywhere, or a directory
  replaced by a link, changes one;
- **agentstack's own state**: the ledger (its bytes), the guard snapshot, the trust log and its
  head, `.git/info/exclude` and the git hooks, by fingerprint (a `trust`, `revoke`, or a guard
  call that refreshed the snapshot since is a difference: the full apply runs);
- the racy-timestamp rule: the fingerprints are taken after a settling mark
  (`agentstack.apply.snapshot.SettleMark`), and a record is written only when every fingerprint's
  times are older than the mark on the mark's filesystem (or older than one second before the
  record was taken): a change made after the record was taken always changes a fingerprint.

Not recorded (every apply is a full one): the user-level setup, a harness served by a third-party
adapter, a plan-only or `--check` run, a run with `--force` or with conflicts.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

MAGIC = "agentstack-apply-record-v1"
RECORD_NAME = "apply-record.json"
_RACY_SLACK_NS = 1_000_000_000
# Set per shell, never read by an adapter: not part of what a render depends on.
_VOLATILE_ENV = frozenset({"_", "OLDPWD", "SHLVL"})

Fingerprint = list[int] | None


def record_path(root: Path) -> Path:
    from agentstack.paths import project_state_dir

    return project_state_dir(root) / RECORD_NAME


def _fingerprint(path: str) -> Fingerprint:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode]


def _settled(fp: Fingerprint, mark: list[int] | None, taken_ns: int) -> bool:
    if fp is None:
        return True
    newest = max(fp[3], fp[4])
    if newest < taken_ns - _RACY_SLACK_NS:
        return True
    return mark is not None and fp[0] == mark[0] and newest < mark[1]


def _inputs(root: Path, digest: str, harness: list[str] | None, git_hooks: bool) -> str:
    import blake3

    from agentstack.lock.relock import _code_token, _package_dirs

    env = sorted((k, v) for k, v in os.environ.items() if k not in _VOLATILE_ENV)
    parts = {
        "digest": digest,
        "root": str(root),
        "harness": sorted(harness) if harness is not None else None,
        "git_hooks": git_hooks,
        "code": _code_token(_package_dirs()),
        "python": sys.executable,
        "uid": os.getuid(),
        "home": str(Path.home()),
        "env": env,
    }
    text = json.dumps(parts, sort_keys=True, ensure_ascii=True)
    return blake3.blake3(text.encode("utf-8", "surrogateescape")).hexdigest()


def _state_paths(root: Path) -> list[str]:
    """agentstack's own files whose change makes a full apply's outcome differ."""
    from agentstack import githooks
    from agentstack.paths import agentstack_home, apply_ledger_path, guard_snapshot_path
    from agentstack.trust.store import TrustLog

    log = TrustLog(agentstack_home())
    out = [
        str(apply_ledger_path(root)), str(guard_snapshot_path(root)), str(log.path),
        str(log.head_path), str(root / ".git" / "info" / "exclude"),
    ]
    with contextlib.suppress(Exception):
        where = githooks.hooks_dir(githooks.worktree_of(root)).path
        out.append(str(where))
        for event in githooks.HOOKS:
            out += [str(where / event), str(where / (event + githooks.CHAINED))]
    return out


def _directories(root: Path, planned: list[str]) -> list[str] | None:
    """Every directory of the project but `.git`'s, and every directory below the home above a
    planned path outside the project; None when a walk fails."""
    found: set[str] = set()
    failed: list[OSError] = []
    for directory, dirs, _names in os.walk(root, onerror=failed.append):
        dirs[:] = [d for d in dirs if d != ".git"]
        found.add(directory)
    if failed:
        return None
    inside = str(root) + os.sep
    home = str(Path.home())
    for path in planned:
        if path.startswith(inside) or not path.startswith(home + os.sep):
            continue  # outside the home, the write base is the file's own directory
        parent = os.path.dirname(path)
        while parent not in found and parent != home and parent.startswith(home + os.sep):
            found.add(parent)
            parent = os.path.dirname(parent)
    return sorted(found)


def forget(root: Path) -> None:
    """Remove the record (before a full apply writes anything: a crash half-way leaves none)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(record_path(root))


def write_record(
    root: Path,
    digest: str,
    harness: list[str] | None,
    git_hooks: bool,
    planned: list[str],
    warnings: list[str],
    report: dict[str, Any],
) -> bool:
    """After a full `apply --write`: record what it depended on (see the module). False (and no
    record) when something cannot be vouched for."""
    from agentstack.apply.snapshot import SettleMark
    from agentstack.fsutil import write_atomic
    from agentstack.paths import ensure_private_dir, is_user_root

    forget(root)
    if is_user_root(root):
        return False
    from agentstack_adapters.registry import BUILTIN

    if any(h not in BUILTIN for h in harness or []):
        return False
    probe = SettleMark(root)
    mark = probe.take()
    taken = time.time_ns()
    directories = _directories(root, planned)
    if directories is None:
        return False
    files = {p: _fingerprint(p) for p in sorted(set(planned) | set(_state_paths(root)))}
    dirs = {d: _fingerprint(d) for d in directories}
    if not all(_settled(fp, mark, taken) for fp in [*files.values(), *dirs.values()]):
        return False
    record = {
        "magic": MAGIC,
        "inputs": _inputs(root, digest, harness, git_hooks),
        "files": files,
        "dirs": dirs,
        "warnings": warnings,
        "git_hooks": report.get("git_hooks", []),
    }
    ensure_private_dir(record_path(root).parent)
    write_atomic(record_path(root), json.dumps(record, sort_keys=True).encode("utf-8"), 0o600)
    return True


def proven(
    root: Path, digest: str, harness: list[str] | None, git_hooks: bool
) -> dict[str, Any] | None:
    """The record, when it proves that a full `apply --write` now would change nothing; else
    None. Read only when it is a regular file of this user that nobody else can write."""
    path = record_path(root)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read()
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        record = json.loads(data)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("magic") != MAGIC:
        return None
    files, dirs = record.get("files"), record.get("dirs")
    if not isinstance(files, dict) or not isinstance(dirs, dict):
        return None
    if not isinstance(record.get("warnings"), list):
        return None
    for table in (dirs, files):
        for path, fp in table.items():
            if _fingerprint(path) != fp:
                return None
    # New directories anywhere in the project change a recorded directory's times; the
    # project's own directory must be recorded (it always is).
    if str(root) not in dirs:
        return None
    if record.get("inputs") != _inputs(root, digest, harness, git_hooks):
        return None
    return record

"""What makes `apply --write` (and `trust --lock --apply`) cheaper, without weakening it.

Below BATCH_MIN files, the rendered files are written several at a time (`apply._write_parallel`):
every file lands whole with its mode, nothing temporary is left, a failure still surfaces (the first in plan order, once
every write has ended; a link met on the way as the usual refusal), and each file keeps
write_atomic's order (its bytes fsync'd before its rename, its directory fsync'd after).
`trust --lock --apply` writes the guard snapshot once (the apply's, after the files), and the
guard finds it settled."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

import agentstack.apply.engine as apply
import agentstack.apply.snapshot as snapshot
from agentstack import _guard, fsutil
from agentstack.errors import Refused
from tests.conftest import make_project, run_cli_in_process
from tests.guard.test_guard_speed import needs_a_mark
from tests.trust.test_trust_cli import FILES, MANIFEST


def _jobs(root: Path, count: int = 40) -> list[tuple[Path, bytes, bool, int, Path]]:
    jobs = []
    for i in range(count):
        executable = i % 7 == 0
        path = root / f"d{i % 5}" / f"sub{i % 3}" / f"f{i}.txt"
        jobs.append((path, f"file {i}\n".encode() * (i + 1), executable,
                     0o755 if executable else 0o644, root))
    return jobs


def test_every_file_lands_whole_with_its_mode(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path)
    apply._write_parallel(jobs)
    for path, data, _executable, mode, _ in jobs:
        assert path.read_bytes() == data
        assert path.stat().st_mode & 0o777 == mode
    left = [p for p in tmp_path.rglob("*") if p.is_file() and ".agentstack-" in p.name]
    assert left == []
    apply._write_parallel([(p, b"again\n", x, m, b) for p, _, x, m, b in jobs])  # replaced whole
    assert {p.read_bytes() for p, *_ in jobs} == {b"again\n"}


def test_writes_run_concurrently(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: set[int] = set()
    real = apply._write_atomic

    def spy(*args: Any, **kwargs: Any) -> None:
        seen.add(threading.get_ident())
        real(*args, **kwargs)

    monkeypatch.setattr(apply, "_write_atomic", spy)
    apply._write_parallel(_jobs(tmp_path))
    assert len(seen) > 1


def test_after_a_failure_no_write_starts_and_the_first_failure_is_raised(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = _jobs(tmp_path, 20)
    broken = {jobs[5][0]: OSError(28, "No space left on device"), jobs[12][0]: ValueError("x")}
    real = apply._write_atomic

    def failing(path: Path, *args: Any, **kwargs: Any) -> None:
        if path in broken:
            raise broken[path]
        real(path, *args, **kwargs)

    monkeypatch.setattr(apply, "_write_atomic", failing)
    with pytest.raises(OSError, match="No space left"):
        apply._write_parallel(jobs)
    # Each file is whole or absent; the ones before the failure were written (they started
    # first), and the last ones were never started.
    assert all(p.read_bytes() == d for p, d, *_ in jobs if p.exists())
    assert not any(p.exists() for p in broken)
    assert all(p.exists() for p, *_ in jobs[:5])
    assert not jobs[-1][0].exists()


def test_a_link_met_while_writing_is_the_usual_refusal(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = _jobs(tmp_path, 6)
    real = apply._write_atomic

    def linked(path: Path, *args: Any, **kwargs: Any) -> None:
        if path == jobs[3][0]:
            raise fsutil.LinkInPath(path.parent, path)
        real(path, *args, **kwargs)

    monkeypatch.setattr(apply, "_write_atomic", linked)
    with pytest.raises(Refused):
        apply._write_parallel(jobs)
    with pytest.raises(Refused):
        apply._write_parallel(jobs[3:4])  # one file: written in this thread, same refusal


def test_each_file_keeps_fsync_before_rename_and_directory_fsync_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[int, str, str]] = []
    lock = threading.Lock()
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd: int) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}")
        with lock:
            events.append((threading.get_ident(), "fsync", target))
        real_fsync(fd)

    def rename(src: Any, dst: Any, **kwargs: Any) -> None:
        real_rename(src, dst, **kwargs)
        with lock:
            events.append((threading.get_ident(), "rename", str(dst)))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    jobs = _jobs(tmp_path, 16)
    apply._write_parallel(jobs)
    monkeypatch.undo()
    for path, *_ in jobs:
        # in its thread: the temp file fsync'd, renamed to the name, then the directory fsync'd
        thread = next(e[0] for e in events if e[1] == "rename" and e[2] == path.name)
        order = [e for e in events if e[0] == thread]
        rename_at = order.index(next(e for e in order if e[1] == "rename" and e[2] == path.name))
        assert order[rename_at - 1][1] == "fsync" and ".agentstack-" in order[rename_at - 1][2]
        assert order[rename_at + 1] == (thread, "fsync", str(path.parent))


def test_trust_lock_apply_writes_the_snapshot_once_and_settled(
        tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    needs_a_mark(tmp_path)
    root = make_project(tmp_path / "proj", MANIFEST, FILES).resolve()
    taken: list[Path] = []
    real = snapshot.write_snapshot

    def counting(where: Path, *args: Any) -> list[str]:
        taken.append(where)
        return real(where, *args)

    monkeypatch.setattr(snapshot, "write_snapshot", counting)
    result = run_cli_in_process("trust", "--lock", "--apply", "--yes", "--accept-risk", cwd=root)
    assert result.returncode == 0, result.stderr
    assert len(taken) == 1
    state = os.environ["AGENTSTACK_HOME"]
    written = _guard.load_snapshot(_guard.snapshot_path(state, str(root)))
    mark = _guard._mark_of(written)
    assert mark is not None
    assert all(_guard._settled(e, mark) for e in written["files"].values()
               if e.get("hash") != "unreadable")
    event = json.dumps({"cwd": str(root), "hook_event_name": "PreToolUse", "tool_name": "Bash",
                        "tool_input": {"command": "ls"}}).encode()
    before = Path(_guard.snapshot_path(state, str(root))).read_bytes()
    _guard.decide("claude-code", event, state=state, project=str(root))
    assert Path(_guard.snapshot_path(state, str(root))).read_bytes() == before

    # Trust without --apply still writes it (the guard follows the new digest at once).
    taken.clear()
    (root / "AGENTS.base.md").write_text("Changed.\n")
    result = run_cli_in_process("trust", "--lock", "--yes", "--accept-risk", cwd=root)
    assert result.returncode == 0, result.stderr
    assert len(taken) == 1


def test_a_failed_project_write_never_leaves_the_harness_trusting_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The project's files are written before the user-level ones: when one of them fails (a full
    disk), the harness is not told to trust a project whose guard hook never landed."""
    import errno
    import json

    import agentstack.apply.engine as apply_module
    from tests.conftest import copy_example
    from tests.surface.test_surface import cli, ok

    root = copy_example("minimal", tmp_path).resolve()
    ok(root, "lock")
    ok(root, "trust", "--yes", "--accept-risk")
    real = apply_module.write_atomic

    def failing(path: Path, data: bytes, mode: int | None = None, *, base: Path | None = None
                ) -> None:
        if str(path).endswith(".claude/settings.local.json"):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, data, mode, base=base)

    monkeypatch.setattr(apply_module, "write_atomic", failing)
    result = cli(root, "apply", "--write")
    assert result.code == 1, result.output
    claude = Path.home() / ".claude.json"
    projects = json.loads(claude.read_text()).get("projects", {}) if claude.exists() else {}
    assert str(root) not in projects, projects

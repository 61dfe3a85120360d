"""Limits and clean refusals at `lock`: a huge git blob, too many files, a submodule, a
force-pushed pinned commit. Each is a refusal (exit 1 or 2) with a message, never exit 3, and a
large blob is never read into memory whole."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import git, make_project
from tests.harness.deadline import scaled

# In process (the huge-blob test starts its own, to read its peak memory): what these tests check
# is what `lock` answers, not the process.
from tests.support.cli import run_cli_in_process as run_cli


def _repo(path: Path, files: dict[str, bytes]) -> Path:
    path.mkdir(parents=True)
    for rel, data in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(data)
    git("init", "-q", "-b", "main", cwd=path)
    git("add", "-A", cwd=path)
    git("commit", "-qm", "one", cwd=path)
    return path


def _manifest(url: str, rev: str = "main", extra: str = "") -> str:
    return f'[project]\nname = "p"\n\n[skills.s]\ngit = "{url}"\nrev = "{rev}"\n{extra}'


def _assert_refused(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode in (1, 2), (result.returncode, result.stderr)
    assert "internal error" not in result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


def test_a_git_blob_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "src", {"SKILL.md": b"x\n", "big.bin": b"\0" * (3 << 20)})
    project = make_project(tmp_path / "p", _manifest(repo.as_uri()))
    refused = run_cli("lock", "--max-file-size", str(1 << 20), cwd=project)
    _assert_refused(refused, "big.bin", "--max-file-size")
    assert not (project / "agentstack.lock").exists()
    assert run_cli("lock", cwd=project).returncode == 0  # the default limit is far larger


@pytest.mark.slow
def test_a_huge_git_blob_is_hashed_without_reading_it_into_memory(tmp_path: Path) -> None:
    """512 MiB of zeros packs to well under a megabyte; hashing it must stream."""
    repo = tmp_path / "src"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "SKILL.md").write_text("x\n")
    with (repo / "huge.bin").open("wb") as handle:
        handle.truncate(512 << 20)
    git("add", "-A", cwd=repo)
    git("commit", "-qm", "huge", cwd=repo)
    (repo / "huge.bin").unlink()
    project = make_project(tmp_path / "p", _manifest(repo.as_uri()))
    probe = (
        "import resource, sys, runpy\n"
        "sys.argv = ['agentstack', 'lock', '--max-file-size', str(1 << 30)]\n"
        "try:\n    runpy.run_module('agentstack', run_name='__main__')\n"
        "except SystemExit as e:\n    code = e.code\n"
        # VmHWM: this process's own peak (ru_maxrss keeps the forking parent's across exec).
        "hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
        "print('RSS', hwm, code, file=sys.stderr)\n"
    )
    import os
    import sys

    from tests.conftest import REPO

    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-c", probe], cwd=project, env=env,
                            capture_output=True, text=True, timeout=scaled(300))
    line = [x for x in result.stderr.splitlines() if x.startswith("RSS")][-1]
    _, rss_kb, code = line.split()
    assert code == "0", result.stderr
    # Measured ~41 MB peak for a 512 MiB blob: it is never read whole.
    assert int(rss_kb) < 128 * 1024, line


def test_too_many_files_and_too_many_bytes_are_refused(tmp_path: Path) -> None:
    files = {f"skills/s/f{i}.md": f"{i}\n" for i in range(30)}
    project = make_project(tmp_path / "p", '[project]\nname = "p"\n\n[skills.s]\npath = "skills/s"\n',
                           files)
    _assert_refused(run_cli("lock", "--max-files", "10", cwd=project), "skills.s", "--max-files")
    _assert_refused(run_cli("lock", "--max-total-size", "20", cwd=project), "--max-total-size")
    bad = run_cli("lock", "--max-files", "lots", cwd=project)
    assert bad.returncode == 2
    assert run_cli("lock", cwd=project).returncode == 0


def test_a_submodule_in_a_git_skill_is_a_clean_refusal(tmp_path: Path) -> None:
    inner = _repo(tmp_path / "inner", {"README": b"inner\n"})
    repo = _repo(tmp_path / "src", {"SKILL.md": b"x\n"})
    git("-c", "protocol.file.allow=always", "submodule", "add", "-q", inner.as_uri(), "vendor",
        cwd=repo)
    git("commit", "-qm", "submodule", cwd=repo)
    project = make_project(tmp_path / "p", _manifest(repo.as_uri()))
    _assert_refused(run_cli("lock", cwd=project), "skills.s", "submodule", "vendor")
    # Without .gitmodules (a bare gitlink) it is refused the same way.
    git("rm", "-q", "--cached", ".gitmodules", cwd=repo)
    git("commit", "-qm", "no gitmodules", cwd=repo)
    _assert_refused(run_cli("lock", "--update", cwd=project), "submodule")


def test_a_force_pushed_pinned_commit_is_a_clean_refusal(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "src", {"SKILL.md": b"one\n"})
    (repo / "SKILL.md").write_text("two\n")
    git("commit", "-qam", "two", cwd=repo)
    project = make_project(tmp_path / "p", _manifest(repo.as_uri()))
    assert run_cli("lock", cwd=project).returncode == 0
    # History rewritten: the pinned commit is gone from every ref and from the objects.
    git("reset", "-q", "--hard", "HEAD~1", cwd=repo)
    (repo / "SKILL.md").write_text("rewritten\n")
    git("commit", "-qam", "rewritten", cwd=repo)
    git("reflog", "expire", "--expire=now", "--all", cwd=repo)
    git("gc", "-q", "--prune=now", cwd=repo)
    for args in (["lock"], ["lock", "--check"], ["lock", "--frozen"], ["digest"]):
        result = run_cli(*args, cwd=project)
        assert "internal error" not in result.stderr, (args, result.stderr)
    # A fresh cache (another machine): the commit cannot be fetched any more.
    import os
    import shutil

    shutil.rmtree(Path(os.environ["AGENTSTACK_CACHE"]) / "git")
    _assert_refused(run_cli("lock", cwd=project), "skills.s", "no longer")
    _assert_refused(run_cli("lock", "--frozen", cwd=project), "skills.s")

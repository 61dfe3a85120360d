"""`status`, `digest` and `show`: the entry point's fast path answers exactly as the command table
does (output, exit code, errors), and what these commands import stays what their data needs, so
their start-up cannot silently grow back (issue 16: each within 4x `python -I -c pass`).

What the fast path takes is pinned too: only the bare command, optionally `--json`; anything else
(root options, help, a second flag, a typo) goes through the command table (typer) and keeps its
usage errors.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, make_project, run_cli, run_cli_in_process
from tests.harness.deadline import scaled
from tests.support.project import NOTES_SERVER, manifest

MANIFEST = str(manifest("demo", "claude-code", "codex").server(*NOTES_SERVER).instructions("instructions/project.md"))
FILES = {"servers/notes.py": "print('notes')\n", "instructions/project.md": "Be kind.\n"}

READ = (["status"], ["status", "--json"], ["digest"], ["digest", "--json"], ["show"],
        ["show", "--json"])  # fmt: skip


def _fast(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`agentstack ARGS` in this process through the entry point's fast path (which must take it)."""
    from agentstack.entry import outcome
    from agentstack.readcmds import fast, run_fast

    read = fast(list(args))
    assert read is not None, args
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        patch.setattr(sys, "stdin", io.StringIO(""))
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = outcome(lambda: run_fast(*read))
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def _same(root: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    fast = _fast(*args, cwd=root)
    table = run_cli_in_process(*args, cwd=root)
    assert (fast.returncode, fast.stdout, fast.stderr) == (
        table.returncode, table.stdout, table.stderr
    ), args  # fmt: skip
    return fast


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "demo", MANIFEST, FILES)


def test_fast_path_takes_only_the_plain_forms() -> None:
    from agentstack.readcmds import fast

    assert fast(["status"]) == ("status", False)
    assert fast(["digest", "--json"]) == ("digest", True)
    assert fast(["show", "--json"]) == ("show", True)
    for argv in ([], ["status", "--json", "--json"], ["status", "-h"], ["digest", "--help"],
                 ["show", "--jsn"], ["status", "extra"], ["--project", ".", "status"],
                 ["--trust-digest", "b3:" + "0" * 64, "status"], ["--version"], ["lock"],
                 ["trust"], ["statu"], ["show", "--json", "x"]):  # fmt: skip
        assert fast(argv) is None, argv


def test_fast_path_answers_as_the_command_table_in_every_state(
    project: Path, tmp_path: Path
) -> None:
    """No lock (refused), fresh and untrusted, trusted and applied, stale after an edit, and
    outside any project (usage error): the same stdout, stderr and exit code either way."""
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    for args in READ:
        assert _same(nowhere, args).returncode == 2
        assert _same(project, args).returncode in (1, 2)  # no lock yet
    assert run_cli_in_process("lock", cwd=project).returncode == 0
    for args in READ:
        _same(project, args)
    assert _same(project, ["status"]).returncode == 1  # not trusted yet
    done = run_cli_in_process("trust", "--yes", "--accept-risk", "--apply", cwd=project)
    assert done.returncode == 0, done.stderr
    for args in READ:
        assert _same(project, args).returncode == 0, args
    status = json.loads(_same(project, ["status", "--json"]).stdout)
    assert (status["lock"], status["trust"], status["drift"]) == ("fresh", "trusted", [])
    (project / "servers/notes.py").write_text("print('changed')\n", encoding="utf-8")
    first = _fast("status", cwd=project)  # withdraws the harness-side trust (once)
    assert first.returncode == 1 and "withdrew" in first.stderr
    for args in READ:
        _same(project, args)
    status = json.loads(_same(project, ["status", "--json"]).stdout)
    assert status["lock"] == "stale" and _same(project, ["status"]).returncode == 1
    assert _same(project, ["digest"]).returncode == 1


# Never on the path of these three commands: the validation models, the renderers, the command
# table and its parser, rich (except `show` without --json), the review's diff of an unchanged
# project, the git and subprocess machinery, the stdlib modules that only writers need, and
# `dataclasses` (with `inspect`, ~5 ms to import, and ~1 ms per class defined).
NEVER = ("pydantic", "pydantic_core", "agentstack.manifest.model", "agentstack.lock.model",
         "agentstack_adapters", "agentstack.apply.engine", "agentstack.apply.command", "agentstack.cli",
         "agentstack.cli_base", "agentstack.consent.render", "agentstack.consent.diff", "agentstack.lock.gitsource",
         "agentstack.fsutil", "argparse", "rich", "typer", "click", "git", "subprocess",
         "secrets", "difflib", "hashlib", "dataclasses", "inspect")  # fmt: skip

PROBE = """\
import os, sys
def report():
    print("\\nMODULES:" + ",".join(sorted(sys.modules)), file=sys.stderr)
    sys.stderr.flush()
real_exit = os._exit
def fast_exit(code):  # the fast path ends without the interpreter's teardown
    report()
    real_exit(code)
os._exit = fast_exit
sys.argv = ["agentstack", *sys.argv[1:]]
from agentstack.entry import main
try:
    main()
except SystemExit:
    report()
    raise
"""


def test_status_digest_and_show_import_only_what_their_data_needs(project: Path) -> None:
    """In a locked, trusted, applied project (what `benchmarks/cli.py` times), as a user runs
    them: a fresh interpreter, the console script's entry point."""
    assert run_cli("trust", "--lock", "--apply", "--yes", "--accept-risk", cwd=project).returncode == 0
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for args in (["status"], ["status", "--json"], ["digest"], ["digest", "--json"],
                 ["show", "--json"]):  # fmt: skip
        for _ in range(2):  # the second run: every cache warm, as in the benchmark
            result = subprocess.run(
                [sys.executable, "-I", "-c", PROBE, *args],
                cwd=project, capture_output=True, text=True, env=env, timeout=scaled(60),
            )  # fmt: skip
            assert result.returncode == 0, (args, result.stderr)
        if "--json" in args:  # the whole output reached the pipe before the fast exit
            json.loads(result.stdout)
        elif args == ["digest"]:
            assert result.stdout.startswith("b3:") and result.stdout.endswith("\n")
        modules = set(result.stderr.rsplit("MODULES:", 1)[1].strip().split(","))
        assert "agentstack.consent.document" in modules, "the probe did not run the command"
        loaded = sorted(m for m in modules if m.split(".")[0] in NEVER or m in NEVER)
        assert loaded == [], (args, loaded)


class _Exited(Exception):
    pass


@pytest.mark.parametrize(("handlers", "fast"), [(0, True), (1, False)])
def test_the_fast_exit_is_taken_only_when_nothing_is_left_to_do_at_exit(
    monkeypatch: pytest.MonkeyPatch, handlers: int, fast: bool
) -> None:
    """Without exit handlers or other threads the process ends at once (after flushing); an exit
    handler (or a thread) gets the interpreter's normal exit, which runs it."""
    import atexit

    from agentstack import entry

    def os_exit(code: int) -> None:
        raise _Exited(code)

    monkeypatch.setattr(entry.os, "_exit", os_exit)
    monkeypatch.setattr(atexit, "_ncallbacks", lambda: handlers)
    threading = sys.modules.get("threading")
    if threading is not None:
        monkeypatch.setattr(threading, "active_count", lambda: 1)
    if fast:
        with pytest.raises(_Exited) as exited:
            entry.end(3)
        assert exited.value.args == (3,)
    else:
        with pytest.raises(SystemExit) as normal:
            entry.end(3)
        assert normal.value.code == 3


# The modules on these commands' own path define no dataclass and compile nothing heavy at import:
# defining one dataclass costs about 1 ms, a tenth of the interpreter's start-up.
LEAN = ("entry", "readcmds", "projectstatus", "trust.review", "trust.store", "consent.document",
        "apply.ledger", "paths", "layout", "errors", "canonical", "storage")  # fmt: skip


@pytest.mark.parametrize("name", LEAN)
def test_read_path_modules_define_no_dataclass(name: str) -> None:
    tree = ast.parse((REPO / "agentstack" / f"{name.replace('.', '/')}.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names]
            module = getattr(node, "module", None) or ""
            assert "dataclasses" not in (module, *names), f"agentstack.{name} imports dataclasses"


def test_harness_instruction_targets_are_the_adapters_own() -> None:
    """`agentstack.harnesses.RENDERS_INTO` (what a lock check uses, without importing the
    renderers) is exactly what every built-in adapter says it renders into."""
    from agentstack_adapters.registry import BUILTIN, instruction_targets

    from agentstack.harnesses import RENDERS_INTO
    from agentstack.harnesses import instruction_targets as light

    declared = {n: tuple(getattr(a, "renders_into", ())) for n, a in BUILTIN.items()}
    assert {n: v for n, v in declared.items() if v} == RENDERS_INTO
    names = list(BUILTIN)
    assert instruction_targets(names) == light(names) == {"CLAUDE.md": "claude-code",
                                                          "AGENTS.md": "codex"}


# ------------------------------------------------------------------------- the trust log's reads


def test_a_reader_verifies_unchanged_bytes_once_and_sees_every_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`status` asks the log several questions: each reads the head and the log again, but the
    chain is checked only when the bytes differ from the ones already checked, so a change made
    between two questions (an append, a tampered byte, a truncation) is always seen."""
    import agentstack.trust.chain as chain
    from agentstack.trust.record import TrustLogTampered
    from agentstack.trust.store import TrustLog

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    writer, reader = TrustLog(home), TrustLog(home)
    project, first, second = "/p", "b3:" + "1" * 64, "b3:" + "2" * 64
    writer.append("trust", project, first)
    scans: list[int] = []
    real = chain._scan_full

    def counting(lines: list[bytes]) -> Any:
        scans.append(len(lines))
        return real(lines)

    monkeypatch.setattr(chain, "_scan_full", counting)
    assert reader.state_for(project, first) == "trusted"
    assert reader.last_trusted(project) is not None and reader.trusted_digests(project) == [first]
    assert scans == [1]  # three questions, one check
    writer.append("trust", project, second)
    assert reader.last_trusted(project).digest == second  # type: ignore[union-attr]
    assert scans == [1, 2]
    data = reader.path.read_bytes()
    reader.path.write_bytes(data.replace(first.encode(), ("b3:" + "3" * 64).encode()))
    with pytest.raises(TrustLogTampered):
        reader.state_for(project, first)
    reader.path.write_bytes(data[: data.index(b"\n") + 1])  # the last record cut off
    with pytest.raises(TrustLogTampered):
        reader.records()
    reader.path.write_bytes(data)
    assert reader.verify().ok and reader.state_for(project, second) == "trusted"


def _repository(tmp_path: Path) -> tuple[Path, list[str]]:
    """A git repository holding CLAUDE.md and AGENTS.md (neither added), and the git command
    line to change it with."""
    import subprocess

    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "CLAUDE.md").write_text("x\n")
    (root / "AGENTS.md").write_text("y\n")
    return root, ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]


def test_status_asks_git_what_it_tracks_only_when_the_index_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    from agentstack import _guard
    from agentstack.projectstatus import tracked_files

    root, git = _repository(tmp_path)
    path = os.environ["PATH"]
    monkeypatch.setenv("PATH", "/nonexistent")
    assert tracked_files(root, ["CLAUDE.md"]) == []  # no index yet: nothing tracked, no git run
    monkeypatch.setenv("PATH", path)
    subprocess.run([*git, "add", "CLAUDE.md"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    asked = ["AGENTS.md", "CLAUDE.md"]
    # Written just now: within the racy window nothing is kept, git answers every time.
    assert tracked_files(root, asked) == ["CLAUDE.md"]
    monkeypatch.setenv("PATH", "/nonexistent")
    assert tracked_files(root, asked) == []  # no git, no kept answer: nothing claimed
    monkeypatch.setenv("PATH", path)
    monkeypatch.setattr(_guard, "RACY_SLACK_NS", 0)  # the index has settled
    assert tracked_files(root, asked) == ["CLAUDE.md"]
    monkeypatch.setenv("PATH", "/nonexistent")
    assert tracked_files(root, asked) == ["CLAUDE.md"]  # kept: git was not started
    assert tracked_files(root, ["AGENTS.md"]) == []  # other paths: not the kept answer
    monkeypatch.setenv("PATH", path)
    subprocess.run([*git, "rm", "-q", "--cached", "CLAUDE.md"], check=True)
    subprocess.run([*git, "add", "AGENTS.md"], check=True)
    assert tracked_files(root, asked) == ["AGENTS.md"]  # the index changed: git asked again


def test_status_keeps_no_answer_git_gave_for_another_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a git hook (GIT_INDEX_FILE set, e.g. `git commit <paths>`'s temporary index) git
    answers for another index than `.git/index`: that answer is never kept under its key."""
    import shutil
    import subprocess

    from agentstack import _guard
    from agentstack.projectstatus import tracked_files

    root, git = _repository(tmp_path)
    subprocess.run([*git, "add", "AGENTS.md"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    monkeypatch.setattr(_guard, "RACY_SLACK_NS", 0)
    other = tmp_path / "other-index"
    shutil.copy(root / ".git" / "index", other)
    subprocess.run([*git, "add", "CLAUDE.md"], check=True,
                   env={**os.environ, "GIT_INDEX_FILE": str(other)})
    monkeypatch.setenv("GIT_INDEX_FILE", str(other))
    assert tracked_files(root, ["CLAUDE.md"]) == ["CLAUDE.md"]  # git's answer for that index
    monkeypatch.delenv("GIT_INDEX_FILE")
    assert tracked_files(root, ["CLAUDE.md"]) == []  # the real index: not what was kept

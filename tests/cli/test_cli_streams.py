"""Output where tools expect it: a command's result on stdout (so `agentstack status | grep` works),
messages on stderr; a read command that changes user-level files says so; a mistyped command line
exits 2 with a did-you-mean."""

from __future__ import annotations

import pytest

from agentstack.didyoumean import close_matches, hint
from tests.conftest import run_cli_in_process
from tests.support.project import manifest, trusted_example

BASE = str(manifest("p", "claude-code"))


@pytest.fixture
def project(tmp_path):  # type: ignore[no-untyped-def]
    return trusted_example("minimal", tmp_path)


def test_status_prints_its_report_on_stdout(project) -> None:  # type: ignore[no-untyped-def]
    done = run_cli_in_process("status", cwd=project)
    assert done.returncode == 0, done.stderr
    assert "trust     trusted" in done.stdout and "lock      fresh" in done.stdout
    assert "trust     trusted" not in done.stderr


def test_status_says_it_withdraws_user_level_trust(project) -> None:  # type: ignore[no-untyped-def]
    (project / "AGENTS.base.md").write_text("changed\n", encoding="utf-8")
    done = run_cli_in_process("status", cwd=project)
    assert done.returncode == 1
    assert "lock      STALE" in done.stdout
    assert "withdrew agentstack's harness-side trust from" in done.stderr
    assert ".claude.json" in done.stderr
    helped = run_cli_in_process("status", "--help", cwd=project, env={"COLUMNS": "200"})
    assert "withdraws agentstack's harness-side trust entries from user-level files" in helped.stdout


def test_doctor_and_why_print_their_answers_on_stdout(project) -> None:  # type: ignore[no-untyped-def]
    doctor = run_cli_in_process("doctor", cwd=project)
    assert "landlock" in doctor.stdout.lower() and doctor.stderr.strip() == ""
    why = run_cli_in_process("why", "--path", "notes.md", "--op", "write", cwd=project)
    assert why.stdout.startswith("allowed") and why.returncode == 0


@pytest.mark.parametrize("argv,message", [
    (["--bogus"], "no such option: --bogus"),
    (["statsu"], "no such command 'statsu'; did you mean 'status'?"),
    (["status", "--jsn"], "no such option: --jsn; did you mean '--json'?"),
    (["trust", "--accept-rsk"], "did you mean '--accept-risk'?"),
    (["quarantine", "lst"], "did you mean 'list'?"),
    (["--projct", ".", "status"], "did you mean '--project'?"),
    (["--project", "."], "missing command"),
])
def test_a_mistyped_command_line_exits_2_with_a_hint(tmp_path, argv, message) -> None:  # type: ignore[no-untyped-def]
    done = run_cli_in_process(*argv, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr
    assert "Commands:" not in done.stdout  # not the help text with exit 0


def test_did_you_mean_offers_only_close_words() -> None:
    assert close_matches("--jsn", ["--json", "--yes"]) == ["--json"]
    assert close_matches("--json=1", ["--json"]) == ["--json"]
    assert hint("zzzz", ["status", "trust"]) == ""


def test_apply_dry_run_after_a_hand_edit_knows_the_digest_is_trusted(project) -> None:  # type: ignore[no-untyped-def]
    mcp = project / ".mcp.json"
    mcp.write_text(mcp.read_text(encoding="utf-8").replace("python3", "/bin/sh"), encoding="utf-8")
    done = run_cli_in_process("apply", cwd=project)
    assert "once the digest is trusted" not in done.stderr
    assert "would change" in done.stderr and "(the digest is trusted)" in done.stderr


@pytest.mark.parametrize("argv", [["status"], ["doctor"], ["show"], ["trust", "list"],
                                  ["keys", "list"]])
def test_tables_at_80_columns_never_split_a_word(project, argv) -> None:  # type: ignore[no-untyped-def]
    """At COLUMNS=80 every line fits, unless it is one word longer than the line (a digest or a
    path, kept whole); and the words are exactly those of the unwrapped output, in order."""
    (project / "AGENTS.base.md").write_text(
        "Run the tests before you commit; " * 6 + "\n", encoding="utf-8")
    wide = run_cli_in_process(*argv, cwd=project, env={"COLUMNS": "10000"})
    narrow = run_cli_in_process(*argv, cwd=project, env={"COLUMNS": "80"})
    assert narrow.returncode == wide.returncode
    for line in narrow.stdout.splitlines():
        assert len(line) <= 80 or len(line.split()) == 1 or len(line.strip().split()) == 1, line
    assert narrow.stdout.split() == wide.stdout.split()

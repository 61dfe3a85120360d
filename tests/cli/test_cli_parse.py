"""The command line's own parsing (typer, under `agentstack.cli`): usage errors exit 2 with the
usage and where help is, help exits 0, and the option forms the commands document. The messages
are typer's (click's) wording, as one `error:` line."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import make_project, run_cli_in_process

BASE = '[project]\nname = "p"\nharnesses = ["claude-code", "codex"]\n'


def test_usage_errors_exit_2_with_the_usage(tmp_path: Path) -> None:
    for args, said in (
        (["digest", "--bogus"], "no such option: --bogus"),
        (["nosuch"], "no such command 'nosuch'"),
        (["trust", "bogus"], "no such command 'bogus'"),
        (["lock", "--max-files", "0"], "'--max-files': 0 is not in the range x>=1"),
        (["lock", "--max-files", "many"], "'many' is not a valid int"),
        (["remove", "server"], "missing argument 'NAME'"),
        (["add", "hook", "h", "--event", "Stop"], "missing argument '-- CMD"),
        (["add", "hook", "h", "--", "true"], "missing option '--event'"),
        (["quarantine", "release", "abc"], "missing option '--into'"),
    ):
        result = run_cli_in_process(*args, cwd=tmp_path)
        assert result.returncode == 2, (args, result.stderr)
        assert said in result.stderr, (args, result.stderr)
        assert result.stderr.startswith("Usage: agentstack"), result.stderr
        assert "--help' for help" in result.stderr


def test_groups_without_a_command_show_their_help_and_exit_2(tmp_path: Path) -> None:
    for group in ("add", "secret", "keys", "quarantine", "shims"):
        result = run_cli_in_process(group, cwd=tmp_path)
        assert result.returncode == 2 and "Commands:" in result.stdout, group


def test_help_exits_0_everywhere(tmp_path: Path) -> None:
    for args in (["--help"], ["-h"], [], ["trust", "--help"], ["trust", "list", "-h"],
                 ["add", "server", "--help"], ["run", "--help"], ["quarantine", "release", "-h"]):
        result = run_cli_in_process(*args, cwd=tmp_path)
        assert result.returncode == 0 and result.stdout.startswith("Usage: agentstack"), args
    # After `--`, -h belongs to the command.
    root = make_project(tmp_path / "p", BASE)
    added = run_cli_in_process("add", "server", "s", "--", "tool", "-h", cwd=root)
    assert added.returncode == 0, added.stderr
    assert 'args = ["-h"]' in (root / "agentstack.toml").read_text()


def test_option_forms(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", BASE)
    assert run_cli_in_process("add", "server", "s", "--env", "A=1", "--env=B=2", "--", "t",
                              cwd=root).returncode == 0
    text = (root / "agentstack.toml").read_text()
    assert 'A = "1"' in text and 'B = "2"' in text
    again = run_cli_in_process("add", "server", "s", "--", "u", cwd=root)
    assert again.returncode == 2 and "already exists" in again.stderr
    assert run_cli_in_process("add", "server", "s", "--no-replace", "--", "u",
                              cwd=root).returncode == 2
    assert run_cli_in_process("add", "server", "s", "--replace", "--", "u",
                              cwd=root).returncode == 0
    assert 'command = "u"' in (root / "agentstack.toml").read_text()
    # --project is a directory; the root options come before the command.
    (tmp_path / "file").write_text("")
    bad = run_cli_in_process("--project", str(tmp_path / "file"), "digest", cwd=tmp_path)
    assert bad.returncode == 2 and "is a file" in bad.stderr
    locked = run_cli_in_process("--project", str(root), "lock", cwd=tmp_path)
    assert locked.returncode == 0, locked.stderr
    digest = run_cli_in_process(f"--project={root}", "digest", cwd=tmp_path)
    assert digest.returncode == 0 and digest.stdout.startswith("b3:")
    version = run_cli_in_process("--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("agentstack ")


def test_run_takes_the_command_with_or_without_dashdash(tmp_path: Path) -> None:
    """`run CMD --flag` passes --flag to CMD, as `run -- CMD --flag` does (refused here: nothing
    is trusted, which shows the line was parsed)."""
    root = make_project(tmp_path / "p", BASE)
    assert run_cli_in_process("lock", cwd=root).returncode == 0
    for args in (["run", "--", "true", "--x"], ["run", "true", "--x"]):
        result = run_cli_in_process(*args, cwd=root)
        assert result.returncode == 1 and "not trusted" in result.stderr, (args, result.stderr)

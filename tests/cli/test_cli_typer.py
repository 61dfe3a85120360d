"""The command line on typer (`agentstack.cli`): the paths that must start fast never load typer,
click or rich; a table command loads typer and its own module only; the commands list agrees
with the commands; shell completion comes from typer."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.harness.deadline import scaled
from tests.support.cli import steps
from tests.support.project import copy_example

# The CLI framework and what only a person reads: never on a fast path.
FRAMEWORK = ("typer", "click", "rich", "shellingham", "pydantic")


# Runs CODE (argv[1]) as the program with the rest as its arguments, and reports every module
# loaded when it ends (the fast paths end with os._exit, skipping the interpreter's teardown).
PROBE = """\
import os, sys
def report():
    sys.stderr.write("\\nMODULES:" + ",".join(sorted(sys.modules)) + "\\n")
    sys.stderr.flush()
real_exit = os._exit
def fast_exit(code):
    report()
    real_exit(code)
os._exit = fast_exit
code, sys.argv = sys.argv[1], ["agentstack", *sys.argv[2:]]
try:
    exec(compile(code, "<program>", "exec"), {"__name__": "__main__"})
except SystemExit:
    report()
    raise
report()
"""
MAIN = "from agentstack.entry import main; main()"


def _imported(code: str, args: list[str], cwd: Path, stdin: bytes = b"") -> tuple[int, set[str], str]:
    """Run CODE as `agentstack ARGS` in a fresh interpreter (-I, as the console script and the
    rendered hooks run): its exit code, every module it loaded and its stdout."""
    result = subprocess.run([sys.executable, "-I", "-c", PROBE, code, *args], cwd=cwd,
                            input=stdin, capture_output=True, timeout=scaled(120))
    report = result.stderr.decode().rsplit("MODULES:", 1)
    assert len(report) == 2, result.stderr.decode()
    return result.returncode, set(report[1].strip().split(",")), result.stdout.decode()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    # Set up in this process: the tests start their own interpreters for what they measure.
    return steps(copy_example("minimal", tmp_path),
                 [("trust", "--lock", "--apply", "--yes", "--accept-risk")], in_process=True)


def test_the_fast_paths_load_no_cli_framework(project: Path) -> None:
    """The guard (as the rendered hook runs it), `status`, `digest`, `show --json` and an
    unchanged `lock` start without typer, click, rich or pydantic (`run -- CMD`:
    tests/sandbox/test_run_launch.py::test_run_imports_nothing_it_does_not_need_before_exec)."""
    settings = json.loads((project / ".claude/settings.local.json").read_text())
    hook = settings["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    words = shlex.split(hook)
    assert words[1:3] == ["-I", "-c"], words
    event = {"hook_event_name": "PreToolUse", "session_id": "s", "cwd": str(project),
             "tool_name": "Read", "tool_input": {"file_path": str(project / "README.md")}}
    cases: list[tuple[str, list[str], bytes]] = [
        (words[3], words[4:], json.dumps(event).encode()),
        *((MAIN, args, b"") for args in (
            ["status"], ["status", "--json"], ["digest"], ["show", "--json"], ["lock"],
            ["lock", "--check"])),
    ]
    for program, argv, stdin in cases:
        code, modules, out = _imported(program, argv, project, stdin)
        assert code == 0, (argv, out)
        assert "agentstack._guard" in modules or "agentstack.entry" in modules, argv  # it ran
        heavy = sorted(m for m in modules if m.split(".")[0] in FRAMEWORK)
        assert heavy == [], (argv, heavy)
        assert not any(m.startswith("agentstack.cli") for m in modules), argv


def test_a_table_command_loads_typer_and_its_own_module_only(project: Path) -> None:
    for args, own in ((["secret", "list"], "agentstack.cli.secret"),
                      (["keys", "list"], "agentstack.cli.keys"),
                      (["trust", "log", "--verify"], "agentstack.cli.trust"),
                      (["policy", "show"], "agentstack.cli.policy")):
        code, modules, _ = _imported(MAIN, args, project)
        assert code == 0, args
        assert "typer" in modules, args
        cli = {m for m in modules if m.startswith("agentstack.cli")}
        assert cli == {"agentstack.cli", "agentstack.cli._app", "agentstack.cli._common", own}, args
        assert not {m.split(".")[0] for m in modules} & {"rich", "pydantic", "git"}, args
    # The commands list names every command without importing any of them.
    code, modules, out = _imported(MAIN, ["--help"], project)
    assert code == 0 and "quarantine" in out and "status" in out
    assert {m for m in modules if m.startswith("agentstack.cli")} == {
        "agentstack.cli", "agentstack.cli._app", "agentstack.cli._common"}


def test_the_commands_list_is_the_commands() -> None:
    """`_app.COMMANDS` (what `--help` lists without importing) names every command each module
    declares, in its module, with the command's own first line of help."""
    import importlib

    import typer

    from agentstack.cli._app import COMMANDS, load, short_help

    for name, (_, text) in COMMANDS.items():
        command = load(name)
        assert command is not None, name
        assert short_help(command) == text, name
    for module in {m for m, _ in COMMANDS.values()}:
        declared = typer.main.get_command(importlib.import_module(f"agentstack.cli.{module}").app)
        names = declared.list_commands(typer.Context(declared)) if isinstance(
            declared, typer.core.TyperGroup) else [declared.name]
        assert {n: COMMANDS[n][0] for n in names if n in COMMANDS} == dict.fromkeys(names, module)


def _complete(words: str, cwd: Path) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), _AGENTSTACK_COMPLETE="complete_bash",
               COMP_WORDS=words, COMP_CWORD=str(len(words.split()) - (0 if words.endswith(" ")
                                                                       else 1)))
    done = subprocess.run([sys.executable, "-m", "agentstack"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=scaled(60))
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_shell_completion_comes_from_typer(tmp_path: Path) -> None:
    assert _complete("agentstack sta", tmp_path) == ["status"]
    assert _complete("agentstack quarantine re", tmp_path) == ["release"]
    assert "--json" in _complete("agentstack status --j", tmp_path)
    assert "--accept-risk" in _complete("agentstack trust --acc", tmp_path)
    # The script a shell sources, for the shell it runs in (bash here), and its installation.
    env = dict(os.environ, PYTHONPATH=str(REPO), HOME=str(tmp_path))
    # `; exit $?`: bash stays the program's parent (typer asks the parent which shell it is).
    shown = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -m agentstack --show-completion; exit $?'],
        env=env, capture_output=True, text=True, timeout=scaled(60))
    assert shown.returncode == 0, shown.stderr
    assert "_AGENTSTACK_COMPLETE=complete_bash" in shown.stdout
    assert "complete -o default -F _agentstack_completion agentstack" in shown.stdout
    installed = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -m agentstack --install-completion; exit $?'],
        env=env, capture_output=True, text=True, timeout=scaled(60))
    assert installed.returncode == 0, installed.stderr
    assert "completion installed in" in installed.stdout
    assert ".bash_completions/agentstack.sh" in (tmp_path / ".bashrc").read_text()

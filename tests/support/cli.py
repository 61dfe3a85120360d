"""The `agentstack` command as the tests run it: in a real process (`run_cli`) for what only a
process shows (start-up, imports, signals, terminals), in this process (`run_cli_in_process`) for
everything else; `ok` / `ok_in_process` require exit 0 and say what the command printed if not."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.harness.deadline import scaled

REPO = Path(__file__).resolve().parents[2]

Done = subprocess.CompletedProcess[str]


def run_cli(*args: str, cwd: Path, input: str | None = None,
            env: dict[str, str] | None = None) -> Done:
    """Run the real `agentstack` command in a subprocess (the environment is the test's)."""
    full_env = dict(os.environ)
    # The checkout's own package, even when the editable install predates a new module.
    full_env["PYTHONPATH"] = str(REPO) + os.pathsep + full_env.get("PYTHONPATH", "")
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "agentstack", *args],
        cwd=cwd, input=input, capture_output=True, text=True, env=full_env, timeout=scaled(120),
    )


def run_cli_in_process(*args: str, cwd: Path, input: str | None = None,
                       env: dict[str, str] | None = None) -> Done:
    """The same command in this process (no interpreter start-up): `agentstack.cli.dispatch`
    with the exit-code mapping of `agentstack.entry`, stdout and stderr captured."""
    from agentstack.cli import dispatch
    from agentstack.entry import outcome

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        for key, value in (env or {}).items():
            patch.setenv(key, value)
        patch.setattr(sys, "stdin", io.StringIO(input or ""))  # not a terminal: never prompts
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = outcome(lambda: dispatch(list(args)))
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def _require(done: Done) -> Done:
    assert done.returncode == 0, (
        f"{done.args} exited {done.returncode}\n"
        f"--- stdout\n{done.stdout}--- stderr\n{done.stderr}")
    return done


def ok(*args: str, cwd: Path, input: str | None = None, env: dict[str, str] | None = None) -> Done:
    """`run_cli` that requires exit 0; returns the finished command (its stdout and stderr)."""
    return _require(run_cli(*args, cwd=cwd, input=input, env=env))


def ok_in_process(*args: str, cwd: Path, input: str | None = None,
                  env: dict[str, str] | None = None) -> Done:
    """`run_cli_in_process` that requires exit 0."""
    return _require(run_cli_in_process(*args, cwd=cwd, input=input, env=env))


TRUST = (("lock",), ("trust", "--yes", "--accept-risk"))
TRUST_AND_APPLY = (*TRUST, ("apply", "--write"))


def steps(root: Path, commands: Iterable[tuple[str, ...]] = TRUST_AND_APPLY, *,
          in_process: bool = False, env: dict[str, str] | None = None) -> Path:
    """Run each command in `root`, each required to exit 0 (default: lock, trust accepting the
    risk, apply --write, as a user would). Returns `root`."""
    run = ok_in_process if in_process else ok
    for args in commands:
        run(*args, cwd=root, env=env)
    return root

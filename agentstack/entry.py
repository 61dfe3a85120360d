"""The `agentstack` entry point: error handling for every command, and fast paths for `lock` and
the read-only `digest`, `show` and `status`.

`lock` runs in CI and pre-commit hooks on every change, and `digest`, `show` and `status` in
scripts and prompts, so they skip even the command table when their arguments are simple;
anything else goes through `agentstack.cli.dispatch` (typer). None of these paths imports typer,
click or rich (tests/test_cli_typer.py).
"""

from __future__ import annotations

import os
import sys

from agentstack.output import echo

TYPE_CHECKING = False  # typing, json and traceback are imported only when needed (start-up cost)
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any, NoReturn

# `pathlib` and `agentstack.errors` (with `typing`) are imported where they are used: an
# unchanged `lock` needs neither.

LOCK_FLAGS = {"--check": "check", "--frozen": "frozen", "--update": "update", "--json": "as_json"}


def crash_report(exc: BaseException) -> Path | None:
    import time
    import traceback
    from pathlib import Path

    from agentstack import __version__, layout
    from agentstack.errors import AgentstackError
    from agentstack.fsutil import write_atomic
    from agentstack.paths import agentstack_cache

    try:
        directory = Path(layout.crash_dir(str(agentstack_cache())))
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"crash-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.txt"
        write_atomic(
            path,
            (
                f"agentstack {__version__}\nargv: {sys.argv!r}\n\n"
                + "".join(traceback.format_exception(exc))
            ).encode("utf-8"),
            0o600,
        )
    except (OSError, AgentstackError):  # no report is better than a second failure
        return None
    return path


def run(command: Callable[[], int | None]) -> NoReturn:
    """Run a command and map its outcome to the documented exit codes."""
    sys.exit(outcome(command))


def outcome(command: Callable[[], int | None]) -> int:
    """A command's exit code: its own, or the documented one for what it raised (an
    AgentstackError its code, a bug 3 with a crash report)."""
    from agentstack.errors import EXIT_INTERNAL, AgentstackError

    try:
        code = command()
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        raise
    except AgentstackError as exc:
        echo("error: " + "\n".join(exc.diagnostics()))
        return exc.exit_code
    except KeyboardInterrupt:
        echo("interrupted")
        return 130
    except Exception as exc:  # noqa: BLE001 - the one place a bug becomes exit 3
        from agentstack.storage import as_refusal

        refusal = as_refusal(exc)  # a full or read-only disk no writer named yet: a refusal
        if refusal is not None:
            echo("error: " + "\n".join(refusal.diagnostics()))
            return refusal.exit_code
        report = crash_report(exc)
        where = f"; report written to {report}" if report else ""
        echo(
            f"internal error: {type(exc).__name__}: {exc}{where}\n"
            "this is a bug in agentstack; please report it with the crash report"
        )
        return EXIT_INTERNAL
    return code or 0


def _fast_lock(argv: list[str]) -> dict[str, Any] | None:
    """`[--project DIR] lock [flags]` parsed without the CLI framework, or None."""
    project: str | None = None
    if len(argv) >= 2 and argv[0] == "--project":
        project, argv = argv[1], argv[2:]
    elif argv and argv[0].startswith("--project="):
        project, argv = argv[0].split("=", 1)[1], argv[1:]
    if not argv or argv[0] != "lock" or any(a not in LOCK_FLAGS for a in argv[1:]):
        return None
    if project is not None and (project.startswith("-") or not os.path.isdir(project)):
        return None  # an option where the value belongs, or no directory: the table says so
    options: dict[str, Any] = {
        name: name_flag in argv[1:] for name_flag, name in LOCK_FLAGS.items()
    }
    options["project"] = project
    return options


def _lock_unchanged(options: dict[str, Any]) -> bool:
    """`lock` (or `lock --check`) found unchanged by its re-lock record, and said so, with
    nothing but `os`, `layout` and `relock` imported; False whenever anything is in doubt (the
    command then runs in full and reports for itself)."""
    if options["frozen"] or options["update"]:
        return False
    try:
        import agentstack.lock.relock as relock
        from agentstack import layout, progress

        root = layout.find_project(os.getcwd(), options["project"])
        progress.quiet(bool(options["as_json"]))
        with progress.step("lock: checking the pinned files"):
            if root is None or not relock.unchanged(root, None):
                return False
        relock.report_unchanged(root, check=options["check"], as_json=options["as_json"])
    except Exception:  # noqa: BLE001 - the full command decides and reports
        return False
    return True


def end(code: int) -> NoReturn:
    """Exit with `code`, skipping the interpreter's teardown (a fifth of a short command's time)
    when there is nothing left for it to do: stdout and stderr flushed, no exit handler, no other
    thread. Anything else, or a failed flush (a closed pipe), exits normally, as `run` does."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)
    import atexit

    handlers = getattr(atexit, "_ncallbacks", None)  # CPython's count of exit handlers
    threading = sys.modules.get("threading")
    if (
        handlers is not None
        and handlers() == 0
        and (threading is None or threading.active_count() == 1)
    ):
        os._exit(code)
    sys.exit(code)


def _run_fast(arguments: dict[str, Any]) -> int:
    from agentstack.paths import find_project
    from agentstack.sandbox.session import run_command
    from agentstack.trust.review import TrustStore

    return run_command(find_project(explicit=None), trust_store=TrustStore(explicit=[]),
                       say=echo, **arguments)


def main() -> NoReturn:
    options = _fast_lock(sys.argv[1:])
    if options is not None:
        if _lock_unchanged(options):
            end(0)
        from pathlib import Path

        from agentstack.lock.command import run_lock

        if options["project"] is not None:
            options["project"] = Path(options["project"])
        run(lambda: run_lock(**options))
    if sys.argv[1:2] == ["run"]:
        from agentstack.sandbox.session import fast_arguments

        arguments = fast_arguments(sys.argv[1:])
        if arguments is not None:
            # `run` without the command table: the project found from the working directory,
            # the user's trust store (no --project, no --trust-digest), and no teardown after it.
            end(outcome(lambda: _run_fast(arguments)))
    from agentstack.readcmds import fast, run_fast

    read = fast(sys.argv[1:])
    if read is not None:
        # A short read-only command (`status`, `digest`, `show`): no cycle collection while it
        # imports and runs (what it allocates is freed at exit), and no teardown after it.
        import gc

        gc.disable()
        end(outcome(lambda: run_fast(*read)))
    from agentstack.cli import dispatch

    argv = sys.argv[1:]
    if argv in ([], ["--help"], ["-h"], ["--version"]):  # text only: the same short ending
        import gc

        gc.disable()
        end(outcome(lambda: dispatch(argv)))
    run(lambda: dispatch(argv))  # bare `agentstack`: the help, exit 0

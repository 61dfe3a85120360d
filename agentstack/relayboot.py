"""The relay's start (`agentstack/relaystart.py`, under `python -I -S`): the common case without
`site`, the resolver or any module the checks do not need, the server forked as early as it
safely can.

In order: the rendered options; the trusted state, read as `agentstack.relay.load_setup` reads
it (the guard snapshot, the trust log's proof by its head, the consent, the tool policy, the
pins); the confinement kept for this very key (`serverbox.kept`); then the server's child
(forked at the very start by `serverbox.Forked.early`, having loaded the sandbox's code
meanwhile) gets its confinement, confines itself and execs the server. Anything else (inside
`agentstack run`, a trust log that moved on since the snapshot, no kept confinement, an option
it does not read) goes to the full launcher (`agentstack.launch.main`, after `site.main()`),
which decides as before and says why; the child forked early is then stopped, having run
nothing.
"""

from __future__ import annotations

import os
import sys

from agentstack import layout
from agentstack.relay import Relay, Slow, _read_private, _setup_from_home, serve

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any


class Spawned:
    """An unconfined server (`sandbox = false`) started by posix_spawn: no `subprocess` import."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            # SIGPIPE and SIGXFSZ back to the default, as subprocess does (Python ignores them).
            signals: Any = __import__("_signal")  # the C module: `signal` builds enums
            self.pid = os.posix_spawnp(argv[0], argv, env, file_actions=[
                (os.POSIX_SPAWN_DUP2, in_r, 0), (os.POSIX_SPAWN_DUP2, out_w, 1)],
                setsigdef=(signals.SIGPIPE, signals.SIGXFSZ))
        except BaseException:
            for fd in (in_w, out_r):
                os.close(fd)
            raise
        finally:
            for fd in (in_r, out_w):
                os.close(fd)
        self.args = argv
        self.returncode: int | None = None
        self.stdin: IO[bytes] | None = os.fdopen(in_w, "wb", buffering=0)
        self.stdout: IO[bytes] | None = os.fdopen(out_r, "rb")

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:  # noqa: SIM105 - contextlib: an import more at start-up
                os.kill(self.pid, 9)
            except ProcessLookupError:
                pass


def _quick_options(argv: list[str]) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(KEY -> secret NAME, --server/--project/--state, the server's argv) of the rendered
    command line, checked as `agentstack.launch.parse_all` checks it (which reads it when it
    names secrets); raises Slow for anything else (the full path then says what is wrong)."""
    if "--" not in argv:
        raise Slow("no command")
    end = argv.index("--")
    if "--secret" in argv[:end]:
        from agentstack import launch

        try:
            return launch.parse_all(argv)
        except launch.LaunchError:
            raise Slow("the launcher's parser refuses it") from None
    options = argv[:end]
    relay: dict[str, str] = {}
    for index in range(0, len(options), 2):
        if index + 1 >= len(options) or options[index] not in ("--server", "--project", "--state"):
            raise Slow("an option the quick start does not read")
        arg, value = options[index], options[index + 1]
        if arg in relay or not value or "\0" in value or (
            arg != "--server" and not os.path.isabs(value)
        ):
            raise Slow("an option the quick start does not read")
        relay[arg] = value
    command = argv[end + 1 :]
    if len(relay) != 3 or not command:
        raise Slow("an option the quick start does not read")
    return {}, relay, command


def _quick_start(argv: list[str], early: Any = None) -> tuple[Relay, Any, str]:
    """The common start, in this order: the options; the trusted state (as `load_setup` reads
    it: the snapshot, the trust log's proof, the consent, the tool policy, the pins); the
    confinement kept for this very key; then the server forked, confined and exec'd at once.
    Raises Slow where the full path must decide (inside `run`, a moved trust log, no kept
    confinement, anything unusual): then nothing was started. `early`: the child forked at the
    start (serverbox.Forked.early), waiting for its spec."""
    secrets, options, command = _quick_options(argv)
    name, state = options["--server"], options["--state"]
    try:
        os.listdir(state)
    except OSError:
        raise Slow("the state directory is closed here (inside agentstack run?)") from None
    root = os.path.realpath(options["--project"])
    try:
        data = _read_private(layout.guard_snapshot(state, root))
    except OSError:
        raise Slow("the snapshot is unreadable") from None
    if data is None:
        raise Slow("no snapshot")
    try:
        setup = _setup_from_home(state, root, name, data, quick=True)
    except Slow:
        raise
    except Exception:  # noqa: BLE001 - the full path says why, and starts nothing
        raise Slow("the trusted state does not hold") from None
    consent = setup.consent
    assert consent is not None
    env = dict(os.environ)
    if secrets:
        from agentstack import launch

        try:
            env = launch.environment(secrets)
        except launch.LaunchError:
            raise Slow("a secret cannot be read: the full path says which") from None
    checks = Relay(setup, [env[k] for k in secrets])
    from agentstack import serverbox

    if not serverbox.wanted(consent, name):
        if early is not None:
            early.cancel()
        try:
            return checks, Spawned(command, env), name
        except OSError:
            raise Slow("cannot start it: the full path says why") from None
    cwd = os.getcwd()
    cache = layout.box_file(state, root, name)
    confinement = serverbox.kept(cache, [setup.digest, root, name], command, cwd)
    if confinement is None:
        raise Slow("no kept confinement: resolved on the full path")
    spec = serverbox.spec_of(confinement, command, env, cwd)
    if early is not None:
        early.send(spec)
        process = early
    else:
        process = serverbox.Forked(spec)
    try:
        serverbox.armed(process, process.status_fd, cache)
    except serverbox.ServerConfinementError as exc:
        sys.stderr.write(serverbox.not_started(name, exc) + "\n")
        _exit(1)
    return checks, process, name


def start_main(argv: list[str], early: Any = None) -> None:
    """What the rendered command line runs (`agentstack/relaystart.py`, under `-I -S`): the quick
    start, or else the full launcher (`agentstack.launch.main`, after `site`). `early`: a child
    forked at the start, waiting for the spec of the server's confinement."""
    try:
        checks, process, _ = _quick_start(argv, early)
    except Slow:
        if early is not None and early._spec_w is not None:
            early.cancel()
        import site

        site.main()
        from agentstack import launch

        launch.main(argv)
        return
    _exit(serve(checks, process.args, {}, start=lambda _argv, _env: process))


def _exit(code: int) -> None:
    """Exit now (a relay thread may still block on the harness's stdin)."""
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 - contextlib: an import more at start-up
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)

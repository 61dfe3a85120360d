"""Start an MCP server with its secrets, behind the relay:
`python -I -m agentstack.launch [--server NAME --project ROOT --state DIR] [--secret KEY=NAME]… -- CMD…`.

With `--remote URL` (how `apply` renders a remote server) it is the relay's remote mode
instead (`agentstack.remoterelay`: Streamable HTTP to the server, the same checks).

With `--server` (how `apply` renders every stdio server) the launcher stays between the harness
and the server as the MCP relay (`agentstack.relay`: listings held to their pins, tools allowed by
name, receipts); without it, it only puts the secrets in place and execs the server.

`apply` renders a server whose env names `secret:NAME` as this launcher in front of the server's
own command, so the harness's config holds neither the secret nor a `${KEY}` the user would have to
export. The launcher reads each named secret from the secret store (`$AGENTSTACK_HOME/secrets`,
with the store's checks: a private directory and private regular files of ours, links not
followed), puts it in the environment under KEY, and replaces itself with the server (execvp): no
process of ours stays between the harness and the server.

Where the store cannot be read (inside `agentstack run` the sandbox denies $AGENTSTACK_HOME), a
KEY already present in the environment is used as it is; otherwise the launcher exits 1 saying
which secret is missing and how to set it. Standard library only: it starts with every server.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
from typing import TYPE_CHECKING, NoReturn

from agentstack import layout

if TYPE_CHECKING:
    import subprocess

# What a secret name may be (agentstack.manifest.view's pattern, which is loaded only when a
# secret is read: the relay of a server without secrets starts without it and the store's code).
_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_NAME = re.compile(_NAME_PATTERN)
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
USAGE = (
    "usage: python -I -m agentstack.launch [--server NAME --project ROOT --state DIR "
    "[--only-in-project]] [--secret KEY=NAME]... -- COMMAND [ARG]...\n"
    "       python -I -m agentstack.launch --server NAME --project ROOT --state DIR "
    "[--only-in-project] --remote URL"
)
_RELAY_OPTIONS = ("--server", "--project", "--state")
# A server rendered where the harness reads it in every folder: started only where the harness
# runs in its project (agentstack.relay.outside_project).
ONLY_IN_PROJECT = "--only-in-project"


class LaunchError(Exception):
    pass


class NotThere(LaunchError):
    """The secret is not stored, or the store cannot be opened here (EACCES/EPERM: inside
    `agentstack run` the kernel closes it): a value given in the environment may stand in."""


def secrets_dir() -> str:
    return layout.secrets_dir(layout.home())


def read_secret(directory: str, name: str) -> str:
    """The secret NAME, after the store's own checks; raises LaunchError saying what to do."""
    if not _NAME.match(name):
        raise LaunchError(f"{name!r} is not a secret name")
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        raise NotThere(f"no secret {name!r}: run 'agentstack secret set {name}'") from None
    except OSError as exc:
        raise LaunchError(f"cannot read the secret store {directory}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise LaunchError(
            f"{directory} is not a private directory of yours; refusing to read secrets from it"
        )
    try:
        fd = os.open(os.path.join(directory, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NotThere(f"no secret {name!r}: run 'agentstack secret set {name}'") from None
    except PermissionError as exc:
        raise NotThere(f"cannot read secret {name!r}: {exc.strerror}") from None
    except OSError as exc:
        raise LaunchError(f"cannot read secret {name!r}: {exc.strerror}") from None
    from agentstack.secrets import FILE_BYTES, unpad

    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077 or info.st_uid != os.geteuid():
            raise LaunchError(f"secret {name!r} is not a private regular file of yours")
        data = handle.read(FILE_BYTES + 1)
    try:
        value = unpad(data).decode("utf-8", "strict")  # the store's own reading of its files
    except (ValueError, UnicodeDecodeError):
        raise LaunchError(f"secret {name!r} is not a stored secret") from None
    if not value or len(value) > 64 * 1024 or any(c in value for c in "\0\r\n"):
        raise LaunchError(f"secret {name!r} is empty, too long or spans lines")
    return value


def parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """(KEY -> secret NAME, the server's argv)."""
    secrets, _, command = parse_all(argv)
    return secrets, command


def parse_all(argv: list[str]) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(KEY -> secret NAME, the relay's options, the server's argv)."""
    secrets: dict[str, str] = {}
    relay: dict[str, str] = {}
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            command = argv[index + 1 :]
            if not command:
                raise LaunchError("no command after --")
            if relay and len(set(relay) & set(_RELAY_OPTIONS)) != len(_RELAY_OPTIONS):
                raise LaunchError("--server, --project and --state go together")
            return secrets, relay, command
        if arg in _RELAY_OPTIONS and index + 1 < len(argv) and arg not in relay:
            value = argv[index + 1]
            if not value or "\0" in value or (arg != "--server" and not os.path.isabs(value)):
                raise LaunchError(f"{arg} {value!r}: an absolute path (or a server name) is needed")
            relay[arg] = value
            index += 2
            continue
        if arg == ONLY_IN_PROJECT and arg not in relay:
            relay[arg] = ""
            index += 1
            continue
        if arg == "--secret" and index + 1 < len(argv):
            key, sep, name = argv[index + 1].partition("=")
            if not sep or not _KEY.match(key) or not _NAME.match(name):
                raise LaunchError(f"--secret {argv[index + 1]!r} must be KEY=NAME")
            secrets[key] = name
            index += 2
            continue
        raise LaunchError(f"unexpected argument {arg!r}")
    raise LaunchError("no command after --")


def environment(secrets: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    directory = secrets_dir()
    for key, name in secrets.items():
        try:
            env[key] = read_secret(directory, name)
        except NotThere:
            # Not stored, or the kernel closes the store (inside `agentstack run`): a value given
            # in the environment stands in. A store that is not private or a damaged secret file
            # refuses: never an ambient variable in place of a secret that failed its checks.
            if key in os.environ:
                continue
            raise
    return env


def main(argv: list[str] | None = None) -> NoReturn:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--remote" in args[: args.index("--") if "--" in args else len(args)]:
        # A remote (URL) server: the relay speaks Streamable HTTP to it (agentstack.remoterelay).
        from agentstack import remoterelay

        _leave(remoterelay.main(args, read_secret=read_secret, store_closed=_store_closed))
    try:
        secrets, relay, command = parse_all(args)
    except LaunchError as exc:
        sys.stderr.write(f"agentstack launch: {exc}\n{USAGE}\n")
        sys.exit(2)
    if relay:
        from agentstack import relay as relaying

        if ONLY_IN_PROJECT in relay:
            # Before anything of the server (its secrets, its broker, its process) is touched.
            reason = relaying.outside_project(relay["--project"])
            if reason is not None:
                _leave(relaying.refuse_start(relay["--server"], reason))
        address = relaying.broker_address(relay["--project"])
        if address is not None and _store_closed(relay["--state"]):
            # Inside `agentstack run`: the server, its secrets and the relay's checks all live
            # in run's broker, outside the harness's sandbox.
            _leave(relaying.pump_to_broker(address, relay["--server"]))
    try:
        env = environment(secrets)
    except LaunchError as exc:
        sys.stderr.write(f"agentstack launch: {exc}\n")
        sys.exit(1)
    if relay:
        _leave(run_relay(relay, command, env, [env[k] for k in secrets]))
    try:
        os.execvpe(command[0], command, env)  # noqa: S606 - the trusted server argv, no shell
    except OSError as exc:
        sys.stderr.write(f"agentstack launch: cannot start {command[0]!r}: {exc.strerror}\n")
        sys.exit(1)


def _leave(code: int) -> NoReturn:
    """Exit now: a relay thread may still block on the harness's stdin, which an orderly
    interpreter shutdown would wait for (or abort on)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def _store_closed(state: str) -> bool:
    """The state directory is closed to this process (the kernel refuses it: inside `run`)."""
    try:
        os.listdir(state)
    except PermissionError:
        return True
    except OSError:
        return False
    return False


def run_relay(options: dict[str, str], command: list[str], env: dict[str, str],
              secret_values: list[str]) -> int:
    """The relay in front of the server. Where the trusted state cannot be read, the server is
    not started at all (nothing of an untrusted project runs); outside `agentstack run` it is
    started under its own sandbox unless the manifest opted it out (`sandbox = false`)."""
    from agentstack import relay

    name = options["--server"]
    setup = relay.load_setup(options["--state"], options["--project"], name)
    if setup.closed is not None:
        sys.stderr.write(f"agentstack launch: {name}: not started: {setup.closed}\n")
        return 1
    start = relay.start_plain
    consent = setup.consent
    if consent is not None:
        from agentstack import serverbox

        if serverbox.wanted(consent, name):
            cwd = os.getcwd()

            def start(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
                try:
                    return serverbox.start(setup.root, consent, name, argv, env, cwd=cwd,
                                           cache=layout.box_file(options["--state"], setup.root,
                                                                 name),
                                           key=[setup.digest, setup.root, name], fork=True,
                                           state_home=options["--state"])
                except serverbox.ServerConfinementError as exc:
                    sys.stderr.write(serverbox.not_started(name, exc) + "\n")
                    raise SystemExit(1) from None

            secret_values = [*secret_values,
                             *serverbox.credential_values(consent, name, options["--state"])]

    return relay.serve(relay.Relay(setup, secret_values), command, env, start=start)


if __name__ == "__main__":
    main()

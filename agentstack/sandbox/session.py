"""One confined session, as a library call: what `agentstack run` does between parsing its
arguments and passing the exit status on.

`run_session` checks that the current consent digest is trusted and that the harness surface is
what was trusted (before anything starts), builds the policy from the trusted declaration, runs
the command under it with read-only copies of what the guard reads, seeds the harness's private
state, and only once every process of the session is gone compares what git and other tools run
later (`watch`). The command line (`cli.sandbox.run`) only parses, prints and re-raises a signal.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentstack.errors import InvalidInput, Refused

if TYPE_CHECKING:
    from typing import TypeAlias

    from agentstack.manifest.model import Manifest as ManifestModel
    from agentstack.manifest.view import ManifestView

    Manifest: TypeAlias = "ManifestModel | ManifestView"
    from agentstack.sandbox.policy import SandboxPolicy
    from agentstack.sandbox.watch import Change
    from agentstack.trust.review import TrustStore


def pick_harness(manifest: Manifest, harness: str | None, command: list[str]) -> str | None:
    """The harness whose profile the session uses: `harness`, else the one `command` names, else
    (with no command) the project's first; it must be one the trusted declaration targets."""
    from agentstack.sandbox.resolve import harness_for_command

    chosen = harness or harness_for_command(command)
    if chosen is None and not command:
        chosen = manifest.project.harnesses[0] if manifest.project.harnesses else None
        if chosen is None:
            raise InvalidInput("nothing to run: give a command after --, or --harness H")
    if chosen is not None and chosen not in manifest.project.harnesses:
        raise Refused(
            f"the trusted declaration does not target {chosen} (project.harnesses: "
            f"{', '.join(manifest.project.harnesses) or 'none'})",
            hint=f"add {chosen!r} to project.harnesses, lock and trust, or pick another harness",
        )
    return chosen


def policy_for(
    manifest: Manifest, root: Path, harness: str | None, command: str | None
) -> SandboxPolicy:
    """The one policy object `run` enforces and `why` explains."""
    from agentstack.sandbox.resolve import resolve_policy

    return resolve_policy(manifest.sandbox, root, harness=harness, command=command)


def check_policies(manifest: Manifest, root: Path) -> None:
    """Resolve the policy of every harness the declaration targets (and of a plain command), as
    `run` would; raise the first error `run` would raise. Nothing when the sandbox is disabled
    (`run` refuses that on its own)."""
    if not manifest.sandbox.enabled:
        return
    for harness in [None, *manifest.project.harnesses]:
        policy_for(manifest, root, harness, None)


def guard_state(root: Path) -> dict[str, bytes]:
    """Read-only copies of what the guard reads (the harness cannot reach $AGENTSTACK_HOME)."""
    from agentstack import layout
    from agentstack.paths import agentstack_home, guard_snapshot_path

    home = str(agentstack_home())
    files = {
        layout.GUARD_SNAPSHOT: guard_snapshot_path(root),
        layout.TRUST_HEAD: Path(layout.trust_head(home)),
        layout.TRUST_LOG: Path(layout.trust_log(home)),
    }
    copies: dict[str, bytes] = {}
    for name, path in files.items():
        try:
            copies[name] = path.read_bytes()
        except FileNotFoundError:
            continue  # no snapshot yet: the guard, finding none, denies (fail closed)
    return copies


def seed_private_state(
    policy: SandboxPolicy, root: Path, document: dict[str, Any], digest: str,
    routes: dict[str, str],
    phantoms: dict[str, str] | None = None,
) -> None:
    """Rewrite the harness's private user-level state before the session (see private_state)."""
    if policy.harness_state is None:
        return
    from agentstack.apply.confined import rendered_user_keys
    from agentstack.sandbox.private_state import CLAUDE_API_KEY_ENV, Layout, seed

    state = Layout(policy.harness_state)
    try:
        keys = rendered_user_keys(root, document, digest, state)
        seed(state, workdir=policy.workdir, home=policy.home, user_keys=keys, route_urls=routes,
             api_keys=tuple(v for k, v in (phantoms or {}).items() if k == CLAUDE_API_KEY_ENV))
    except OSError as exc:
        raise Refused(
            f"cannot prepare the harness's private state in {state.root}: {exc}",
            hint="check that directory (it is agentstack's; deleting it resets the harness's "
            "state for this project)",
        ) from None


def _before_start(
    policy: SandboxPolicy, root: Path, document: dict[str, Any], digest: str,
    routes: dict[str, str], broker: Any, phantoms: dict[str, str] | None = None,
) -> None:
    seed_private_state(policy, root, document, digest, routes, phantoms)
    if broker is not None:
        broker.serve()


def report_lines(changes: list[Change]) -> list[str]:
    """What the user must hear about changes the session left behind, one line each."""
    from agentstack.sandbox import watch

    lines = []
    for line in watch.report(changes):
        if line.startswith(watch.MESSAGES["git-state"]):
            lines.append(f"agentstack: note: the sandboxed process {line}")
            continue
        lines.append(f"agentstack: WARNING: the sandboxed process {line}")
    if any(c.category == "git-exec" for c in changes):
        lines.append(
            "review them before running any git command here (git config, hooks, fsmonitor and "
            "submodules run with your full privileges)"
        )
    if any(c.category in ("on-open", "harness") for c in changes):
        lines.append("review them before opening this directory with those tools or the harness "
                     "outside agentstack run")
    return lines


def run_session(
    root: Path,
    command: list[str] | None,
    *,
    harness: str | None,
    interactive: bool | None,
    trust_store: TrustStore,
    environ: Mapping[str, str] | None = None,
    say: Callable[[str], None] = print,
) -> int:
    """Run `command` (or the harness) confined in the project at `root`; its exit status, or
    minus the signal that ended it. Refuses (exit 1) unless the current consent digest is trusted
    and the harness surface is what was trusted, and whenever any layer of the sandbox cannot be
    enforced. `say` hears the after-session report."""
    from agentstack.apply.prestart import check_before_start
    from agentstack.consent.document import current
    from agentstack.sandbox import profiles, watch
    from agentstack.sandbox.runner import run_confined

    env = os.environ if environ is None else environ
    manifest, _, document, digest = current(root)  # no pydantic when the manifest is unchanged
    trust_state = trust_store.state(root, digest)
    if not trust_state.trusted:
        raise Refused(
            f"not trusted: {digest} ({trust_state.state}) for {root}; agentstack run enforces only a "
            "trusted declaration",
            hint="review it with 'agentstack trust'",
        )
    check_before_start(root)  # the harness surface (rendered files included) is what was trusted
    if not manifest.sandbox.enabled:
        raise Refused(
            "sandbox.enabled is false in the trusted declaration; agentstack run never launches "
            "anything unconfined",
            hint="set [sandbox] enabled = true (then lock and trust), or run the harness yourself",
        )
    argv = list(command or [])
    chosen = pick_harness(manifest, harness, argv)
    if not argv:
        assert chosen is not None
        profile = profiles.PROFILES[chosen]
        binary = profiles.find_binary(profile.binary, env.get("PATH")) if profile.binary else None
        if binary is None:
            raise Refused(
                f"{chosen}: {profile.binary or 'its binary'} is not on PATH (nor in the "
                "checkout's .tools)",
                hint="install it, or give the command after --",
            )
        argv = [binary]
    elif "/" not in argv[0]:
        # The same lookup as doctor: PATH, then the checkout's .tools (install-harnesses).
        argv[0] = profiles.find_binary(argv[0], env.get("PATH")) or argv[0]
    policy = policy_for(manifest, root, chosen, argv[0])
    from agentstack.sandbox.native import inside_run_argv

    argv = inside_run_argv(chosen, argv)  # run is the stronger plane: the native one off inside
    if interactive is None:
        interactive = sys.stdin.isatty()
    from agentstack.sandbox import rollback

    before = watch.snapshot(root)
    copies = guard_state(root)
    broker: Any = None
    if document["servers"]:  # stdio and remote (URL) servers alike
        # The MCP servers run outside the harness's sandbox, each in its own, with their
        # secrets and the relay's checks (agentstack.serverbroker); the sandbox may only
        # connect to it. (Imported only then: `run`'s fast path stays lean.)
        from agentstack import layout, serverbroker

        broker = serverbroker.Broker(root, document, digest)
        copies[layout.RUN_PINS] = serverbroker.run_bundle(root, document, digest, broker)
        policy = policy._replace(broker_port=broker.port)
    saved = rollback.backups(str(root), before)  # what git executes, to put back afterwards
    try:
        return run_confined(
            root, policy, argv, env, interactive, readonly_files=copies,
            before_start=lambda runtime, routes, phantoms: _before_start(
                runtime, root, document, digest, routes, broker, phantoms),
        )
    finally:
        if broker is not None:
            broker.close()
        # Only now: every process of the session is gone (run_confined kills the whole tree),
        # so nothing can race the roll-back of git's execution state.
        after = watch.snapshot(root)
        outcome = rollback.roll_back(str(root), before, after, watch.compare(before, after),
                                     saved)
        for line in rollback.report_lines(outcome):
            say(line)
        remaining = watch.compare(before, watch.snapshot(root)) if outcome.done else None
        for line in report_lines(remaining if remaining is not None
                                 else watch.compare(before, after)):
            say(line)


# ------------------------------------------------------------------ the command


def run_command(
    root: Path,
    command: list[str] | None,
    *,
    harness: str | None,
    interactive: bool | None,
    trust_store: TrustStore,
    say: Callable[[str], None],
) -> int:
    """`agentstack run`, from parsed arguments to its exit status: the session's status, or the
    signal that ended the command raised again on this process (so the caller's shell sees it)."""
    _signal: Any = __import__("_signal")  # `signal`'s functions without its enums
    # An ignored SIGCHLD (inherited) would make the command's exit status unreadable (waitpid
    # fails with ECHILD) and be passed on to the harness: the default, as a shell starts with.
    _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
    code = run_session(
        root, command, harness=harness, interactive=interactive, trust_store=trust_store, say=say
    )
    if code < 0:
        import contextlib
        import signal

        sys.stdout.flush()
        sys.stderr.flush()
        with contextlib.suppress(OSError, ValueError):  # SIGKILL cannot be reset: fine
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


def fast_arguments(argv: list[str]) -> dict[str, Any] | None:
    """`run [--harness H] [--[no-]interactive] [-- CMD [ARG]...]` parsed without the command
    table (the entry point's fast path), else None: anything else (a global option, `--help`, a
    command without `--`, a repeated or unknown option) goes through the command table, which
    parses and reports it."""
    if not argv or argv[0] != "run":
        return None
    options: dict[str, Any] = {"harness": None, "interactive": None, "command": None}
    rest = argv[1:]
    while rest:
        word = rest.pop(0)
        if word == "--":
            options["command"] = rest or None
            return options
        if word == "--harness" and rest and options["harness"] is None:
            if rest[0].startswith("-"):
                return None  # another option (or help) where the value belongs: the table decides
            options["harness"] = rest.pop(0)
        elif word.startswith("--harness=") and options["harness"] is None:
            options["harness"] = word.split("=", 1)[1]
        elif word in ("--interactive", "--no-interactive") and options["interactive"] is None:
            options["interactive"] = word == "--interactive"
        else:
            return None
    return options


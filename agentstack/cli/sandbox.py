"""`run`, `why` and `doctor`: the kernel sandbox (`agentstack.sandbox`). A simple `run -- CMD`
never gets here: `agentstack.entry` starts it without the command table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from agentstack.cli._app import Command, PassThrough, commands
from agentstack.cli._common import Json, root_dir, state, store
from agentstack.errors import InvalidInput, Refused
from agentstack.harnesses import NAMES
from agentstack.output import echo, print_json
from agentstack.output import result as result_line

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from agentstack.manifest.model import Manifest
    from agentstack.sandbox.policy import SandboxPolicy

app = commands()

HARNESS_HELP = (
    f"{', '.join(NAMES[:-1])} or {NAMES[-1]}: adds its state paths and install directory "
    "(default: from the command, else the project's first)."
)
Harness = Annotated[str | None, typer.Option("--harness", help=HARNESS_HELP)]


def _pick_harness(manifest: Manifest, harness: str | None, command: list[str]) -> str | None:
    from agentstack.sandbox.session import pick_harness

    return pick_harness(manifest, harness, command)


def _policy(
    manifest: Manifest, root: Path, harness: str | None, command: str | None
) -> SandboxPolicy:
    from agentstack.sandbox.session import policy_for

    return policy_for(manifest, root, harness, command)


@app.command(cls=PassThrough)
def run(
    command: Annotated[list[str] | None, typer.Argument(
        metavar="[-- CMD [ARG]...]", show_default=False,
        help="After --: the command and its arguments.")] = None,
    harness: Harness = None,
    interactive: Annotated[bool | None, typer.Option(
        "--interactive/--no-interactive", show_default=False,
        help="Keep the terminal and process group (default: when stdin is a terminal).")] = None,
) -> int:
    """Launch the harness (or CMD) under the kernel sandbox built from the trusted declaration.

    Refuses (exit 1) unless the current consent digest is trusted, and whenever any layer of the
    sandbox cannot be enforced. The command's exit status (or signal) is passed through."""
    from agentstack.sandbox.session import run_command

    return run_command(
        root_dir(), list(command) if command else None, harness=harness, interactive=interactive, trust_store=store(),
        say=echo,
    )


# ------------------------------------------------------------------ why


@app.command(cls=Command)
def why(
    path: Annotated[str | None, typer.Option("--path", help="A file or directory.")] = None,
    op: Annotated[str, typer.Option("--op", help="read, write or readwrite (both).")] = "read",
    host: Annotated[str | None, typer.Option("--host", help="A host name or IP address.")] = None,
    port: Annotated[int | None, typer.Option("--port", help="A TCP port.")] = None,
    harness: Harness = None,
    native: Annotated[bool, typer.Option(
        "--native", help="What the harness's own sandbox is given (apply --write renders it) and "
        "what it cannot express.")] = False,
    as_json: Json = False,
) -> int:
    """Explain a sandbox decision: `why --path P --op read|write` or `why --host H [--port N]`.

    Uses the same policy object `run` enforces (the current manifest plus the profiles). Exit 0
    when allowed, 1 when denied. With neither --path nor --host, prints the whole policy."""
    from agentstack.manifest.load import load_manifest

    if path is not None and host is not None:
        raise InvalidInput("give --path or --host, not both")
    if native:
        if path is not None or host is not None or harness is None:
            raise InvalidInput("--native takes --harness H and neither --path nor --host",
                               hint="agentstack why --harness claude-code --native")
        return _why_native(harness, as_json)
    if op not in ("read", "write", "readwrite"):
        raise InvalidInput(f"--op {op!r}: use read, write or readwrite")
    if port is not None and not 0 < port < 65536:
        raise InvalidInput(f"--port {port}: out of range")
    root = root_dir()
    manifest = load_manifest(root)
    chosen = harness
    if chosen is not None and chosen not in manifest.project.harnesses:
        raise Refused(
            f"the declaration does not target {chosen}",
            hint="see project.harnesses in agentstack.toml",
        )
    policy = _policy(manifest, root, chosen, None)
    trust = _trust_note(root)
    if path is None and host is None:
        if as_json:
            print_json({"policy": policy.to_json(), "trust": trust})
            return 0
        _print_policy(policy, trust)
        return 0
    if path is not None:
        target = Path(path).expanduser()
        absolute = str(target if target.is_absolute() else Path.cwd() / target)
        decision = policy.decide_path(absolute, op)  # type: ignore[arg-type]
        query: dict[str, Any] = {"path": absolute, "op": op}
    else:
        assert host is not None
        try:
            decision = policy.decide_net(host, port)
        except ValueError as exc:
            raise InvalidInput(f"--host {host!r}: {exc}") from None
        query = {"host": host, "port": port}
    if as_json:
        print_json(
            {
                "query": query,
                **decision.to_json(),
                "harness": chosen,
                "trust": trust,
                "project": str(root),
            }
        )
    else:
        verdict = "allowed" if decision.allowed else "denied"
        reason = str(decision.reason)
        result_line(reason if reason.startswith(("allowed", "denied")) else f"{verdict}: {reason}")
        if trust != "trusted":
            echo(
                f"note: the current declaration is {trust}; 'agentstack run' refuses until "
                "it is trusted"
            )
    return 0 if decision.allowed else 1


def _why_native(harness: str, as_json: bool) -> int:
    """`why --harness H --native`: the keys `apply --write` gives H's own sandbox, whether the
    rendered file carries them now, and every finding (what it cannot express)."""
    from agentstack.manifest.load import load_manifest
    from agentstack.sandbox import native

    root = root_dir()
    manifest = load_manifest(root)
    if harness not in manifest.project.harnesses:
        raise Refused(f"the declaration does not target {harness}",
                      hint="see project.harnesses in agentstack.toml")
    rendered = None
    if manifest.sandbox.enabled:
        rendered = native.render(native.native_policy(manifest.sandbox, root), harness)
    on_disk = native.on_disk(root, rendered) if rendered is not None else None
    if as_json:
        print_json({"harness": harness, "project": str(root), "trust": _trust_note(root),
                    "native": rendered.to_json() if rendered is not None else None,
                    "on_disk": on_disk})
        return 0
    if rendered is None:
        echo(f"{harness}: no native sandbox rendered"
             + ("" if manifest.sandbox.enabled else " (sandbox.enabled = false)")
             + f"; agentstack renders into: {', '.join(native.NATIVE_HARNESSES)}")
        return 0
    import json

    lines = [f"{harness}: {rendered.path} ({on_disk})"]
    for key, value in rendered.keys.items():
        lines.append(f"  {'.'.join(key)} = {json.dumps(value, indent=2)}".replace("\n", "\n    "))
    lines.append("what it cannot express:")
    lines.extend(f"  {f.kind:<12} {f.what}: {f.detail}" for f in rendered.findings)
    echo("\n".join(lines))
    return 0


def _trust_note(root: Path) -> str:
    from agentstack.errors import AgentstackError

    try:
        from agentstack.consent.document import current

        _, _, _, digest = current(root)
        return str(store().state(root, digest).state)
    except AgentstackError:
        return "unknown (the lock is stale or the trust log unreadable)"


def _print_policy(policy: SandboxPolicy, trust: str) -> None:
    lines = [f"workdir   {policy.workdir} (read-write)", f"trust     {trust}", "grants:"]
    for grant in policy.grants:
        kind = "file" if grant.file else "dir "
        lines.append(f"  {grant.access} {kind} {grant.path}  [{grant.source}]")
    lines.append("  rw dir  <a private TMPDIR per run>  [run]")
    lines.append("always denied:")
    for deny in policy.denies:
        lines.append(f"  {deny.path}  [{deny.source}]")
    net = "blocked" if policy.network_block else "OPEN (sandbox.network.block = false)"
    lines.append(
        f"network   {net}; localhost ports: "
        f"{', '.join(map(str, policy.localhost_ports)) or 'none'}"
        + ("; + the credential proxy's port" if policy.needs_proxy else "")
    )
    if policy.allow_domains:
        lines.append("via proxy " + ", ".join(policy.allow_domains))
    for route in policy.credentials:
        lines.append(
            f"credential {route.name}: {route.upstream} <- secret:{route.secret} "
            f"({route.header}); phantom in ${route.env}"
            + (f", base URL in ${route.base_url_env}" if route.base_url_env else "")
        )
    lines.append(
        "env       " + ", ".join([*policy.env_pass, "TMPDIR", *(k for k, _ in policy.env_set)])
    )
    if policy.harness_state is not None:
        from agentstack.sandbox.private_state import Layout, describe

        lines.extend(describe(Layout(policy.harness_state)))
    result_line("\n".join(lines))


# ------------------------------------------------------------------ doctor


@app.command(cls=Command)
def doctor(
    verify: Annotated[bool, typer.Option(
        "--verify", help="Also run the confinement suite (about a minute).")] = False,
    landlock_abi: Annotated[int | None, typer.Option(
        "--landlock-abi", help="With --verify: restrict Landlock to this older ABI's rights "
        "(1-6), as an older kernel would; rows needing a missing feature are reported "
        "refused.")] = None,
    as_json: Json = False,
) -> int:
    """Landlock ABI, nono, seccomp, harness binaries, and the project's trust and lock state.

    Exit 1 when the sandbox cannot be enforced here (or, with --verify, when a row fails)."""
    from agentstack.sandbox import doctor as doc

    if landlock_abi is not None and (not verify or not 1 <= landlock_abi <= 6):
        raise InvalidInput("--landlock-abi N needs --verify and N from 1 to 6")
    checks = doc.system_checks()
    checks.extend(_project_checks())
    from agentstack.consent.boundary import doctor_check

    checks.append(doctor_check())
    from agentstack.teampolicy import doctor_check as policy_check

    checks.append(policy_check())
    from agentstack.userlevel import doctor_check as user_check

    checks.append(user_check())
    report: dict[str, Any] = {"checks": [c.to_json() for c in checks]}
    failed = doc.overall(checks) == "fail"
    rows: list[Any] = []
    if verify:
        if failed:
            report["verify"] = {"skipped": "the sandbox is not enforceable here"}
        else:
            from agentstack.sandbox.verify import run_suite, summary

            def progress(result: Any) -> None:
                if not as_json:
                    mark = ("REFUSED" if result.refused else "skip" if result.skipped
                            else "pass" if result.passed else "FAIL")
                    result_line(
                        f"  {mark:<4} {result.row:<16} {result.mode:<10} "
                        f"{(result.output.splitlines() or [''])[0][:70]}"
                        + (f"  ({result.detail})" if result.detail and not result.passed else "")
                    )

            if not as_json:
                result_line("confinement suite (a row passes only on the kernel's EACCES/EPERM, or "
                     "for proxy rows the gate's refusal with nothing reaching the listener):")
            if landlock_abi is not None:
                from agentstack.sandbox.abi import assess
                from agentstack.sandbox.doctor import pid_namespace_covers

                emulated = assess(landlock_abi,
                                  pid_namespace=pid_namespace_covers(landlock_abi))
                report["emulated_abi"] = emulated.to_json()
                if not as_json:
                    result_line(f"Landlock restricted to ABI {landlock_abi}: {emulated.state}"
                         + "".join(f"\n  refused: {r}" for r in emulated.refused)
                         + "".join(f"\n  degraded: {d}" for d in emulated.degraded)
                         + "".join(f"\n  covered: {c}" for c in emulated.covered))
            rows = run_suite(progress=progress, landlock_abi=landlock_abi)
            passed, bad, skipped = summary(rows)
            report["verify"] = {
                "passed": passed,
                "failed": bad,
                "skipped": skipped,
                "rows": [r.to_json() for r in rows],
            }
            failed = failed or bad > 0
    report["status"] = "fail" if failed else doc.overall(checks)
    if as_json:
        print_json(report)
    else:
        marks = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}
        lines = [f"{marks[c.status]}  {c.name:<20} {c.detail}" for c in checks]
        if verify and "passed" in report.get("verify", {}):
            v = report["verify"]
            lines.append(
                f"{'ok  ' if not v['failed'] else 'FAIL'}  {'confinement suite':<20} "
                f"{v['passed']} passed, {v['failed']} failed, {v['skipped']} skipped"
            )
        from agentstack.columns import fit

        result_line("\n".join(fit(lines, 27)))
    return 1 if failed else 0


def _project_checks() -> list[Any]:
    """doctor's project rows (agentstack.projectstatus): --project exactly, else the nearest project."""
    from agentstack.errors import AgentstackError
    from agentstack.paths import find_project
    from agentstack.projectstatus import project_checks

    try:
        root: Path | None = root_dir() if state.project is not None else find_project()
    except AgentstackError:
        root = None
    return project_checks(root, store)

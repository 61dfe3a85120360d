"""The opt-in launchers (`agentstack shims install`): `claude`, `codex`, … ahead on PATH that check
the project's harness surface against the trusted digest, then exec the real binary.

Headless Claude Code applies a project's settings, hooks, servers and instructions whether or not
the folder is trusted in it (measured with 2.1.332), so once an unreviewed change is on disk only a
check *before* the harness starts can keep it from running. Outside an agentstack project the shim
simply execs the real binary. Nothing here is read from the project before the check decides.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

MARKER = "# agentstack shim"


def real_binary(name: str, shim_dir: Path, path: str | None) -> str | None:
    """The first `name` on PATH that is not in the shim directory (nor another agentstack shim)."""
    shim_real = os.path.realpath(shim_dir)
    for directory in (path or "").split(os.pathsep):
        if not directory or os.path.realpath(directory) == shim_real:
            continue
        candidate = os.path.join(directory, name)
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue
        try:
            with open(candidate, "rb") as handle:
                if MARKER.encode() in handle.read(512):
                    continue
        except OSError:
            continue
        return candidate
    return None


def check(cwd: Path) -> str | None:
    """Why the harness must not start in `cwd` (None: it may)."""
    from agentstack import layout
    from agentstack._guard import enclosing_project

    # A project holds a manifest, or this machine holds a snapshot for it: a commit that deletes
    # agentstack.toml must not switch the check off while the harness-side trust stays.
    found_root = enclosing_project(str(cwd), layout.home())
    if found_root is None:
        return None  # not an agentstack project: not ours to judge
    root = Path(found_root)
    found = problem(root)
    if found is not None:
        # Harness-side trust follows the digest: the next start without the shim shows the
        # harness's own prompt (where it has one) instead of loading what nobody reviewed.
        from agentstack.apply.prestart import withdraw_harness_trust

        withdraw_harness_trust(root)
    return found


def problem(root: Path) -> str | None:
    """Why the harness must not start in project `root` (None: the surface is what the
    trusted digest covers). Never raises: a check that failed did not pass."""
    from agentstack.errors import AgentstackError

    try:
        from agentstack.apply.prestart import check_before_start
        from agentstack.consent.document import current
        from agentstack.trust.review import TrustStore

        _, _, _, digest = current(root)  # a missing manifest is a refusal here
        state = TrustStore().state(root, digest)
        if not state.trusted:
            return f"{digest} is not trusted for {root} ({state.state}); run 'agentstack trust'"
        check_before_start(root)
    except AgentstackError as exc:
        return "; ".join(exc.diagnostics())
    except Exception as exc:  # noqa: BLE001 - fail closed: a check that crashed did not pass
        return f"the check failed ({type(exc).__name__}: {exc})"
    return None


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        sys.stderr.write("usage: python -m agentstack.shim SHIM_DIR BINARY [ARGS...]\n")
        return 2
    shim_dir, name, args = Path(argv[0]), argv[1], argv[2:]
    reason = check(Path.cwd().resolve())
    if reason is not None:
        sys.stderr.write(
            f"agentstack: not starting {name}: {reason}\n"
            "agentstack: review with 'agentstack status' and 'agentstack trust'; the real binary "
            "is still on your PATH after the shim directory\n"
        )
        return 1
    binary = real_binary(name, shim_dir, os.environ.get("PATH"))
    if binary is None:
        sys.stderr.write(f"agentstack: no {name} on PATH besides the shim\n")
        return 127
    os.execv(binary, [binary, *args])  # noqa: S606 - the real harness, as the user asked
    return 127  # not reached


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))


def _is_shim(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return MARKER.encode() in handle.read(512)
    except OSError:
        return False


def path_order(binaries: list[str], path: str | None = None) -> list[dict[str, str | None]]:
    """For each harness binary with an agentstack shim installed (in the default shim directory,
    or anywhere on PATH) that PATH does not find first: {"binary", "found" (what PATH runs
    instead, None when nothing), "shims" (the shim's directory)}. Empty when every installed
    shim is ahead of the real binary, or none is installed."""
    from agentstack import layout

    path = os.environ.get("PATH", "") if path is None else path
    default = layout.shims_dir(layout.home())
    out: list[dict[str, str | None]] = []
    for name in binaries:
        first: str | None = None
        shim_dir: str | None = None
        for directory in [*path.split(os.pathsep), default]:
            candidate = os.path.join(directory, name)
            if not directory or not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
                continue
            if _is_shim(candidate):
                shim_dir = shim_dir or directory
                if first is None and directory in path.split(os.pathsep):
                    break  # PATH runs the shim first
            elif first is None and directory in path.split(os.pathsep):
                first = candidate
        else:
            if shim_dir is not None:
                out.append({"binary": name, "found": first, "shims": shim_dir})
    return out


def path_fix(shims: str) -> str:
    """The one line that puts the shims ahead on PATH."""
    import shlex

    return f"export PATH={shlex.quote(shims)}:\"$PATH\""

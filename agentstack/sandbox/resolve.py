"""Resolve the manifest's `[sandbox]` plus the system and harness profiles into a `SandboxPolicy`.

Merge rule: profiles contribute lists (grants, environment names and values), the manifest adds to
every list and overrides every scalar. Manifest paths are relative to the project root; `~` is the
user's home directory; absolute paths stay as written. Everything is resolved to real paths.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentstack.errors import InvalidInput, Refused
from agentstack.sandbox import profiles
from agentstack.sandbox.policy import (
    Access,
    CredentialRoute,
    Deny,
    Grant,
    SandboxPolicy,
    is_within,
    normalise,
)

if TYPE_CHECKING:
    from typing import TypeAlias

    from agentstack.manifest.model import Sandbox as SandboxModel
    from agentstack.manifest.view import SandboxView

    Sandbox: TypeAlias = "SandboxModel | SandboxView"  # the validated model, or its plain data

# nono's required Linux deny groups (credentials, keyrings, browser data, shell history/configs).
NONO_DENY_GROUPS = (
    "deny_credentials",
    "deny_keychains_linux",
    "deny_browser_data_linux",
    "deny_shell_history",
    "deny_shell_configs",
)


class ConfinementError(Refused):
    """The sandbox cannot be enforced as declared (exit 1, never a warning)."""


# Without nono-py (a machine where only the native plane is rendered, e.g. macOS): the core of
# its credential group, so a rendered native sandbox still masks them. Never used by `run`.
NONO_FALLBACK = (".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".kube", ".docker",
                 ".git-credentials", ".netrc", ".npmrc", ".vault-token", ".config/op")


def nono_deny_paths(home: str, *, fallback: bool = False) -> list[tuple[str, str]]:
    """(path, 'nono:GROUP') for every path of nono's deny groups, `~`/$HOME expanded to `home`
    (`fallback`: when nono-py is missing, `NONO_FALLBACK` instead of an error)."""
    try:
        from agentstack.sandbox.confine import load_nono

        document = json.loads(load_nono().embedded_policy_json())
    except ImportError as exc:
        if fallback:
            return [(os.path.join(home, p), "nono:deny_credentials") for p in NONO_FALLBACK]
        raise ConfinementError(
            f"nono-py is not usable: {exc}",
            hint="install it into agentstack's environment: pip install 'nono-py>=0.16,<0.17'",
        ) from None
    out: list[tuple[str, str]] = []
    groups: dict[str, Any] = document.get("groups", {})
    for name in NONO_DENY_GROUPS:
        group = groups.get(name)
        if group is None:
            raise ConfinementError(
                f"nono's embedded policy has no group {name!r}; this nono-py version is not "
                "supported",
                hint="install nono-py 0.16",
            )
        for raw in group.get("deny", {}).get("access", []):
            path = str(raw)
            if path.startswith("~/"):
                path = os.path.join(home, path[2:])
            elif path.startswith("$HOME/"):
                path = os.path.join(home, path[6:])
            out.append((path, f"nono:{name}"))
    return out


class RealPaths:
    """`os.path.realpath` for many absolute paths that share directories (the deny lists, the
    system grants): each directory is resolved once, then one `lstat` per new path. The same
    answer as `os.path.realpath`, to which it defers for a link and for any path that is not
    plain (relative, `.` or `..` components, `//`, a trailing slash)."""

    def __init__(self) -> None:
        self._known: dict[str, str] = {"/": "/"}

    def __call__(self, path: str) -> str:
        known = self._known.get(path)
        if known is not None:
            return known
        if not path.startswith("/") or path.startswith("//") or path != os.path.normpath(path):
            return os.path.realpath(path)
        parent, _, name = path.rpartition("/")
        real_parent = self(parent or "/")
        candidate = ("" if real_parent == "/" else real_parent) + "/" + name
        try:
            is_link = stat.S_ISLNK(os.lstat(candidate).st_mode)
        except OSError:
            is_link = False  # as realpath: a missing or unreadable component is taken as written
        result = os.path.realpath(candidate) if is_link else candidate
        self._known[path] = result
        return result


def harness_for_command(argv: list[str]) -> str | None:
    """The harness a command line starts (`claude ...` -> claude-code), if any."""
    if not argv:
        return None
    return profiles.BINARY_TO_HARNESS.get(os.path.basename(argv[0]))


def guard_runtime_dirs() -> list[str]:
    """Where the guard's interpreter and the agentstack package live (realpaths, existing)."""
    import sys

    import agentstack

    candidates = {
        sys.prefix,
        sys.base_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        os.path.dirname(os.path.dirname(os.path.realpath(agentstack.__file__))),
    }
    return sorted(p for p in {os.path.realpath(c) for c in candidates} if os.path.isdir(p))


def resolve_policy(
    sandbox: Sandbox,
    root: Path,
    *,
    harness: str | None = None,
    command: str | None = None,
    home: Path | None = None,
    agentstack_home: Path | None = None,
    search_path: str | None = None,
    check: bool = True,
    nono_fallback: bool = False,
) -> SandboxPolicy:
    """The policy `run` enforces and `why` explains (`check=False`: without refusing it, for
    `lock_problems`).

    `harness` adds that harness's profile (state paths, install directory, fixed environment);
    `command` is the program about to run (its install directory is granted when it is the
    harness's binary). Raises ConfinementError (exit 1) for a policy Landlock cannot enforce and
    InvalidInput (exit 2) for an environment name that may never pass."""
    from agentstack.paths import agentstack_home as default_agentstack_home

    home_dir = os.path.realpath(str(home if home is not None else Path.home()))
    state_dir = os.path.realpath(
        str(agentstack_home if agentstack_home is not None else default_agentstack_home())
    )
    workdir = os.path.realpath(str(root))
    search = search_path if search_path is not None else os.environ.get("PATH", os.defpath)

    realpath = RealPaths()
    grants: list[Grant] = []
    for path, access, is_file in profiles.system_grants():
        grants.append(
            Grant(path=realpath(path), access=_access(access), file=is_file,
                  source="system")
        )
    grants.append(Grant(path=workdir, access="rw", source="workdir"))

    env_set: tuple[tuple[str, str], ...] = ()
    harness_state: str | None = None
    if harness is not None:
        profile = profiles.PROFILES.get(harness)
        if profile is None:
            raise InvalidInput(
                f"unknown harness {harness!r}", hint="one of: " + ", ".join(profiles.PROFILES)
            )
        source = f"harness:{harness}"
        for item in profile.write_dirs:
            grants.append(Grant(path=_in_home(item, home_dir), access="rw", source=source))
        for item in profile.write_files:
            grants.append(
                Grant(path=_in_home(item, home_dir), access="rw", file=True, source=source)
            )
        for item in profile.read_dirs:
            path = _in_home(item, home_dir)
            if os.path.isdir(path):
                grants.append(Grant(path=path, access="ro", source=source))
        binary: str | None = None
        if command is not None:
            binary = command if "/" in command else profiles.find_binary(command, search)
        elif profile.binary is not None:
            binary = profiles.find_binary(profile.binary, search)
        if binary is not None and os.path.exists(binary):
            for path in profiles.install_dirs(binary, search):
                if os.path.isdir(path):
                    grants.append(
                        Grant(path=os.path.realpath(path), access="ro",
                              source=f"{source} install")
                    )
        env_set = profile.env_set
        if profile.private_state:
            from agentstack.sandbox.private_state import layout_for

            layout = layout_for(state_dir, workdir)
            harness_state = layout.root
            grants.append(Grant(path=layout.root, access="rw",
                                source=f"{source} private state"))
            env_set = (*env_set, *layout.env())
        # The guard hook runs inside the sandbox too: its interpreter and agentstack's own code
        # must be readable (read-only), or every tool call is denied (fail closed, but useless).
        for path in guard_runtime_dirs():
            grants.append(Grant(path=path, access="ro", source="agentstack guard"))

    for key, access, is_file in (
        ("read_dirs", "ro", False),
        ("write_dirs", "rw", False),
        ("read_files", "ro", True),
        ("write_files", "rw", True),
    ):
        for index, item in enumerate(getattr(sandbox, key)):
            try:
                path = normalise(item, workdir)
            except ValueError as exc:
                raise InvalidInput(f"sandbox.{key}[{index}]: {exc}") from None
            grants.append(
                Grant(path=path, access=_access(access), file=is_file,
                      source=f"sandbox.{key}[{index}]")
            )

    carve = (harness_state,) if harness_state is not None else ()
    denies = [Deny(path=state_dir, source="agentstack-home", except_paths=carve)]
    literal_state = os.path.abspath(
        str(agentstack_home if agentstack_home is not None else default_agentstack_home())
    )
    if literal_state != state_dir:
        denies.append(Deny(path=literal_state, source="agentstack-home"))
    for path, source in nono_deny_paths(home_dir, fallback=nono_fallback):
        denies.append(Deny(path=os.path.abspath(path), source=source))
        real = realpath(os.path.abspath(path))
        if real != os.path.abspath(path):
            denies.append(Deny(path=real, source=source))
    from agentstack.sandbox.credentials import CREDENTIAL_PATHS, HARNESS_HOMES

    # A profile without private state (gemini-cli, opencode, copilot, cursor, vscode) grants the
    # harness's real state directory, and its login file with it: Landlock cannot deny a file
    # under a granted directory, so that file is not listed (docs/sandbox.md, measured holes).
    profile_dirs = [g.path for g in grants
                    if g.source.startswith("harness:") and g.access == "rw" and not g.file
                    and g.path != harness_state]
    for relative, source in [*((p, "credentials") for p in CREDENTIAL_PATHS),
                             *((p, "harness-home") for p in HARNESS_HOMES)]:
        path = os.path.join(home_dir, relative)
        real = realpath(path)
        if any(is_within(path, d) or is_within(real, d) for d in profile_dirs):
            continue
        denies.append(Deny(path=path, source=source))
        if real != path:
            denies.append(Deny(path=real, source=source))

    policy = SandboxPolicy(
        workdir=workdir,
        home=home_dir,
        agentstack_home=state_dir,
        harness=harness,
        grants=tuple(_prune(grants)),
        denies=tuple(_unique_denies(denies)),
        network_block=sandbox.network.block,
        localhost_ports=tuple(sorted(set(sandbox.network.localhost_ports))),
        allow_domains=tuple(sandbox.network.allow_domains),
        credentials=tuple(
            CredentialRoute(
                name=name,
                upstream=cred.upstream,
                secret=cred.secret,
                header=cred.header,
                env=cred.env,
                base_url_env=cred.base_url_env,
            )
            for name, cred in sorted(_credentials(sandbox).items())
        ),
        env_pass=_env_names(sandbox),
        env_set=env_set,
        harness_state=harness_state,
    )
    if not check:
        return policy
    missing = missing_grants(policy)
    if missing:
        raise ConfinementError(missing[0], hint=MISSING_HINT)
    problems = policy.problems()
    if problems:
        raise ConfinementError(
            "the sandbox policy cannot be enforced as declared:\n"
            + "\n".join(f"  - {p}" for p in problems),
            hint="fix [sandbox] in agentstack.toml (then lock and trust again)",
        )
    return policy


def lock_problems(sandbox: Sandbox, root: Path) -> list[tuple[str, str]]:
    """(dotted path, message) for each manifest grant `run` can never accept on this machine (it
    opens or contains an always-denied path, or is read-only under a writable grant): `lock`
    refuses them. A grant whose path is missing is not one (it can be created); nor is anything
    when nono-py is not installed (`run` refuses that on its own)."""
    try:
        policy = resolve_policy(sandbox, root, check=False)
    except ConfinementError:
        return []
    return [(source, text) for source, text in policy.problem_items()
            if source.startswith("sandbox.")]


MISSING_HINT = "create it, or remove the grant; Landlock can only grant existing paths"


def missing_grants(policy: SandboxPolicy) -> list[str]:
    """One line per grant whose path does not exist and that `run` would not create (it creates
    only the harness profile's own read-write state): `run`, `why`, `doctor` and `check` refuse
    the same policy with the same message."""
    return [
        f"{grant.source} grants {grant.path}, which does not exist"
        for grant in policy.grants
        if not (grant.source.startswith("harness:") and grant.access == "rw")
        and not os.path.exists(grant.path)
    ]


def _in_home(item: str, home_dir: str) -> str:
    """A profile path (`~/...`) under `home_dir`, resolved."""
    if item == "~" or item.startswith("~/"):
        return os.path.realpath(os.path.join(home_dir, item[2:]))
    return normalise(item, home_dir)


def _access(value: str) -> Access:
    return "rw" if value == "rw" else "ro"


def _prune(grants: list[Grant]) -> list[Grant]:
    """Drop exact duplicates, and system/profile read-only grants made redundant by a read-write
    directory grant (an install directory inside the workdir). Manifest grants are kept as written
    so `problems()` can reject a read-only grant the user placed under a writable directory."""
    out: list[Grant] = []
    seen: set[tuple[str, str, bool]] = set()
    for grant in grants:
        key = (grant.path, grant.access, grant.file)
        if key in seen:
            continue
        if not grant.source.startswith("sandbox.") and any(
            o is not grant
            and not o.file
            and (o.access == "rw" or grant.access == "ro")
            and is_within(grant.path, o.path)
            and (o.path != grant.path or o.access != grant.access)
            for o in grants
        ):
            continue
        seen.add(key)
        out.append(grant)
    return out


def _unique_denies(denies: list[Deny]) -> list[Deny]:
    out: list[Deny] = []
    seen: set[str] = set()
    for deny in denies:
        if deny.path not in seen:
            seen.add(deny.path)
            out.append(deny)
    return out


def _credentials(sandbox: Sandbox) -> dict[str, Any]:
    """`sandbox.credentials`, model or view alike (both carry the same attributes)."""
    return dict(sandbox.credentials)


def _env_names(sandbox: Sandbox) -> tuple[str, ...]:
    reserved = {"TMPDIR"}
    for cred in sandbox.credentials.values():
        reserved.add(cred.env)
        if cred.base_url_env:
            reserved.add(cred.base_url_env)
    names = list(profiles.BASE_ENV)
    for index, name in enumerate(sandbox.env):
        if name in profiles.FORBIDDEN_ENV or name.startswith(profiles.FORBIDDEN_ENV_PREFIXES):
            raise InvalidInput(
                f"agentstack.toml: sandbox.env[{index}]: {name} never passes into the sandbox",
                hint="remove it; SSH agent sockets, loader variables and agentstack's own "
                "variables would let the confined process escape or forge trust",
            )
        if name in reserved:
            raise InvalidInput(
                f"agentstack.toml: sandbox.env[{index}]: {name} is set by agentstack run "
                "(TMPDIR, or a credential's env/base_url_env)",
                hint="remove it from sandbox.env",
            )
        if name not in names:
            names.append(name)
    return tuple(names)

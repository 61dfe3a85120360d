"""The third plane: the trusted `[sandbox]` rendered into a harness's own sandbox settings.

`agentstack run` enforces the policy with Landlock and seccomp. A harness started directly
(`claude`, `codex`) never passes through `run`; Claude Code and Codex ship sandboxes of their own,
and `apply --write` renders the same resolved policy (`resolve.resolve_policy`, without a harness
profile: the harness started directly uses its real user-level state) into them:

- Claude Code: the `sandbox` key of `.claude/settings.local.json` (bubblewrap on Linux, Seatbelt on
  macOS). It confines the Bash tool's commands.
- Codex: a permission profile in `.codex/config.toml` (`default_permissions` and
  `[permissions.agentstack.filesystem]`; bubblewrap on Linux, Seatbelt on macOS), and its older
  keys beside it (`sandbox_mode = "workspace-write"`, `[sandbox_workspace_write]` with
  `writable_roots` and `network_access`). Codex 0.171 takes the profile over them (measured: a
  `sandbox_mode = "danger-full-access"` next to the profile changes nothing); they are rendered so
  a project edit to them is drift, and so a Codex without profiles still keeps writes to the
  workdir and the network closed (they cannot deny a read: a finding).

What a native sandbox has no key for is a **finding** (`Finding`), shown by
`agentstack why --harness H --native`: a grant it cannot give is dropped *and reported*; a denial
it cannot express (a read it cannot keep closed) is widened *and reported*; never silently.

Measured on Linux 6.18 with Claude Code 2.1.332 and Codex 0.171.0 (tests/sandbox/test_native_sandbox.py):
both deny a read of `~/.ssh/id_ed25519` and a write outside the workdir, but with bubblewrap's
errors, not Landlock's: Claude Code's denied directory is an empty writable tmpfs (`ENOENT` below
it; a write there is discarded with the sandbox), a denied file `/dev/null` bound over it
(`EACCES`); Codex's masks are mounts of mode 000 (`EACCES` for a read and a write below them); a
write elsewhere outside is `EROFS` in both (a read-only bind mount, checked by the kernel before
any permission or LSM). Neither offers a form that answers `EACCES` there: Claude Code's per-file
masks would leave a denied directory listable, Codex's Landlock mode refuses a restricted file
system (docs/sandbox.md, "The native plane").

Standard library only; nothing here imports back up into agentstack's commands.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from agentstack.sandbox.policy import SandboxPolicy, is_within

NATIVE_HARNESSES = ("claude-code", "codex")
CODEX_PROFILE = "agentstack"
PLATFORMS = ("linux", "darwin")
# The containers of the rendered keys whose names agentstack watches (an entry added there, say
# `"/" = "write"` beside the profile's own, is drift the guard and `status` report).
GUARDED: dict[str, tuple[tuple[str, ...], ...]] = {
    "claude-code": (("sandbox",),),
    "codex": (("default_permissions",), ("permissions",), ("permissions", CODEX_PROFILE),
              ("permissions", CODEX_PROFILE, "filesystem"), ("sandbox_mode",),
              ("sandbox_workspace_write",)),
}


class Finding(NamedTuple):
    """Something the native sandbox cannot express. kind: `widened` (it allows more than the
    policy), `dropped` (a grant it cannot give: it allows less), `not-enforced` (a part of the
    policy it does not enforce at all)."""

    kind: str
    what: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return self._asdict()


class NativeRender(NamedTuple):
    harness: str
    path: str  # the project file the keys go into
    keys: dict[tuple[str, ...], Any]
    findings: tuple[Finding, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "harness": self.harness,
            "file": self.path,
            "keys": self.document(),
            "findings": [f.to_json() for f in self.findings],
        }

    def document(self) -> dict[str, Any]:
        """The keys as the nested document they make in the file."""
        out: dict[str, Any] = {}
        for key, value in self.keys.items():
            node = out
            for part in key[:-1]:
                node = node.setdefault(part, {})
            node[key[-1]] = value
        return out

    @property
    def guarded(self) -> tuple[tuple[str, ...], ...]:
        return GUARDED[self.harness]


def _outermost(paths: list[str]) -> list[str]:
    """The paths none of the others contains (a mount inside a masked mount fails in bubblewrap),
    sorted and without duplicates."""
    unique = sorted(set(paths))
    out: list[str] = []
    for path in unique:
        if not any(other != path and is_within(path, other) for other in unique):
            out.append(path)
    return out


def _manifest_writes(policy: SandboxPolicy) -> list[str]:
    return sorted(g.path for g in policy.grants
                  if g.source.startswith("sandbox.") and g.access == "rw"
                  and not is_within(g.path, policy.workdir))


def _manifest_reads(policy: SandboxPolicy) -> list[str]:
    return sorted(g.path for g in policy.grants
                  if g.source.startswith("sandbox.") and g.access == "ro")


def _network_findings(policy: SandboxPolicy, harness: str, blocked_by: str) -> list[Finding]:
    out: list[Finding] = []
    if not policy.network_block:
        out.append(Finding(
            "dropped", "sandbox.network.block = false",
            f"{harness}'s sandbox keeps the network closed ({blocked_by}); the open network is "
            "not given natively"))
    if policy.localhost_ports:
        out.append(Finding(
            "dropped", "sandbox.network.localhost_ports",
            f"no key for TCP to localhost ports {', '.join(map(str, policy.localhost_ports))}: "
            "not given natively"))
    if policy.credentials:
        out.append(Finding(
            "not-enforced", "sandbox.credentials",
            "the native sandbox has no credential proxy: a harness started directly holds its "
            "real key in its environment, and requests reach "
            + ", ".join(sorted({r.upstream for r in policy.credentials}))
            + " only as the harness itself makes them (use agentstack run for phantom tokens)"))
    return out


def claude_code(policy: SandboxPolicy, platform: str = "linux") -> NativeRender:
    """Claude Code's `sandbox` settings for `policy` (`platform`: linux = bubblewrap, darwin =
    Seatbelt; the same keys)."""
    denies = _outermost([d.path for d in policy.denies])
    filesystem: dict[str, Any] = {"denyRead": denies}
    writes = _manifest_writes(policy)
    findings = [
        Finding("not-enforced", "file tools and MCP servers",
                "Claude Code's sandbox confines the Bash tool's commands only; its own file tools "
                "(Read, Edit, Write) are held by agentstack's guard, and MCP servers run "
                "unconfined (use agentstack run)"),
        Finding("widened", "reads (deny by default)",
                "Claude Code's sandbox lets commands read everything but denyRead, and ignores "
                "allowRead in project and local settings: every path outside the always-denied "
                "list is readable natively, not only the granted ones"),
    ]
    if writes:
        filesystem["allowWrite"] = writes
        findings.append(Finding(
            "dropped", "sandbox.write_dirs / write_files outside the workdir",
            "Claude Code ignores allowWrite from project and local settings: "
            + ", ".join(writes) + " stay read-only natively"))
    network: dict[str, Any] = {
        "allowedDomains": sorted(policy.allow_domains),
        "allowLocalBinding": False,
        "allowUnixSockets": [],
    }
    findings.extend(_network_findings(policy, "Claude Code", "its proxy allows allowedDomains "
                                      "only"))
    if platform == "linux":
        findings.append(Finding(
            "not-enforced", "kernel errors",
            "bubblewrap denies a read of a denied file with EACCES (/dev/null bound over it), "
            "but one below a denied directory with ENOENT (an empty tmpfs over the directory, "
            "kept whole so its names and later files stay hidden: masking its files one by one "
            "would answer EACCES but leave the names listable), a write outside with EROFS (a "
            "read-only mount, which the kernel checks before any permission), and a write into "
            "a denied directory lands in that tmpfs and is gone with the sandbox; not "
            "Landlock's EACCES"))
    else:
        findings.append(Finding(
            "not-enforced", "macOS", "rendered for Seatbelt with the same keys; not verified on "
            "a Mac by agentstack's tests"))
    keys: dict[tuple[str, ...], Any] = {("sandbox",): {
        "enabled": True,
        # Never fall back to running commands unconfined, never let the model ask for it.
        "failIfUnavailable": True,
        "allowUnsandboxedCommands": False,
        "autoAllowBashIfSandboxed": False,
        "filesystem": filesystem,
        "network": network,
    }}
    return NativeRender("claude-code", ".claude/settings.local.json", keys, tuple(findings))


def codex(policy: SandboxPolicy, platform: str = "linux") -> NativeRender:
    """Codex's permission profile for `policy`."""
    codex_home = os.path.join(policy.home, ".codex")
    kept = [d.path for d in policy.denies if is_within(codex_home, d.path)]
    # Codex 0.171 runs hooks outside its sandbox (measured: a project hook sees the host's mounts,
    # reads the decoy and writes outside the workdir), so the guard hook reads agentstack's state
    # as it does unsandboxed: the state is masked like every other always-denied path. (Were a
    # later Codex to run hooks inside, the guard could not read its state there and would block
    # every prompt: fail closed.)
    masked = [d.path for d in policy.denies if d.path not in kept]
    denies = _outermost(masked)
    filesystem: dict[str, str] = {"/": "read"}
    for path in denies:
        filesystem[path] = "none"
    filesystem[policy.workdir] = "write"
    for path in _manifest_writes(policy):
        filesystem[path] = "write"
    findings = [
        Finding("not-enforced", "MCP servers and hooks",
                "Codex's sandbox confines its shell commands and patches; MCP servers and hooks "
                "run unconfined (use agentstack run)"),
        Finding("dropped", "unattended MCP tool calls",
                "under its sandbox Codex asks approval for each MCP tool call (its servers run "
                'outside it): with approval_policy = "never" (codex exec) they are refused; '
                "agentstack does not approve them for the user (start Codex through agentstack "
                "run, where its own sandbox is off)"),
        Finding("widened", "reads (deny by default)",
                'Codex\'s sandbox needs its own install directory and ~/.codex readable to start '
                '(its helper runs from there), so the profile grants "/" read and masks the '
                "always-denied paths: every other path is readable natively"),
    ]
    if kept:
        findings.append(Finding(
            "widened", ", ".join(sorted(kept)),
            "Codex runs its sandbox helper from ~/.codex: that directory stays readable natively "
            "(its credential files below it stay masked)"))
    findings.extend(_network_findings(policy, "Codex", "the profile grants no network"))
    if policy.allow_domains:
        findings.append(Finding(
            "dropped", "sandbox.network.allow_domains",
            "the profile grants no network: " + ", ".join(policy.allow_domains)
            + " are not reachable natively"))
    if platform == "linux":
        findings.append(Finding(
            "not-enforced", "kernel errors",
            "bubblewrap denies a masked read, and a write into a masked path, with EACCES (a "
            "mount of mode 000), but a write anywhere else outside the granted paths with EROFS "
            "(a read-only mount, which the kernel checks before any permission); Codex's "
            "Landlock mode (features.use_legacy_landlock), which would answer EACCES, refuses "
            "every restricted file system"))
    else:
        findings.append(Finding(
            "not-enforced", "macOS", "rendered for Seatbelt with the same keys; not verified on "
            "a Mac by agentstack's tests"))
    findings.append(Finding(
        "widened", "sandbox_mode / sandbox_workspace_write",
        'rendered too (workspace-write, the writable roots, no network) for a Codex without '
        "permission profiles: those keys cannot deny a read, so there every path is readable "
        "natively; Codex 0.171 takes the profile over them"))
    # One owned key per path (a path is a table key, and may be any text): agentstack owns each
    # entry, and the table's names are guarded (an entry added beside them is drift).
    keys: dict[tuple[str, ...], Any] = {
        ("default_permissions",): CODEX_PROFILE,
        ("sandbox_mode",): "workspace-write",
        ("sandbox_workspace_write", "writable_roots"): _manifest_writes(policy),
        ("sandbox_workspace_write", "network_access"): False,
        # workspace-write makes /tmp and $TMPDIR writable unless told not to; the profile does not.
        ("sandbox_workspace_write", "exclude_slash_tmp"): True,
        ("sandbox_workspace_write", "exclude_tmpdir_env_var"): True,
    }
    for path, access in filesystem.items():
        keys[("permissions", CODEX_PROFILE, "filesystem", path)] = access
    return NativeRender("codex", ".codex/config.toml", keys, tuple(findings))


RENDERERS = {"claude-code": claude_code, "codex": codex}
# What `apply --write` writes: both. While a Codex session runs, its bubblewrap'd helpers create
# the mount targets of the paths they keep read-only (`.agents`, `.aws`, `.git` where missing) as
# empty directories in the real workdir (measured with 0.171; sometimes left behind). The guard
# does not read an empty directory as surface drift (it loads nothing), and watches it whole from
# then on (a file appearing in it is drift): `agentstack._guard_more.empty_directory`.
APPLIED = NATIVE_HARNESSES


def render(policy: SandboxPolicy, harness: str, platform: str | None = None, *,
           check_paths: bool = True) -> NativeRender | None:
    """What `apply` gives `harness`'s own sandbox (None: it has none agentstack renders into).
    A manifest grant whose path does not exist is left out, and a finding (`check_paths=False`:
    paths of another machine, for the golden files)."""
    renderer = RENDERERS.get(harness)
    if renderer is None:
        return None
    import sys

    chosen = platform or ("darwin" if sys.platform == "darwin" else "linux")
    missing = [g for g in policy.grants if check_paths
               and g.source.startswith("sandbox.") and not os.path.exists(g.path)]
    if missing:
        policy = policy._replace(grants=tuple(g for g in policy.grants if g not in missing))
    rendered = renderer(policy, chosen)
    if missing:
        rendered = rendered._replace(findings=(*rendered.findings, *(
            Finding("dropped", g.source, f"{g.path} does not exist: not given natively (and "
                    "agentstack run refuses the policy until it does)") for g in missing)))
    return rendered


def native_policy(sandbox: Any, root: Any, *, home: Any = None,
                  agentstack_home: Any = None) -> SandboxPolicy:
    """The policy a harness started directly gets: the trusted declaration resolved as `run`
    resolves it, without a harness profile (a harness started directly uses its real state)."""
    from agentstack.sandbox.resolve import resolve_policy

    # Not refused here: a grant whose path is missing is dropped (and a finding, `render`);
    # what `run` can never accept was refused at `lock`. Without nono-py (a Mac), the core of
    # its credential group stands in for its deny groups.
    return resolve_policy(sandbox, root, home=home, agentstack_home=agentstack_home, check=False,
                          nono_fallback=True)


def for_consent(consent: dict[str, Any], root: Any, harness: str, *, home: Any = None,
                agentstack_home: Any = None) -> NativeRender | None:
    """`render` for the trusted consent document (None when the harness has no native sandbox
    or `sandbox.enabled` is false)."""
    if harness not in APPLIED:
        return None
    from agentstack.manifest.view import SandboxView

    sandbox = SandboxView(consent["sandbox"])
    if not sandbox.enabled:
        return None
    policy = native_policy(sandbox, root, home=home, agentstack_home=agentstack_home)
    return render(policy, harness)


# Inside `run`: the harness's own sandbox cannot start under Landlock and seccomp (no namespaces,
# no mounts; measured: Claude Code refuses to start, `failIfUnavailable`; Codex cannot even read
# AGENTS.md through its helper), and `run` is the stronger plane. It is switched off for that one
# process by the harness's highest settings tier: Claude Code's `--settings` (above the project
# and local files) and Codex's `-c` (above every config layer).
INSIDE_RUN_ARGS = {
    "claude": ("--settings", '{"sandbox":{"enabled":false}}'),
    "codex": ("-c", 'default_permissions=":danger-full-access"'),
}


def inside_run_argv(harness: str | None, argv: list[str]) -> list[str]:
    """`argv` as `run` starts it: the native sandbox off when argv starts that harness's binary
    (the project renders it on), else unchanged."""
    if not argv or harness not in NATIVE_HARNESSES:
        return argv
    extra = INSIDE_RUN_ARGS.get(os.path.basename(argv[0]))
    if extra is None or ("claude" if harness == "claude-code" else harness) != os.path.basename(
        argv[0]
    ):
        return argv
    return [argv[0], *extra, *argv[1:]]


def on_disk(root: Any, rendered: NativeRender) -> str:
    """Whether the project's rendered file carries `rendered`'s keys now: `rendered`,
    `not rendered (agentstack apply --write)` or `changed since apply (drift)`."""
    import json
    from pathlib import Path

    path = Path(str(root)) / rendered.path
    try:
        data = path.read_bytes()
    except OSError:
        return "not rendered (agentstack apply --write)"
    try:
        if rendered.path.endswith(".toml"):
            import tomllib

            document: Any = tomllib.loads(data.decode("utf-8"))
        else:
            document = json.loads(data)
    except ValueError:
        return "changed since apply (drift): not readable"
    for key, value in rendered.keys.items():
        current: Any = document
        for part in key:
            current = current.get(part) if isinstance(current, dict) else None
        if current is None:
            return "not rendered (agentstack apply --write)"
        if current != value:
            return "changed since apply (drift)"
    return "rendered"

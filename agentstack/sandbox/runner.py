"""Launch a command under the kernel sandbox built from a `SandboxPolicy`.

The parent (this module, unconfined) checks that the sandbox is enforceable, takes the seccomp
program (compiled once per key, `seccomp.program`), creates a private TMPDIR, starts the launcher
(`confine.py`: a clone of this process born in the run's cgroup when it has a single thread, else a
fresh `python -I -S`), which waits for its spec; then starts nono's credential proxy when the
policy has credentials or allowed domains, builds the environment from an allowlist and sends the
spec. The launcher confines itself and execve()s the command. The parent
then waits: it forwards SIGTERM and SIGHUP (and, for a non-interactive child, SIGINT and SIGQUIT),
and returns the child's exit status. When the command exits, descendants it left behind (even
setsid-detached ones) are killed: the parent is their child subreaper for the run.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import marshal
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple, cast

if TYPE_CHECKING:
    import subprocess

from agentstack import layout
from agentstack.sandbox import profiles
from agentstack.sandbox.confine import ARMED, nono_module_path
from agentstack.sandbox.policy import Grant, SandboxPolicy
from agentstack.sandbox.resolve import ConfinementError

# The C module behind `signal`, whose import builds enums of every signal (~1 ms of `run`'s
# start-up); the same functions and numbers.
_signal: Any = __import__("_signal")

LAUNCHER = Path(__file__).resolve().with_name("confine.py")
REQUIRED_ABI_FEATURES = {
    "has_network": "TCP connect/bind rules (Landlock ABI 4, Linux 6.7)",
    "has_scoping": "signal and abstract unix socket scoping (Landlock ABI 6, Linux 6.12)",
}
KILL_TIMEOUT = 10.0
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
NO_PROXY = "localhost,127.0.0.1,::1"
RUN_RO_ENV = layout.RUN_RO_ENV
FileArg = int | IO[Any] | None
# Called once the proxy runs, before anything is launched: (runtime policy, {route upstream: the
# URL the confined process reaches it at}).
# (the runtime policy, each credential route's upstream -> the gate's URL for it, the phantom
# token by credential env name)
BeforeStart = Callable[["SandboxPolicy", dict[str, str], dict[str, str]], None]


class Enforcement(NamedTuple):
    """What the kernel and libraries offer, checked before anything is launched."""

    abi: str
    features: tuple[str, ...]
    nono_version: str | None
    seccomp_program: bytes
    # The Landlock ABI in force has no signal scoping: the launcher makes a PID namespace.
    pid_namespace: bool = False

    def __repr__(self) -> str:  # the program is long and says nothing to a reader
        return (f"Enforcement(abi={self.abi!r}, features={self.features!r}, "
                f"nono_version={self.nono_version!r}, pid_namespace={self.pid_namespace!r})")


@functools.lru_cache(maxsize=1)
def nono_version() -> str | None:
    """The installed nono-py's version, read from its dist-info directory's name when there is
    exactly one beside the package (importlib.metadata costs ~18 ms of every `run`), else from
    importlib.metadata."""
    import importlib.util

    spec = importlib.util.find_spec("nono_py")
    if spec is not None and spec.origin is not None:
        site = os.path.dirname(os.path.dirname(spec.origin))
        with contextlib.suppress(OSError):
            found = [
                name[len("nono_py-") : -len(".dist-info")]
                for name in os.listdir(site)
                if name.startswith("nono_py-") and name.endswith(".dist-info")
            ]
            if len(found) == 1:
                return found[0]
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("nono-py")
    except PackageNotFoundError:
        return None


def landlock_kernel_abi() -> int | None:
    """The kernel's own Landlock ABI number (landlock_create_ruleset(NULL, 0, VERSION))."""
    import platform

    number = {"x86_64": 444, "aarch64": 444}.get(platform.machine())
    if number is None:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    result = libc.syscall(number, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return int(result) if result > 0 else None


def abi_number(abi: Any) -> int:
    """nono's DetectedAbi ('V6') as a number."""
    text = str(getattr(abi, "version", abi)).lstrip("Vv")
    return int(text) if text.isdigit() else 0


def check_enforceable(policy: SandboxPolicy) -> Enforcement:
    """Raise ConfinementError unless every layer the policy needs is available here."""
    if not sys.platform.startswith("linux"):
        raise ConfinementError(
            f"agentstack run confines with Landlock and seccomp, which need Linux (this is "
            f"{sys.platform})",
            hint="run it on Linux 6.12 or newer",
        )
    try:
        from agentstack.sandbox.confine import load_nono

        nono = load_nono()
    except ImportError as exc:
        raise ConfinementError(
            f"nono-py is not usable: {exc}",
            hint="install it into agentstack's environment: pip install 'nono-py>=0.16,<0.17'",
        ) from None
    try:
        abi = nono.detect_abi()
    except RuntimeError as exc:
        raise ConfinementError(
            f"Landlock is not available: {exc}",
            hint="use a kernel built with CONFIG_SECURITY_LANDLOCK and 'landlock' in the lsm= "
            "boot parameter (cat /sys/kernel/security/lsm)",
        ) from None
    from agentstack.sandbox import abi as table

    kernel = abi_number(abi)
    in_force = min(kernel, table.LATEST) if policy.landlock_abi is None else policy.landlock_abi
    pid_namespace = table.needs_pid_namespace(in_force) and pid_namespace_available()
    if policy.landlock_abi is not None:
        if not 1 <= policy.landlock_abi <= kernel:
            raise ConfinementError(
                f"Landlock ABI {policy.landlock_abi} cannot be emulated on this kernel "
                f"(ABI {kernel})", hint=f"pick 1 to {kernel}")
        # The confinement suite at an emulated older ABI: it reports what is missing per row.
    else:
        assessment = table.assess(in_force, network_block=policy.network_block,
                                  seccomp=policy.seccomp, pid_namespace=pid_namespace)
        if assessment.refused:
            # Signal scoping is refused only where no PID namespace can be made: say what would.
            namespace = ("; or let agentstack make a PID namespace: run it as root, or allow "
                         "unprivileged user namespaces (Ubuntu: an AppArmor profile granting "
                         "userns, or sysctl kernel.apparmor_restrict_unprivileged_userns=0)"
                         if table.needs_pid_namespace(in_force) and not pid_namespace else "")
            raise ConfinementError(
                f"the kernel's Landlock ({abi.version}) lacks "
                + "; and ".join(assessment.refused),
                hint="upgrade to Linux 6.12 or newer" + namespace + "; agentstack does not run "
                "a harness with a weaker sandbox than the one declared",
            )
    if policy.seccomp:
        try:
            from agentstack.sandbox.seccomp import program as seccomp_program

            # With no port to bind, nothing may listen: listen() on an unbound socket would
            # bind an ephemeral port itself, where Landlock's bind rules never look. Compiled
            # once per key into agentstack's own state (always denied to the sandbox).
            program = seccomp_program(
                allow_udp=not policy.network_block,
                allow_listen=bool(policy.localhost_ports) or not policy.network_block,
                state_home=policy.agentstack_home,
            )
        except ImportError as exc:
            raise ConfinementError(
                f"seccomp is not usable: {exc}",
                hint="install pyseccomp (pip install 'pyseccomp>=0.1.2') and libseccomp "
                "(Debian/Ubuntu: apt-get install libseccomp2)",
            ) from None
        except OSError as exc:
            raise ConfinementError(f"libseccomp could not compile the filter: {exc}") from None
    else:
        program = b""
    return Enforcement(
        abi=str(abi.version),
        features=tuple(abi.feature_names),
        nono_version=nono_version(),
        seccomp_program=program,
        pid_namespace=pid_namespace,
    )


@functools.lru_cache(maxsize=1)
def pid_namespace_available() -> bool:
    from agentstack.sandbox.confine import can_make_pid_namespace

    return can_make_pid_namespace()


def build_env(
    policy: SandboxPolicy, source: Mapping[str, str], proxy_env: Mapping[str, str]
) -> dict[str, str]:
    """The child's environment: allowlisted names from `source`, the profile's fixed values,
    TMPDIR, and the proxy's variables. Nothing else is inherited; SSH_AUTH_SOCK never passes."""
    env: dict[str, str] = {}
    for name in policy.env_pass:
        if name in profiles.FORBIDDEN_ENV or name.startswith(profiles.FORBIDDEN_ENV_PREFIXES):
            continue
        value = source.get(name)
        if value is not None:
            env[name] = value
    env["HOME"] = policy.home
    env.setdefault("PATH", os.defpath)
    for name, value in policy.env_set:
        env[name] = value
    if policy.tmpdir is not None:
        env["TMPDIR"] = policy.tmpdir
    env.update(proxy_env)
    for name in list(env):
        if name in profiles.FORBIDDEN_ENV or name.startswith(profiles.FORBIDDEN_ENV_PREFIXES):
            del env[name]
    return env


# ---------------------------------------------------------------------------------- the proxy


class Proxy:
    """nono's proxy in this (unconfined) process: reverse routes that inject the real secrets,
    and a CONNECT proxy for `sandbox.network.allow_domains`."""

    def __init__(self, policy: SandboxPolicy, *, server: str | None = None,
                 loopback_ports: tuple[int, ...] = (), receipts_root: str | None = None) -> None:
        """`server`: the proxy of one MCP server under the relay (agentstack.serverbox): its
        receipts name it, and its gate also forwards to the declared 127.0.0.1 ports
        (`loopback_ports`). `receipts_root`: the project the receipts are kept for (else the
        policy's workdir)."""
        from agentstack.sandbox.confine import load_nono
        from agentstack.secrets import SecretStore

        nono = load_nono()
        store = SecretStore(Path(policy.agentstack_home))
        routes = []
        # Each secret reaches nono through a memfd of this process (`file:///proc/self/fd/N`,
        # read once while the proxy starts, closed before anything is launched), never by the
        # store's path: the sandbox cannot read the store, but it can stat() it, so the store
        # keeps every secret padded to one size, and nono would inject the padding.
        handles: list[int] = []
        try:
            for cred in policy.credentials:
                if not store.path(cred.secret).is_file():
                    raise ConfinementError(
                        f"sandbox.credentials.{cred.name} needs secret:{cred.secret}, which is "
                        "not set",
                        hint=f"agentstack secret set {cred.secret}",
                    )
                store.seal(cred.secret)  # a secret an older agentstack stored bare: padded now
                handle = os.memfd_create(f"agentstack-secret-{cred.name}", os.MFD_CLOEXEC)
                handles.append(handle)
                value = store.get(cred.secret).encode("utf-8")
                view = memoryview(value)
                while view:
                    view = view[os.write(handle, view):]
                routes.append(
                    nono.RouteConfig(
                        prefix=cred.name,
                        upstream=cred.upstream.rstrip("/"),
                        credential_key=f"file:///proc/self/fd/{handle}",
                        inject_mode=nono.InjectMode.HEADER,
                        inject_header=cred.header,
                        credential_format="Bearer {}" if cred.header.lower() == "authorization"
                        else "{}",
                        env_var=cred.env,
                    )
                )
            try:
                self.handle = nono.start_proxy(
                    nono.ProxyConfig(allowed_hosts=list(policy.allow_domains), routes=routes)
                )
            except (RuntimeError, OSError, ValueError) as exc:
                raise ConfinementError(f"the credential proxy did not start: {exc}") from None
        finally:
            for handle in handles:
                os.close(handle)
        problems = [d for d in self.handle.diagnostics() if d.get("severity") != "info"]
        if problems:
            self.handle.shutdown()
            raise ConfinementError(
                "the credential proxy reported: "
                + "; ".join(f"{d.get('route_prefix')}: {d.get('message')}" for d in problems)
            )
        self.nono_port = int(self.handle.port)
        self.token = str(self.handle.env_vars()["NONO_PROXY_TOKEN"])
        self.policy = policy
        from agentstack.sandbox.gate import Gate

        try:
            # The only port the confined process may reach: agentstack's gate, never nono's.
            self.gate = Gate(self.nono_port, self.token,
                             routes=tuple(c.name for c in policy.credentials),
                             allow_domains=tuple(policy.allow_domains),
                             receipt=_receipts(policy, server, receipts_root),
                             loopback_ports=loopback_ports)
        except OSError as exc:
            self.handle.shutdown()
            raise ConfinementError(f"the proxy gate did not start: {exc}") from None
        self.port = self.gate.port

    def child_env(self) -> dict[str, str]:
        nono = f"127.0.0.1:{self.nono_port}"
        gate = f"127.0.0.1:{self.port}"
        env = {k: v.replace(nono, gate) for k, v in self.handle.env_vars().items()}
        env["NO_PROXY"] = env["no_proxy"] = NO_PROXY
        env["NONO_NO_PROXY"] = NO_PROXY
        credential_env = self.handle.credential_env_vars()
        for cred in self.policy.credentials:
            phantom = credential_env.get(cred.env)
            if not phantom:
                raise ConfinementError(
                    f"the proxy gave no phantom token for {cred.env}; refusing to start"
                )
            env[cred.env] = phantom
            if cred.base_url_env:
                env[cred.base_url_env] = f"http://127.0.0.1:{self.port}/{cred.name}"
        return env

    def phantoms(self) -> dict[str, str]:
        """Each credential's env name -> the phantom token the confined process holds."""
        credential_env = self.handle.credential_env_vars()
        return {c.env: str(credential_env[c.env]) for c in self.policy.credentials
                if credential_env.get(c.env)}

    def route_urls(self) -> dict[str, str]:
        """Each credential route's upstream -> the gate's URL for it."""
        return {c.upstream.rstrip("/"): f"http://127.0.0.1:{self.port}/{c.name}"
                for c in self.policy.credentials}

    def audit(self) -> list[dict[str, Any]]:
        """nono's audit events, then what agentstack's gate refused."""
        events = list(self.handle.drain_audit_events())
        events += [{"source": "agentstack-gate", "decision": "refused", "target": target,
                    "reason": reason} for target, reason in self.gate.log.drain()]
        return events

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):
            self.gate.close()
        with contextlib.suppress(Exception):
            self.handle.shutdown()


# ---------------------------------------------------------------------------------- running


@contextlib.contextmanager
def _nothing_started(where: str) -> Iterator[None]:
    """A full disk (or a read-only or failing one) while setting a session up: exit 1, and
    nothing was started."""
    try:
        yield
    except OSError as exc:
        from agentstack.storage import storage_error

        raise storage_error(exc, where, "setting up the session (nothing was started)") from exc


def prepare_state(policy: SandboxPolicy) -> None:
    """Create the harness's missing state paths (Landlock can only grant what exists), and refuse
    when a path the manifest grants does not exist."""
    seeds: dict[str, str] = {}
    if policy.harness is not None:
        profile = profiles.PROFILES[policy.harness]
        seeds = {os.path.realpath(os.path.expanduser(k.replace("~", policy.home, 1))): v
                 for k, v in profile.file_seed.items()}
    for grant in policy.grants:
        if os.path.exists(grant.path):
            continue
        if grant.source.startswith("harness:") and grant.access == "rw":
            if grant.file:
                os.makedirs(os.path.dirname(grant.path), mode=0o700, exist_ok=True)
                fd = os.open(grant.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.write(seeds.get(grant.path, ""))
            else:
                os.makedirs(grant.path, mode=0o700, exist_ok=True)
            continue
        from agentstack.sandbox.resolve import MISSING_HINT

        raise ConfinementError(f"{grant.source} grants {grant.path}, which does not exist",
                               hint=MISSING_HINT)


class Confined:
    """A running confined process."""

    __slots__ = ("cgroup", "enforcement", "policy", "process", "proxy")

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        policy: SandboxPolicy,
        proxy: Proxy | None,
        enforcement: Enforcement,
        cgroup: Cgroup | None = None,
    ) -> None:
        self.process = process
        self.policy = policy
        self.proxy = proxy
        self.enforcement = enforcement
        self.cgroup = cgroup

    @property
    def pid(self) -> int:
        return self.process.pid


def _launch_spec(
    policy: SandboxPolicy, argv: Sequence[str], env: Mapping[str, str], program: bytes,
    pid_namespace: bool = False,
) -> dict[str, Any]:
    return {
        "pid_namespace": pid_namespace,
        "argv": list(argv),
        "env": dict(env),
        "cwd": policy.workdir,
        "grants": [
            {"path": g.path, "access": g.access, "file": g.file} for g in policy.grants
        ],
        "network_block": policy.network_block,
        "tcp_ports": list(policy.tcp_ports),
        "seccomp": program,
        "drop_capabilities": True,
        "landlock_rights": _forced_rights(policy.landlock_abi),
        "nono": nono_module_path(),
        "parent_pid": os.getpid(),
    }


def _forced_rights(version: int | None) -> dict[str, int] | None:
    """The Landlock rights of ABI `version` for the launcher (None: nono, at the kernel's ABI)."""
    if version is None:
        return None
    from agentstack.sandbox import abi

    fs = abi.fs_access(version)
    file_rights = (abi.FS_EXECUTE | abi.FS_WRITE_FILE | abi.FS_READ_FILE | abi.FS_TRUNCATE
                   | abi.FS_IOCTL_DEV)
    return {"fs": fs, "net": abi.net_access(version), "scoped": abi.scoped(version),
            "ro": abi.FS_READ_FILE | abi.FS_READ_DIR | abi.FS_EXECUTE, "rw": fs,
            "file": file_rights}


def _children(pid: int | None = None) -> set[int]:
    """A process's children (this process by default): /proc/PID/task/*/children, else a scan of
    /proc/*/stat."""
    me = str(os.getpid() if pid is None else pid)
    out: set[int] = set()
    try:
        for task in os.listdir(f"/proc/{me}/task"):
            with open(f"/proc/{me}/task/{task}/children", encoding="ascii") as handle:
                out.update(int(p) for p in handle.read().split())
        return out
    except FileNotFoundError:
        if pid is not None:
            return out  # the process is gone
    except OSError:
        pass
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and fields[1] == me:
            out.add(int(entry))
    return out


def _set_subreaper(on: bool) -> bool:
    """Become (or stop being) the child subreaper; returns the previous setting."""
    libc = ctypes.CDLL(None, use_errno=True)
    previous = ctypes.c_int(0)
    libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(previous), 0, 0, 0)
    libc.prctl(PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1 if on else 0), 0, 0, 0)
    return bool(previous.value)


def _descendants(before: set[int]) -> set[int]:
    """Every process below this one, except the children it had before the run (and theirs)."""
    found: set[int] = set()
    frontier = list(_children() - before)
    while frontier:
        pid = frontier.pop()
        if pid in found:
            continue
        found.add(pid)
        frontier.extend(_children(pid) - found)
    return found


class SurvivorsError(ConfinementError):
    """Processes of the confined run could not be killed (never expected; reported loudly)."""


def _reap_descendants(before: set[int], *, timeout: float = KILL_TIMEOUT) -> int:
    """SIGKILL every process of the run's tree until none is left; how many signals were sent.

    Every round walks the whole tree (not one generation), kills all of it and reaps what became
    our child (we are the subreaper, so orphans come to us, never to init). A process with a
    fatal signal pending cannot fork, so each round only sees what was alive in the previous one;
    there is no round cap, only a time limit after which the survivors are an error."""
    from agentstack.patience import scaled

    killed = 0
    timeout = scaled(timeout)  # a busy machine takes longer to walk and kill, never less surely
    deadline = time.monotonic() + timeout
    while True:
        strays = _descendants(before)
        if not strays:
            return killed
        for pid in strays:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, _signal.SIGKILL)
                killed += 1
        for pid in _children() - before:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        if time.monotonic() > deadline:
            raise SurvivorsError(
                f"{len(strays)} process(es) of the confined run survived SIGKILL for "
                f"{timeout:.0f} s: {', '.join(map(str, sorted(strays)))}",
                hint="they are still confined; kill them (kill -9) before running git here",
            )
        time.sleep(0.001)


class Cgroup:
    """A cgroup v2 of its own for one run: every process of the run is in it (a confined process
    cannot leave: /sys/fs/cgroup is read-only to it), and `kill()` ends all of them at once with
    `cgroup.kill` (Linux 5.14). Used where this process may create a child of its own cgroup."""

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def create(cls) -> Cgroup | None:
        base = _own_cgroup_dir()
        if base is None:
            return None
        _remove_stale_cgroups(base)
        path = os.path.join(base, f"{CGROUP_PREFIX}{os.getpid()}-{os.urandom(4).hex()}")
        try:
            os.mkdir(path, 0o755)
        except OSError:
            return None
        if not os.path.exists(os.path.join(path, "cgroup.kill")):
            with contextlib.suppress(OSError):
                os.rmdir(path)
            return None
        return cls(path)

    def add(self, pid: int) -> None:
        with open(os.path.join(self.path, "cgroup.procs"), "w", encoding="ascii") as handle:
            handle.write(str(pid))

    def pids(self) -> set[int]:
        try:
            with open(os.path.join(self.path, "cgroup.procs"), encoding="ascii") as handle:
                return {int(p) for p in handle.read().split()}
        except OSError:
            return set()

    def kill(self) -> None:
        with (
            contextlib.suppress(OSError),
            open(os.path.join(self.path, "cgroup.kill"), "w", encoding="ascii") as handle,
        ):
            handle.write("1")

    def remove(self, *, timeout: float = KILL_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return  # still busy: the next run removes it (stale cgroups are killed)
                self.kill()
                time.sleep(0.002)


CGROUP_PREFIX = layout.RUN_DIR_PREFIX  # a run's cgroup is named like its private directory


def _own_cgroup_dir() -> str | None:
    """The directory of this process's cgroup v2, if the unified hierarchy is mounted."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            line = next((x for x in handle.read().splitlines() if x.startswith("0::")), None)
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            mounts = handle.read().splitlines()
    except OSError:
        return None
    if line is None:
        return None
    relative = line[3:]
    for entry in mounts:
        left, _, right = entry.partition(" - ")
        if right.split(" ", 1)[0] != "cgroup2":
            continue
        fields = left.split()
        root, mount_point = fields[3], fields[4]
        if root != "/" and not relative.startswith(root):
            continue
        inner = relative[len(root):] if root != "/" else relative
        path = os.path.normpath(mount_point + "/" + inner.lstrip("/"))
        if os.path.isdir(path):
            return path
    return None


def _remove_stale_cgroups(base: str) -> None:
    """Kill and remove the cgroups of runs whose `agentstack run` died (SIGKILL, power loss)."""
    try:
        names = [n for n in os.listdir(base) if n.startswith(CGROUP_PREFIX)]
    except OSError:
        return
    for name in names:
        owner = name[len(CGROUP_PREFIX):].split("-", 1)[0]
        if not owner.isdigit() or os.path.exists(f"/proc/{owner}"):
            continue
        Cgroup(os.path.join(base, name)).remove(timeout=1.0)


@contextlib.contextmanager
def confined(
    root: Path,
    policy: SandboxPolicy,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    interactive: bool,
    stdin: FileArg = None,
    stdout: FileArg = None,
    stderr: FileArg = None,
    readonly_files: Mapping[str, bytes] | None = None,
    before_start: BeforeStart | None = None,
) -> Iterator[Confined]:
    """Start `argv` confined; yields once the sandbox is applied and the command exec'd.

    The run gets a private directory (mode 0700, under the system temp dir): `tmp/` is the
    command's TMPDIR (read-write); `ro/` holds `readonly_files` (name -> bytes), read-only to the
    command, its path in $AGENTSTACK_RUN_RO (e.g. a copy of what the guard must read, since
    $AGENTSTACK_HOME itself is denied). On leaving: leftover descendants are killed, the proxy
    stops, the private directory is removed. One confined run at a time per process (it is the
    subreaper of the run). Raises ConfinementError when anything would make the sandbox weaker
    than `policy`."""
    if not _ACTIVE.acquire(blocking=False):
        raise ConfinementError("another confined run is active in this process")
    try:
        with _confined(root, policy, argv, env, interactive=interactive, stdin=stdin,
                       stdout=stdout, stderr=stderr, readonly_files=readonly_files,
                       before_start=before_start) as child:
            yield child
    finally:
        _ACTIVE.release()


_ACTIVE = __import__("_thread").allocate_lock()  # (`threading` is not needed on this path)


@contextlib.contextmanager
def _confined(
    root: Path,
    policy: SandboxPolicy,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    interactive: bool,
    stdin: FileArg,
    stdout: FileArg,
    stderr: FileArg,
    readonly_files: Mapping[str, bytes] | None,
    before_start: BeforeStart | None = None,
) -> Iterator[Confined]:
    if not argv:
        raise ConfinementError("nothing to run: give a command after --, or --harness")
    if os.path.realpath(str(root)) != policy.workdir:
        raise ConfinementError(
            f"the policy's workdir {policy.workdir} is not the project root {root}"
        )
    enforcement = check_enforceable(policy)
    before: set[int] = set()
    temp_root = _temp_root(policy)
    with _nothing_started(temp_root):
        run_dir = os.path.realpath(_make_private_dir(temp_root, layout.RUN_DIR_PREFIX))
        tmpdir = os.path.join(run_dir, "tmp")
        os.mkdir(tmpdir, 0o700)
    proxy: Proxy | None = None
    group: Cgroup | None = None
    subreaper_was = None
    process: subprocess.Popen[bytes] | None = None
    spec_r, spec_w = os.pipe()
    status_r, status_w = os.pipe()
    unclosed = [spec_r, spec_w, status_r, status_w]
    try:
        terminal = _terminal_path(stdin) if interactive else None
        before = _children()
        subreaper_was = _set_subreaper(True)
        group = Cgroup.create()
        # The launcher starts first, while this process has no other thread (the proxy's come
        # later), and waits for its spec: nothing of the command runs before the spec arrives.
        process, in_group = _start_launcher(
            group, (spec_r, status_w), stdin=stdin, stdout=stdout, stderr=stderr,
            cwd=policy.workdir,
        )
        for fd in (spec_r, status_w):
            unclosed.remove(fd)
            os.close(fd)
        if group is not None and not in_group:
            try:  # before the spec is sent: the launcher has not forked or confined anything yet
                group.add(process.pid)
            except OSError:
                group.remove()
                group = None
        if policy.needs_proxy:
            proxy = Proxy(policy)
        runtime = policy.with_runtime(tmpdir=tmpdir, proxy_port=proxy.port if proxy else None)
        extra_env = dict(proxy.child_env()) if proxy else {}
        if readonly_files:
            with _nothing_started(run_dir):
                ro_dir = _write_readonly(run_dir, readonly_files)
            runtime = runtime._replace(grants=(
                *runtime.grants, Grant(path=ro_dir, access="ro", source="run: read-only files")
            ))
            extra_env[RUN_RO_ENV] = ro_dir
        if terminal is not None:
            runtime = runtime._replace(grants=(
                *runtime.grants, Grant(path=terminal, access="rw", file=True,
                                       source="run: the session's own pseudo-terminal")
            ))
        with _nothing_started(runtime.harness_state or runtime.workdir):
            prepare_state(runtime)
        if before_start is not None:
            before_start(runtime, proxy.route_urls() if proxy is not None else {},
                         proxy.phantoms() if proxy is not None else {})
        child_env = build_env(runtime, env, extra_env)
        launch = _launch_spec(runtime, argv, child_env, enforcement.seccomp_program,
                              enforcement.pid_namespace)
        launch["controlling_terminal"] = terminal is not None
        spec = marshal.dumps(launch)
        unclosed.remove(spec_w)
        try:
            with os.fdopen(spec_w, "wb") as handle:
                handle.write(spec)
        except BrokenPipeError:
            pass
        unclosed.remove(status_r)
        with os.fdopen(status_r, "rb") as handle:
            status = handle.read()
        _check_status(status, process)
        yield Confined(process=process, policy=runtime, proxy=proxy, enforcement=enforcement,
                       cgroup=group)
    finally:
        for fd in unclosed:  # an unsent spec: the launcher reads end-of-file and runs nothing
            os.close(fd)
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait()
        try:
            if group is not None:
                group.kill()
            if subreaper_was is not None:
                _reap_descendants(before)
        finally:
            if group is not None:
                group.remove()
            if subreaper_was is not None and not subreaper_was:
                _set_subreaper(False)
        if proxy is not None:
            proxy.shutdown()
        _remove_run_dir(run_dir)


# ------------------------------------------------------------------------ starting the launcher

SYS_CLONE3 = {"x86_64": 435, "aarch64": 435}
CLONE_INTO_CGROUP = 0x200000000
SIGCHLD = 17


def _start_launcher(
    group: Cgroup | None,
    pass_fds: tuple[int, int],
    *,
    stdin: FileArg,
    stdout: FileArg,
    stderr: FileArg,
    cwd: str,
) -> tuple[subprocess.Popen[bytes], bool]:
    """The launcher, waiting for its spec on `pass_fds[0]`; and whether it is already in `group`.

    Where this process has a single thread, the launcher is a clone of it (clone3, born in the
    run's cgroup with CLONE_INTO_CGROUP): no second interpreter starts, and no cgroup migration
    waits for an RCU grace period. Otherwise (another thread, no clone3) it is a fresh
    `python -I -S confine.py`. Either way it runs confine.py's code on the same spec."""
    if _single_threaded() and os.uname().machine in SYS_CLONE3:
        try:
            plain = [-1 if s is None else s if isinstance(s, int) and s >= 0 else None
                     for s in (stdin, stdout, stderr)]
            if None not in plain:
                # Plain descriptors (what `agentstack run` passes): no Popen, so no subprocess
                # import (~3 ms of start-up).
                pid = _clone_launcher(group, pass_fds, *cast("list[int]", plain))
                return cast("subprocess.Popen[bytes]", _ClonedProcess(pid)), group is not None
            return _clone_popen()(group, pass_fds, stdin=stdin, stdout=stdout, stderr=stderr), (
                group is not None)
        except _CloneUnavailable:
            pass
    import subprocess

    process = subprocess.Popen(
        [sys.executable, "-I", "-S", str(LAUNCHER), *map(str, pass_fds)],
        pass_fds=pass_fds,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        cwd=cwd,
        env={"PATH": os.defpath},
        start_new_session=True,  # never the user's session or process group
        close_fds=True,
    )
    return process, False


def _single_threaded() -> bool:
    """No other thread (Python's or a library's) in this process: a clone of it is safe (the
    clone itself counts again, with every signal blocked: `_clone3`)."""
    return _thread_count() == 1


class _CloneUnavailable(Exception):
    """clone3 (or CLONE_INTO_CGROUP) is refused here: start the launcher the other way."""


class _CloneArgs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack", "stack_size", "tls",
        "set_tid", "set_tid_size", "cgroup")]


def _clone_launcher(group: Cgroup | None, fds: tuple[int, int], stdin: int, stdout: int,
                    stderr: int) -> int:
    """Clone this process into `group` (if any); the child becomes the launcher (never returns
    here), the parent gets its pid. -1 for a stream: inherited as it is."""
    cgroup_fd = -1
    if group is not None:
        try:
            cgroup_fd = os.open(group.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise _CloneUnavailable(str(exc)) from None
    try:
        return _clone3(cgroup_fd, lambda mask: _launcher_child(fds, stdin, stdout, stderr, mask))
    finally:
        if cgroup_fd >= 0:
            os.close(cgroup_fd)


class _ClonedProcess:
    """What `run` uses of a Popen (pid, returncode, poll, wait, kill, send_signal, communicate)
    for a launcher cloned with plain descriptors, which has no pipes of Popen's."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.args = ["agentstack-launcher"]
        self.stdin = self.stdout = self.stderr = None  # as a Popen without pipes

    def _reaped(self, flags: int) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:  # reaped elsewhere (as Popen: taken as success)
                self.returncode = 0
                return 0
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        return self._reaped(os.WNOHANG)

    def wait(self, timeout: float | None = None) -> int:
        if timeout is None:
            code = self._reaped(0)
            assert code is not None
            return code
        deadline = time.monotonic() + timeout
        while (code := self.poll()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the launcher ({self.pid}) still runs after {timeout} s")
            time.sleep(0.001)
        return code

    def communicate(self, input: bytes | None = None, timeout: float | None = None
                    ) -> tuple[None, None]:
        self.wait(timeout)
        return None, None

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(_signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(_signal.SIGTERM)


@functools.lru_cache(maxsize=1)
def _clone_popen() -> Callable[..., subprocess.Popen[bytes]]:
    """A Popen whose child is a cloned launcher: for callers that want Popen's pipes
    (PIPE, DEVNULL, STDOUT, file objects) and communicate()."""
    import subprocess

    class _Clone(subprocess.Popen[bytes]):
        def __init__(self, group: Cgroup | None, pass_fds: tuple[int, int], *, stdin: FileArg,
                     stdout: FileArg, stderr: FileArg) -> None:
            self._clone_group = group
            self._clone_fds = pass_fds
            super().__init__(["agentstack-launcher"], stdin=stdin, stdout=stdout, stderr=stderr)

        def _execute_child(self, *args: Any) -> None:
            # Popen's (POSIX) signature since 3.11: args, executable, preexec_fn, close_fds,
            # pass_fds, cwd, env, startupinfo, creationflags, shell, p2cread, p2cwrite,
            # c2pread, c2pwrite, errread, errwrite, restore_signals, gid, gids, uid, umask,
            # start_new_session, process_group.
            p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite = args[10:16]
            self.pid = _clone_launcher(self._clone_group, self._clone_fds, p2cread, c2pwrite,
                                       errwrite)
            self._child_created = True
            self._close_pipe_fds(p2cread, p2cwrite,  # type: ignore[attr-defined]
                                 c2pread, c2pwrite, errread, errwrite)

    return _Clone


def _clone3(cgroup_fd: int, child: Callable[[frozenset[int]], None]) -> int:
    """clone3() like fork() (into the cgroup open at `cgroup_fd`, if any), with CPython's own
    before/after-fork bookkeeping (PyOS_BeforeFork, PyOS_AfterFork_*), the GIL held throughout.
    In the child `child(mask)` runs (`mask`: the signal mask to restore) and the child exits
    with os._exit: it never returns into the caller's frames. The parent gets the child's pid.

    The syscall returns into the bytecode interpreter, which may service its "eval breaker"
    before PyOS_AfterFork_Child has reset the interpreter's thread state: a GIL drop request
    that another thread set while waiting for the GIL makes the child drop the GIL and wait
    (futex, forever) for that thread, which does not exist in the child; a tripped signal runs a
    Python handler there. So the clone is refused (_CloneUnavailable: the caller spawns a fresh
    interpreter) unless this process has exactly one thread, counted after every signal is
    blocked and the pending handlers have run: then nothing can set either request until the
    child has done its bookkeeping. Raises _CloneUnavailable when the kernel refuses too."""
    api = ctypes.pythonapi
    # Resolved before the clone: a first lookup is Python code (CDLL.__getattr__).
    before_fork, after_child, after_parent = (
        api.PyOS_BeforeFork, api.PyOS_AfterFork_Child, api.PyOS_AfterFork_Parent)
    check_signals = api.PyErr_CheckSignals
    syscall = ctypes.PyDLL(None, use_errno=True).syscall  # PyDLL: the call keeps the GIL
    syscall.restype = ctypes.c_long
    number = ctypes.c_long(SYS_CLONE3[os.uname().machine])
    arguments = _CloneArgs(flags=CLONE_INTO_CGROUP if cgroup_fd >= 0 else 0,
                           exit_signal=SIGCHLD, cgroup=max(cgroup_fd, 0))
    size = ctypes.c_size_t(ctypes.sizeof(arguments))
    parent = os.getpid()
    mask = frozenset(_signal.pthread_sigmask(_signal.SIG_BLOCK, _signal.valid_signals()))
    try:
        check_signals()  # what was tripped before the mask: handled here, in the parent
        before_fork()
        if _thread_count() != 1:
            after_parent()
            raise _CloneUnavailable("this process has more than one thread")
        try:
            pid = syscall(number, ctypes.byref(arguments), size)
        except BaseException:
            if os.getpid() != parent:
                os._exit(EXIT_LAUNCH_FAILED)
            raise
        if pid == 0:
            try:
                after_child()
                child(mask)
            finally:
                os._exit(EXIT_LAUNCH_FAILED)
        err = ctypes.get_errno() if pid < 0 else 0
        after_parent()
    finally:
        if os.getpid() == parent:
            _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)
    if pid < 0:
        raise _CloneUnavailable(os.strerror(err) if err else "clone3 failed")
    return int(pid)


EXIT_LAUNCH_FAILED = 126


def _thread_count() -> int:
    """How many threads this process has (/proc/self/task); 0 when it cannot be read."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


def _launcher_child(fds: tuple[int, int], p2cread: int, c2pwrite: int, errwrite: int,
                    mask: frozenset[int] = frozenset()) -> None:
    """In the clone: what Popen's child does before exec (a session of its own, the standard
    streams, every other descriptor closed, the caller's signal mask back), then confine.py's
    main. Never returns."""
    spec_fd, status_fd = fds
    code = EXIT_LAUNCH_FAILED
    try:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)
        os.setsid()  # never the user's session or process group
        if c2pwrite == 0:
            c2pwrite = os.dup(c2pwrite)
        while errwrite in (0, 1):
            errwrite = os.dup(errwrite)
        for fd, target in ((p2cread, 0), (c2pwrite, 1), (errwrite, 2)):
            if fd == target:
                os.set_inheritable(fd, True)
            elif fd != -1:
                os.dup2(fd, target)
        low = 3
        for fd in (*sorted(fds), os.sysconf("SC_OPEN_MAX")):
            if low < fd:
                os.closerange(low, fd)
            low = fd + 1
        from agentstack.sandbox.confine import main

        code = main([str(spec_fd), str(status_fd)])
    except BaseException as exc:  # noqa: BLE001 - nothing may run unconfined; report and stop
        with contextlib.suppress(BaseException):
            os.write(status_fd, f"E launch\t{type(exc).__name__}: {exc}\n".encode())
    finally:
        os._exit(code)


def _terminal_path(stdin: FileArg) -> str | None:
    """The path of the pseudo-terminal `run` allocated (the only terminal granted), or None."""
    fd = stdin if isinstance(stdin, int) else None
    if fd is None or not os.isatty(fd):
        return None
    return os.path.realpath(os.ttyname(fd))


def _temp_root(policy: SandboxPolicy | None = None) -> str:
    """Where a run's private directory goes: what `tempfile.gettempdir()` picks (TMPDIR, TEMP or
    TMP when it names a usable directory, else /tmp, /var/tmp, /usr/tmp), without importing
    tempfile (and with it shutil and random) on every `run`; with `policy`, the first of them
    the confined process may not write in (its read-only copies live there: a write grant over
    the directory would let it replace them, or plant a link that the removal follows), else
    agentstack's cache. ConfinementError when there is none."""
    candidates = [os.environ.get(name) for name in ("TMPDIR", "TEMP", "TMP")]
    candidates += ["/tmp", "/var/tmp", "/usr/tmp"]  # noqa: S108 - tempfile's own list
    if policy is not None:
        candidates.append(layout.cache())
    for candidate in candidates:
        if not candidate or not os.path.isdir(candidate):
            continue
        if not os.access(candidate, os.W_OK | os.X_OK):
            continue
        if policy is not None and policy.decide_path(
            os.path.join(os.path.realpath(candidate), layout.RUN_DIR_PREFIX), "write"
        ).allowed:
            continue
        return os.path.abspath(candidate)
    if policy is None:
        return os.getcwd()
    raise ConfinementError(
        "every directory a run's private state could go in (TMPDIR, /tmp, /var/tmp, "
        "agentstack's cache) is writable under the sandbox policy",
        hint="narrow sandbox.write_dirs, or set TMPDIR to a directory the policy does not grant",
    )


def _make_private_dir(parent: str, prefix: str) -> str:
    """A new directory only this user can enter (mode 0700), under a random name that did not
    exist (`tempfile.mkdtemp`'s contract)."""
    for _ in range(100):
        path = os.path.join(parent, prefix + os.urandom(8).hex())
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no unused directory name under {parent}")


def _remove_run_dir(run_dir: str) -> None:
    """Remove a run's private directory. What agentstack put there goes directly, through
    descriptors opened without following a link (the read-only directory is made writable first:
    unlinking in it needs that, for a user who is not root); anything else (a session TMPDIR that
    is not empty, a link where a directory was) goes through `shutil.rmtree`, which never follows
    a link either."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        top = os.open(run_dir, flags)
        try:
            try:
                readonly = os.open(layout.RUN_READONLY, flags, dir_fd=top)
            except FileNotFoundError:
                pass
            else:
                try:
                    os.fchmod(readonly, 0o700)
                    for name in os.listdir(readonly):
                        os.unlink(name, dir_fd=readonly)
                finally:
                    os.close(readonly)
                os.rmdir(layout.RUN_READONLY, dir_fd=top)
            with contextlib.suppress(FileNotFoundError):
                os.rmdir("tmp", dir_fd=top)
        finally:
            os.close(top)
        os.rmdir(run_dir)
    except OSError:
        import shutil

        shutil.rmtree(run_dir, ignore_errors=True)


def _write_readonly(run_dir: str, files: Mapping[str, bytes]) -> str:
    directory = os.path.join(run_dir, layout.RUN_READONLY)
    os.mkdir(directory, 0o700)
    for name, data in files.items():
        if not name or "/" in name or name in (".", "..") or "\0" in name:
            raise ConfinementError(f"read-only file name {name!r} must be a plain file name")
        path = os.path.join(directory, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o400)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    os.chmod(directory, 0o500)
    return directory


def _receipts(policy: SandboxPolicy, server: str | None = None, root: str | None = None
              ) -> Callable[[dict[str, object]], None]:
    """Where the gate's receipts go: the project's receipts log (`agentstack log`); a server's
    proxy names the server in each."""

    def append(record: dict[str, object]) -> None:
        from agentstack.relay import append_receipt

        named = dict(record) if server is None else {**record, "server": server}
        append_receipt(policy.agentstack_home, root or policy.workdir, named)

    return append


def _check_status(status: bytes, process: subprocess.Popen[bytes]) -> None:
    """Raise unless the launcher armed the sandbox and execve succeeded (see confine.py)."""
    armed = status.startswith(ARMED)
    rest = status[len(ARMED):] if armed else status
    if armed and not rest:
        return
    process.wait()
    if not rest:
        raise ConfinementError(
            f"the sandbox launcher died before confining anything (status {process.returncode})",
            hint="nothing was run; 'agentstack doctor' shows what this machine supports",
        )
    line = rest.decode("utf-8", "replace").splitlines()[0]
    stage, _, message = line[2:].partition("\t") if line.startswith("E ") else ("launch", "", line)
    if armed:
        raise ConfinementError(f"inside the sandbox, {message}")
    raise ConfinementError(
        f"the sandbox could not be applied ({stage}): {message}",
        hint="nothing was run; 'agentstack doctor' shows what this machine supports",
    )


def run_confined(
    root: Path,
    policy: SandboxPolicy,
    argv: Sequence[str],
    env: Mapping[str, str],
    interactive: bool,
    *,
    stdin: FileArg = None,
    stdout: FileArg = None,
    stderr: FileArg = None,
    readonly_files: Mapping[str, bytes] | None = None,
    before_start: BeforeStart | None = None,
) -> int:
    """Run `argv` in `root` under `policy`; return its exit status (negative: killed by signal N).

    `env` is the environment the allowlist draws values from (normally os.environ); nothing else
    of it reaches the command. The command always runs in a session of its own. With
    `interactive=True` it gets a pseudo-terminal that this process allocates and relays to its
    own stdin/stdout (the user's terminal in raw mode meanwhile, its size followed): the command
    never holds the user's terminal, so nothing of it can read what is typed after `run`
    returns. With `interactive=False` it has no controlling terminal. SIGINT, SIGQUIT, SIGTERM and
    SIGHUP sent to this process are forwarded to the command's process group. Every process of
    the run is killed before this returns. `readonly_files`: see `confined`. Raises
    ConfinementError (exit 1) when the sandbox cannot be enforced: nothing is run unconfined."""
    if not interactive:
        with (
            confined(
                root, policy, argv, env, interactive=False, stdin=stdin, stdout=stdout,
                stderr=stderr, readonly_files=readonly_files, before_start=before_start,
            ) as child,
            _forwarding(child.process),
        ):
            return child.process.wait()
    in_fd = stdin if isinstance(stdin, int) else sys.stdin.fileno()
    out_fd = stdout if isinstance(stdout, int) else sys.stdout.fileno()
    with _Relay(in_fd, out_fd) as relay:
        with (
            confined(
                root, policy, argv, env, interactive=True, stdin=relay.slave,
                stdout=relay.slave, stderr=relay.slave, readonly_files=readonly_files,
                before_start=before_start,
            ) as child,
            _forwarding(child.process, on_winch=relay.resize),
        ):
            relay.close_slave()
            code = relay.pump(child.process)
        relay.drain()  # what the tree wrote before it was killed
    return code


class _Relay:
    """A pseudo-terminal owned by `run`: the confined session's terminal, relayed to ours."""

    def __init__(self, in_fd: int, out_fd: int) -> None:
        self.in_fd, self.out_fd = in_fd, out_fd
        self.master, self.slave = os.openpty()
        self._slave_open = True
        self._saved: list[Any] | None = None

    def __enter__(self) -> _Relay:
        import termios
        import tty

        os.set_inheritable(self.master, False)
        if os.isatty(self.in_fd):
            try:
                self._saved = termios.tcgetattr(self.in_fd)
                # the session's terminal starts with the user's modes (echo, erase, ...)
                termios.tcsetattr(self.slave, termios.TCSANOW, self._saved)
                tty.setraw(self.in_fd, termios.TCSANOW)
            except termios.error:
                self._saved = None
        self.resize()
        return self

    def __exit__(self, *exc: object) -> None:
        import termios

        if self._saved is not None:
            with contextlib.suppress(termios.error, OSError):
                termios.tcsetattr(self.in_fd, termios.TCSAFLUSH, self._saved)
        self.close_slave()
        with contextlib.suppress(OSError):
            os.close(self.master)

    def close_slave(self) -> None:
        if self._slave_open:
            self._slave_open = False
            with contextlib.suppress(OSError):
                os.close(self.slave)

    def resize(self) -> None:
        import fcntl
        import termios

        for fd in (self.in_fd, self.out_fd):
            try:
                size = fcntl.ioctl(fd, termios.TIOCGWINSZ, bytes(8))
            except OSError:
                continue
            with contextlib.suppress(OSError):
                fcntl.ioctl(self.master, termios.TIOCSWINSZ, size)
            return

    def pump(self, process: subprocess.Popen[bytes]) -> int:
        """Relay until the command exits; input is no longer read once it has exited, so what
        is typed afterwards stays for whoever reads the terminal next."""
        import select

        reading = True
        while process.poll() is None:
            fds = [self.master] + ([self.in_fd] if reading else [])
            try:
                ready, _, _ = select.select(fds, [], [], 0.05)
            except InterruptedError:
                continue
            if self.master in ready and not self._copy_out():
                break  # every holder of the terminal closed it
            if reading and self.in_fd in ready:
                try:
                    data = os.read(self.in_fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    reading = False
                    if not os.isatty(self.in_fd):
                        _write_all(self.master, b"\x04")  # end of input for the session
                else:
                    _write_all(self.master, data)
        return process.wait()

    def _copy_out(self) -> bool:
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: no process holds the terminal any more
            return False
        if not data:
            return False
        _write_all(self.out_fd, data)
        return True

    def drain(self) -> None:
        import select

        while True:
            ready, _, _ = select.select([self.master], [], [], 0)
            if not ready or not self._copy_out():
                return


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            continue
        except OSError:
            return
        view = view[written:]


@contextlib.contextmanager
def _forwarding(
    process: subprocess.Popen[bytes], *, on_winch: Any = None
) -> Iterator[None]:
    """Forward SIGINT, SIGQUIT, SIGTERM and SIGHUP to the command's process group (it leads a
    session of its own); SIGWINCH resizes the relayed terminal."""
    threading = sys.modules.get("threading")  # not imported: no thread of its making
    if threading is not None and threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signum)

    handlers: dict[int, Any] = {
        sig: forward
        for sig in (_signal.SIGTERM, _signal.SIGHUP, _signal.SIGINT, _signal.SIGQUIT)
    }
    if on_winch is not None:
        handlers[_signal.SIGWINCH] = lambda _s, _f: on_winch()
    previous: dict[int, Any] = {}
    try:
        for sig, handler in handlers.items():
            previous[sig] = _signal.signal(sig, handler)
        yield
    finally:
        for sig, handler in previous.items():
            _signal.signal(sig, handler)

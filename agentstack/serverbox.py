"""Each stdio server confined on its own: the relay starts it under Landlock + seccomp.

Outside `agentstack run` the harness starts every server with the user's full privileges; the
relay (`agentstack.relay`) starts it instead through the sandbox's own launcher
(`agentstack/sandbox/confine.py`, the one `run` uses), under a policy built by the same resolver
from the project's trusted `[sandbox]` declaration:

- readable: the system directories, the interpreter and agentstack's own code, the server's
  command's installation and its code roots (what the lock pinned it loading code from);
- the project as `[sandbox]` says (the project directory read-write, plus its read/write lists);
- denied: `$AGENTSTACK_HOME` and everything else in `$HOME` (`~/.ssh`, cloud credentials, …);
- no network (no TCP connect or bind, no UDP), unless `servers.NAME.sandbox` declares some as
  a table (`network.allow_domains`, `network.localhost_ports`, `credentials`): then the relay
  starts `run`'s proxy for that server alone (`sandbox.runner.Proxy`: agentstack's gate in front
  of nono), and the server may connect to the gate's port only; the gate lets through only what
  was declared, injects the declared secrets, and keeps one receipt per request;
- capabilities dropped, agentstack's seccomp blocklist loaded.

Where the kernel cannot enforce a layer the server does not start and the message says why (fail
closed). `servers.NAME.sandbox = false` in the manifest opts that server out (the review rates it
high). Inside `agentstack run` the server already runs in the run's sandbox, with the harness.
"""

from __future__ import annotations

import marshal
import os
import sys

# The relay's start path imports this module: no `json`, `typing`, `collections` or `types` at
# module level (each is start-up cost paid by every server).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping, Sequence
    from typing import IO, Any

SANDBOX_OFF = "sandbox"  # servers.NAME.sandbox = false: started unconfined


class ServerConfinementError(Exception):
    """The server's sandbox cannot be enforced here: nothing was started. (`stage` "exec": the
    sandbox was in force and the server's command itself could not be executed.)"""

    def __init__(self, message: str, stage: str = "") -> None:
        super().__init__(message)
        self.stage = stage


def wanted(consent: Mapping[str, Any], server: str) -> bool:
    entry = consent.get("servers", {}).get(server, {})
    return entry.get(SANDBOX_OFF) is not False


def network_of(consent: Mapping[str, Any], server: str) -> dict[str, Any] | None:
    """The server's declared network (`servers.NAME.sandbox` as a table naming a host, a port or
    a credential), else None (then it has none at all)."""
    box = consent.get("servers", {}).get(server, {}).get(SANDBOX_OFF)
    if not isinstance(box, dict):
        return None
    network = box.get("network") or {}
    if network.get("allow_domains") or network.get("localhost_ports") or box.get("credentials"):
        return box
    return None


def credential_values(consent: Mapping[str, Any], server: str,
                      state_home: str | None = None) -> list[str]:
    """The values of the secrets the server's proxy injects (`servers.NAME.sandbox.credentials`),
    for the relay to withhold should one come back in what the server sends (an upstream that
    echoes its request's headers). A secret not stored is left out (its proxy refuses to start)."""
    declared = network_of(consent, server)
    if declared is None or not declared.get("credentials"):
        return []
    from pathlib import Path

    from agentstack.secrets import SecretStore

    store = SecretStore(Path(state_home) if state_home is not None else None)
    values = []
    for credential in declared["credentials"].values():
        try:
            values.append(store.get(str(credential["secret"])))
        except Exception:  # noqa: BLE001, S112 - missing or unreadable: the proxy says which
            continue
    return [v for v in values if v]


def _sandbox_view(declared: Mapping[str, Any]) -> Any:
    """The project's `[sandbox]` as the resolver reads it, networking closed (no proxy here)."""
    from types import SimpleNamespace

    network = SimpleNamespace(block=True, localhost_ports=[], allow_domains=[])
    return SimpleNamespace(
        read_dirs=list(declared.get("read_dirs", [])),
        write_dirs=list(declared.get("write_dirs", [])),
        read_files=list(declared.get("read_files", [])),
        write_files=list(declared.get("write_files", [])),
        env=[],
        network=network,
        credentials={},
    )


def _roots(root: str, entry: Mapping[str, Any]) -> list[str]:
    out = []
    for item in entry.get("roots", []) or []:
        path = item.get("path") if isinstance(item, dict) else None
        if isinstance(path, str) and path:
            out.append(os.path.realpath(os.path.join(root, path)))
    return out


def policy_for(root: str, consent: Mapping[str, Any], server: str, argv: Sequence[str],
               *, cwd: str | None = None) -> Any:
    """The SandboxPolicy one server runs under (raises ServerConfinementError).

    A server of the user-level setup (whose root is `$AGENTSTACK_HOME`, always denied) works in
    the directory the harness started it in, `cwd`: that directory is its workdir, under the same
    rules (a directory that holds agentstack's state, such as `$HOME`, is refused)."""
    from pathlib import Path

    from agentstack.sandbox import profiles
    from agentstack.sandbox.policy import Grant
    from agentstack.sandbox.resolve import ConfinementError, guard_runtime_dirs, resolve_policy

    entry = consent.get("servers", {}).get(server, {})
    try:
        policy = resolve_policy(_sandbox_view(consent.get("sandbox", {})),
                                Path(_workdir(root, cwd)))
    except ConfinementError as exc:
        raise ServerConfinementError(str(exc)) from None
    extra: list[Any] = []
    command = argv[0] if "/" in argv[0] else profiles.find_binary(argv[0], os.environ.get("PATH"))
    if command and os.path.exists(command):
        for path in profiles.install_dirs(command, os.environ.get("PATH")):
            if os.path.isdir(path):
                extra.append(Grant(path=os.path.realpath(path), access="ro",
                                   source=f"servers.{server}: its command"))
    for path in [*guard_runtime_dirs(), *_roots(root, entry)]:
        if os.path.exists(path):
            extra.append(Grant(path=path, access="ro", file=not os.path.isdir(path),
                               source=f"servers.{server}: code"))
    policy = policy._replace(grants=(*policy.grants, *extra))
    declared = network_of(consent, server)
    if declared is not None:
        from agentstack.sandbox.policy import CredentialRoute

        policy = policy._replace(
            allow_domains=tuple(str(d) for d in declared.get("network", {}).get(
                "allow_domains", [])),
            credentials=tuple(
                CredentialRoute(name=name, upstream=str(c["upstream"]), secret=str(c["secret"]),
                                header=str(c.get("header") or "Authorization"),
                                env=str(c["env"]), base_url_env=c.get("base_url_env"))
                for name, c in sorted((declared.get("credentials") or {}).items())),
        )
    return policy


def review_policy(root: str, consent: Mapping[str, Any], server: str, argv: Sequence[str],
                  scratch: str, *, cwd: str | None = None) -> Any:
    """The stricter policy a server is started under at `agentstack trust`, to read its listing
    before its consent is recorded: as `policy_for`, but every grant read-only (the project too:
    listing tools must not change a file) but `scratch`, a private empty directory that is its
    HOME and TMPDIR and is removed afterwards; no network at all."""
    policy = policy_for(root, consent, server, argv, cwd=cwd)
    from agentstack.sandbox.policy import Grant

    grants = tuple(g._replace(access="ro") if g.access == "rw" and not g.file else g
                   for g in policy.grants)
    scratch_grant = Grant(path=os.path.realpath(scratch), access="rw",
                          source=f"servers.{server}: review scratch")
    return policy._replace(grants=(*grants, scratch_grant), network_block=True,
                           localhost_ports=(), allow_domains=(), credentials=())


def _workdir(root: str, cwd: str | None) -> str:
    from agentstack import layout

    if cwd is not None and os.path.realpath(root) == os.path.realpath(layout.home()):
        return cwd
    return root


LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox", "confine.py")
# What decides a cached confinement besides the key the relay gives: these modules' code.
_POLICY_CODE = ("serverbox.py", "sandbox/resolve.py", "sandbox/profiles.py", "sandbox/policy.py",
                "sandbox/seccomp.py", "sandbox/runner.py", "sandbox/confine.py", "sandbox/abi.py")


def start(
    root: str,
    consent: Mapping[str, Any],
    server: str,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: str | None = None,
    policy: Any = None,
    stderr: int | None = None,
    cache: str | None = None,
    key: Sequence[Any] = (),
    fork: bool = False,
    state_home: str | None = None,
) -> subprocess.Popen[bytes]:
    """The server, started confined, its stdin and stdout piped (stderr inherited, or `stderr`);
    raises ServerConfinementError when any layer cannot be enforced (then nothing runs).
    `policy`: one built here already (`review_policy`), else `policy_for`'s. `cache`: a file of
    agentstack's own state where the resolved confinement is kept, valid while `key` (the trusted
    digest, the project, what the relay was started with), the interpreter, the kernel and this
    code stay the same: the next start skips resolving it.

    The launcher (agentstack's own code, `sandbox/confine.py`) is started first, so its
    interpreter starts while the confinement is resolved; it runs nothing until the spec arrives,
    and only once every layer is in force does it exec the server. `fork` (only from a
    single-threaded process): no launcher interpreter, this process forks and the child confines
    itself with the same code (`Forked`).

    A server that declares network (`network_of`; not with a `policy` of its own, as at review)
    gets its proxy started here, after its process (forked, or the launcher) and before its
    confinement, which then allows the proxy's port alone; never kept (`cache` unused: the port
    is new each start). Stop the proxy with `release` once the server exited (the relay simply
    exits). `state_home`: where its secrets and receipts are (else `$AGENTSTACK_HOME`)."""
    declared = network_of(consent, server) if policy is None else None
    if declared is not None:
        return _start_networked(root, consent, server, argv, env, declared, cwd=cwd,
                                stderr=stderr, fork=fork, state_home=state_home)
    if fork:
        confinement = _confinement(root, consent, server, argv, cwd, policy, cache, key)
        process: Any = Forked(spec_of(confinement, argv, env, cwd))
        status_r = process.status_fd
    else:
        process, status_r = _launcher(root, consent, server, argv, env, cwd, policy, cache, key,
                                      stderr)
    armed(process, status_r, cache)
    started: subprocess.Popen[bytes] = process
    return started


def _start_networked(root: str, consent: Mapping[str, Any], server: str, argv: Sequence[str],
                     env: Mapping[str, str], declared: Mapping[str, Any], *, cwd: str | None,
                     stderr: int | None, fork: bool,
                     state_home: str | None) -> subprocess.Popen[bytes]:
    """`start` for a server with declared network: its process first (a fork must come before
    the proxy's threads), then its proxy, then its confinement with the proxy's port alone."""
    from agentstack.sandbox.resolve import ConfinementError
    from agentstack.sandbox.runner import Proxy

    policy = policy_for(root, consent, server, argv, cwd=cwd)
    if state_home is not None:
        policy = policy._replace(agentstack_home=os.path.realpath(state_home))
    ports = tuple(sorted({int(p) for p in declared.get("network", {}).get("localhost_ports", [])}))
    process: Any
    spec_w = -1
    if fork:
        process = Forked(None)
        status_r = process.status_fd
    else:
        process, spec_w, status_r = _spawn_launcher(root, cwd, stderr)

    def abandon() -> None:
        if fork:
            process.cancel()
        else:
            os.close(spec_w)
            os.close(status_r)
            _stop(process)

    proxy = None
    try:
        try:
            proxy = Proxy(policy, server=server, loopback_ports=ports, receipts_root=root)
            proxy_env = proxy.child_env()
        except ConfinementError as exc:
            hint = f" ({exc.hint})" if exc.hint else ""
            text = str(exc).replace("sandbox.credentials.", f"servers.{server}.sandbox.credentials.")
            raise ServerConfinementError(f"its network proxy: {text}{hint}", "proxy") from None
        confinement = _confinement(root, consent, server, argv, cwd, policy, None, (),
                                   tcp_ports=(proxy.port,))
    except BaseException:
        if proxy is not None:
            proxy.shutdown()
        abandon()
        raise
    if ports:  # a declared 127.0.0.1 port is reached through the proxy too, never directly
        for name in ("NO_PROXY", "no_proxy", "NONO_NO_PROXY"):
            proxy_env[name] = ""
    spec = spec_of(confinement, argv, {**env, **proxy_env}, cwd)
    if fork:
        process.send(spec)
    else:
        try:
            with os.fdopen(spec_w, "wb") as handle:
                handle.write(marshal.dumps(spec))
        except BrokenPipeError:
            pass
    try:
        armed(process, status_r, None)
    except BaseException:
        proxy.shutdown()
        raise
    process.agentstack_proxy = proxy
    started: subprocess.Popen[bytes] = process
    return started


def release(process: Any) -> None:
    """Stop the server's network proxy, if it has one (after the server exited)."""
    proxy = getattr(process, "agentstack_proxy", None)
    if proxy is not None:
        process.agentstack_proxy = None
        proxy.shutdown()


def spec_of(confinement: dict[str, Any], argv: Sequence[str], env: Mapping[str, str],
            cwd: str | None) -> dict[str, Any]:
    """The launcher's spec: the confinement, and the server's argv, environment and directory."""
    return {**confinement, "argv": list(argv), "env": dict(env),
            "cwd": cwd or confinement["workdir"], "parent_pid": os.getpid()}


def armed(process: Any, status_r: int, cache: str | None) -> None:
    """Wait until the started server is confined and exec'd (its status fd closed after `A`);
    otherwise stop it, drop the kept confinement and raise ServerConfinementError saying why."""
    with os.fdopen(status_r, "rb") as status_handle:
        status = status_handle.read()
    if status == ARMED:
        return
    _stop(process)
    if cache is not None:
        _forget(cache)  # resolved again next time (a path it granted may have gone)
    text = status[len(ARMED):] if status.startswith(ARMED) else status
    line = text.decode("utf-8", "replace").splitlines()[0] if text else "the launcher died"
    stage = ""
    if line.startswith("E "):
        stage, _, message = line[2:].partition("\t")
        if stage == "exec":
            raise ServerConfinementError(message, stage)
        line = f"{message} ({stage})"
    raise ServerConfinementError(f"the sandbox could not be applied: {line}", stage)


def not_started(name: str, exc: ServerConfinementError) -> str:
    """The relay's line on stderr when the server's sandbox refused it (the server never ran)."""
    if exc.stage == "exec":
        return f"agentstack launch: {name}: cannot start it: {exc}"
    if exc.stage == "proxy":
        return f"agentstack launch: {name}: not started: {exc}"
    return (f"agentstack launch: {name}: not started: its sandbox cannot be enforced here: "
            f"{exc}; to run it unconfined, set servers.{name}.sandbox = false (then lock and "
            "trust)")


ARMED = b"A\n"  # agentstack.sandbox.confine.ARMED (not imported: that loads ctypes here)


def _launcher(root: str, consent: Mapping[str, Any], server: str, argv: Sequence[str],
              env: Mapping[str, str], cwd: str | None, policy: Any, cache: str | None,
              key: Sequence[Any], stderr: int | None) -> tuple[subprocess.Popen[bytes], int]:
    """The launcher as its own interpreter, started first: it boots while the confinement is
    resolved here. (Returns it and the status fd to read.)"""
    process, spec_w, status_r = _spawn_launcher(root, cwd, stderr)
    try:
        confinement = _confinement(root, consent, server, argv, cwd, policy, cache, key)
    except BaseException:
        os.close(spec_w)  # the launcher reads no spec: it runs nothing
        os.close(status_r)
        _stop(process)
        raise
    spec = {**confinement, "argv": list(argv), "env": dict(env),
            "cwd": cwd or confinement["workdir"], "parent_pid": os.getpid()}
    try:
        with os.fdopen(spec_w, "wb") as handle:
            handle.write(marshal.dumps(spec))
    except BrokenPipeError:
        pass
    return process, status_r


def _spawn_launcher(root: str, cwd: str | None,
                    stderr: int | None) -> tuple[subprocess.Popen[bytes], int, int]:
    """The launcher's interpreter, waiting for its spec: (it, the spec fd to write, the status fd
    to read)."""
    import subprocess

    spec_r, spec_w = os.pipe()
    status_r, status_w = os.pipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", LAUNCHER, str(spec_r), str(status_w)],
            pass_fds=(spec_r, status_w), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=stderr, bufsize=0, cwd=cwd or root,
        )
    except OSError as exc:
        for fd in (spec_r, spec_w, status_r, status_w):
            os.close(fd)
        raise ServerConfinementError(f"cannot start the sandbox launcher: {exc.strerror}") from None
    os.close(spec_r)
    os.close(status_w)
    return process, spec_w, status_r


class Forked:
    """The server started without a second interpreter: this process forks, and the child loads
    the launcher's own code, confines itself (`confine_and_exec`) and execs the server. Only from
    a single-threaded process (the relay before it relays: an import after fork() is safe then).

    `spec` None (`early`): forked before the spec is known, at the relay's very start, before the
    trust is checked: the child loads the launcher's code (ctypes) while the relay checks the
    trusted state, then waits for the spec (`send`); it runs nothing else, and without a spec
    (`cancel`, or the relay gone) it exits."""

    def __init__(self, spec: dict[str, Any] | None, *, preload: str | None = None) -> None:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        status_r, status_w = os.pipe()
        spec_r, spec_w = os.pipe() if spec is None else (-1, -1)
        pid = os.fork()
        if pid == 0:  # the child: confined, then the server; never back into the relay
            _child(spec, in_r, out_w, status_w, spec_r,
                   (in_w, out_r, status_r, *((spec_w,) if spec is None else ())), preload)
        for fd in (in_r, out_w, status_w, *((spec_r,) if spec is None else ())):
            os.close(fd)
        self.pid = pid
        self.args: list[str] = list(spec["argv"]) if spec is not None else []
        self.returncode: int | None = None
        self.stdin: IO[bytes] | None = os.fdopen(in_w, "wb", buffering=0)
        self.stdout: IO[bytes] | None = os.fdopen(out_r, "rb")
        self.status_fd = status_r
        self._spec_w = spec_w if spec is None else None

    def send(self, spec: dict[str, Any]) -> None:
        """The spec, to the child forked early: it confines itself and execs the server."""
        assert self._spec_w is not None
        self.args = list(spec["argv"])
        data = marshal.dumps(spec)
        fd, self._spec_w = self._spec_w, None
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except BrokenPipeError:
            pass  # the child died: its status says so
        finally:
            os.close(fd)

    def cancel(self) -> None:
        """No spec: the child forked early exits having run nothing."""
        if self._spec_w is not None:
            os.close(self._spec_w)
            self._spec_w = None
        _stop(self)
        os.close(self.status_fd)

    @classmethod
    def early(cls, argv: Sequence[str]) -> Forked | None:
        """At the relay's start (`relaystart.py`): forked early when the rendered command line
        names a server whose confinement is kept (`<server>.box`), else None."""
        if len(argv) < 8 or (argv[0], argv[2], argv[4]) != ("--server", "--project", "--state"):
            return None
        from agentstack import layout

        try:
            box = layout.box_file(argv[5], os.path.realpath(argv[3]), argv[1])
            fd = os.open(box, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (OSError, ValueError):
            return None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not (info.st_mode & 0o170000 == 0o100000 and info.st_uid == os.geteuid()):
                return None  # not a regular file of ours: the full path decides
            kept = handle.read(4 * 1024 * 1024)
        return cls(None, preload=_nono_path(kept))

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
        import contextlib
        import signal

        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


def _nono_path(kept: bytes) -> str | None:
    """Where the kept confinement says nono's native module is (`"nono":"<path>"`, as
    `canonical` writes it), to load it while the trust is checked; None if it cannot tell.
    (Only a head start: the spec sent later is what the child is confined by.)"""
    start = kept.find(b'"nono":"')
    end = kept.find(b'"', start + 8) if start >= 0 else -1
    path = kept[start + 8 : end] if end > 0 else b""
    if not path.startswith(b"/") or b"\\" in path or not path.endswith(b".so"):
        return None
    return path.decode("utf-8", "replace")


def _child(spec: dict[str, Any] | None, stdin: int, stdout: int, status_w: int, spec_r: int,
           others: tuple[int, ...], preload: str | None = None) -> None:
    """The forked child: the server's stdio in place, the spec read (forked early), confined,
    exec'd. Never returns: whatever fails is reported on the status fd, and it exits."""
    try:
        os.dup2(stdin, 0)
        os.dup2(stdout, 1)
        for fd in (stdin, stdout, *others):
            os.close(fd)
        from agentstack.sandbox import confine

        try:
            if preload is not None:
                try:  # noqa: SIM105 - a head start only: the spec's own path is loaded otherwise
                    confine.load_nono(preload)
                except (ImportError, OSError):
                    pass
            if spec is None:
                with os.fdopen(spec_r, "rb") as handle:
                    data = handle.read()
                spec = marshal.loads(data)  # noqa: S302 - from our parent, over a private pipe
                if preload is not None and spec.get("nono") != preload:
                    raise confine.LaunchError("nono", "the kept confinement changed while the "
                                              "relay started; start the server again")
            confine.confine_and_exec(spec, status_w)
        except confine.LaunchError as exc:
            confine.report(status_w, exc.stage, exc.message)
    except BaseException as exc:  # noqa: BLE001 - nothing may run unconfined
        try:  # noqa: SIM105 - the child reports and exits
            os.write(status_w, f"E launch\t{type(exc).__name__}: {exc}\n".encode())
        except OSError:
            pass
    os._exit(126)


def _confinement(root: str, consent: Mapping[str, Any], server: str, argv: Sequence[str],
                 cwd: str | None, policy: Any, cache: str | None,
                 key: Sequence[Any], tcp_ports: Sequence[int] = ()) -> dict[str, Any]:
    """The launcher's spec but for the server's argv, env, cwd: from the cache when it holds this
    very key, else resolved (and kept). `tcp_ports`: the only TCP ports it may connect to (its
    proxy's; never with a cache)."""
    full_key = None
    if cache is not None and policy is None:
        full_key = cache_key(key, argv, cwd)
        cached = _cached(cache, full_key)
        if cached is not None:
            return cached
    from agentstack.sandbox.confine import nono_module_path
    from agentstack.sandbox.resolve import ConfinementError
    from agentstack.sandbox.runner import check_enforceable

    if policy is None:
        policy = policy_for(root, consent, server, argv, cwd=cwd)
    try:
        enforcement = check_enforceable(policy)
    except ConfinementError as exc:
        raise ServerConfinementError(f"{exc}{' (' + exc.hint + ')' if exc.hint else ''}") from None
    confinement = {
        "workdir": policy.workdir,
        "grants": merged_grants(
            [{"path": g.path, "access": g.access, "file": g.file} for g in policy.grants]),
        "network_block": True,
        "tcp_ports": [int(p) for p in tcp_ports],
        "seccomp": enforcement.seccomp_program,
        "drop_capabilities": True,
        "nono": nono_module_path(),
    }
    if cache is not None and full_key is not None:
        _keep(cache, full_key, confinement)
    return confinement


def merged_grants(grants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same access in fewer Landlock rules: one rule per path (its strongest access), and
    none for a path below a directory granted at least its access. Landlock's rights on a
    path are the union of the rules on it and on every directory above it, so the kernel allows
    and denies exactly as before. Compared by real path (a rule binds the inode its path
    resolves to: a link below a granted directory that points elsewhere keeps its rule)."""
    real = [os.path.realpath(g["path"]) for g in grants]
    strongest: dict[tuple[str, bool], str] = {}  # (real path, a file?) -> "rw" or "ro"
    for grant, path in zip(grants, real, strict=True):
        ident = (path, bool(grant["file"]))
        if strongest.get(ident) != "rw":
            strongest[ident] = grant["access"]

    def covered(path: str, access: str) -> bool:
        parent = os.path.dirname(path)
        while parent != path:
            held = strongest.get((parent, False))
            if held == "rw" or (held == "ro" and access == "ro"):
                return True
            path, parent = parent, os.path.dirname(parent)
        return False

    out: list[dict[str, Any]] = []
    done: set[tuple[str, bool]] = set()
    for grant, path in zip(grants, real, strict=True):
        access = strongest[path, bool(grant["file"])]
        ident = (path, bool(grant["file"]))
        if ident in done or covered(path, access):
            continue
        done.add(ident)
        out.append({**grant, "access": access})
    return out


def cache_key(key: Sequence[Any], argv: Sequence[str], cwd: str | None) -> list[Any]:
    """What a kept confinement is valid for: the relay's key (the trusted digest, the project,
    the server), the server's command line and directory, PATH, the interpreter, the kernel
    release and the policy code."""
    return [*key, list(argv), cwd, os.environ.get("PATH"), sys.executable, os.uname().release,
            _code_stamp()]


def kept(cache: str, key: Sequence[Any], argv: Sequence[str],
         cwd: str | None) -> dict[str, Any] | None:
    """The confinement kept for exactly this key, else None (then it is resolved)."""
    return _cached(cache, cache_key(key, argv, cwd))


def _code_stamp() -> list[Any]:
    here = os.path.dirname(os.path.abspath(__file__))
    out: list[Any] = []
    for name in _POLICY_CODE:
        try:
            info = os.stat(os.path.join(here, name))
        except OSError:
            out.append(None)
            continue
        out.append([info.st_mtime_ns, info.st_size])
    return out


def _cached(path: str, key: list[Any]) -> dict[str, Any] | None:
    from agentstack.relay import _read_private, canonical, loads

    try:
        data = _read_private(path, 4 * 1024 * 1024)
        if data is None:
            return None
        value = loads(data)
        if not isinstance(value, dict) or canonical(value.get("key")) != canonical(key):
            return None
        confinement = dict(value["confinement"])
        if confinement["seccomp"] is not None:
            confinement["seccomp"] = bytes.fromhex(confinement["seccomp"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return confinement


def _keep(path: str, key: list[Any], confinement: dict[str, Any]) -> None:
    import contextlib

    from agentstack.relay import _write_private, canonical

    seccomp = confinement["seccomp"]
    held = {**confinement, "seccomp": seccomp.hex() if seccomp is not None else None}
    with contextlib.suppress(OSError, ValueError, TypeError):
        _write_private(path, canonical({"key": key, "confinement": held}).encode())


def _forget(path: str) -> None:
    import contextlib

    with contextlib.suppress(OSError):
        os.unlink(path)


def _stop(process: Any) -> None:
    streams: list[IO[bytes] | None] = [process.stdin, process.stdout]
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in streams:
        if stream is not None:
            stream.close()

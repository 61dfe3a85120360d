"""The confined launcher: applies the sandbox to itself, then becomes the harness.

`main` runs in a clone of `agentstack run` (runner.py: clone3 into the run's cgroup, from a
single-threaded process), or as `<python> -I -S <this file> <spec fd> <status fd>` (never with -m:
under -I the checkout is not on sys.path, so this file imports only the standard library and
nono-py's native module). Keeping the terminal needs no pty juggling: the launcher inherits stdin, stdout and
stderr, confines itself and then execve()s the harness, which keeps the same pid, the same
controlling terminal and the same process group.

In order:

1. read the spec (a marshal'd dict of plain values, from the parent) from the spec fd;
2. PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG(SIGKILL): the harness dies with `agentstack run`;
3. Landlock through nono-py (`apply_seccomp`: file rules, TCP connect/bind only to the listed
   ports, signal and abstract-unix-socket scoping, and nono's network seccomp baseline);
   Where that ABI has no signal scoping (ABI 4-5), a PID namespace stands in for it: made
   before Landlock (`unshare_pid_namespace`), entered after seccomp (`in_pid_namespace`: two
   waiters, the command as pid 2);
4. drop every capability (bounding set, ambient, permitted, effective, inheritable) and lock the
   securebits, so a root harness cannot use CAP_SYS_PTRACE to read the parent's /proc/PID/environ
   or CAP_SYS_RAWIO/CAP_DAC_OVERRIDE tricks;
5. load agentstack's seccomp blocklist (BPF compiled by the parent with libseccomp);
6. execve() the command with the allowlisted environment.

The status fd (close-on-exec) tells the parent what happened: `A` once every layer is in force,
just before execve (a successful execve then closes the fd); an `E stage<TAB>message` line for a
failure (after `A`: the execve itself failed). No `A` means nothing ran; the parent turns any failure into exit 1 with
an actionable message. Nothing is ever run unconfined.
"""

from __future__ import annotations

import _ctypes  # the C module behind `ctypes`, whose package costs ~5 ms of start-up here
import errno
import marshal
import os
import sys

TYPE_CHECKING = False  # typing is not imported at run time (it pulls in `re`: start-up cost)
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

# Everything this file needs is imported above: after Landlock, the interpreter's own library
# directory may no longer be readable. (marshal, not json: json pulls in `re`, ~15 ms of start-up;
# `_signal`, the C module behind `signal`, which would pull in `enum`.)
_signal: Any = __import__("_signal")


# libc through `_ctypes` alone, called as `ctypes.CDLL(None, use_errno=True)` calls it: a
# function returns a C int; a Python int argument is passed as a C int, bytes or a buffer as a
# pointer (`ctypes` itself is imported only by the emulation of older Landlock ABIs).
_ULong: Any = type("_ULong", (_ctypes._SimpleCData,), {"_type_": "L"})
_Int: Any = type("_Int", (_ctypes._SimpleCData,), {"_type_": "i"})
_Char: Any = type("_Char", (_ctypes._SimpleCData,), {"_type_": "c"})
_Pointer: Any = type("_Pointer", (_ctypes._SimpleCData,), {"_type_": "P"})
_Function: Any = type("_Function", (_ctypes.CFuncPtr,), {
    "_flags_": _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO, "_restype_": _Int})


class _Libc:
    """The process's own libc symbols (dlopen(NULL)), each a C function returning int."""

    def __init__(self) -> None:
        self._handle = _ctypes.dlopen(None, 0)  # type: ignore[arg-type]  # dlopen(NULL)

    def __getattr__(self, name: str) -> Any:
        function = _Function((name, self))
        setattr(self, name, function)
        return function


def _buffer(data: bytes) -> Any:
    """A writable C copy of `data` (passed as a pointer; `_ctypes.addressof` gives its address)."""
    array: Any = type("_Bytes", (_ctypes.Array,), {"_type_": _Char, "_length_": max(len(data), 1)})
    return array.from_buffer_copy(data.ljust(1, b"\0"))


PR_SET_PDEATHSIG = 1
TIOCSCTTY = 0x540E
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
# SECBIT_NOROOT | _LOCKED, NO_SETUID_FIXUP | _LOCKED, KEEP_CAPS_LOCKED, NO_CAP_AMBIENT_RAISE | _LOCKED
SECUREBITS_LOCKED = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
EXIT_SETUP_FAILED = 126
ARMED = b"A\n"  # written just before execve: everything above it is in force


class LaunchError(Exception):
    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage
        self.message = message


def nono_module_path() -> str:
    """Where nono-py's native module lives (found without importing the package)."""
    import importlib.util

    spec = importlib.util.find_spec("nono_py")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("nono-py is not installed")
    for directory in spec.submodule_search_locations:
        for name in sorted(os.listdir(directory)):
            if name.startswith("_nono_py.") and name.endswith(".so"):
                return os.path.join(directory, name)
    raise ImportError("nono-py's native module _nono_py is missing")


def load_nono(path: str | None = None) -> ModuleType:
    """nono-py's native module, without the package's pydantic-heavy `__init__` (~250 ms)."""
    cached = sys.modules.get("nono_py._nono_py")
    if cached is not None:
        return cached
    # The import system's own loaded modules (what importlib.machinery and importlib.util
    # re-export): those packages would import warnings, collections, functools, contextlib.
    bootstrap: Any = sys.modules["_frozen_importlib"]
    external: Any = sys.modules["_frozen_importlib_external"]

    path = path or nono_module_path()
    loader = external.ExtensionFileLoader("nono_py._nono_py", path)
    module_spec = external.spec_from_file_location("nono_py._nono_py", path, loader=loader)
    if module_spec is None:
        raise ImportError(f"cannot load nono-py's native module from {path}")
    module: ModuleType = bootstrap.module_from_spec(module_spec)
    loader.exec_module(module)
    sys.modules["nono_py._nono_py"] = module
    return module


def _libc() -> Any:
    return _Libc()


def _prctl(libc: Any, option: int, arg2: int = 0, arg3: int = 0) -> None:
    if libc.prctl(option, _ULong(arg2), _ULong(arg3), 0, 0) != 0:
        err = _ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
# What `run` forwards to the command's process group (runner._forwarding): the harness gets each
# one itself, so the two waiters of a PID namespace ignore them.
FORWARDED = ("SIGINT", "SIGQUIT", "SIGTERM", "SIGHUP")


def unshare_pid_namespace(libc: Any) -> None:
    """Make a PID namespace for this process's children (the next fork is its init). With
    CAP_SYS_ADMIN directly; without it, inside a user namespace of this process's own that maps
    its uid and gid to themselves (refused where unprivileged user namespaces are, e.g. by
    Ubuntu's AppArmor restriction). Before Landlock: it writes /proc/self's maps."""
    if libc.unshare(CLONE_NEWPID) == 0:
        return
    first = _ctypes.get_errno()
    uid, gid = os.getuid(), os.getgid()
    if first != errno.EPERM or libc.unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0:
        err = _ctypes.get_errno()
        raise LaunchError("pid-namespace", "cannot make a PID namespace (this Landlock ABI has "
                          f"no signal scoping, which it stands in for): {os.strerror(err)}")
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                           ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(text)
    except OSError as exc:
        raise LaunchError("pid-namespace", f"cannot map the user namespace: {exc}") from None


def can_make_pid_namespace() -> bool:
    """Whether the launcher could make a PID namespace here (tried in a short-lived child)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads: the child
        pid = os.fork()  # only makes a syscall and exits
    if pid == 0:
        try:
            unshare_pid_namespace(_libc())
            os._exit(0)
        except BaseException:  # noqa: BLE001 - the child only reports
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _exit_like(code: int) -> None:
    """Exit as the waited-for process did: by its signal (`code` 128+N), or with its code."""
    if code > 128 and code - 128 < _signal.NSIG:
        sig = code - 128
        _signal.signal(sig, _signal.SIG_DFL)
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
    os._exit(code)


def _wait_for(child: int, *, init: bool) -> int:
    """Wait for `child` (as the namespace's init: reaping every orphan meanwhile); its status as
    an exit code (128+N for a signal)."""
    while True:
        try:
            pid, status = os.waitpid(-1 if init else child, 0)
        except ChildProcessError:
            return 126
        except InterruptedError:
            continue
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code


def in_pid_namespace(libc: Any, status_fd: int) -> None:
    """Fork into the PID namespace made before (`unshare_pid_namespace`); returns only in the
    process that goes on to exec the command. This process (outside the namespace) waits for
    the namespace's init and exits as it does; the init (pid 1) waits for the command, reaping
    orphans, and exits as it does (when it exits the kernel kills whatever is left inside). The
    command, not init, must get `run`'s forwarded signals: the waiters ignore them (the
    command's process group is theirs), and the command gets the default dispositions back."""
    for name in FORWARDED:
        _signal.signal(getattr(_signal, name), _signal.SIG_IGN)
    init = os.fork()
    if init != 0:
        os.close(status_fd)  # the command's copy tells the parent when it exec'd
        _exit_like(_wait_for(init, init=False))
    _prctl(libc, PR_SET_PDEATHSIG, 9)
    command = os.fork()
    if command != 0:
        os.close(status_fd)
        code = _wait_for(command, init=True)
        os._exit(code)  # (init cannot die by a signal it sends itself: the outer waiter does)
    for name in FORWARDED:
        _signal.signal(getattr(_signal, name), _signal.SIG_DFL)


SYS_LANDLOCK = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
LANDLOCK_RULE_PATH_BENEATH = 1
LANDLOCK_RULE_NET_PORT = 2


def apply_landlock_rights(spec: dict[str, Any], rights: dict[str, int]) -> None:
    """Landlock with exactly the rights of a given ABI (`rights`: the parent's table, from
    `agentstack.sandbox.abi`): the confinement suite's emulation of an older kernel. The same
    grants and ports as nono would add; raw syscalls, nothing but ctypes (imported here only)."""
    import ctypes

    class _RulesetAttr(ctypes.Structure):
        _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64),
                    ("scoped", ctypes.c_uint64)]

    class _PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    class _NetPort(ctypes.Structure):
        _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]

    libc = _libc()
    numbers = SYS_LANDLOCK.get(os.uname().machine)
    if numbers is None:
        raise LaunchError("landlock", f"no Landlock syscall numbers for {os.uname().machine}")
    create, add_rule, restrict = numbers
    attr = _RulesetAttr(rights["fs"], rights["net"] if spec["network_block"] else 0,
                        rights["scoped"])
    ruleset = libc.syscall(create, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        raise LaunchError("landlock", f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        for grant in spec["grants"]:
            access = rights["rw"] if grant["access"] == "rw" else rights["ro"]
            if grant["file"]:
                access &= rights["file"]
            fd = os.open(grant["path"], os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(access & rights["fs"], fd)
                if libc.syscall(add_rule, ctypes.c_int(ruleset), LANDLOCK_RULE_PATH_BENEATH,
                                ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                    raise LaunchError("landlock", f"cannot grant {grant['path']}: "
                                      f"{os.strerror(ctypes.get_errno())}")
            finally:
                os.close(fd)
        if spec["network_block"] and rights["net"]:
            for port in spec["tcp_ports"]:
                net = _NetPort(rights["net"], int(port))
                if libc.syscall(add_rule, ctypes.c_int(ruleset), LANDLOCK_RULE_NET_PORT,
                                ctypes.byref(net), ctypes.c_uint32(0)) != 0:
                    raise LaunchError("landlock", f"cannot allow port {port}: "
                                      f"{os.strerror(ctypes.get_errno())}")
        _prctl(libc, PR_SET_NO_NEW_PRIVS, 1)
        if libc.syscall(restrict, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise LaunchError("landlock", f"landlock_restrict_self: "
                              f"{os.strerror(ctypes.get_errno())}")
    except OSError as exc:
        raise LaunchError("landlock", str(exc)) from None
    finally:
        os.close(ruleset)


def apply_landlock(spec: dict[str, Any]) -> None:
    if spec.get("landlock_rights"):
        apply_landlock_rights(spec, spec["landlock_rights"])
        return
    try:
        nono = load_nono(spec.get("nono"))
    except (ImportError, OSError) as exc:
        raise LaunchError("nono", str(exc)) from None
    caps = nono.CapabilitySet()
    modes = {"ro": nono.AccessMode.READ, "rw": nono.AccessMode.READ_WRITE}
    try:
        for grant in spec["grants"]:
            if grant["file"]:
                caps.allow_file(grant["path"], modes[grant["access"]])
            else:
                caps.allow_path(grant["path"], modes[grant["access"]])
    except (OSError, ValueError) as exc:
        raise LaunchError("landlock", f"cannot grant {grant['path']}: {exc}") from None
    if spec["network_block"]:
        caps.block_network()
        for port in spec["tcp_ports"]:
            caps.allow_localhost_port(int(port))
    try:
        abi = nono.detect_abi()
        if spec["network_block"]:
            nono.apply_seccomp_with_abi(caps, abi)
        else:
            nono.apply_landlock_with_abi(caps, abi)
    except (RuntimeError, OSError, ValueError) as exc:
        raise LaunchError("landlock", f"nono could not apply the sandbox: {exc}") from None


# struct __user_cap_header_struct (version, pid) and two struct __user_cap_data_struct
# (effective, permitted, inheritable), all zero: every set emptied.
_CAP_HEADER = LINUX_CAPABILITY_VERSION_3.to_bytes(4, sys.byteorder) + bytes(4)
_CAP_DATA = bytes(2 * 12)


def drop_capabilities(libc: Any) -> None:
    """Empty every capability set; root keeps its uid but loses every privilege it implies."""
    try:
        with open("/proc/self/status", "rb") as handle:
            status = dict(
                line.decode("ascii").split(":\t", 1)
                for line in handle.read().splitlines()
                if b":\t" in line
            )
        held = any(int(status.get(k, "0"), 16) for k in ("CapPrm", "CapEff", "CapInh"))
        bounding = int(status.get("CapBnd", "0"), 16)
        with open("/proc/sys/kernel/cap_last_cap", "rb") as handle:
            last = int(handle.read())
    except (OSError, ValueError) as exc:
        raise LaunchError("capabilities", f"cannot read the capability state: {exc}") from None
    try:
        if held:
            _prctl(libc, PR_SET_SECUREBITS, SECUREBITS_LOCKED)
        if bounding and held:
            for cap in range(last + 1):
                _prctl(libc, PR_CAPBSET_DROP, cap)
        try:
            _prctl(libc, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # kernels without ambient capabilities
                raise
        if held:
            machine = os.uname().machine
            number = SYS_CAPSET.get(machine)
            if number is None:
                raise OSError(errno.ENOSYS, f"capset: unknown architecture {machine}")
            header, data = _buffer(_CAP_HEADER), _buffer(_CAP_DATA)
            if libc.syscall(number, header, data) != 0:
                err = _ctypes.get_errno()
                raise OSError(err, f"capset: {os.strerror(err)}")
    except OSError as exc:
        raise LaunchError("capabilities", f"cannot drop capabilities: {exc}") from None


def load_seccomp(libc: Any, program: bytes) -> None:
    """Install a classic-BPF seccomp program (native byte order, 8 bytes per instruction)."""
    if not program or len(program) % 8:
        raise LaunchError("seccomp", "the seccomp program is empty or malformed")
    count = len(program) // 8
    if count > 0xFFFF or _ctypes.sizeof(_Pointer) != 8:
        raise LaunchError("seccomp", "the seccomp program does not fit this architecture")
    instructions = _buffer(program)
    # struct sock_fprog: unsigned short len, padding to the pointer, struct sock_filter *filter.
    fprog = _buffer(count.to_bytes(2, sys.byteorder) + bytes(6)
                    + _ctypes.addressof(instructions).to_bytes(8, sys.byteorder))
    try:
        _prctl(libc, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, _ctypes.addressof(fprog))
    except OSError as exc:
        raise LaunchError("seccomp", f"the kernel refused the seccomp filter: {exc}") from None


def _resolve(command: str, path: str) -> str:
    if "/" in command:
        return command
    for directory in path.split(os.pathsep):
        candidate = os.path.join(directory or ".", command)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return command


def confine_and_exec(spec: dict[str, Any], status_fd: int) -> None:
    libc = _libc()
    _prctl(libc, PR_SET_NO_NEW_PRIVS, 1)
    _prctl(libc, PR_SET_PDEATHSIG, 9)
    if os.getppid() != spec["parent_pid"]:
        raise LaunchError("launch", "agentstack run exited before the sandbox started")
    # stdin is then the pseudo-terminal `run` allocated and relays; this new session takes it as
    # its controlling terminal (the user's own terminal is never reachable).
    if spec.get("controlling_terminal") and libc.ioctl(0, TIOCSCTTY, 0) != 0:
        err = _ctypes.get_errno()
        raise LaunchError("terminal", f"cannot take the session's terminal: {os.strerror(err)}")
    os.chdir(spec["cwd"])
    if spec.get("pid_namespace"):
        unshare_pid_namespace(libc)
    apply_landlock(spec)
    if spec["drop_capabilities"]:
        drop_capabilities(libc)
    if spec["seccomp"]:
        load_seccomp(libc, bytes(spec["seccomp"]))
    if spec.get("pid_namespace"):
        in_pid_namespace(libc, status_fd)
    env: dict[str, str] = dict(spec["env"])
    argv: list[str] = list(spec["argv"])
    program = _resolve(argv[0], env.get("PATH", os.defpath))
    # The dispositions Python ignores for itself go back to the default, as subprocess does: the
    # command starts as it would from a shell (`yes | head` ends on SIGPIPE).
    for number in (_signal.SIGPIPE, _signal.SIGXFSZ):
        _signal.signal(number, _signal.SIG_DFL)
    os.write(status_fd, ARMED)
    try:
        os.execve(program, argv, env)  # noqa: S606 - argv, not a shell
    except OSError as exc:
        hint = ""
        if exc.errno in (errno.EACCES, errno.EPERM):
            hint = (
                " (the sandbox policy does not grant it: add its directory to "
                "sandbox.read_dirs, or run it with --harness so its install directory is granted)"
            )
        code = 127 if exc.errno == errno.ENOENT else 126
        report(status_fd, "exec", f"cannot execute {argv[0]}: {exc.strerror}{hint}", code=code)
        os._exit(code)


def report(status_fd: int, stage: str, message: str, code: int = EXIT_SETUP_FAILED) -> None:
    """One failure line for the parent: `E <stage>\\t<message>`."""
    line = "E " + stage + "\t" + " ".join(message.split()) + "\n"
    try:
        os.write(status_fd, line.encode("utf-8"))
    except OSError:
        sys.stderr.write(f"agentstack: sandbox {stage} failed: {message}\n")


def main(args: list[str]) -> int:
    if len(args) != 2:
        sys.stderr.write("usage: confine.py SPEC_FD STATUS_FD (started by 'agentstack run')\n")
        return 2
    spec_fd, status_fd = int(args[0]), int(args[1])
    try:
        os.set_inheritable(status_fd, False)
        with os.fdopen(spec_fd, "rb") as handle:
            spec = marshal.loads(handle.read())  # noqa: S302 - from our parent, over a private pipe
        confine_and_exec(spec, status_fd)
    except LaunchError as exc:
        report(status_fd, exc.stage, exc.message)
    except Exception as exc:  # noqa: BLE001 - nothing may run unconfined; report and stop
        report(status_fd, "launch", f"{type(exc).__name__}: {exc}")
    return EXIT_SETUP_FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

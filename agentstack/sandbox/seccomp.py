"""agentstack's seccomp blocklist: the escape primitives nono's filter leaves open.

Compiled in the parent with libseccomp (pyseccomp over Debian's libseccomp2) into classic BPF; the
launcher loads that program into itself just before execve. Default action: allow. A syscall or
argument pattern listed here fails with EPERM (clone3 with ENOSYS, so libc falls back to clone(),
whose flags the filter can inspect). A syscall made through another ABI than the native one
(i386 `int 0x80` on x86_64) kills the process.

Integer arguments are compared on their low 32 bits only where the kernel reads an `int`, so
garbage in the upper half of a register cannot slip a flag past the filter.

`program()` is what `run` uses: the compiled program is kept in
`$AGENTSTACK_HOME/seccomp-programs/` (0700 directory, 0600 files; always denied to every sandbox),
keyed by everything that decides its bytes (the two policy inputs, this module's and pyseccomp's
source, libseccomp's version, the machine and kernel release), so importing pyseccomp (whose
`find_library` runs `ldconfig -p` twice) and compiling happen once per key, not on every run. A cached file is used only when it
is a regular file of ours, not group/world-writable, under a directory of ours, and its recorded
key and SHA-256 match; anything else is recompiled and replaced.
"""

from __future__ import annotations

import errno
import functools
import os
from typing import Any, NamedTuple

# Escape primitives and kernel attack surface a coding agent never needs.
BLOCKED_SYSCALLS: dict[str, str] = {
    "ptrace": "debug another process",
    "process_vm_readv": "read another process's memory",
    "process_vm_writev": "write another process's memory",
    "pidfd_getfd": "steal another process's file descriptors",
    "mount": "mount a file system",
    "umount2": "unmount a file system",
    "fsopen": "new mount API",
    "fsconfig": "new mount API",
    "fsmount": "new mount API",
    "fspick": "new mount API",
    "move_mount": "new mount API",
    "open_tree": "new mount API",
    "mount_setattr": "new mount API",
    "pivot_root": "change the root file system",
    "chroot": "change the root directory",
    "setns": "enter another namespace",
    "bpf": "load eBPF programs",
    "perf_event_open": "kernel performance counters",
    "userfaultfd": "user-space page-fault handling (exploit primitive)",
    "io_uring_setup": "io_uring bypasses seccomp and Landlock checks on its operations",
    "io_uring_enter": "io_uring",
    "io_uring_register": "io_uring",
    "keyctl": "kernel keyrings",
    "add_key": "kernel keyrings",
    "request_key": "kernel keyrings",
    "kexec_load": "load a new kernel",
    "kexec_file_load": "load a new kernel",
    "init_module": "load a kernel module",
    "finit_module": "load a kernel module",
    "delete_module": "unload a kernel module",
    "memfd_create": "anonymous executable memory files (fileless exec)",
    "memfd_secret": "secret memory areas",
    "open_by_handle_at": "open files by handle, bypassing path checks",
    "swapon": "swap devices",
    "swapoff": "swap devices",
    "reboot": "reboot",
    "acct": "process accounting",
    "syslog": "the kernel log",
    "iopl": "I/O privilege level",
    "ioperm": "I/O port access",
    "vhangup": "hang up the terminal",
    "quotactl": "disk quotas",
}

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWTIME = 0x00000080
CLONE_NAMESPACES = {
    "CLONE_NEWUSER": CLONE_NEWUSER,
    "CLONE_NEWNS": CLONE_NEWNS,
    "CLONE_NEWNET": CLONE_NEWNET,
    "CLONE_NEWPID": CLONE_NEWPID,
    "CLONE_NEWIPC": CLONE_NEWIPC,
    "CLONE_NEWUTS": CLONE_NEWUTS,
    "CLONE_NEWCGROUP": CLONE_NEWCGROUP,
}
AT_EMPTY_PATH = 0x1000
TIOCSTI = 0x5412  # push bytes into the terminal's input queue (types commands into your shell)
TIOCLINUX = 0x541C
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
AF_MAX_CHECKED = 16
SOCK_STREAM, SOCK_DGRAM = 1, 2
NETLINK_ROUTE = 0
LOW32 = 0xFFFFFFFF
IPPROTO_TCP = 6
MSG_FASTOPEN = 0x20000000
TCP_FASTOPEN_CONNECT = 30
TCP_REPAIR = 19
# Where each send call carries its flags (sendto(fd, buf, len, FLAGS, ...), sendmsg(fd, msg,
# FLAGS), sendmmsg(fd, vec, n, FLAGS)): MSG_FASTOPEN there makes a TCP connection without
# connect(), and the kernel's Fast Open path never calls the LSM connect hook Landlock filters.
FASTOPEN_FLAG_ARG = {"sendto": 3, "sendmsg": 2, "sendmmsg": 3}


class Rule(NamedTuple):
    """One blocked pattern, for documentation and `doctor`."""

    syscall: str
    condition: str
    errno_name: str
    why: str


def rules(*, allow_udp: bool, allow_listen: bool = True) -> list[Rule]:
    out = [Rule(name, "always", "EPERM", why) for name, why in BLOCKED_SYSCALLS.items()]
    if not allow_listen:
        out.append(Rule("listen", "always (no sandbox.network.localhost_ports)", "EPERM",
                        "listen() on an unbound TCP socket binds an ephemeral port on every "
                        "address, past Landlock's bind rules"))
    out.append(Rule("clone3", "always", "ENOSYS", "libc falls back to clone(), whose flags "
                    "seccomp can inspect"))
    for flag in CLONE_NAMESPACES:
        out.append(Rule("clone", f"flags & {flag}", "EPERM", "create a namespace"))
        out.append(Rule("unshare", f"flags & {flag}", "EPERM", "create a namespace"))
    out.append(Rule("unshare", "flags & CLONE_NEWTIME", "EPERM", "create a namespace"))
    out.append(Rule("execveat", "flags & AT_EMPTY_PATH", "EPERM", "exec a file descriptor "
                    "(fexecve of a memfd)"))
    out.append(Rule("ioctl", "cmd == TIOCSTI", "EPERM", "inject keystrokes into the terminal"))
    out.append(Rule("ioctl", "cmd == TIOCLINUX", "EPERM", "virtual-console control"))
    out.append(Rule("socket", "family not in AF_UNIX, AF_INET, AF_INET6, AF_NETLINK", "EPERM",
                    "packet, Bluetooth, vsock, AF_ALG and other families"))
    out.append(Rule("socket", "AF_UNIX (socketpair() stays)", "EPERM",
                    "Landlock does not mediate connect() to a pathname unix socket: a D-Bus "
                    "session bus, docker.sock or a database socket would be reachable by path"))
    out.append(Rule("socket", "AF_NETLINK with protocol != NETLINK_ROUTE", "EPERM",
                    "kernel interfaces other than routing information"))
    for name in FASTOPEN_FLAG_ARG:
        out.append(Rule(name, "flags & MSG_FASTOPEN", "EPERM",
                        "TCP Fast Open connects without connect(), past Landlock's TCP rules"))
    out.append(Rule("setsockopt", "IPPROTO_TCP, TCP_FASTOPEN_CONNECT", "EPERM",
                    "deferred Fast Open connect"))
    out.append(Rule("setsockopt", "IPPROTO_TCP, TCP_REPAIR", "EPERM",
                    "build a TCP connection's state by hand"))
    out.append(Rule("socket", "AF_INET/AF_INET6 SOCK_STREAM with a protocol other than TCP",
                    "EPERM", "MPTCP and SCTP are not TCP to Landlock's port rules"))
    kinds = "any type but SOCK_STREAM" if not allow_udp else "any type but SOCK_STREAM/DGRAM"
    out.append(Rule("socket", f"AF_INET/AF_INET6 with {kinds}", "EPERM",
                    "UDP and raw sockets" if not allow_udp else "raw sockets"))
    return out


def _pyseccomp() -> Any:
    import pyseccomp  # type: ignore[import-untyped]  # ships no py.typed marker

    return pyseccomp


@functools.lru_cache(maxsize=4)
def build_program(*, allow_udp: bool = False, allow_listen: bool = True) -> bytes:
    """The blocklist compiled to classic BPF for this machine's native architecture.

    `allow_listen=False` (a policy that lets the process bind no port) refuses listen() too:
    Landlock checks bind(), but listen() on an unbound socket binds an ephemeral port itself.

    Raises ImportError when pyseccomp or libseccomp is missing, OSError when libseccomp fails."""
    sc = _pyseccomp()
    eperm, enosys = sc.ERRNO(errno.EPERM), sc.ERRNO(errno.ENOSYS)
    arg = sc.Arg
    masked, gt, ne = sc.MASKED_EQ, sc.GT, sc.NE
    flt = sc.SyscallFilter(sc.ALLOW)
    flt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    flt.set_attr(sc.Attr.CTL_NNP, 0)  # the launcher sets no_new_privs itself
    for name in BLOCKED_SYSCALLS:
        try:
            flt.add_rule(eperm, name)
        except OSError as exc:
            # A syscall this architecture does not have (iopl on aarch64) cannot be made.
            if exc.errno not in (errno.EDOM, errno.EINVAL, errno.EFAULT):
                raise
    if not allow_listen:
        flt.add_rule(eperm, "listen")
    flt.add_rule(enosys, "clone3")
    for flag in CLONE_NAMESPACES.values():
        flt.add_rule(eperm, "clone", arg(0, masked, flag, flag))
        flt.add_rule(eperm, "unshare", arg(0, masked, flag, flag))
    flt.add_rule(eperm, "unshare", arg(0, masked, CLONE_NEWTIME, CLONE_NEWTIME))
    flt.add_rule(eperm, "execveat", arg(4, masked, AT_EMPTY_PATH, AT_EMPTY_PATH))
    flt.add_rule(eperm, "ioctl", arg(1, masked, LOW32, TIOCSTI))
    flt.add_rule(eperm, "ioctl", arg(1, masked, LOW32, TIOCLINUX))
    # socket(): families other than unix, inet, inet6 and netlink.
    for family in [0, *range(3, AF_INET6), *range(AF_INET6 + 1, AF_NETLINK)]:
        flt.add_rule(eperm, "socket", arg(0, masked, LOW32, family))
    flt.add_rule(eperm, "socket", arg(0, gt, AF_MAX_CHECKED))
    # A unix socket of its own (socket(), not socketpair()) is how a process reaches a pathname
    # socket, which Landlock (ABI <= 7) does not mediate: refused. socketpair() (a parent and its
    # child talking, as Node and Python do for child processes) stays.
    flt.add_rule(eperm, "socket", arg(0, masked, LOW32, AF_UNIX))
    flt.add_rule(eperm, "socket", arg(0, masked, LOW32, AF_NETLINK), arg(2, ne, NETLINK_ROUTE))
    for name, index in FASTOPEN_FLAG_ARG.items():
        flt.add_rule(eperm, name, arg(index, masked, MSG_FASTOPEN, MSG_FASTOPEN))
    for option in (TCP_FASTOPEN_CONNECT, TCP_REPAIR):
        flt.add_rule(eperm, "setsockopt", arg(1, masked, LOW32, IPPROTO_TCP),
                     arg(2, masked, LOW32, option))
    # SOCK_STREAM over inet must be TCP (protocol 0 or IPPROTO_TCP; 1-5 the kernel refuses
    # itself): Landlock's connect/bind rules apply to TCP sockets only, so MPTCP (262) or SCTP
    # (132) would reach any port. Any value with bits above IPPROTO_TCP (a negative int
    # included) is refused.
    for family in (AF_INET, AF_INET6):
        flt.add_rule(eperm, "socket", arg(0, masked, LOW32, family),
                     arg(1, masked, 0xF, SOCK_STREAM), arg(2, gt, IPPROTO_TCP))
    allowed_types = {SOCK_STREAM, SOCK_DGRAM} if allow_udp else {SOCK_STREAM}
    for family in (AF_INET, AF_INET6):
        for kind in range(16):
            if kind not in allowed_types:
                flt.add_rule(eperm, "socket", arg(0, masked, LOW32, family), arg(1, masked, 0xF, kind))
    import tempfile

    with tempfile.TemporaryFile() as handle:
        flt.export_bpf(handle)
        handle.flush()
        handle.seek(0)
        program = handle.read()
    if not program or len(program) % 8:
        raise OSError(errno.EINVAL, "libseccomp produced an empty seccomp program")
    return bytes(program)


CACHE_MAGIC = b"agentstack-seccomp-v1\n"


def _sha256(data: bytes = b"") -> Any:
    """hashlib's SHA-256 without importing hashlib (OpenSSL's `_hashlib`: ~2 ms of start-up):
    CPython's own builtin module, which gives the same digests."""
    for name in ("_sha256", "_sha2"):  # renamed in 3.12
        try:
            return __import__(name).sha256(data)
        except (ImportError, AttributeError):
            continue
    import hashlib

    return hashlib.sha256(data)


def cache_key(*, allow_udp: bool, allow_listen: bool) -> str:
    """SHA-256 over everything that decides `build_program`'s bytes; a changed input (policy,
    agentstack, pyseccomp, libseccomp, machine, kernel) is a different key."""
    import agentstack

    parts = [
        CACHE_MAGIC,
        f"agentstack {agentstack.__version__}; udp {allow_udp}; listen {allow_listen}".encode(),
        _OWN_SOURCE,
        _source_digest(_pyseccomp_file()),
        f"libseccomp {libseccomp_version()}".encode(),
        " ".join(os.uname()[2:5]).encode(),  # release, version, machine
        __import__("sys").byteorder.encode(),
    ]
    digest = _sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big") + part)
    return str(digest.hexdigest())


def _source_digest(path: str | None) -> bytes:
    if path is None:
        return b"missing"
    try:
        with open(path, "rb") as handle:
            return str(_sha256(handle.read()).hexdigest()).encode()
    except OSError:
        return b"unreadable"


# This module's source as it was when it was imported (the code that builds the program), not as
# it may be on disk later: an upgrade while a `run` starts must not file the old program under
# the new code's key.
_OWN_SOURCE = _source_digest(__file__)


def _pyseccomp_file() -> str | None:
    import importlib.util

    spec = importlib.util.find_spec("pyseccomp")
    return spec.origin if spec is not None else None


def program(*, allow_udp: bool, allow_listen: bool, state_home: str | None = None) -> bytes:
    """`build_program(...)`, from agentstack's private cache when a verified copy for exactly this
    key is there (else compiled and stored). Raises what `build_program` raises."""
    from agentstack import layout

    directory = layout.seccomp_programs(state_home if state_home is not None else layout.home())
    key = cache_key(allow_udp=allow_udp, allow_listen=allow_listen)
    path = os.path.join(directory, key + ".bpf")
    cached = _read_cached(directory, path, key)
    if cached is not None:
        return cached
    compiled = build_program(allow_udp=allow_udp, allow_listen=allow_listen)
    _store(directory, path, key, compiled)
    return compiled


def _private(st: os.stat_result, kind: int) -> bool:
    import stat

    return (stat.S_IFMT(st.st_mode) == kind and st.st_uid == os.geteuid()
            and not st.st_mode & 0o022)


def _read_cached(directory: str, path: str, key: str) -> bytes | None:
    import stat
    try:
        if not _private(os.lstat(directory), stat.S_IFDIR):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not _private(os.fstat(fd), stat.S_IFREG):
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(1 << 20)
    except OSError:
        return None
    finally:
        os.close(fd)
    header = CACHE_MAGIC + key.encode() + b"\n"
    if not data.startswith(header):
        return None
    digest, _, body = data[len(header):].partition(b"\n")
    if not body or len(body) % 8 or _sha256(body).hexdigest().encode() != digest:
        return None
    return body


def _store(directory: str, path: str, key: str, compiled: bytes) -> None:
    """Best effort (a read-only home only costs the next run a compile): the directory 0700, the
    file 0600, replaced atomically (fsutil.write_atomic)."""
    from pathlib import Path

    from agentstack.errors import AgentstackError
    from agentstack.fsutil import write_atomic
    from agentstack.paths import ensure_private_dir

    data = (CACHE_MAGIC + key.encode() + b"\n" + _sha256(compiled).hexdigest().encode() + b"\n"
            + compiled)
    try:
        ensure_private_dir(Path(directory))
        write_atomic(Path(path), data, 0o600, base=Path(directory))
    except (OSError, AgentstackError):
        pass


def available() -> tuple[bool, str]:
    """(usable, detail): pyseccomp importable, libseccomp working, the kernel's filter mode on."""
    try:
        sc = _pyseccomp()
        build_program()
    except ImportError as exc:
        return False, f"pyseccomp/libseccomp missing: {exc}"
    except OSError as exc:
        return False, f"libseccomp failed: {exc}"
    try:
        with open("/proc/sys/kernel/seccomp/actions_avail", encoding="ascii") as handle:
            actions = handle.read().split()
    except OSError:
        actions = []
    if "errno" not in actions:
        return False, "the kernel does not offer seccomp filters with the errno action"
    return True, f"libseccomp API level {sc.get_api()}, actions: {' '.join(actions)}"


def libseccomp_version() -> str | None:
    try:
        import ctypes

        lib = ctypes.CDLL("libseccomp.so.2")

        class _Version(ctypes.Structure):
            _fields_ = [("major", ctypes.c_uint), ("minor", ctypes.c_uint), ("micro", ctypes.c_uint)]

        lib.seccomp_version.restype = ctypes.POINTER(_Version)
        version = lib.seccomp_version().contents
        return f"{version.major}.{version.minor}.{version.micro}"
    except (OSError, AttributeError):
        return None


__all__ = ["BLOCKED_SYSCALLS", "Rule", "available", "build_program", "libseccomp_version", "rules"]

"""The probe program of the confinement suite: one attempted operation per process.

Runs *inside* the sandbox under the system Python (`python3 -I probe.py MODE ROW ARG...`), so it
imports only the standard library. It prints exactly one verdict line and exits:

    ALLOWED <detail>                       exit 0   the operation succeeded
    DENIED <ERRNO NAME> <strerror>         exit 1   the kernel refused it
    ERROR <text>                           exit 3   the probe itself broke (never a pass)

MODE is `direct` (this process does it), `grandchild` (a child process does it; its verdict and
exit status are relayed) or `detached` (a double-forked, setsid()-detached descendant does it and
reports through a pipe).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import socket
import struct
import subprocess
import sys
from collections.abc import Callable

SYSCALLS = {
    "x86_64": {
        "bpf": 321, "io_uring_setup": 425, "userfaultfd": 323, "perf_event_open": 298,
        "keyctl": 250, "execveat": 322, "clone": 56, "process_vm_readv": 310, "setns": 308,
        "memfd_create": 319, "pivot_root": 155,
    },
    "aarch64": {
        "bpf": 280, "io_uring_setup": 425, "userfaultfd": 282, "perf_event_open": 241,
        "keyctl": 219, "execveat": 281, "clone": 220, "process_vm_readv": 270, "setns": 268,
        "memfd_create": 279, "pivot_root": 41,
    },
}
CLONE_NEWUSER = 0x10000000
SIGCHLD = 17
AT_EMPTY_PATH = 0x1000
TIOCSTI = 0x5412
PTRACE_ATTACH = 16
PTRACE_DETACH = 17


class Denied(Exception):
    def __init__(self, err: int) -> None:
        super().__init__(err)
        self.err = err


_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int) -> int:
    if result == -1:
        raise Denied(ctypes.get_errno())
    return result


def _syscall(name: str, *args: object) -> int:
    number = SYSCALLS[platform.machine()][name]
    _libc.syscall.restype = ctypes.c_long
    # syscall() is variadic: pass integers as full longs, or the upper halves are garbage.
    full = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    return _check(_libc.syscall(ctypes.c_long(number), *full))


def op_read(path: str) -> str:
    with open(path, "rb") as handle:
        data = handle.read(4096)
    return f"read {len(data)} bytes"


def op_append(path: str) -> str:
    with open(path, "ab") as handle:
        handle.write(b"probe\n")
    return "appended"


def op_stat(*paths: str) -> str:
    """What stat() tells about files the process cannot read (Landlock does not cover it)."""
    infos = [os.stat(path) for path in paths]
    return " ".join(f"size={i.st_size},blocks={i.st_blocks}" for i in infos)


def op_create(directory: str) -> str:
    path = os.path.join(directory, f"probe-{os.getpid()}.txt")
    with open(path, "xb") as handle:
        handle.write(b"probe\n")
    return f"created {path}"


def op_workdir() -> str:
    path = os.path.join(os.getcwd(), f".probe-{os.getpid()}.txt")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("round trip")
    with open(path, encoding="utf-8") as handle:
        back = handle.read()
    os.unlink(path)
    tmp = os.path.join(os.environ["TMPDIR"], "probe.txt")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write("tmp")
    return f"workdir and TMPDIR writable ({back})"


def _patience(seconds: float) -> float:
    """`seconds` stretched by the machine's load, as agentstack.patience does (this program
    imports only the standard library): a timeout never counts as a denial (EACCES/EPERM)."""
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        load = 1.0
    return seconds * max(1.0, min(8.0, load))


def op_connect(host: str, port: str) -> str:
    with socket.create_connection((host, int(port)), timeout=_patience(5)):
        return f"connected to {host}:{port}"


MSG_FASTOPEN = 0x20000000
TCP_FASTOPEN_CONNECT = 30
IPPROTO_MPTCP = 262
IPPROTO_SCTP = 132


def _tcp_target(host: str, port: str) -> tuple[socket.socket, tuple[str, int]]:
    """A TCP socket and address: `::ffff:127.0.0.1` (v4-mapped) gets an AF_INET6 socket."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)  # blocking: Fast Open completes the SYN
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 5, 0))
    return sock, (host, int(port))


def _fastopen_result(sock: socket.socket, address: tuple[str, int]) -> str:
    return f"Fast Open sent data to {address[0]}:{address[1]} without connect()"


def op_fastopen(host: str, port: str, how: str = "sendto") -> str:
    """A TCP connection without connect(): sendto/sendmsg/sendmmsg with MSG_FASTOPEN, or
    setsockopt(TCP_FASTOPEN_CONNECT) followed by connect() and a write."""
    sock, address = _tcp_target(host, port)
    with sock:
        if how == "sendto":
            sock.sendto(b"probe", MSG_FASTOPEN, address)
        elif how == "sendmsg":
            sock.sendmsg([b"probe"], [], MSG_FASTOPEN, address)
        elif how == "sendmmsg":
            _sendmmsg_fastopen(sock, address)
        elif how == "connect-option":
            sock.setsockopt(socket.IPPROTO_TCP, TCP_FASTOPEN_CONNECT, 1)
            sock.connect(address)
            sock.send(b"probe")
        else:
            raise ValueError(how)
        return _fastopen_result(sock, address)


def _sendmmsg_fastopen(sock: socket.socket, address: tuple[str, int]) -> None:
    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    class MsgHdr(ctypes.Structure):
        _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                    ("iov", ctypes.POINTER(IoVec)), ("iovlen", ctypes.c_size_t),
                    ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                    ("flags", ctypes.c_int)]

    class MMsgHdr(ctypes.Structure):
        _fields_ = [("hdr", MsgHdr), ("len", ctypes.c_uint)]

    if sock.family == socket.AF_INET6:
        raw = struct.pack("!HHI16sI", socket.AF_INET6, address[1], 0,
                          socket.inet_pton(socket.AF_INET6, address[0]), 0)
        raw = struct.pack("=H", socket.AF_INET6) + raw[2:]
    else:
        raw = struct.pack("=H", socket.AF_INET) + struct.pack(
            "!H4s8x", address[1], socket.inet_aton(address[0]))
    name = ctypes.create_string_buffer(raw, len(raw))
    data = ctypes.create_string_buffer(b"probe", 5)
    iov = IoVec(ctypes.addressof(data), 5)
    msg = MMsgHdr(MsgHdr(ctypes.addressof(name), len(raw), ctypes.pointer(iov), 1, None, 0, 0), 0)
    _libc.sendmmsg.restype = ctypes.c_int
    _check(_libc.sendmmsg(sock.fileno(), ctypes.byref(msg), 1, MSG_FASTOPEN))


def op_stream_proto(proto: str, host: str, port: str) -> str:
    """connect() over a SOCK_STREAM protocol other than TCP (MPTCP, SCTP): Landlock's TCP rules
    name TCP only."""
    number = {"mptcp": IPPROTO_MPTCP, "sctp": IPPROTO_SCTP}[proto]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM, number) as sock:
        sock.settimeout(_patience(5))
        sock.connect((host, int(port)))
    return f"connected to {host}:{port} over {proto}"


def op_unix(address: str) -> str:
    target = "\0" + address[1:] if address.startswith("@") else address
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(_patience(5))
        sock.connect(target)
    return f"connected to unix socket {address}"


def op_listen() -> str:
    """listen() on a TCP socket never bound: the kernel picks a port on every address."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.listen(1)
        return f"listening on {sock.getsockname()}"


def op_udp(host: str, port: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(b"probe", (host, int(port)))
    return "sent a UDP datagram"


def op_socket(kind: str) -> str:
    if kind == "raw":
        sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    elif kind == "packet":
        sock = socket.socket(17, socket.SOCK_RAW, 0)  # AF_PACKET
    elif kind == "netlink-audit":
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 9)  # NETLINK_AUDIT
    else:
        raise ValueError(kind)
    sock.close()
    return f"opened a {kind} socket"


def op_ptrace(pid: str) -> str:
    _libc.ptrace.restype = ctypes.c_long
    _check(_libc.ptrace(PTRACE_ATTACH, int(pid), None, None))
    _libc.ptrace(PTRACE_DETACH, int(pid), None, None)
    return f"attached to {pid}"


def op_kill(pid: str) -> str:
    try:
        os.kill(int(pid), 15)
    except OSError as exc:
        raise Denied(exc.errno or 0) from None
    return f"signalled {pid}"


def op_mount(directory: str) -> str:
    _check(_libc.mount(b"none", directory.encode(), b"tmpfs", 0, None))
    return f"mounted tmpfs on {directory}"


def op_bpf() -> str:
    attr = struct.pack("IIII", 2, 4, 4, 1) + bytes(112)  # BPF_MAP_TYPE_ARRAY, 1 entry
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = _syscall("bpf", 0, buf, len(attr))  # BPF_MAP_CREATE
    os.close(fd)
    return "created a BPF map"


def op_io_uring() -> str:
    params = ctypes.create_string_buffer(120)
    fd = _syscall("io_uring_setup", 8, params)
    os.close(fd)
    return "created an io_uring"


def op_unshare_user() -> str:
    _check(_libc.unshare(CLONE_NEWUSER))
    return "entered a new user namespace"


def op_clone_user() -> str:
    pid = _syscall("clone", CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return "cloned into a new user namespace"


def op_environ(pid: str) -> str:
    with open(f"/proc/{pid}/environ", "rb") as handle:
        data = handle.read()
    return f"read {len(data)} bytes of /proc/{pid}/environ"


def op_memfd() -> str:
    fd = _syscall("memfd_create", b"probe", 0)
    os.close(fd)
    return "created a memfd"


def op_execveat() -> str:
    fd = os.open("/bin/true", os.O_RDONLY)
    argv = (ctypes.c_char_p * 2)(b"true", None)
    envp = (ctypes.c_char_p * 1)(None)
    _syscall("execveat", fd, b"", argv, envp, AT_EMPTY_PATH)
    return "executed a file descriptor"  # not reached: execveat replaced the process


def op_keyctl() -> str:
    key = _syscall("keyctl", 0, ctypes.c_long(-3), 1)  # KEYCTL_GET_KEYRING_ID, session, create
    return f"keyring {key}"


def op_userfaultfd() -> str:
    fd = _syscall("userfaultfd", 0)
    os.close(fd)
    return "created a userfaultfd"


def op_perf() -> str:
    attr = struct.pack("IIQ", 1, 128, 0) + bytes(112)  # PERF_TYPE_SOFTWARE, CPU clock
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = _syscall("perf_event_open", buf, 0, -1, -1, 0)
    os.close(fd)
    return "opened a perf event"


def op_vm_read(pid: str) -> str:
    local = ctypes.create_string_buffer(16)

    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    address = 0x400000
    try:  # a readable mapping of the target, when its maps are readable (unconfined controls)
        with open(f"/proc/{pid}/maps", encoding="ascii") as handle:
            for line in handle:
                if line.split()[1].startswith("r"):
                    address = int(line.split("-", 1)[0], 16)
                    break
    except OSError:
        pass
    liov = IoVec(ctypes.addressof(local), 16)
    riov = IoVec(address, 16)
    _syscall("process_vm_readv", int(pid), ctypes.byref(liov), 1, ctypes.byref(riov), 1, 0)
    return f"read memory of {pid}"


def op_setns() -> str:
    fd = os.open("/proc/self/ns/uts", os.O_RDONLY)
    _syscall("setns", fd, 0)
    return "entered a namespace"


def op_tiocsti() -> str:
    char = ctypes.c_char(b"x")
    _check(_libc.ioctl(0, TIOCSTI, ctypes.byref(char)))
    return "injected a keystroke"


def op_join_group(pid: str) -> str:
    """Move into the process group of a process outside (the user's shell's, `run`'s)."""
    target = os.getpgid(int(pid))
    os.setpgid(0, target)
    return f"joined process group {target}"


def op_terminal(path: str) -> str:
    """Open a terminal other than the session's own, to read what is typed there."""
    fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
    os.close(fd)
    return f"opened {path}"


class ProxyRefused(Exception):
    pass


def _proxy() -> tuple[int, str]:
    from urllib.parse import urlsplit

    url = urlsplit(os.environ["HTTPS_PROXY"])
    return int(url.port or 0), url.password or ""


def _proxy_exchange(request: bytes) -> bytes:
    port, _ = _proxy()
    with socket.create_connection(("127.0.0.1", port), timeout=_patience(10)) as sock:
        sock.sendall(request)
        data = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            data += chunk
            if b"Connection Established" in data:
                break
    return data


def op_proxy(kind: str, target: str) -> str:
    """Ask the credential proxy for a tunnel or a forward: `connect` (with the token),
    `connect-no-token`, `absolute` (GET http://target/ with the token) or `smuggle` (a route
    request followed, in the same connection, by a CONNECT)."""
    import base64

    _, token = _proxy()
    auth = "Proxy-Authorization: Basic " + base64.b64encode(f"nono:{token}".encode()).decode()
    if kind == "connect":
        request = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n\r\n"
    elif kind == "connect-no-token":
        request = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"
    elif kind == "absolute":
        request = f"GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n\r\n"
    elif kind == "smuggle":
        base = os.environ["MOCK_BASE_URL"].split("/", 3)[3]
        key = os.environ["MOCK_API_KEY"]
        request = (f"GET /{base}/v1/echo HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   f"Authorization: Bearer {key}\r\nContent-Length: 0\r\n\r\n"
                   f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n\r\n")
    else:
        raise ValueError(kind)
    reply = _proxy_exchange(request.encode())
    status = reply.split(b"\r\n", 1)[0].decode("latin-1")
    if b"Connection Established" in reply or (kind == "absolute" and " 200 " in status):
        return f"the proxy opened {target}: {status}"
    if kind == "smuggle":
        raise ProxyRefused("dropped")
    raise ProxyRefused(status.split(" ")[1] if " " in status else "closed")


def _host_pid() -> int:
    """This process's pid as the host sees it: /proc is the host's (never remounted), so its
    `self` names the host pid even inside the PID namespace made below Landlock ABI 6."""
    try:
        return int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        return os.getpid()


def op_outlive(pids_file: str, depth: str = "100") -> str:
    """Leave processes behind: a chain `depth` deep, a double-forked setsid() daemon that keeps
    forking, and one that moves into the process group of its parent's parent. Writes their pids
    to `pids_file` and returns at once (the row then checks none is alive after `run`)."""
    import time

    read_end, write_end = os.pipe()

    def quiet() -> None:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(read_end)

    if os.fork() == 0:  # the chain: each level forks the next, then stays
        quiet()
        for _ in range(int(depth)):
            if os.fork() != 0:
                break
        os.write(write_end, f"{_host_pid()}\n".encode())
        time.sleep(300)
        os._exit(0)
    if os.fork() == 0:  # a detached daemon that keeps forking
        quiet()
        os.setsid()
        if os.fork() == 0:
            while True:
                if os.fork() == 0:
                    os.write(write_end, f"{_host_pid()}\n".encode())
                    time.sleep(300)
                    os._exit(0)
                time.sleep(0.02)
        os._exit(0)
    os.close(write_end)
    pids: list[str] = []
    buffer = b""
    while len(pids) < int(depth) + 3:
        chunk = os.read(read_end, 4096)
        if not chunk:
            break
        buffer += chunk
        *done, buffer = buffer.split(b"\n")
        pids.extend(p.decode() for p in done if p)
    with open(pids_file, "w", encoding="ascii") as handle:
        handle.write("\n".join(pids) + "\n")
    return f"left {len(pids)} processes running"


# What git (or a tool that opens the directory) runs later, planted by `git_plant`; the row then
# checks that `run`'s watch reports every one of them.
PLANTS = {
    ".git/commondir": "../../elsewhere\n",
    ".git/hooks/post-checkout": "#!/bin/sh\necho planted\n",
    ".git/info/attributes": "* filter=planted\n",
    "nested/.git/config": "[core]\n\tfsmonitor = echo planted\n",
    "wt/.git": "gitdir: /var/tmp/elsewhere/.git/worktrees/wt\n",
    ".gitmodules": '[submodule "m"]\n\tpath = m\n\turl = ./m\n',
    ".envrc": "echo planted\n",
    ".vscode/tasks.json": '{"tasks": [{"runOptions": {"runOn": "folderOpen"}}]}\n',
    ".claude/settings.json": '{"hooks": {}}\n',
}


def op_git_plant(workdir: str) -> str:
    with open(os.path.join(workdir, ".git", "config"), "a", encoding="utf-8") as handle:
        handle.write("[core]\n\tfsmonitor = echo planted\n")
    for relative, text in PLANTS.items():
        path = os.path.join(workdir, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    return f"planted .git/config and {len(PLANTS)} files"


def op_http(base_env: str, key_env: str, header: str) -> str:
    import urllib.request

    base, key = os.environ[base_env], os.environ[key_env]
    value = f"Bearer {key}" if header.lower() == "authorization" else key
    request = urllib.request.Request(base + "/v1/echo", headers={header: value})  # noqa: S310
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=_patience(10)) as response:
        body = response.read().decode("utf-8", "replace")
    env = json.dumps(dict(os.environ), sort_keys=True)
    return f"status {response.status} body {body} env {env}"


OPS: dict[str, Callable[..., str]] = {
    "read": op_read, "append": op_append, "create": op_create, "workdir": op_workdir,
    "connect": op_connect, "unix": op_unix, "udp": op_udp, "socket": op_socket, "ptrace": op_ptrace,
    "kill": op_kill, "mount": op_mount, "bpf": op_bpf, "io_uring": op_io_uring,
    "unshare_user": op_unshare_user, "clone_user": op_clone_user, "environ": op_environ,
    "memfd": op_memfd, "execveat": op_execveat, "keyctl": op_keyctl,
    "userfaultfd": op_userfaultfd, "perf": op_perf, "vm_read": op_vm_read, "setns": op_setns,
    "tiocsti": op_tiocsti, "http": op_http, "fastopen": op_fastopen,
    "stream_proto": op_stream_proto, "join_group": op_join_group, "terminal": op_terminal,
    "proxy": op_proxy, "outlive": op_outlive, "stat": op_stat, "git_plant": op_git_plant,
    "listen": op_listen,
}


def attempt(op: str, args: list[str]) -> tuple[int, str]:
    try:
        detail = OPS[op](*args)
    except Denied as exc:
        return 1, f"DENIED {errno.errorcode.get(exc.err, str(exc.err))} {os.strerror(exc.err)}"
    except ProxyRefused as exc:
        return 1, f"DENIED PROXY {exc}"
    except OSError as exc:
        err = exc.errno or 0
        return 1, f"DENIED {errno.errorcode.get(err, str(err))} {os.strerror(err)}"
    except Exception as exc:  # noqa: BLE001 - a broken probe must never look like a denial
        return 3, f"ERROR {type(exc).__name__}: {exc}"
    return 0, f"ALLOWED {detail}"


def main(argv: list[str]) -> int:
    mode, op, args = argv[0], argv[1], argv[2:]
    if mode == "direct":
        code, line = attempt(op, args)
        print(line, flush=True)
        return code
    if mode == "grandchild":
        done = subprocess.run(
            [sys.executable, "-I", os.path.abspath(__file__), "direct", op, *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False,
        )
        sys.stdout.write(done.stdout.decode("utf-8", "replace"))
        return done.returncode
    if mode == "detached":
        read_end, write_end = os.pipe()
        first = os.fork()
        if first == 0:
            os.close(read_end)
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            code, line = attempt(op, args)  # the detached, session-leader-less grandchild
            os.write(write_end, f"{line}\nEXIT {code} SID {os.getsid(0)} PID {os.getpid()}\n"
                     .encode())
            os._exit(0)
        os.close(write_end)
        os.waitpid(first, 0)
        chunks = []
        while True:
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        lines = b"".join(chunks).decode("utf-8", "replace").splitlines()
        if not lines or not lines[-1].startswith("EXIT "):
            print("ERROR the detached descendant reported nothing", flush=True)
            return 3
        print("\n".join(lines[:-1]), flush=True)
        fields = lines[-1].split()
        if fields[3] == str(os.getsid(0)):
            print("ERROR the descendant was not detached (same session)", flush=True)
            return 3
        return int(fields[1])
    print(f"ERROR unknown mode {mode}", flush=True)
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

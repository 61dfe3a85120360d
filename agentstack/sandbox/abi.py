"""Landlock ABI versions, by a fail-closed table: what each version enforces, what `run` does
when a version lacks it (covered by another layer, degraded and said so, or refused).

| ABI | Linux | adds | without it |
|---|---|---|---|
| 1 | 5.13 | file system rules | refused (no Landlock) |
| 2 | 5.19 | `REFER` (rename/link across directories) | degraded: such renames fail (`EXDEV`), nothing opens |
| 3 | 6.2 | `TRUNCATE` | degraded: `truncate()` of a file under a read-only grant is not denied |
| 4 | 6.7 | TCP `bind`/`connect` rules | refused when the network is blocked (the default) |
| 5 | 6.10 | `IOCTL_DEV` | degraded: device ioctls are not mediated (seccomp still refuses `TIOCSTI`, `TIOCLINUX`) |
| 6 | 6.12 | scoping: abstract unix sockets, signals | abstract sockets: covered by seccomp (`socket(AF_UNIX)` refused); signals to processes outside: covered by a PID namespace the launcher makes (processes outside are not visible: `ESRCH`), refused where none can be made |

Standard library only. `assess(version, network_block=..., seccomp=..., pid_namespace=...)` is the
one answer `run`, `doctor` and the confinement suite use.
"""

from __future__ import annotations

from typing import NamedTuple

# Landlock's access bits (include/uapi/linux/landlock.h).
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REFER = 1 << 13
FS_TRUNCATE = 1 << 14
FS_IOCTL_DEV = 1 << 15
NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

LATEST = 6  # what agentstack uses; newer kernels (ABI 7: audit logging) add nothing it needs


def fs_access(version: int) -> int:
    """Every file-system right Landlock `version` handles."""
    bits = (1 << 13) - 1  # ABI 1: EXECUTE .. MAKE_SYM
    if version >= 2:
        bits |= FS_REFER
    if version >= 3:
        bits |= FS_TRUNCATE
    if version >= 5:
        bits |= FS_IOCTL_DEV
    return bits


def net_access(version: int) -> int:
    return NET_BIND_TCP | NET_CONNECT_TCP if version >= 4 else 0


def scoped(version: int) -> int:
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0


class Feature(NamedTuple):
    abi: int
    name: str
    without: str  # "refuse", "degraded", "covered", or "refuse-if-network"
    detail: str


FEATURES: tuple[Feature, ...] = (
    Feature(2, "refer", "degraded",
            "renaming or linking a file across directories fails with EXDEV (nothing opens)"),
    Feature(3, "truncate", "degraded",
            "truncate() of a file under a read-only grant is not denied"),
    Feature(4, "network", "refuse-if-network",
            "TCP connect/bind rules (Landlock ABI 4, Linux 6.7): a blocked network cannot be "
            "enforced"),
    Feature(5, "ioctl-dev", "degraded",
            "ioctl on device files is not mediated (seccomp still refuses TIOCSTI and TIOCLINUX)"),
    Feature(6, "abstract-unix-scoping", "covered",
            "abstract unix sockets outside the sandbox: covered by seccomp, which refuses "
            "socket(AF_UNIX)"),
    Feature(6, "signal-scoping", "pid-namespace",
            "signal scoping (Landlock ABI 6, Linux 6.12): without it a confined process can "
            "signal every process of its uid outside the sandbox, unless it runs in a PID "
            "namespace of its own"),
)
# What stands in for signal scoping where a PID namespace can be made.
PID_NAMESPACE_COVERS = ("signals to processes outside: covered by a PID namespace of the "
                        "sandbox's own (processes outside are not visible to it: ESRCH)")

# The confinement suite's rows that need a feature (row name -> feature name).
ROW_NEEDS = {
    "kill": "signal-scoping",
    "tcp-port": "network",
    "allowed-port": "network",
}


class Assessment(NamedTuple):
    """`state`: `full` (every feature), `degraded` (runs; `degraded` names what is missing,
    `covered` what another layer stands in for), `refused` (`run` refuses; `refused` names
    why)."""

    version: int
    state: str
    refused: tuple[str, ...]
    degraded: tuple[str, ...]
    covered: tuple[str, ...]

    @property
    def missing(self) -> tuple[str, ...]:
        return (*self.refused, *self.degraded, *self.covered)

    def to_json(self) -> dict[str, object]:
        return self._asdict()


def assess(version: int, *, network_block: bool = True, seccomp: bool = True,
           pid_namespace: bool = False) -> Assessment:
    """What Landlock ABI `version` (0: none) enforces of a policy, by the table above;
    `pid_namespace`: the launcher can make one (`confine.can_make_pid_namespace`)."""
    if version < 1:
        return Assessment(version, "refused", ("Landlock is not available",), (), ())
    refused: list[str] = []
    degraded: list[str] = []
    covered: list[str] = []
    for feature in FEATURES:
        if version >= feature.abi:
            continue
        rule = feature.without
        if rule == "covered" and not seccomp:
            rule = "refuse"
        if rule == "refuse-if-network":
            rule = "refuse" if network_block else "skip"
        if rule == "pid-namespace":
            if pid_namespace:
                covered.append(PID_NAMESPACE_COVERS)
                continue
            rule = "refuse"
        if rule == "refuse":
            refused.append(feature.detail)
        elif rule == "degraded":
            degraded.append(feature.detail)
        elif rule == "covered":
            covered.append(feature.detail)
    # What another layer covers is degraded too, only safely so (and said): seccomp refuses
    # every AF_UNIX socket, not only those outside; a PID namespace answers ESRCH, and leaves
    # /proc as it is.
    state = "refused" if refused else ("degraded" if degraded or covered else "full")
    return Assessment(version, state, tuple(refused), tuple(degraded), tuple(covered))


def feature_available(name: str, version: int) -> bool:
    return all(version >= f.abi for f in FEATURES if f.name == name)


def needs_pid_namespace(version: int) -> bool:
    """Landlock `version` lacks signal scoping: the launcher makes a PID namespace instead."""
    return not feature_available("signal-scoping", version)


def covered(name: str, version: int, *, pid_namespace: bool) -> bool:
    """Feature `name`, missing at `version`, is covered by another layer there."""
    return name == "signal-scoping" and pid_namespace and needs_pid_namespace(version)

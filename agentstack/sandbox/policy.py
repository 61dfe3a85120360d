"""The one sandbox policy object: what `run` enforces, what `why` explains, what the guard reads.

Standard library only (the guard loads a compiled copy with `SandboxPolicy.from_json`). Every path
in a policy is absolute and already resolved (symbolic links followed, as the kernel does when it
attaches a Landlock rule to an inode). The policy is *deny by default*: a path is readable only
under a grant, writable only under a read-write grant, and the deny list ($AGENTSTACK_HOME and
nono's credential, keychain, browser-data and shell-history groups) can never be under a grant,
because Landlock can only add access, never carve a hole out of a granted directory.
"""

from __future__ import annotations

import ipaddress
import json
import os
from typing import Any, Literal, NamedTuple

from agentstack.manifestview import METADATA_HOSTS

POLICY_FORMAT = 1
Access = Literal["ro", "rw"]
Op = Literal["read", "write"]
OPS: tuple[Op, ...] = ("read", "write")

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
METADATA_NAMES = METADATA_HOSTS  # one list with the risk model (`manifestview.METADATA_HOSTS`)

# What each deny source protects; used in explanations.
DENY_REASONS = {
    "agentstack-home": "agentstack's own state ($AGENTSTACK_HOME: trust log, keys, secrets)",
    "nono:deny_credentials": "credentials (nono group deny_credentials)",
    "nono:deny_keychains_linux": "keyrings and password stores (nono group deny_keychains_linux)",
    "nono:deny_browser_data_linux": "browser data (nono group deny_browser_data_linux)",
    "nono:deny_shell_history": "shell history (nono group deny_shell_history)",
    "nono:deny_shell_configs": "shell start-up files (nono group deny_shell_configs)",
    "credentials": "a credential file of a harness or a common tool (agentstack's deny list)",
    "harness-home": "the harness's real user-level configuration and state (what runs in every "
    "later session); inside run the harness uses its private per-project copy",
}


class PolicyError(ValueError):
    """A policy that cannot be enforced as written (the caller turns it into exit 1)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class Grant(NamedTuple):
    """One Landlock rule: a directory tree or a single file, read-only or read-write."""

    path: str
    access: Access
    file: bool = False
    source: str = ""

    def covers(self, path: str) -> bool:
        if self.file:
            return path == self.path
        return is_within(path, self.path)

    def describe(self) -> str:
        kind = "file" if self.file else "directory"
        mode = "read-only" if self.access == "ro" else "read-write"
        return f"{mode} {kind} grant {self.path} ({self.source})"


class Deny(NamedTuple):
    """A path no grant may reach. `except_paths`: directories below it that agentstack itself
    grants (the harness's private state under $AGENTSTACK_HOME); Landlock denies by default, so
    granting a directory below an ungranted one opens nothing else."""

    path: str
    source: str
    except_paths: tuple[str, ...] = ()

    def describe(self) -> str:
        return DENY_REASONS.get(self.source, self.source)

    def covers(self, path: str) -> bool:
        return is_within(path, self.path) and not any(
            is_within(path, inner) for inner in self.except_paths
        )


class CredentialRoute(NamedTuple):
    """`[sandbox.credentials.NAME]`: the proxy injects secret:SECRET into requests to UPSTREAM."""

    name: str
    upstream: str
    secret: str
    header: str
    env: str
    base_url_env: str | None = None

    @property
    def host(self) -> str:
        from urllib.parse import urlsplit

        return (urlsplit(self.upstream).hostname or "").lower()

    @property
    def port(self) -> int:
        from urllib.parse import urlsplit

        parts = urlsplit(self.upstream)
        return parts.port or (443 if parts.scheme == "https" else 80)


class Decision(NamedTuple):
    allowed: bool
    reason: str
    rule: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"allowed": self.allowed, "reason": self.reason, "rule": self.rule}


def is_within(path: str, parent: str) -> bool:
    """`path` is `parent` or lies beneath it (both absolute and normalised)."""
    if parent == "/":
        return path.startswith("/")
    return path == parent or path.startswith(parent + "/")


def _top(path: str) -> str | None:
    """The first component of an absolute path ("/usr/lib" -> "usr"); None for "/" and for
    anything that is not a plain absolute path (which is then compared with everything)."""
    if not path.startswith("/") or path.startswith("//") or path == "/":
        return None
    return path.split("/", 2)[1]


def normalise(path: str, base: str) -> str:
    """Absolute, `~`-free, `..`-free, symbolic links resolved as far as the path exists."""
    if "\0" in path:
        raise ValueError("path contains NUL")
    expanded = os.path.expanduser(path)
    joined = expanded if os.path.isabs(expanded) else os.path.join(base, expanded)
    return os.path.realpath(joined)


class SandboxPolicy(NamedTuple):
    """The resolved policy. Construct with `agentstack.sandbox.resolve.resolve_policy`."""

    workdir: str
    home: str
    agentstack_home: str
    harness: str | None
    grants: tuple[Grant, ...]
    denies: tuple[Deny, ...]
    network_block: bool = True
    localhost_ports: tuple[int, ...] = ()
    allow_domains: tuple[str, ...] = ()
    credentials: tuple[CredentialRoute, ...] = ()
    env_pass: tuple[str, ...] = ()
    env_set: tuple[tuple[str, str], ...] = ()
    tmpdir: str | None = None
    proxy_port: int | None = None
    seccomp: bool = True
    # The harness's private user-level state (config dir, XDG dirs) for this project, if any.
    harness_state: str | None = None
    format: int = POLICY_FORMAT
    # The MCP server broker of `run` (agentstack.serverbroker), on 127.0.0.1: connect only.
    broker_port: int | None = None

    # ------------------------------------------------------------------ derived

    @property
    def needs_proxy(self) -> bool:
        return bool(self.credentials or self.allow_domains)

    @property
    def tcp_ports(self) -> tuple[int, ...]:
        """Every TCP port the child may connect to (Landlock filters by port only)."""
        ports = set(self.localhost_ports)
        if self.proxy_port is not None:
            ports.add(self.proxy_port)
        if self.broker_port is not None:
            ports.add(self.broker_port)
        return tuple(sorted(ports))

    def with_runtime(
        self, *, tmpdir: str | None = None, proxy_port: int | None = None
    ) -> SandboxPolicy:
        """This policy plus what only `run` knows: its private TMPDIR and the proxy's port."""
        grants = self.grants
        if tmpdir is not None:
            grants = (*grants, Grant(path=tmpdir, access="rw", source="private TMPDIR"))
        return self._replace(
            grants=grants,
            tmpdir=tmpdir if tmpdir is not None else self.tmpdir,
            proxy_port=proxy_port if proxy_port is not None else self.proxy_port,
        )

    # ------------------------------------------------------------------ checks

    def problems(self) -> list[str]:
        """Why this policy cannot be enforced by Landlock as written; [] when it can."""
        out: list[str] = []
        # Only a grant and a deny on one path (one within the other) can conflict, and such two
        # share their first component (or one is "/"): each deny is checked against those
        # grants only, in the grants' order.
        by_top: dict[str, list[int]] = {}
        everywhere: list[int] = []
        for index, grant in enumerate(self.grants):
            if _top(grant.path) is None:
                everywhere.append(index)
            else:
                by_top.setdefault(str(_top(grant.path)), []).append(index)
        for deny in self.denies:
            top = _top(deny.path)
            indices = (range(len(self.grants)) if top is None
                       else sorted((*by_top.get(top, ()), *everywhere)))
            for grant in (self.grants[i] for i in indices):
                if any(is_within(grant.path, inner) for inner in deny.except_paths):
                    continue
                if grant.file:
                    if grant.path == deny.path or is_within(grant.path, deny.path):
                        out.append(
                            f"{grant.describe()} opens {deny.path}, which is always denied: "
                            f"{deny.describe()}; remove the grant"
                        )
                elif is_within(deny.path, grant.path) or is_within(grant.path, deny.path):
                    inner = is_within(deny.path, grant.path) and deny.path != grant.path
                    out.append(
                        f"{grant.describe()} contains {deny.path}, which must stay denied "
                        f"({deny.describe()}); Landlock cannot deny a path under a granted "
                        "directory, so grant narrower directories instead"
                        if inner
                        else f"{grant.describe()} opens {deny.path}, which is always denied: "
                        f"{deny.describe()}; remove the grant"
                    )
        for grant in self.grants:
            if grant.access != "ro" or not grant.source.startswith("sandbox."):
                continue
            for other in self.grants:
                if other.access == "rw" and not other.file and other.covers(grant.path):
                    out.append(
                        f"{grant.describe()} is under {other.describe()}; Landlock grants the "
                        "union of both, so it would be writable: remove it, or move the "
                        "read-only data out of the writable directory"
                    )
                    break
                if other.access == "rw" and other.file and other.path == grant.path:
                    out.append(
                        f"{grant.describe()} is also a read-write file grant ({other.source}); "
                        "remove one of them"
                    )
                    break
        return out

    # ------------------------------------------------------------------ decisions

    def decide_path(self, path: str, op: Op) -> Decision:
        """Would the confined process be allowed to `op` (read or write) `path`?"""
        if op not in OPS:
            raise ValueError(f"op must be 'read' or 'write', not {op!r}")
        target = normalise(path, self.workdir)
        literal = os.path.normpath(os.path.join(self.workdir, os.path.expanduser(path)))
        via = "" if target == literal else f" ({path} -> {target})"
        for deny in self.denies:
            if deny.covers(target):
                return Decision(
                    allowed=False,
                    reason=f"denied: {target} is under {deny.path}, {deny.describe()}; no grant "
                    f"may reach it{via}",
                    rule=deny.path,
                )
        covering = [g for g in self.grants if g.covers(target)]
        if not covering:
            tmp_note = "; run also grants a private per-run TMPDIR" if self.tmpdir is None else ""
            return Decision(
                allowed=False,
                reason=f"denied: no grant covers {target} (deny by default){via}{tmp_note}",
            )
        best = max(covering, key=lambda g: (g.access == "rw", len(g.path)))
        if op == "read" or best.access == "rw":
            return Decision(
                allowed=True, reason=f"allowed by the {best.describe()}{via}", rule=best.path
            )
        return Decision(
            allowed=False,
            reason=f"denied: only the {best.describe()} covers {target}; nothing grants write{via}",
            rule=best.path,
        )

    def decide_net(self, host: str, port: int | None = None) -> Decision:
        """Would the confined process reach `host` (on TCP `port`, or on any port if None)?"""
        name = host.strip().strip("[]").rstrip(".").lower()
        if not name:
            raise ValueError("empty host")
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"port {port} is out of range")
        if not self.network_block:
            return Decision(
                allowed=True,
                reason="allowed: the network is not blocked (sandbox.network.block = false); "
                "raw and packet sockets stay blocked",
            )
        address = _ip(name)
        loopback = name in LOOPBACK_NAMES or (address is not None and address.is_loopback)
        ports = self.tcp_ports
        port_text = ", ".join(str(p) for p in ports) or "none"
        if port is not None and port in ports:
            what = (
                "agentstack's proxy (it forwards only credential-route requests and tunnels "
                "only to allow_domains on port 443, with its token)"
                if port == self.proxy_port
                else "a localhost port in sandbox.network.localhost_ports"
            )
            if loopback:
                return Decision(
                    allowed=True, reason=f"allowed: TCP port {port} is {what}", rule=str(port)
                )
            return Decision(
                allowed=True,
                reason=f"allowed, by a known hole: TCP port {port} is {what}, and Landlock "
                "filters TCP connect() by port only, so that port is reachable on any address "
                "(a host name still needs DNS, which is blocked; an IP address does not)",
                rule=str(port),
            )
        if address is not None and (address.is_link_local or str(address) == "169.254.169.254"):
            return Decision(
                allowed=False,
                reason=f"denied: {name} is link-local (cloud metadata reach); only the proxy "
                "could reach it, and no allowed host or route names it",
            )
        for route in self.credentials:
            if route.host != name:
                continue
            where = f"${route.base_url_env}" if route.base_url_env else f"/{route.name}/ on the proxy"
            if port is not None and port != route.port:
                return Decision(
                    allowed=False,
                    reason=f"denied: {name} is the upstream of credential route {route.name}, "
                    f"which reaches port {route.port} only, by requests the proxy forwards "
                    f"itself; the proxy opens no tunnel to {name}:{port}",
                )
            return Decision(
                allowed=True,
                reason=f"allowed through agentstack's credential proxy only: HTTP requests to "
                f"{where} (route {route.name}) are forwarded to {route.upstream} with "
                f"secret:{route.secret} in the {route.header} header, when they carry the "
                f"phantom token of ${route.env}; no tunnel (CONNECT) to {name}, no direct TCP",
                rule=f"sandbox.credentials.{route.name}",
            )
        for pattern in self.allow_domains:
            if not _host_matches(name, pattern) or address is not None or loopback:
                continue
            if port is not None and port not in (443, 80):
                return Decision(
                    allowed=False,
                    reason=f"denied: {name} matches {pattern!r} in sandbox.network.allow_domains, "
                    f"but the proxy tunnels to port 443 (CONNECT) and forwards plain HTTP to port "
                    f"80 only, not {port}",
                )
            return Decision(
                allowed=True,
                reason=f"allowed through agentstack's proxy only (HTTPS_PROXY, with its token): "
                f"{name} matches {pattern!r} in sandbox.network.allow_domains; CONNECT to port "
                "443, plain HTTP to port 80; direct TCP is still blocked",
                rule=pattern,
            )
        if loopback:
            return Decision(
                allowed=False,
                reason=f"denied: TCP to localhost is allowed only on ports {port_text}"
                + (f", not {port}" if port is not None else "")
                + "; the proxy never tunnels to localhost; add the port to "
                "sandbox.network.localhost_ports",
            )
        if name in METADATA_NAMES:
            return Decision(allowed=False, reason=f"denied: {name} is a cloud metadata host")
        return Decision(
            allowed=False,
            reason=f"denied: the network is blocked; direct TCP only to ports {port_text}, "
            f"and {name} is in neither sandbox.network.allow_domains nor a credential route; "
            "UDP, raw and packet sockets are blocked outright",
        )

    # ------------------------------------------------------------------ serialisation

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = self._asdict()
        for name in ("grants", "denies", "credentials"):
            data[name] = tuple(item._asdict() for item in data[name])
        data["env_set"] = [list(pair) for pair in self.env_set]
        return data

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SandboxPolicy:
        if not isinstance(data, dict) or data.get("format") != POLICY_FORMAT:
            raise ValueError(f"not a sandbox policy (format {POLICY_FORMAT})")
        return cls(
            workdir=str(data["workdir"]),
            home=str(data["home"]),
            agentstack_home=str(data["agentstack_home"]),
            harness=data.get("harness"),
            grants=tuple(
                Grant(
                    path=str(g["path"]),
                    access="rw" if g["access"] == "rw" else "ro",
                    file=bool(g["file"]),
                    source=str(g["source"]),
                )
                for g in data["grants"]
            ),
            denies=tuple(
                Deny(path=str(d["path"]), source=str(d["source"]),
                     except_paths=tuple(str(p) for p in d.get("except_paths", ())))
                for d in data["denies"]
            ),
            network_block=bool(data["network_block"]),
            localhost_ports=tuple(int(p) for p in data["localhost_ports"]),
            allow_domains=tuple(str(d) for d in data["allow_domains"]),
            credentials=tuple(CredentialRoute(**c) for c in data["credentials"]),
            env_pass=tuple(str(e) for e in data["env_pass"]),
            env_set=tuple((str(k), str(v)) for k, v in data["env_set"]),
            tmpdir=data.get("tmpdir"),
            proxy_port=data.get("proxy_port"),
            seccomp=bool(data.get("seccomp", True)),
            harness_state=data.get("harness_state"),
            broker_port=data.get("broker_port"),
        )

    @classmethod
    def loads(cls, text: str) -> SandboxPolicy:
        return cls.from_json(json.loads(text))


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def _host_matches(host: str, pattern: str) -> bool:
    pattern = pattern.lower().rstrip(".")
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and host != pattern[2:]
    return host == pattern

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

from agentstack.manifest.view import METADATA_HOSTS

POLICY_FORMAT = 1
Access = Literal["ro", "rw"]
Op = Literal["read", "write", "readwrite"]
OPS: tuple[Op, ...] = ("read", "write")
WHY_OPS: tuple[Op, ...] = ("read", "write", "readwrite")  # readwrite: allowed when both are

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
    """One answer of `why`. `source`: the rule or group that decided it (`sandbox.read_dirs[0]`,
    `workdir`, `system`, `nono:deny_credentials`, ...; None when nothing covers the query);
    `details`: the facts behind it; `suggested`: the manifest edit that would change the answer
    (`{"edit": "add"|"move"|"remove"|"set", "to"/"from": dotted path, "value": ...}`), None when
    no manifest edit can."""

    allowed: bool
    reason: str
    rule: str | None = None
    source: str | None = None
    details: dict[str, Any] | None = None
    suggested: dict[str, Any] | None = None

    @property
    def status(self) -> str:
        return "allowed" if self.allowed else "denied"

    def to_json(self) -> dict[str, Any]:
        return {"allowed": self.allowed, "status": self.status, "reason": self.reason,
                "rule": self.rule, "source": self.source, "details": self.details or {},
                "suggested": self.suggested}


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
    # The confinement suite only (`doctor --verify --landlock-abi N`): apply Landlock with exactly
    # the rights of ABI N (an older kernel, emulated). Never set by `resolve_policy`.
    landlock_abi: int | None = None

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
        return [text for _, text in self.problem_items()]

    def problem_items(self) -> list[tuple[str, str]]:
        """`problems()`, each with the source of the grant at fault (`sandbox.read_files[0]`)."""
        out: list[tuple[str, str]] = []
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
                        out.append((grant.source,
                            f"{grant.describe()} opens {deny.path}, which is always denied: "
                            f"{deny.describe()}; remove the grant"
                        ))
                elif is_within(deny.path, grant.path) or is_within(grant.path, deny.path):
                    inner = is_within(deny.path, grant.path) and deny.path != grant.path
                    out.append((grant.source,
                        f"{grant.describe()} contains {deny.path}, which must stay denied "
                        f"({deny.describe()}); Landlock cannot deny a path under a granted "
                        "directory, so grant narrower directories instead"
                        if inner
                        else f"{grant.describe()} opens {deny.path}, which is always denied: "
                        f"{deny.describe()}; remove the grant"
                    ))
        for grant in self.grants:
            if grant.access != "ro" or not grant.source.startswith("sandbox."):
                continue
            for other in self.grants:
                if other.access == "rw" and not other.file and other.covers(grant.path):
                    out.append((grant.source,
                        f"{grant.describe()} is under {other.describe()}; Landlock grants the "
                        "union of both, so it would be writable: remove it, or move the "
                        "read-only data out of the writable directory"
                    ))
                    break
                if other.access == "rw" and other.file and other.path == grant.path:
                    out.append((grant.source,
                        f"{grant.describe()} is also a read-write file grant ({other.source}); "
                        "remove one of them"
                    ))
                    break
        return out

    # ------------------------------------------------------------------ decisions

    def decide_path(self, path: str, op: Op) -> Decision:
        """Would the confined process be allowed to `op` (read, write, or readwrite: both)
        `path`?"""
        if op == "readwrite":
            read = self.decide_path(path, "read")
            if not read.allowed:
                return read._replace(details={**(read.details or {}), "op": "readwrite"})
            write = self.decide_path(path, "write")
            return write._replace(details={**(write.details or {}), "op": "readwrite"})
        if op not in OPS:
            raise ValueError(f"op must be 'read', 'write' or 'readwrite', not {op!r}")
        target = normalise(path, self.workdir)
        literal = os.path.normpath(os.path.join(self.workdir, os.path.expanduser(path)))
        via = "" if target == literal else f" ({path} -> {target})"
        details: dict[str, Any] = {"path": path, "target": target, "op": op}
        for deny in self.denies:
            if deny.covers(target):
                return Decision(
                    allowed=False,
                    reason=f"denied: {target} is under {deny.path}, {deny.describe()}; no grant "
                    f"may reach it{via}",
                    rule=deny.path,
                    source=deny.source,
                    details={**details, "deny": deny.path,
                             "note": "no manifest edit opens it: a grant reaching it is refused"},
                )
        covering = [g for g in self.grants if g.covers(target)]
        if not covering:
            tmp_note = "; run also grants a private per-run TMPDIR" if self.tmpdir is None else ""
            return Decision(
                allowed=False,
                reason=f"denied: no grant covers {target} (deny by default){via}{tmp_note}",
                details=details,
                suggested=self._suggest_grant(target, op),
            )
        best = max(covering, key=lambda g: (g.access == "rw", len(g.path)))
        details.update(grant=best.path, access=best.access, file=best.file)
        if op == "read" or best.access == "rw":
            return Decision(
                allowed=True, reason=f"allowed by the {best.describe()}{via}", rule=best.path,
                source=best.source, details=details,
                suggested=({"edit": "remove", "from": best.source, "value": best.path}
                           if best.source.startswith("sandbox.") else None),
            )
        if best.source.startswith("sandbox."):
            key = "write_files" if best.file else "write_dirs"
            suggested: dict[str, Any] | None = {
                "edit": "move", "from": best.source, "to": f"sandbox.{key}", "value": best.path}
        else:
            suggested = self._suggest_grant(target, op)
        return Decision(
            allowed=False,
            reason=f"denied: only the {best.describe()} covers {target}; nothing grants write{via}",
            rule=best.path,
            source=best.source,
            details=details,
            suggested=suggested,
        )

    def _suggest_grant(self, target: str, op: Op) -> dict[str, Any] | None:
        """The narrowest manifest grant that would allow `op` on `target` without reaching a
        denied path (None when there is none)."""
        mode = "write" if op != "read" else "read"
        if os.path.isfile(target):
            key, value = f"{mode}_files", target
        elif os.path.isdir(target):
            key, value = f"{mode}_dirs", target
        else:
            key, value = f"{mode}_dirs", os.path.dirname(target) or "/"
        if not key.endswith("_files") and any(
            is_within(d.path, value) or is_within(value, d.path) for d in self.denies
        ):
            if value == target or not os.path.isfile(target):
                return None
            key, value = f"{mode}_files", target
        if mode == "read" and any(
            g.access == "rw" and not g.file and g.covers(value) for g in self.grants
        ):
            return None  # a read-only grant there would be refused (it is writable anyway)
        return {"edit": "add", "to": f"sandbox.{key}", "value": value}

    def decide_net(self, host: str, port: int | None = None) -> Decision:
        """Would the confined process reach `host` (on TCP `port`, or on any port if None)?"""
        decision = self._decide_net(host, port)
        name = host.strip().strip("[]").rstrip(".").lower()
        details = {"host": name, "port": port, "tcp_ports": list(self.tcp_ports),
                   "network_block": self.network_block, **(decision.details or {})}
        return decision._replace(details=details)

    def _decide_net(self, host: str, port: int | None) -> Decision:
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
                source="sandbox.network.block",
                suggested={"edit": "set", "to": "sandbox.network.block", "value": True},
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
            source = ("proxy" if port == self.proxy_port and port not in self.localhost_ports
                      else "sandbox.network.localhost_ports")
            suggested = ({"edit": "remove", "from": source, "value": port}
                         if source != "proxy" else None)
            if loopback:
                return Decision(
                    allowed=True, reason=f"allowed: TCP port {port} is {what}", rule=str(port),
                    source=source, suggested=suggested,
                )
            return Decision(
                allowed=True,
                reason=f"allowed, by a known hole: TCP port {port} is {what}, and Landlock "
                "filters TCP connect() by port only, so that port is reachable on any address "
                "(a host name still needs DNS, which is blocked; an IP address does not)",
                rule=str(port),
                source=source,
                suggested=suggested,
                details={"known_hole": True},
            )
        if address is not None and (address.is_link_local or str(address) == "169.254.169.254"):
            return Decision(
                allowed=False,
                reason=f"denied: {name} is link-local (cloud metadata reach); only the proxy "
                "could reach it, and no allowed host or route names it",
                source="link-local",
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
                    source=f"sandbox.credentials.{route.name}",
                )
            return Decision(
                allowed=True,
                reason=f"allowed through agentstack's credential proxy only: HTTP requests to "
                f"{where} (route {route.name}) are forwarded to {route.upstream} with "
                f"secret:{route.secret} in the {route.header} header, when they carry the "
                f"phantom token of ${route.env}; no tunnel (CONNECT) to {name}, no direct TCP",
                rule=f"sandbox.credentials.{route.name}",
                source=f"sandbox.credentials.{route.name}",
                suggested={"edit": "remove", "from": f"sandbox.credentials.{route.name}"},
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
                    source="sandbox.network.allow_domains",
                )
            return Decision(
                allowed=True,
                reason=f"allowed through agentstack's proxy only (HTTPS_PROXY, with its token): "
                f"{name} matches {pattern!r} in sandbox.network.allow_domains; CONNECT to port "
                "443, plain HTTP to port 80; direct TCP is still blocked",
                rule=pattern,
                source="sandbox.network.allow_domains",
                suggested={"edit": "remove", "from": "sandbox.network.allow_domains",
                           "value": pattern},
            )
        if loopback:
            return Decision(
                allowed=False,
                reason=f"denied: TCP to localhost is allowed only on ports {port_text}"
                + (f", not {port}" if port is not None else "")
                + "; the proxy never tunnels to localhost; add the port to "
                "sandbox.network.localhost_ports",
                suggested=({"edit": "add", "to": "sandbox.network.localhost_ports",
                            "value": port} if port is not None else None),
            )
        if name in METADATA_NAMES:
            return Decision(allowed=False, reason=f"denied: {name} is a cloud metadata host",
                            source="metadata")
        return Decision(
            allowed=False,
            reason=f"denied: the network is blocked; direct TCP only to ports {port_text}, "
            f"and {name} is in neither sandbox.network.allow_domains nor a credential route; "
            "UDP, raw and packet sockets are blocked outright",
            suggested=({"edit": "add", "to": "sandbox.network.allow_domains", "value": name}
                       if address is None and port in (None, 80, 443) else None),
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
            landlock_abi=data.get("landlock_abi"),
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

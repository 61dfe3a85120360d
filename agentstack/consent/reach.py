"""What a setup can reach: one model, read by the boundary check and tested against the sandbox.

The consent document says what will run and what the model reads; this module turns it into the
*reach* of the setup, domain by domain, in a vocabulary that can be compared with a boundary:

* filesystem — every path the confined process may read or write beyond agentstack's own base
  profile (the project directory read-write, each `[sandbox]` grant); with the sandbox disabled,
  everything (and then every variable and every secret reach the unconfined harness too);
* network — every (host pattern, TCP port range) it may connect to: `allow_domains` and credential
  routes through the proxy, `localhost_ports` on *any* address (Landlock filters TCP by port only,
  as `agentstack why` says), everything when the network is not blocked;
* secrets — which secret reaches which process (server env and headers, credential routes);
* environment — which variable names reach which process (`sandbox.env`, server `env`);
* commands — what each server and hook executes: the program, the package a runner fetches and
  whether it is pinned, a shell given a script;
* servers — the hosts of remote MCP servers;
* permissions and settings — permission `allow` rules and passthrough keys handed to a harness;
* surface — what a harness also loads from the repository, undeclared, that runs a command, sets
  its environment, grants permissions, enables a server or names a file or host.

Anything in the document this module does not know (a new section, a new server field, a risk
fact it has no rule for) is recorded as *unsupported*, never dropped: a check over an incomplete
model must not pass. Skills and instructions are text for the model; they reach nothing by
themselves (what the model does with them is confined by the sandbox above).
"""

from __future__ import annotations

import ipaddress
import os
import posixpath
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from agentstack.sandbox.policy import normalise

HostKind = Literal["name", "suffix", "any", "ip", "ip-any"]
Op = Literal["read", "write"]
MAX_PORT = 65535

# Risk facts (agentstack.consent.risk) whose meaning the model below knows.
KNOWN_FACTS = frozenset(
    {"absolute-binary", "unpinned-package", "shell-command", "remote-host", "link-local",
     "plain-http", "unpinnable", "loader-env"}
)
KNOWN_SECTIONS = frozenset(
    {"consent", "project", "servers", "skills", "instructions", "hooks", "settings", "sandbox",
     "lock", "surface", "code_roots"}
)
# Facts of a harness-surface entry (agentstack.surface) that only describe what the model reads.
SURFACE_CONTENT_FACTS = frozenset({"model-reads", "setting"})
SERVER_FIELDS = frozenset(
    {"transport", "files", "roots", "risks", "command", "args", "cwd", "env", "url", "headers"}
)
HOOK_FIELDS = frozenset(
    {"event", "matcher", "timeout", "files", "roots", "risks", "script", "args", "command"}
)
SANDBOX_FIELDS = frozenset(
    {"enabled", "read_dirs", "write_dirs", "read_files", "write_files", "env", "network",
     "credentials", "risks"}
)
NETWORK_FIELDS = frozenset({"block", "allow_domains", "localhost_ports"})
SETTINGS_FIELDS = frozenset({"permissions", "passthrough"})


@dataclass(frozen=True, order=True)
class Host:
    """A set of hosts: one name, every name under a suffix (`*.example.com`, the apex excluded,
    as the proxy matches it), one address, every address, or everything."""

    kind: HostKind
    value: str = ""

    def __str__(self) -> str:
        if self.kind == "suffix":
            return f"*.{self.value}"
        if self.kind == "any":
            return "*"
        if self.kind == "ip-any":
            return "any address"
        return self.value

    def contains(self, other: Host) -> bool:
        """Every host in `other` is in `self` (exact, by the matching rules above)."""
        if self.kind == "any":
            return True
        if self.kind == "name":
            return other.kind == "name" and other.value == self.value
        if self.kind == "suffix":
            if other.kind == "name":
                return other.value.endswith("." + self.value)
            if other.kind == "suffix":
                return other.value == self.value or other.value.endswith("." + self.value)
            return False
        if self.kind == "ip":
            return other.kind == "ip" and other.value == self.value
        return other.kind == "ip-any"  # ip-any contains only itself (never a name)

    def matches(self, name: str) -> bool:
        """A concrete host (a name or an address literal) is in this set."""
        return self.contains(parse_host(name))


def parse_host(text: str) -> Host:
    """`*`, `*.suffix`, an IP address literal, or a host name (lower-cased, no trailing dot)."""
    value = text.strip().strip("[]").rstrip(".").lower()
    if not value:
        raise ValueError("empty host")
    if value == "*":
        return Host("any")
    if value.startswith("*."):
        rest = value[2:]
        if not rest or "*" in rest:
            raise ValueError(f"{text!r}: only a leading '*.' is supported in a host pattern")
        return Host("suffix", rest)
    if "*" in value:
        raise ValueError(f"{text!r}: only a leading '*.' is supported in a host pattern")
    try:
        return Host("ip", str(ipaddress.ip_address(value)))
    except ValueError:
        return Host("name", value)


@dataclass(frozen=True)
class Endpoint:
    host: Host
    low: int
    high: int
    source: str

    def ports(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


@dataclass(frozen=True)
class FsGrant:
    op: Op
    path: str  # resolved (symbolic links followed as far as the path exists)
    literal: str  # as written, made absolute without following links
    file: bool
    source: str


@dataclass(frozen=True)
class SecretFlow:
    secret: str  # a secret's name, or `*`: every secret
    process: str  # "servers.NAME", "sandbox.credentials.NAME", or "harness" (unconfined)


@dataclass(frozen=True)
class EnvFlow:
    name: str  # a variable name, or `*`: every variable (an unconfined harness)
    process: str  # "sandbox" for the confined harness, or "servers.NAME"


@dataclass(frozen=True)
class Command:
    process: str  # "servers.NAME" / "hooks.NAME"
    argv: tuple[str, ...]
    facts: tuple[str, ...]
    package: tuple[str, str, bool] | None  # (ecosystem, package, pinned) a runner fetches


@dataclass(frozen=True)
class SurfaceEntry:
    """Something a harness loads from the repository that agentstack.toml does not declare, and
    that runs, sets the environment, grants, enables or names something (its first such fact)."""

    path: str
    fact: str


@dataclass(frozen=True)
class Unsupported:
    domain: str
    what: str
    reason: str


@dataclass(frozen=True)
class Reach:
    fs: tuple[FsGrant, ...] = ()
    network: tuple[Endpoint, ...] = ()
    secrets: tuple[SecretFlow, ...] = ()
    env: tuple[EnvFlow, ...] = ()
    commands: tuple[Command, ...] = ()
    remotes: tuple[Endpoint, ...] = ()
    permissions: tuple[str, ...] = ()
    passthrough: tuple[tuple[str, str], ...] = ()
    surface: tuple[SurfaceEntry, ...] = ()
    unsupported: tuple[Unsupported, ...] = field(default=())


def _secret(source: Any) -> str | None:
    return source.get("secret") if isinstance(source, dict) else None


def url_endpoint(url: str, source: str) -> Endpoint:
    parts = urlsplit(url)
    port = parts.port or (80 if parts.scheme == "http" else 443)
    return Endpoint(parse_host(parts.hostname or ""), port, port, source)


def _command(process: str, argv: list[str], facts: list[str]) -> Command:
    from agentstack.lock.facts import runner_package

    return Command(process, tuple(argv), tuple(facts), runner_package(argv))


def _facts(
    process: str, facts: Any, unsupported: list[Unsupported]
) -> list[str]:
    out = [str(f) for f in facts or []]
    for fact in out:
        if fact.split(":", 1)[0] not in KNOWN_FACTS:
            unsupported.append(
                Unsupported("commands", f"{process}: {fact}",
                            "a risk fact the boundary check has no rule for")
            )
    return out


def _unknown(domain: str, where: str, keys: Any, known: frozenset[str],
             unsupported: list[Unsupported]) -> None:
    for key in sorted(set(keys) - known):
        unsupported.append(
            Unsupported(domain, f"{where}.{key}", "a field the boundary check does not model")
        )


def _op(value: str) -> Op:
    return "write" if value == "write" else "read"


def build_reach(document: dict[str, Any], root: str | None, home: str) -> Reach:
    """The reach of one consent document for a project at `root` of a user whose home is `home`.
    `root` None: where the project will live is not known yet (a bundle in quarantine); its own
    directory and every grant relative to it are then unsupported, never assumed."""
    unsupported: list[Unsupported] = []
    _unknown("document", "consent", document, KNOWN_SECTIONS, unsupported)
    fs: list[FsGrant] = []
    network: list[Endpoint] = []
    secrets: list[SecretFlow] = []
    env: list[EnvFlow] = []
    commands: list[Command] = []
    remotes: list[Endpoint] = []

    for name, server in sorted(document.get("servers", {}).items()):
        process = f"servers.{name}"
        _unknown("servers", process, server, SERVER_FIELDS, unsupported)
        facts = _facts(process, server.get("risks"), unsupported)
        if server.get("command") is not None:
            commands.append(
                _command(process, [server["command"], *server.get("args", [])], facts)
            )
            for key, source in sorted(server.get("env", {}).items()):
                env.append(EnvFlow(key, process))
                if (secret := _secret(source)) is not None:
                    secrets.append(SecretFlow(secret, process))
        if server.get("url") is not None:
            try:
                remotes.append(url_endpoint(server["url"], f"{process}.url"))
            except ValueError as exc:
                unsupported.append(Unsupported("servers", f"{process}.url", str(exc)))
            for source in server.get("headers", {}).values():
                if (secret := _secret(source)) is not None:
                    secrets.append(SecretFlow(secret, process))

    for name, hook in sorted(document.get("hooks", {}).items()):
        process = f"hooks.{name}"
        _unknown("commands", process, hook, HOOK_FIELDS, unsupported)
        facts = _facts(process, hook.get("risks"), unsupported)
        if hook.get("script") is not None:
            argv = [hook["script"], *hook.get("args", [])]
        else:
            argv = list(hook.get("command") or [])
        commands.append(_command(process, argv, facts))

    settings = document.get("settings", {})
    _unknown("settings", "settings", settings, SETTINGS_FIELDS, unsupported)
    permissions = tuple(settings.get("permissions", {}).get("allow", []))
    passthrough = tuple(
        (harness, key)
        for harness, table in sorted(settings.get("passthrough", {}).items())
        for key in sorted(table)
    )

    sandbox = document.get("sandbox", {})
    _unknown("sandbox", "sandbox", sandbox, SANDBOX_FIELDS, unsupported)
    workdir = os.path.realpath(root) if root is not None else None
    if not sandbox.get("enabled", True):
        fs.append(FsGrant("write", "/", "/", False, "sandbox.enabled = false"))
        network.append(Endpoint(Host("any"), 1, MAX_PORT, "sandbox.enabled = false"))
        network.append(Endpoint(Host("ip-any"), 1, MAX_PORT, "sandbox.enabled = false"))
        # Unconfined, the harness gets the whole environment and can read every secret store.
        env.append(EnvFlow("*", "sandbox"))
        secrets.append(SecretFlow("*", "harness"))
        for name in sandbox.get("env", []):
            env.append(EnvFlow(name, "sandbox"))
    else:
        if root is None or workdir is None:
            unsupported.append(Unsupported(
                "filesystem", "the project (workdir)",
                "where the project will live is not known until it is released; check with "
                "--into DIR, or after release with 'agentstack check'"))
        else:
            fs.append(
                FsGrant("write", workdir, os.path.abspath(root), False, "the project (workdir)")
            )
        for key, op, is_file in (
            ("read_dirs", "read", False),
            ("write_dirs", "write", False),
            ("read_files", "read", True),
            ("write_files", "write", True),
        ):
            for index, item in enumerate(sandbox.get(key, [])):
                if item.startswith("~") and not (item == "~" or item.startswith("~/")):
                    unsupported.append(Unsupported(
                        "filesystem", f"sandbox.{key}[{index}]",
                        f"{item!r}: another user's home directory is not modelled"))
                    continue
                expanded = home + item[1:] if item.startswith("~") else item
                if workdir is None and not posixpath.isabs(expanded):
                    unsupported.append(Unsupported(
                        "filesystem", f"sandbox.{key}[{index}]",
                        f"{item!r} is relative to where the project will be released"))
                    continue
                literal = posixpath.normpath(posixpath.join(workdir or "/", expanded))
                fs.append(
                    FsGrant(_op(op), normalise(literal, workdir or "/"), literal, is_file,
                            f"sandbox.{key}[{index}]")
                )
        net = sandbox.get("network", {})
        _unknown("network", "sandbox.network", net, NETWORK_FIELDS, unsupported)
        if not net.get("block", True):
            network.append(Endpoint(Host("any"), 1, MAX_PORT, "sandbox.network.block = false"))
            network.append(
                Endpoint(Host("ip-any"), 1, MAX_PORT, "sandbox.network.block = false")
            )
        for index, pattern in enumerate(net.get("allow_domains", [])):
            source = f"sandbox.network.allow_domains[{index}]"
            try:
                # The proxy tunnels (CONNECT) to port 443 and forwards plain HTTP to port 80.
                host = parse_host(pattern)
            except ValueError as exc:
                unsupported.append(Unsupported("network", source, str(exc)))
            else:
                network.append(Endpoint(host, 80, 80, source))
                network.append(Endpoint(host, 443, 443, source))
        for index, port in enumerate(net.get("localhost_ports", [])):
            source = f"sandbox.network.localhost_ports[{index}]"
            network.append(Endpoint(Host("name", "localhost"), port, port, source))
            # Landlock filters TCP connect() by port only: that port on any address.
            network.append(Endpoint(Host("ip-any"), port, port, source))
        for name, route in sorted(sandbox.get("credentials", {}).items()):
            source = f"sandbox.credentials.{name}"
            try:
                upstream = url_endpoint(route["upstream"], source)
            except ValueError as exc:
                unsupported.append(Unsupported("network", source, str(exc)))
            else:
                # The proxy forwards the route's requests to its upstream's port only.
                network.append(upstream)
            secrets.append(SecretFlow(route["secret"], source))
        for name in sandbox.get("env", []):
            env.append(EnvFlow(name, "sandbox"))
        for fact in sandbox.get("risks", []):
            if str(fact).split(":", 1)[0] not in KNOWN_FACTS:
                unsupported.append(
                    Unsupported("network", f"sandbox: {fact}",
                                "a risk fact the boundary check has no rule for")
                )

    surface: list[SurfaceEntry] = []
    for rel, entry in sorted((document.get("surface") or {}).items()):
        from agentstack.surface.scan import HIGH_CODES as SURFACE_HIGH

        for fact in entry.get("facts", []):
            code = str(fact).split(":", 1)[0]
            if code in SURFACE_HIGH:
                surface.append(SurfaceEntry(rel, str(fact)))
                break
            if code not in SURFACE_CONTENT_FACTS:
                unsupported.append(
                    Unsupported("surface", f"surface[{rel}]: {fact}",
                                "a surface fact the boundary check has no rule for")
                )

    return Reach(
        fs=tuple(fs),
        network=tuple(network),
        secrets=tuple(secrets),
        env=tuple(env),
        commands=tuple(commands),
        remotes=tuple(remotes),
        permissions=permissions,
        passthrough=passthrough,
        surface=tuple(surface),
        unsupported=tuple(unsupported),
    )

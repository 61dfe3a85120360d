"""The boundary check: does a setup reach anything beyond what a boundary permits?

A boundary (`boundary.toml`: the user's at `$AGENTSTACK_HOME/boundary.toml`, or a team's passed
with `--boundary`) is the most an environment permits, in the vocabulary of `agentstack.consent.reach`.
Everything it does not list is not permitted: an empty boundary permits only the project
directory itself... and not even that unless `filesystem.write` covers it.

The answer is one of four, never a silent pass, and every domain (`DOMAINS`) is answered:

* `within_boundary` — every access the setup can make is permitted;
* `exceeds_boundary` — with one concrete counterexample per violated domain: an access the setup
  allows and the boundary does not (`filesystem write /home/u/Code/other`,
  `network connect evil.example:443`, `secret github-token reaches servers.docs`,
  `servers.github runs npx @x/y@latest`);
* `unsupported` — something the check does not model or cannot decide (a glob in a boundary path,
  a grant whose containment depends on a symbolic link, an address against host names), with the
  reason;
* `inconclusive` — past the check's limits (`LIMITS`: boundary rules, accesses of the setup, a time
  budget) it does not decide; it says which limit and which domains it covered.

Indexes keep the work linear: paths are looked up by their ancestors, hosts by their name, their
dot-suffixes and their address, names by their prefixes, port ranges by bisection.

The procedure is exact over the shapes it accepts: path prefixes (a directory grant is within the
boundary iff one boundary prefix contains it — a finite set of deeper prefixes never covers a whole
subtree), host patterns (`name`, `*.suffix`, an address, `*`) with containment decided on their
structure, and TCP port ranges (the union of the ranges of every boundary rule whose host pattern
contains the candidate's must cover its range). Secrets, environment names, programs, permissions
and passthrough keys are finite sets compared by exact names or a trailing-`*` prefix.
docs/adr/0009-exact-boundary-check.md says why this and not an SMT solver.
"""

from __future__ import annotations

import bisect
import itertools
import os
import posixpath
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentstack import layout
from agentstack.consent.reach import (
    MAX_PORT,
    Endpoint,
    FsGrant,
    Host,
    Reach,
    Unsupported,
    parse_host,
)
from agentstack.errors import InvalidInput

BOUNDARY_NAME = layout.BOUNDARY
GLOB_CHARS = frozenset("*?[")
Result = Literal["within_boundary", "exceeds_boundary", "unsupported", "inconclusive"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class FilesystemBoundary(_Model):
    """Path prefixes (absolute or `~/…`): `write` permits read and write, `read` permits read."""

    read: list[str] = Field(default_factory=list)
    write: list[str] = Field(default_factory=list)


class NetworkBoundary(_Model):
    """`HOST[:PORTS]`: HOST is a name, `*.suffix`, an address or `*`; PORTS is `443`,
    `8000-8100` or `*` (the default: every port)."""

    connect: list[str] = Field(default_factory=list)


class EnvironmentBoundary(_Model):
    """Variable names (or `PREFIX*`) that may reach the confined harness / a server."""

    sandbox: list[str] = Field(default_factory=list)
    servers: list[str] = Field(default_factory=list)


class CommandsBoundary(_Model):
    """Programs servers and hooks may run (a bare name as written, an exact path, `DIR/*`, or
    `*`), packages a runner may fetch (`npm:@scope/*`, `pypi:name`), and whether an unpinned
    package, a shell given a script, code agentstack cannot pin, or a loader variable
    (`PYTHONPATH`, `LD_PRELOAD`, …) is permitted."""

    executables: list[str] = Field(default_factory=list)
    packages: list[str] = Field(default_factory=list)
    unpinned: bool = False
    shell: bool = False
    unpinnable: bool = False
    loader_env: bool = False


class ServersBoundary(_Model):
    """Hosts remote MCP servers may be (`HOST[:PORTS]` as in `network.connect`)."""

    remote: list[str] = Field(default_factory=list)


class PermissionsBoundary(_Model):
    """Permission `allow` rules a setup may grant (exact rules, or `*`)."""

    allow: list[str] = Field(default_factory=list)


class SettingsBoundary(_Model):
    """Passthrough keys per harness (`*` for any harness or any key)."""

    passthrough: dict[str, list[str]] = Field(default_factory=dict)


class SurfaceBoundary(_Model):
    """Paths (or `PREFIX*`) of undeclared harness-surface entries that may run, set the
    environment, grant, enable or name something (see docs/surface.md)."""

    executing: list[str] = Field(default_factory=list)


class BoundaryFile(_Model):
    """`boundary.toml`: the most a setup may reach. What is not listed is not permitted."""

    boundary: Annotated[int, Field(ge=1, le=1)] = 1
    filesystem: FilesystemBoundary = Field(default_factory=FilesystemBoundary)
    network: NetworkBoundary = Field(default_factory=NetworkBoundary)
    secrets: dict[str, list[str]] = Field(
        default_factory=dict,
        description="secret name (or `*`) -> processes it may reach: `servers.NAME`, "
        "`servers.*`, `sandbox.credentials.NAME`, `*`",
    )
    environment: EnvironmentBoundary = Field(default_factory=EnvironmentBoundary)
    commands: CommandsBoundary = Field(default_factory=CommandsBoundary)
    servers: ServersBoundary = Field(default_factory=ServersBoundary)
    permissions: PermissionsBoundary = Field(default_factory=PermissionsBoundary)
    settings: SettingsBoundary = Field(default_factory=SettingsBoundary)
    surface: SurfaceBoundary = Field(default_factory=SurfaceBoundary)


# ------------------------------------------------------------------------- compiled form


@dataclass(frozen=True)
class Rule:
    host: Host
    low: int
    high: int
    text: str


@dataclass(frozen=True)
class Boundary:
    """A boundary compiled for checking (paths absolute and resolved, host rules parsed)."""

    source: str
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    globs: tuple[str, ...] = ()
    connect: tuple[Rule, ...] = ()
    remote: tuple[Rule, ...] = ()
    secrets: tuple[tuple[str, tuple[str, ...]], ...] = ()
    env_sandbox: tuple[str, ...] = ()
    env_servers: tuple[str, ...] = ()
    executables: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    unpinned: bool = False
    shell: bool = False
    unpinnable: bool = False
    loader_env: bool = False
    permissions: tuple[str, ...] = ()
    passthrough: tuple[tuple[str, tuple[str, ...]], ...] = ()
    surface: tuple[str, ...] = ()


def parse_ports(text: str) -> tuple[int, int]:
    if text == "*":
        return 1, MAX_PORT
    low, sep, high = text.partition("-")
    if not low.isdigit() or (sep and not high.isdigit()):
        raise ValueError(f"{text!r} is not a port, a range LOW-HIGH or *")
    lo, hi = int(low), int(high) if sep else int(low)
    if not 1 <= lo <= hi <= MAX_PORT:
        raise ValueError(f"{text!r} is not within 1-{MAX_PORT}")
    return lo, hi


def parse_endpoint_rule(text: str) -> Rule:
    """`HOST[:PORTS]`; an IPv6 address takes brackets (`[::1]:8080`)."""
    value = text.strip()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            raise ValueError(f"{text!r}: unclosed '['")
        host, rest = value[1:end], value[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"{text!r}: expected ':' after ']'")
        ports = rest[1:] if rest else "*"
    elif value.count(":") == 1:
        host, ports = value.split(":")
    else:
        host, ports = value, "*"
    lo, hi = parse_ports(ports)
    return Rule(parse_host(host), lo, hi, text)


def _path(text: str, home: str, where: str, parents: dict[str, str] | None = None) -> str:
    """The resolved prefix. `parents` caches resolved parent directories across one file's
    paths: a normalised path resolves as its resolved parent joined with its last component,
    unless that component is itself a symbolic link."""
    if text == "~" or text.startswith("~/"):
        text = home + text[1:]
    if not posixpath.isabs(text):
        raise ValueError(f"{where}: {text!r} must be absolute or start with '~/'")
    literal = posixpath.normpath(text)
    if literal.startswith("//"):
        literal = "/" + literal.lstrip("/")
    parent, leaf = posixpath.split(literal)
    if parents is None or not leaf:
        return os.path.realpath(literal)
    if parent not in parents:
        parents[parent] = os.path.realpath(parent)
    joined = posixpath.join(parents[parent], leaf)
    return os.path.realpath(joined) if os.path.islink(joined) else joined


def compile_boundary(data: BoundaryFile, *, home: str, source: str) -> Boundary:
    problems: list[str] = []
    read: list[str] = []
    write: list[str] = []
    globs: list[str] = []
    parents: dict[str, str] = {}
    for key, out in (("read", read), ("write", write)):
        for index, item in enumerate(getattr(data.filesystem, key)):
            where = f"filesystem.{key}[{index}]"
            if GLOB_CHARS & set(item):
                globs.append(item)
                continue
            try:
                out.append(_path(item, home, where, parents))
            except ValueError as exc:
                problems.append(str(exc))

    def rules(items: list[str], where: str) -> tuple[Rule, ...]:
        out: list[Rule] = []
        for index, item in enumerate(items):
            try:
                out.append(parse_endpoint_rule(item))
            except ValueError as exc:
                problems.append(f"{where}[{index}]: {exc}")
        return tuple(out)

    connect = rules(data.network.connect, "network.connect")
    remote = rules(data.servers.remote, "servers.remote")
    if problems:
        raise InvalidInput(
            f"{source}: " + "; ".join(problems),
            hint="see docs/boundary.md for the boundary file's vocabulary",
        )
    return Boundary(
        source=source,
        read=tuple(read),
        write=tuple(write),
        globs=tuple(globs),
        connect=connect,
        remote=remote,
        secrets=tuple((k, tuple(v)) for k, v in sorted(data.secrets.items())),
        env_sandbox=tuple(data.environment.sandbox),
        env_servers=tuple(data.environment.servers),
        executables=tuple(data.commands.executables),
        packages=tuple(data.commands.packages),
        unpinned=data.commands.unpinned,
        shell=data.commands.shell,
        unpinnable=data.commands.unpinnable,
        loader_env=data.commands.loader_env,
        permissions=tuple(data.permissions.allow),
        passthrough=tuple((k, tuple(v)) for k, v in sorted(data.settings.passthrough.items())),
        surface=tuple(data.surface.executing),
    )


def parse_boundary(text: bytes, *, home: str, source: str) -> Boundary:
    import tomllib

    from pydantic import ValidationError

    try:
        raw = tomllib.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput(f"{source}: not valid TOML ({exc})") from None
    try:
        data = BoundaryFile.model_validate(raw)
    except ValidationError as exc:
        lines = [
            f"{source}: {'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}"
            for err in exc.errors()
        ]
        raise InvalidInput(
            "\n".join(lines), hint="see docs/boundary.md for the boundary file's vocabulary"
        ) from None
    return compile_boundary(data, home=home, source=source)


def load_boundary(path: Path, *, home: str) -> Boundary:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such boundary file") from None
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot be read ({exc.strerror})") from None
    return parse_boundary(data, home=home, source=str(path))


def user_boundary_path() -> Path:
    from agentstack.paths import agentstack_home

    return agentstack_home() / BOUNDARY_NAME


# ------------------------------------------------------------------------- the check

# Every domain the check answers, in the order it answers them. `document` stands for the consent
# document's own shape: a section or field the check does not model makes it `unsupported`.
DOMAINS = ("document", "filesystem", "network", "secrets", "environment", "commands", "servers",
           "permissions", "settings", "surface")
Status = Literal["within", "exceeds", "unsupported", "inconclusive"]
UNCONFINED = "the unconfined harness"


@dataclass(frozen=True)
class Limits:
    """Past these the check does not decide: the answer is `inconclusive` (never a pass).
    `rules`: entries of the boundary file, every list item counted; `accesses`: what the setup
    reaches (paths, endpoints, secret flows, variables, commands, rules and keys); `seconds`:
    the time the check may take before it stops where it is."""

    rules: int = 16_384
    accesses: int = 16_384
    seconds: float = 5.0


LIMITS = Limits()


@dataclass(frozen=True)
class Violation:
    domain: str
    counterexample: str
    source: str

    def to_json(self) -> dict[str, str]:
        return {"domain": self.domain, "counterexample": self.counterexample,
                "source": self.source}


@dataclass(frozen=True)
class CheckResult:
    result: Result
    boundary: str
    violations: tuple[Violation, ...] = ()
    unsupported: tuple[Unsupported, ...] = ()
    counts: tuple[tuple[str, int], ...] = field(default=())
    domains: tuple[tuple[str, Status], ...] = field(default=())
    inconclusive: str | None = None
    covered: tuple[str, ...] = ()  # the domains answered in full (within or beyond it)

    def to_json(self) -> dict[str, Any]:
        return {
            "result": self.result,
            "boundary": self.boundary,
            "violations": [v.to_json() for v in self.violations],
            "violations_per_domain": dict(self.counts),
            "unsupported": [
                {"domain": u.domain, "what": u.what, "reason": u.reason}
                for u in self.unsupported
            ],
            "domains": dict(self.domains),
            "coverage": {"domains": list(self.covered)},
            "inconclusive": self.inconclusive,
        }


class _OutOfTime(Exception):
    pass


class _Names:
    """Names and `PREFIX*` patterns, looked up by the name (exact) and its prefixes."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.exact: set[str] = set()
        self.prefixes: set[str] = set()
        for pattern in patterns:
            if pattern.endswith("*"):
                self.prefixes.add(pattern[:-1])
            else:
                self.exact.add(pattern)
        self.lengths = sorted({len(p) for p in self.prefixes})

    def matches(self, name: str) -> bool:
        if name in self.exact:
            return True
        for n in self.lengths:
            if n > len(name):
                return False
            if name[:n] in self.prefixes:
                return True
        return False

    def covers(self, pattern: str) -> bool:
        """Every name `pattern` stands for (one name, or every `PREFIX*` name) matches."""
        if not pattern.endswith("*"):
            return self.matches(pattern)
        stem = pattern[:-1]
        return any(stem[:n] in self.prefixes for n in self.lengths if n <= len(stem))

    def witness(self, pattern: str, first: Iterable[str] = ()) -> str:
        """A name `pattern` stands for that does not match (`covers(pattern)` is false)."""
        if not pattern.endswith("*"):
            return pattern
        stem = pattern[:-1]
        for name in first:
            if name.startswith(stem) and not self.matches(name):
                return name
        # No prefix that contains `stem` exists, so a next character that starts no longer
        # prefix gives a name no prefix matches; a counter keeps it off the exact names.
        taken = {p[len(stem)] for p in self.prefixes if len(p) > len(stem) and p.startswith(stem)}
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz0123456789"
        head = next((c for c in alphabet if c not in taken), None)
        if head is None:
            head = next(chr(n) for n in range(0x100, 0x110000) if chr(n) not in taken)
        index = 0
        while (name := f"{stem}{head}{index}") in self.exact:
            index += 1
        return name


class _Prefixes:
    """Directory prefixes, looked up by walking a path's ancestors."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.paths = frozenset(paths)

    def covers(self, path: str) -> bool:
        while True:
            if path in self.paths:
                return True
            if path in ("/", ""):
                return False
            path = posixpath.dirname(path)


class _Ranges:
    """A union of port ranges, merged, searched by bisection."""

    def __init__(self, ranges: Iterable[tuple[int, int]]) -> None:
        merged: list[list[int]] = []
        for lo, hi in sorted(ranges):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self.starts = [m[0] for m in merged]
        self.ends = [m[1] for m in merged]

    def end_of(self, point: int) -> int | None:
        """The last port of the merged range holding `point`, or None."""
        index = bisect.bisect_right(self.starts, point) - 1
        if index >= 0 and self.ends[index] >= point:
            return self.ends[index]
        return None


_NO_RANGES = _Ranges(())


def _first_uncovered(low: int, high: int, unions: list[_Ranges]) -> int | None:
    """The first port of low..high that none of `unions` holds (None: all are held)."""
    point = low
    while True:
        moved = False
        for union in unions:
            end = union.end_of(point)
            if end is not None:
                point, moved = end + 1, True
                if point > high:
                    return None
        if not moved:
            return point


def _dot_suffixes(name: str) -> Iterator[str]:
    """`a.b.c` -> `b.c`, `c`: the suffixes a `*.suffix` rule must have to contain `name`."""
    start = name.find(".")
    while start >= 0:
        yield name[start + 1 :]
        start = name.find(".", start + 1)


class _Hosts:
    """Host rules indexed by kind and value: the rules containing a host set are found from the
    host (its name, its dot-suffixes, its address) instead of by comparing it with every rule."""

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        grouped: dict[tuple[str, str], list[tuple[int, int]]] = {}
        named: list[tuple[int, int]] = []
        for rule in rules:
            grouped.setdefault((rule.host.kind, rule.host.value), []).append((rule.low, rule.high))
            if rule.host.kind in ("name", "suffix"):
                named.append((rule.low, rule.high))
        self.by_key = {key: _Ranges(ranges) for key, ranges in grouped.items()}
        self.names = sum(1 for kind, _ in grouped if kind == "name")
        self.named = _Ranges(named)
        self.any = self.by_key.get(("any", ""), _NO_RANGES)

    def covering(self, host: Host) -> list[_Ranges]:
        """The port unions of every rule whose host pattern contains `host` (as Host.contains)."""
        keys: list[tuple[str, str]] = [("any", "")]
        if host.kind == "name":
            keys.append(("name", host.value))
            keys += [("suffix", s) for s in _dot_suffixes(host.value)]
        elif host.kind == "suffix":
            keys.append(("suffix", host.value))
            keys += [("suffix", s) for s in _dot_suffixes(host.value)]
        elif host.kind == "ip":
            keys.append(("ip", host.value))
        return [self.by_key[k] for k in keys if k in self.by_key]

    def permits(self, host: Host, port: int) -> bool:
        return any(u.end_of(port) is not None for u in self.covering(host))


def _candidates(host: Host, names: int) -> Iterator[str]:
    if host.kind == "suffix":
        yield from (f"h{i}.{host.value}" for i in itertools.count())
    elif host.kind == "any":
        yield from (f"h{i}.n{i}.example" for i in range(names + 1))
        yield from (f"h{i}" for i in itertools.count())  # a single label: no suffix rule has it
    else:  # ip-any: documentation addresses (RFC 5737, then RFC 3849)
        for net in ("192.0.2", "198.51.100", "203.0.113"):
            yield from (f"{net}.{i}" for i in range(1, 255))
        yield from (f"2001:db8::{i:x}" for i in itertools.count(1))


def _generic(host: Host, index: _Hosts, port: int) -> str:
    """A concrete host of `host` that no boundary rule permits on `port`, given that the rules
    containing `host` leave `port` uncovered. One exists: under a suffix only an exact name rule
    can permit a fresh name, a single label only a name rule, an address only its own rule."""
    if host.kind in ("name", "ip"):
        return host.value
    for candidate in _candidates(host, index.names):
        if not index.permits(parse_host(candidate), port):
            return candidate
    raise AssertionError("unreachable: the candidates are infinite")  # pragma: no cover


def _endpoint(
    endpoint: Endpoint, index: _Hosts, domain: str, verb: str
) -> Violation | Unsupported | None:
    port = _first_uncovered(endpoint.low, endpoint.high, index.covering(endpoint.host))
    if port is None:
        return None
    if endpoint.host.kind == "ip" and index.named.end_of(port) is not None:
        return Unsupported(
            domain, f"{endpoint.source}: {endpoint.host}:{port}",
            "an address against host names: whether a permitted name resolves to this address "
            "cannot be decided offline",
        )
    host = _generic(endpoint.host, index, port)
    shown = f"[{host}]" if ":" in host else host
    return Violation(domain, f"{verb} {shown}:{port}", endpoint.source)


class _Programs:
    """`*`, exact programs as written, and `DIR/*` (one level under DIR)."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.exact: set[str] = set()
        self.dirs: set[str] = set()
        for pattern in patterns:
            self.exact.add(pattern)
            if pattern.endswith("/*"):
                self.dirs.add(pattern[:-2])
        self.star = "*" in self.exact

    def matches(self, program: str) -> bool:
        if self.star or program in self.exact:
            return True
        parent, sep, rest = program.rpartition("/")
        return bool(sep) and bool(rest) and parent in self.dirs


def _fs(grant: FsGrant, boundary: Boundary, prefixes: _Prefixes) -> Violation | Unsupported | None:
    if prefixes.covers(grant.path):
        if grant.path != grant.literal and not prefixes.covers(grant.literal):
            return Unsupported(
                "filesystem", f"{grant.source}: {grant.literal}",
                f"containment depends on a symbolic link ({grant.literal} -> {grant.path})",
            )
        return None
    if boundary.globs:
        return Unsupported(
            "filesystem", f"{grant.source}: {grant.op} {grant.path}",
            "the boundary has glob paths (" + ", ".join(boundary.globs) + "), which the check "
            "cannot compare; write them as directory prefixes",
        )
    if grant.path != grant.literal:
        return Unsupported(
            "filesystem", f"{grant.source}: {grant.literal}",
            f"containment depends on a symbolic link ({grant.literal} -> {grant.path})",
        )
    return Violation("filesystem", f"filesystem {grant.op} {grant.path}", grant.source)


def _check_commands(
    reach: Reach, boundary: Boundary, tick: Callable[[], None]
) -> list[Violation]:
    import shlex

    programs = _Programs(boundary.executables)
    packages = _Names(boundary.packages)
    out: list[Violation] = []
    for command in reach.commands:
        tick()
        if not command.argv:
            continue
        line = shlex.join(command.argv)
        if not programs.matches(command.argv[0]):
            out.append(Violation("commands", f"{command.process} runs {line}", command.process))
            continue
        if command.package is not None:
            ecosystem, package, pinned = command.package
            if not pinned and not boundary.unpinned:
                out.append(
                    Violation("commands", f"{command.process} runs {line} (unpinned "
                              f"{ecosystem} package {package})", command.process)
                )
                continue
            if not packages.matches(f"{ecosystem}:{package}"):
                out.append(
                    Violation("commands", f"{command.process} runs {line} ({ecosystem} "
                              f"package {package})", command.process)
                )
                continue
        if not boundary.shell and any(f.startswith("shell-command:") for f in command.facts):
            out.append(
                Violation("commands", f"{command.process} runs {line} (a shell given a script)",
                          command.process)
            )
            continue
        unpinnable = [f for f in command.facts if f.startswith("unpinnable:")]
        if unpinnable and not boundary.unpinnable:
            out.append(
                Violation("commands", f"{command.process} runs code agentstack cannot pin: "
                          f"{unpinnable[0].split(':', 1)[1]}", command.process)
            )
            continue
        loader = [f.split(":", 1)[1] for f in command.facts if f.startswith("loader-env:")]
        if loader and not boundary.loader_env:
            out.append(
                Violation("commands", f"{command.process} sets loader variable {loader[0]}",
                          command.process)
            )
    return out


def _process_name(process: str) -> str:
    return UNCONFINED if process == "harness" else process


def _check_secrets(
    reach: Reach, boundary: Boundary, tick: Callable[[], None]
) -> list[Violation]:
    keys = _Names(name for name, _ in boundary.secrets)
    exact: dict[str, _Names] = {}
    prefixed: dict[str, _Names] = {}
    for name, processes in boundary.secrets:
        table = prefixed if name.endswith("*") else exact
        table[name.rstrip("*") if name.endswith("*") else name] = _Names(processes)

    def tables(secret: str) -> list[_Names]:
        """The process patterns of every key containing `secret` (a name, or PREFIX*)."""
        stem = secret[:-1] if secret.endswith("*") else secret
        found = [] if secret.endswith("*") else [exact[secret]] if secret in exact else []
        found += [prefixed[stem[:n]] for n in keys.lengths
                  if n <= len(stem) and stem[:n] in prefixed]
        return found

    out: list[Violation] = []
    for flow in reach.secrets:
        tick()
        if any(t.matches(flow.process) for t in tables(flow.secret)):
            continue
        name = flow.secret
        if name.endswith("*"):
            # A secret no key permitting this process covers: the keys that do, as names.
            allowing = _Names(k for k, procs in boundary.secrets
                              if _Names(procs).matches(flow.process))
            name = allowing.witness(name, ("github-token", "anthropic-api-key"))
        out.append(Violation(
            "secrets", f"secret {name} reaches {_process_name(flow.process)}",
            "sandbox.enabled = false" if flow.process == "harness" else flow.process))
    return out


def _check_environment(
    reach: Reach, boundary: Boundary, tick: Callable[[], None]
) -> list[Violation]:
    sandbox, servers = _Names(boundary.env_sandbox), _Names(boundary.env_servers)
    out: list[Violation] = []
    for env in reach.env:
        tick()
        names = sandbox if env.process == "sandbox" else servers
        if names.covers(env.name):
            continue
        if env.name.endswith("*"):
            shown = names.witness(env.name, ("HOME", "PATH", "SSH_AUTH_SOCK", "AWS_SECRET_KEY"))
            where, source = UNCONFINED, "sandbox.enabled = false"
        else:
            shown = env.name
            where = "the confined harness" if env.process == "sandbox" else env.process
            source = "sandbox.env" if env.process == "sandbox" else f"{env.process}.env"
        out.append(Violation("environment", f"environment {shown} reaches {where}", source))
    return out


def rule_count(boundary: Boundary) -> int:
    """Every entry of the boundary file (each list item, each secret's process)."""
    return (len(boundary.read) + len(boundary.write) + len(boundary.globs)
            + len(boundary.connect) + len(boundary.remote)
            + sum(1 + len(procs) for _, procs in boundary.secrets)
            + len(boundary.env_sandbox) + len(boundary.env_servers)
            + len(boundary.executables) + len(boundary.packages) + len(boundary.permissions)
            + sum(1 + len(keys) for _, keys in boundary.passthrough) + len(boundary.surface))


def access_count(reach: Reach) -> int:
    return (len(reach.fs) + len(reach.network) + len(reach.remotes) + len(reach.secrets)
            + len(reach.env) + len(reach.commands) + len(reach.permissions)
            + len(reach.passthrough) + len(reach.surface))


def check(
    reach: Reach, boundary: Boundary, *, limits: Limits = LIMITS, budget: float | None = None
) -> CheckResult:
    """The answer for every domain. Past `limits` nothing is decided (`inconclusive`); past the
    time budget (`budget` seconds, default `limits.seconds`) the domains not finished are
    `inconclusive`; a counterexample found stands either way."""
    violations: list[Violation] = []
    unsupported: list[Unsupported] = list(reach.unsupported)
    status: dict[str, Status] = {}
    inconclusive: str | None = None
    deadline = time.monotonic() + (limits.seconds if budget is None else budget)
    cut: set[str] = set()

    def tick() -> None:
        if time.monotonic() >= deadline:
            raise _OutOfTime

    def add(found: Violation | Unsupported | None) -> None:
        if isinstance(found, Violation):
            violations.append(found)
        elif isinstance(found, Unsupported):
            unsupported.append(found)

    def filesystem() -> None:
        write = _Prefixes(boundary.write)
        read = _Prefixes(boundary.write + boundary.read)
        for grant in reach.fs:
            tick()
            add(_fs(grant, boundary, write if grant.op == "write" else read))

    def network() -> None:
        index = _Hosts(boundary.connect)
        for endpoint in reach.network:
            tick()
            add(_endpoint(endpoint, index, "network", "network connect"))

    def servers() -> None:
        index = _Hosts(boundary.remote)
        for endpoint in reach.remotes:
            tick()
            add(_endpoint(endpoint, index, "servers", f"{endpoint.source} connects to"))

    def permissions() -> None:
        allowed = set(boundary.permissions)
        for rule in reach.permissions:
            tick()
            if "*" not in allowed and rule not in allowed:
                violations.append(Violation("permissions", f"permission allow {rule}",
                                            "settings.permissions.allow"))

    def settings() -> None:
        keys = dict(boundary.passthrough)
        for harness, key in reach.passthrough:
            tick()
            permitted = set(keys.get("*", ())) | set(keys.get(harness, ()))
            if "*" not in permitted and key not in permitted:
                violations.append(Violation("settings", f"passthrough {harness}.{key}",
                                            f"settings.passthrough.{harness}.{key}"))

    def surface() -> None:
        patterns = _Names(boundary.surface)
        for entry in reach.surface:
            tick()
            if not patterns.matches(entry.path):
                violations.append(Violation("surface", f"surface {entry.path}: {entry.fact}",
                                            f"surface[{entry.path}]"))

    steps: dict[str, Callable[[], None]] = {
        "document": lambda: None,
        "filesystem": filesystem,
        "network": network,
        "secrets": lambda: violations.extend(_check_secrets(reach, boundary, tick)),
        "environment": lambda: violations.extend(_check_environment(reach, boundary, tick)),
        "commands": lambda: violations.extend(_check_commands(reach, boundary, tick)),
        "servers": servers,
        "permissions": permissions,
        "settings": settings,
        "surface": surface,
    }
    rules, accesses = rule_count(boundary), access_count(reach)
    if rules > limits.rules or accesses > limits.accesses:
        inconclusive = (
            f"the boundary has {rules:,} rules (the check decides up to {limits.rules:,})"
            if rules > limits.rules else
            f"the setup reaches {accesses:,} paths, endpoints and names (the check decides up "
            f"to {limits.accesses:,})")
        status = {d: "inconclusive" for d in DOMAINS}
    else:
        for domain in DOMAINS:
            try:
                tick()
                steps[domain]()
            except _OutOfTime:
                seconds = limits.seconds if budget is None else budget
                inconclusive = f"the check's time budget ({seconds:g} s) ran out in {domain}"
                for rest in DOMAINS[DOMAINS.index(domain):]:
                    status[rest] = "inconclusive"
                    cut.add(rest)
                break
            status[domain] = "within"

    counts: dict[str, int] = {}
    first: dict[str, Violation] = {}
    for violation in violations:
        counts[violation.domain] = counts.get(violation.domain, 0) + 1
        first.setdefault(violation.domain, violation)
    for item in unsupported:
        domain = item.domain if item.domain in status else "document"
        if status.get(domain) == "within":
            status[domain] = "unsupported"
    for domain in first:
        status[domain] = "exceeds"
    result: Result
    if first:
        result = "exceeds_boundary"
    elif inconclusive is not None:
        result = "inconclusive"
    elif unsupported:
        result = "unsupported"
    else:
        result = "within_boundary"
    return CheckResult(
        result=result,
        boundary=boundary.source,
        violations=tuple(first.values()),
        unsupported=tuple(dict.fromkeys(unsupported)),
        counts=tuple(sorted(counts.items())),
        domains=tuple((d, status[d]) for d in DOMAINS),
        inconclusive=inconclusive,
        covered=tuple(d for d in DOMAINS if d not in cut and status[d] in ("within", "exceeds")),
    )


def check_document(
    document: dict[str, Any], root: Path | None, boundary: Boundary, *, home: str | None = None
) -> CheckResult:
    """`root` None: the project's location is not known yet (see `build_reach`)."""
    from agentstack.consent.reach import build_reach

    home_dir = os.path.realpath(home if home is not None else str(Path.home()))
    where = str(root) if root is not None else None
    return check(build_reach(document, where, home_dir), boundary)


def report(document: dict[str, Any], root: Path | None) -> CheckResult | None:
    """The check against the user's boundary in force, for views that report it (quarantine
    show, receive); None when there is none. Never raises for the setup's sake."""
    path = user_boundary_path()
    if not path.is_file():
        return None
    home = os.path.realpath(str(Path.home()))
    return check_document(document, root, load_boundary(path, home=home), home=home)


def describe(result: CheckResult) -> list[str]:
    """Plain lines for a terminal (the CLI and the trust refusal share them)."""
    lines = [f"{result.result} (boundary: {result.boundary})"]
    counts = dict(result.counts)
    for violation in result.violations:
        more = counts.get(violation.domain, 1) - 1
        extra = f"; {more} more in this domain" if more else ""
        lines.append(f"  {violation.domain}: {violation.counterexample}  "
                     f"(from {violation.source}{extra})")
    for item in result.unsupported:
        lines.append(f"  unsupported {item.domain}: {item.what}: {item.reason}")
    if result.inconclusive is not None:
        lines.append(f"  inconclusive: {result.inconclusive}")
    lines.append("coverage: domains=" + (",".join(result.covered) or "none"))
    return lines


def enforce(
    document: dict[str, Any], root: Path, *, boundary_file: Path | None = None,
    home: str | None = None,
) -> CheckResult | None:
    """Refuse (exit 1) a consent document that is not within the boundary in force: the given
    file, else the user's `$AGENTSTACK_HOME/boundary.toml`; None when there is no boundary."""
    from agentstack.errors import Refused

    home_dir = os.path.realpath(home if home is not None else str(Path.home()))
    path = boundary_file if boundary_file is not None else user_boundary_path()
    if boundary_file is None and not path.is_file():
        return None
    boundary = load_boundary(path, home=home_dir)
    result = check_document(document, root, boundary, home=home_dir)
    if result.result != "within_boundary":
        raise Refused(
            "not trusted: this setup is not within the boundary in force\n"
            + "\n".join(describe(result)),
            hint="change the setup, or review the boundary with 'agentstack check --boundary "
            f"{path}'",
        )
    return result


def doctor_check() -> Any:
    """`doctor`'s row: which boundary is in force (and whether it parses)."""
    from agentstack.errors import AgentstackError
    from agentstack.sandbox.doctor import Check

    path = user_boundary_path()
    if not path.is_file():
        return Check("boundary", "ok", f"none in force ({path} does not exist)",
                     {"boundary": None})
    try:
        boundary = load_boundary(path, home=os.path.realpath(str(Path.home())))
    except AgentstackError as exc:
        return Check("boundary", "fail", f"{path} does not parse: {exc.message}",
                     {"boundary": str(path)})
    rules = (len(boundary.read) + len(boundary.write) + len(boundary.globs)
             + len(boundary.connect) + len(boundary.remote) + len(boundary.secrets)
             + len(boundary.env_sandbox) + len(boundary.env_servers)
             + len(boundary.executables) + len(boundary.packages) + len(boundary.permissions)
             + len(boundary.passthrough) + len(boundary.surface))
    return Check("boundary", "ok", f"{path} ({rules} rules): 'trust' refuses what exceeds it",
                 {"boundary": str(path), "rules": rules})

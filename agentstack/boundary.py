"""The boundary check: does a setup reach anything beyond what a boundary permits?

A boundary (`boundary.toml`: the user's at `$AGENTSTACK_HOME/boundary.toml`, or a team's passed
with `--boundary`) is the most an environment permits, in the vocabulary of `agentstack.reach`.
Everything it does not list is not permitted: an empty boundary permits only the project
directory itself... and not even that unless `filesystem.write` covers it.

The answer is one of three, never a silent pass:

* `within_boundary` — every access the setup can make is permitted;
* `exceeds_boundary` — with one concrete counterexample per violated domain: an access the setup
  allows and the boundary does not (`filesystem write /home/u/Code/other`,
  `network connect evil.example:443`, `secret github-token reaches servers.docs`,
  `servers.github runs npx @x/y@latest`);
* `unsupported` — something the check does not model or cannot decide (a glob in a boundary path,
  a grant whose containment depends on a symbolic link, an address against host names), with the
  reason.

The procedure is exact over the shapes it accepts: path prefixes (a directory grant is within the
boundary iff one boundary prefix contains it — a finite set of deeper prefixes never covers a whole
subtree), host patterns (`name`, `*.suffix`, an address, `*`) with containment decided on their
structure, and TCP port ranges (the union of the ranges of every boundary rule whose host pattern
contains the candidate's must cover its range). Secrets, environment names, programs, permissions
and passthrough keys are finite sets compared by exact names or a trailing-`*` prefix.
docs/adr/0009-exact-boundary-check.md says why this and not an SMT solver.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentstack.errors import InvalidInput
from agentstack.reach import (
    MAX_PORT,
    Endpoint,
    FsGrant,
    Host,
    Reach,
    Unsupported,
    parse_host,
)

BOUNDARY_NAME = "boundary.toml"
GLOB_CHARS = frozenset("*?[")
Result = Literal["within_boundary", "exceeds_boundary", "unsupported"]


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


def _path(text: str, home: str, where: str) -> str:
    if text == "~" or text.startswith("~/"):
        text = home + text[1:]
    if not posixpath.isabs(text):
        raise ValueError(f"{where}: {text!r} must be absolute or start with '~/'")
    literal = posixpath.normpath(text)
    if literal.startswith("//"):
        literal = "/" + literal.lstrip("/")
    return os.path.realpath(literal)


def compile_boundary(data: BoundaryFile, *, home: str, source: str) -> Boundary:
    problems: list[str] = []
    read: list[str] = []
    write: list[str] = []
    globs: list[str] = []
    for key, out in (("read", read), ("write", write)):
        for index, item in enumerate(getattr(data.filesystem, key)):
            where = f"filesystem.{key}[{index}]"
            if GLOB_CHARS & set(item):
                globs.append(item)
                continue
            try:
                out.append(_path(item, home, where))
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
        }


def _within(path: str, prefix: str) -> bool:
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


def _name_matches(name: str, pattern: str) -> bool:
    if pattern == "*":
        return True
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return name == pattern


def _fs(grant: FsGrant, boundary: Boundary) -> Violation | Unsupported | None:
    prefixes = boundary.write if grant.op == "write" else boundary.write + boundary.read
    if any(_within(grant.path, p) for p in prefixes):
        if grant.path != grant.literal and not any(_within(grant.literal, p) for p in prefixes):
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


def _generic(host: Host, rules: tuple[Rule, ...], port: int) -> str:
    """A concrete host of `host` that no boundary rule permits on `port`. One exists: each rule
    that does not contain `host` matches at most one of the len(rules) + 1 candidates tried."""
    if host.kind in ("name", "ip"):
        return host.value
    count = len(rules) + 1
    if host.kind == "ip-any":
        candidates = [f"192.0.2.{i + 1}" for i in range(min(count, 254))]  # TEST-NET-1
    elif host.kind == "suffix":
        candidates = [f"h{i}.{host.value}" for i in range(count)]
    else:
        candidates = [f"h{i}.n{i}.example" for i in range(count)]
    for candidate in candidates:
        if not any(r.host.matches(candidate) and r.low <= port <= r.high for r in rules):
            return candidate
    raise AssertionError("unreachable: every candidate host is permitted")  # pragma: no cover


def _first_uncovered(low: int, high: int, ranges: list[tuple[int, int]]) -> int | None:
    point = low
    for lo, hi in sorted(ranges):
        if lo > point:
            break
        point = max(point, hi + 1)
        if point > high:
            return None
    return point if point <= high else None


def _endpoint(
    endpoint: Endpoint, rules: tuple[Rule, ...], domain: str, verb: str
) -> Violation | Unsupported | None:
    covering = [(r.low, r.high) for r in rules if r.host.contains(endpoint.host)]
    port = _first_uncovered(endpoint.low, endpoint.high, covering)
    if port is None:
        return None
    if endpoint.host.kind == "ip" and any(
        r.host.kind in ("name", "suffix") and r.low <= port <= r.high for r in rules
    ):
        return Unsupported(
            domain, f"{endpoint.source}: {endpoint.host}:{port}",
            "an address against host names: whether a permitted name resolves to this address "
            "cannot be decided offline",
        )
    host = _generic(endpoint.host, rules, port)
    shown = f"[{host}]" if ":" in host else host
    return Violation(domain, f"{verb} {shown}:{port}", endpoint.source)


def _command_program(program: str, patterns: tuple[str, ...]) -> bool:
    for pattern in patterns:
        if pattern == "*" or program == pattern:
            return True
        if pattern.endswith("/*") and "/" in program and program.startswith(pattern[:-1]):
            rest = program[len(pattern) - 1 :]
            if rest and "/" not in rest:
                return True
    return False


def _package_allowed(ecosystem: str, package: str, patterns: tuple[str, ...]) -> bool:
    qualified = f"{ecosystem}:{package}"
    return any(_name_matches(qualified, p) or p == "*" for p in patterns)


def _check_commands(reach: Reach, boundary: Boundary) -> list[Violation]:
    import shlex

    out: list[Violation] = []
    for command in reach.commands:
        if not command.argv:
            continue
        line = shlex.join(command.argv)
        program = command.argv[0]
        if not _command_program(program, boundary.executables):
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
            if not _package_allowed(ecosystem, package, boundary.packages):
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


def check(reach: Reach, boundary: Boundary) -> CheckResult:
    violations: list[Violation] = []
    unsupported: list[Unsupported] = list(reach.unsupported)

    def add(found: Violation | Unsupported | None) -> None:
        if isinstance(found, Violation):
            violations.append(found)
        elif isinstance(found, Unsupported):
            unsupported.append(found)

    for grant in reach.fs:
        add(_fs(grant, boundary))
    for endpoint in reach.network:
        add(_endpoint(endpoint, boundary.connect, "network", "network connect"))
    for endpoint in reach.remotes:
        add(_endpoint(endpoint, boundary.remote, "servers", f"{endpoint.source} connects to"))
    secret_rules = dict(boundary.secrets)
    for flow in reach.secrets:
        allowed = [
            proc for name, procs in secret_rules.items() if _name_matches(flow.secret, name)
            for proc in procs
        ]
        if not any(_name_matches(flow.process, p) for p in allowed):
            violations.append(
                Violation("secrets", f"secret {flow.secret} reaches {flow.process}", flow.process)
            )
    for env in reach.env:
        patterns = boundary.env_sandbox if env.process == "sandbox" else boundary.env_servers
        if not any(_name_matches(env.name, p) for p in patterns):
            where = "the confined harness" if env.process == "sandbox" else env.process
            source = "sandbox.env" if env.process == "sandbox" else f"{env.process}.env"
            violations.append(
                Violation("environment", f"environment {env.name} reaches {where}", source)
            )
    violations.extend(_check_commands(reach, boundary))
    for rule in reach.permissions:
        if not any(p == "*" or p == rule for p in boundary.permissions):
            violations.append(
                Violation("permissions", f"permission allow {rule}", "settings.permissions.allow")
            )
    passthrough = dict(boundary.passthrough)
    for harness, key in reach.passthrough:
        keys = [k for h, ks in passthrough.items() if h in ("*", harness) for k in ks]
        if not any(k in ("*", key) for k in keys):
            violations.append(
                Violation("settings", f"passthrough {harness}.{key}",
                          f"settings.passthrough.{harness}.{key}")
            )

    for entry in reach.surface:
        if not any(_name_matches(entry.path, p) for p in boundary.surface):
            violations.append(
                Violation("surface", f"surface {entry.path}: {entry.fact}",
                          f"surface[{entry.path}]")
            )

    counts: dict[str, int] = {}
    first: dict[str, Violation] = {}
    for violation in violations:
        counts[violation.domain] = counts.get(violation.domain, 0) + 1
        first.setdefault(violation.domain, violation)
    result: Result
    if first:
        result = "exceeds_boundary"
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
    )


def check_document(
    document: dict[str, Any], root: Path | None, boundary: Boundary, *, home: str | None = None
) -> CheckResult:
    """`root` None: the project's location is not known yet (see `build_reach`)."""
    from agentstack.reach import build_reach

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

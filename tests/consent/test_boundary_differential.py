"""`check --boundary` against brute force over generated setups and boundaries.

A seeded generator writes 1,200 pairs of a consent document (sandbox enabled or disabled, every
domain: grants, hosts, localhost ports, credential routes, secrets, variables, server and hook
commands, remote servers, permissions, passthrough keys, surface entries) and a boundary file. An
independent model, written from docs/boundary.md and nothing in agentstack, enumerates the
concrete accesses of the document over a finite universe (every path, host, port, name either side
mentions, and fresh ones) and asks the boundary's raw rules about each. The checker must never say
`within_boundary` where the model finds an access the boundary does not permit, and each domain it
says is exceeded must be one where the model finds such an access.
"""

from __future__ import annotations

import functools
import ipaddress
import random
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agentstack.consent.boundary import DOMAINS, BoundaryFile, check_document, compile_boundary

SEED = 33
PAIRS = 1_200
HOME = "/bq/h/u"
ROOT = "/bq/p/proj"

# --------------------------------------------------------------------------- vocabulary

GRANT_PATHS = ("/bq/a", "/bq/a/b", "/bq/s", "~/x", "~/x/y", "rel", "rel/sub", "/bq/p/proj/rel")
BOUNDARY_PATHS = ("/", "/bq", "/bq/a", "/bq/a/b", "/bq/p", "/bq/p/proj", "/bq/p/proj/rel", "~/x",
                  "~", "/bq/s/zz", "/bq/h", "/bq/*")
DOMAIN_PATTERNS = ("api.x", "a.api.x", "*.x", "*.api.x", "y", "*.y", "10.0.0.1")
RULE_HOSTS = ("api.x", "a.api.x", "*.x", "*.api.x", "y", "*.y", "10.0.0.1", "localhost", "*",
              "docs.x", "127.0.0.1")
RULE_PORTS = ("*", "443", "80", "80-443", "8080", "1-1000", "3000-9000")
LOCAL_PORTS = (3000, 8080, 9000)
UPSTREAMS = ("https://api.x", "https://up.y:8443", "http://10.0.0.1:8080")
REMOTE_URLS = ("https://docs.x/mcp", "https://mcp.y:8443/mcp", "http://10.0.0.1:3000/mcp")
SECRETS = ("tok", "gh", "api-key")
SECRET_KEYS = ("tok", "t*", "*", "gh", "api-*")
PROCESSES = ("servers.a", "servers.b", "servers.*", "sandbox.credentials.c", "*", "harness",
             "sandbox.credentials.*")
VARIABLES = ("LANG", "LC_ALL", "TERM", "NOTES_TOKEN", "HOME")
VARIABLE_PATTERNS = ("LANG", "LC_*", "*", "TERM", "NOTES_*", "HOME")
# argv, program as written, (ecosystem, package, pinned) or None, a shell given a script
COMMANDS: dict[str, tuple[list[str], tuple[str, str, bool] | None, bool, list[str]]] = {
    "py": (["python3", "s.py"], None, False, []),
    "npx-pinned": (["npx", "-y", "@x/y@1.2.3"], ("npm", "@x/y@1.2.3", True), False, []),
    "npx-latest": (["npx", "-y", "@x/y@latest"], ("npm", "@x/y@latest", False), False,
                   ["unpinned-package:npm:@x/y@latest"]),
    "uvx": (["uvx", "mcp-foo"], ("pypi", "mcp-foo", False), False,
            ["unpinned-package:pypi:mcp-foo"]),
    "uvx-pinned": (["uvx", "mcp-foo==1.0"], ("pypi", "mcp-foo==1.0", True), False, []),
    "sh": (["sh", "-c", "echo hi"], None, True, ["shell-command:sh"]),
    "abs": (["/usr/bin/node", "x.js"], None, False, ["absolute-binary:/usr/bin/node"]),
    "rel": (["hooks/run.sh"], None, False, []),
}
EXECUTABLES = ("python3", "npx", "uvx", "sh", "/usr/bin/*", "/usr/bin/node", "hooks/*", "*",
               "node")
PACKAGES = ("npm:@x/*", "pypi:mcp-*", "npm:@x/y@1.2.3", "*", "pypi:*", "npm:@x/y@latest")
PERMISSIONS = ("Bash(git status)", "Read(*)", "WebFetch")
HARNESSES = ("claude-code", "codex")
KEYS = ("model", "cleanupPeriodDays")
SURFACE_PATHS = (".claude/settings.json", ".codex/config.toml", "AGENTS.md")
SURFACE_PATTERNS = (".claude/settings.json", ".claude/*", "*", ".codex/config.toml")
RUNNING_FACTS = ("runs:hooks.Stop: make", "env:FOO", "permission:Bash(*)", "server:evil")
EXTRA_FACTS = ("unpinnable:a script outside the project", "loader-env:LD_PRELOAD")


def _pick(rng: random.Random, items: tuple[Any, ...], most: int) -> list[Any]:
    return rng.sample(items, rng.randint(0, min(most, len(items))))


# --------------------------------------------------------------------------- the generator


def gen_document(rng: random.Random) -> dict[str, Any]:
    servers: dict[str, Any] = {}
    for name in _pick(rng, ("a", "b"), 2):
        if rng.random() < 0.7:
            argv, _, _, facts = COMMANDS[rng.choice(tuple(COMMANDS))]
            extra = _pick(rng, EXTRA_FACTS, 1) if rng.random() < 0.2 else []
            env = {}
            for var in _pick(rng, VARIABLES, 2):
                env[var] = ({"secret": rng.choice(SECRETS)} if rng.random() < 0.5
                            else {"value": "x"})
            servers[name] = {"transport": "stdio", "command": argv[0], "args": argv[1:],
                             "env": env, "risks": [*facts, *extra]}
        else:
            url = rng.choice(REMOTE_URLS)
            headers = {"Authorization": {"secret": rng.choice(SECRETS)}} if rng.random() < 0.5 \
                else {}
            servers[name] = {"transport": "http", "url": url, "headers": headers,
                             "risks": [f"remote-host:{urlsplit(url).hostname}"]}
    hooks: dict[str, Any] = {}
    for name in _pick(rng, ("h1", "h2"), 2):
        argv, _, _, facts = COMMANDS[rng.choice(tuple(COMMANDS))]
        hooks[name] = {"event": "Stop", "command": argv, "risks": list(facts)}
    sandbox: dict[str, Any] = {"enabled": rng.random() >= 0.25}
    for key in ("read_dirs", "write_dirs", "read_files", "write_files"):
        if rng.random() < 0.4:
            sandbox[key] = _pick(rng, GRANT_PATHS, 2)
    sandbox["env"] = _pick(rng, VARIABLES, 2)
    network: dict[str, Any] = {"block": rng.random() >= 0.1}
    network["allow_domains"] = _pick(rng, DOMAIN_PATTERNS, 3)
    if rng.random() < 0.3:
        network["localhost_ports"] = _pick(rng, LOCAL_PORTS, 2)
    sandbox["network"] = network
    if rng.random() < 0.4:
        sandbox["credentials"] = {
            "c": {"upstream": rng.choice(UPSTREAMS), "secret": rng.choice(SECRETS)}}
    settings: dict[str, Any] = {
        "permissions": {"allow": _pick(rng, PERMISSIONS, 2)},
        "passthrough": {h: {k: 1 for k in _pick(rng, KEYS, 2)} for h in _pick(rng, HARNESSES, 2)},
    }
    surface = {
        path: {"facts": ["model-reads:x", rng.choice(RUNNING_FACTS)] if rng.random() < 0.6
               else ["model-reads:x"]}
        for path in _pick(rng, SURFACE_PATHS, 2)
    }
    return {"servers": servers, "hooks": hooks, "sandbox": sandbox, "settings": settings,
            "surface": surface}


def gen_boundary(rng: random.Random, document: dict[str, Any]) -> dict[str, Any]:
    """Each domain: every rule it needs (then maybe one dropped), a permit-all, or a random
    draw from the vocabulary; so that each answer occurs often."""

    def choose(needed: list[str], vocab: tuple[str, ...], star: str = "*") -> list[str]:
        roll = rng.random()
        if roll < 0.55:
            out = list(dict.fromkeys(needed + _pick(rng, vocab, 2)))
            if out and rng.random() < 0.1:
                out.pop(rng.randrange(len(out)))
            return out
        if roll < 0.9:
            return [star]
        return _pick(rng, vocab, 4)

    sandbox = document["sandbox"]
    servers = document["servers"]
    grants = [ROOT] + [p if p.startswith(("/", "~")) else f"{ROOT}/{p}"
                       for key in ("read_dirs", "write_dirs", "read_files", "write_files")
                       for p in sandbox.get(key, [])]
    hosts = [*sandbox["network"]["allow_domains"], "localhost",
             *(urlsplit(r["upstream"]).hostname or "" for r in
               sandbox.get("credentials", {}).values())]
    out: dict[str, Any] = {
        "filesystem": {"read": _pick(rng, BOUNDARY_PATHS, 2),
                       "write": choose(grants, BOUNDARY_PATHS, "/")},
        "network": {"connect": [f"{h}:{rng.choice(RULE_PORTS)}" if ":" not in h and
                                rng.random() < 0.5 else h
                                for h in choose(hosts, RULE_HOSTS)]},
        "environment": {"sandbox": choose(list(sandbox["env"]), VARIABLE_PATTERNS),
                        "servers": choose([k for s in servers.values()
                                           for k in s.get("env", {})], VARIABLE_PATTERNS)},
        "commands": {
            "executables": choose([s["command"] for s in servers.values() if "command" in s]
                                  + [h["command"][0] for h in document["hooks"].values()],
                                  EXECUTABLES),
            "packages": choose([], PACKAGES),
            "unpinned": rng.random() < 0.7, "shell": rng.random() < 0.7,
            "unpinnable": rng.random() < 0.8, "loader_env": rng.random() < 0.8,
        },
        "servers": {"remote": choose([urlsplit(s["url"]).hostname or "" for s in servers.values()
                                      if "url" in s], RULE_HOSTS)},
        "permissions": {"allow": choose(list(document["settings"]["permissions"]["allow"]),
                                        PERMISSIONS)},
        "settings": {"passthrough": {h: choose(list(document["settings"]["passthrough"]
                                                    .get(h, {})), KEYS)
                                     for h in _pick(rng, (*HARNESSES, "*"), 3)}},
        "surface": {"executing": choose(list(document["surface"]), SURFACE_PATTERNS)},
    }
    secrets: dict[str, list[str]] = {}
    for key in _pick(rng, SECRET_KEYS, 3):
        secrets[key] = _pick(rng, PROCESSES, 3)
    if rng.random() < 0.6:
        secrets["*"] = ["*"]
    out["secrets"] = secrets
    return out


# --------------------------------------------------------------------------- the model


def _expand(path: str) -> str:
    import posixpath

    if path == "~" or path.startswith("~/"):
        path = HOME + path[1:]
    elif not path.startswith("/"):
        path = f"{ROOT}/{path}"
    return posixpath.normpath(path)


def _under(path: str, prefix: str) -> bool:
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


def _name(name: str, pattern: str) -> bool:
    return pattern == "*" or name == pattern or (pattern.endswith("*")
                                                 and name.startswith(pattern[:-1]))


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _host_rule(host: str, pattern: str) -> bool:
    if pattern == "*":
        return True
    if pattern.startswith("*."):
        return not _is_ip(host) and host.endswith(pattern[1:])
    return host == pattern


def _rule_permits(rule: str, host: str, port: int) -> bool:
    pattern, _, ports = rule.partition(":")
    if ports in ("", "*"):
        in_range = True
    else:
        low, _, high = ports.partition("-")
        in_range = int(low) <= port <= int(high or low)
    return in_range and _host_rule(host, pattern)


def _program(program: str, patterns: list[str]) -> bool:
    for pattern in patterns:
        if pattern in ("*", program):
            return True
        if pattern.endswith("/*"):
            parent, _, rest = program.rpartition("/")
            if rest and parent == pattern[:-2]:
                return True
    return False


def fs_reaches(document: dict[str, Any], op: str, path: str) -> bool:
    sandbox = document["sandbox"]
    if not sandbox["enabled"]:
        return True
    dirs = [("write", ROOT)]
    for key, grant in (("read_dirs", "read"), ("write_dirs", "write")):
        dirs += [(grant, _expand(p)) for p in sandbox.get(key, [])]
    files = [(grant, _expand(p)) for key, grant in (("read_files", "read"),
                                                    ("write_files", "write"))
             for p in sandbox.get(key, [])]
    return any(_under(path, top) and (op == "read" or grant == "write") for grant, top in dirs) \
        or any(path == f and (op == "read" or grant == "write") for grant, f in files)


def fs_permitted(boundary: dict[str, Any], op: str, path: str) -> bool:
    fs_b = boundary["filesystem"]
    prefixes = [_expand(p) for p in fs_b["write"] if "*" not in p]
    if op == "read":
        prefixes += [_expand(p) for p in fs_b["read"] if "*" not in p]
    return any(_under(path, b) for b in prefixes)


@functools.cache
def net_universe() -> frozenset[tuple[str, int]]:
    named = {h.strip("*.") for h in (*DOMAIN_PATTERNS, *RULE_HOSTS) if h != "*"}
    hosts = named | {urlsplit(u).hostname or "" for u in UPSTREAMS}
    hosts |= {"fresh", "fresh.example", "192.0.2.200", "::1"}
    hosts |= {f"fresh.{h}" for h in named if not _is_ip(h)}
    ports = {1, 79, 80, 81, 442, 443, 444, 1000, 1001, 2999, 3000, 8080, 8443, 9000, 9001, 65535}
    return frozenset((h, p) for h in hosts for p in ports)


def net_reaches(document: dict[str, Any], host: str, port: int) -> bool:
    sandbox = document["sandbox"]
    network = sandbox["network"]
    if not sandbox["enabled"] or not network["block"]:
        return True
    if port in (80, 443) and any(_host_rule(host, p) for p in network["allow_domains"]):
        return True
    if port in network.get("localhost_ports", []) and (host == "localhost" or _is_ip(host)):
        return True
    for route in sandbox.get("credentials", {}).values():
        parts = urlsplit(route["upstream"])
        if (host, port) == (parts.hostname, parts.port or (80 if parts.scheme == "http" else 443)):
            return True
    return False


def net_permitted(rules: list[str], host: str, port: int) -> bool:
    return any(_rule_permits(r, host, port) for r in rules)


def model_violations(document: dict[str, Any], boundary: dict[str, Any]) -> set[str]:
    """The domains in which the document reaches something the boundary does not permit."""
    sandbox = document["sandbox"]
    enabled = sandbox["enabled"]
    found: set[str] = set()

    # filesystem: every path either side names, a child of each, and the top
    mentioned = {_expand(p) for p in (*GRANT_PATHS, *BOUNDARY_PATHS) if "*" not in p} | {ROOT}
    universe = {"/", "/zz"} | mentioned | {p + "/zz" for p in mentioned}
    if any(fs_reaches(document, op, p) and not fs_permitted(boundary, op, p)
           for op in ("read", "write") for p in universe):
        found.add("filesystem")

    # network: concrete hosts and ports
    rules = boundary["network"]["connect"]
    if any(not net_permitted(rules, h, p) for h, p in net_universe() if net_reaches(document, h, p)):
        found.add("network")

    # secrets
    flows: set[tuple[str, str]] = set()
    for name, server in document["servers"].items():
        for source in (*server.get("env", {}).values(), *server.get("headers", {}).values()):
            if "secret" in source:
                flows.add((source["secret"], f"servers.{name}"))
    if enabled:
        for name, route in sandbox.get("credentials", {}).items():
            flows.add((route["secret"], f"sandbox.credentials.{name}"))
    else:
        everything = {*SECRETS, "fresh-secret", *(k.rstrip("*") for k in SECRET_KEYS)}
        flows |= {(s, "harness") for s in everything}
    table = boundary["secrets"]
    for secret, process in flows:
        if not any(_name(secret, key) and any(_name(process, p) for p in procs)
                   for key, procs in table.items()):
            found.add("secrets")

    # environment
    env_b = boundary["environment"]
    names: set[tuple[str, str]] = {(v, "sandbox") for v in sandbox["env"]}
    if not enabled:
        everything = {*VARIABLES, "FRESH_VAR", *(p.rstrip("*") for p in VARIABLE_PATTERNS)}
        names |= {(v, "sandbox") for v in everything}
    for name, server in document["servers"].items():
        names |= {(v, f"servers.{name}") for v in server.get("env", {})}
    for var, process in names:
        patterns = env_b["sandbox"] if process == "sandbox" else env_b["servers"]
        if not any(_name(var, p) for p in patterns):
            found.add("environment")

    # commands
    cmd_b = boundary["commands"]
    by_argv = {tuple(v[0]): v for v in COMMANDS.values()}
    runs = [([s["command"], *s["args"]], s["risks"]) for s in document["servers"].values()
            if "command" in s]
    runs += [(h["command"], h["risks"]) for h in document["hooks"].values()]
    for argv, risks in runs:
        _, package, shell, _ = by_argv[tuple(argv)]
        ok = _program(argv[0], cmd_b["executables"])
        if package is not None:
            ecosystem, name, pinned = package
            ok = ok and (pinned or cmd_b["unpinned"])
            ok = ok and any(_name(f"{ecosystem}:{name}", p) for p in cmd_b["packages"])
        ok = ok and (not shell or cmd_b["shell"])
        ok = ok and (cmd_b["unpinnable"] or not any(r.startswith("unpinnable:") for r in risks))
        ok = ok and (cmd_b["loader_env"] or not any(r.startswith("loader-env:") for r in risks))
        if not ok:
            found.add("commands")

    # servers: the one host and port of each remote server
    for server in document["servers"].values():
        if "url" in server:
            parts = urlsplit(server["url"])
            port = parts.port or (80 if parts.scheme == "http" else 443)
            if not any(_rule_permits(r, parts.hostname or "", port)
                       for r in boundary["servers"]["remote"]):
                found.add("servers")

    allow = boundary["permissions"]["allow"]
    if any(rule not in allow and "*" not in allow
           for rule in document["settings"]["permissions"]["allow"]):
        found.add("permissions")
    passthrough = boundary["settings"]["passthrough"]
    for harness, keys in document["settings"]["passthrough"].items():
        permitted = [*passthrough.get(harness, []), *passthrough.get("*", [])]
        if any(k not in permitted and "*" not in permitted for k in keys):
            found.add("settings")
    for path, entry in document["surface"].items():
        runs_something = any(not f.startswith("model-reads:") for f in entry["facts"])
        if runs_something and not any(_name(path, p) for p in boundary["surface"]["executing"]):
            found.add("surface")
    return found


# --------------------------------------------------------------------------- the differential


def test_the_check_never_says_within_where_brute_force_finds_an_access_beyond() -> None:
    rng = random.Random(SEED)
    answers: Counter[str] = Counter()
    disabled = 0
    false_within: list[Any] = []
    wrong_domain: list[Any] = []
    for _ in range(PAIRS):
        document = gen_document(rng)
        raw = gen_boundary(rng, document)
        boundary = compile_boundary(BoundaryFile.model_validate(raw), home=HOME, source="gen")
        result = check_document(document, Path(ROOT), boundary, home=HOME)
        expected = model_violations(document, raw)
        answers[result.result] += 1
        disabled += not document["sandbox"]["enabled"]
        assert [d for d, _ in result.domains] == list(DOMAINS)
        if result.result == "within_boundary" and expected:
            false_within.append((document, raw, expected))
        claimed = {v.domain for v in result.violations}
        if not claimed <= expected:
            wrong_domain.append((document, raw, claimed, expected))
        for violation in result.violations:  # the concrete counterexample, asked of the model
            if violation.domain == "filesystem":
                _, op, path = violation.counterexample.split(" ", 2)
                real = fs_reaches(document, op, path) and not fs_permitted(raw, op, path)
            elif violation.domain == "network":
                host, _, port = violation.counterexample.removeprefix("network connect ") \
                    .rpartition(":")
                host = host.strip("[]")
                real = net_reaches(document, host, int(port)) and not net_permitted(
                    raw["network"]["connect"], host, int(port))
            else:
                continue
            if not real:
                wrong_domain.append((document, raw, violation))
        if not expected:
            assert result.result != "exceeds_boundary", (document, raw, result)
    assert not false_within, f"{len(false_within)} false within_boundary; first: {false_within[0]}"
    assert not wrong_domain, f"{len(wrong_domain)} unreal counterexamples; first: {wrong_domain[0]}"
    # The generator reaches each answer often enough to mean something.
    assert answers["within_boundary"] >= 50 and answers["exceeds_boundary"] >= 300, answers
    assert disabled >= 200, disabled

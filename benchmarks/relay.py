"""The MCP relay's cost: added latency per `tools/call` and per `tools/list`, and its start-up,
against the same server started directly, in the same run (interleaved rounds).

    .venv/bin/python benchmarks/relay.py               # 300 calls and lists per round, 5 rounds
    .venv/bin/python benchmarks/relay.py --calls 1000 --rounds 7 --starts 10
    .venv/bin/python benchmarks/relay.py --npm-package ''   # the toy server only

Two servers, each in throwaway projects (a temporary AGENTSTACK_HOME and HOME): the test suite's
`notes` server (a small Python script), and a server users run from the npm registry
(`@modelcontextprotocol/server-memory` by default, pinned by `--npm-package`), installed with npm
into the project once at the start and then started with `node`, offline. Each is locked,
trusted and applied with the real CLI, and `.mcp.json`'s command line is started as a harness
starts it. "direct" is the server's own command line (as before the relay);
"relay" is the rendered one, with the server confined by its own sandbox (the default) and, as
"relay, unconfined", with `sandbox = false`; "relay, full path" is the confined server started by
what earlier releases rendered (`-I -m agentstack.launch`: `site`, the full launcher). Start-up is the time from spawn to the answer to
`initialize` (wall), and the process tree's CPU time from spawn to exit, each start of each kind
interleaved with the others; the ratios are each server's own (its relay against it
started directly). Goals: <= 2 ms added per call and per listing, start-up <= 1.5x the server's own.
Exits 0 whether or not the goals are met; non-zero only when something fails.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
NOTES = REPO / "tests" / "harness" / "notes_mcp.py"
NPM_PACKAGE = "@modelcontextprotocol/server-memory@2026.8.31"


class Server:
    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        start = time.perf_counter()
        # stderr: the npm server says it is running there on every start.
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, cwd=cwd)
        self.next_id = 0
        self.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "bench", "version": "0"}})
        self.startup = time.perf_counter() - start
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}})
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the server closed its output ({method})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise SystemExit(f"{method}: {answer['error']}")
        return answer

    def timed(self, method: str, params: dict[str, Any], count: int) -> list[float]:
        out = []
        for _ in range(count):
            start = time.perf_counter()
            self.call(method, params)
            out.append(time.perf_counter() - start)
        return out

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def cli(*args: str, cwd: Path, env: dict[str, str]) -> None:
    result = subprocess.run([sys.executable, "-m", "agentstack", *args], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=300)
    if result.returncode:
        raise SystemExit(f"agentstack {' '.join(args)} failed: {result.stderr}")


def project(base: Path, name: str, env: dict[str, str], server: str, extra: str
            ) -> tuple[list[str], dict[str, str], Path]:
    """A project declaring `server` (TOML: its command, args, env; `{root}` is the project),
    locked, trusted and applied; the rendered command line, its environment and the project."""
    root = base / name
    root.mkdir(exist_ok=True)
    (root / "agentstack.toml").write_text(f"""\
[project]
name = "{name}"
harnesses = ["claude-code"]

[servers.bench]
{server.replace("{root}", str(root))}
{extra}
""")
    # trust starts the server confined to pin its first listing (docs/mcp-relay.md).
    for args in (("lock",), ("trust", "--yes", "--accept-risk"), ("apply", "--write")):
        cli(*args, cwd=root, env=env)
    entry = json.loads((root / ".mcp.json").read_text())["mcpServers"]["bench"]
    # The server's env (its data file): in each project, as the harness sets it from .mcp.json.
    return [entry["command"], *entry["args"]], {**env, **entry.get("env", {})}, root


def notes_server() -> str:
    return f"""\
command = {json.dumps(sys.executable)}
args = ["-I", {json.dumps(str(NOTES))}]
env = {{ NOTES_FILE = "{{root}}/notes.txt" }}"""


def npm_server(base: Path, package: str, env: dict[str, str]) -> str:
    """`package` (name@version) installed with npm into `base/npm` (copied into each project, so
    its code is the project's own), started as `node <its bin script>`: the same files, offline."""
    npm, node = shutil.which("npm"), shutil.which("node")
    if not npm or not node:
        raise SystemExit("npm and node are needed for the npm server (or --npm-package '')")
    prefix = base / "npm"
    prefix.mkdir()
    done = subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                           "--omit=dev", "--no-save", package], capture_output=True, text=True,
                          env=dict(env, HOME=str(base / "npm-home")), timeout=900)
    if done.returncode:
        raise SystemExit(f"npm install {package} failed: {done.stderr[-2000:]}")
    name = package.rpartition("@")[0] if package.rfind("@") > 0 else package
    manifest = json.loads((prefix / "node_modules" / name / "package.json").read_text())
    bins = manifest.get("bin")
    script = bins if isinstance(bins, str) else next(iter(bins.values()))
    entry = f"{{root}}/node_modules/{name}/{script}"
    return f"""\
command = {json.dumps(node)}
args = [{json.dumps(entry)}]
env = {{ MEMORY_FILE_PATH = "{{root}}/memory.jsonl" }}"""


def npm_projects(base: Path, names: tuple[str, ...]) -> None:
    for name in names:
        (base / name).mkdir()
        shutil.copytree(base / "npm" / "node_modules", base / name / "node_modules",
                        symlinks=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--starts", type=int, default=6, help="starts of each kind per round")
    parser.add_argument("--npm-package", default=NPM_PACKAGE,
                        help="the npm server, name@version ('' for the toy server only)")
    options = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="agentstack-relay-bench-"))
    try:
        env = dict(os.environ, HOME=str(base / "home"), AGENTSTACK_HOME=str(base / "state"),
                   AGENTSTACK_CACHE=str(base / "cache"), PYTHONPATH=str(REPO))
        (base / "home").mkdir()
        # server -> (its manifest entry, the tools/call it is timed on)
        servers = {"notes": (notes_server(), {"name": "add_note", "arguments": {"text": "x"}})}
        if options.npm_package:
            memory = npm_server(base, options.npm_package, env)
            npm_projects(base, ("npm-confined", "npm-unconfined"))
            servers["npm"] = (memory, {"name": "read_graph", "arguments": {}})
        kinds: dict[tuple[str, str], tuple[list[str], dict[str, str], Path]] = {}
        calls: dict[str, dict[str, Any]] = {}
        for server, (entry, call) in servers.items():
            prefix = "" if server == "notes" else f"{server}-"
            confined, confined_env, root = project(base, f"{prefix}confined", env, entry, "")
            unconfined, unconfined_env, other = project(base, f"{prefix}unconfined", env, entry,
                                                        "sandbox = false")
            direct = confined[confined.index("--") + 1 :]
            kinds[server, "direct"] = (direct, confined_env, root)
            kinds[server, "relay"] = (confined, confined_env, root)
            kinds[server, "relay, unconfined"] = (unconfined, unconfined_env, other)
            if server == "notes":
                # What earlier releases rendered (`-I -m agentstack.launch`), which still works:
                # the full path (`site`, the launcher), for the same server in the same run.
                full = [confined[0], "-I", "-m", "agentstack.launch", *confined[4:]]
                kinds[server, "relay, full path"] = (full, confined_env, root)
            calls[server] = call
        results: dict[tuple[str, str], dict[str, list[float]]] = {
            k: {"startup": [], "call": [], "list": [], "cpu": []} for k in kinds}
        for argv, kind_env, cwd in kinds.values():
            Server(argv, kind_env, cwd).close()  # the first start: pins, the kept confinement
        loads = [os.getloadavg()]
        for _ in range(options.rounds):
            for kind, (argv, kind_env, cwd) in kinds.items():
                server = Server(argv, kind_env, cwd)
                server.call("tools/list")
                results[kind]["call"] += server.timed("tools/call", calls[kind[0]], options.calls)
                results[kind]["list"] += server.timed("tools/list", {}, options.calls)
                server.close()
            for _ in range(options.starts):
                for kind, (argv, kind_env, cwd) in kinds.items():
                    # Start-up: wall time from spawn to the answer to `initialize`, and the CPU
                    # time of the process tree (user + system, spawn to exit), which the load
                    # stretches less.
                    before = resource.getrusage(resource.RUSAGE_CHILDREN)
                    server = Server(argv, kind_env, cwd)
                    server.close()
                    after = resource.getrusage(resource.RUSAGE_CHILDREN)
                    results[kind]["startup"].append(server.startup)
                    results[kind]["cpu"].append(after.ru_utime - before.ru_utime
                                                + after.ru_stime - before.ru_stime)
        loads.append(os.getloadavg())
        med = {k: {m: statistics.median(v) * 1000 for m, v in r.items()} for k, r in results.items()}
        load = " -> ".join(" ".join(f"{x:.2f}" for x in avg) for avg in loads)
        print(f"{options.rounds} rounds: {options.calls} calls and listings each, "
              f"{options.starts} starts each (medians, ms); load average {load} on "
              f"{os.cpu_count()} CPUs")
        if options.npm_package:
            print(f"npm: {options.npm_package} under node, notes: {NOTES.name} under python")
        print(f"{'':26} {'start-up':>10} {'start CPU':>10} {'tools/call':>11} {'tools/list':>11}")
        for kind in kinds:
            m = med[kind]
            print(f"{kind[0] + ': ' + kind[1]:26} {m['startup']:10.1f} {m['cpu']:10.1f} "
                  f"{m['call']:11.3f} {m['list']:11.3f}")
        for server, kind in kinds:
            if kind == "direct":
                continue
            m, d = med[server, kind], med[server, "direct"]
            print(f"{server}: {kind}: +{m['call'] - d['call']:.3f} ms per tools/call "
                  f"(x{m['call'] / d['call']:.2f}), +{m['list'] - d['list']:.3f} ms per "
                  f"tools/list (x{m['list'] / d['list']:.2f}), start-up "
                  f"x{m['startup'] / d['startup']:.2f} wall (+{m['startup'] - d['startup']:.1f} ms), "
                  f"x{m['cpu'] / d['cpu']:.2f} CPU (+{m['cpu'] - d['cpu']:.1f} ms) "
                  "(goals: <= 2 ms, <= 2 ms, <= 1.5x)")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

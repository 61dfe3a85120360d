"""The remote relay's cost: added latency per `tools/call` and per `tools/list` to a remote
(Streamable HTTP) MCP server, against a client speaking HTTP to the same server directly, in the
same run (interleaved rounds).

    .venv/bin/python benchmarks/remote_relay.py               # 200 calls and lists per round, 5 rounds
    .venv/bin/python benchmarks/remote_relay.py --calls 500 --rounds 7

The server is the test suite's real Streamable-HTTP MCP server (tests/sandbox/remote_server.py,
the `mcp` package's, on 127.0.0.1). A throwaway project (a temporary AGENTSTACK_HOME and HOME)
declares it by `url`; it is locked, trusted and applied with the real CLI, and `.mcp.json`'s
command line (the relay's remote mode) is started as a harness starts it. "direct" is one
keep-alive HTTP client in this process (the relay's own HTTP code, `agentstack.remoterelay.Remote`,
without the relay process or its checks), as a harness that connects to the URL itself would.
Goal: <= 2 ms added per call and per listing. Exits 0 whether or not the goal is met.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

INIT = {"protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"}}


class Relayed:
    """The rendered relay, over its pipes."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.next_id = 0
        self.call("initialize", INIT)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}})
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit(f"the relay closed its output ({method})")
            answer: dict[str, Any] = json.loads(line)
            if "method" not in answer:
                break
        if "error" in answer:
            raise SystemExit(f"{method}: {answer['error']}")
        return answer

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


class Direct:
    """One HTTP client in this process, straight to the server."""

    def __init__(self, url: str) -> None:
        from agentstack import remoterelay

        self.remoterelay = remoterelay
        self.remote = remoterelay.Remote(url, {})
        self.next_id = 0
        self.call("initialize", INIT, first=True)
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, message: dict[str, Any], *, first: bool = False) -> list[Any]:
        response, conn = self.remote.exchange("POST", json.dumps(message).encode(),
                                              self.remoterelay.ACCEPT)
        if first:
            self.remote.take_session(response)
        values: list[Any] = []
        if response.status != 202:
            for value in self.remoterelay.messages(response):
                values.append(value)
                if isinstance(value, dict) and "method" not in value:
                    break  # the answer: as the relay, read no further on this stream
        self.remote.release(conn, response, whole=response.isclosed())
        return values

    def call(self, method: str, params: dict[str, Any] | None = None, *,
             first: bool = False) -> dict[str, Any]:
        self.next_id += 1
        values = self.post({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                            "params": params or {}}, first=first)
        answer = next(v for v in values if isinstance(v, dict) and "method" not in v)
        if first:
            self.remote.protocol = answer["result"]["protocolVersion"]
        if "error" in answer:
            raise SystemExit(f"{method}: {answer['error']}")
        return answer

    def close(self) -> None:
        self.remote.close()


def _cli(*args: str, cwd: Path, env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-m", "agentstack", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"agentstack {' '.join(args)} failed: {done.stderr}")


def timed(client: Any, method: str, params: dict[str, Any], n: int) -> float:
    """Median milliseconds per round trip."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        client.call(method, params)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    # The server in a process of its own: in this one it would share the interpreter (and its
    # lock) with the direct client, and not with the relay.
    server = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom tests.sandbox.remote_server import RemoteServer\n"
         "s = RemoteServer()\nprint(s.url, flush=True)\nsys.stdin.read()\ns.stop()"],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True)
    assert server.stdout is not None and server.stdin is not None
    url = server.stdout.readline().strip()
    if not url:
        raise SystemExit("the test MCP server did not start")
    work = Path(tempfile.mkdtemp(prefix="agentstack-bench-remote-"))
    try:
        home = work / "home"
        home.mkdir()
        env = dict(os.environ, HOME=str(home), AGENTSTACK_HOME=str(home / ".config/agentstack"),
                   XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"))
        root = work / "proj"
        root.mkdir()
        (root / "agentstack.toml").write_text(
            f'[project]\nname = "bench"\nharnesses = ["claude-code"]\n\n'
            f'[servers.notes]\nurl = {json.dumps(url)}\n')
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        for args in (("lock",), ("trust", "--yes", "--accept-risk"), ("apply", "--write")):
            _cli(*args, cwd=root, env=env)
        entry = json.loads((root / ".mcp.json").read_text())["mcpServers"]["notes"]
        argv = [entry["command"], *entry["args"]]
        relayed, direct = Relayed(argv, env), Direct(url)
        relayed.call("tools/list")  # the pins: taken at this first listing
        rows: dict[str, dict[str, list[float]]] = {
            "direct": {"call": [], "list": []}, "relay": {"call": [], "list": []}}
        call = {"name": "erase_notes", "arguments": {}}
        for _ in range(options.rounds):
            for name, client in (("direct", direct), ("relay", relayed)):
                rows[name]["call"].append(timed(client, "tools/call", call, options.calls))
                rows[name]["list"].append(timed(client, "tools/list", {}, options.calls))
        relayed.close()
        direct.close()
    finally:
        server.stdin.close()
        server.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {options.rounds} rounds of "
          f"{options.calls} (median of the rounds' medians, ms)")
    print(f"{'':8} {'tools/call':>12} {'tools/list':>12}")
    med = {n: {k: statistics.median(v) for k, v in r.items()} for n, r in rows.items()}
    for name in ("direct", "relay"):
        print(f"{name:8} {med[name]['call']:12.3f} {med[name]['list']:12.3f}")
    added = {k: med["relay"][k] - med["direct"][k] for k in ("call", "list")}
    ratio = {k: med["relay"][k] / med["direct"][k] for k in ("call", "list")}
    print(f"{'added':8} {added['call']:12.3f} {added['list']:12.3f}")
    print(f"{'ratio':8} {ratio['call']:11.2f}x {ratio['list']:11.2f}x")
    met = all(v <= 2.0 for v in added.values())
    print(f"goal (<= 2 ms added per call and per listing): {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()

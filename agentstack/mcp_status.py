"""`doctor`, per harness in the manifest: is its binary here, and what does its own `mcp list`
say about the locked servers?

`mcp list` starts the servers in Claude Code, Gemini CLI and OpenCode (OpenCode even in a folder
it was never asked to trust), so it runs only for a trusted project: before consent, no server of
the project may start. VS Code and Cursor have no command-line `mcp list`.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from agentstack import harnesses as _harnesses
from agentstack.sandbox import profiles
from agentstack.sandbox.doctor import Check

MCP_LIST_TIMEOUT = 90.0  # OpenCode installs its plugin package on a first run
# Harnesses whose CLI has `mcp list` (their descriptions say).
HAS_MCP_LIST = tuple(h.name for h in _harnesses.ALL if h.mcp_list)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def server_states(output: str, servers: list[str]) -> dict[str, str]:
    """Each server as the listing shows it: "connected", "failed", "disabled", "listed" or
    "missing" (not mentioned at all)."""
    lines = _ANSI.sub("", output).splitlines()
    states: dict[str, str] = {}
    for name in servers:
        pattern = re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])")
        # A server's detail may sit on the next line (OpenCode prints the command there).
        line = next((ln for ln in lines if pattern.search(ln)), None)
        if line is None:
            states[name] = "missing"
            continue
        lower = line.lower()
        if re.search(r"disconnected|failed|error|✗", lower):
            states[name] = "failed"
        elif "connected" in lower:
            states[name] = "connected"
        elif "disabled" in lower:
            states[name] = "disabled"
        else:
            states[name] = "listed"
    return states


def _mcp_list(binary: str, root: Path) -> tuple[int | None, str]:
    from agentstack.patience import scaled

    env = dict(os.environ, NO_COLOR="1", TERM="dumb")
    timeout = scaled(MCP_LIST_TIMEOUT)
    try:
        done = subprocess.run(
            [binary, "mcp", "list"],
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    except OSError as exc:
        return None, str(exc)
    return done.returncode, done.stdout + done.stderr


def _check(
    harness: str, binary: str | None, root: Path, servers: list[str], trusted: bool
) -> Check:
    name = f"mcp {harness}"
    profile = profiles.PROFILES.get(harness)
    shown = profile.binary if profile else harness
    if harness not in HAS_MCP_LIST:
        return Check(
            name, "ok", "no command-line 'mcp list'; rendered files not verified by a binary"
        )
    if binary is None:
        return Check(
            name, "warn", f"{shown}: not found on PATH", {"harness": harness, "binary": None}
        )
    data: dict[str, object] = {"harness": harness, "binary": binary}
    if not trusted:
        return Check(
            name,
            "ok",
            f"{binary}; 'mcp list' not run: the project is not trusted (it could start servers)",
            data,
        )
    code, output = _mcp_list(binary, root)
    states = server_states(output, servers)
    data.update(exit=code, servers=states)
    if code is None:
        return Check(name, "warn", f"{binary} mcp list: {output}", data)
    bad = {s: v for s, v in states.items() if v in ("missing", "failed", "disabled")}
    summary = ", ".join(f"{s} {v}" for s, v in sorted(states.items())) or "no locked servers"
    if bad:
        return Check(
            name,
            "warn",
            f"{summary} (run 'agentstack apply --write'; '{shown} mcp list' shows more)",
            data,
        )
    return Check(name, "ok", summary, data)


def harness_mcp_checks(
    root: Path, harnesses: Sequence[str], servers: list[str], trusted: bool
) -> list[Check]:
    binaries: dict[str, str | None] = {}
    for h in harnesses:
        profile = profiles.PROFILES.get(h)
        binary = profile.binary if profile is not None and h in HAS_MCP_LIST else None
        binaries[h] = profiles.find_binary(binary, os.environ.get("PATH")) if binary else None
    with ThreadPoolExecutor(max_workers=max(1, len(harnesses))) as pool:
        futures = [
            pool.submit(_check, h, binaries[h], root, sorted(servers), trusted) for h in harnesses
        ]
        return [f.result() for f in futures]

"""Set up a project + temporary home for a real harness and run it against a :class:`MockModel`.

Claude Code::

    cmd = write_hook(tmp_path / "hook.py", "deny")
    claude_setup(project, home, hook_command=cmd, allow=["Bash(touch marker.txt)"])
    with MockModel([ToolCall("Bash", {"command": "touch marker.txt"})]) as model:
        run = run_claude(project, home, model, "make the marker")
    assert run.result["permission_denials"]

Codex::

    with MockModel([...]) as model:
        codex_setup(project, home, model, hook_command=cmd)
        run = run_codex(project, home, "make the marker")
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .binaries import harness_bin, harness_env
from .codex_trust import codex_hook_trust_entries, codex_hook_trust_toml, toml_string
from .deadline import scaled
from .mock_model import MockModel

RUN_TIMEOUT = 120  # seconds per harness run on an idle machine (scaled: tests/harness/deadline.py)
NOTES_SERVER = Path(__file__).resolve().parent / "notes_mcp.py"

DENY_REASON = "blocked by test"

_HOOK_BODIES = {
    # JSON deny (both harnesses' shape), exit 0.
    "deny": (
        "print(json.dumps({'hookSpecificOutput': {'hookEventName': 'PreToolUse', "
        "'permissionDecision': 'deny', 'permissionDecisionReason': REASON}}))\n"
    ),
    "allow": "",  # exit 0, no output
    "crash": "raise SystemExit(1)\n",  # exit 1, no output
    "badjson": "print('{not json')\n",  # exit 0, invalid JSON on stdout
    "sleep": "time.sleep(15)\n",  # outlives a short hook timeout
}


def write_hook(path: Path, behaviour: str, *, reason: str = DENY_REASON,
               log: Path | None = None) -> str:
    """Write a PreToolUse hook script and return its command line (absolute interpreter, ``-I``,
    absolute script path). ``behaviour``: deny | allow | crash | badjson | sleep. With ``log``,
    every stdin payload is appended to that file as one JSON line (proof the hook ran)."""
    if behaviour not in _HOOK_BODIES:
        raise ValueError(f"unknown hook behaviour {behaviour!r}")
    path = Path(path).resolve()
    lines = ["import json, sys, time", f"REASON = {reason!r}", "payload = sys.stdin.read()"]
    if log is not None:
        lines.append(f"open({str(Path(log).resolve())!r}, 'a').write("
                     "json.dumps(json.loads(payload)) + '\\n')")
    path.write_text("\n".join(lines) + "\n" + _HOOK_BODIES[behaviour], encoding="utf-8")
    return f"{shlex.quote(sys.executable)} -I {shlex.quote(str(path))}"


def hook_payloads(log: Path) -> list[dict[str, Any]]:
    """What a hook written with ``log=`` received, one dict per call."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line]


def notes_server_spec(notes_file: Path) -> dict[str, Any]:
    """stdio spec of the bundled ``notes`` MCP server (tool ``add_note``)."""
    return {"command": sys.executable, "args": ["-I", str(NOTES_SERVER)],
            "env": {"NOTES_FILE": str(notes_file)}}


@dataclass
class HarnessRun:
    proc: subprocess.CompletedProcess[str]
    seconds: float
    result: dict[str, Any] | None = None  # Claude Code's --output-format json result
    # What was still running below the test once the harness had exited (pid -> command line),
    # every one of them killed and reaped before the run returned.
    leftovers: dict[int, str] | None = None

    @property
    def output(self) -> str:
        return f"exit {self.proc.returncode}\n--- stdout\n{self.proc.stdout}\n--- stderr\n{self.proc.stderr}"


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the process group we started the harness in (``start_new_session``): Codex's node
    launcher runs the native binary as a child, which a plain ``proc.kill()`` would orphan (with
    our pipes still open)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _cmdline(pid: int) -> str:
    """A process's command line, or `(name) state` for one that has none any more (a zombie)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        if raw:
            return raw.replace(b"\0", b" ").decode(errors="replace").strip()
        name, _, rest = Path(f"/proc/{pid}/stat").read_text().rpartition(")")
        return f"{name.partition('(')[2]} {rest.split()[0]}"
    except (OSError, IndexError):
        return "?"


@contextlib.contextmanager
def reaping() -> Iterator[dict[int, str]]:
    """Nothing started inside outlives it. This process is the child subreaper meanwhile, so a
    process that leaves the harness's process group and is orphaned comes back to it, never to
    init: a setsid daemon, or Codex's `bwrap ... codex --codex-run-as-fs-helper`, which is pid 1
    of a pid namespace of its own (only SIGKILL from outside ends it). On leaving, whatever is
    below this process that was not there before is listed in the yielded dict (pid -> command
    line) and SIGKILLed, round after round, and reaped."""
    from agentstack.sandbox import runner

    before = runner._children()
    was = runner._set_subreaper(True)
    found: dict[int, str] = {}
    try:
        yield found
    finally:
        try:
            found.update({pid: _cmdline(pid) for pid in runner._descendants(before)})
            runner._reap_descendants(before)
        finally:
            if not was:
                runner._set_subreaper(False)


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> HarnessRun:
    """Run to completion, capturing output; on timeout kill the whole group and raise
    ``subprocess.TimeoutExpired`` (with what was printed so far). Every process the harness
    started is gone when this returns (`reaping`)."""
    start = time.monotonic()
    with (
        reaping() as leftovers,
        subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True) as proc,
    ):
        try:
            stdout, stderr = proc.communicate(timeout=scaled(timeout))
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            stdout, stderr = proc.communicate(timeout=scaled(30))
            raise subprocess.TimeoutExpired(argv, timeout, stdout, stderr) from None
        finally:
            _kill_group(proc)  # leftovers: hook or MCP server processes still in the group
    completed = subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)
    return HarnessRun(completed, time.monotonic() - start, leftovers=leftovers)


# -- Claude Code ---------------------------------------------------------------------------------

def claude_setup(project: Path, home: Path, *, hook_command: str | None = None,
                 matcher: str = "*", hook_timeout: int = 30, on_failure: str | None = None,
                 allow: list[str] | tuple[str, ...] = (), mcp_servers: Mapping[str, Any] | None = None,
                 extra_settings: Mapping[str, Any] | None = None) -> None:
    """Write ``<project>/.claude/settings.local.json`` (PreToolUse hook, permission allow rules),
    optionally ``<project>/.mcp.json``, and ``<home>/.claude.json`` pre-accepting the workspace.

    Allow rules matter: in ``-p`` mode Claude Code denies (``needs approval``) a Bash command that
    writes in the project, or an MCP tool, unless a rule allows it; the hook runs BEFORE those
    rules, so a hook deny wins over an allow rule."""
    project = Path(project).resolve()
    settings: dict[str, Any] = {}
    if allow:
        settings["permissions"] = {"allow": list(allow)}
    if hook_command is not None:
        entry: dict[str, Any] = {"type": "command", "command": hook_command, "timeout": hook_timeout}
        if on_failure is not None:
            entry["onFailure"] = on_failure
        settings["hooks"] = {"PreToolUse": [{"matcher": matcher, "hooks": [entry]}]}
    if mcp_servers:
        (project / ".mcp.json").write_text(json.dumps({"mcpServers": dict(mcp_servers)}, indent=2),
                                           encoding="utf-8")
        settings["enabledMcpjsonServers"] = sorted(mcp_servers)
    settings.update(extra_settings or {})
    (project / ".claude").mkdir(parents=True, exist_ok=True)
    (project / ".claude" / "settings.local.json").write_text(json.dumps(settings, indent=2),
                                                             encoding="utf-8")
    Path(home).mkdir(parents=True, exist_ok=True)
    claude_json = Path(home) / ".claude.json"
    state: dict[str, Any] = json.loads(claude_json.read_text()) if claude_json.exists() else {}
    state.setdefault("projects", {}).setdefault(str(project), {})["hasTrustDialogAccepted"] = True
    claude_json.write_text(json.dumps(state, indent=2), encoding="utf-8")


def run_claude(project: Path, home: Path, model: MockModel, prompt: str, *,
               api_key: str = "sk-ant-offline-test", args: tuple[str, ...] = (),
               env: Mapping[str, str] | None = None, timeout: float = RUN_TIMEOUT) -> HarnessRun:
    """``claude -p <prompt> --output-format json`` in ``project`` against ``model``."""
    extra = {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": api_key, **(env or {})}
    run = _run([str(harness_bin("claude")), "-p", prompt, "--output-format", "json", *args],
               Path(project), harness_env(Path(home), **extra), timeout)
    try:
        parsed = json.loads(run.proc.stdout)
        run.result = parsed if isinstance(parsed, dict) else None
    except ValueError:
        run.result = None
    return run


# -- Codex ---------------------------------------------------------------------------------------

CODEX_MODEL = "gpt-5.1-codex"  # unknown to 0.171.0's catalogue offline (a harmless warning);
                               # its fallback metadata offers the exec_command shell tool


# Offline: without these tables Codex 0.171.0 (exec and app-server) resolves api.github.com and
# chatgpt.com (curated plugin sync) and ab.chatgpt.com (analytics) at startup (seen with strace);
# with them its only connections are to the mock. Append to any $CODEX_HOME/config.toml a test
# writes (after the top-level keys).
CODEX_OFFLINE_TOML = """
[features]
plugins = false

[analytics]
enabled = false
"""


def codex_setup(project: Path, home: Path, model: MockModel, *, hook_command: str | None = None,
                matcher: str | None = "*", hook_timeout: int = 30, trust_hooks: bool = True,
                sandbox_mode: str = "danger-full-access", env_key: str | None = None,
                mcp_servers: Mapping[str, Any] | None = None, model_name: str = CODEX_MODEL,
                extra_toml: str = "") -> dict[str, str]:
    """Write ``<home>/.codex/config.toml`` (mock provider, project trusted, hook trust entries),
    ``<project>/.codex/hooks.json`` (PreToolUse hook) and optionally
    ``<project>/.codex/config.toml`` ``[mcp_servers.*]``. Returns the trust entries written.

    ``env_key``: name of the env var whose value Codex sends as ``Authorization: Bearer …``
    (without it Codex sends no credential). ``sandbox_mode`` defaults to danger-full-access so a
    hook, not Codex's own sandbox, decides. ``extra_toml`` is appended (tables only: the
    top-level keys come first)."""
    project = Path(project).resolve()
    codex_dir = project / ".codex"
    codex_dir.mkdir(parents=True, exist_ok=True)
    entries: dict[str, str] = {}
    if hook_command is not None:
        group: dict[str, Any] = {"hooks": [{"type": "command", "command": hook_command,
                                            "timeout": hook_timeout}]}
        if matcher is not None:
            group["matcher"] = matcher
        document = {"hooks": {"PreToolUse": [group]}}
        hooks_json = codex_dir / "hooks.json"
        hooks_json.write_text(json.dumps(document, indent=2), encoding="utf-8")
        if trust_hooks:
            entries = codex_hook_trust_entries(hooks_json, document)
    if mcp_servers:
        lines: list[str] = []
        for name, spec in mcp_servers.items():
            lines.append(f"[mcp_servers.{name}]")
            lines.append(f"command = {toml_string(spec['command'])}")
            lines.append("args = [" + ", ".join(toml_string(a) for a in spec.get("args", [])) + "]")
            if spec.get("env"):
                pairs = ", ".join(f"{k} = {toml_string(v)}" for k, v in spec["env"].items())
                lines.append(f"env = {{ {pairs} }}")
            lines.append("")
        (codex_dir / "config.toml").write_text("\n".join(lines), encoding="utf-8")
    provider = [
        "[model_providers.mock]",
        'name = "mock"',
        f"base_url = {toml_string(model.openai_base_url)}",
        'wire_api = "responses"',
    ]
    if env_key:
        provider.append(f"env_key = {toml_string(env_key)}")
    config = "\n".join([
        f"model = {toml_string(model_name)}",
        'model_provider = "mock"',
        f"sandbox_mode = {toml_string(sandbox_mode)}",
        'approval_policy = "never"',
        "",
        *provider,
        "",
        f"[projects.{toml_string(str(project))}]",
        'trust_level = "trusted"',
        "",
    ]) + CODEX_OFFLINE_TOML + codex_hook_trust_toml(entries) + extra_toml
    (Path(home) / ".codex").mkdir(parents=True, exist_ok=True)
    (Path(home) / ".codex" / "config.toml").write_text(config, encoding="utf-8")
    return entries


def run_codex(project: Path, home: Path, prompt: str, *, args: tuple[str, ...] = (),
              env: Mapping[str, str] | None = None, timeout: float = RUN_TIMEOUT) -> HarnessRun:
    """``codex exec --skip-git-repo-check <prompt>`` in ``project`` (config from codex_setup)."""
    return _run([str(harness_bin("codex")), "exec", "--skip-git-repo-check", *args, prompt],
                Path(project), harness_env(Path(home), **dict(env or {})), timeout)


def codex_hooks_list(project: Path, home: Path, *, timeout: float = 30) -> list[dict[str, Any]]:
    """The hooks Codex itself sees for ``project``, from ``codex app-server`` → ``hooks/list``:
    each with ``key``, ``currentHash``, ``trustStatus`` (untrusted | trusted | modified | managed),
    ``eventName``, ``matcher``, ``command``, ``timeoutSec``, ``async``, ``statusMessage``."""
    deadline = time.monotonic() + scaled(timeout)
    with reaping(), subprocess.Popen([str(harness_bin("codex")), "app-server"], cwd=project,
                          env=harness_env(Path(home)), stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                          start_new_session=True) as proc:
        stdin, stdout = proc.stdin, proc.stdout
        assert stdin is not None and stdout is not None

        def send(message: dict[str, Any]) -> None:
            stdin.write(json.dumps(message) + "\n")
            stdin.flush()

        lines: queue.Queue[str] = queue.Queue()

        def reader() -> None:
            try:
                for line in stdout:
                    lines.put(line)
            except (OSError, ValueError):  # closed under us at the end
                pass

        threading.Thread(target=reader, name="codex-app-server-reader", daemon=True).start()

        def call(msg_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
            send({"id": msg_id, "method": method, "params": params})
            while (left := deadline - time.monotonic()) > 0:
                try:
                    line = lines.get(timeout=left)
                except queue.Empty:
                    break
                message = json.loads(line)
                if message.get("id") == msg_id:
                    if "error" in message:
                        raise RuntimeError(f"codex app-server {method}: {message['error']}")
                    return dict(message["result"])
            raise TimeoutError(f"codex app-server gave no answer to {method}")

        try:
            call(1, "initialize", {"clientInfo": {"name": "agentstack-tests", "version": "0"},
                                   "capabilities": {"experimentalApi": True}})
            send({"method": "initialized"})
            listed = call(2, "hooks/list", {"cwds": [str(project)]})
        finally:
            _kill_group(proc)  # the node launcher AND the native app-server (it holds stdout)
            proc.wait(timeout=scaled(10))
    hooks: list[dict[str, Any]] = []
    for entry in listed.get("data", []):
        hooks.extend(entry.get("hooks", []))
    return hooks

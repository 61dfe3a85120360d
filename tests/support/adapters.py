"""What the per-harness adapter tests (tests/test_adapters_*.py) share: the project they build, the
pipeline they render through, the guard snapshot they check, and the offline drive of a real
harness against the mock model. Each test file keeps only what is its harness's own."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tests.conftest import make_project, run_cli_in_process
from tests.harness.binaries import harness_bin
from tests.harness.deadline import scaled
from tests.harness.drive import NOTES_SERVER
from tests.harness.mock_model import MockModel, ToolCall
from tests.support.cli import ok_in_process as ok
from tests.support.plugindeps import seeded

# The call every end-to-end test makes first: it ran when marker.txt exists.
TOUCH = ToolCall("Bash", {"command": "touch marker.txt"})
MARKER = "marker.txt"


def trust_and_apply(root: Path) -> None:
    """Review (accepting the high-risk findings these fixtures have) and render (in this process,
    as every setup step here: what the tests check is what a real harness does with the files)."""
    ok("trust", "--yes", "--accept-risk", cwd=root)
    ok("apply", "--write", cwd=root)


# ------------------------------------------------------------------------------ the projects


def notes_manifest(name: str, notes_file: Path, harnesses: str) -> str:
    """Two stdio servers (`notes`, `journal`: the test notes server, its token a secret), an
    instruction file and the project as a write grant."""
    server = f"""command = {json.dumps(sys.executable)}
args = ["-I", {json.dumps(str(NOTES_SERVER))}]
env = {{ NOTES_FILE = {json.dumps(str(notes_file))}, NOTES_TOKEN = "secret:notes-token" }}
"""
    return f"""\
[project]
name = "{name}"
harnesses = {harnesses}

[servers.notes]
{server}
[servers.journal]
{server}
[instructions]
files = ["AGENTS.base.md"]

[sandbox]
write_dirs = ["."]
"""


def notes_project(tmp_path: Path, name: str, harnesses: str) -> Path:
    """The notes project in `tmp_path/"proj <harness>"` (a git repository, its secret stored,
    locked, not trusted yet); returns its resolved root."""
    # The notes file in the project: behind the relay, a server is confined to it by default.
    where = tmp_path / f"proj {name.removesuffix('-e2e')}"
    root = make_project(where, notes_manifest(name, where / "notes.txt", harnesses),
                        {"AGENTS.base.md": "Be careful.\n"})
    return _locked(root, secret=True)


def locked_project(root: Path, manifest: str, files: dict[str, str]) -> Path:
    """A git repository at `root` with `manifest` and `files`, locked; returns the resolved root."""
    return _locked(make_project(root, manifest, files), secret=False)


def _locked(root: Path, *, secret: bool) -> Path:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    if secret:
        # The servers get their secret through the launcher, from the store (never exported).
        stored = run_cli_in_process("secret", "set", "notes-token", cwd=root, input="t0ken\n")
        assert stored.returncode == 0, stored.stderr
    ok("lock", cwd=root)
    return root.resolve()


# ---------------------------------------------------------------------------- in process


def current(root: Path) -> tuple[Any, dict[str, Any], dict[str, Any], str]:
    """(manifest, lock, consent document, digest) of the project now: the one call into the
    pipeline the adapter tests make."""
    from agentstack.consent.document import current as consent_current

    return consent_current(root)


def render(root: Path, harnesses: list[str]) -> list[Any]:
    """The file operations the adapters produce for `harnesses` (nothing is written)."""
    from agentstack.apply.engine import render_operations

    _, _, document, digest = current(root)
    return render_operations(root, document, digest, harnesses)


def rendered(root: Path, harnesses: list[str]) -> dict[str, Any]:
    """`render`, by path."""
    return {op.path: op for op in render(root, harnesses)}


def guard_snapshot(root: Path) -> dict[str, Any]:
    """The guard's snapshot of `root`, read the way the guard reads it."""
    from agentstack._guard import load_snapshot
    from agentstack.paths import guard_snapshot_path

    return load_snapshot(str(guard_snapshot_path(root)))


# ---------------------------------------------------------------- a real harness, offline


def mcp_list(binary: str, root: Path, env: Mapping[str, str], timeout: int = 180) -> str:
    """`<binary> mcp list` in `root`: what the real harness says it loads (stdout and stderr)."""
    argv = [str(harness_bin(binary)), "mcp", "list"]
    with seeded(argv, root, env):
        result = subprocess.run(argv, cwd=root, env=dict(env), capture_output=True, text=True,
                                timeout=scaled(timeout))
    return result.stdout + result.stderr


def drive(root: Path, call: ToolCall, argv: list[str],
          env_for: Callable[[MockModel], Mapping[str, str]],
          timeout: int = 180) -> tuple[bool, str, int]:
    """Run a real harness (`argv`) in `root` against a mock model that asks for `call` once.

    Returns (did the call run?, what the model was told plus the harness's output, exit code).
    `env_for(model)` gives the harness's environment (and may write its user config)."""
    marker = root / MARKER
    marker.unlink(missing_ok=True)
    with MockModel([call]) as model:
        env = dict(env_for(model))
        with seeded(argv, root, env):
            result = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True,
                                    timeout=scaled(timeout))
    texts = [r.text for r in model.tool_results]
    ran = marker.exists() if call is TOUCH else any("added note" in t for t in texts)
    return ran, "\n".join(texts) + result.stdout + result.stderr, result.returncode


def without_relay(args: list[str]) -> list[str]:
    """A rendered launcher argv without the relay's `--server N --project P --state S` (which
    every stdio server rendered with a state directory carries, checked in test_relay): as the
    launcher is rendered without a state directory (`-I -m agentstack.launch`, where the relay
    starts `-I -S <agentstack>/relaystart.py`)."""
    out = list(args)
    if out[3:4] == ["--server"]:
        assert out[5] == "--project" and out[7] == "--state", out
        del out[3:9]
        if out[1:2] == ["-S"] and out[2].endswith("relaystart.py"):
            out[1:3] = ["-m", "agentstack.launch"]
    return out


# ------------------------------------------------- the checks every real-binary test repeats


def added_key_blocks(root: Path, rendered_file: str, added: Mapping[str, Any]) -> None:
    """After trust + apply, a key `added` to the rendered JSON `rendered_file` by hand (one that
    runs code, loads servers or switches the guard off) makes the guard deny, naming the file."""
    import re

    import pytest

    from agentstack._guard import Deny, check_files

    trust_and_apply(root)
    snapshot = guard_snapshot(root)
    check_files(snapshot)
    path = root / rendered_file
    data = json.loads(path.read_text())
    data.update(added)
    path.write_text(json.dumps(data))
    with pytest.raises(Deny, match=re.escape(rendered_file)):
        check_files(snapshot)


def listed_only_after_trust(binary: str, root: Path, env: Mapping[str, str],
                            listed: Callable[[str, str], bool], timeout: int = 120) -> str:
    """Before trust, `apply --write` refuses and `<binary> mcp list` names no locked server;
    after trust + apply, `listed(server, output)` holds for each (`notes`, `journal`). Returns
    the listing after trust."""
    assert run_cli_in_process("apply", "--write", cwd=root).returncode == 1
    before = mcp_list(binary, root, env, timeout=timeout)
    assert "notes" not in before and "journal" not in before, before
    trust_and_apply(root)
    after = mcp_list(binary, root, env, timeout=timeout)
    for server in ("notes", "journal"):
        assert listed(server, after), after
    return after


def line_of(server: str, listing: str, form: str = " {server}:") -> str:
    """The line of a `mcp list` output naming `server` (`form` how it is named there)."""
    return next((ln for ln in listing.splitlines() if form.format(server=server) in ln), "")


def allowed_then_blocked_on_edit(
    root: Path,
    run: Callable[[ToolCall], tuple[bool, str, int]],
    shell: ToolCall,
    mcp_call: ToolCall,
    rendered_file: str,
    servers_key: str = "mcpServers",
) -> None:
    """The guard end to end, up to `revoke` (what follows differs per harness): after trust +
    apply, `shell` and `mcp_call` run; after a locked server's args in `rendered_file` are edited
    behind agentstack's back, `shell` is blocked and the reason names the file; after
    `apply --write --force`, it runs again."""
    trust_and_apply(root)
    ran, text, rc = run(shell)
    assert ran and rc == 0, text
    ran, text, _ = run(mcp_call)
    assert ran, text
    path = root / rendered_file
    data = json.loads(path.read_text())
    data[servers_key]["notes"]["args"].append("--debug")
    path.write_text(json.dumps(data, indent=2))
    ran, text, _ = run(shell)
    assert not ran and rendered_file in text and "agentstack guard" in text, text
    ok("apply", "--write", "--force", cwd=root)
    ran, text, _ = run(shell)
    assert ran, text

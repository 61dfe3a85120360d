"""Secrets reach servers outside `agentstack run`: the rendered server starts through
`agentstack.launch`, which reads `secret:NAME` from the store and execs the server with it.

The real Claude Code (offline) starts a server that refuses to serve without its secret:
`claude mcp list` reports it failed before `agentstack secret set`, connected after, and no
rendered file holds the value or a `${…}` the user would have to export."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentstack.launch import LaunchError, parse, read_secret
from tests.conftest import make_project, run_cli
from tests.harness.binaries import harness_bin, harness_env
from tests.harness.deadline import scaled
from tests.harness.drive import NOTES_SERVER

SECRET = "s3cret-value with spaces"


VAULT_SCRIPT = (
    # The server serves only with NOTES_TOKEN set, and records what it received. (A script file:
    # `$VAR` written into a rendered argument is refused, since some harnesses expand it.)
    'test -n "$NOTES_TOKEN" || { echo "no token" >&2; exit 7; }\n'
    'printf %s "$NOTES_TOKEN" > "$1"\n'
    'exec "$2" -I "$3"\n'
)


def _manifest(notes_file: Path, seen: Path) -> str:
    args = ["servers/vault.sh", str(seen), sys.executable, str(NOTES_SERVER)]
    return f"""\
[project]
name = "secret-e2e"
harnesses = ["claude-code", "codex"]

[servers.vault]
command = "sh"
args = {json.dumps(args)}
env = {{ NOTES_TOKEN = "secret:vault-token", NOTES_FILE = {json.dumps(str(notes_file))} }}
"""


def _run_launcher(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-I", "-m", "agentstack.launch", *args],
                          capture_output=True, text=True, env=env or dict(os.environ), timeout=scaled(60))


def test_launcher_reads_the_store_and_execs(isolated_home: Path) -> None:
    missing = _run_launcher("--secret", "TOKEN=tok", "--", "sh", "-c", 'printf %s "$TOKEN"')
    assert missing.returncode == 1
    assert "agentstack secret set tok" in missing.stderr
    assert run_cli("secret", "set", "tok", cwd=isolated_home, input="v4lue\n").returncode == 0
    ok = _run_launcher("--secret", "TOKEN=tok", "--", "sh", "-c", 'printf %s "$TOKEN"')
    assert ok.returncode == 0 and ok.stdout == "v4lue", ok.stderr
    # The store's checks hold: a store readable by others is refused, not used.
    store = Path(os.environ["AGENTSTACK_HOME"]) / "secrets"
    store.chmod(0o755)
    refused = _run_launcher("--secret", "TOKEN=tok", "--", "true")
    assert refused.returncode == 1 and "not a private directory" in refused.stderr
    store.chmod(0o700)
    (store / "tok").chmod(0o644)
    assert _run_launcher("--secret", "TOKEN=tok", "--", "true").returncode == 1
    (store / "tok").chmod(0o600)
    link = store / "linked"
    link.symlink_to(store / "tok")
    with pytest.raises(LaunchError):
        read_secret(str(store), "linked")  # links are not followed


def test_launcher_usage_errors() -> None:
    for argv in ([], ["--"], ["--secret", "bad key=x", "--", "true"], ["--secret", "K=../x", "--",
                 "true"], ["stray"]):
        with pytest.raises(LaunchError):
            parse(argv)
    assert parse(["--secret", "A=b", "--", "cmd", "--secret"]) == ({"A": "b"}, ["cmd", "--secret"])
    assert _run_launcher("nonsense").returncode == 2


def test_an_explicit_environment_value_is_used_when_the_store_is_unreadable(
    isolated_home: Path,
) -> None:
    env = dict(os.environ, TOKEN="given")
    ok = _run_launcher("--secret", "TOKEN=absent", "--", "sh", "-c", 'printf %s "$TOKEN"', env=env)
    assert ok.returncode == 0 and ok.stdout == "given"


def test_real_claude_starts_a_server_that_needs_a_secret(tmp_path: Path,
                                                        isolated_home: Path) -> None:
    claude = harness_bin("claude")
    # Both files in the project: behind the relay, the server is confined to it by default.
    # Behind the relay the server is confined: where it writes is granted by [sandbox].
    out = tmp_path / "out"
    out.mkdir()
    seen = out / "seen-token"
    text = _manifest(out / "notes.txt", seen) + f"\n[sandbox]\nwrite_dirs = [{json.dumps(str(out))}]\n"
    root = make_project(tmp_path / "proj", text, {"servers/vault.sh": VAULT_SCRIPT}).resolve()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    assert run_cli("lock", cwd=root).returncode == 0
    trusted = run_cli("trust", "--yes", "--accept-risk", cwd=root)
    assert trusted.returncode == 0, trusted.stderr
    applied = run_cli("apply", "--write", cwd=root)
    assert applied.returncode == 0, applied.stderr
    assert "needs secret:vault-token, which is not stored" in applied.stderr
    assert "secret:vault-token" in run_cli("status", cwd=root).stdout

    def mcp_list() -> str:
        result = subprocess.run([str(claude), "mcp", "list"], cwd=root,
                                env=harness_env(isolated_home), capture_output=True, text=True,
                                timeout=scaled(120))
        line = [ln for ln in (result.stdout + result.stderr).splitlines()
                if ln.startswith("vault:")]
        assert line, result.stdout + result.stderr
        return line[0]

    assert "Connected" not in mcp_list()  # no secret stored yet: the server cannot start
    stored = run_cli("secret", "set", "vault-token", cwd=root, input=SECRET + "\n")
    assert stored.returncode == 0, stored.stderr
    assert "✔ Connected" in mcp_list()
    assert seen.read_text() == SECRET  # the value reached the server, from the store
    rendered = (root / ".mcp.json").read_text() + (root / ".codex" / "config.toml").read_text()
    assert SECRET not in rendered and "${NOTES_TOKEN}" not in rendered
    assert "env_vars" not in rendered
    status = run_cli("status", cwd=root)
    assert status.returncode == 0, status.stderr


def test_a_secret_that_fails_the_stores_checks_is_never_replaced_by_the_environment(
    isolated_home: Path,
) -> None:
    """Only a secret that is not stored (or a store the kernel closes) may be stood in for by a
    value in the environment; a store that is not private, or a damaged secret file, refuses."""
    assert run_cli("secret", "set", "tok", cwd=isolated_home, input="v4lue\n").returncode == 0
    store = Path(os.environ["AGENTSTACK_HOME"]) / "secrets"
    env = dict(os.environ, TOKEN="ambient")
    command = ("--secret", "TOKEN=tok", "--", "sh", "-c", 'printf %s "$TOKEN"')
    store.chmod(0o755)  # readable by others: not the store agentstack keeps
    refused = _run_launcher(*command, env=env)
    assert refused.returncode == 1 and "ambient" not in refused.stdout
    assert "not a private directory" in refused.stderr
    store.chmod(0o700)
    (store / "tok").write_bytes(b"one\ntwo\nthree\n")  # damaged: several lines
    damaged = _run_launcher(*command, env=env)
    assert damaged.returncode == 1 and "ambient" not in damaged.stdout
    (store / "tok").write_bytes(b"bare-value\n")  # an older, unpadded file with its line ending
    bare = _run_launcher(*command, env=env)
    assert bare.returncode == 0 and bare.stdout == "bare-value"

"""`doctor`, `why`, `check` and `lock` agree with `run`: one resolution of the policy, one error.

Reproduced first on the landed code: `doctor` said `policy ok` and `why` answered normally for a
setup whose `read_dirs` path is missing while `run` refused it; `SSH_AUTH_SOCK` in `sandbox.env`
passed `lock` and only `run` refused it; `why --json` had no status, source, details or suggested
edit, and `--op readwrite` was refused.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentstack.errors import ManifestInvalid
from agentstack.manifest.model import Manifest, Sandbox, parse_manifest
from agentstack.sandbox.resolve import ConfinementError, resolve_policy
from tests.conftest import make_project, run_cli_in_process

MISSING = """\
[project]
name = "p"
harnesses = ["claude-code"]

[sandbox]
read_dirs = ["~/missing-dir"]
"""


def _lock_and_trust(root: Path) -> None:
    assert run_cli_in_process("lock", cwd=root).returncode == 0
    result = run_cli_in_process("trust", "--yes", "--accept-risk", cwd=root)
    assert result.returncode == 0, result.stderr


def test_a_missing_grant_is_one_error_in_resolve_why_doctor_and_check(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", MISSING)
    _lock_and_trust(root)
    with pytest.raises(ConfinementError) as caught:
        resolve_policy(Sandbox.model_validate({"read_dirs": ["~/missing-dir"]}), root.resolve())
    message = caught.value.message
    assert "sandbox.read_dirs[0]" in message and "does not exist" in message

    why = run_cli_in_process("why", "--path", "README.md", cwd=root)
    assert why.returncode == 1
    assert "sandbox.read_dirs[0]" in why.stderr and "does not exist" in why.stderr

    doctor = run_cli_in_process("doctor", "--json", cwd=root)
    rows = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    for name in ("policy command", "policy claude-code"):
        assert rows[name]["status"] == "fail", rows[name]
        assert "sandbox.read_dirs[0]" in rows[name]["detail"]
    assert doctor.returncode == 1

    boundary = tmp_path / "boundary.toml"
    boundary.write_text("[filesystem]\nread = [\"/\"]\nwrite = [\"/\"]\n", encoding="utf-8")
    check = run_cli_in_process("check", "--boundary", str(boundary), cwd=root)
    assert check.returncode == 1
    assert "sandbox.read_dirs[0]" in check.stderr + check.stdout


def test_run_refuses_the_missing_grant_with_the_same_message(tmp_path: Path) -> None:
    pytest.importorskip("nono_py")
    root = make_project(tmp_path / "p", MISSING)
    _lock_and_trust(root)
    run = run_cli_in_process("run", "--", "/bin/true", cwd=root)
    why = run_cli_in_process("why", cwd=root)
    assert run.returncode == why.returncode == 1
    first = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert first and first == [line for line in why.stderr.splitlines()
                               if line.startswith("error:")]


@pytest.mark.parametrize("name", ["SSH_AUTH_SOCK", "LD_PRELOAD", "AGENTSTACK_HOME", "TMPDIR"])
def test_lock_refuses_what_run_never_accepts_in_sandbox_env(tmp_path: Path, name: str) -> None:
    root = make_project(tmp_path / "p", f"""\
[project]
name = "p"
harnesses = ["claude-code"]

[sandbox]
env = ["LANG", "{name}"]
""")
    result = run_cli_in_process("lock", cwd=root)
    assert result.returncode == 2, result.stdout
    assert "sandbox.env[1]" in result.stderr and name in result.stderr
    assert "hint:" in result.stderr
    assert not (root / "agentstack.lock").exists()


def test_lock_refuses_a_credential_env_in_sandbox_env(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", """\
[project]
name = "p"
harnesses = ["claude-code"]

[sandbox]
env = ["ANTHROPIC_API_KEY"]

[sandbox.credentials.anthropic]
upstream = "https://api.anthropic.com"
secret = "anthropic"
env = "ANTHROPIC_API_KEY"
""")
    result = run_cli_in_process("lock", cwd=root)
    assert result.returncode == 2
    assert "sandbox.env[0]" in result.stderr and "hint:" in result.stderr


def test_the_fast_validator_and_the_model_agree_on_sandbox_env() -> None:
    import agentstack.manifest.fast as manifestfast

    for env in (["SSH_AUTH_SOCK"], ["LD_LIBRARY_PATH"], ["TMPDIR"]):
        document = {"project": {"name": "p"}, "sandbox": {"env": env}}
        with pytest.raises(ManifestInvalid) as caught:
            _parse(env)
        assert [p.path for p in caught.value.problems] == ["sandbox.env[0]"]
        assert manifestfast.validated(document) is None


def _parse(env: list[str]) -> Manifest:
    text = f'[project]\nname = "p"\n[sandbox]\nenv = {json.dumps(env)}\n'
    return parse_manifest(text.encode())


# ------------------------------------------------------------------ why --json


GRANTS = """\
[project]
name = "p"
harnesses = ["claude-code"]

[sandbox]
read_dirs = ["/usr/share"]
network = { localhost_ports = [8080] }
"""


def _why(root: Path, *args: str) -> tuple[int, dict[str, object]]:
    result = run_cli_in_process("why", *args, "--json", cwd=root)
    return result.returncode, json.loads(result.stdout)


def test_why_json_says_status_source_details_and_suggested(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", GRANTS)
    (root / "docs").mkdir()

    code, out = _why(root, "--path", "docs/a.md", "--op", "write")
    assert code == 0 and out["status"] == "allowed" and out["source"] == "workdir"
    assert out["details"]["access"] == "rw"  # type: ignore[index]

    code, out = _why(root, "--path", "/usr/share/x", "--op", "write")
    assert code == 1 and out["status"] == "denied"
    assert out["source"] == "sandbox.read_dirs[0]"
    assert out["suggested"] == {"edit": "move", "from": "sandbox.read_dirs[0]",
                                "to": "sandbox.write_dirs", "value": "/usr/share"}

    code, out = _why(root, "--path", str(tmp_path / "elsewhere" / "f"), "--op", "read")
    assert code == 1 and out["source"] is None
    assert out["suggested"] == {"edit": "add", "to": "sandbox.read_dirs",
                                "value": str((tmp_path / "elsewhere").resolve())}

    code, out = _why(root, "--path", os.path.expanduser("~/.ssh/id_ed25519"))
    assert code == 1 and out["source"] == "nono:deny_credentials"
    assert out["suggested"] is None  # no manifest edit opens a credential
    assert "no manifest edit" in str(out["details"]["note"])  # type: ignore[index]

    code, out = _why(root, "--host", "127.0.0.1", "--port", "9090")
    assert code == 1 and out["suggested"] == {"edit": "add",
                                              "to": "sandbox.network.localhost_ports",
                                              "value": 9090}
    code, out = _why(root, "--host", "127.0.0.1", "--port", "8080")
    assert code == 0 and out["source"] == "sandbox.network.localhost_ports"
    code, out = _why(root, "--host", "example.org", "--port", "443")
    assert code == 1 and out["suggested"] == {"edit": "add",
                                              "to": "sandbox.network.allow_domains",
                                              "value": "example.org"}


def test_why_op_readwrite_needs_both(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", GRANTS)
    code, out = _why(root, "--path", "README.md", "--op", "readwrite")
    assert code == 0 and out["status"] == "allowed"
    code, out = _why(root, "--path", "/usr/share/x", "--op", "readwrite")
    assert code == 1 and out["status"] == "denied"
    assert "write" in str(out["reason"])
    bad = run_cli_in_process("why", "--path", "x", "--op", "exec", cwd=root)
    assert bad.returncode == 2 and "readwrite" in bad.stderr


def test_lock_refuses_a_grant_run_can_never_accept(tmp_path: Path) -> None:
    pytest.importorskip("nono_py")
    ssh = Path(os.path.expanduser("~/.ssh"))
    ssh.mkdir(parents=True, exist_ok=True)
    (ssh / "config").write_text("Host x\n", encoding="utf-8")
    root = make_project(tmp_path / "p", """\
[project]
name = "p"
harnesses = ["claude-code"]

[sandbox]
read_dirs = ["/usr/share"]
read_files = ["~/.ssh/config"]
""")
    result = run_cli_in_process("lock", cwd=root)
    assert result.returncode == 2, result.stdout
    assert "sandbox.read_files[0]" in result.stderr and "always denied" in result.stderr
    assert "sandbox.read_dirs" not in result.stderr
    assert not (root / "agentstack.lock").exists()

"""The team policy: signed with SSHSIG, fetched from a real git repository (file://), pinned by
commit, verified before every use; `trust`, `apply`, `receive` and `quarantine release` refuse what
it forbids, naming the rule; a tampered, unsigned, wrongly signed or older policy is refused and
the one in force stays; the fetch runs no code of the repository (a canary fsmonitor and hooks)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import agentstack.share.sshsig as sshsig
from agentstack import teampolicy
from agentstack.errors import InvalidInput
from agentstack.paths import agentstack_cache
from tests.conftest import git, make_project, run_cli_in_process

TEAM = sshsig.PrivateKey.generate("team")
OTHER = sshsig.PrivateKey.generate("mallory")

POLICY_V1 = """\
[policy]
name = "acme"
version = 1
description = "what acme's setups stay within"

[require]
guard = true

[forbid]
items = ["servers.fetch*"]
executables = ["curl", "wget"]
"""

POLICY_V2 = POLICY_V1.replace("version = 1", "version = 2").replace(
    'executables = ["curl", "wget"]', 'executables = ["curl", "wget", "node"]'
)

GOOD = """\
[project]
name = "good"
harnesses = ["claude-code"]

[servers.clock]
command = "python3"
args = ["clock.py"]
"""

BAD = GOOD + """
[servers.fetcher]
command = "python3"
args = ["clock.py"]
"""


def _publish(repo: Path, text: str, *, key: sshsig.PrivateKey | None = TEAM,
             namespace: str = teampolicy.NAMESPACE, signed_text: str | None = None) -> str:
    """Commit a policy (and its signature over `signed_text`, default `text`) to `repo`."""
    (repo / teampolicy.POLICY_NAME).write_text(text, encoding="utf-8")
    sig = repo / teampolicy.SIGNATURE_NAME
    if key is None:
        sig.unlink(missing_ok=True)
    else:
        body = (signed_text if signed_text is not None else text).encode("utf-8")
        sig.write_text(sshsig.sign(key, body, namespace=namespace), encoding="ascii")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "--allow-empty", "-m", "policy", cwd=repo)
    return git("rev-parse", "HEAD", cwd=repo).strip()


def _canary(tmp_path: Path) -> tuple[Path, Path]:
    """A script that leaves a file when anything runs it (outside /tmp's test tree is not
    needed: it is a witness, not a secret)."""
    witness = tmp_path / "canary-ran"
    script = tmp_path / "canary.sh"
    script.write_text(f"#!/bin/sh\necho \"$0 $*\" >> {witness}\nexit 0\n", encoding="utf-8")
    script.chmod(0o755)
    return script, witness


_HOOKS = ("post-checkout", "post-merge", "reference-transaction", "pre-auto-gc",
          "post-rewrite", "fsmonitor-watchman", "post-index-change", "pre-push")


def _plant(git_dir: Path, script: Path) -> None:
    """A repository-local fsmonitor and every hook git might run, all the canary."""
    subprocess.run(["git", "config", "--file", str(git_dir / "config"), "core.fsmonitor",
                    str(script)], check=True)
    hooks = git_dir / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in _HOOKS:
        shutil.copy(script, hooks / name)
        (hooks / name).chmod(0o755)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "policy-repo"
    path.mkdir()
    git("init", "-q", "-b", "main", cwd=path)
    _publish(path, POLICY_V1)
    return path


def _signer_file(tmp_path: Path, key: sshsig.PrivateKey = TEAM) -> str:
    pub = tmp_path / f"{key.public.fingerprint[7:15].replace('/', '_')}.pub"
    pub.write_text(key.public.openssh("team") + "\n", encoding="utf-8")
    return str(pub)


def _add(repo: Path, tmp_path: Path) -> None:
    proc = run_cli_in_process("policy", "add", repo.as_uri(), "--signer", _signer_file(tmp_path),
                              cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def _in_force_version() -> int:
    current = teampolicy.in_force()
    assert current is not None
    return current.policy.version


def _project(tmp_path: Path, manifest: str, name: str = "p") -> Path:
    root = make_project(tmp_path / name, manifest, {"clock.py": "print('tick')\n"})
    assert run_cli_in_process("lock", cwd=root).returncode == 0
    return root


# ------------------------------------------------------------------ enforcement


def test_a_forbidden_item_makes_trust_refuse_naming_the_rule(repo: Path, tmp_path: Path) -> None:
    _add(repo, tmp_path)
    bad = _project(tmp_path, BAD, "bad")
    refused = run_cli_in_process("trust", "--yes", "--accept-risk", cwd=bad)
    assert refused.returncode == 1, refused.stderr
    assert "team policy acme v1" in refused.stderr
    assert "forbid.items 'servers.fetch*': servers.fetcher is declared" in refused.stderr
    assert run_cli_in_process("status", "--json", cwd=bad).stdout.count('"untrusted"') == 1
    good = _project(tmp_path, GOOD, "good")
    assert run_cli_in_process("trust", "--yes", "--accept-risk", cwd=good).returncode == 0
    check = run_cli_in_process("policy", "check", cwd=bad)
    assert check.returncode == 1 and "servers.fetcher" in check.stdout


def test_apply_refuses_a_setup_trusted_before_the_policy(repo: Path, tmp_path: Path) -> None:
    bad = _project(tmp_path, BAD, "bad")
    assert run_cli_in_process("trust", "--yes", "--accept-risk", cwd=bad).returncode == 0
    _add(repo, tmp_path)
    refused = run_cli_in_process("apply", "--write", cwd=bad)
    assert refused.returncode == 1
    assert "apply refused by the team policy acme v1" in refused.stderr
    assert not (bad / ".mcp.json").exists()


def test_forbidden_executable_and_package_rules(tmp_path: Path) -> None:
    policy = teampolicy.parse_policy(
        b'[policy]\nname = "t"\nversion = 1\n[forbid]\nexecutables = ["curl"]\n'
        b'hosts = ["*.evil.example"]\n'
        b'[require]\nitems = ["servers.audit"]\nsandbox = true\n'
        b'packages = ["npm:@modelcontextprotocol/*"]\n'
    )
    document = {
        "servers": {
            "a": {"command": "/usr/bin/curl", "args": ["x"]},
            "b": {"command": "npx", "args": ["-y", "left-pad@1.0.0"]},
            "c": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-git@1.2.3"]},
            "d": {"transport": "http", "url": "https://mcp.evil.example/x"},
        },
        "sandbox": {"enabled": False},
    }
    rules = {(b.rule, b.detail) for b in teampolicy.check(policy, document, None)}
    assert ("forbid.executables 'curl'", "servers.a runs /usr/bin/curl") in rules
    assert any(r == "require.packages" and "servers.b" in d for r, d in rules)
    assert not any(r == "require.packages" and "servers.c" in d for r, d in rules)
    assert ("forbid.hosts '*.evil.example'", "servers.d reaches mcp.evil.example") in rules
    assert ("require.items 'servers.audit'", "no such item is declared") in rules
    assert ("require.sandbox", "sandbox.enabled = false") in rules


def test_require_guard_refuses_a_file_that_switches_hooks_off(tmp_path: Path) -> None:
    policy = teampolicy.parse_policy(POLICY_V1.encode())
    root = make_project(tmp_path / "g", GOOD, {
        "clock.py": "print('tick')\n",
        ".claude/settings.json": json.dumps({"disableAllHooks": True}),
    })
    assert run_cli_in_process("lock", cwd=root).returncode == 0
    from agentstack.consent.document import current

    _, _, document, _ = current(root)
    breaches = teampolicy.check(policy, document, root)
    assert [b.rule for b in breaches] == ["require.guard"], breaches
    assert ".claude/settings.json" in breaches[0].detail


def test_a_boundary_in_the_policy_is_enforced(tmp_path: Path) -> None:
    policy = teampolicy.parse_policy(
        b'[policy]\nname = "t"\nversion = 1\n[boundary.filesystem]\nwrite = ["'
        + str(tmp_path).encode() + b'"]\n[boundary.commands]\nexecutables = ["node"]\n'
    )
    root = _project(tmp_path, GOOD, "b")
    from agentstack.consent.document import current

    _, _, document, _ = current(root)
    assert [b.rule for b in teampolicy.check(policy, document, root)] == ["boundary.commands"]


def test_receive_and_release_refuse_what_the_policy_forbids(repo: Path, tmp_path: Path) -> None:
    bad = _project(tmp_path, BAD, "sender")
    assert run_cli_in_process("keys", "generate", "alice", cwd=bad).returncode == 0
    assert run_cli_in_process("trust", "--yes", "--accept-risk", cwd=bad).returncode == 0
    out = tmp_path / "bad.astack"
    assert run_cli_in_process("share", "-o", str(out), "--version", "1", cwd=bad).returncode == 0
    held = run_cli_in_process("receive", str(out), cwd=tmp_path)  # before the policy
    assert held.returncode == 0, held.stderr
    ident = held.stdout.strip()
    _add(repo, tmp_path)
    release = run_cli_in_process("quarantine", "release", ident, "--into", str(tmp_path / "dest"),
                                 "--yes", "--allow-unknown-signer", cwd=tmp_path)
    assert release.returncode == 1
    assert "release refused by the team policy acme v1" in release.stderr
    assert "forbid.items 'servers.fetch*'" in release.stderr
    assert not (tmp_path / "dest" / "agentstack.toml").exists()
    # a new bundle with the forbidden item is not even held
    assert run_cli_in_process("share", "-o", str(tmp_path / "b2.astack"), "--version", "2",
                              cwd=bad).returncode == 0
    before = sorted(os.listdir(Path(os.environ["AGENTSTACK_HOME"]) / "quarantine"))
    refused = run_cli_in_process("receive", str(tmp_path / "b2.astack"), cwd=tmp_path)
    assert refused.returncode == 1
    assert "receive of good refused by the team policy" in refused.stderr
    assert sorted(os.listdir(Path(os.environ["AGENTSTACK_HOME"]) / "quarantine")) == before


def test_doctor_shows_the_policy_in_force(repo: Path, tmp_path: Path) -> None:
    def row() -> dict[str, object]:
        proc = run_cli_in_process("doctor", "--json", cwd=tmp_path)
        return next(c for c in json.loads(proc.stdout)["checks"] if c["name"] == "policy")

    assert row()["policy"] is None
    _add(repo, tmp_path)
    shown = row()
    assert shown["status"] == "ok"
    assert shown["policy"]["name"] == "acme" and shown["policy"]["version"] == 1  # type: ignore[index]
    assert shown["policy"]["commit"] == git("rev-parse", "HEAD", cwd=repo).strip()  # type: ignore[index]


# ------------------------------------------------------------------ versions and signatures


def test_update_installs_a_newer_version_shown_as_a_diff(repo: Path, tmp_path: Path) -> None:
    _add(repo, tmp_path)
    same = run_cli_in_process("policy", "update", cwd=tmp_path)
    assert same.returncode == 0 and "up to date" in same.stderr
    commit = _publish(repo, POLICY_V2)
    proc = run_cli_in_process("policy", "update", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert '-executables = ["curl", "wget"]' in proc.stdout
    assert '+executables = ["curl", "wget", "node"]' in proc.stdout
    current = teampolicy.in_force()
    assert current is not None and current.policy.version == 2 and current.commit == commit


@pytest.mark.parametrize("attack", ["tampered", "unsigned", "other-key", "other-namespace",
                                    "older", "same-version-other-content", "not-a-policy"])
def test_a_bad_new_version_is_refused_and_the_one_in_force_stays(
    repo: Path, tmp_path: Path, attack: str
) -> None:
    _add(repo, tmp_path)
    assert run_cli_in_process("policy", "update", cwd=tmp_path).returncode == 0
    _publish(repo, POLICY_V2)
    assert run_cli_in_process("policy", "update", cwd=tmp_path).returncode == 0
    pinned = teampolicy.in_force()
    assert pinned is not None and pinned.policy.version == 2
    weaker = POLICY_V2.replace("version = 2", "version = 3").replace('"servers.fetch*"', '"servers.x"')
    if attack == "tampered":  # signed v3, then edited after signing
        _publish(repo, weaker.replace('"servers.x"', '"servers.none"'), signed_text=weaker)
    elif attack == "unsigned":
        _publish(repo, weaker, key=None)
    elif attack == "other-key":
        _publish(repo, weaker, key=OTHER)
    elif attack == "other-namespace":  # the team's key, but a signature made for bundles
        _publish(repo, weaker, namespace=sshsig.NAMESPACE)
    elif attack == "older":  # a genuine, signed, older policy
        _publish(repo, POLICY_V1.replace('"servers.fetch*"', '"servers.x"'))
    elif attack == "same-version-other-content":
        _publish(repo, POLICY_V2.replace('"servers.fetch*"', '"servers.x"'))
    elif attack == "not-a-policy":
        _publish(repo, weaker + "\n[surprise]\nx = 1\n")
    proc = run_cli_in_process("policy", "update", cwd=tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    expected = {
        "tampered": "the signature does not verify",
        "unsigned": "unsigned",
        "other-key": "not by the policy's signer",
        "other-namespace": "the signature does not verify",
        "older": "a rollback is refused",
        "same-version-other-content": "with other content",
        "not-a-policy": "not a valid policy",
    }[attack]
    assert expected in proc.stderr, proc.stderr
    current = teampolicy.in_force()
    assert current is not None and current.commit == pinned.commit and current.text == pinned.text
    bad = _project(tmp_path, BAD, "bad")
    assert run_cli_in_process("trust", "--yes", "--accept-risk", cwd=bad).returncode == 1


def test_a_branch_reset_to_an_older_commit_is_a_rollback(repo: Path, tmp_path: Path) -> None:
    first = git("rev-parse", "HEAD", cwd=repo).strip()
    _add(repo, tmp_path)
    _publish(repo, POLICY_V2)
    assert run_cli_in_process("policy", "update", cwd=tmp_path).returncode == 0
    git("reset", "-q", "--hard", first, cwd=repo)  # a force-push of the old policy
    proc = run_cli_in_process("policy", "update", cwd=tmp_path)
    assert proc.returncode == 1 and "rollback" in proc.stderr
    assert _in_force_version() == 2


@pytest.mark.parametrize("attack", ["unsigned", "other-key"])
def test_add_refuses_a_policy_that_does_not_verify(repo: Path, tmp_path: Path,
                                                   attack: str) -> None:
    _publish(repo, POLICY_V1, key=None if attack == "unsigned" else OTHER)
    proc = run_cli_in_process("policy", "add", repo.as_uri(), "--signer", _signer_file(tmp_path),
                              cwd=tmp_path)
    assert proc.returncode == 1
    assert teampolicy.in_force() is None
    bad = _project(tmp_path, BAD, "bad")
    assert run_cli_in_process("trust", "--yes", "--accept-risk", cwd=bad).returncode == 0


@pytest.mark.parametrize("what", ["policy", "signature"])
def test_a_policy_tampered_with_on_disk_refuses_everything(repo: Path, tmp_path: Path,
                                                           what: str) -> None:
    _add(repo, tmp_path)
    base = teampolicy.policy_dir()
    state = json.loads((base / "state.json").read_text())
    version_dir = base / state["commit"]
    if what == "policy":
        path = version_dir / teampolicy.POLICY_NAME
        path.write_text(path.read_text().replace('"servers.fetch*"', '"servers.x"'))
    else:
        (version_dir / teampolicy.SIGNATURE_NAME).write_text(
            sshsig.sign(OTHER, (version_dir / teampolicy.POLICY_NAME).read_bytes(),
                        namespace=teampolicy.NAMESPACE))
    good = _project(tmp_path, GOOD, "good")
    refused = run_cli_in_process("trust", "--yes", "--accept-risk", cwd=good)
    assert refused.returncode == 1, refused.stderr
    assert "team policy in force" in refused.stderr
    doctor = json.loads(run_cli_in_process("doctor", "--json", cwd=tmp_path).stdout)
    assert next(c for c in doctor["checks"] if c["name"] == "policy")["status"] == "fail"
    # `policy update` fetches it again (the same commit, verified) and it holds again
    assert run_cli_in_process("policy", "update", cwd=tmp_path).returncode == 0
    assert run_cli_in_process("trust", "--yes", "--accept-risk", cwd=good).returncode == 0


def test_ssh_keygen_signs_a_policy_agentstack_accepts(repo: Path, tmp_path: Path) -> None:
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen is not installed")
    key = tmp_path / "team_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "team", "-f", str(key)],
                   check=True)
    policy = repo / teampolicy.POLICY_NAME
    policy.write_text(POLICY_V2, encoding="utf-8")
    (repo / teampolicy.SIGNATURE_NAME).unlink()  # ssh-keygen does not overwrite a signature
    subprocess.run(["ssh-keygen", "-Y", "sign", "-q", "-n", teampolicy.NAMESPACE, "-f", str(key),
                    str(policy)], check=True, capture_output=True)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "v2 by ssh-keygen", cwd=repo)
    proc = run_cli_in_process("policy", "add", repo.as_uri(), "--signer", f"{key}.pub",
                              cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _in_force_version() == 2


def test_policy_sign_checks_the_file(tmp_path: Path) -> None:
    good = tmp_path / teampolicy.POLICY_NAME
    good.write_text(POLICY_V1, encoding="utf-8")
    out = teampolicy.sign(good, TEAM)
    assert teampolicy.verify(good.read_bytes(), out.read_bytes(), TEAM.public.openssh(),
                             where="x").version == 1
    bad = tmp_path / "bad.toml"
    bad.write_text('[policy]\nname = "x"\nversion = 0\n', encoding="utf-8")
    with pytest.raises(InvalidInput):
        teampolicy.sign(bad, TEAM)
    assert not (tmp_path / "bad.toml.sig").exists()


# ------------------------------------------------------------------ no repository code runs


def test_the_policy_fetch_runs_no_repository_code(repo: Path, tmp_path: Path) -> None:
    script, witness = _canary(tmp_path)
    _plant(repo / ".git", script)
    # The canary is live: git itself runs it in that repository.
    subprocess.run(["git", "status", "--short"], cwd=repo, capture_output=True, check=False)
    assert witness.exists(), "the canary fsmonitor did not run under plain git"
    witness.unlink()
    _add(repo, tmp_path)
    from agentstack.lock.gitsource import mirror_path

    mirror = mirror_path(agentstack_cache(), repo.as_uri())
    assert (mirror / "HEAD").exists()
    _plant(mirror, script)  # even planted in agentstack's own mirror, nothing runs
    _publish(repo, POLICY_V2)
    witness.unlink(missing_ok=True)  # our own commit ran the repository's hooks, not agentstack
    assert run_cli_in_process("policy", "update", cwd=tmp_path).returncode == 0
    assert _in_force_version() == 2
    good = _project(tmp_path, GOOD, "good")
    assert run_cli_in_process("trust", "--yes", "--accept-risk", cwd=good).returncode == 0
    assert not witness.exists(), witness.read_text()

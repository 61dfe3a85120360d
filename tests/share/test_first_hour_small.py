"""The smaller things a new user notices: `quarantine list` names a signer trusted after the
bundle was received; `share -o` into a missing directory is refused (nothing created); a moved
git tag is reported as the same name resolving to other code, not "from <the same URL>"."""

from __future__ import annotations

import shutil
from pathlib import Path

from agentstack.consent.diff import consent_diff
from tests.conftest import EXAMPLES, run_cli_in_process
from tests.support.project import trusted_example


def _trusted(tmp_path: Path) -> Path:
    return trusted_example("minimal", tmp_path, apply=False)


def test_share_into_a_missing_directory_is_refused(tmp_path: Path) -> None:
    root = _trusted(tmp_path)
    assert run_cli_in_process("keys", "generate", "alice", cwd=root).returncode == 0
    target = tmp_path / "no" / "such" / "dir" / "team.astack"
    done = run_cli_in_process("share", "-o", str(target), "--version", "1", cwd=root)
    assert done.returncode == 2, done.stderr
    assert "does not exist; nothing was written" in done.stderr and "mkdir -p" in done.stderr
    assert not (tmp_path / "no").exists()


def test_quarantine_list_names_a_signer_trusted_after_receive(tmp_path: Path) -> None:
    root = _trusted(tmp_path)
    key = run_cli_in_process("keys", "generate", "alice", cwd=root)
    assert key.returncode == 0, key.stderr
    bundle = tmp_path / "team.astack"
    assert run_cli_in_process("share", "-o", str(bundle), "--version", "1", cwd=root).returncode == 0
    bob = tmp_path / "bob"
    env = {"HOME": str(bob), "AGENTSTACK_HOME": str(bob / ".config" / "agentstack"),
           "AGENTSTACK_CACHE": str(bob / ".cache" / "agentstack")}
    received = run_cli_in_process("receive", str(bundle), cwd=tmp_path, env=env)
    assert received.returncode == 0, received.stderr
    before = run_cli_in_process("quarantine", "list", cwd=tmp_path, env=env)
    assert "unknown-signer" in before.stdout
    trusted = run_cli_in_process("keys", "trust", "alice@example.com", key.stdout.strip(),
                                 cwd=tmp_path, env=env)
    assert trusted.returncode == 0, trusted.stderr
    after = run_cli_in_process("quarantine", "list", cwd=tmp_path, env=env)
    assert "signer alice@example.com" in after.stdout and "unknown-signer" not in after.stdout
    assert '"alice@example.com"' in run_cli_in_process("quarantine", "list", "--json",
                                                        cwd=tmp_path, env=env).stdout


def _skill(commit: str, rev: str = "v1.0.0", git: str = "file:///repo") -> dict[str, object]:
    return {"source": "git", "git": git, "rev": rev, "commit": commit, "subdir": "skills/s",
            "digest": "b3:" + commit[0] * 64, "files": []}


def _finding(old: dict[str, object], new: dict[str, object]) -> str:
    doc = {"project": {"name": "p", "harnesses": []}}
    found = consent_diff({**doc, "skills": {"s": old}}, {**doc, "skills": {"s": new}}).findings
    return next(f.message for f in found if f.code == "skill-source")


def test_a_moved_tag_is_reported_as_other_code_under_the_same_name() -> None:
    message = _finding(_skill("a" * 40), _skill("b" * 40))
    assert message == ("v1.0.0 in file:///repo now resolves to commit bbbbbbbbbbbb "
                       "(was aaaaaaaaaaaa): the same name, other code")
    assert "now comes from file:///repo" not in message
    assert _finding(_skill("a" * 40), _skill("b" * 40, rev="v2")) == "rev v1.0.0 -> v2 in file:///repo"
    assert _finding(_skill("a" * 40), _skill("a" * 40, git="file:///other")) == (
        "now comes from file:///other (was file:///repo)")


def test_a_re_review_shows_only_the_user_level_entries_that_change(tmp_path: Path) -> None:
    root = tmp_path / "minimal"
    shutil.copytree(EXAMPLES / "minimal", root)
    assert run_cli_in_process("lock", cwd=root).returncode == 0
    first = run_cli_in_process("trust", "--yes", "--accept-risk", cwd=root)
    assert "will also record this outside the project" in first.stdout + first.stderr
    assert ".claude.json" in first.stdout + first.stderr
    assert run_cli_in_process("apply", "--write", cwd=root).returncode == 0
    (root / "AGENTS.base.md").write_text("Run the tests twice.\n", encoding="utf-8")
    assert run_cli_in_process("lock", cwd=root).returncode == 0
    again = run_cli_in_process("trust", "--yes", cwd=root)
    assert again.returncode == 0, again.stderr
    shown = again.stdout + again.stderr
    assert "Changes since the digest you trusted" in shown
    # Everything outside the project is in place already; only a digest-bound entry would show.
    assert "hasTrustDialogAccepted" not in shown and "trust_level" not in shown

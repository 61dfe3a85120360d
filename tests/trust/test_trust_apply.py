"""`trust --apply` (review, trust and `apply --write` in one process, `--lock` first when asked)
keeps the review exactly as strict as `trust`; and the review rules as a library
(`agentstack.trust.review`, `require_acceptance`) that `trust` and `quarantine release` share."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentstack.errors import Refused
from tests.conftest import make_project, run_cli_in_process
from tests.trust.test_trust_cli import FILES, MANIFEST

# The same setup without a server: no high-risk finding.
CALM = '[project]\nname = "calm"\nharnesses = ["claude-code", "codex"]\n\n' \
       '[instructions]\nfiles = ["AGENTS.base.md"]\n'


def cli(root: Path, *args: str) -> tuple[int, str, str]:
    result = run_cli_in_process(*args, cwd=root)
    return result.returncode, result.stdout, result.stderr


def _log_lines() -> int:
    path = Path(os.environ["AGENTSTACK_HOME"]) / "trust.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture
def risky(tmp_path: Path) -> Path:
    root = make_project(tmp_path / "demo", MANIFEST, FILES)
    assert cli(root, "lock")[0] == 0
    return root


@pytest.fixture
def calm(tmp_path: Path) -> Path:
    root = make_project(tmp_path / "calm", CALM, {"AGENTS.base.md": "Be kind.\n"})
    assert cli(root, "lock")[0] == 0
    return root


def test_trust_apply_reviews_trusts_and_writes_in_one_step(calm: Path) -> None:
    code, _, err = cli(calm, "trust", "--apply", "--yes")
    assert code == 0, err
    assert "trusted b3:" in err and "file(s) changed; rendered from" in err
    assert "Be kind." in (calm / "AGENTS.md").read_text()
    assert "Be kind." in (calm / ".claude" / "agentstack" / "instructions.md").read_text()
    code, _, err = cli(calm, "status")
    assert code == 0, err
    # Trusted already: it says so and applies again (nothing to change).
    code, _, err = cli(calm, "trust", "--apply", "--yes")
    assert code == 0 and err.startswith("already trusted") and "0 file(s) changed" in err
    assert _log_lines() == 1


def test_trust_apply_refuses_exactly_as_trust_does(risky: Path) -> None:
    # No terminal and no --yes: refused, nothing recorded, nothing written.
    code, out, err = cli(risky, "trust", "--apply")
    assert code == 1 and "no terminal to ask on" in err and "--yes --accept-risk" in err
    assert "python3 servers/notes.py" in out  # the review was shown
    # --yes without --accept-risk: the high-risk findings are not accepted.
    code, _, err = cli(risky, "trust", "--apply", "--yes")
    assert code == 1 and "need explicit acceptance" in err
    assert _log_lines() == 0
    assert not (risky / "AGENTS.md").exists() and not (risky / ".mcp.json").exists()
    # --digest still pins what was reviewed.
    code, _, err = cli(risky, "trust", "--apply", "--yes", "--accept-risk",
                       "--digest", "b3:" + "0" * 64)
    assert code == 1 and "the current consent digest is" in err
    assert _log_lines() == 0
    code, _, err = cli(risky, "trust", "--apply", "--yes", "--accept-risk")
    assert code == 0, err
    assert json.loads((risky / ".mcp.json").read_text())["mcpServers"]["notes"]


def test_a_stale_lock_is_named_and_locked_only_with_lock(calm: Path) -> None:
    (calm / "AGENTS.base.md").write_text("Be very kind.\n")
    code, _, err = cli(calm, "trust", "--apply", "--yes")
    assert code == 1 and "agentstack trust --lock" in err
    assert _log_lines() == 0 and not (calm / "AGENTS.md").exists()
    code, _, err = cli(calm, "trust", "--lock", "--apply", "--yes")
    assert code == 0, err
    assert "wrote" in err and "Be very kind." in (calm / "AGENTS.md").read_text()
    assert cli(calm, "lock", "--check")[0] == 0
    # A missing lock too.
    (calm / "agentstack.lock").unlink()
    assert cli(calm, "trust", "--yes")[0] == 1
    assert cli(calm, "trust", "--yes", "--lock")[0] == 0


def test_trust_apply_json_is_one_document(calm: Path) -> None:
    code, out, err = cli(calm, "trust", "--apply", "--yes", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["state"] == "trusted" and report["recorded"] is True
    assert report["apply"]["written"] is True and "AGENTS.md" in report["apply"]["changes"]


def test_apply_options_need_apply(calm: Path) -> None:
    code, _, err = cli(calm, "trust", "--yes", "--force")
    assert code == 2 and "--apply" in err


# ------------------------------------------------------------------ the library


def test_review_is_the_whole_view_first_then_the_diff(calm: Path) -> None:
    from agentstack.consent.document import current
    from agentstack.trust.review import TrustStore, record, review

    store = TrustStore()
    _, _, document, digest = current(calm)
    first = review(store, calm, document, digest)
    assert first.first and not first.already_trusted and first.previous is None
    record(store, first, None)
    assert review(store, calm, document, digest).already_trusted
    (calm / "AGENTS.base.md").write_text("Be very kind.\n")
    assert cli(calm, "lock")[0] == 0
    _, _, changed, new_digest = current(calm)
    later = review(store, calm, changed, new_digest)
    assert not later.first and later.previous is not None and later.previous.digest == digest
    assert later.result.changes  # the diff against what was trusted


def test_returning_to_a_superseded_setup_is_a_finding(calm: Path) -> None:
    from agentstack.consent.document import current
    from agentstack.trust.review import TrustStore, record, review

    store = TrustStore()
    _, _, old, old_digest = current(calm)
    record(store, review(store, calm, old, old_digest), None)
    (calm / "AGENTS.base.md").write_text("Be very kind.\n")
    cli(calm, "lock")
    _, _, new, new_digest = current(calm)
    record(store, review(store, calm, new, new_digest), None)
    (calm / "AGENTS.base.md").write_text("Be kind.\n")
    cli(calm, "lock")
    back = review(store, calm, old, old_digest)
    assert back.state.state == "superseded"
    assert back.result.findings[0].code == "returns-to-earlier"


@pytest.mark.parametrize(
    ("high", "yes", "accept_risk", "tty", "answer", "refused"),
    [
        (0, True, False, False, "", None),
        (1, True, False, False, "", "need explicit acceptance"),
        (1, True, True, False, "", None),
        (0, False, False, False, "", "no terminal to ask on"),
        (0, False, False, True, "y", None),
        (0, False, False, True, "n", "declined"),
        (1, False, False, True, "y", "declined (high-risk findings need the word accept-risk)"),
        (1, False, False, True, "ACCEPT-RISK", None),
        (1, False, True, True, "yes", "declined"),  # --accept-risk alone is no answer
    ],
)
def test_the_acceptance_rule(high: int, yes: bool, accept_risk: bool, tty: bool, answer: str,
                             refused: str | None) -> None:
    from agentstack.trust.review import require_acceptance

    asked: list[str] = []

    def ask(question: str) -> str:
        asked.append(question)
        return answer

    def decide() -> None:
        require_acceptance(high, yes=yes, accept_risk=accept_risk, interactive=tty, ask=ask,
                           prompt_high="type accept-risk: ", prompt_plain="[y/N] ")

    if refused is None:
        decide()
    else:
        with pytest.raises(Refused, match=refused.replace("(", r"\(").replace(")", r"\)")):
            decide()
    if yes or not tty:
        assert asked == []
    else:
        assert asked == ["type accept-risk: " if high else "[y/N] "]


def test_status_is_a_library_call(calm: Path) -> None:
    from agentstack.projectstatus import project_checks, project_status, status_lines
    from agentstack.trust.review import TrustStore

    report = project_status(calm, TrustStore())
    assert report["ok"] is False and report["trust"] == "untrusted" and report["lock"] == "fresh"
    assert "next: 'agentstack trust' to review" in status_lines(report)
    assert cli(calm, "trust", "--apply", "--yes")[0] == 0
    report = project_status(calm, TrustStore())
    assert report["ok"] is True and report["drift"] == [] and report["snapshot"] is True
    rows = {c.name: c for c in project_checks(calm, TrustStore)}
    assert rows["lock"].status == "ok" and rows["trust"].status == "ok"
    (calm / "AGENTS.md").write_text("edited behind agentstack's back\n")
    report = project_status(calm, TrustStore())
    assert report["ok"] is False and report["drift"] == ["AGENTS.md"]
    assert project_checks(None, TrustStore)[0].detail.startswith("not inside a project")

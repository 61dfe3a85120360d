"""Every command line a user would copy from README.md and docs/ (the fenced `sh` blocks) is run
by a test: here, in a trusted copy of examples/minimal with its own HOME and on a terminal (the
review prompts answered as a user would), or by the test named for it; the few that cannot run
here say why. A new `sh` block without an entry below fails the enumeration."""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.cli.test_quickstart import ANSWERS, _run_on_terminal
from tests.conftest import EXAMPLES, REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Run:
    """Run the block here: `subs` fill its placeholders, `setup` runs first, `skip` drops the
    lines containing a key (each with the reason, or the test that runs that line)."""
    subs: tuple[tuple[str, str], ...] = ()
    setup: str = ""
    skip: dict[str, str] = field(default_factory=dict)
    exits: dict[str, int] = field(default_factory=dict)  # lines whose documented answer is not 0


@dataclass(frozen=True)
class By:
    """Run by another test (path::function), which must exist."""
    test: str
    also: str = ""


@dataclass(frozen=True)
class NotHere:
    reason: str


_SHARE_SETUP = 'agentstack keys generate alice > "$TMPDIR_DOC/alice.pub"\n'
_SHARE_SUBS = (('"ssh-ed25519 AAAA…"', '"$(agentstack keys export alice)"'),)
_RECEIVE = ("agentstack receive team.astack", 'id="$(agentstack receive team.astack)" && echo "$id"')

# Keyed by (file, the block's first line).
BLOCKS: dict[tuple[str, str], Run | By | NotHere] = {
    ("README.md", "scripts/demo"): By(
        "tests/cli/test_demo.py::test_the_demo_runs_and_shows_what_it_claims",
        also="scripts/test is this suite itself (ruff, mypy, pytest): CI's .ci/run runs it"),
    ("README.md", "git clone"): NotHere(
        "clones from a URL the reader fills in and installs from the package index; CI's "
        ".ci/run runs scripts/install on a fresh machine"),
    ("README.md", "mkdir my-project"): By("tests/cli/test_quickstart.py::test_quickstart_runs_as_written"),
    ("README.md", "agentstack secret set anthropic"): Run(
        subs=(("agentstack secret set anthropic ", "echo sk-doc-test | agentstack secret set anthropic "),),
        skip={"agentstack run --harness claude-code":
              "tests/harness/test_harness_credentials_tty.py::test_interactive_claude_under_run_through_the_credential_proxy",
              # The whole confinement suite (every row a real confined process): run once, there.
              "agentstack doctor --verify": "tests/sandbox/test_confinement.py::test_doctor_verify"},
        exits={"agentstack why --path": 1}),
    ("README.md", "agentstack schema >"): Run(),
    ("README.md", "agentstack keys generate alice"): Run(
        subs=(*_SHARE_SUBS, ("[--into DIR]", ""), _RECEIVE, (" ID", ' "$id"'), ("DIR", '"$TMPDIR_DOC/dir"')),
    ),
    ("docs/boundary.md", "agentstack check --boundary"): Run(
        setup=f'cp "{EXAMPLES}/boundaries/permissive.toml" team-boundary.toml\n',
        exits={"agentstack check --boundary": 1}),  # the example writes its workdir: exceeds
    ("docs/ci.md", "agentstack check --boundary team-boundary.toml --format sarif > agentstack.sarif"): Run(
        setup=f'cp "{EXAMPLES}/boundaries/permissive.toml" team-boundary.toml\n',
        exits={"agentstack check --boundary": 1}),  # the example writes its workdir: exceeds
    ("docs/manifest.md", "agentstack schema >"): Run(),
    ("docs/policy.md", "agentstack policy add"): By(
        "tests/consent/test_teampolicy.py::test_update_installs_a_newer_version_shown_as_a_diff",
        also="add, update, show, check and remove against a local git repository (the URL here "
        "is a placeholder); tests/consent/test_teampolicy.py covers each"),
    ("docs/policy.md", "agentstack policy sign"): By(
        "tests/consent/test_teampolicy.py::test_ssh_keygen_signs_a_policy_agentstack_accepts",
        also="the key file is the reader's own; tests/consent/test_teampolicy.py::"
        "test_policy_sign_checks_the_file signs with agentstack's"),
    ("docs/user-level.md", "agentstack init --user"): By(
        "tests/harness/test_harness_user_level.py::test_claude_lists_runs_and_guards_a_user_level_server",
        also="init, add, lock, trust, apply, revoke with --user on the real Claude Code; the "
        "npx server of the example needs the package index; tests/apply/test_user_level.py covers "
        "status, show, digest and adopt --user"),
    ("docs/cli.md", "agentstack --install-completion"): By(
        "tests/cli/test_cli_typer.py::test_shell_completion_comes_from_typer",
        also="it writes the reader's shell start-up file: the test installs it under a "
        "temporary HOME and shows the script"),
    ("docs/share.md", "# the sender"): Run(
        subs=(*_SHARE_SUBS, _RECEIVE, (" ID", ' "$id"'), ("~/code/project", '"$TMPDIR_DOC/project"'))),
    ("docs/share.md", "agentstack inspect team.astack"): Run(
        setup=_SHARE_SETUP + 'agentstack share -o team.astack --version 3\n'
              'agentstack keys trust alice@example.com "$(cat "$TMPDIR_DOC/alice.pub")"\n'
              'cp "$AGENTSTACK_HOME/allowed_signers" allowed_signers\n'),
    ("docs/trust.md", "agentstack --trust-digest"): Run(
        subs=(("b3:… b3:…", "$(agentstack digest) $(agentstack digest)"), ("b3:…", "$(agentstack digest)"))),
}


def doc_blocks() -> list[tuple[str, str, str]]:
    found = []
    for path in DOCS:
        for match in _FENCE.finditer(path.read_text(encoding="utf-8")):
            found.append((str(path.relative_to(REPO)), match.group(1).splitlines()[0], match.group(1)))
    return found


def _entry(rel: str, first: str) -> Run | By | NotHere:
    keys = [k for k in BLOCKS if k[0] == rel and first.startswith(k[1])]
    assert len(keys) == 1, f"{rel}: the sh block starting {first!r} has no entry (or several) in BLOCKS"
    return BLOCKS[keys[0]]


def test_every_sh_block_has_an_entry() -> None:
    blocks = doc_blocks()
    used = {next(k for k in BLOCKS if k[0] == rel and first.startswith(k[1])) for rel, first, _ in blocks
            if any(k[0] == rel and first.startswith(k[1]) for k in BLOCKS)}
    for rel, first, _ in blocks:
        _entry(rel, first)
    assert used == set(BLOCKS), f"entries for blocks the docs no longer have: {set(BLOCKS) - used}"


def test_a_block_run_elsewhere_names_a_test_that_exists() -> None:
    for entry in BLOCKS.values():
        tests = [entry.test] if isinstance(entry, By) else [
            r for r in entry.skip.values() if r.startswith("tests/")] if isinstance(entry, Run) else []
        for ref in tests:
            path, name = ref.split("::")
            assert f"def {name}(" in (REPO / path).read_text(encoding="utf-8"), ref
        if isinstance(entry, NotHere):
            assert len(entry.reason) > 20


def _script(entry: Run, body: str) -> str:
    lines = []
    for line in body.splitlines():
        if any(key in line for key in entry.skip):
            continue
        code = next((c for key, c in entry.exits.items() if key in line), 0)
        if code:
            line = re.split(r"\s+# ", line, maxsplit=1)[0].rstrip()
            line = f"if {line}; then false; else [ $? = {code} ]; fi"
        lines.append(line)
    text = "\n".join(lines)
    for old, new in entry.subs:
        text = text.replace(old, new)
    return entry.setup + text + "\n"


@pytest.fixture
def trusted_project(tmp_path: Path) -> Path:
    project = tmp_path / "minimal"
    shutil.copytree(EXAMPLES / "minimal", project)
    code, out = _run_on_terminal("git init -q . && agentstack lock && agentstack trust --yes --accept-risk"
                                 " && agentstack apply --write", project, _env(tmp_path))
    assert code == 0, out
    return project


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, checkout=str(REPO), COLUMNS="100", TERM="dumb", TMPDIR_DOC=str(tmp_path),
               PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    env.pop("PYTHONPATH", None)
    return env


@pytest.mark.slow
@pytest.mark.parametrize("rel,first,body", [b for b in doc_blocks()
                                            if isinstance(BLOCKS.get(next((k for k in BLOCKS if k[0] == b[0]
                                                                           and b[1].startswith(k[1])), ("", ""))), Run)],
                         ids=lambda v: v if isinstance(v, str) and len(v) < 40 else "")
def test_the_block_runs_as_written(rel: str, first: str, body: str, trusted_project: Path,
                                   tmp_path: Path) -> None:
    entry = _entry(rel, first)
    assert isinstance(entry, Run)
    code, out = _run_on_terminal(_script(entry, body), trusted_project, _env(tmp_path),
                                 answers=(*ANSWERS, (b"Type 'accept-risk'", b"accept-risk\n")))
    assert code == 0, f"{rel}: {first}\n{out}"
    assert "Traceback" not in out and "error:" not in out, out

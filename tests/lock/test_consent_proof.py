"""The kept consent entry (agentstack.lock.relock, "the kept consent entry"): `status`, `digest`,
`show` and `run` take the consent document of a lock its re-lock record proves fresh from an entry
kept for exactly the manifest and lock bytes on disk, and never give another answer than the full
freshness check (a resolution of every pinned byte) would."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentstack.consent.document as document
import agentstack.lock.relock as relock
import agentstack.lock.resolve as lockfile
import agentstack.lock.treehash as treehash
from agentstack import layout
from agentstack.errors import StaleLock
from tests.lock.test_relock import MUTATIONS, SLACK_NS, lock, project, record_file, settle


@pytest.fixture(autouse=True)
def short_slack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relock, "_RACY_SLACK_NS", SLACK_NS)
    monkeypatch.setattr(treehash, "RACY_SLACK_NS", SLACK_NS)


def entry_file(root: Path) -> Path:
    return Path(relock.consent_path(layout.cache(), str(root)))


def full(root: Path) -> tuple[object, ...] | type[StaleLock]:
    """What the full check answers now: no record, no kept entry, nothing written."""
    try:
        view, locked, doc, digest = document._project_consent(root, verify_git=False)
    except StaleLock:
        return StaleLock
    return view.data, view.digest, locked, doc, digest


def answer(root: Path) -> tuple[object, ...] | type[StaleLock]:
    """What `current` (the commands' pipeline, kept entry allowed) answers now."""
    try:
        view, locked, doc, digest = document.current(root)
    except StaleLock:
        return StaleLock
    return view.data, view.digest, locked, doc, digest


def forbid_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a proved fresh lock resolves nothing")

    monkeypatch.setattr(lockfile.Resolver, "resolve", forbidden)
    monkeypatch.setattr(treehash, "_hash_fd", forbidden)


def kept_project(tmp_path: Path) -> Path:
    root = project(tmp_path)
    assert lock(root) == 0 and record_file(root).exists()
    first = answer(root)  # the full check, which keeps the entry
    assert entry_file(root).is_file() and first == full(root)
    return root


def test_a_proved_fresh_lock_answers_from_the_kept_entry_without_resolving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = kept_project(tmp_path)
    expected = full(root)
    forbid_resolution(monkeypatch)
    assert answer(root) == expected


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(st.sampled_from(sorted(MUTATIONS)), min_size=1, max_size=3, unique=True))
def test_after_any_change_the_answer_is_the_full_checks(
    tmp_path_factory: pytest.TempPathFactory, names: list[str]
) -> None:
    """Every change the re-lock tests make (each one a drift the full check catches, or none):
    the commands' answer is the full check's, a stale lock is stale, a changed digest changed."""
    base = tmp_path_factory.mktemp("consent")
    root = kept_project(base)
    for name in names:
        with contextlib.suppress(OSError):  # an earlier mutation moved what this one edits
            MUTATIONS[name](root)
    assert answer(root) == full(root)
    settle()  # out of the racy window: the full check now records the proof again
    assert answer(root) == full(root)
    assert answer(root) == full(root)  # and the next answer may come from what it kept
    shutil.rmtree(base)


def test_a_freshness_check_records_the_proof_that_an_apply_invalidated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An apply writes its ledger (the surface scan reads it), which voids the record `lock`
    wrote; the next freshness check that finds the lock fresh writes the record `lock` would."""
    root = kept_project(tmp_path)
    MUTATIONS["apply ledger written"](root)
    assert not relock.unchanged(str(root), None)
    settle()
    expected = full(root)
    assert answer(root) == expected  # resolves, finds the lock fresh, records and keeps
    assert relock.unchanged(str(root), None)
    forbid_resolution(monkeypatch)
    assert answer(root) == expected


def test_a_stale_lock_is_never_recorded_by_a_freshness_check(tmp_path: Path) -> None:
    root = kept_project(tmp_path)
    (root / "skills/s/SKILL.md").write_text("changed\n")
    settle()
    assert answer(root) is StaleLock
    assert not record_file(root).exists()
    assert answer(root) is StaleLock


def _rewrite(path: Path, edit: dict[str, object]) -> None:
    """The entry with `edit` applied and a valid checksum (what only a bug or the user could
    write): the fields still have to agree with what is on disk."""
    import blake3

    magic, _, text = path.read_bytes().split(b"\n", 2)
    entry = json.loads(text)
    entry.update(edit)
    text = json.dumps(entry, sort_keys=True).encode()
    path.write_bytes(magic + b"\n" + blake3.blake3(text).hexdigest().encode() + b"\n" + text)


@pytest.mark.parametrize(
    "damage",
    ["garbage", "checksum", "world-writable", "other-manifest", "other-lock", "other-code",
     "other-project", "not-an-entry"],
)
def test_a_damaged_or_foreign_entry_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    root = kept_project(tmp_path)
    expected = full(root)
    path = entry_file(root)
    if damage == "garbage":
        path.write_bytes(b"not an entry")
    elif damage == "checksum":
        path.write_bytes(path.read_bytes().replace(b'"consent":1', b'"consent":2'))
    elif damage == "world-writable":
        path.chmod(0o666)
    elif damage == "other-manifest":
        _rewrite(path, {"manifest": "0" * 64})
    elif damage == "other-lock":
        _rewrite(path, {"lock": "0" * 64})
    elif damage == "other-code":
        _rewrite(path, {"code": "0" * 64})
    elif damage == "other-project":
        _rewrite(path, {"root": str(root) + "x"})
    else:
        _rewrite(path, {"document": ["not", "a", "document"]})
    assert relock.known_consent(str(root)) is None or damage == "not-an-entry"
    assert answer(root) == expected  # the full check's answer, whatever the entry said
    if damage != "world-writable":
        assert relock.known_consent(str(root)) is not None  # kept again, as it should be
    os.chmod(path, 0o600)
    forbid_resolution(monkeypatch)
    assert answer(root) == expected


def test_a_manifest_edit_that_keeps_the_lock_is_not_answered_from_the_old_entry(
    tmp_path: Path,
) -> None:
    """A comment changes the manifest's bytes but not the lock: the record no longer holds
    (the manifest's fingerprint moved), and neither would the entry (keyed by the bytes)."""
    root = kept_project(tmp_path)
    before = full(root)
    (root / "agentstack.toml").write_text("# a comment\n" + (root / "agentstack.toml").read_text())
    assert relock.known_consent(str(root)) is None
    assert answer(root) == full(root) == before


def test_the_commands_on_a_proved_fresh_lock_import_neither_tomllib_nor_the_resolver(
    tmp_path: Path,
) -> None:
    """`digest` and `status` as processes: the kept entry spares them the manifest's TOML, the
    validators and the resolver (a test, so that the start-up it saves cannot come back)."""
    import subprocess
    import sys
    import sysconfig

    from tests.conftest import REPO
    from tests.harness.deadline import scaled

    root = kept_project(tmp_path)
    probe = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        "from agentstack import entry\n"
        "def end(code):\n"
        "    sys.stdout.flush()\n"
        "    print(json.dumps({'code': code, 'modules': sorted(set(sys.modules) - before)}),\n"
        "          file=sys.stderr)\n"
        "    sys.exit(code)\n"
        "entry.end = end\n"
        "sys.argv = ['agentstack', sys.argv[1]]\n"
        "entry.main()\n"
    )
    paths = sysconfig.get_paths()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(REPO), paths["purelib"],
                                                        paths["platlib"]))}
    env["AGENTSTACK_HOME"] = layout.home()
    env["AGENTSTACK_CACHE"] = layout.cache()
    digest = full(root)
    assert digest is not StaleLock
    for command in ("digest", "status"):
        done = subprocess.run([sys.executable, "-S", "-c", probe, command], cwd=root, env=env,
                              capture_output=True, text=True, timeout=scaled(60))
        report = json.loads(done.stderr.splitlines()[-1])
        if command == "digest":
            assert report["code"] == 0 and done.stdout.strip() == digest[-1], done.stderr
        loaded = set(report["modules"])
        for name in ("tomllib", "agentstack.lock.resolve", "agentstack.lock.treehash",
                     "agentstack.manifest.fast", "agentstack.manifest.load", "pydantic"):
            assert name not in loaded, (command, name)


def test_a_plain_directory_answers_from_the_kept_entry_until_a_checkout_surrounds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project with no `.git` anywhere above it (a tarball): the record keeps the absent `.git`
    paths the scan looked for, so the kept entry answers; a `git init` above makes what lies
    there the surface, and the answer is the full check's (the lock is stale)."""
    import subprocess

    from tests.conftest import make_project
    from tests.lock.test_relock import FILES, MANIFEST

    outer = tmp_path / "outer"
    outer.mkdir()
    (outer / "AGENTS.md").write_text("above the project\n")
    root = make_project(outer / "loose", MANIFEST, FILES).resolve()
    settle()
    assert lock(root) == 0 and record_file(root).exists()
    expected = answer(root)
    assert expected == full(root) and entry_file(root).is_file()
    with monkeypatch.context() as patch:
        forbid_resolution(patch)
        assert answer(root) == expected
    subprocess.run(["git", "init", "-q", str(outer)], check=True)
    assert relock.known_consent(str(root)) is None
    assert answer(root) == full(root) is StaleLock

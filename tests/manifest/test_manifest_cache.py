"""The manifest view and its cache: identical results with and without the cache, a changed
manifest validated again (its errors unchanged), a damaged or foreign entry never used, and no
pydantic on the unchanged path."""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentstack.manifest.load as load
from agentstack.consent.document import (
    consent_digest,
    consent_document,
    digest_form,
    manifest_defaults,
    project_consent,
)
from agentstack.errors import AgentstackError, ManifestInvalid
from agentstack.lock.resolve import (
    dumps_lock,
    fresh_lock,
    manifest_digest,
    resolver_for,
    stat_cache_path,
)
from agentstack.manifest.load import cache_dir, cache_key, load_manifest, load_view
from agentstack.manifest.model import Manifest, parse_manifest
from agentstack.manifest.view import ManifestView, as_view
from tests.conftest import REPO, git, make_project
from tests.consent.test_digest_properties import MUTATIONS, build_project
from tests.harness.deadline import scaled


@pytest.fixture(autouse=True)
def _cache_and_models_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the cache in front of the models: the fast validator, which spares
    both for a valid manifest (tests/manifest/test_manifest_fast.py), is off."""
    monkeypatch.setattr(load, "fast_path", False)


def _entry(data: bytes) -> Path:
    key = cache_key(data)
    assert key is not None
    return cache_dir() / f"{key}.json"


def _no_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any validation fail loudly: what follows must come from the cache."""

    def refuse(*_args: object, **_kwargs: object) -> Manifest:
        raise AssertionError("the manifest was validated again")

    monkeypatch.setattr("agentstack.manifest.model.parse_manifest", refuse)


def test_written_defaults_equal_the_models() -> None:
    from agentstack.manifest._defaults import DEFAULTS

    assert manifest_defaults() == DEFAULTS, (
        "the manifest models' defaults changed: regenerate agentstack/manifest/_defaults.py with "
        'python -c "from agentstack.consent.document import write_manifest_defaults; '
        'write_manifest_defaults()" (a released default is frozen: see agentstack/consent/document.py)'
    )


def _outcome(root: Path, view: ManifestView | Manifest) -> tuple[bytes, dict[str, Any], str]:
    lock = resolver_for(root, None).resolve(view)
    document = consent_document(view, lock)
    return dumps_lock(lock).encode(), document, consent_digest(document)


def test_cached_view_gives_identical_locks_documents_and_digests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = sorted(MUTATIONS)
    counter = iter(range(10**6))

    @settings(max_examples=25, deadline=None)
    @given(
        picked=st.lists(st.sampled_from(names), max_size=3, unique=True),
        seed=st.integers(min_value=0, max_value=2**32),
    )
    def check(picked: list[str], seed: int) -> None:
        p = build_project(tmp_path / str(next(counter)))
        for name in picked:
            # Two mutations of the same thing: the first one stands.
            with contextlib.suppress(OSError, KeyError, ValueError, IndexError):
                MUTATIONS[name](p)
        p.write(random.Random(seed))
        data = (p.root / "agentstack.toml").read_bytes()
        try:
            model = parse_manifest(data)
        except ManifestInvalid as exc:
            with pytest.raises(ManifestInvalid) as cached_exc:
                load_view(p.root)
            assert cached_exc.value.problems == exc.problems
            assert not _entry(data).exists()  # an invalid manifest is never cached
            return
        first = load_view(p.root)  # validated, then cached
        assert _entry(data).exists()
        with monkeypatch.context() as m:
            _no_validation(m)
            second = load_view(p.root)  # from the cache
        assert first == second == as_view(model)
        assert second.digest == manifest_digest(model)
        try:
            reference = _outcome(p.root, model)
        except AgentstackError as exc:
            with pytest.raises(type(exc)) as cached_exc:
                _outcome(p.root, second)
            assert cached_exc.value.diagnostics() == exc.diagnostics()
            return
        assert _outcome(p.root, second) == reference
        document = reference[1]
        # The written-out defaults give the digest the models' defaults give.
        assert digest_form(document) == digest_form(document, Manifest)

    check()


def test_unchanged_manifest_is_not_validated_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project(tmp_path / "p", '[project]\nname = "p"\n\n[skills.s]\npath = "s"\n',
                        {"s/SKILL.md": "hi\n"})
    first = load_view(root)
    _no_validation(monkeypatch)
    assert load_view(root) == first


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[project]\nname = "p"\nbogus = 1\n', "unknown key 'bogus'"),
        ('[project]\nname = "P Q"\n', "project.name"),
        ('[project]\nname = "p"\n[servers.s]\ncommand = "x"\nargs = ["${HOME}"]\n', "${"),
        ("[project\n", "not valid TOML"),
    ],
)
def test_changed_manifest_is_validated_again_with_the_same_errors(
    tmp_path: Path, text: str, fragment: str
) -> None:
    root = make_project(tmp_path / "p", '[project]\nname = "p"\n')
    load_view(root)  # the valid manifest is cached
    (root / "agentstack.toml").write_text(text)
    with pytest.raises(ManifestInvalid) as direct:
        load_manifest(root)
    with pytest.raises(ManifestInvalid) as viewed:
        load_view(root)
    assert viewed.value.problems == direct.value.problems
    assert fragment in "\n".join(viewed.value.diagnostics())


VALID = '[project]\nname = "p"\n\n[servers.s]\ncommand = "node"\nargs = ["a.js"]\n'


def _damage(kind: str, path: Path) -> None:
    raw = json.loads(path.read_bytes())
    if kind == "garbage":
        path.write_bytes(b"{not json")
    elif kind == "truncated":
        path.write_bytes(path.read_bytes()[:40])
    elif kind == "checksum":
        raw["data"]["servers"]["s"]["args"] = ["b.js"]
        path.write_text(json.dumps(raw))
    elif kind in ("forged data", "forged digest"):
        # Checksum recomputed: only the tie to the manifest bytes can catch it.
        if kind == "forged data":
            raw["data"]["servers"]["s"]["args"] = ["b.js"]
        else:
            raw["digest"] = "b3:" + "0" * 64
        raw["check"] = load._checksum(raw["digest"], raw["data"])
        path.write_text(json.dumps(raw))
    elif kind == "other version":
        raw["agentstack"] = "0.0.0-other"
        path.write_text(json.dumps(raw))
    elif kind == "other schema":
        raw["schema"] = "00" * 32
        path.write_text(json.dumps(raw))
    elif kind == "other key":
        raw["key"] = "0" * 64
        path.write_text(json.dumps(raw))
    elif kind == "group writable":
        path.chmod(0o664)
    elif kind == "symlink":
        elsewhere = path.with_name("elsewhere.data")
        path.rename(elsewhere)
        path.symlink_to(elsewhere)
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind",
    [
        "garbage",
        "truncated",
        "checksum",
        "forged data",
        "forged digest",
        "other version",
        "other schema",
        "other key",
        "group writable",
        "symlink",
    ],
)
def test_a_damaged_or_foreign_entry_is_ignored_and_rebuilt(tmp_path: Path, kind: str) -> None:
    root = make_project(tmp_path / "p", VALID, {"a.js": "1\n"})
    expected = as_view(load_manifest(root))
    load_view(root)
    entry = _entry((root / "agentstack.toml").read_bytes())
    _damage(kind, entry)
    assert load_view(root) == expected  # validated again, never the damaged entry
    # ... and rebuilt: the next call is a plain hit.
    assert not entry.is_symlink()
    assert os.stat(entry).st_mode & 0o022 == 0
    assert load._read_entry(cache_dir(), entry.stem, (root / "agentstack.toml").read_bytes())


def test_entries_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "CACHE_KEEP", 3)
    root = make_project(tmp_path / "p", VALID, {"a.js": "1\n"})
    for index in range(6):
        (root / "agentstack.toml").write_text(VALID + f"# edit {index}\n")
        load_view(root)
    assert len(list(cache_dir().glob("*.json"))) == 3
    assert not list(cache_dir().glob(".manifest-*"))  # no temporary file left


def test_fresh_lock_from_the_cache_equals_the_parsed_lock(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p", VALID, {"a.js": "1\n"})
    lock = resolver_for(root, None).resolve(load_manifest(root))
    (root / "agentstack.lock").write_text(dumps_lock(lock))
    manifest, fresh, document, digest = project_consent(root)
    from agentstack.lock.resolve import _fresh_by_parsing

    assert fresh == _fresh_by_parsing(root, manifest) == lock
    assert (document, digest) == (
        consent_document(load_manifest(root), lock),
        consent_digest(consent_document(load_manifest(root), lock)),
    )
    assert fresh_lock(root, load_manifest(root)) == lock


_NO_PYDANTIC = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.argv = ["agentstack", "lock"]
    from agentstack import entry
    from agentstack.entry import main
    entry.end = sys.exit  # go on below instead of the short exit
    try:
        main()
    except SystemExit as exc:
        assert exc.code == 0, exc.code
    from agentstack.consent.document import project_consent
    project_consent(Path("."))
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("pydantic", "pydantic_core"))
    heavy += [m for m in ("agentstack.manifest.model", "agentstack.lock.model") if m in sys.modules]
    print(repr(heavy))
    """
)


def _git_skill_source(path: Path) -> str:
    path.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=path)
    (path / "skill").mkdir()
    (path / "skill" / "SKILL.md").write_text("---\nname: g\n---\nG.\n")
    git("add", "-A", cwd=path)
    git("commit", "-qm", "skill", cwd=path)
    git("tag", "v1", cwd=path)
    return path.as_uri()


@pytest.mark.parametrize("with_git", [False, True], ids=["local", "git-skill"])
def test_unchanged_lock_and_consent_digest_do_not_import_pydantic(
    tmp_path: Path, with_git: bool
) -> None:
    manifest = VALID + '\n[skills.s]\npath = "skills/s"\n\n[instructions]\nfiles = ["docs/a.md"]\n'
    if with_git:
        url = _git_skill_source(tmp_path / "src")
        manifest += f'\n[skills.g]\ngit = "{url}"\nrev = "v1"\nsubdir = "skill"\n'
    root = make_project(
        tmp_path / "p",
        manifest,
        {"a.js": "1\n", "skills/s/SKILL.md": "hi\n", "docs/a.md": "be nice\n"},
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _NO_PYDANTIC],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=scaled(120),
        )

    first = run()  # validates (the fast validator: no pydantic either) and writes the lock
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "[]"
    second = run()
    assert second.returncode == 0, second.stderr
    assert "unchanged" in second.stderr
    assert second.stdout.strip() == "[]"


def _run_lock(root: Path) -> int:
    from agentstack.lock.command import run_lock

    return run_lock(project=root, check=False, frozen=False, update=False, as_json=False)


def test_unchanged_relock_reads_no_file_and_parses_no_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agentstack.lock.resolve as lockfile
    import agentstack.lock.treehash as treehash

    root = make_project(
        tmp_path / "p",
        VALID + '\n[skills.s]\npath = "skills/s"\n',
        {"a.js": "1\n", "skills/s/SKILL.md": "hi\n", "skills/s/x/y.txt": "y\n"},
    )
    past = time.time_ns() - 3600 * 10**9
    for path in root.rglob("*"):
        os.utime(path, ns=(past, past), follow_symlinks=False)
    time.sleep(treehash.RACY_SLACK_NS / 1e9 + 0.1)  # ctimes leave the racy window
    assert _run_lock(root) == 0
    before = (root / "agentstack.lock").read_bytes()
    statcache = stat_cache_path(root)
    stamp = statcache.stat().st_mtime_ns

    def forbidden(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("not on an unchanged re-lock")

    monkeypatch.setattr(treehash, "_hash_fd", forbidden)  # no file is read again
    monkeypatch.setattr(lockfile, "parse_lock", forbidden)  # the old lock is not parsed
    monkeypatch.setattr(lockfile, "loads_unvalidated", forbidden)
    _no_validation(monkeypatch)  # no model is built
    assert _run_lock(root) == 0
    assert (root / "agentstack.lock").read_bytes() == before
    assert statcache.stat().st_mtime_ns == stamp  # every file a hit: the cache is not rewritten


def test_stat_cache_drops_entries_of_files_that_are_gone(tmp_path: Path) -> None:
    from agentstack.lock.treehash import StatCache

    root = make_project(
        tmp_path / "p",
        VALID + '\n[skills.s]\npath = "skills/s"\n',
        {"a.js": "1\n", "skills/s/SKILL.md": "hi\n", "skills/s/x/y.txt": "y\n",
         "skills/s/x/z.txt": "z\n"},
    )
    other = make_project(tmp_path / "q", '[project]\nname = "q"\n\n[skills.t]\npath = "t"\n',
                         {"t/SKILL.md": "t\n"})
    assert _run_lock(root) == 0
    assert _run_lock(other) == 0
    statcache = stat_cache_path(root)
    assert stat_cache_path(other) != statcache  # one file per project

    def entries(path: Path = statcache) -> set[str]:
        return set(json.loads(path.read_bytes())["entries"])

    real = root.resolve()
    assert str(real / "skills/s/x/y.txt") in entries()
    assert str(other.resolve() / "t/SKILL.md") in entries(stat_cache_path(other))
    (root / "skills/s/x/y.txt").unlink()
    assert _run_lock(root) == 0
    kept = entries()
    assert str(real / "skills/s/x/y.txt") not in kept  # gone from the tree: dropped
    assert str(real / "skills/s/x/z.txt") in kept
    assert str(other.resolve() / "t/SKILL.md") in entries(stat_cache_path(other))
    # A walk that fails part-way prunes nothing.
    cache = StatCache(statcache)
    count = len(cache._entries)
    os.mkfifo(root / "skills/s/fifo")
    with pytest.raises(ManifestInvalid):
        _run_lock(root)
    assert len(StatCache(statcache)._entries) == count


def test_malformed_previous_lock_with_git_pins_keeps_its_error(tmp_path: Path) -> None:
    url = _git_skill_source(tmp_path / "src")
    root = make_project(
        tmp_path / "p", f'[project]\nname = "p"\n\n[skills.g]\ngit = "{url}"\nrev = "v1"\n'
        'subdir = "skill"\n'
    )
    assert _run_lock(root) == 0
    lock = root / "agentstack.lock"
    lock.write_text(lock.read_text().replace("[skills.g]", "[skills.g]\nbogus = 1"))
    from agentstack.lock.resolve import parse_lock

    with pytest.raises(ManifestInvalid) as expected:
        parse_lock(lock.read_bytes())
    with pytest.raises(ManifestInvalid) as got:
        _run_lock(root)
    assert got.value.problems == expected.value.problems


_ANY_KEY = st.text(max_size=4)
_ANY = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_ANY_KEY, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(value=_ANY)
def test_canonical_fast_check_accepts_only_what_the_full_check_accepts(value: Any) -> None:
    from agentstack.canonical import CanonicalError, _check, _plain

    if _plain(value):
        _check(value, "$")  # must not raise
    else:
        with pytest.raises(CanonicalError):
            _check(value, "$")


def test_consent_digest_of_an_unchanged_project_reads_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agentstack.lock.treehash as treehash

    root = make_project(
        tmp_path / "p",
        VALID + '\n[skills.s]\npath = "skills/s"\n',
        {"a.js": "1\n", "skills/s/SKILL.md": "hi\n"},
    )
    past = time.time_ns() - 3600 * 10**9
    for path in root.rglob("*"):
        os.utime(path, ns=(past, past), follow_symlinks=False)
    time.sleep(treehash.RACY_SLACK_NS / 1e9 + 0.1)
    assert _run_lock(root) == 0
    expected = project_consent(root)[3]

    def forbidden(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a file was read again")

    monkeypatch.setattr(treehash, "_hash_fd", forbidden)
    monkeypatch.chdir(root)
    assert project_consent(Path("."))[3] == expected  # a relative root hits the cache too


def test_a_fifo_in_place_of_the_manifest_is_refused_not_waited_on(tmp_path: Path) -> None:
    """The shims and the git hooks read agentstack.toml of whatever directory they start in: a
    FIFO there must be a refusal, not a hang."""
    from agentstack.errors import InvalidInput
    from agentstack.manifest.load import read_manifest

    os.mkfifo(tmp_path / "agentstack.toml")
    with pytest.raises(InvalidInput, match="not a regular file"):
        read_manifest(tmp_path)

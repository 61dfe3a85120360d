"""The hostile-bundle corpus (tests/share/bundle_corpus.py, >= 150 bundles in four classes): every
bundle is refused by `receive` with its own reason, or released safely; a refused step writes 0
bytes outside the quarantine's staging directory (the filesystem areas are snapshotted), and no
program runs (no process is started, and a canary git config planted in the bundles never writes
its marker on the receiver's `git status`).

The bundles are built once per test session, in process, from a few locked sender projects."""

from __future__ import annotations

import contextlib
import io
import os
import stat
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

import agentstack.lock.gitmeta as gitmeta
import agentstack.share.bundle as bundle
import agentstack.share.quarantine as quarantine
from agentstack.cli.quarantine import quarantine_show
from agentstack.share.archive import BundleRejected
from agentstack.share.keys import allowed_signers
from agentstack.trust.store import TrustLog
from tests.share import bundle_corpus
from tests.share.bundle_corpus import NOW, Parts, signer

CORPUS = bundle_corpus.hostile_corpus()


@dataclass(frozen=True)
class Built:
    bundles: dict[str, bytes]
    marker: Path  # where the planted canary would write


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    base = tmp_path_factory.mktemp("corpus")
    marker = base / bundle_corpus.CANARY_MARKER_NAME
    home = base / "home"
    with pytest.MonkeyPatch.context() as patch:
        for key, value in {
            "HOME": home,
            "XDG_CONFIG_HOME": home / ".config",
            "XDG_CACHE_HOME": home / ".cache",
            "AGENTSTACK_HOME": home / ".config/agentstack",
            "AGENTSTACK_CACHE": home / ".cache/agentstack",
            "GIT_CONFIG_GLOBAL": home / ".gitconfig",
        }.items():
            patch.setenv(key, str(value))
        patch.setenv("GIT_CONFIG_NOSYSTEM", "1")
        specs = bundle_corpus.projects(str(marker))
        parts: dict[str, Parts] = {}
        out: dict[str, bytes] = {}
        for name in sorted(CORPUS):
            case = CORPUS[name]
            if case.project not in parts:
                parts[case.project] = bundle_corpus.project_parts(
                    base / "senders" / case.project, specs[case.project]
                )
            out[name] = case.build(parts[case.project])
    return Built(bundles=out, marker=marker)


def test_the_corpus_is_large_covers_every_class_and_reason() -> None:
    assert len(CORPUS) >= 150
    by_kind = Counter(case.kind for case in CORPUS.values())
    assert set(by_kind) == {"signature", "statement", "archive", "content"}
    assert min(by_kind.values()) >= 20, by_kind
    codes = {case.code for case in CORPUS.values() if case.code}
    assert len(codes) >= 45
    for required in ("name-too-long", "git-metadata", "control-character", "compression-bomb"):
        assert required in codes
    assert sum(1 for case in CORPUS.values() if not case.code) >= 5


def _tree(*roots: Path, skip: tuple[Path, ...] = ()) -> dict[str, tuple[int, bytes]]:
    out: dict[str, tuple[int, bytes]] = {}
    for root in roots:
        for current, dirs, files in os.walk(root):
            here = Path(current)
            if any(here == s or s in here.parents for s in skip):
                dirs[:] = []
                continue
            for name in sorted(dirs + files):
                path = here / name
                if path in skip:
                    continue
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    content = os.readlink(path).encode()
                elif stat.S_ISREG(st.st_mode):
                    content = path.read_bytes()
                else:
                    content = b""
                out[str(path)] = (st.st_mode, content)
    return out


def _no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a process was started: {args!r}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(os, "posix_spawn", refuse)
    monkeypatch.setattr(os, "fork", refuse)
    monkeypatch.setattr(os, "system", refuse)


def _git_status_everywhere(top: Path) -> None:
    """The receiver's real `git status` in the project and in every directory below it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.environ["GIT_CONFIG_GLOBAL"])
    for current, dirs, _files in os.walk(top):
        dirs[:] = [d for d in dirs if d != ".git"]
        subprocess.run(["git", "status"], cwd=current, capture_output=True, env=env, timeout=120)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_hostile_bundle(
    name: str, built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = CORPUS[name]
    for cap, value in case.caps.items():
        monkeypatch.setattr(bundle, cap, value)
    home = Path(os.environ["AGENTSTACK_HOME"])
    allowed_signers().add("alice", signer().public)
    if case.floor is not None:
        TrustLog(home).append(
            "receive", "", "b3:" + "5" * 64,
            extra={"name": "team", "version": case.floor, "key": signer().public.fingerprint,
                   "signer": "alice"},
        )  # fmt: skip
    receiver = tmp_path / "receiver"
    # The receiver's project is a real git repository wherever the bundle carries the canary (a
    # planted repository or git look-alikes) or is released; elsewhere an empty directory.
    carries_canary = case.project != "base" or not case.code
    if carries_canary:
        subprocess.run(["git", "init", "-q", str(receiver)], check=True, capture_output=True)
    else:
        receiver.mkdir()
    path = tmp_path / f"{name}.astack"
    path.write_bytes(built.bundles[name])
    user = Path(os.environ["HOME"])
    qroot = quarantine.quarantine_root(home)
    before = _tree(tmp_path, user, skip=(qroot,))
    log_before = TrustLog(home).records()
    with monkeypatch.context() as patch:
        _no_processes(patch)
        try:
            received = quarantine.receive(path, now=NOW)
        except BundleRejected as refused:
            outcome: BundleRejected | quarantine.Received = refused
        else:
            outcome = received
    if case.code:
        assert isinstance(outcome, BundleRejected), f"{name} was received"
        assert outcome.code == case.code, outcome.message
        assert outcome.exit_code == 1
        assert _tree(tmp_path, user, skip=(qroot,)) == before
        assert not qroot.exists() or list(qroot.iterdir()) == []
        assert TrustLog(home).records() == log_before
    else:
        assert isinstance(outcome, quarantine.Received), outcome
        statement, contents, principals = quarantine.verify_held(outcome.held)
        with monkeypatch.context() as patch:
            _no_processes(patch)
            shown = io.StringIO()
            with contextlib.redirect_stdout(shown):
                quarantine_show(outcome.held.id, into=receiver)  # the review: nothing runs
            assert outcome.held.id[:12] in shown.getvalue() or "team" in shown.getvalue()
            quarantine.release(
                outcome.held, receiver, contents=contents, statement=statement,
                principals=principals, now=NOW,
            )  # fmt: skip
        # A release writes the target, the trust log and agentstack's own caches; nothing else.
        cache = Path(os.environ["AGENTSTACK_CACHE"]).parent  # $XDG_CACHE_HOME here
        written = (
            qroot,
            receiver,
            cache,
            *(home / f"trust.{x}" for x in ("jsonl", "head", "lock")),
        )
        after = _tree(tmp_path, user, skip=written)
        assert after == {
            k: v for k, v in before.items() if not any(k.startswith(str(w)) for w in written)
        }
        for current, dirs, files in os.walk(receiver):
            rel = os.path.relpath(current, receiver)
            names = [*dirs, *files] if rel != "." else [n for n in [*dirs, *files] if n != ".git"]
            assert not any(gitmeta.is_git_name(n) for n in names), (rel, names)
    if carries_canary:
        _git_status_everywhere(receiver)
    assert not built.marker.exists(), "a planted git config ran"


def test_the_planted_repositories_are_live(built: Built, tmp_path: Path) -> None:
    """The control: the files a `skill-carries-repository-*` bundle plants, written as they are
    (as a release without the rule would), do run their config on `git status`."""
    import io
    import tarfile

    for kind in ("dot-git", "nested", "bare"):
        marker = tmp_path / f"ran-{kind}"
        project = tmp_path / kind
        subprocess.run(["git", "init", "-q", str(project)], check=True, capture_output=True)
        data = built.bundles[f"skill-carries-repository-{kind}"]
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            for member in archive.getmembers():
                if not member.name.startswith("files/skills/helper/"):
                    continue
                handle = archive.extractfile(member)
                assert handle is not None
                content = handle.read().replace(str(built.marker).encode(), str(marker).encode())
                target = project / member.name.removeprefix("files/")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
        _git_status_everywhere(project)
        assert marker.exists(), kind
    assert not built.marker.exists()

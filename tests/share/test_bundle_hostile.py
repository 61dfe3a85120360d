"""Bundles under hostile input: unsafe member names, git metadata in pinned trees, files the lock
pins that `share` used to leave out, a release that fails part way, and a decompression bomb."""

from __future__ import annotations

import gzip
import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import agentstack.lock.gitmeta as gitmeta
import agentstack.share.archive as archive
import agentstack.share.bundle as bundle
import agentstack.share.quarantine as quarantine
from agentstack.errors import AgentstackError, Refused
from agentstack.share.archive import BundleRejected
from agentstack.share.keys import allowed_signers
from tests.conftest import git, make_project, run_cli_in_process
from tests.share.bundle_corpus import (
    EXECUTABLES,
    FILES,
    MANIFEST,
    NOW,
    Parts,
    base_parts,
    make_locked_project,
    signer,
)


def tree(*roots: Path, skip: Path | None = None) -> dict[str, tuple[int, bytes]]:
    """Every path under `roots` (not under `skip`) with its mode and bytes (or link target)."""
    out: dict[str, tuple[int, bytes]] = {}
    for root in roots:
        if not os.path.lexists(root):
            continue
        for current, dirs, files in os.walk(root):
            here = Path(current)
            if skip is not None and (here == skip or skip in here.parents):
                dirs[:] = []
                continue
            for name in sorted(dirs + files):
                path = here / name
                if path == skip:
                    continue
                st_ = os.lstat(path)
                if stat.S_ISLNK(st_.st_mode):
                    content = os.readlink(path).encode()
                elif stat.S_ISREG(st_.st_mode):
                    content = path.read_bytes()
                else:
                    content = b""
                out[str(path)] = (st_.st_mode, content)
    return out


@pytest.fixture
def parts(tmp_path: Path) -> Parts:
    project = make_locked_project(tmp_path / "sender")
    allowed_signers().add("alice", signer().public)
    return base_parts(project)


def _home() -> Path:
    return Path(os.environ["AGENTSTACK_HOME"])


def _with_member(parts: Parts, path: str, data: bytes = b"x\n", *, listed: bool = True) -> bytes:
    parts.members.append((path, data, False))
    if listed:
        parts.restate()
    return parts.build()


def _refused_cleanly(tmp_path: Path, data: bytes) -> BundleRejected:
    path = tmp_path / "hostile.astack"
    path.write_bytes(data)
    home = _home()
    qroot = quarantine.quarantine_root(home)
    before = tree(tmp_path, home, skip=qroot)
    with pytest.raises(BundleRejected) as refused:
        quarantine.receive(path, now=NOW)
    assert tree(tmp_path, home, skip=qroot) == before
    assert not qroot.exists() or list(qroot.iterdir()) == []
    return refused.value


# ------------------------------------------------------------------------------ names


@pytest.mark.parametrize("listed", [True, False], ids=["in-statement", "archive-only"])
def test_a_300_byte_component_is_refused_before_anything_is_written(
    listed: bool, parts: Parts, tmp_path: Path
) -> None:
    refused = _refused_cleanly(
        tmp_path, _with_member(parts, "files/skills/helper/" + "a" * 300, listed=listed)
    )
    assert refused.code == "name-too-long" and refused.exit_code == 1, refused.message
    assert "300 bytes" in refused.message


def test_a_long_name_is_exit_1_with_its_reason_through_the_cli(
    parts: Parts, tmp_path: Path
) -> None:
    path = tmp_path / "long.astack"
    path.write_bytes(_with_member(parts, "files/" + "é" * 150))
    result = run_cli_in_process("receive", str(path), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "(name-too-long)" in result.stderr and "Traceback" not in result.stderr


_SAFE = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cc", "Cs", "Zl", "Zp"),
        blacklist_characters="/\\\0" + "".join(sorted(archive._BIDI)),
    ),
    min_size=1,
    max_size=40,
).filter(lambda c: c not in (".", "..") and not gitmeta.is_git_name(c))


def _nfc(component: str) -> str:
    import unicodedata

    return unicodedata.normalize("NFC", component)


@settings(max_examples=300, deadline=None)
@given(st.lists(_SAFE.map(_nfc), min_size=1, max_size=6))
def test_names_of_safe_components_are_accepted(components: list[str]) -> None:
    path = "/".join(components)
    if any(len(c.encode()) > archive.MAX_COMPONENT_BYTES for c in components) or any(
        c in (".", "..") or gitmeta.is_git_name(c) for c in components
    ):
        return
    archive.check_name(path)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
@example("a/" + "b" * 201)
@example("x/\x1b[2Jevil")
@example("a/.GIT/config")
@example("a/.git. /HEAD")
@example("a/.g\u200cit/config")
@example("a/GIT~1/config")
@example("a/.git::$INDEX_ALLOCATION/config")
@example("a/\u202etxt.sh")
@example("\ud800")
def test_any_name_is_accepted_and_writable_or_refused_with_a_reason(name: str) -> None:
    """Whatever the name, the reader refuses it with a BundleRejected (never another error), or
    accepts it and then it can be created, and released next to its temporary name."""
    import tempfile

    try:
        archive.check_name(name)
    except BundleRejected as exc:
        assert exc.exit_code == 1 and exc.code in {
            "unsafe-path", "absolute-path", "dotdot-path", "name-too-long", "control-character",
            "not-nfc", "git-metadata",
        }  # fmt: skip
        return
    parts = name.split("/")
    assert not any(gitmeta.is_git_name(p) for p in parts)
    assert all(len(p.encode()) <= archive.MAX_COMPONENT_BYTES for p in parts)
    assert all(ch.isprintable() or ch == " " or ord(ch) > 0x9F for ch in name)
    with tempfile.TemporaryDirectory() as scratch:
        quarantine._write_new(Path(scratch), name, iter([b"x"]))
        quarantine._install(Path(scratch), name + "-copy", "file", b"x", False)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_SAFE.map(_nfc), min_size=0, max_size=3),
    st.sampled_from(
        [".git", ".GIT", ".Git", ".git.", ".git ", ".git. .", "git~1", "GIT~1",
         ".g\u200cit", "\ufeff.git", ".git\u200d", ".git::$INDEX_ALLOCATION"]
    ),
    st.lists(_SAFE.map(_nfc), min_size=0, max_size=3),
)  # fmt: skip
def test_every_spelling_of_dot_git_is_refused_at_any_depth(
    before: list[str], dot_git: str, after: list[str]
) -> None:
    path = "/".join([*before, dot_git, *after])
    with pytest.raises(BundleRejected) as refused:
        archive.check_name(path)
    assert refused.value.code in ("git-metadata", "unsafe-path"), refused.value.message
    assert gitmeta.git_metadata([path]) == path


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_SAFE.map(_nfc), min_size=0, max_size=3),
    st.sampled_from(["HEAD", "head", "Head"]),
    st.sampled_from(["objects/info/packs", "refs/heads/main", "commondir", "OBJECTS/x"]),
)
def test_a_bare_repository_layout_is_git_metadata(base: list[str], head: str, sibling: str) -> None:
    prefix = "".join(f"{c}/" for c in base)
    assert gitmeta.git_metadata([f"{prefix}{head}", f"{prefix}{sibling}"]) == f"{prefix}{head}"
    # The same names apart are not a repository.
    assert gitmeta.git_metadata([f"{prefix}{head}", f"{prefix}other/{sibling}"]) is None
    assert gitmeta.git_metadata([f"{prefix}{sibling}"]) is None


# ------------------------------------------------------------------------------ git metadata


CANARY_CONFIG = (
    '[core]\n\trepositoryformatversion = 0\n\tfsmonitor = "echo ran > {marker}; false"\n'
)


def _planted(kind: str, marker: Path) -> dict[str, str]:
    """Files that make a directory a repository whose `git status` runs a canary."""
    config = CANARY_CONFIG.format(marker=marker)
    git_dir = {
        "HEAD": "ref: refs/heads/main\n",
        "config": config,
        "refs/heads/.keep": "",
        "objects/info/.keep": "",
    }
    if kind == "dot-git":
        return {f".git/{k}": v for k, v in git_dir.items()}
    if kind == "nested-dot-git":
        return {f"deep/er/still/.git/{k}": v for k, v in git_dir.items()}
    if kind == "upper-case":
        return {f".GIT/{k}": v for k, v in git_dir.items()}
    if kind == "dot-git-file":
        return {".git": "gitdir: ../../elsewhere\n", "notes.md": "x\n"}
    if kind == "bare":
        return {**{k: v for k, v in git_dir.items() if k != "config"},
                "config": config.replace("[core]\n", "[core]\n\tbare = false\n\tworktree = ..\n")}  # fmt: skip
    raise AssertionError(kind)


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_CONFIG_GLOBAL"] = os.environ.get("GIT_CONFIG_GLOBAL", "/dev/null")
    return env


def _git_status(where: Path) -> None:
    subprocess.run(["git", "status"], cwd=where, capture_output=True, env=_git_env(), timeout=120)


GIT_KINDS = ["dot-git", "nested-dot-git", "upper-case", "dot-git-file", "bare"]


def test_the_canary_runs_when_the_planted_files_are_written(tmp_path: Path) -> None:
    """The control: the planted files, written as they are, do run on the next `git status`."""
    for kind in ("dot-git", "nested-dot-git", "bare"):
        marker = tmp_path / f"marker-{kind}"
        scratch = tmp_path / f"scratch-{kind}"
        git("init", "-q", str(scratch), cwd=tmp_path)
        skill = scratch / "skills/helper"
        for rel, text in _planted(kind, marker).items():
            (skill / rel).parent.mkdir(parents=True, exist_ok=True)
            (skill / rel).write_text(text)
        where = skill / "deep/er/still" if kind == "nested-dot-git" else skill
        _git_status(where)
        assert marker.exists(), kind


@pytest.mark.parametrize("kind", GIT_KINDS)
def test_lock_refuses_git_metadata_in_a_pinned_tree(kind: str, tmp_path: Path) -> None:
    from agentstack.lock.command import run_lock

    files = dict(FILES)
    for rel, text in _planted(kind, tmp_path / "marker").items():
        files[f"skills/helper/{rel}"] = text
    project = make_project(tmp_path / "p", MANIFEST, files, EXECUTABLES)
    with pytest.raises(Refused) as refused:
        run_lock(project=project, check=False, frozen=False, update=False, as_json=False)
    assert refused.value.exit_code == 1
    assert refused.value.message.startswith("skills.helper: skills/helper/")
    assert "git metadata" in refused.value.message
    assert "git = URL" in refused.value.hint
    assert not (project / "agentstack.lock").exists()


def test_lock_refuses_a_pinned_surface_file_in_git_metadata(tmp_path: Path) -> None:
    from agentstack.lock.command import run_lock

    manifest = MANIFEST.replace('files = ["AGENTS.md"]', 'files = ["AGENTS.md", ".git/config"]')
    project = make_project(
        tmp_path / "p", manifest, {**FILES, ".git/config": "[core]\n"}, EXECUTABLES
    )
    with pytest.raises(Refused, match=r"\.git/config is git metadata"):
        run_lock(project=project, check=False, frozen=False, update=False, as_json=False)


@pytest.mark.parametrize("kind", GIT_KINDS)
def test_a_bundle_carrying_a_repository_never_runs_it(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sender who bypasses the rule (a forged lock pinning `.git`): `share` refuses to carry
    it, `receive` refuses it before anything is written, and nothing planted runs on the
    receiver's `git status`."""
    from agentstack.lock.command import run_lock

    marker = tmp_path / "marker"
    files = dict(FILES)
    for rel, text in _planted(kind, marker).items():
        files[f"skills/helper/{rel}"] = text
    project = make_project(tmp_path / "sender", MANIFEST, files, EXECUTABLES)
    allowed_signers().add("alice", signer().public)
    with monkeypatch.context() as patch:
        patch.setattr(gitmeta, "git_metadata", lambda paths: None)
        patch.setattr(bundle, "_check_carried", lambda lock, found: None)
        assert (
            run_lock(project=project, check=False, frozen=False, update=False, as_json=False) == 0
        )
        forged = base_parts(project)
    with pytest.raises(Refused, match=r"git metadata|cannot travel"):
        base_parts(project)  # share's own collection refuses it
    receiver = tmp_path / "receiver"
    git("init", "-q", str(receiver), cwd=tmp_path)
    (receiver / "skills/helper").mkdir(parents=True)
    refused = _refused_cleanly(tmp_path, forged.build())
    assert refused.code == "git-metadata", refused.message
    _git_status(receiver)
    _git_status(receiver / "skills/helper")
    assert not marker.exists()


def test_release_never_completes_a_repository_with_what_is_already_there(
    tmp_path: Path,
) -> None:
    dest = tmp_path / "dest"
    (dest / "skills/helper/refs").mkdir(parents=True)
    assert quarantine._makes_repository(dest, ["skills/helper/HEAD"]) == "skills/helper/HEAD"
    assert quarantine._makes_repository(dest, ["skills/helper/SKILL.md"]) is None


# ------------------------------------------------------------------------------ share carries all


SURFACE_FILES = {
    **FILES,
    "CLAUDE.md": "Undeclared instructions a harness reads.\n@docs/imported.md\n",
    "docs/real.md": "Imported through an in-project link.\n",
    ".claude/commands/deploy.md": "Deploy the thing.\n",
    ".claude/settings.json": '{"permissions": {"allow": ["Bash(ls)"]}}\n',
}


def _homes(tmp_path: Path) -> Any:
    from tests.share.test_bundle import Homes

    return Homes(tmp_path / "users")


def test_share_carries_every_file_the_lock_pins(tmp_path: Path) -> None:
    from agentstack.lock.resolve import read_lock

    homes = _homes(tmp_path)
    project = make_project(tmp_path / "sender", MANIFEST, SURFACE_FILES, EXECUTABLES)
    (project / "docs/imported.md").symlink_to("real.md")
    homes.run("alice", "lock", cwd=project)
    lock = read_lock(project)
    assert lock is not None
    assert set(lock["surface"]) == {
        "CLAUDE.md",
        "AGENTS.md",  # Claude Code reads it too (where no CLAUDE.md is): measured by the probe
        ".claude/commands/deploy.md",
        ".claude/settings.json",
        "docs/imported.md",
    }
    assert {e["kind"] for e in lock["surface"].values()} == {"text", "file", "keys"}
    homes.run("alice", "trust", "--yes", "--accept-risk", cwd=project)
    # The sender's own rendering (an agentstack block in CLAUDE.md) travels as well.
    homes.run("alice", "apply", "--write", cwd=project)
    homes.run("alice", "lock", "--check", cwd=project)
    public = homes.run("alice", "keys", "generate", "k", cwd=project).stdout.strip()
    homes.run("bob", "keys", "trust", "alice", public, cwd=tmp_path)
    out = tmp_path / "b.astack"
    homes.run("alice", "share", "-o", str(out), cwd=project)
    ident = homes.run("bob", "receive", str(out), cwd=tmp_path).stdout.strip()
    dest = tmp_path / "dest"
    homes.run("bob", "quarantine", "release", ident, "--into", str(dest), "--yes", cwd=tmp_path)
    for rel in SURFACE_FILES:
        if rel != "docs/real.md":  # not pinned: what the link leads to travels in its place
            assert (dest / rel).read_bytes() == (project / rel).read_bytes(), rel
    assert (dest / "docs/imported.md").read_text() == SURFACE_FILES["docs/real.md"]
    homes.run("bob", "lock", "--check", cwd=dest)
    assert (
        homes.run("bob", "digest", cwd=dest).stdout
        == homes.run("alice", "digest", cwd=project).stdout
    )


def test_share_refuses_naming_a_pinned_file_it_cannot_carry(tmp_path: Path) -> None:
    homes = _homes(tmp_path)
    files = {**SURFACE_FILES, ".claude/commands/" + "c" * 230 + ".md": "long\n"}
    project = make_project(tmp_path / "sender", MANIFEST, files, EXECUTABLES)
    homes.run("alice", "lock", cwd=project)
    homes.run("alice", "trust", "--yes", "--accept-risk", cwd=project)
    homes.run("alice", "keys", "generate", "k", cwd=project)
    refused = homes.run("alice", "share", "-o", str(tmp_path / "b.astack"), cwd=project, ok=False)
    assert refused.returncode == 1, refused.stderr
    assert ".claude/commands/ccc" in refused.stderr and "cannot travel" in refused.stderr
    assert not (tmp_path / "b.astack").exists()


# ------------------------------------------------------------------------------ release


class Boom(BaseException):
    """An interruption at any point (BaseException: a KeyboardInterrupt is one too)."""


def _fail_at(target: Callable[..., Any], at: int) -> Callable[..., Any]:
    calls = {"n": 0}

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == at:
            raise Boom(f"failure at call {at}")
        return target(*args, **kwargs)

    return wrapped


def _full_at(target: Callable[..., Any], at: int) -> Callable[..., Any]:
    import errno

    calls = {"n": 0}

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == at:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return target(*args, **kwargs)

    return wrapped


def _held(parts: Parts, tmp_path: Path) -> tuple[quarantine.Held, Any, Any]:
    path = tmp_path / "good.astack"
    path.write_bytes(parts.build())
    held = quarantine.receive(path, now=NOW).held
    statement, contents, _ = quarantine.verify_held(held)
    return held, statement, contents


def test_a_release_that_fails_at_any_step_leaves_the_target_as_it_was(
    parts: Parts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held, statement, contents = _held(parts, tmp_path)
    dest = tmp_path / "dest"
    (dest / "hooks").mkdir(parents=True)
    (dest / "AGENTS.md").write_text("The receiver's own text.\n")  # differs: moved to a backup
    (dest / "hooks/mine.sh").write_text("not part of the bundle\n")  # an extra in a pinned tree
    (dest / "README.md").write_text("untouched\n")
    backups = _home() / "backups"
    before = tree(dest)
    files = len(contents.local) + 2

    def release() -> None:
        quarantine.release(
            held, dest, contents=contents, statement=statement, principals=["alice"],
            force=True, now=NOW,
        )  # fmt: skip

    steps: list[tuple[str, int]] = [("_move", n) for n in (1, 2)]
    steps += [("_install", n) for n in range(1, files + 1)]
    steps += [("_prove", 1)]
    for name, at in steps:
        with monkeypatch.context() as patch:
            patch.setattr(quarantine, name, _fail_at(getattr(quarantine, name), at))
            with pytest.raises(Boom):
                release()
        assert tree(dest) == before, (name, at)
        assert not any(p.is_file() for p in backups.rglob("*")) if backups.exists() else True
    # A setup that does not hold at the target (its proof fails) is rolled back as well.
    with monkeypatch.context() as patch:
        patch.setattr(
            quarantine, "_prove", lambda *a: (_ for _ in ()).throw(Refused("does not hold"))
        )
        with pytest.raises(Refused):
            release()
    assert tree(dest) == before
    # Into a directory that does not exist yet: nothing of it is left either.
    fresh = tmp_path / "new/deeper/dest"
    with monkeypatch.context() as patch:
        patch.setattr(quarantine, "_install", _fail_at(quarantine._install, files))
        with pytest.raises(Boom):
            quarantine.release(
                held, fresh, contents=contents, statement=statement, principals=["alice"],
                now=NOW,
            )  # fmt: skip
    assert not (tmp_path / "new").exists()
    # Any write failing (a full disk), in a file or in the trust log: until the release is in
    # the trust log (its commit point), the target is as it was; no partial or temporary file.
    from agentstack.trust.store import TrustLog

    for at in range(1, files + 8):
        with monkeypatch.context() as patch:
            patch.setattr(os, "write", _full_at(os.write, at))
            with pytest.raises((OSError, AgentstackError)):
                release()
        if any(r.action == "release" for r in TrustLog(_home()).records()):
            break  # committed: the failure came after the commit point
        assert tree(dest) == before, ("os.write", at)
    else:
        raise AssertionError("no write failure came after the commit point")
    assert at > files, "the trust log was written before the files"
    # Committed: the release stands, as the trust log says.
    assert (dest / "AGENTS.md").read_text() == "Be careful.\n"
    release()  # and releasing it again changes nothing


# ------------------------------------------------------------------------------ limits


def test_a_bomb_is_refused_before_any_of_it_is_written(
    parts: Parts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = {"bytes": 0}
    original = quarantine._write_new

    def counting(root: Path, rel: str, chunks: Any) -> None:
        def counted() -> Any:
            for chunk in chunks:
                written["bytes"] += len(chunk)
                yield chunk

        original(root, rel, counted())

    monkeypatch.setattr(quarantine, "_write_new", counting)
    refused = _refused_cleanly(
        tmp_path, _with_member(parts, "files/skills/helper/zeros.bin", b"\0" * (32 << 20))
    )
    assert refused.code == "compression-bomb", refused.message
    assert written["bytes"] == 0


def test_the_inflater_stops_a_bomb_within_its_grace(tmp_path: Path) -> None:
    """Without the statement's sizes (the inflater alone), a bomb is refused once the output
    passes the grace: at most RATIO_GRACE plus one chunk is ever handed on, however small the
    compressed file (it is read ahead in one go)."""
    import io

    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as handle:
        handle.write(b"\0" * (64 << 20))
    inflater = archive.Inflater(io.BytesIO(raw.getvalue()), limit=1 << 40)
    handed = 0
    with pytest.raises(BundleRejected) as refused:
        while True:
            handed += len(inflater.read(1 << 16))
    assert refused.value.code == "compression-bomb"
    assert handed <= archive.RATIO_GRACE + (1 << 16)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(min_size=0, max_size=4096), st.integers(min_value=1, max_value=8))
def test_ordinary_data_is_never_taken_for_a_bomb(data: bytes, repeat: int) -> None:
    import io

    payload = (data * repeat) + os.urandom(64)
    inflater = archive.Inflater(io.BytesIO(gzip.compress(payload, mtime=0)), limit=1 << 30)
    assert inflater.read(len(payload)) == payload


def test_lock_refuses_a_git_sourced_skill_that_carries_a_bare_repository(tmp_path: Path) -> None:
    """A repository may commit a bare repository's files (HEAD, config, refs/…) under a skill's
    subdirectory; the same rule refuses the git-sourced tree at lock."""
    from agentstack.lock.command import run_lock

    repo = tmp_path / "repo"
    skill = repo / "skills/style"
    for rel, text in _planted("bare", tmp_path / "marker").items():
        (skill / rel).parent.mkdir(parents=True, exist_ok=True)
        (skill / rel).write_text(text)
    (skill / "SKILL.md").write_text("---\nname: style\ndescription: s\n---\nBe terse.\n")
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "c", cwd=repo)
    manifest = (
        '[project]\nname = "team"\nharnesses = ["claude-code"]\n\n[skills.style]\n'
        f'git = "file://{repo}"\nrev = "main"\nsubdir = "skills/style"\n'
    )
    project = make_project(tmp_path / "p", manifest)
    with pytest.raises(Refused) as refused:
        run_lock(project=project, check=False, frozen=False, update=False, as_json=False)
    assert "HEAD is git metadata" in refused.value.message
    assert f"file://{repo}" in refused.value.message


def test_share_refuses_a_surface_file_above_the_project_naming_it(tmp_path: Path) -> None:
    """What a harness loads above the project (`../CLAUDE.md` up to the checkout's top) is pinned
    but cannot travel: a release never writes outside its target."""
    homes = _homes(tmp_path)
    checkout = tmp_path / "repo"
    git("init", "-q", str(checkout), cwd=tmp_path)
    (checkout / "CLAUDE.md").write_text("Instructions above the project.\n")
    project = make_project(checkout / "proj", MANIFEST, FILES, EXECUTABLES)
    homes.run("alice", "lock", cwd=project)
    homes.run("alice", "trust", "--yes", "--accept-risk", cwd=project)
    homes.run("alice", "keys", "generate", "k", cwd=project)
    refused = homes.run("alice", "share", "-o", str(tmp_path / "b.astack"), cwd=project, ok=False)
    assert refused.returncode == 1, refused.stderr
    assert "../CLAUDE.md, above the project" in refused.stderr
    assert not (tmp_path / "b.astack").exists()


def test_a_full_disk_while_receiving_is_a_refusal_and_nothing_is_kept(
    parts: Parts, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    path = tmp_path / "good.astack"
    path.write_bytes(parts.build())
    real_write = os.write
    calls = {"n": 0}

    def full(fd: int, data: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    with monkeypatch.context() as patch:
        patch.setattr(os, "write", full)
        with pytest.raises(Refused) as refused:
            quarantine.receive(path, now=NOW)
    assert refused.value.exit_code == 1 and "No space left" in refused.value.message
    qroot = quarantine.quarantine_root(_home())
    assert list(qroot.iterdir()) == []


@pytest.mark.parametrize("kind", ["dot-git", "bare"])
def test_apply_never_renders_a_repository_from_a_lock_that_pins_one(
    kind: str, tmp_path: Path
) -> None:
    """A lock written before the rule (or by hand) that pins git metadata in a skill: the skill
    is never rendered into `.claude/skills/` as a live repository."""
    from agentstack_adapters.base import RenderContext
    from agentstack_adapters.common import skill_files

    files = [
        {"path": rel, "kind": "file", "executable": False, "size": 1, "digest": "b3:" + "0" * 64}
        for rel in _planted(kind, tmp_path / "marker")
    ]
    consent = {"skills": {"helper": {"files": files}}}
    context = RenderContext(
        root=tmp_path, consent=consent, digest="", guard_command="", state_home=tmp_path,
        user_home=tmp_path, env={}, read_skill_file=lambda _n, _e: b"x",
        read_project_file=lambda _p: b"",
    )  # fmt: skip
    with pytest.raises(Refused, match=r"skills\.helper: \.claude/skills/helper/.* is git metadata"):
        skill_files(context, ".claude/skills")

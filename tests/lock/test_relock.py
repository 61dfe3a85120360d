"""The re-lock record (agentstack.lock.relock): an unchanged `lock` proved by fingerprints alone, and
never when a full resolution would render other bytes."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentstack.lock.relock as relock
import agentstack.lock.resolve as lockfile
import agentstack.lock.treehash as treehash
import agentstack.manifest.load as load
from agentstack.lock.command import run_lock
from agentstack.lock.treehash import LimitExceeded, Limits
from agentstack.paths import apply_ledger_path
from tests.conftest import make_project
from tests.harness.deadline import scaled
from tests.support.project import manifest

SLACK_NS = 50_000_000  # a short racy window, so tests wait 0.08 s instead of 1 s


@pytest.fixture(autouse=True)
def short_slack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relock, "_RACY_SLACK_NS", SLACK_NS)
    monkeypatch.setattr(treehash, "RACY_SLACK_NS", SLACK_NS)


def settle() -> None:
    """Let every timestamp written so far leave the racy window."""
    time.sleep(SLACK_NS / 1e9 + 0.03)


class Clock:
    """The clock the racy-timestamp rule reads (`time.time_ns` in relock and treehash): the real
    one, or stopped at an instant the test chooses, so what is inside the window does not depend
    on how fast a loaded machine gets from one step to the next."""

    def __init__(self) -> None:
        self.stopped: int | None = None

    def time_ns(self) -> int:
        return time.time_ns() if self.stopped is None else self.stopped

    def just_after(self, *paths: Path) -> None:
        """Stop the clock inside the racy window of the newest change to `paths` (half the window
        after its ctime): a lock now begins too soon after it for a record to vouch for it."""
        self.stopped = max(os.stat(path).st_ctime_ns for path in paths) + SLACK_NS // 2

    def past_the_window(self) -> None:
        """Move the clock on beyond the window of every timestamp written so far (and stop it)."""
        self.stopped = time.time_ns() + 2 * SLACK_NS


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    stopped = Clock()
    monkeypatch.setattr(relock, "time", stopped)
    monkeypatch.setattr(treehash, "time", stopped)
    return stopped


MANIFEST = str(manifest("p", "claude-code", "codex").skill("s").server("local", "servers/a.py")
               .instructions("base.md"))

FILES = {
    "skills/s/SKILL.md": "---\nname: s\n---\nhi\n",
    "skills/s/lib/tool.sh": "#!/bin/sh\necho tool\n",
    "skills/s/lib/deep/data.txt": "data\n",
    "servers/a.py": "print('a')\n",
    "base.md": "Be brief.\n",
    "CLAUDE.md": "Project notes.\n",
    ".claude/settings.json": '{"permissions": {"allow": ["Bash(ls)"]}}\n',
}


def project(tmp_path: Path, manifest: str = MANIFEST, files: dict[str, str] | None = None) -> Path:
    root = make_project(tmp_path / "p", manifest, FILES if files is None else files)
    (root / "skills/s/lib/tool.sh").chmod(0o755) if files is None else None
    (root / ".git").mkdir()  # the top of its checkout: nothing above it is on the surface
    settle()
    return root.resolve()


def lock(
    root: Path, *, check: bool = False, as_json: bool = False, limits: Limits | None = None
) -> int:
    return run_lock(
        project=root, check=check, frozen=False, update=False, as_json=as_json, limits=limits
    )


def fast(root: Path) -> bool:
    return relock.unchanged(str(root), None)


def resolved(root: Path) -> bytes:
    """What a full resolution renders for the project now (no record involved)."""
    view = load.load_view(root)
    return lockfile.dumps_lock(lockfile.resolver_for(root, None).resolve(view)).encode()


def record_file(root: Path) -> Path:
    from agentstack import layout

    return Path(relock.record_path(layout.cache(), str(root)))


_SLACKS = (relock._RACY_SLACK_NS, treehash.RACY_SLACK_NS)  # before any test patches them


def test_the_defaults_agree_with_treehash() -> None:
    default = Limits()
    assert (
        default.max_files,
        default.max_total_bytes,
        default.max_file_bytes,
    ) == relock.DEFAULT_LIMITS
    assert _SLACKS[0] == _SLACKS[1]


def test_unchanged_relock_resolves_nothing_and_says_what_a_full_lock_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = project(tmp_path)
    assert lock(root) == 0
    before = (root / "agentstack.lock").read_bytes()
    assert record_file(root).is_file()
    assert fast(root)

    # The same command with the record removed: the full resolution's own output.
    outputs = {}
    for flags in ({}, {"check": True}, {"as_json": True}, {"check": True, "as_json": True}):
        saved = record_file(root).read_bytes()
        record_file(root).unlink()
        capsys.readouterr()
        assert lock(root, **flags) == 0
        outputs[str(flags)] = capsys.readouterr()
        record_file(root).write_bytes(saved)
        record_file(root).chmod(0o600)

    def forbidden(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("an unchanged re-lock resolves nothing")

    monkeypatch.setattr(load, "load_view", forbidden)
    monkeypatch.setattr(lockfile.Resolver, "resolve", forbidden)
    monkeypatch.setattr(treehash, "_hash_fd", forbidden)
    for flags in ({}, {"check": True}, {"as_json": True}, {"check": True, "as_json": True}):
        capsys.readouterr()
        assert lock(root, **flags) == 0
        assert capsys.readouterr() == outputs[str(flags)]
    assert (root / "agentstack.lock").read_bytes() == before


def _edit_same_size(root: Path) -> None:
    path = root / "skills/s/lib/deep/data.txt"
    old = os.stat(path)
    time.sleep(0.01)  # a new clock tick for the ctime
    path.write_text("DATA\n")
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))  # mtime restored: only ctime moves


def _symlink_inside(root: Path) -> None:
    (root / "skills/s/alias").symlink_to("SKILL.md")


def _replace_by_link(root: Path) -> None:
    (root / "skills/s/lib/deep/data.txt").unlink()
    (root / "skills/s/lib/deep/data.txt").symlink_to("../tool.sh")


MUTATIONS: dict[str, Callable[[Path], None]] = {
    "same-size edit, mtime restored": _edit_same_size,
    "append": lambda r: (r / "skills/s/SKILL.md").open("a").write("more\n"),
    "chmod +x": lambda r: (r / "skills/s/SKILL.md").chmod(0o755),
    "add file deep": lambda r: (r / "skills/s/lib/deep/new.txt").write_text("n\n"),
    "add file in new dir": lambda r: (
        (r / "skills/s/new").mkdir(),
        (r / "skills/s/new/x.txt").write_text("x\n"),
    ),
    "add empty dir": lambda r: (r / "skills/s/empty").mkdir(),
    "remove file": lambda r: (r / "skills/s/lib/tool.sh").unlink(),
    "rename file": lambda r: (r / "skills/s/lib/deep/data.txt").rename(r / "skills/s/lib/d.txt"),
    "rename dir": lambda r: (r / "skills/s/lib/deep").rename(r / "skills/s/lib/deeper"),
    "add link inside": _symlink_inside,
    "replace file by link": _replace_by_link,
    "server script edited": lambda r: (r / "servers/a.py").write_text("print('b')\n"),
    "instructions edited": lambda r: (r / "base.md").write_text("Be long.\n"),
    "surface file edited": lambda r: (r / ".claude/settings.json").write_text(
        '{"permissions": {"allow": ["Bash(rm)"]}}\n'
    ),
    "surface file added": lambda r: (r / "AGENTS.md").write_text("Other notes.\n"),
    "manifest edited": lambda r: (r / "agentstack.toml").write_text(
        MANIFEST.replace('name = "p"', 'name = "q"')
    ),
    "manifest comment": lambda r: (r / "agentstack.toml").write_text("# note\n" + MANIFEST),
    "lock edited by hand": lambda r: (r / "agentstack.lock").write_text(
        (r / "agentstack.lock").read_text().replace("version = 1", "version = 1\n# hand")
    ),
    "touch": lambda r: os.utime(r / "skills/s/SKILL.md"),
    "inside .git": lambda r: (
        (r / ".git").mkdir(exist_ok=True),
        (r / ".git/HEAD").write_text("ref\n"),
    ),
    "apply ledger written": lambda r: (
        apply_ledger_path(r).parent.mkdir(parents=True, exist_ok=True),
        apply_ledger_path(r).write_text(
            json.dumps({"files": {str(r / "CLAUDE.md"): {"kind": "text"}}})
        ),
    ),
    "nothing": lambda r: None,
}


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(names=st.lists(st.sampled_from(sorted(MUTATIONS)), min_size=1, max_size=3, unique=True))
def test_a_record_never_vouches_for_a_lock_a_full_resolution_would_change(
    tmp_path_factory: pytest.TempPathFactory, names: list[str]
) -> None:
    base = tmp_path_factory.mktemp("relock")
    root = project(base)
    assert lock(root) == 0
    assert fast(root)
    on_disk = (root / "agentstack.lock").read_bytes()
    for name in names:
        with contextlib.suppress(OSError):  # an earlier mutation moved what this one edits
            MUTATIONS[name](root)
    if names == ["nothing"]:
        assert fast(root)
    if fast(root):
        # The record's answer must be the full resolution's answer.
        assert (root / "agentstack.lock").read_bytes() == resolved(root) == on_disk
        assert set(names) <= {"nothing", "inside .git"}
    if "apply ledger written" in names:
        assert not fast(root)
    # Whatever happened, a lock now leaves exactly what a full resolution renders.
    settle()
    assert lock(root) == 0
    assert (root / "agentstack.lock").read_bytes() == resolved(root)
    assert fast(root)
    shutil.rmtree(base)


def test_a_change_inside_the_racy_window_is_rehashed_and_not_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: Clock
) -> None:
    root = project(tmp_path)
    assert lock(root) == 0
    assert fast(root)
    read: list[str] = []
    original = treehash._open_digest

    def counting(path: str, cache: treehash.StatCache | None) -> tuple[str, os.stat_result]:
        read.append(os.path.basename(path))
        return original(path, cache)

    monkeypatch.setattr(treehash, "_open_digest", counting)
    _edit_same_size(root)
    assert not fast(root)  # the ctime moved
    clock.just_after(root / "skills/s/lib/deep/data.txt")  # the lock begins right after the edit
    assert lock(root) == 0
    assert read == ["data.txt"]  # re-hashed; every other file a stat-cache hit
    assert b"DATA" not in (root / "agentstack.lock").read_bytes()
    assert (root / "agentstack.lock").read_bytes() == resolved(root)
    # Changed within the racy window of that lock: no record vouches for it ...
    assert not record_file(root).exists()
    read.clear()
    assert lock(root) == 0
    assert read == ["data.txt"]  # ... and the stat cache does not either: read again
    clock.past_the_window()
    read.clear()
    assert lock(root) == 0  # once the window has passed, the record is written again
    assert read == ["data.txt"]  # (the entry stored inside the window was not trusted)
    assert fast(root)
    record_file(root).unlink()
    read.clear()
    assert lock(root) == 0
    assert read == []  # and, without the record, the stat cache vouches for it too


def test_files_written_just_before_a_lock_are_not_recorded(tmp_path: Path, clock: Clock) -> None:
    root = make_project(tmp_path / "p", MANIFEST, FILES).resolve()
    (root / ".git").mkdir()
    clock.just_after(*(root / rel for rel in FILES), root / "agentstack.toml")
    assert lock(root) == 0  # every file is younger than the racy window
    assert not record_file(root).exists()
    assert not fast(root)
    clock.past_the_window()
    assert lock(root) == 0
    assert fast(root)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "world-writable", "other-project"])
def test_a_damaged_or_foreign_record_is_not_trusted(tmp_path: Path, damage: str) -> None:
    root = project(tmp_path)
    assert lock(root) == 0
    path = record_file(root)
    data = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"\x00\xff" * 100)
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "world-writable":
        path.chmod(0o666)
    else:
        other = make_project(tmp_path / "q", MANIFEST, FILES).resolve()
        shutil.copytree(root, other, dirs_exist_ok=True)
        target = record_file(other)
        target.write_bytes(data)
        target.chmod(0o600)
        assert not fast(other)
        return
    assert not fast(root)
    assert lock(root) == 0
    assert (root / "agentstack.lock").read_bytes() == resolved(root)


def test_a_record_does_not_lift_the_limits(tmp_path: Path) -> None:
    root = project(tmp_path)
    assert lock(root) == 0
    assert fast(root)
    assert not relock.unchanged(str(root), Limits(max_files=2))
    with pytest.raises(LimitExceeded):
        lock(root, limits=Limits(max_files=2))


@pytest.mark.parametrize(
    "case",
    [
        "link outside",
        "link into .git",
        "git path in the manifest",
        "escape in the manifest",
        "line continuation in the manifest",
        "import from home",
    ],
)
def test_what_a_record_cannot_vouch_for_is_always_resolved(tmp_path: Path, case: str) -> None:
    manifest, files = MANIFEST, dict(FILES)
    if case == "git path in the manifest":
        manifest += '\n[servers.hook]\ncommand = "sh"\nargs = [".git/hooks/x"]\n'
    elif case == "escape in the manifest":
        manifest += '\n[servers.hook]\ncommand = "sh"\nargs = ["\\u002egit/hooks/x"]\n'
    elif case == "line continuation in the manifest":
        manifest += '\n[servers.hook]\ncommand = "sh"\nargs = ["""./.\\\ngit/x.py"""]\n'

    elif case == "import from home":
        files["CLAUDE.md"] = "See @~/notes.md\n"
    root = make_project(tmp_path / "p", manifest, files)
    if case == "link outside":
        (root / "docs").mkdir()
        (root / "docs/elsewhere").symlink_to(tmp_path)
    elif case == "link into .git":
        (root / ".git").mkdir()
        (root / ".git/config").symlink_to(tmp_path)  # not fingerprinted: .git is not listed
        (root / ".claude").rename(root / "claude-settings")
        (root / ".claude").symlink_to(".git/config")
    (root / ".git").mkdir(exist_ok=True)  # the checkout's top: only the case stops a record
    root = root.resolve()
    settle()
    assert lock(root) == 0
    assert not record_file(root).exists()
    assert not fast(root)


def test_git_paths_in_a_manifest_are_recognised() -> None:
    plain = relock._plain_manifest
    assert plain(b'[skills.s]\npath = "skills/s"\n')
    assert plain(b'git = "https://example.com/r.git"\ngithub = ".github/x"\nx = ".gitignore"')
    assert plain(b'path = "\\u0062ase.md"')  # an escape that spells no `.git`
    assert not plain(b'path = ".git/x"')
    assert not plain(b"path = 'a/.git'")
    assert not plain(b'args = ["x", ".git"]')
    assert not plain(b'path = "\\u002egit/x"')
    assert not plain(b'args = ["""./.\\\ngit/x.py"""]')  # a line continuation
    assert not plain(b'path = "a\\\\.GIT\\\\x"')  # backslashes, another case
    assert not plain(b'[".git"]\nx = 1')  # a key
    assert not plain(b"not toml = = =")
    assert relock._names_git(b'path = "a/.git/b"')
    assert not relock._names_git(b'path = ".github/x" git = "https://h/r.git"')


def test_the_code_that_resolves_is_part_of_the_record(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "m.py").write_text("x = 1\n")
    token = relock._code_token([str(package)])
    assert relock._code_token([str(package)]) == token
    time.sleep(0.01)
    (package / "m.py").write_text("x = 2\n")
    assert relock._code_token([str(package)]) != token


@given(st.lists(st.text(st.characters(exclude_categories=("Cs",)), min_size=1), unique=True))
def test_str_order_of_paths_is_the_order_of_their_utf8_bytes(paths: list[str]) -> None:
    """The lock sorts walked rows by str (lockfile._tree_rows): the same order as raw bytes."""
    assert sorted(paths) == sorted(paths, key=lambda p: p.encode("utf-8"))


@pytest.mark.parametrize("where", ["skills/s/lib/flash.txt", "AGENTS.md"])
def test_a_name_that_comes_and_goes_during_the_resolution_is_not_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """The listings are taken after the resolution: a file the resolution saw and that is gone
    again (an A-B-A change) leaves them equal, so the directory's times must say it changed."""
    root = project(tmp_path)
    original = lockfile.Resolver.resolve

    def flashing(self: lockfile.Resolver, manifest: object) -> dict[str, object]:
        (root / where).write_text("seen by the resolution\n")
        try:
            return original(self, manifest)  # type: ignore[arg-type]
        finally:
            (root / where).unlink()

    monkeypatch.setattr(lockfile.Resolver, "resolve", flashing)
    assert lock(root) == 0
    assert where.rsplit("/", 1)[-1] in (root / "agentstack.lock").read_text()
    assert not record_file(root).exists()
    assert not fast(root)
    monkeypatch.setattr(lockfile.Resolver, "resolve", original)
    settle()
    assert lock(root) == 0  # resolved in full: the lock no longer names it
    assert (root / "agentstack.lock").read_bytes() == resolved(root)
    assert fast(root)


def test_a_stale_lock_found_by_a_freshness_check_removes_the_record(tmp_path: Path) -> None:
    from agentstack.errors import StaleLock

    root = project(tmp_path)
    assert lock(root) == 0
    assert record_file(root).exists()
    (root / "skills/s/SKILL.md").write_text("changed\n")
    with pytest.raises(StaleLock):
        lockfile.fresh_lock(root, load.load_view(root))
    assert not record_file(root).exists()


def test_a_hostile_project_path_is_shown_sanitised_on_the_fast_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_project(tmp_path / "p\u202e\x1b]0;x\x07", MANIFEST, FILES).resolve()
    (root / ".git").mkdir()
    settle()
    assert lock(root) == 0  # writes the lock
    record_file(root).unlink()
    capsys.readouterr()
    assert lock(root) == 0  # a full resolution that finds it unchanged (writes the record)
    slow = capsys.readouterr().err.splitlines()[-1]
    assert fast(root)
    assert lock(root) == 0
    quick = capsys.readouterr().err.splitlines()[-1]
    assert quick == slow
    assert "\x1b" not in quick and "\u202e" not in quick and "\\u202e" in quick


def test_a_project_below_its_checkouts_top_is_never_recorded(tmp_path: Path) -> None:
    """What the harnesses load from the directories above the project is pinned in the surface
    but outside the record's fingerprints: such a project is always resolved, so a file added
    above it is in the next lock."""
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    root = make_project(repo / "sub", MANIFEST, FILES).resolve()
    settle()
    assert lock(root) == 0
    assert not record_file(root).exists()
    before = (root / "agentstack.lock").read_bytes()
    settle()
    assert lock(root) == 0 and (root / "agentstack.lock").read_bytes() == before
    (repo / "AGENTS.md").write_text("planted above the project\n")
    assert lock(root) == 0
    assert b"../AGENTS.md" in (root / "agentstack.lock").read_bytes()
    # A `.git` above a project that is no checkout's top (here a FIFO): never recorded either.
    odd = tmp_path / "odd"
    odd.mkdir()
    os.mkfifo(odd / ".git")
    inside = make_project(odd / "p", MANIFEST, FILES).resolve()
    settle()
    assert lock(inside) == 0 and not record_file(inside).exists()


@pytest.mark.parametrize("change", ["git init above", ".git in the project", "other home"])
def test_a_plain_directory_is_recorded_until_a_checkout_could_surround_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """A project without any `.git` (a tarball): what the harnesses load from above it is
    nothing while no `.git` exists above it up to the home directory, and the record keeps those
    absent paths and the home; a `git init` above (what lies there becomes the surface), a `.git`
    in the project, or another home is a full resolution, which sees what the change brings."""
    import subprocess

    outer = tmp_path / "outer"
    outer.mkdir()
    (outer / "AGENTS.md").write_text("above the project\n")
    root = make_project(outer / "loose", MANIFEST, FILES).resolve()
    settle()
    assert lock(root) == 0 and record_file(root).exists() and fast(root)
    before = (root / "agentstack.lock").read_bytes()
    if change == "git init above":
        subprocess.run(["git", "init", "-q", str(outer)], check=True)
    elif change == ".git in the project":
        (root / ".git").mkdir()
    else:
        monkeypatch.setenv("HOME", str(tmp_path / "elsewhere"))
    assert not fast(root)
    assert lock(root) == 0
    after = (root / "agentstack.lock").read_bytes()
    assert after == resolved(root)
    if change == "git init above":
        assert b"../AGENTS.md" in after and b"../AGENTS.md" not in before
    else:
        assert after == before  # nothing above is the surface either way


def test_an_unchanged_lock_imports_neither_pathlib_nor_typing_nor_the_resolver(
    tmp_path: Path,
) -> None:
    """The process an unchanged `lock` is: the entry point, `layout` and `relock` (a test, so
    that the start-up the record saves cannot come back unnoticed)."""
    import json
    import subprocess
    import sys

    from tests.conftest import REPO

    root = project(tmp_path)
    assert lock(root) == 0 and fast(root)
    probe = (
        "import json, sys\n"
        "before = set(sys.modules)  # what the interpreter (and an editable install) loaded\n"
        "from agentstack import entry\n"
        "def end(code):\n"
        "    sys.stderr.flush()\n"
        "    print(json.dumps({'code': code, 'modules': sorted(set(sys.modules) - before)}))\n"
        "    sys.exit(code)\n"
        "entry.end = end\n"
        "sys.argv = ['agentstack', 'lock']\n"
        "entry.main()\n"
    )
    import sysconfig

    # `-S`: no site processing, so an editable install's import hook (which loads pathlib and
    # re) is not there either; the package and its dependencies by plain paths.
    paths = sysconfig.get_paths()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(REPO), paths["purelib"],
                                                        paths["platlib"]))}
    env["AGENTSTACK_HOME"] = str(Path(layout_home()))
    done = subprocess.run([sys.executable, "-S", "-c", probe], cwd=root, env=env,
                          capture_output=True, text=True, timeout=scaled(60))
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["code"] == 0 and "unchanged:" in done.stderr, done.stderr
    loaded = set(report["modules"])
    assert "agentstack.lock.relock" in loaded
    for name in ("pathlib", "typing", "agentstack.lock.command", "agentstack.lock.resolve",
                 "agentstack.errors", "agentstack.paths", "agentstack.manifest.view", "tomllib"):
        assert name not in loaded, name


def layout_home() -> str:
    from agentstack import layout

    return layout.home()

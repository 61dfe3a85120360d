"""How `agentstack run` starts the confined command quickly without weakening it.

- the seccomp program comes from agentstack's private cache only when that copy is verified and
  keyed by every input (policy, agentstack, pyseccomp, libseccomp, machine, kernel); anything
  else is recompiled; the cache lives where no sandbox can write;
- from a single-threaded process the launcher is a clone born in the run's cgroup (no second
  interpreter, no cgroup migration), and the command is confined exactly as before (the
  confinement suite runs every row under both launchers: tests/sandbox/test_confinement.py);
- the after-session watch tests each entry of the tree against its patterns with one set lookup
  and one prefix test, with the same answers as the rule it replaces;
- what `run` imports before the command is exec'd is pinned (no pydantic, no pyseccomp, no nono
  package `__init__`).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentstack import layout
from agentstack.sandbox import seccomp, watch
from tests.conftest import REPO, make_project, run_cli
from tests.harness.deadline import scaled
from tests.support.project import manifest

MANIFEST = str(manifest("speed", "claude-code").sandbox(write_dirs=["."]))


@pytest.fixture
def state_home(tmp_path: Path) -> str:
    home = tmp_path / "state"
    home.mkdir(mode=0o700)
    return str(home)


def _cache_file(state_home: str, *, udp: bool = False, listen: bool = False) -> Path:
    key = seccomp.cache_key(allow_udp=udp, allow_listen=listen)
    return Path(layout.seccomp_programs(state_home)) / f"{key}.bpf"


def _no_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**_: bool) -> bytes:
        raise AssertionError("compiled although a verified copy was cached")

    monkeypatch.setattr(seccomp, "build_program", refuse)


def test_the_cached_program_is_the_compiled_one_and_private(state_home: str,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    compiled = seccomp.build_program(allow_udp=False, allow_listen=False)
    first = seccomp.program(allow_udp=False, allow_listen=False, state_home=state_home)
    assert first == compiled
    path = _cache_file(state_home)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    _no_compile(monkeypatch)
    assert seccomp.program(allow_udp=False, allow_listen=False, state_home=state_home) == compiled


def test_the_key_covers_every_input(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = {seccomp.cache_key(allow_udp=u, allow_listen=v) for u in (0, 1) for v in (0, 1)}
    assert len(keys) == 4
    base = seccomp.cache_key(allow_udp=False, allow_listen=False)
    import agentstack

    for target, name, value in [
        (agentstack, "__version__", "99.0"),
        (seccomp, "libseccomp_version", lambda: "9.9.9"),
        (seccomp, "_pyseccomp_file", lambda: None),
        (os, "uname", lambda: os.uname_result(("Linux", "h", "0.0.1", "#1", "x86_64"))),
    ]:
        with monkeypatch.context() as patch:
            patch.setattr(target, name, value)
            assert seccomp.cache_key(allow_udp=False, allow_listen=False) != base, name


def test_a_changed_module_source_is_a_new_key(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    base = seccomp.cache_key(allow_udp=False, allow_listen=False)
    edited = tmp_path / "seccomp.py"
    edited.write_bytes(Path(seccomp.__file__).read_bytes() + b"\n# edited\n")
    # The key covers the source the running module was loaded from (read at import), not what
    # is on disk now: an upgrade under a starting `run` cannot file the old program under it.
    monkeypatch.setattr(seccomp, "__file__", str(edited))
    assert seccomp.cache_key(allow_udp=False, allow_listen=False) == base
    monkeypatch.setattr(seccomp, "_OWN_SOURCE", seccomp._source_digest(str(edited)))
    assert seccomp.cache_key(allow_udp=False, allow_listen=False) != base


def _permissive() -> bytes:
    # A one-instruction classic-BPF program: RET SECCOMP_RET_ALLOW (what an attacker would plant).
    return (0x06).to_bytes(2, sys.byteorder) + b"\0\0" + (0x7FFF0000).to_bytes(4, sys.byteorder)


@pytest.mark.parametrize("tamper", ["body", "digest", "other-key", "group-writable", "symlink",
                                    "open-directory", "truncated"])
def test_a_cached_copy_that_does_not_verify_is_recompiled(state_home: str, tamper: str,
                                                          tmp_path: Path) -> None:
    compiled = seccomp.program(allow_udp=False, allow_listen=False, state_home=state_home)
    path = _cache_file(state_home)
    data = path.read_bytes()
    header, digest, body = data.split(b"\n", 2)
    bad = _permissive()
    if tamper == "body":
        path.write_bytes(header + b"\n" + digest + b"\n" + bad)
    elif tamper == "digest":
        from hashlib import sha256

        path.write_bytes(header + b"\n" + sha256(bad).hexdigest().encode() + b"\n" + body)
    elif tamper == "other-key":
        other = _cache_file(state_home, udp=True, listen=True)
        path.write_bytes(data.replace(path.stem.encode(), other.stem.encode()))
    elif tamper == "group-writable":
        path.chmod(0o620)
    elif tamper == "symlink":
        planted = tmp_path / "planted.bpf"
        planted.write_bytes(data)
        path.unlink()
        path.symlink_to(planted)
    elif tamper == "open-directory":
        path.parent.chmod(0o777)
    elif tamper == "truncated":
        path.write_bytes(data[:-3])
    assert seccomp.program(allow_udp=False, allow_listen=False, state_home=state_home) == compiled
    if tamper != "open-directory":  # replaced by a verified copy
        assert path.read_bytes() == data and not path.is_symlink()


def test_the_cache_is_where_no_sandbox_reaches(tmp_path: Path) -> None:
    from agentstack.manifest.load import load_manifest
    from agentstack.sandbox.resolve import resolve_policy

    root = make_project(tmp_path / "demo", MANIFEST)
    state = tmp_path / "state"
    policy = resolve_policy(load_manifest(root).sandbox, root, harness="claude-code",
                            agentstack_home=state, home=tmp_path)
    target = str(Path(layout.seccomp_programs(str(state))) / "x.bpf")
    assert not policy.decide_path(target, "write").allowed
    assert not policy.decide_path(target, "read").allowed


CLONE_PROBE = textwrap.dedent("""
    import json, os, subprocess, sys
    from pathlib import Path
    from agentstack.manifest.load import load_manifest
    from agentstack.patience import scaled
    from agentstack.sandbox.resolve import resolve_policy
    from agentstack.sandbox.runner import confined
    root = Path(sys.argv[1])
    policy = resolve_policy(load_manifest(root).sandbox, root)
    script = "cat /proc/self/cgroup; grep -E '^(NoNewPrivs|Seccomp|CapEff):' /proc/self/status"
    with confined(root, policy, ["/bin/sh", "-c", script], {"PATH": "/usr/bin:/bin"},
                  interactive=False, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                  stderr=subprocess.STDOUT) as child:
        out, _ = child.process.communicate(timeout=scaled(30))
        group = child.cgroup.path if child.cgroup else None
    print(json.dumps({"kind": type(child.process).__name__, "code": child.process.returncode,
                      "out": out.decode(), "group": group}))
""")


def test_a_single_threaded_run_clones_the_launcher_into_its_cgroup(tmp_path: Path) -> None:
    base = Path(tempfile_dir()) / f"agentstack-test-clone-{os.getpid()}"
    root = make_project(base / "demo", MANIFEST)
    try:
        env = dict(os.environ, PYTHONPATH=str(REPO), AGENTSTACK_HOME=str(tmp_path / "state"))
        done = subprocess.run([sys.executable, "-c", CLONE_PROBE, str(root)],
                              capture_output=True, text=True, env=env, timeout=scaled(120))
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["kind"] == "_Clone" and report["code"] == 0, report
        assert "NoNewPrivs:\t1" in report["out"] and "Seccomp:\t2" in report["out"]
        assert "CapEff:\t0000000000000000" in report["out"]
        if report["group"] is not None:  # born there: no migration
            assert f"/{os.path.basename(report['group'])}\n" in report["out"], report
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


def tempfile_dir() -> str:
    return "/var/tmp" if os.access("/var/tmp", os.W_OK) else str(Path.home())


IMPORT_PROBE = textwrap.dedent("""
    import json, sys
    from agentstack.sandbox import runner
    seen = {}
    check = runner._check_status
    def record(status, process):
        seen["modules"] = sorted(sys.modules)
        return check(status, process)
    runner._check_status = record
    from agentstack import entry
    from agentstack.entry import main
    entry.end = sys.exit  # report below instead of the short exit
    sys.argv = ["agentstack", "run", "--", "/bin/true"]
    try:
        code = main()
    except SystemExit as exc:
        code = exc.code
    print(json.dumps({"code": code, "modules": seen.get("modules")}))
""")

# What `run` must not import on its way to exec'ing the command (with the manifest cache warm):
# pydantic (validation happens at lock time), pyseccomp (its import runs `ldconfig -p` twice; the
# program is cached), nono-py's package `__init__` (pydantic-heavy; only its native module is
# loaded), importlib.metadata (nono-py's version is read from its dist-info directory's name),
# subprocess (the launcher is a clone; a Popen only for a caller that wants its pipes), signal
# (its enums; `_signal` has the same functions).
# The command table, typer and argparse (`run -- CMD` takes the entry point's fast path), and
# dataclasses (with `inspect`, ~5 ms; the sandbox's records are NamedTuples), shutil and tempfile
# (the run directory is made and removed with os calls).
FORBIDDEN = ("pydantic", "pydantic_core", "pyseccomp", "ctypes.util", "nono_py", "subprocess",
             "signal", "importlib.metadata", "rich", "typer", "click", "shellingham", "tomlkit",
             "git", "argparse",
             "agentstack.cli", "agentstack.cli._app", "agentstack.cli.sandbox", "dataclasses",
             "inspect", "shutil", "tempfile")


def test_run_imports_nothing_it_does_not_need_before_exec(tmp_path: Path) -> None:
    base = Path(tempfile_dir()) / f"agentstack-test-imports-{os.getpid()}"
    root = make_project(base / "demo", MANIFEST)
    try:
        env = {"AGENTSTACK_HOME": str(tmp_path / "state"),
               "AGENTSTACK_CACHE": str(tmp_path / "cache")}
        assert run_cli("lock", cwd=root, env=env).returncode == 0
        trusted = run_cli("trust", "--yes", "--accept-risk", cwd=root, env=env)
        assert trusted.returncode == 0, trusted.stderr
        assert run_cli("run", "--", "/bin/true", cwd=root, env=env).returncode == 0  # warm
        full = dict(os.environ, PYTHONPATH=str(REPO), **env)
        done = subprocess.run([sys.executable, "-c", IMPORT_PROBE], cwd=root, env=full,
                              capture_output=True, text=True, timeout=scaled(120))
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.splitlines()[-1])
        assert report["code"] == 0 and report["modules"], report
        loaded = set(report["modules"])
        assert "nono_py._nono_py" in loaded  # the native module, loaded directly
        bad = sorted(m for m in loaded if m != "nono_py._nono_py"
                     and any(m == f or m.startswith(f + ".") for f in FORBIDDEN))
        assert not bad, bad
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------ the after-session watch


def _matches_reference(relative: str, patterns: tuple[str, ...]) -> bool:
    """The watch's pattern rule as first written (one generator over every pattern)."""
    return any(
        (relative.startswith(p) or relative == p[:-1]) if p.endswith("/") else relative == p
        for p in patterns
    )


_PIECES = sorted({part for p in (*watch.ON_OPEN, *watch.HARNESS) for part in p.split("/")}
                 | {"a", "x.md", "", "config", ".git"})


@settings(max_examples=400, deadline=None)
@given(parts=st.lists(st.sampled_from(_PIECES), min_size=1, max_size=4),
       is_dir=st.booleans())
def test_the_watchs_fast_pattern_test_agrees_with_the_rule(parts: list[str],
                                                           is_dir: bool) -> None:
    relative = "/".join(parts)
    probe = relative + ("/" if is_dir else "")
    for patterns in (watch.ON_OPEN, watch.HARNESS):
        assert watch._matches(probe, patterns) == _matches_reference(probe, patterns), probe
    for pattern in (*watch.ON_OPEN, *watch.HARNESS):  # every pattern, and what lies under one
        for candidate in (pattern, pattern.rstrip("/"), pattern + "x", pattern.rstrip("/") + "x"):
            for patterns in (watch.ON_OPEN, watch.HARNESS):
                assert watch._matches(candidate, patterns) == _matches_reference(
                    candidate, patterns), candidate


# ------------------------------------------------------------------ policy resolution


def test_the_shared_realpath_agrees_with_os_realpath(tmp_path: Path) -> None:
    from agentstack.sandbox.resolve import RealPaths

    base = tmp_path.resolve()
    (base / "d" / "e").mkdir(parents=True)
    (base / "f").write_text("x")
    (base / "rel").symlink_to("d/e")
    (base / "abs").symlink_to(base / "d")
    (base / "up").symlink_to("../" + base.name + "/d")
    (base / "d" / "back").symlink_to("..")
    (base / "loop1").symlink_to("loop2")
    (base / "loop2").symlink_to("loop1")
    (base / "dangling").symlink_to("nowhere/at/all")
    (base / "chain").symlink_to("abs")
    names = ["d", "e", "f", "rel", "abs", "up", "back", "loop1", "dangling", "chain", "missing",
             ".", "..", ""]
    realpath = RealPaths()
    checked = 0
    for first in names:
        for second in names:
            for third in ("", "x", "e", ".."):
                path = "/".join(p for p in (str(base), first, second, third) if p is not None)
                for candidate in (path, path + "/", path.replace(str(base), str(base) + "//")):
                    assert realpath(candidate) == os.path.realpath(candidate), candidate
                    checked += 1
    assert realpath("/") == "/" and checked > 500
    assert realpath("relative/path") == os.path.realpath("relative/path")


def _problems_reference(policy: Any) -> list[str]:
    """`SandboxPolicy.problems`' deny-against-grant rule as first written (every pair)."""
    from agentstack.sandbox.policy import is_within

    out: list[str] = []
    for deny in policy.denies:
        for grant in policy.grants:
            if any(is_within(grant.path, inner) for inner in deny.except_paths):
                continue
            if grant.file:
                if grant.path == deny.path or is_within(grant.path, deny.path):
                    out.append(f"{grant.path} file {deny.path}")
            elif is_within(deny.path, grant.path) or is_within(grant.path, deny.path):
                out.append(f"{grant.path} dir {deny.path}")
    return out


_PATHS = st.lists(st.sampled_from(["a", "b", "ab", "c"]), max_size=3).map(
    lambda parts: "/" + "/".join(parts))


@settings(max_examples=300, deadline=None)
@given(grants=st.lists(st.tuples(st.one_of(_PATHS, st.sampled_from(["//a", "/a/", "rel"])),
                                 st.booleans(), st.sampled_from(["ro", "rw"])), max_size=6),
       denies=st.lists(st.tuples(st.one_of(_PATHS, st.sampled_from(["//a", "/", "/a/"])),
                                 st.lists(_PATHS, max_size=1)), max_size=6))
def test_policy_problems_checks_every_conflicting_pair(
    grants: list[tuple[str, bool, str]], denies: list[tuple[str, list[str]]]
) -> None:
    from agentstack.sandbox.policy import Deny, Grant, SandboxPolicy

    policy = SandboxPolicy(
        workdir="/w", home="/h", agentstack_home="/s", harness=None,
        grants=tuple(Grant(path=p, access=a, file=f, source="sandbox.x")  # type: ignore[arg-type]
                     for p, f, a in grants),
        denies=tuple(Deny(path=p, source="credentials", except_paths=tuple(e))
                     for p, e in denies),
    )
    import re

    pair = re.compile(r"grant (\S+) \(sandbox\.x\) (?:opens|contains) (\S+), which")
    found = [m.groups() for m in map(pair.match, [
        line.split(" ", 2)[2] if line.startswith(("read-", "read ")) else line
        for line in policy.problems()]) if m]
    expected = [(ref.split(" ")[0], ref.split(" ")[2]) for ref in _problems_reference(policy)]
    assert found == expected


# ------------------------------------------------------------------ the entry point's fast path


@pytest.mark.parametrize(("argv", "expected"), [
    (["run"], {"harness": None, "interactive": None, "command": None}),
    (["run", "--", "/bin/true"], {"harness": None, "interactive": None,
                                  "command": ["/bin/true"]}),
    (["run", "--harness", "codex", "--no-interactive", "--", "codex", "--", "-x"],
     {"harness": "codex", "interactive": False, "command": ["codex", "--", "-x"]}),
    (["run", "--harness=claude-code", "--interactive"],
     {"harness": "claude-code", "interactive": True, "command": None}),
    (["run", "--"], {"harness": None, "interactive": None, "command": None}),
])
def test_run_fast_arguments_read_what_the_command_table_reads(
    argv: list[str], expected: dict[str, Any]
) -> None:
    from agentstack.cli._app import load
    from agentstack.sandbox.session import fast_arguments

    assert fast_arguments(argv) == expected
    run = load("run")
    assert run is not None
    read = dict(run.make_context("run", argv[1:]).params)
    read["command"] = list(read["command"]) or None  # as the command passes it on
    assert read == expected  # the table reads the same


@pytest.mark.parametrize("argv", [
    ["run", "/bin/true"],                      # a command without --: the table decides
    ["run", "--help"], ["run", "-h"],
    ["run", "--harness"],                      # a missing value: the table's usage error
    ["run", "--harness", "a", "--harness", "b", "--", "x"],
    ["run", "--interactive", "--no-interactive"],
    ["run", "--bogus", "--", "x"],
    ["run", "--harness", "-h", "--", "x"],       # the table: help
    ["run", "--harness", "--interactive", "--", "x"],
    ["--project", "p", "run", "--", "x"],      # global options: the table
    ["status"], [],
])
def test_anything_else_goes_through_the_command_table(argv: list[str]) -> None:
    from agentstack.sandbox.session import fast_arguments

    assert fast_arguments(argv) is None


def test_run_fast_path_refuses_and_passes_statuses_like_the_table(tmp_path: Path) -> None:
    """The same exit codes and messages through the fast path and through the command table
    (`--project` forces the table): untrusted, then trusted with a status and a signal."""
    base = Path(tempfile_dir()) / f"agentstack-test-fast-{os.getpid()}"
    root = make_project(base / "demo", MANIFEST)
    env = {"AGENTSTACK_HOME": str(tmp_path / "state"), "AGENTSTACK_CACHE": str(tmp_path / "cache")}
    try:
        assert run_cli("lock", cwd=root, env=env).returncode == 0
        for command in (["--", "/bin/true"], ["--", "sh", "-c", "exit 7"]):
            fast = run_cli("run", *command, cwd=root, env=env)
            table = run_cli("--project", str(root), "run", *command, cwd=root, env=env)
            assert fast.returncode == table.returncode == 1, (fast, table)
            assert fast.stderr == table.stderr and "trust" in fast.stderr
        assert run_cli("trust", "--yes", "--accept-risk", cwd=root, env=env).returncode == 0
        for command, code in ((["--", "/bin/true"], 0), (["--", "sh", "-c", "exit 7"], 7),
                              (["--", "sh", "-c", "kill -TERM $$"], -15)):
            fast = run_cli("run", *command, cwd=root, env=env)
            table = run_cli("--project", str(root), "run", *command, cwd=root, env=env)
            assert fast.returncode == table.returncode == code, (fast, table)
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


def test_the_run_directory_is_made_private_and_removed_whatever_the_session_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentstack.sandbox import runner

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert runner._temp_root() == str(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "missing"))
    assert runner._temp_root() != str(tmp_path / "missing")
    first = runner._make_private_dir(str(tmp_path), layout.RUN_DIR_PREFIX)
    second = runner._make_private_dir(str(tmp_path), layout.RUN_DIR_PREFIX)
    assert first != second and stat.S_IMODE(os.stat(first).st_mode) == 0o700
    # What agentstack wrote (a read-only directory, mode 0500) and an empty TMPDIR: removed.
    os.mkdir(os.path.join(first, "tmp"), 0o700)
    runner._write_readonly(first, {"trust.head": b"x", "guard.json": b"{}"})
    runner._remove_run_dir(first)
    assert not os.path.lexists(first)
    # A TMPDIR the session filled, with a link out of it: removed, the link's target kept.
    outside = tmp_path / "keep"
    outside.mkdir()
    (outside / "file").write_text("kept")
    os.mkdir(os.path.join(second, "tmp"), 0o700)
    os.makedirs(os.path.join(second, "tmp", "a", "b"))
    os.symlink(outside, os.path.join(second, "tmp", "a", "out"))
    runner._write_readonly(second, {"trust.head": b"x"})
    runner._remove_run_dir(second)
    assert not os.path.lexists(second) and (outside / "file").read_text() == "kept"


def test_the_run_directorys_removal_never_follows_a_link_the_session_planted(
    tmp_path: Path,
) -> None:
    """With write access to the run directory a session could put a link where `ro` was; the
    removal must not chmod or empty what it points at."""
    from agentstack.sandbox import runner

    victim = tmp_path / "victim"
    victim.mkdir(mode=0o755)
    (victim / "id_ed25519").write_text("key")
    run_dir = runner._make_private_dir(str(tmp_path), layout.RUN_DIR_PREFIX)
    os.mkdir(os.path.join(run_dir, "tmp"))
    runner._write_readonly(run_dir, {"trust.head": b"x"})
    os.chmod(os.path.join(run_dir, layout.RUN_READONLY), 0o700)
    os.rename(os.path.join(run_dir, layout.RUN_READONLY), os.path.join(run_dir, "old"))
    os.symlink(victim, os.path.join(run_dir, layout.RUN_READONLY))
    runner._remove_run_dir(run_dir)
    assert not os.path.lexists(run_dir)
    assert (victim / "id_ed25519").read_text() == "key"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o755


def test_the_run_directory_goes_where_the_policy_grants_no_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentstack.sandbox import runner
    from agentstack.sandbox.policy import Grant, SandboxPolicy
    from agentstack.sandbox.resolve import ConfinementError

    def policy(*writable: Path) -> SandboxPolicy:
        return SandboxPolicy(
            workdir=str(tmp_path), home=str(tmp_path / "home"),
            agentstack_home=str(tmp_path / "state"), harness=None, denies=(),
            grants=tuple(Grant(path=str(w), access="rw", source="test") for w in writable),
        )

    granted, free = tmp_path / "granted", tmp_path / "free"
    granted.mkdir()
    free.mkdir()
    monkeypatch.setenv("TMPDIR", str(granted))
    assert runner._temp_root() == str(granted)
    assert runner._temp_root(policy()) == str(granted)
    chosen = runner._temp_root(policy(granted))
    assert chosen != str(granted)
    with pytest.raises(ConfinementError, match="writable under the sandbox policy"):
        runner._temp_root(policy(Path("/")))  # every path writable


def test_an_inherited_ignored_sigchld_does_not_hide_the_commands_status(tmp_path: Path) -> None:
    """`run` started with SIGCHLD ignored (an odd parent) still passes the command's status on."""
    root = make_project(Path(tempfile_dir()) / f"agentstack-test-chld-{os.getpid()}" / "demo",
                        MANIFEST)
    env = {"AGENTSTACK_HOME": str(tmp_path / "state"), "AGENTSTACK_CACHE": str(tmp_path / "cache")}
    try:
        assert run_cli("lock", cwd=root, env=env).returncode == 0
        assert run_cli("trust", "--yes", "--accept-risk", cwd=root, env=env).returncode == 0
        full = dict(os.environ, PYTHONPATH=str(REPO), **env)
        probe = ("import signal, sys; signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
                 "sys.argv = ['agentstack', 'run', '--', 'sh', '-c', 'exit 7']\n"
                 "from agentstack.entry import main; main()\n")
        done = subprocess.run([sys.executable, "-c", probe], cwd=root, env=full,
                              capture_output=True, text=True, timeout=scaled(120))
        assert done.returncode == 7, done.stderr
    finally:
        import shutil

        shutil.rmtree(root.parent, ignore_errors=True)

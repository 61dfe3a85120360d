"""Landlock ABI 4-5 without a PID namespace: `run` refuses, naming signal scoping.

Below ABI 6 the launcher makes a PID namespace to stand in for Landlock's signal scoping
(`agentstack/sandbox/abi.py`); where none can be made, `run` must refuse rather than run a harness
that can signal every process of its uid. The kernel's refusal here is real: the command runs in
a user namespace of its own (its uid mapped to itself) whose limit of further user namespaces is
0 (`/proc/sys/user/max_user_namespaces`, per user namespace), with every capability dropped, so
`unshare(CLONE_NEWPID)` fails with EPERM (no CAP_SYS_ADMIN) and `unshare(CLONE_NEWUSER |
CLONE_NEWPID)` with ENOSPC: what a machine that refuses unprivileged user namespaces answers.
The only thing substituted is the Landlock ABI number `run` reads from the kernel (this kernel's
is 6 or more and cannot be lowered; `doctor --verify --landlock-abi N` emulates an older ABI's
rights, but `run` itself reads the kernel's). The controls: in the same environment `run` at the
kernel's own ABI runs, and at ABI 5 where a namespace can be made it runs in one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import make_project, run_cli_in_process
from tests.harness.deadline import scaled
from tests.support.cli import REPO
from tests.support.project import manifest

# Run in the child before agentstack is imported: the environment without PID namespaces (where
# this process may make a user namespace; where it may not, it is already in one: checked below).
NO_NAMESPACES = r"""
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
uid, gid = os.geteuid(), os.getegid()
if libc.unshare(0x10000000) == 0:  # CLONE_NEWUSER
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)
    with open("/proc/sys/user/max_user_namespaces", "w") as handle:
        handle.write("0")
class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]
if libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()) != 0:  # every capability
    raise SystemExit("capset: " + os.strerror(ctypes.get_errno()))
answers = []
for flags in (0x20000000, 0x10000000 | 0x20000000):  # CLONE_NEWPID; with CLONE_NEWUSER
    pid = os.fork()
    if pid == 0:
        os._exit(0 if libc.unshare(flags) == 0 else ctypes.get_errno())
    answers.append(errno.errorcode.get(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), "ok"))
print("unshare=" + ",".join(answers), flush=True)
"""

RUN = r"""
sys.path.insert(0, {repo!r})
from agentstack.sandbox import confine, runner
print(f"pidns={{confine.can_make_pid_namespace()}}", flush=True)
if {abi!r} is not None:
    runner.abi_number = lambda abi: {abi!r}  # the kernel's answer, as a kernel of that ABI gives it
sys.argv = ["agentstack", "run", "--", "/bin/sh", "-c", "echo ran pid=$$"]
from agentstack.entry import main
main()
"""


@pytest.fixture
def trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    for name, value in {"HOME": home, "AGENTSTACK_HOME": home / ".config" / "agentstack",
                        "AGENTSTACK_CACHE": home / ".cache" / "agentstack",
                        "XDG_CONFIG_HOME": home / ".config",
                        "GIT_CONFIG_GLOBAL": home / ".gitconfig"}.items():
        monkeypatch.setenv(name, str(value))
    root = make_project(tmp_path / "proj", manifest("pidns", "claude-code")
                        .sandbox(write_dirs=["."]))
    assert run_cli_in_process("lock", cwd=root).returncode == 0
    assert run_cli_in_process("trust", "--yes", "--accept-risk", cwd=root).returncode == 0
    return root


def _run(root: Path, abi: int | None, *, namespaces: bool) -> subprocess.CompletedProcess[str]:
    script = ("import sys\n" if namespaces else NO_NAMESPACES) + RUN.format(repo=str(REPO),
                                                                             abi=abi)
    return subprocess.run([sys.executable, "-I", "-c", script], cwd=root, env=dict(os.environ),
                          capture_output=True, text=True, timeout=scaled(120), check=False)


@pytest.mark.parametrize("abi", [4, 5])
def test_run_refuses_abi_4_and_5_where_no_pid_namespace_can_be_made(trusted: Path,
                                                                    abi: int) -> None:
    done = _run(trusted, abi, namespaces=False)
    answers = next(line for line in done.stdout.splitlines() if line.startswith("unshare="))
    assert "ok" not in answers.split("=")[1].split(","), done  # the kernel refuses both ways
    assert "pidns=False" in done.stdout, done
    assert done.returncode == 1, done
    assert "lacks signal scoping" in done.stderr and "PID namespace" in done.stderr, done.stderr
    assert "user namespaces" in done.stderr, done.stderr  # the hint names what would make one
    assert "ran" not in done.stdout  # nothing started


def test_the_same_environment_runs_at_the_kernels_abi(trusted: Path) -> None:
    """The control: no PID namespace is needed at ABI 6 and more, and `run` runs there."""
    done = _run(trusted, None, namespaces=False)
    assert "pidns=False" in done.stdout and done.returncode == 0, done
    assert "ran pid=" in done.stdout, done


def test_abi_5_runs_in_a_pid_namespace_where_one_can_be_made(trusted: Path) -> None:
    """The other control: the same `run` at ABI 5 where the launcher can make the namespace runs
    the command in it (its pid is 2: the namespace's init is 1)."""
    from agentstack.sandbox import runner

    if not runner.pid_namespace_available():
        pytest.skip("no PID namespace can be made for this test process itself")
    done = _run(trusted, 5, namespaces=True)
    assert "pidns=True" in done.stdout and done.returncode == 0, done
    assert "ran pid=2" in done.stdout, done


SUITE = r"""
import json
sys.path.insert(0, {repo!r})
from agentstack.sandbox import verify
rows = tuple(r for r in verify.ROWS if r.name == "kill")
for version in (4, 5):
    print(json.dumps([r.to_json() for r in verify.run_suite(rows, modes=("direct",),
                                                             landlock_abi=version)]))
"""


def test_the_suites_kill_row_is_refused_there_never_passed() -> None:
    """`doctor --verify --landlock-abi 4|5` in the same environment: the row a PID namespace
    would cover (a signal to a process outside) is reported refused, not run and not passed."""
    import json

    done = subprocess.run([sys.executable, "-I", "-c", NO_NAMESPACES + SUITE.format(
        repo=str(REPO))], capture_output=True, text=True, timeout=scaled(120), check=False)
    assert done.returncode == 0, done
    lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
    results = [row for line in lines for row in json.loads(line)]
    assert len(results) == 2, done
    for row in results:
        assert row["row"] == "kill" and row["refused"] and not row["passed"], row
        assert "refused at Landlock ABI" in row["detail"] and "signal scoping" in row["detail"], row

"""A full disk, a read-only file system: every state write refuses cleanly (exit 1), says what is
recorded and what is not, and leaves nothing half-written.

The attack: a confined harness fills the file system that holds the user's state. Its workdir is
writable and so is its private harness state, which lives under `$AGENTSTACK_HOME` (so that file
system is always reachable from inside `run`). Each scenario runs in a private mount namespace
(`unshare -rm`) on a small tmpfs, so nothing outside fills up.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.harness.deadline import scaled
from tests.support.project import manifest

pytestmark = pytest.mark.skipif(
    shutil.which("unshare") is None or not sys.platform.startswith("linux"),
    reason="needs unshare(1) and Linux mount namespaces",
)

MANIFEST = str(manifest("demo", "claude-code").sandbox(write_dirs=["."]).instructions("AGENTS.base.md"))

PRELUDE = r"""
import json, os, subprocess, sys
from pathlib import Path

def sh(*argv):
    subprocess.run(argv, check=True)

def cli(*args, cwd, input="sk-value"):
    env = dict(os.environ, PYTHONPATH=REPO)
    done = subprocess.run([sys.executable, "-m", "agentstack", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=CLI_TIMEOUT, input=input)
    return {"code": done.returncode, "out": done.stdout, "err": done.stderr}

def setenv(home, state):
    os.environ.update(HOME=str(home), AGENTSTACK_HOME=str(state),
                      AGENTSTACK_CACHE=str(state / "cache"),
                      XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"),
                      GIT_CONFIG_GLOBAL=str(home / ".gitconfig"), GIT_CONFIG_NOSYSTEM="1")
    os.environ.pop("AGENTSTACK_TRUSTED_DIGESTS", None)

def project(home):
    root = home / "demo"
    root.mkdir()
    (root / "agentstack.toml").write_text(MANIFEST)
    (root / "AGENTS.base.md").write_text("Be kind.\n")
    for step in (("lock",), ("trust", "--yes", "--accept-risk"), ("apply", "--write")):
        done = cli(*step, cwd=root)
        assert done["code"] == 0, (step, done)
    return root

def claude_projects(home):
    path = home / ".claude.json"
    return json.loads(path.read_text()).get("projects", {}) if path.exists() else {}

out = {}
"""


def _in_namespace(base: Path, body: str) -> dict[str, object]:
    script = (
        f"REPO = {str(REPO)!r}\nMANIFEST = {MANIFEST!r}\nCLI_TIMEOUT = {scaled(120)!r}\n"
        + PRELUDE
        + f"BASE = Path({str(base)!r})\n"
        + textwrap.dedent(body)
        + "\nprint(json.dumps(out))\n"
    )
    done = subprocess.run(
        ["unshare", "-rm", "--propagation", "private", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=scaled(600),
    )
    if done.returncode != 0 and "unshare failed" in done.stderr:
        pytest.skip(f"no mount namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_the_sandbox_fills_the_disk_then_revoke_refuses_cleanly(tmp_path: Path) -> None:
    """The project and $AGENTSTACK_HOME on one small file system; a confined process fills it
    from its workdir; `revoke` must then refuse with exit 1, record nothing half-way, and work
    once there is room again."""
    out = _in_namespace(
        tmp_path,
        """
        home = BASE / "home"
        home.mkdir()
        sh("mount", "-t", "tmpfs", "-o", "size=16m,mode=0755", "tmpfs", str(home))
        state = home / ".config" / "agentstack"
        setenv(home, state)
        root = project(home)
        digest = cli("digest", cwd=root)["out"].strip()
        before = (state / "trust.jsonl").read_bytes()
        # The confined process fills the file system from inside `run` (its workdir).
        out["fill"] = cli("run", "--", "/bin/sh", "-c",
                          "cat /dev/zero > fill; dd if=/dev/zero of=fill2 bs=1 count=65536; "
                          "exit 0", cwd=root)
        out["statvfs_free"] = os.statvfs(home).f_bavail
        # (Under --harness, its private state under $AGENTSTACK_HOME is writable as well.)
        out["revoke"] = cli("revoke", cwd=root)
        out["log_unchanged"] = (state / "trust.jsonl").read_bytes() == before
        out["verify"] = cli("trust", "log", "--verify", cwd=root)
        out["status"] = cli("status", "--json", cwd=root)
        out["temps"] = sorted(p.name for p in state.iterdir() if p.name.startswith("."))
        # Other commands that write state, on the same full disk: never a crash.
        out["others"] = {
            " ".join(args): cli(*args, cwd=root)
            for args in (("run", "--", "/bin/true"), ("apply", "--write"), ("lock", "--update"),
                         ("secret", "set", "k"))
        }
        (root / "fill").unlink()
        (root / "fill2").unlink()
        out["revoke_again"] = cli("revoke", cwd=root)
        out["trusted_after"] = json.loads(cli("trust", "list", "--json", cwd=root)["out"])
        out["entries_after"] = str(root.resolve()) in claude_projects(home)
        out["digest"] = digest
    """,
    )
    assert out["fill"]["code"] == 0, out["fill"]  # type: ignore[index]
    assert out["statvfs_free"] == 0
    revoke = out["revoke"]
    assert revoke["code"] == 1, revoke  # type: ignore[index]
    err = revoke["err"]  # type: ignore[index]
    assert "internal error" not in err and "the disk is full" in err, err
    assert "nothing was recorded" in err and "df -h" in err, err
    assert out["log_unchanged"] is True
    assert out["verify"]["code"] == 0, out["verify"]  # type: ignore[index]
    assert out["temps"] == []
    for command, done in out["others"].items():  # type: ignore[attr-defined]
        assert done["code"] in (0, 1), (command, done)
        assert "internal error" not in done["err"], (command, done)
    assert json.loads(out["status"]["out"])["trust"] == "trusted"  # type: ignore[index]
    again = out["revoke_again"]
    assert again["code"] == 0, again  # type: ignore[index]
    assert out["trusted_after"]["trusted"] == []  # type: ignore[index]
    assert out["entries_after"] is False


@pytest.mark.slow
def test_revoke_recorded_but_harness_entries_not_removed_says_so(tmp_path: Path) -> None:
    """$AGENTSTACK_HOME writable, the user's home read-only (EROFS): the revocation is recorded,
    the harness-side entries cannot be removed; the refusal names both and `revoke` again
    finishes the job once the file system is writable."""
    out = _in_namespace(
        tmp_path,
        """
        home = BASE / "home"
        home.mkdir()
        sh("mount", "-t", "tmpfs", "-o", "size=16m,mode=0755", "tmpfs", str(home))
        state = home / "state"
        state.mkdir()
        sh("mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(state))
        setenv(home, state)
        root = project(home)
        out["entries_before"] = str(root.resolve()) in claude_projects(home)
        sh("mount", "-o", "remount,ro", str(home))
        out["revoke"] = cli("revoke", cwd=root)
        out["status"] = cli("status", "--json", cwd=root)
        out["verify"] = cli("trust", "log", "--verify", cwd=root)
        out["entries_kept"] = str(root.resolve()) in claude_projects(home)
        sh("mount", "-o", "remount,rw", str(home))
        out["revoke_again"] = cli("revoke", cwd=root)
        out["entries_after"] = str(root.resolve()) in claude_projects(home)
    """,
    )
    assert out["entries_before"] is True
    revoke = out["revoke"]
    assert revoke["code"] == 1, revoke  # type: ignore[index]
    err = revoke["err"]  # type: ignore[index]
    assert "internal error" not in err and "read-only" in err, err
    assert "already recorded (kept): trust log record" in err and "(revoke b3:" in err, err
    assert "harness-side trust entries" in err and ".claude.json" in err, err
    assert "agentstack revoke' again" in err, err
    assert json.loads(out["status"]["out"])["trust"] == "revoked"  # type: ignore[index]
    assert out["verify"]["code"] == 0
    assert out["entries_kept"] is True
    again = out["revoke_again"]
    assert again["code"] == 0 and "removed agentstack's harness-side" in again["err"], again  # type: ignore[index]
    assert out["entries_after"] is False


def test_storage_error_is_a_refusal_and_an_oserror() -> None:
    import errno

    from agentstack.errors import EXIT_REFUSED, AgentstackError
    from agentstack.storage import StorageError, storage_error

    exc = storage_error(OSError(errno.EDQUOT, "quota"), "/x/y", "writing y")
    assert isinstance(exc, StorageError) and isinstance(exc, OSError)
    assert isinstance(exc, AgentstackError) and exc.exit_code == EXIT_REFUSED
    assert exc.errno == errno.EDQUOT and "quota" in exc.message
    other = OSError(errno.EACCES, "denied")
    assert storage_error(other, "/x", "y") is other
    assert os.strerror(errno.EROFS) in str(storage_error(OSError(errno.EROFS, "ro"), "/x", "y"))


def test_a_storage_oserror_nobody_converted_becomes_a_refusal() -> None:
    import errno

    from agentstack.storage import StorageError, as_refusal

    raw = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/state/x")
    refusal = as_refusal(raw)
    assert isinstance(refusal, StorageError) and refusal.exit_code == 1
    assert "/state/x" in refusal.message
    assert as_refusal(OSError(errno.EACCES, "denied")) is None
    assert as_refusal(ValueError("x")) is None


def test_a_storage_error_no_writer_named_is_a_refusal_not_a_crash(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The last line of defence: an OSError for a full disk that no writer turned into a
    StorageError (a bare mkdir, say) exits 1 with the storage message, never 3 with a report."""
    import errno

    from agentstack.entry import outcome

    def full() -> int:
        raise OSError(errno.ENOSPC, "No space left on device", "/state/projects/x")

    def bug() -> int:
        raise OSError(errno.EBADF, "Bad file descriptor")

    assert outcome(full) == 1
    err = capsys.readouterr().err
    assert "error:" in err and "/state/projects/x" in err and "internal error" not in err
    assert outcome(bug) == 3  # any other OSError is still a bug, reported as one
    assert "internal error" in capsys.readouterr().err

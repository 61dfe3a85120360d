"""The relay's kept confinement (`mcp-pins/<server>.box`): used only for the very key it was
resolved for, and dropped when the kernel refuses it. The server is the real notes server,
started through the rendered launcher (forked and confined in-process)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from agentstack import layout
from tests.conftest import run_cli_in_process
from tests.harness.deadline import scaled
from tests.sandbox.test_relay import Session, rendered_command, trusted_project


def _box(root: Path) -> Path:
    return Path(layout.box_file(os.environ["AGENTSTACK_HOME"], str(root), "notes"))


def _lists_tools(root: Path) -> tuple[bool, str]:
    session = Session(rendered_command(root))
    session.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "test", "version": "0"}}})
    assert session.proc.stdout is not None
    answered = bool(session.proc.stdout.readline())
    return answered, session.close()


def _break_grants(box: Path) -> dict[str, object]:
    """The kept confinement with only /usr readable: the server's interpreter cannot start."""
    kept = json.loads(box.read_text())
    kept["confinement"]["grants"] = [{"path": "/usr", "access": "ro", "file": False}]
    box.write_text(json.dumps(kept))
    return kept


def test_a_kept_confinement_is_used_for_its_key_and_dropped_when_refused(tmp_path: Path) -> None:
    root = trusted_project(tmp_path)
    assert _lists_tools(root)[0]
    box = _box(root)
    assert box.exists() and box.stat().st_mode & 0o077 == 0
    _break_grants(box)
    # The same key: the kept confinement is used (so the server cannot start), then dropped.
    answered, stderr = _lists_tools(root)
    assert not answered and "not started" in stderr
    assert not box.exists()
    assert _lists_tools(root)[0]  # resolved again
    assert box.exists()


def test_a_kept_confinement_of_another_key_is_not_used(tmp_path: Path) -> None:
    root = trusted_project(tmp_path)
    assert _lists_tools(root)[0]
    box = _box(root)
    kept = _break_grants(box)
    kept["key"][0] = "b3:" + "0" * 64  # type: ignore[index]  # another digest
    box.write_text(json.dumps(kept))
    answered, stderr = _lists_tools(root)
    assert answered, stderr
    assert json.loads(box.read_text())["key"][0] != "b3:" + "0" * 64


def _snapshot_head(root: Path) -> object:
    from agentstack import _guard

    state = os.environ["AGENTSTACK_HOME"]
    data = Path(layout.guard_snapshot(state, str(root))).read_bytes()
    return _guard.snapshot_header(data, "guard.json").get("trust_head")


def test_a_revoked_trust_starts_nothing_though_the_child_was_forked_early(tmp_path: Path) -> None:
    """With a kept confinement the relay forks the server's child before it checks the trust
    (relaystart.py): revoked, that child is stopped having run nothing, and the relay says why."""
    root = trusted_project(tmp_path)
    assert _lists_tools(root)[0]
    assert _box(root).exists()  # so the next start forks its child early
    assert run_cli_in_process("revoke", cwd=root).returncode == 0
    marker = root / "started"
    argv, extra = rendered_command(root)
    session = Session((argv, {**extra, "NOTES_TOKEN_FILE": str(marker)}))
    session.send({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    assert session.proc.stdout is not None and session.proc.stdout.read() == b""
    stderr = session.close()
    assert session.proc.returncode == 1
    assert "notes: not started:" in stderr and "is not trusted for this project now" in stderr
    assert not marker.exists()  # the server never ran
    # The control: trusted again, the same command line starts the server (it writes the marker).
    assert run_cli_in_process("trust", "--yes", "--accept-risk", cwd=root).returncode == 0
    assert run_cli_in_process("apply", "--write", cwd=root).returncode == 0
    session = Session((argv, {**extra, "NOTES_TOKEN_FILE": str(marker)}))
    session.start()
    session.close()
    assert marker.read_text() == "<unset>"


def test_a_trust_log_moved_on_is_verified_and_its_head_recorded(tmp_path: Path) -> None:
    """Another project's `trust` moves the log on: the relay's quick start does not verify a log
    (that needs blake3), so the full path does, and records the head in the snapshot as the guard
    does; the next start proves the trust by the head alone."""
    from agentstack import _guard

    root = trusted_project(tmp_path / "a")
    assert _lists_tools(root)[0]
    trusted_project(tmp_path / "b")
    state = os.environ["AGENTSTACK_HOME"]
    assert _snapshot_head(root) != _guard._log_head(state)
    assert _lists_tools(root)[0]
    assert _snapshot_head(root) == _guard._log_head(state)
    assert _lists_tools(root)[0]


def test_the_head_start_reads_nonos_path_only_from_a_plain_kept_confinement() -> None:
    from agentstack import serverbox
    from agentstack.relay import canonical

    so = "/opt/venv/site-packages/nono_py/_nono_py.cpython-311-x86_64-linux-gnu.so"
    kept = canonical({"key": [], "confinement": {"grants": [], "nono": so}}).encode()
    assert serverbox._nono_path(kept) == so
    for bad in (b"", b'{"nono":"relative.so"}', b'{"nono":"/a\\"b.so"}', b'{"nono":"/a/b.py"}',
                b'{"nono":"/a/b.so', b'{"nono": "/a/b.so"}'):
        assert serverbox._nono_path(bad) is None, bad


_PATHS = ["/", "/opt-as", "/opt-as/a", "/opt-as/a/b", "/opt-as/a/b/c", "/opt-as/d", "/srv-as"]


def _allowed(grants: list[dict[str, object]], path: str, file: bool) -> set[str]:
    """What Landlock grants on `path`: the union of the rules on it and every directory above."""
    out: set[str] = set()
    for grant in grants:
        where = str(grant["path"])
        if where == path or (not grant["file"] and path.startswith(where.rstrip("/") + "/")):
            rights = {"read", "write"} if grant["access"] == "rw" else {"read"}
            if grant["file"] or file:
                rights = {f"file-{r}" for r in rights}
            else:
                rights |= {f"file-{r}" for r in rights}
            out |= rights
    return out


@given(st.lists(st.fixed_dictionaries({"path": st.sampled_from(_PATHS),
                                       "access": st.sampled_from(["ro", "rw"]),
                                       "file": st.booleans()}), max_size=12))
def test_merged_grants_allow_and_deny_exactly_what_the_grants_did(
        grants: list[dict[str, object]]) -> None:
    """Fewer Landlock rules for the same access: on every path (as a directory and as a file),
    the rights the merged rules give are the rights the original rules gave."""
    from agentstack.serverbox import merged_grants

    # A path is either a file or a directory: keep the first kind each path is granted as.
    kind: dict[object, object] = {}
    grants = [g for g in grants if kind.setdefault(g["path"], g["file"]) == g["file"]]
    merged = merged_grants([dict(g) for g in grants])
    assert len(merged) <= len(grants)
    assert len({(g["path"], g["file"]) for g in merged}) == len(merged)  # one rule per path
    for path in [*_PATHS, "/opt-as/a/b/c/e", "/srv-as/x"]:
        for file in (False, True):
            assert _allowed(merged, path, file) == _allowed(grants, path, file), path


def test_the_servers_child_loads_no_ctypes_package() -> None:
    """The forked child confines itself through `_ctypes` alone: the `ctypes` package (about
    5 ms of start-up) is loaded only by the emulation of older Landlock ABIs."""
    import subprocess
    import sys

    probe = ("import sys\n"
             f"sys.path.append({os.path.dirname(os.path.dirname(os.path.abspath(layout.__file__)))!r})\n"
             "from agentstack.sandbox import confine\n"
             "libc = confine._libc()\n"
             "assert libc.getpid() == __import__('os').getpid()\n"
             "print(' '.join(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", probe], capture_output=True,
                          text=True, timeout=scaled(60), check=True)
    loaded = set(done.stdout.split())
    assert "_ctypes" in loaded
    assert not loaded & {"ctypes", "struct", "types", "json", "re"}, sorted(loaded)

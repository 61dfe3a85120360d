"""The relay's kept confinement (`mcp-pins/<server>.box`): used only for the very key it was
resolved for, and dropped when the kernel refuses it. The server is the real notes server,
started through the rendered launcher (forked and confined in-process)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from agentstack import layout
from tests.conftest import run_cli_in_process
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

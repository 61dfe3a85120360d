"""Code roots several commands share, pinned once (issue 32), and arguments that cannot be paths.

- S servers whose scripts share `servers/` pin that tree once (`[code_roots."servers"]`), each
  server's root entry naming it by path and tree digest: the lock and the consent document grow
  with S, not S²; the consent digest still covers every file each server can run;
- a byte changed in the shared tree is a change (and a high finding) for every server loading it,
  `lock --check` says stale, the guard denies until the change is reviewed;
- a lock written before the table existed is read: its inline roots are a stale lock with the
  hint to run `agentstack lock`, never a crash; a table that does not match is refused clearly;
- an argument that cannot be a path (too long for the kernel, NUL, anything lstat refuses) is no
  code root and never an internal error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentstack.consent.diff import consent_diff
from agentstack.consent.document import consent_digest, consent_document
from agentstack.errors import ManifestInvalid
from agentstack.lock.resolve import dumps_lock, parse_lock, resolver_for
from agentstack.manifest.load import load_manifest
from tests.conftest import make_project
from tests.support.cli import run_cli_in_process as run_cli

HEAD = '[project]\nname = "p"\nharnesses = ["claude-code"]\n\n'
S = 4


def servers_body(count: int = S) -> str:
    return "".join(
        f'[servers.s{i}]\ncommand = "python3"\nargs = ["servers/s{i}.py"]\n\n' for i in range(count)
    )


def shared_project(tmp_path: Path, count: int = S, extra: str = "") -> Path:
    files = {f"servers/s{i}.py": f"import util\nprint({i})\n" for i in range(count)}
    files["servers/util.py"] = "X = 1\n"
    return make_project(tmp_path / "p", HEAD + servers_body(count) + extra, files).resolve()


def resolve(root: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    manifest = load_manifest(root)
    lock = resolver_for(root, None).resolve(manifest)
    document = consent_document(manifest, lock)
    return lock, document, consent_digest(document)


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01
    path.write_bytes(bytes(data))


# ---------------------------------------------------------------- arguments that are not paths


def test_a_very_long_python_c_argument_locks(tmp_path: Path) -> None:
    """The found bug: `python -c '<5,000 characters>'` made `lock` an internal error (the
    argument was probed as a path: ENAMETOOLONG)."""
    code = "print(1)\n" + "x = 1  # " + "a" * 5000
    root = make_project(
        tmp_path / "p",
        HEAD + f'[servers.s]\ncommand = "python3"\nargs = ["-c", {json.dumps(code)}]\n',
    )
    result = run_cli("lock", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    lock = parse_lock((root / "agentstack.lock").read_bytes())
    assert lock["servers"]["s"]["files"] == []


@pytest.mark.parametrize(
    "arg",
    ["a" * 300, "d/" * 3000 + "x", "servers/" + "b" * 256 + ".py", "x\0y", "/" + "c" * 5000],
)
def test_an_argument_the_kernel_refuses_as_a_path_is_no_code_root(
    tmp_path: Path, arg: str
) -> None:
    from agentstack.lock.coderoots import analyse

    root = make_project(tmp_path / "p", HEAD, {"servers/a.py": "1\n"})
    resolver = resolver_for(root, None)
    for program in ("python3", "node", "sh", "ruby", "npm", "mytool", "./servers/a.py"):
        argv = [program, arg, "servers/a.py"]
        found = analyse(root, argv, ".", {"PYTHONPATH": arg, "LD_PRELOAD": arg})
        assert all(r.path in ("servers",) for r in found.roots), found.roots
        files = resolver._referenced_files(argv, None, lambda i: f"servers.s.args[{i}]")
        assert [f["path"] for f in files] == ["servers/a.py"]
    assert resolver.problems == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    args=st.lists(
        st.one_of(
            st.text(max_size=40),
            st.text(alphabet="ab/.", min_size=250, max_size=6000),
            st.sampled_from(["-c", "-m", "servers/a.py", "servers", "..", "/", "-"]),
        ),
        max_size=4,
    ),
    program=st.sampled_from(["python3", "node", "sh", "bash", "npx", "env", "mytool", "ruby"]),
)
def test_no_argument_string_is_an_internal_error(
    tmp_path: Path, program: str, args: list[str]
) -> None:
    """Whatever the arguments, `lock` resolves them or reports a problem: never an exception
    other than the manifest's problems."""
    root = tmp_path / "p"
    if not root.exists():
        make_project(root, HEAD, {"servers/a.py": "print(1)\n"})
    lines = HEAD + f'[servers.s]\ncommand = "{program}"\nargs = {json.dumps(args)}\n'
    try:
        (root / "agentstack.toml").write_text(lines)
        manifest = load_manifest(root)
    except (ManifestInvalid, UnicodeEncodeError, ValueError):
        return  # not a manifest (a NUL, a surrogate): refused before anything is probed
    try:
        lock = resolver_for(root, None).resolve(manifest)
    except ManifestInvalid:
        return
    parse_lock(dumps_lock(lock).encode("utf-8"))


# ----------------------------------------------------------------------- shared code roots


def test_servers_sharing_a_directory_pin_it_once(tmp_path: Path) -> None:
    root = shared_project(tmp_path)
    lock, document, _ = resolve(root)
    (shared,) = lock["code_roots"].values()
    assert shared["path"] == "servers" and len(shared["files"]) == S + 1
    for i in range(S):
        (entry,) = lock["servers"][f"s{i}"]["roots"]
        assert "files" not in entry
        assert (entry["path"], entry["digest"]) == ("servers", shared["digest"])
        assert entry["origin"] == f"directory of servers/s{i}.py"
    text = dumps_lock(lock)
    assert text.count("path = \"util.py\"") == 1  # the shared tree's files once
    assert parse_lock(text.encode("utf-8")) == lock
    assert document["code_roots"] == lock["code_roots"]


def test_the_lock_grows_with_the_servers_not_their_square(tmp_path: Path) -> None:
    sizes = {}
    for count in (10, 40):
        root = shared_project(tmp_path / str(count), count)
        lock, _, _ = resolve(root)
        sizes[count] = len(dumps_lock(lock))
    assert sizes[40] < 5 * sizes[10]  # S²: 16x


def test_a_root_only_one_command_loads_stays_inline(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        HEAD + '[servers.a]\ncommand = "python3"\nargs = ["one/a.py"]\n\n'
        '[servers.b]\ncommand = "python3"\nargs = ["two/b.py"]\n',
        {"one/a.py": "1\n", "two/b.py": "2\n"},
    )
    lock, document, _ = resolve(root)
    assert "code_roots" not in lock and "code_roots" not in document
    assert [len(r["files"]) for r in lock["servers"]["a"]["roots"]] == [1]


def test_a_server_and_a_hook_share_a_root(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        HEAD + '[servers.a]\ncommand = "python3"\nargs = ["tools/a.py"]\n\n'
        '[hooks.h]\nevent = "Stop"\ncommand = ["python3", "tools/h.py"]\n',
        {"tools/a.py": "1\n", "tools/h.py": "2\n"},
    )
    lock, _, _ = resolve(root)
    assert list(lock["code_roots"]) == ["tools"]
    assert "files" not in lock["hooks"]["h"]["roots"][0]


def test_a_byte_in_the_shared_root_moves_the_digest_for_every_server(tmp_path: Path) -> None:
    root = shared_project(tmp_path)
    _, before, digest = resolve(root)
    flip(root / "servers/util.py")
    _, after, moved = resolve(root)
    assert moved != digest
    diff = consent_diff(before, after)
    paths = {c.path for c in diff.changes}
    for i in range(S):
        assert f"servers.s{i}.roots[servers/util.py]" in paths
    changed = {f.item for f in diff.findings if f.code == "changed-executable"}
    assert changed == {f"servers.s{i}" for i in range(S)}
    assert not any(c.path.startswith("code_roots") for c in diff.changes)
    # Nothing changed: no change at all (and no file of the shared root compared per server).
    assert consent_diff(after, after).changes == []


def test_the_document_without_the_shared_files_is_not_the_same_consent(tmp_path: Path) -> None:
    root = shared_project(tmp_path)
    _, document, digest = resolve(root)
    forged = json.loads(json.dumps(document))
    forged["code_roots"]["servers"]["files"][0]["digest"] = "b3:" + "0" * 64
    assert consent_digest(forged) != digest


def test_lock_trust_apply_status_and_a_changed_shared_file(tmp_path: Path) -> None:
    from tests.guard.test_guard import assert_allowed, assert_denied, event, guard

    root = shared_project(tmp_path)
    for args in (["lock"], ["trust", "--yes", "--accept-risk"], ["apply", "--write"]):
        result = run_cli(*args, cwd=root)
        assert result.returncode == 0, result.stdout + result.stderr
    assert run_cli("status", cwd=root).returncode == 0
    assert run_cli("lock", "--check", cwd=root).returncode == 0
    assert_allowed(guard("claude-code", event(root)))
    flip(root / "servers/util.py")
    assert run_cli("lock", "--check", cwd=root).returncode == 1
    assert run_cli("status", cwd=root).returncode == 1
    assert_denied(guard("claude-code", event(root)), reason="servers/util.py")
    assert run_cli("lock", cwd=root).returncode == 0
    review = run_cli("trust", "--yes", cwd=root, env={"COLUMNS": "400"})
    out = review.stdout + review.stderr
    assert review.returncode == 1, out  # a high finding needs acceptance
    for i in range(S):
        assert f"servers.s{i}" in out
    assert "changed: servers/util.py" in out
    assert run_cli("trust", "--yes", "--accept-risk", cwd=root).returncode == 0
    assert run_cli("apply", "--write", cwd=root).returncode == 0
    assert run_cli("status", cwd=root).returncode == 0
    assert_allowed(guard("claude-code", event(root)))


def test_the_guard_denies_a_file_added_to_the_shared_root(tmp_path: Path) -> None:
    from tests.guard.test_guard import assert_allowed, event, guard
    from tests.surface.test_surface import guard_denies

    root = shared_project(tmp_path)
    for args in (["lock"], ["trust", "--yes", "--accept-risk"], ["apply", "--write"]):
        assert run_cli(*args, cwd=root).returncode == 0
    assert_allowed(guard("claude-code", event(root)))
    (root / "servers/json.py").write_text("import os\n")
    reason = guard_denies(root)
    assert reason is not None and "servers" in reason, reason


def test_the_review_shows_the_shared_root_once(tmp_path: Path) -> None:
    root = shared_project(tmp_path)
    assert run_cli("lock", cwd=root).returncode == 0
    shown = run_cli("show", cwd=root, env={"COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    assert "Code roots shared by several commands" in shown.stdout
    assert f"{S + 1} files" in shown.stdout and "shared code root" in shown.stdout


# ---------------------------------------------------------------------------- older locks


def _inline_lock(root: Path) -> bytes:
    """The lock as agentstack wrote it before `code_roots`: every server's root inline."""
    lock, _, _ = resolve(root)
    for item in lock["servers"].values():
        item["roots"] = [
            {**r, "files": lock["code_roots"][r["path"]]["files"]} for r in item["roots"]
        ]
    del lock["code_roots"]
    return dumps_lock(lock).encode("utf-8")


def test_a_lock_from_before_the_table_is_read_and_stale(tmp_path: Path) -> None:
    root = shared_project(tmp_path)
    old = _inline_lock(root)
    parse_lock(old)  # still a valid lock
    (root / "agentstack.lock").write_bytes(old)
    check = run_cli("lock", "--check", cwd=root)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "would change: servers.s0" in check.stderr, check.stderr
    status = run_cli("status", cwd=root)
    said = status.stdout + status.stderr
    assert status.returncode == 1 and "internal error" not in said
    assert "agentstack lock" in said, said
    assert run_cli("lock", cwd=root).returncode == 0
    assert b"[code_roots.servers]" in (root / "agentstack.lock").read_bytes()
    assert run_cli("lock", "--check", cwd=root).returncode == 0


@pytest.mark.parametrize("damage", ["no table", "other digest", "unused entry", "wrong path"])
def test_a_table_that_does_not_match_is_refused_clearly(tmp_path: Path, damage: str) -> None:
    root = shared_project(tmp_path)
    lock, _, _ = resolve(root)
    if damage == "no table":
        del lock["code_roots"]
    elif damage == "other digest":
        lock["code_roots"]["servers"]["digest"] = "b3:" + "1" * 64
    elif damage == "unused entry":
        lock["code_roots"]["other"] = {**lock["code_roots"]["servers"], "path": "other"}
    else:
        lock["code_roots"]["servers"]["path"] = "elsewhere"
    with pytest.raises(ManifestInvalid) as raised:
        parse_lock(dumps_lock(lock).encode("utf-8"))
    assert any("agentstack lock" in p.hint for p in raised.value.problems)

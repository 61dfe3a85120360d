"""What a server or hook runs is what is pinned: code roots, loader environment, unpinnable code.

Each attack: an in-project file that the command loads (but does not name) changes by one byte.
The consent digest must move, `lock --check` must exit 1, the guard must deny until re-review, and
the re-review must carry a high finding.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agentstack.consent.diff import consent_diff
from agentstack.consent.document import consent_digest, consent_document
from agentstack.errors import ManifestInvalid
from agentstack.lock.resolve import dumps_lock, parse_lock, resolver_for
from agentstack.manifest.load import load_manifest
from tests.conftest import make_project

# The commands run in process: what these tests check is the library's answer, not the process.
from tests.support.cli import run_cli_in_process as run_cli

HEAD = '[project]\nname = "p"\nharnesses = ["claude-code"]\n\n'

PY_FILES = {
    "servers/app.py": "import helper\nhelper.run()\n",
    "servers/helper.py": "def run():\n    print('ok')\n",
    "pkg/__init__.py": "",
    "pkg/mod.py": "from pkg import util\n",
    "pkg/util.py": "X = 1\n",
    "app/package.json": '{"name": "app", "scripts": {"start": "node lib/index.js"}}\n',
    "app/lib/index.js": "require('./dep')\n",
    "app/lib/dep.js": "module.exports = 1\n",
    "vendor/shim/__init__.py": "",
    "vendor/shim/core.py": "Y = 2\n",
    "tools/preload.js": "// preload\n",
    "lib/libx.so": "ELF\n",
}


def resolve(root: Path) -> tuple[dict[str, Any], dict[str, Any], str]:
    manifest = load_manifest(root)
    resolver = resolver_for(root, None)
    lock = resolver.resolve(manifest)
    document = consent_document(manifest, lock)
    return lock, document, consent_digest(document)


def project(tmp_path: Path, body: str, files: dict[str, str] | None = None) -> Path:
    return make_project(tmp_path / "p", HEAD + body, {**PY_FILES, **(files or {})})


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01
    path.write_bytes(bytes(data))


def high(document_old: dict[str, Any], document_new: dict[str, Any]) -> list[str]:
    diff = consent_diff(document_old, document_new)
    return [f"{f.code}: {f.message}" for f in diff.findings if f.severity == "high"]


CASES = {
    "module imported by a pinned script": (
        '[servers.s]\ncommand = "python3"\nargs = ["servers/app.py"]\n',
        "servers/helper.py",
    ),
    "python -m pkg.mod": (
        '[servers.s]\ncommand = "python3"\nargs = ["-m", "pkg.mod"]\n',
        "pkg/util.py",
    ),
    "python -m from a cwd": (
        '[servers.s]\ncommand = "python3"\nargs = ["-m", "core"]\ncwd = "vendor/shim"\n',
        "vendor/shim/core.py",
    ),
    "node <dir>": ('[servers.s]\ncommand = "node"\nargs = ["app"]\n', "app/lib/dep.js"),
    "node <file> in a package.json tree": (
        '[servers.s]\ncommand = "node"\nargs = ["app/lib/index.js"]\n',
        "app/lib/dep.js",
    ),
    "npm start (package.json script)": (
        '[servers.s]\ncommand = "npm"\nargs = ["start"]\ncwd = "app"\n',
        "app/package.json",
    ),
    "npm --prefix app run start": (
        '[servers.s]\ncommand = "npm"\nargs = ["--prefix", "app", "run", "start"]\n',
        "app/lib/index.js",
    ),
    "npx <local dir>": ('[servers.s]\ncommand = "npx"\nargs = ["./app"]\n', "app/lib/dep.js"),
    'sh -c "python3 pkg/mod.py"': (
        '[hooks.h]\nevent = "Stop"\ncommand = ["sh", "-c", "python3 pkg/mod.py"]\n',
        "pkg/util.py",
    ),
    "hook script's sibling": (
        '[hooks.h]\nevent = "Stop"\nscript = "servers/app.py"\n',
        "servers/helper.py",
    ),
    "PYTHONPATH = vendor": (
        '[servers.s]\ncommand = "python3"\nargs = ["-m", "shim.core"]\nenv = { PYTHONPATH = "vendor" }\n',
        "vendor/shim/core.py",
    ),
    "NODE_OPTIONS --require": (
        '[servers.s]\ncommand = "node"\nargs = ["app"]\n'
        'env = { NODE_OPTIONS = "--require ./tools/preload.js" }\n',
        "tools/preload.js",
    ),
    "LD_PRELOAD": (
        '[servers.s]\ncommand = "node"\nargs = ["app"]\nenv = { LD_PRELOAD = "lib/libx.so" }\n',
        "lib/libx.so",
    ),
    "pin names the code": (
        '[servers.s]\ncommand = "mytool"\nargs = ["--serve"]\npin = ["vendor", "tools/preload.js"]\n',
        "vendor/shim/core.py",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_byte_of_loaded_code_moves_the_digest(tmp_path: Path, name: str) -> None:
    body, target = CASES[name]
    root = project(tmp_path, body)
    if name == "hook script's sibling":
        (root / "servers/app.py").chmod(0o755)
    lock, before, digest = resolve(root)
    # The lock text round-trips (roots are written as [[...roots]] sections).
    assert parse_lock(dumps_lock(lock).encode()) == lock
    flip(root / target)
    _, after, moved = resolve(root)
    assert moved != digest, name
    findings = high(before, after)
    assert any(
        f.startswith("changed-executable") and target.split("/")[-1] in f for f in findings
    ), findings


def test_absolute_in_project_path_is_a_project_path(tmp_path: Path) -> None:
    root = project(tmp_path, "")
    manifest = (
        HEAD + f'[servers.s]\ncommand = "python3"\nargs = ["{root.resolve()}/servers/app.py"]\n'
    )
    (root / "agentstack.toml").write_text(manifest)
    lock, _, digest = resolve(root)
    assert [f["path"] for f in lock["servers"]["s"]["files"]] == ["servers/app.py"]
    assert [r["path"] for r in lock["servers"]["s"]["roots"]] == ["servers"]
    assert str(root) not in dumps_lock(lock)
    flip(root / "servers/app.py")
    assert resolve(root)[2] != digest


def test_lock_check_and_frozen_exit_1_on_a_changed_code_byte(tmp_path: Path) -> None:
    root = project(tmp_path, CASES["python -m pkg.mod"][0])
    assert run_cli("lock", cwd=root).returncode == 0
    assert run_cli("lock", "--check", cwd=root).returncode == 0
    flip(root / "pkg/util.py")
    check = run_cli("lock", "--check", cwd=root)
    assert check.returncode == 1 and "servers.s" in check.stdout + check.stderr
    assert run_cli("lock", "--frozen", cwd=root).returncode == 1
    assert run_cli("digest", cwd=root).returncode == 1


def test_a_new_module_in_the_import_path_moves_the_digest(tmp_path: Path) -> None:
    """`python -m pkg` from the project root: a new top-level `json.py` would shadow the
    standard library, so the importable top level is pinned, new files included."""
    root = project(tmp_path, CASES["python -m pkg.mod"][0])
    _, _, digest = resolve(root)
    (root / "json.py").write_text("import os\n")
    assert resolve(root)[2] != digest


def test_loader_env_is_a_high_finding_and_its_paths_are_pinned(tmp_path: Path) -> None:
    root = project(tmp_path, CASES["PYTHONPATH = vendor"][0])
    lock, document, _ = resolve(root)
    assert "vendor" in [r["path"] for r in lock["servers"]["s"]["roots"]]
    first = consent_diff(None, document)
    codes = {(f.code, f.severity) for f in first.findings}
    assert ("loader-env", "high") in codes
    # Changing only the variable's value is a high finding on re-review, too.
    (root / "agentstack.toml").write_text(
        (root / "agentstack.toml").read_text().replace('"vendor"', '"vendor/shim"')
    )
    _, after, _ = resolve(root)
    assert any(f.startswith("loader-env") for f in high(document, after))


@pytest.mark.parametrize(
    "body",
    [
        '[hooks.h]\nevent = "Stop"\ncommand = ["sh", "-c", "python3 $(cat which.txt)"]\n',
        '[servers.s]\ncommand = "mytool"\nargs = ["servers/app.py"]\n',
        '[servers.s]\ncommand = "node"\nargs = ["server.js"]\n',
        '[servers.s]\ncommand = "bash"\n',
    ],
)
def test_code_agentstack_cannot_pin_is_a_high_finding_until_pin_names_it(
    tmp_path: Path, body: str
) -> None:
    files = {"server.js": "1\n", "which.txt": "x\n"}
    root = project(tmp_path, body.replace("$(cat which.txt)", "$(cat which.txt)"), files)
    _, document, _ = resolve(root)
    findings = consent_diff(None, document).findings
    unpinnable = [f for f in findings if f.code == "unpinnable-code"]
    assert unpinnable and unpinnable[0].severity == "high"
    assert "runs code agentstack cannot pin" in unpinnable[0].message
    section = "hooks.h" if "hooks" in body else "servers.s"
    (root / "agentstack.toml").write_text(
        (root / "agentstack.toml").read_text() + 'pin = ["servers"]\n'
    )
    _, pinned, _ = resolve(root)
    assert not [f for f in consent_diff(None, pinned).findings if f.code == "unpinnable-code"]
    assert [r["path"] for r in pinned[section.split(".")[0]][section.split(".")[1]]["roots"]] == [
        "servers"
    ]


def test_node_modules_is_excluded_with_a_finding_and_pinned_on_request(tmp_path: Path) -> None:
    files = {"app/node_modules/dep/index.js": "evil\n", "app/.git/HEAD": "x\n"}
    root = project(tmp_path, CASES["node <dir>"][0], files)
    lock, document, digest = resolve(root)
    entry = lock["servers"]["s"]
    assert entry["roots"][0]["excluded"] == ["node_modules"]  # .git is skipped silently
    assert "excluded:app/node_modules" in entry["risks"]
    findings = consent_diff(None, document).findings
    assert any(f.code == "excluded-code" and "app/node_modules" in f.message for f in findings)
    flip(root / "app/node_modules/dep/index.js")
    assert resolve(root)[2] == digest  # excluded, and the review said so
    (root / "agentstack.toml").write_text(
        (root / "agentstack.toml").read_text() + 'pin = ["app", "app/node_modules"]\n'
    )
    lock, document, digest = resolve(root)
    assert [r["path"] for r in lock["servers"]["s"]["roots"]] == ["app", "app/node_modules"]
    assert not [f for f in consent_diff(None, document).findings if f.code == "excluded-code"]
    flip(root / "app/node_modules/dep/index.js")
    assert resolve(root)[2] != digest


def test_pin_must_exist_and_stay_inside(tmp_path: Path) -> None:
    root = project(tmp_path, '[servers.s]\ncommand = "mytool"\npin = ["missing", "escape"]\n')
    os.symlink("/etc", root / "escape")
    with pytest.raises(ManifestInvalid) as caught:
        resolve(root)
    paths = {p.path for p in caught.value.problems}
    assert paths == {"servers.s.pin"}
    messages = " ".join(p.message for p in caught.value.problems)
    assert "does not exist" in messages and "outside the project" in messages


@pytest.mark.parametrize(
    "case", ["python -m pkg.mod", "npm start (package.json script)", "PYTHONPATH = vendor"]
)
def test_guard_denies_a_changed_code_root_file_until_re_review(tmp_path: Path, case: str) -> None:
    from tests.guard.test_guard import assert_allowed, assert_denied, event, guard

    body, target = CASES[case]
    root = project(tmp_path, body).resolve()
    for args in (["lock"], ["trust", "--yes", "--accept-risk"], ["apply", "--write"]):
        result = run_cli(*args, cwd=root)
        assert result.returncode == 0, result.stderr
    assert_allowed(guard("claude-code", event(root)))
    flip(root / target)
    assert_denied(guard("claude-code", event(root)), reason=target)
    assert run_cli("lock", cwd=root).returncode == 0
    review = run_cli("trust", "--yes", cwd=root, env={"COLUMNS": "400"})
    assert review.returncode == 1, review.stdout + review.stderr  # a high finding needs acceptance
    assert f"changed: {target}" in review.stdout + review.stderr
    accepted = run_cli("trust", "--yes", "--accept-risk", cwd=root)
    assert accepted.returncode == 0, accepted.stderr
    assert run_cli("apply", "--write", cwd=root).returncode == 0
    assert_allowed(guard("claude-code", event(root)))


def test_the_view_lists_code_roots(tmp_path: Path) -> None:
    root = project(tmp_path, CASES["node <dir>"][0], {"app/node_modules/d/i.js": "1\n"})
    run_cli("lock", cwd=root)
    shown = json.loads(run_cli("show", "--json", cwd=root).stdout)
    roots = shown["servers"]["s"]["roots"]
    assert roots[0]["path"] == "app" and roots[0]["excluded"] == ["node_modules"]


def test_the_full_example_pins_its_servers_and_hooks_without_unpinnable_findings(
    tmp_path: Path,
) -> None:
    from tests.conftest import copy_example

    root = copy_example("full", tmp_path)
    lock, document, _ = resolve(root)
    assert [r["path"] for r in lock["servers"]["notes"]["roots"]] == ["servers"]
    assert [r["path"] for r in lock["hooks"]["format-check"]["roots"]] == ["hooks"]
    assert "roots" not in lock["hooks"]["audit-prompt"]  # `sh -c "echo … >&2"` loads nothing
    codes = {f.code for f in consent_diff(None, document).findings}
    assert "unpinnable-code" not in codes and "loader-env" not in codes


def test_a_hook_script_in_the_project_root_is_followed(tmp_path: Path) -> None:
    root = project(tmp_path, '[hooks.h]\nevent = "Stop"\nscript = "check.sh"\n',
                   {"check.sh": "#!/bin/sh\n. ./lib.sh\n"})
    (root / "check.sh").chmod(0o755)
    _, document, _ = resolve(root)
    findings = [f for f in consent_diff(None, document).findings if f.code == "unpinnable-code"]
    assert findings and "check.sh" in findings[0].message


def test_pin_keeps_what_loader_variables_name(tmp_path: Path) -> None:
    root = project(
        tmp_path,
        '[servers.s]\ncommand = "python3"\nargs = ["servers/app.py"]\n'
        'env = { PYTHONPATH = "vendor" }\npin = ["servers"]\n',
    )
    lock, _, digest = resolve(root)
    assert [r["path"] for r in lock["servers"]["s"]["roots"]] == ["servers", "vendor"]
    flip(root / "vendor/shim/core.py")
    assert resolve(root)[2] != digest


def test_a_cache_written_by_the_code_does_not_make_the_lock_stale(tmp_path: Path) -> None:
    root = project(tmp_path, CASES["module imported by a pinned script"][0])
    lock, _, digest = resolve(root)
    (root / "servers/__pycache__").mkdir()
    (root / "servers/__pycache__/helper.cpython-311.pyc").write_bytes(b"\x00" * 16)
    relocked, _, again = resolve(root)
    assert relocked == lock and again == digest


@pytest.mark.parametrize(
    ("argv", "root"),
    [
        (["env", "PYTHONPATH=vendor", "python3", "servers/app.py"], ["servers", "vendor"]),
        (["env", "-i", "python3", "servers/app.py"], ["servers"]),
        (["nice", "-n", "5", "python3", "servers/app.py"], ["servers"]),
        (["timeout", "30", "node", "app"], ["app"]),
        (["nohup", "python3", "-m", "shim.core"], ["pkg"]),  # python -m: the importable root
        (["timeout", "-k", "5", "30", "python3", "-c", "import shim"], ["pkg"]),
        (["uv", "run", "--with", "x", "python3", "servers/app.py"], ["servers"]),
        (["sh", "-c", "cd app && npm start"], None),
        (["sh", "-c", "exec node app"], ["app"]),
    ],
)
def test_wrappers_are_seen_through(tmp_path: Path, argv: list[str], root: list[str] | None) -> None:
    from agentstack.lock.coderoots import analyse

    base = project(tmp_path, "")
    found = analyse(base, argv, ".", {})
    if root is None:  # `cd` changes where the rest runs: said, not guessed
        assert any(f.startswith("unpinnable:") for f in found.facts), found.facts
    else:
        assert sorted(r.path for r in found.roots) == root, found
    if "PYTHONPATH=vendor" in argv:
        assert "loader-env:PYTHONPATH" in found.facts


def test_the_analysis_never_crashes_on_any_command_line(tmp_path: Path) -> None:
    """Whatever a manifest says, reading it is a pin, a fact or nothing: never an exception."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from agentstack.lock.coderoots import LOADER_ENV, analyse

    base = project(tmp_path, "")
    words = st.sampled_from(
        ["python3", "node", "npm", "sh", "bash", "-c", "-m", "-r", "--require", "-I", "env",
         "timeout", "uv", "run", "start", "app", "pkg", "servers/app.py", "./app", "/", "..",
         "../x", "-", "--", "$(x)", ";", "&&", "|", ">", "2>&1", "=", "A=1", "PYTHONPATH=vendor",
         str(base), f"{base}/pkg", "~", "-uc", "-Wd", "-X"]
    )
    argv = st.lists(st.one_of(words, st.text(max_size=12)), min_size=1, max_size=8)
    env = st.dictionaries(
        st.sampled_from([*LOADER_ENV, "PATH", "LD_X", "DYLD_Y", "OTHER"]),
        st.one_of(st.none(), words, st.text(max_size=20)),
        max_size=3,
    )
    cwd = st.sampled_from([".", "app", "servers", "pkg"])

    @settings(max_examples=300, deadline=None)
    @given(argv=argv, env=env, cwd=cwd, shell=st.booleans())
    def run(argv: list[str], env: dict[str, str | None], cwd: str, shell: bool) -> None:
        if shell:
            argv = ["sh", "-c", " ".join(argv)]
        found = analyse(base, argv, cwd, env)
        for item in found.roots:
            assert not item.path.startswith(("/", "..")) and item.path != "."
        for rel, _ in found.files:
            assert not rel.startswith(("/", ".."))

    run()


def _trusted(root: Path) -> None:
    for args in (["lock"], ["trust", "--yes", "--accept-risk"], ["apply", "--write"]):
        result = run_cli(*args, cwd=root)
        assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "added",
    ["servers/json.py", "servers/pkg/__init__.py", "servers/.hidden.py", "servers/sub/new/m.py"],
)
def test_the_guard_denies_a_file_added_to_a_code_root(tmp_path: Path, added: str) -> None:
    """The attack: a pull adds a file next to a pinned server script (`servers/json.py` shadows
    the standard library for `python3 servers/app.py`). `status` says stale; the guard must deny
    too, as it does for a new surface file: it watches every code-root directory's listing."""
    from tests.surface.test_surface import guard_denies

    root = project(tmp_path, '[servers.s]\ncommand = "python3"\nargs = ["servers/app.py"]\n')
    (root / "servers" / "sub").mkdir()
    (root / "servers" / "sub" / "x.py").write_text("X = 1\n")
    root = root.resolve()
    _trusted(root)
    assert guard_denies(root) is None
    target = root / added
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("import os\n")
    assert run_cli("status", cwd=root).returncode == 1
    reason = guard_denies(root)
    assert reason is not None and "servers" in reason, reason
    # Also one directory down: the listing of every directory in the root is watched.
    target = root / "servers" / "sub" / "y.py"
    _trusted(root)
    assert guard_denies(root) is None
    target.write_text("Y = 2\n")
    assert guard_denies(root) is not None


def test_caches_and_left_out_dependencies_in_a_code_root_are_not_drift(tmp_path: Path) -> None:
    """What the lock leaves out of a code root (`__pycache__` the code writes when it first runs,
    an installed `node_modules`, reported in the review) is no drift for the guard either; a root
    pinned whole (`pin = [..., "app/node_modules"]`) is watched whole."""
    from tests.surface.test_surface import guard_denies

    root = project(tmp_path, CASES["node <dir>"][0], {"app/node_modules/dep/index.js": "1\n",
                                                     "app/lib/x.py": "X = 1\n"}).resolve()
    _trusted(root)
    (root / "app" / "lib" / "__pycache__").mkdir()
    (root / "app" / "lib" / "__pycache__" / "x.cpython-312.pyc").write_bytes(b"\0")
    (root / "app" / "node_modules" / "other").mkdir()
    assert run_cli("status", cwd=root).returncode == 0
    assert guard_denies(root) is None
    (root / "agentstack.toml").write_text(
        (root / "agentstack.toml").read_text() + 'pin = ["app", "app/node_modules"]\n'
    )
    _trusted(root)
    assert guard_denies(root) is None
    (root / "app" / "node_modules" / "dep" / "new.js").write_text("evil\n")
    assert guard_denies(root) is not None

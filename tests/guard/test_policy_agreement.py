"""The guard and the kernel sandbox close the same credential files.

`agentstack run` denies the sandbox's credential list (`sandbox/credentials.py`) and nono's deny
groups; the guard's file rules are compiled into the snapshot by `snapshot.compile_policy`. The
guard does not read the sandbox's policy, so these tests hold the two together: with the whole
home directory granted (read and write), every path the sandbox closes must still be denied to a
file tool by the guard.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import agentstack.apply.snapshot as snapshot
from agentstack import _guard
from agentstack.sandbox.credentials import CREDENTIAL_PATHS


def _policy(home: Path, root: Path) -> dict[str, object]:
    document = {"sandbox": {
        "read_dirs": ["~"], "read_files": [], "write_dirs": ["~"], "write_files": [],
        "network": {"block": True, "allow_domains": []},
    }}
    return snapshot.compile_policy(root, document)


def _denied(policy: dict[str, object], path: str, op: str) -> bool:
    try:
        _guard.check_path(policy, path, op)
    except _guard.Deny:
        return True
    return False


def _home(isolated_home: Path) -> tuple[Path, Path]:
    home = Path(os.path.realpath(isolated_home))
    root = home / "proj"
    root.mkdir(exist_ok=True)
    return home, root


def test_a_granted_home_is_readable_to_the_guard(isolated_home: Path) -> None:
    """The premise: with `~` granted, an ordinary file in it is allowed (so a deny below is the
    credential rule, not the lack of a grant)."""
    home, root = _home(isolated_home)
    policy = _policy(home, root)
    assert not _denied(policy, str(home / "notes.txt"), "read")
    assert _denied(policy, str(home / ".ssh" / "id_ed25519"), "read")


def test_the_guard_denies_every_credential_path_the_sandbox_denies(isolated_home: Path) -> None:
    home, root = _home(isolated_home)
    policy = _policy(home, root)
    open_to_the_guard = [
        f"{op} {rel}" for rel in CREDENTIAL_PATHS for op in ("read", "write")
        if not _denied(policy, str(home / rel), op)
    ]
    assert open_to_the_guard == []


def test_the_guard_denies_every_path_of_nonos_deny_groups(isolated_home: Path) -> None:
    pytest.importorskip("nono_py")
    from agentstack.sandbox.resolve import nono_deny_paths

    home, root = _home(isolated_home)
    policy = _policy(home, root)
    open_to_the_guard = sorted(
        f"{group}: {path}" for path, group in nono_deny_paths(str(home))
        if path.startswith(str(home) + "/") and not _denied(policy, path, "read")
    )
    assert open_to_the_guard == []


def test_one_list_of_cloud_metadata_names() -> None:
    """The risk model (a server or grant reaching a metadata host) and the sandbox's network rule
    must name the same hosts: one object."""
    from agentstack.manifest.model import METADATA_HOSTS
    from agentstack.sandbox.policy import METADATA_NAMES

    assert METADATA_NAMES is METADATA_HOSTS


def test_the_guards_copy_of_nonos_groups_is_nonos_list(isolated_home: Path) -> None:
    """`credentials.NONO_DENY_PATHS` (what the guard uses, without importing nono) is exactly the
    home part of nono's deny groups as `run` reads them: a nono upgrade that adds a path fails
    here until the copy follows."""
    pytest.importorskip("nono_py")
    from agentstack.sandbox.credentials import NONO_DENY_PATHS
    from agentstack.sandbox.resolve import nono_deny_paths

    home = str(isolated_home)
    from_nono = [p for p, _ in nono_deny_paths(home)]
    assert all(p.startswith(home + "/") for p in from_nono)  # nothing outside the home to copy
    assert sorted(p[len(home) + 1 :] for p in from_nono) == sorted(NONO_DENY_PATHS)

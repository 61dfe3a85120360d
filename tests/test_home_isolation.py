"""The suite never runs with the real home: HOME (and agentstack's own homes) point into a temporary
directory before any fixture runs, whatever its scope, and a session guard fails the run when the
real home or cache changed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import _REAL_HOME, real_state_changes, real_state_snapshot

_SEEN: dict[str, str] = {}


@pytest.fixture(scope="module")
def module_env() -> Iterator[dict[str, str]]:
    # A module-scoped fixture is set up before the function-scoped isolation would be.
    _SEEN.update({k: os.environ.get(k, "") for k in
                  ("HOME", "XDG_CACHE_HOME", "AGENTSTACK_HOME", "AGENTSTACK_CACHE", "GIT_CONFIG_GLOBAL")})
    yield dict(_SEEN)


def test_a_module_scoped_fixture_already_sees_the_temporary_home(module_env: dict[str, str]) -> None:
    for key, value in module_env.items():
        assert value, key
        assert not Path(value).is_relative_to(_REAL_HOME), (key, value)
    assert Path(os.path.expanduser("~")) != _REAL_HOME


def test_the_session_guard_sees_a_change_in_the_real_cache(tmp_path: Path) -> None:
    fake_home = tmp_path / "realhome"
    (fake_home / ".cache" / "agentstack").mkdir(parents=True)
    before = real_state_snapshot(fake_home)
    assert real_state_changes(fake_home, before) == []
    (fake_home / ".cache" / "agentstack" / "mirror").mkdir()
    (fake_home / ".claude.json").write_text("{}", encoding="utf-8")
    changes = real_state_changes(fake_home, before)
    assert any("mirror" in c for c in changes) and any(".claude.json" in c for c in changes)

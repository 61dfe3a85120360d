"""`agentstack secret set|list|rm` and the store behind them."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from agentstack.errors import InvalidInput, Refused
from agentstack.secrets import SecretStore
from tests.conftest import run_cli


def _store_dir() -> Path:
    return Path(os.environ["AGENTSTACK_HOME"]) / "secrets"


def test_set_list_rm_through_the_cli(tmp_path: Path) -> None:
    done = run_cli("secret", "set", "anthropic", cwd=tmp_path, input="sk-live-123\n")
    assert done.returncode == 0, done.stderr
    assert "sk-live-123" not in done.stdout + done.stderr
    path = _store_dir() / "anthropic"
    assert path.read_bytes() == b"sk-live-123"  # one trailing newline from stdin is dropped
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(_store_dir().stat().st_mode) == 0o700
    assert run_cli("secret", "set", "github.token", cwd=tmp_path, input="ghp_x").returncode == 0

    listed = run_cli("secret", "list", "--json", cwd=tmp_path)
    assert listed.returncode == 0
    assert json.loads(listed.stdout) == {"secrets": ["anthropic", "github.token"]}
    assert "sk-live-123" not in listed.stdout
    plain = run_cli("secret", "list", cwd=tmp_path)
    assert plain.stdout.splitlines() == ["anthropic", "github.token"]

    assert run_cli("secret", "rm", "anthropic", cwd=tmp_path).returncode == 0
    assert not path.exists()
    again = run_cli("secret", "rm", "anthropic", cwd=tmp_path)
    assert again.returncode == 1 and "no secret" in again.stderr


def test_overwrite_is_atomic_and_leaves_no_temp_files(tmp_path: Path) -> None:
    store = SecretStore()
    store.set("k", "one")
    store.set("k", "two")
    assert store.get("k") == "two"
    assert sorted(p.name for p in store.directory.iterdir()) == ["k"]


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("bad name", "v", "not a secret name"),
        ("../escape", "v", "not a secret name"),
        (".hidden", "v", "not a secret name"),
        ("ok", "", "empty"),
        ("ok", "a\nb", "newline"),
        ("ok", "a\0b", "NUL"),
    ],
)
def test_invalid_names_and_values(name: str, value: str, words: str) -> None:
    with pytest.raises(InvalidInput, match=words):
        SecretStore().set(name, value)
    assert not _store_dir().exists() or not any(_store_dir().iterdir())


def test_invalid_input_exit_codes(tmp_path: Path) -> None:
    assert run_cli("secret", "set", "bad name", cwd=tmp_path, input="v").returncode == 2
    assert run_cli("secret", "set", "ok", cwd=tmp_path, input="").returncode == 2
    assert run_cli("secret", "set", "ok", cwd=tmp_path, input="two\nlines\n").returncode == 2


def test_loose_directory_mode_is_tightened_and_foreign_files_refused() -> None:
    store = SecretStore()
    store.set("k", "v")
    store.directory.chmod(0o755)
    store.set("k2", "v")
    assert stat.S_IMODE(store.directory.stat().st_mode) == 0o700
    (store.directory / "k").chmod(0o644)
    with pytest.raises(Refused, match="accessible to other users"):
        store.get("k")
    with pytest.raises(Refused, match="not a private regular file"):
        store.check("k")
    assert store.check("k2") == store.directory / "k2"


def test_symlinked_store_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    home = Path(os.environ["AGENTSTACK_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "secrets").symlink_to(elsewhere)
    with pytest.raises(Refused, match="not a directory"):
        SecretStore().set("k", "v")
    assert not any(elsewhere.iterdir())


def test_get_missing_secret_is_refused() -> None:
    with pytest.raises(Refused, match="no secret"):
        SecretStore().get("nope")
    assert SecretStore().names() == []

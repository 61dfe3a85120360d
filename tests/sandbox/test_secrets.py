"""`agentstack secret set|list|rm` and the store behind them."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentstack.errors import InvalidInput, Refused
from agentstack.secrets import FILE_BYTES, MAX_SECRET_BYTES, SecretStore, pad, unpad
from tests.harness.deadline import scaled

# The commands run in process: what these tests check is the library's answer, not the process.
from tests.support.cli import run_cli_in_process as run_cli


def _store_dir() -> Path:
    return Path(os.environ["AGENTSTACK_HOME"]) / "secrets"


def test_set_list_rm_through_the_cli(tmp_path: Path) -> None:
    done = run_cli("secret", "set", "anthropic", cwd=tmp_path, input="sk-live-123\n")
    assert done.returncode == 0, done.stderr
    assert "sk-live-123" not in done.stdout + done.stderr
    path = _store_dir() / "anthropic"
    data = path.read_bytes()  # one trailing newline from stdin is dropped, then padded
    assert data.startswith(b"sk-live-123\n") and len(data) == FILE_BYTES
    assert SecretStore().get("anthropic") == "sk-live-123"
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


# ------------------------------------------------------------------ sizes say nothing


@given(st.text(alphabet=st.characters(blacklist_characters="\0\r\n", blacklist_categories=("Cs",)),
               min_size=1, max_size=200))
@settings(max_examples=60, deadline=None)
def test_every_secret_file_has_one_size_and_reads_back(value: str) -> None:
    raw = value.encode("utf-8")
    stored = pad(raw)
    assert len(stored) == FILE_BYTES and unpad(stored) == raw
    assert pad(raw) != stored  # random padding: nothing to compress, nothing to compare


def test_stat_of_a_stored_secret_tells_nothing_of_its_length(tmp_path: Path) -> None:
    store = SecretStore(tmp_path / "home")
    store.set("short", "x")
    store.set("long", "y" * MAX_SECRET_BYTES)
    store.set("mid", "sk-ant-" + "z" * 100)
    infos = [os.stat(store.path(n)) for n in ("short", "long", "mid")]
    assert {i.st_size for i in infos} == {FILE_BYTES}
    assert len({i.st_blocks for i in infos}) == 1
    assert store.get("short") == "x" and store.get("long") == "y" * MAX_SECRET_BYTES


def test_a_bare_secret_from_an_older_version_is_read_and_sealed(tmp_path: Path) -> None:
    store = SecretStore(tmp_path / "home")
    store.set("old", "placeholder")
    store.path("old").write_bytes(b"sk-old-value")
    assert store.get("old") == "sk-old-value"
    assert store.seal("old") is True and store.seal("old") is False
    assert os.stat(store.path("old")).st_size == FILE_BYTES
    assert store.get("old") == "sk-old-value"


def test_a_damaged_secret_file_is_refused(tmp_path: Path) -> None:
    store = SecretStore(tmp_path / "home")
    store.set("bad", "v")
    store.path("bad").write_bytes(b"x" * FILE_BYTES)  # padded size, no end marker
    with pytest.raises(Refused, match="not a secret agentstack stored"):
        store.get("bad")


def test_a_full_disk_keeps_the_old_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from agentstack.storage import StorageError

    store = SecretStore(tmp_path / "home")
    store.set("k", "old")

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(StorageError) as caught:
        store.set("k", "new")
    monkeypatch.undo()
    assert caught.value.exit_code == 1 and "storing secret k" in caught.value.message
    assert store.get("k") == "old"
    assert sorted(p.name for p in store.directory.iterdir()) == ["k"]


def test_nono_would_inject_the_padding_so_run_hands_it_the_bare_value() -> None:
    """Why `run` does not give nono the store's path: nono's file:// loader strips one line
    ending and nothing else, so a padded file's padding would be sent upstream (measured with
    the installed nono-py: random padding is not even UTF-8, so nono drops the route; printable
    padding would be sent upstream). `run` passes the bare value through a memfd instead."""
    import http.server
    import threading
    import urllib.error
    import urllib.request

    from agentstack.sandbox.confine import load_nono

    try:
        nono = load_nono()
    except ImportError:
        pytest.skip("nono-py is not installed")
    seen: list[str | None] = []

    class Upstream(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("x-api-key"))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    padded = Path(tempfile.mkdtemp(dir="/var/tmp")) / "secret"
    padded.write_bytes(pad(b"sk-real"))
    padded.chmod(0o600)
    memfd = os.memfd_create("secret", os.MFD_CLOEXEC)
    os.write(memfd, b"sk-real")

    def upstream_sees(key: str) -> str | None:
        route = nono.RouteConfig(
            prefix="m", upstream=f"http://127.0.0.1:{server.server_address[1]}",
            credential_key=key, inject_mode=nono.InjectMode.HEADER, inject_header="x-api-key",
            credential_format="{}", env_var="MOCK_KEY",
        )
        handle = nono.start_proxy(nono.ProxyConfig(allowed_hosts=[], routes=[route]))
        try:
            token = handle.credential_env_vars().get("MOCK_KEY")
            if token is None:  # nono refused the file (random padding is not UTF-8)
                return f"not loaded: {handle.diagnostics()}"
            request = urllib.request.Request(
                f"http://127.0.0.1:{handle.port}/m/x", headers={"x-api-key": token}
            )
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            before = len(seen)
            try:
                opener.open(request, timeout=scaled(10)).read()
            except (urllib.error.URLError, ConnectionError, OSError):
                return None
            return seen[-1] if len(seen) > before else None
        finally:
            handle.shutdown()

    try:
        assert upstream_sees(f"file://{padded}") != "sk-real"
        padded.write_bytes(b"sk-real\n" + b"#" * 32)
        assert upstream_sees(f"file://{padded}") != "sk-real"
        assert upstream_sees(f"file:///proc/self/fd/{memfd}") == "sk-real"
    finally:
        os.close(memfd)
        server.shutdown()
        server.server_close()
        shutil.rmtree(padded.parent, ignore_errors=True)

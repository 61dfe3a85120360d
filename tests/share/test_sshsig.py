"""SSHSIG signatures, OpenSSH key files and allowed_signers, checked against the real ssh-keygen."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentstack.share.keys as keys
import agentstack.share.sshsig as sshsig
from agentstack.errors import InvalidInput, Refused
from agentstack.share.sshsig import AllowedSigners, PrivateKey, PublicKey, SignatureError
from tests.conftest import run_cli
from tests.harness.deadline import scaled

SSH_KEYGEN = shutil.which("ssh-keygen")
needs_ssh_keygen = pytest.mark.skipif(
    SSH_KEYGEN is None and os.environ.get("CI") != "true",
    reason="ssh-keygen (openssh-client) is not installed",
)
# A fixed test key, so failures are reproducible.
SEED = bytes(range(32))


def _keygen(*args: str, cwd: Path, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    assert SSH_KEYGEN is not None, "ssh-keygen is required in CI (apt-get install openssh-client)"
    return subprocess.run(
        [SSH_KEYGEN, *args], cwd=cwd, input=data, capture_output=True, timeout=scaled(30), check=False
    )


def _write_key(path: Path, key: PrivateKey) -> Path:
    path.write_text(key.openssh())
    path.chmod(0o600)
    return path


@needs_ssh_keygen
def test_our_signature_verifies_with_ssh_keygen(tmp_path: Path) -> None:
    key = PrivateKey(SEED, "alice")
    message = b'{"name":"team","version":"1"}\n'
    (tmp_path / "st").write_bytes(message)
    (tmp_path / "st.sig").write_text(sshsig.sign(key, message))
    signers = AllowedSigners(tmp_path / "allowed_signers")
    signers.add("alice@example.com", key.public)
    ok = _keygen(
        "-Y", "verify", "-n", "agentstack-bundle", "-f", "allowed_signers",
        "-I", "alice@example.com", "-s", "st.sig", cwd=tmp_path, data=message,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert b'Good "agentstack-bundle" signature for alice@example.com' in ok.stdout
    tampered = _keygen(
        "-Y", "verify", "-n", "agentstack-bundle", "-f", "allowed_signers",
        "-I", "alice@example.com", "-s", "st.sig", cwd=tmp_path, data=message + b" ",
    )  # fmt: skip
    assert tampered.returncode != 0
    other_namespace = _keygen(
        "-Y", "verify", "-n", "git", "-f", "allowed_signers",
        "-I", "alice@example.com", "-s", "st.sig", cwd=tmp_path, data=message,
    )  # fmt: skip
    assert other_namespace.returncode != 0


@needs_ssh_keygen
@pytest.mark.parametrize("origin", ["ssh-keygen", "agentstack"])
def test_ssh_keygen_signature_verifies_in_agentstack(tmp_path: Path, origin: str) -> None:
    if origin == "ssh-keygen":
        assert (
            _keygen(
                "-q", "-t", "ed25519", "-N", "", "-C", "bob", "-f", "id", cwd=tmp_path
            ).returncode
            == 0
        )
        key = sshsig.load_private_key(tmp_path / "id")
        assert key.public.openssh() == " ".join((tmp_path / "id.pub").read_text().split()[:2])
    else:
        key = PrivateKey(SEED, "bob")
        _write_key(tmp_path / "id", key)
    message = os.urandom(1000)
    (tmp_path / "msg").write_bytes(message)
    signed = _keygen("-Y", "sign", "-n", "agentstack-bundle", "-f", "id", "msg", cwd=tmp_path)
    assert signed.returncode == 0, signed.stderr
    armoured = (tmp_path / "msg.sig").read_bytes()
    parsed = sshsig.verify(armoured, message)
    assert parsed.public_key == key.public and parsed.hash_alg == "sha512"
    with pytest.raises(SignatureError) as bad:
        sshsig.verify(armoured, message[:-1])
    assert bad.value.code == "bad-signature"
    # A signature made for another purpose (git commits) never signs a bundle.
    (tmp_path / "msg.sig").unlink()
    assert _keygen("-Y", "sign", "-n", "git", "-f", "id", "msg", cwd=tmp_path).returncode == 0
    with pytest.raises(SignatureError) as wrong:
        sshsig.verify((tmp_path / "msg.sig").read_bytes(), message)
    assert wrong.value.code == "wrong-namespace"


@needs_ssh_keygen
def test_fingerprint_and_key_file_match_ssh_keygen(tmp_path: Path) -> None:
    key = PrivateKey(SEED, "carol")
    _write_key(tmp_path / "k", key)
    (tmp_path / "k.pub").write_text(key.public.openssh("carol") + "\n")
    listed = _keygen("-l", "-f", "k.pub", cwd=tmp_path)
    assert key.public.fingerprint.encode() in listed.stdout
    # ssh-keygen derives the same public key from our private key file.
    derived = _keygen("-y", "-f", "k", cwd=tmp_path)
    assert derived.stdout.decode().split()[:2] == key.public.openssh().split()


@needs_ssh_keygen
def test_find_principals_agrees_with_our_allowed_signers(tmp_path: Path) -> None:
    alice, bob = PrivateKey(SEED), PrivateKey(bytes(32))
    signers = AllowedSigners(tmp_path / "allowed_signers")
    assert signers.add("alice@example.com", alice.public)
    assert not signers.add("alice@example.com", alice.public)  # idempotent
    signers.add("bob", bob.public)
    (tmp_path / "m").write_bytes(b"x")
    (tmp_path / "m.sig").write_text(sshsig.sign(bob, b"x"))
    found = _keygen("-Y", "find-principals", "-f", "allowed_signers", "-s", "m.sig", cwd=tmp_path)
    assert found.stdout.decode().split() == signers.principals_for(bob.public) == ["bob"]
    assert signers.remove("bob") == 1
    assert signers.principals_for(bob.public) == []
    assert signers.principals_for(alice.public) == ["alice@example.com"]


def test_encrypted_pem_and_open_keys_are_refused_with_a_way_out(tmp_path: Path) -> None:
    key = _write_key(tmp_path / "k", PrivateKey(SEED))
    key.chmod(0o644)
    with pytest.raises(Refused, match="readable by others") as loose:
        sshsig.load_private_key(key)
    assert "chmod 600" in loose.value.hint
    pem = tmp_path / "pem"
    pem.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    pem.chmod(0o600)
    with pytest.raises(InvalidInput, match="not an OpenSSH private key"):
        sshsig.load_private_key(pem)
    if SSH_KEYGEN is not None:
        assert _keygen("-q", "-t", "ed25519", "-N", "pw", "-f", "enc", cwd=tmp_path).returncode == 0
        with pytest.raises(InvalidInput, match="encrypted") as exc:
            sshsig.load_private_key(tmp_path / "enc")
        assert "ssh-keygen -p" in exc.value.hint
        assert (
            _keygen("-q", "-t", "rsa", "-b", "1024", "-N", "", "-f", "rsa", cwd=tmp_path).returncode
            == 0
        )
        with pytest.raises(InvalidInput, match="ed25519"):
            sshsig.load_private_key(tmp_path / "rsa")


def test_allowed_signers_options() -> None:
    key = PrivateKey(SEED).public
    blob = key.openssh()
    parse = sshsig.parse_signer_line
    line = parse(f'"a@x,b@x" namespaces="git,agentstack-bundle" {blob} laptop')
    assert line is not None and line.principals == "a@x,b@x" and line.comment == "laptop"
    assert line.allows("agentstack-bundle", 0) and not line.allows("file", 0)
    open_line = parse(f"c@x {blob}")
    assert open_line is not None and open_line.allows("anything", 0)
    assert parse(f"d@x cert-authority {blob}") is None  # a CA line trusts no plain key
    assert parse(f"d@x no-such-option {blob}") is None  # unknown: fail closed
    assert parse(f'e@x valid-before="20000101" {blob}') is not None
    expired = parse(f'e@x valid-before="20000101Z" {blob}')
    assert expired is not None and not expired.allows("agentstack-bundle", 1e9 * 2)
    assert parse("# comment") is None and parse("") is None
    assert parse(f"f@x ssh-rsa {blob.split()[1]}") is None


def test_shared_line_keeps_other_principals_and_options(tmp_path: Path) -> None:
    key = PrivateKey(SEED).public
    path = tmp_path / "allowed_signers"
    path.write_text(f'a@x,b@x namespaces="agentstack-bundle" {key.openssh()}\n')
    signers = AllowedSigners(path)
    assert signers.remove("a@x") == 1
    assert path.read_text() == f'b@x namespaces="agentstack-bundle" {key.openssh()}\n'
    with pytest.raises(InvalidInput):
        signers.add("bad principal,with comma", key)


@settings(max_examples=25, deadline=None)
@given(message=st.binary(max_size=300), flip=st.integers(min_value=0))
def test_any_changed_byte_breaks_the_signature(message: bytes, flip: int) -> None:
    key = PrivateKey(SEED)
    armoured = sshsig.sign(key, message).encode()
    assert sshsig.verify(armoured, message).public_key == key.public
    if message:
        index = flip % len(message)
        changed = message[:index] + bytes([message[index] ^ 1]) + message[index + 1 :]
        with pytest.raises(SignatureError):
            sshsig.verify(armoured, changed)


def test_malformed_signatures_are_refused_not_crashed() -> None:
    key = PrivateKey(SEED)
    good = sshsig.sign(key, b"m")
    body = "".join(good.splitlines()[1:-1])
    import base64

    blob = base64.b64decode(body)
    cases = [
        b"",
        b"not armour",
        good.replace("SSH SIGNATURE", "PGP SIGNATURE").encode(),
        (b"-----BEGIN SSH SIGNATURE-----\n!!!\n-----END SSH SIGNATURE-----\n"),
    ]
    for cut in (6, 10, 30, len(blob) - 1):
        encoded = base64.b64encode(blob[:cut]).decode()
        cases.append(
            f"-----BEGIN SSH SIGNATURE-----\n{encoded}\n-----END SSH SIGNATURE-----\n".encode()
        )
    encoded = base64.b64encode(blob + b"x").decode()
    cases.append(
        f"-----BEGIN SSH SIGNATURE-----\n{encoded}\n-----END SSH SIGNATURE-----\n".encode()
    )
    for case in cases:
        with pytest.raises(SignatureError):
            sshsig.verify(case, b"m")


def test_keys_commands(tmp_path: Path) -> None:
    made = run_cli("keys", "generate", "work", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    home = Path(os.environ["AGENTSTACK_HOME"])
    private = home / "keys" / "work"
    assert private.stat().st_mode & 0o777 == 0o600
    assert (home / "keys").stat().st_mode & 0o777 == 0o700
    public_line = made.stdout.strip()
    assert public_line.startswith("ssh-ed25519 ") and public_line.endswith(" work")
    assert run_cli("keys", "generate", "work", cwd=tmp_path).returncode == 1  # never replaced
    exported = run_cli("keys", "export", "work", cwd=tmp_path)
    assert exported.stdout.strip() == public_line
    assert run_cli("keys", "trust", "alice@example.com", public_line, cwd=tmp_path).returncode == 0
    listed = run_cli("keys", "list", "--json", cwd=tmp_path)
    import json

    doc = json.loads(listed.stdout)
    assert [k["name"] for k in doc["keys"]] == ["work"]
    assert doc["signers"][0]["principals"] == "alice@example.com"
    assert doc["signers"][0]["namespaces"] == ["agentstack-bundle"]
    assert run_cli("keys", "untrust", "alice@example.com", cwd=tmp_path).returncode == 0
    assert run_cli("keys", "untrust", "alice@example.com", cwd=tmp_path).returncode == 1
    assert run_cli("keys", "generate", "../evil", cwd=tmp_path).returncode == 2
    assert keys.read_public_key(str(home / "keys" / "work.pub")) == PublicKey.parse(public_line)

"""Signing keys and trusted signers, under `$AGENTSTACK_HOME`.

- `keys/NAME`: an unencrypted OpenSSH ed25519 private key, 0600 in a 0700 directory (the same file
  `ssh-keygen -t ed25519 -N ''` writes, so `ssh-keygen -Y sign -f keys/NAME` can use it too);
- `keys/NAME.pub`: its OpenSSH public key line;
- `allowed_signers`: whom bundles are accepted from (OpenSSH format, `namespaces="agentstack-bundle"`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from agentstack import layout
from agentstack.errors import InvalidInput, Refused
from agentstack.paths import agentstack_home, ensure_private_dir
from agentstack.share.sshsig import AllowedSigners, PrivateKey, PublicKey, load_private_key

_KEY_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def keys_dir(home: Path | None = None) -> Path:
    return Path(layout.keys_dir(str(home or agentstack_home())))


def allowed_signers(home: Path | None = None) -> AllowedSigners:
    return AllowedSigners(Path(layout.allowed_signers(str(home or agentstack_home()))))


def check_key_name(name: str) -> str:
    if not _KEY_NAME.fullmatch(name) or name.endswith(".pub"):
        raise InvalidInput(
            f"key name {name[:64]!r} is not allowed",
            hint="use lowercase letters, digits, '.', '_' and '-' (for example 'work')",
        )
    return name


@dataclass(frozen=True, kw_only=True)
class KeyInfo:
    name: str
    public: PublicKey
    path: Path


def generate(name: str, home: Path | None = None) -> KeyInfo:
    """Create a new key; never replaces one (O_EXCL), and the private half is 0600 from birth."""
    check_key_name(name)
    directory = ensure_private_dir(keys_dir(home))
    key = PrivateKey.generate(comment=name)
    path = directory / name
    try:
        fd = os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except FileExistsError:
        raise Refused(
            f"a key named {name!r} already exists ({path})",
            hint="choose another name; 'agentstack keys list' shows the existing ones",
        ) from None
    try:
        os.write(fd, key.openssh().encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    from agentstack.fsutil import write_atomic

    write_atomic(directory / f"{name}.pub", (key.public.openssh(name) + "\n").encode(), 0o644)
    return KeyInfo(name=name, public=key.public, path=path)


def load(name: str, home: Path | None = None) -> PrivateKey:
    check_key_name(name)
    path = keys_dir(home) / name
    if not path.exists():
        raise InvalidInput(
            f"no key named {name!r} in {keys_dir(home)}",
            hint="create one with 'agentstack keys generate NAME', or sign with --ssh-key PATH",
        )
    return load_private_key(path)


def list_keys(home: Path | None = None) -> list[KeyInfo]:
    directory = keys_dir(home)
    if not directory.is_dir():
        return []
    out = []
    for entry in sorted(directory.iterdir()):
        if entry.name.endswith(".pub") or not _KEY_NAME.fullmatch(entry.name):
            continue
        try:
            public = load_private_key(entry).public
        except (InvalidInput, Refused):
            continue
        out.append(KeyInfo(name=entry.name, public=public, path=entry))
    return out


def signing_key(name: str | None, ssh_key: Path | None) -> PrivateKey:
    """The key a signing command uses: `--key NAME`, `--ssh-key PATH` (an OpenSSH private key
    file), or the only key there is."""
    if name is not None and ssh_key is not None:
        raise InvalidInput("give --key NAME or --ssh-key PATH, not both")
    if ssh_key is not None:
        return load_private_key(ssh_key.expanduser())
    if name is not None:
        return load(name)
    return default_key()


def default_key(home: Path | None = None) -> PrivateKey:
    """The only key there is; several keys need --key NAME."""
    found = list_keys(home)
    if not found:
        raise Refused(
            "no signing key yet",
            hint="create one with 'agentstack keys generate NAME', or pass --ssh-key PATH",
        )
    if len(found) > 1:
        raise InvalidInput(
            "several signing keys exist: " + ", ".join(k.name for k in found),
            hint="choose one with --key NAME",
        )
    return load_private_key(found[0].path)


def read_public_key(value: str) -> PublicKey:
    """A public key given as an OpenSSH line, or as the path of a file holding one."""
    text = value
    if not value.lstrip().startswith("ssh-"):
        path = Path(value).expanduser()
        try:
            text = path.read_text(encoding="utf-8")[:16384]
        except (OSError, UnicodeDecodeError):
            raise InvalidInput(
                f"{value[:80]!r} is neither an OpenSSH public key line nor a readable .pub file",
                hint="pass the line printed by 'agentstack keys export NAME'",
            ) from None
        if "PRIVATE KEY" in text:
            raise InvalidInput(f"{path} is a private key; pass the public key (.pub)")
    return PublicKey.parse(text.strip().splitlines()[0] if text.strip() else "")

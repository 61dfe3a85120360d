"""The secret store: `$AGENTSTACK_HOME/secrets/NAME`, one file per secret (directory 0700, files
0600), written atomically. Secrets are referenced as `secret:NAME` and never rendered into native
configs; under `agentstack run` only the credential proxy (in the unconfined parent) reads them,
and the sandbox denies the whole of `$AGENTSTACK_HOME` to the confined process.

Landlock denies reading a secret, but not `stat()` (no Landlock right covers a file's attributes),
and the store's paths are predictable. So that a size says nothing of a secret's length, every
file is exactly `FILE_BYTES` long: the value, a newline, then random padding (random, not zeros,
so a compressing file system allocates the same blocks for every secret). A value never holds a
newline, so the first one ends it. A file from an older agentstack (the bare value) is still read,
and `seal` rewrites it padded; `run` seals each secret it hands to the proxy before the sandbox
starts."""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path
from typing import Any

from agentstack import layout
from agentstack.errors import InvalidInput, Refused
from agentstack.fsutil import write_atomic
from agentstack.manifest.view import SECRET_NAME_PATTERN
from agentstack.paths import agentstack_home
from agentstack.storage import storage_error

SECRETS_DIR = layout.SECRETS
MAX_SECRET_BYTES = 64 * 1024
FILE_BYTES = MAX_SECRET_BYTES + 1  # every stored secret file, whatever the value's length
_NAME = re.compile(SECRET_NAME_PATTERN)


class SecretStore:
    def __init__(self, home: Path | None = None) -> None:
        self.home = home if home is not None else agentstack_home()
        self.directory = self.home / SECRETS_DIR

    # ------------------------------------------------------------------ paths and checks

    @staticmethod
    def check_name(name: str) -> str:
        if not _NAME.match(name):
            raise InvalidInput(
                f"{name!r} is not a secret name",
                hint="letters, digits, '.', '_' and '-', starting with a letter or digit, "
                "at most 64 characters",
            )
        return name

    @staticmethod
    def check_value(value: str) -> str:
        if not value:
            raise InvalidInput("the secret is empty; nothing was stored")
        if any(c in value for c in "\0\r\n"):
            raise InvalidInput(
                "the secret contains a NUL, carriage return or newline",
                hint="a secret is injected into an HTTP header; give it on one line",
            )
        if len(value.encode("utf-8")) > MAX_SECRET_BYTES:
            raise InvalidInput(f"the secret is longer than {MAX_SECRET_BYTES} bytes")
        return value

    def path(self, name: str) -> Path:
        return self.directory / self.check_name(name)

    def _ensure_directory(self) -> None:
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.directory, 0o700)
        self._check_directory(fix=True)

    def _check_directory(self, *, fix: bool) -> None:
        info = os.lstat(self.directory)
        if not stat.S_ISDIR(info.st_mode):
            raise Refused(
                f"{self.directory} is not a directory (a symbolic link?); refusing to use it",
                hint="move it away; agentstack recreates the secret store",
            )
        if info.st_uid != os.geteuid():
            raise Refused(
                f"{self.directory} belongs to uid {info.st_uid}, not to you; refusing to use it"
            )
        if info.st_mode & 0o077:
            if not fix:
                raise Refused(
                    f"{self.directory} is accessible to other users (mode "
                    f"{stat.S_IMODE(info.st_mode):04o})",
                    hint=f"chmod 700 {self.directory}",
                )
            os.chmod(self.directory, 0o700)

    # ------------------------------------------------------------------ operations

    def set(self, name: str, value: str) -> Path:
        """Store `value` as NAME, padded to FILE_BYTES: a 0600 temp file, fsync, rename over,
        fsync the directory. A full disk or a read-only store is a StorageError (exit 1) and the
        old value, if any, stays."""
        target = self.path(name)
        data = pad(self.check_value(value).encode("utf-8"))
        try:
            self._write(name, target, data)
        except OSError as exc:
            raise storage_error(
                exc,
                self.directory,
                f"storing secret {name} (any old value is kept as it was)",
                restate=True,
            ) from exc
        return target

    def _write(self, name: str, target: Path, data: bytes) -> None:
        self._ensure_directory()
        # The one atomic writer: temp file beside it (O_EXCL|O_NOFOLLOW, 0600), fsync, rename
        # over, fsync the directory; a link in place of the directory is refused.
        write_atomic(target, data, 0o600, base=self.directory)

    def seal(self, name: str) -> bool:
        """Rewrite NAME padded if an older agentstack stored it bare; True when rewritten."""
        path = self.check(name)
        if os.lstat(path).st_size == FILE_BYTES:
            return False
        self.set(name, self.get(name))
        return True

    def get(self, name: str) -> str:
        path = self.path(name)
        if not self.directory.exists():
            raise Refused(f"no secret {name!r}", hint=f"agentstack secret set {name}")
        self._check_directory(fix=False)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            raise Refused(f"no secret {name!r}", hint=f"agentstack secret set {name}") from None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if info.st_mode & 0o077 or info.st_uid != os.geteuid():
                raise Refused(
                    f"{path} is accessible to other users or not yours; refusing to use it",
                    hint=f"chmod 600 {path}",
                )
            data = handle.read(FILE_BYTES + 1)
        try:
            return self.check_value(unpad(data).decode("utf-8"))
        except (UnicodeDecodeError, InvalidInput, ValueError):
            raise Refused(
                f"{path} is not a secret agentstack stored (damaged, or written by hand)",
                hint=f"store it again: agentstack secret set {name}",
            ) from None

    def check(self, name: str) -> Path:
        """The path of a stored secret, after checking it is a private regular file of ours,
        without reading it (the proxy reads it itself)."""
        path = self.path(name)
        if not self.directory.exists():
            raise Refused(f"no secret {name!r}", hint=f"agentstack secret set {name}")
        self._check_directory(fix=False)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            raise Refused(f"no secret {name!r}", hint=f"agentstack secret set {name}") from None
        if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077 or info.st_uid != os.geteuid():
            raise Refused(
                f"{path} is not a private regular file of yours; refusing to use it",
                hint=f"chmod 600 {path}",
            )
        return path

    def exists(self, name: str) -> bool:
        return self.path(name).is_file()

    def names(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(
            entry.name
            for entry in self.directory.iterdir()
            if _NAME.match(entry.name) and entry.is_file() and not entry.is_symlink()
        )

    def remove(self, name: str) -> bool:
        path = self.path(name)
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        return True


def server_env(
    entries: dict[str, Any], env: dict[str, str], store: SecretStore | None = None
) -> list[str]:
    """Set a server's environment entries (`{"literal": ...}` or `{"secret": NAME}`, by name) in
    `env`, the secrets read from `store` (this machine's, opened on the first secret); the secret
    values set, for callers that must keep them out of what they show. ValueError naming the
    secret and the command that sets it when one is missing."""
    from agentstack.errors import AgentstackError

    values: list[str] = []
    for key, source in sorted(entries.items()):
        if "literal" in source:
            env[key] = str(source["literal"])
            continue
        secret = str(source.get("secret"))
        store = store or SecretStore()
        try:
            env[key] = store.get(secret)
        except AgentstackError as exc:
            raise ValueError(f"{exc.message}: run 'agentstack secret set {secret}'"
                             if "no secret" in exc.message else exc.message) from None
        values.append(env[key])
    return values


def pad(value: bytes) -> bytes:
    """The stored form of `value` (no newline in it): exactly FILE_BYTES long."""
    if b"\n" in value or len(value) >= FILE_BYTES:
        raise ValueError("a secret value is at most MAX_SECRET_BYTES and holds no newline")
    return value + b"\n" + os.urandom(FILE_BYTES - len(value) - 1)


def unpad(data: bytes) -> bytes:
    """The value in a stored secret file: padded (this version) or bare (older versions)."""
    if len(data) == FILE_BYTES:
        end = data.find(b"\n")
        if end < 0:
            raise ValueError("a padded secret file without its end marker")
        return data[:end]
    if data.endswith(b"\n"):  # bare, with one line ending (as a hand-written file may have)
        data = data[:-2] if data.endswith(b"\r\n") else data[:-1]
    if len(data) > MAX_SECRET_BYTES or b"\n" in data:
        raise ValueError("not a stored secret")
    return data

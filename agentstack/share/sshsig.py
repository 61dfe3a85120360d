"""OpenSSH signatures (SSHSIG) over Ed25519, OpenSSH key files, and `allowed_signers`.

Pure Python over PyNaCl, byte-compatible with `ssh-keygen -Y sign` / `-Y verify`:

- a signature signs `"SSHSIG" || string(namespace) || string("") || string(hash_alg) ||
  string(H(message))` and is armoured as `-----BEGIN SSH SIGNATURE-----`;
- keys are `openssh-key-v1` files (unencrypted only: agentstack holds no passphrase prompt);
- `allowed_signers` lines are `principals [options] keytype base64 [comment]`, where
  `namespaces="…"`, `valid-after`, `valid-before` and `cert-authority` are understood.

Everything parsed here comes from outside (a bundle, a key file, a user-edited signers file), so
every length is bounded and any trailing or missing byte is an error.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from agentstack.errors import InvalidInput, Refused

NAMESPACE = "agentstack-bundle"
KEY_TYPE = "ssh-ed25519"
_MAGIC = b"SSHSIG"
_SIG_VERSION = 1
_BEGIN_SIG = "-----BEGIN SSH SIGNATURE-----"
_END_SIG = "-----END SSH SIGNATURE-----"
_BEGIN_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----"
_END_KEY = "-----END OPENSSH PRIVATE KEY-----"
_KEY_MAGIC = b"openssh-key-v1\0"
_HASHES = {"sha512": hashlib.sha512, "sha256": hashlib.sha256}
MAX_SIGNATURE_BYTES = 16 * 1024
MAX_KEY_FILE_BYTES = 64 * 1024
MAX_SIGNERS_BYTES = 1024 * 1024


class SignatureError(Refused):
    """A signature that does not hold; `code` says which way (for tests and --json)."""

    def __init__(self, code: str, message: str, *, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.code = code


class KeyFileError(InvalidInput):
    """A key file agentstack cannot use (encrypted, not ed25519, damaged)."""


# ------------------------------------------------------------------------------ wire encoding


def _string(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


class _Reader:
    """SSH wire-format reader; every read is bounds-checked."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def _fail(self, problem: str) -> SignatureError:
        return SignatureError("malformed", f"{self.what}: {problem}")

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise self._fail("truncated")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def uint32(self) -> int:
        return int.from_bytes(self.take(4), "big")

    def string(self) -> bytes:
        return self.take(self.uint32())

    def end(self) -> None:
        if self.pos != len(self.data):
            raise self._fail(f"{len(self.data) - self.pos} unexpected trailing bytes")


# ------------------------------------------------------------------------------ public keys


@dataclass(frozen=True, slots=True)
class PublicKey:
    """An Ed25519 public key (32 raw bytes)."""

    raw: bytes

    @property
    def blob(self) -> bytes:
        return _string(KEY_TYPE.encode()) + _string(self.raw)

    @property
    def fingerprint(self) -> str:
        """`SHA256:…` exactly as `ssh-keygen -l` prints it."""
        digest = hashlib.sha256(self.blob).digest()
        return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")

    def openssh(self, comment: str = "") -> str:
        line = f"{KEY_TYPE} {base64.b64encode(self.blob).decode()}"
        return f"{line} {comment}" if comment else line

    @classmethod
    def from_blob(cls, blob: bytes, what: str = "public key") -> PublicKey:
        reader = _Reader(blob, what)
        key_type = reader.string()
        if key_type != KEY_TYPE.encode():
            raise SignatureError(
                "unsupported-key",
                f"{what}: key type {key_type[:40].decode('ascii', 'replace')!r} is not supported; "
                f"agentstack signs and verifies {KEY_TYPE} only",
            )
        raw = reader.string()
        reader.end()
        if len(raw) != 32:
            raise SignatureError("malformed", f"{what}: an ed25519 key is 32 bytes, not {len(raw)}")
        return cls(raw)

    @classmethod
    def parse(cls, text: str) -> PublicKey:
        """An OpenSSH public key line: `ssh-ed25519 AAAA… [comment]`."""
        fields = text.strip().split()
        if len(fields) < 2 or fields[0] != KEY_TYPE:
            raise InvalidInput(
                f"not an OpenSSH {KEY_TYPE} public key: {text.strip()[:60]!r}",
                hint="pass the line printed by 'agentstack keys export NAME' (or an id_ed25519.pub)",
            )
        try:
            blob = base64.b64decode(fields[1], validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput("the public key's base64 does not decode") from None
        try:
            return cls.from_blob(blob)
        except SignatureError as exc:
            raise InvalidInput(exc.message) from None


# ------------------------------------------------------------------------------ private keys


@dataclass(frozen=True, slots=True)
class PrivateKey:
    seed: bytes  # 32 bytes
    comment: str = ""

    @property
    def public(self) -> PublicKey:
        from nacl.signing import SigningKey

        return PublicKey(bytes(SigningKey(self.seed).verify_key))

    @classmethod
    def generate(cls, comment: str = "") -> PrivateKey:
        return cls(os.urandom(32), comment)

    def sign_raw(self, data: bytes) -> bytes:
        from nacl.signing import SigningKey

        return bytes(SigningKey(self.seed).sign(data).signature)

    def openssh(self) -> str:
        """The key as an unencrypted `openssh-key-v1` file (what `ssh-keygen -N ''` writes)."""
        public = self.public
        check = os.urandom(4)
        private = (
            check
            + check
            + _string(KEY_TYPE.encode())
            + _string(public.raw)
            + _string(self.seed + public.raw)
            + _string(self.comment.encode())
        )
        pad = 1
        while len(private) % 8:
            private += bytes([pad])
            pad += 1
        body = (
            _KEY_MAGIC
            + _string(b"none")
            + _string(b"none")
            + _string(b"")
            + (1).to_bytes(4, "big")
            + _string(public.blob)
            + _string(private)
        )
        encoded = base64.b64encode(body).decode()
        lines = [encoded[i : i + 70] for i in range(0, len(encoded), 70)]
        return "\n".join([_BEGIN_KEY, *lines, _END_KEY]) + "\n"

    @classmethod
    def parse(cls, text: str, where: str) -> PrivateKey:
        stripped = text.strip()
        if stripped.startswith("-----BEGIN") and not stripped.startswith(_BEGIN_KEY):
            raise KeyFileError(
                f"{where}: not an OpenSSH private key (found {stripped.splitlines()[0][:40]!r})",
                hint="agentstack uses ed25519 keys in OpenSSH format "
                "('ssh-keygen -t ed25519', or 'agentstack keys generate NAME')",
            )
        if not stripped.startswith(_BEGIN_KEY) or not stripped.endswith(_END_KEY):
            raise KeyFileError(f"{where}: not an OpenSSH private key file")
        inner = stripped[len(_BEGIN_KEY) : -len(_END_KEY)]
        try:
            body = base64.b64decode("".join(inner.split()), validate=True)
        except (binascii.Error, ValueError):
            raise KeyFileError(f"{where}: the key's base64 does not decode") from None
        try:
            return cls._decode(body, where)
        except SignatureError as exc:
            raise KeyFileError(f"{where}: damaged key file ({exc.message})") from None

    @classmethod
    def _decode(cls, body: bytes, where: str) -> PrivateKey:
        if not body.startswith(_KEY_MAGIC):
            raise KeyFileError(f"{where}: not an openssh-key-v1 file")
        reader = _Reader(body[len(_KEY_MAGIC) :], where)
        cipher, kdf = reader.string(), reader.string()
        reader.string()  # kdf options
        if cipher != b"none" or kdf != b"none":
            raise KeyFileError(
                f"{where}: the key is encrypted with a passphrase; agentstack cannot decrypt it",
                hint='make an unencrypted copy for signing (\'cp KEY COPY; ssh-keygen -p -N "" '
                "-f COPY', then chmod 600 COPY), or create a signing key with "
                "'agentstack keys generate NAME'",
            )
        if reader.uint32() != 1:
            raise KeyFileError(f"{where}: holds more than one key")
        public = PublicKey.from_blob(reader.string(), where)
        private = _Reader(reader.string(), where)
        reader.end()
        if private.uint32() != private.uint32():
            raise KeyFileError(f"{where}: check bytes differ (a damaged or wrongly decrypted key)")
        if private.string() != KEY_TYPE.encode():
            raise KeyFileError(f"{where}: not an ed25519 key", hint="use 'ssh-keygen -t ed25519'")
        pub = private.string()
        secret = private.string()
        comment = private.string().decode("utf-8", "replace")
        padding = private.data[private.pos :]
        if padding != bytes(range(1, len(padding) + 1)) or len(padding) >= 8:
            raise KeyFileError(f"{where}: bad padding")
        if len(secret) != 64 or pub != public.raw or secret[32:] != pub:
            raise KeyFileError(f"{where}: the private and public halves do not belong together")
        key = cls(secret[:32], comment)
        if key.public.raw != pub:
            raise KeyFileError(f"{where}: the private key does not derive its public key")
        return key


def load_private_key(path: Path) -> PrivateKey:
    """Read an unencrypted OpenSSH ed25519 key that only its owner can read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such key file") from None
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot open the key ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o077:
            raise Refused(
                f"{path}: the private key is readable by others (mode {st.st_mode & 0o777:o})",
                hint=f"chmod 600 {path}",
            )
        data = os.read(fd, MAX_KEY_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_KEY_FILE_BYTES:
        raise KeyFileError(f"{path}: too large for a key file")
    return PrivateKey.parse(data.decode("ascii", "replace"), str(path))


# ------------------------------------------------------------------------------ signatures


@dataclass(frozen=True, slots=True)
class Signature:
    """A parsed SSHSIG: who claims to have signed, for which namespace, with which hash."""

    public_key: PublicKey
    namespace: str
    hash_alg: str
    signature: bytes


def _signed_data(namespace: str, hash_alg: str, message: bytes) -> bytes:
    digest = _HASHES[hash_alg](message).digest()
    return (
        _MAGIC
        + _string(namespace.encode())
        + _string(b"")
        + _string(hash_alg.encode())
        + _string(digest)
    )


def sign(key: PrivateKey, message: bytes, namespace: str = NAMESPACE) -> str:
    """An armoured SSHSIG over `message`, as `ssh-keygen -Y sign -n NAMESPACE` writes it."""
    hash_alg = "sha512"
    raw = key.sign_raw(_signed_data(namespace, hash_alg, message))
    blob = (
        _MAGIC
        + _SIG_VERSION.to_bytes(4, "big")
        + _string(key.public.blob)
        + _string(namespace.encode())
        + _string(b"")
        + _string(hash_alg.encode())
        + _string(_string(KEY_TYPE.encode()) + _string(raw))
    )
    encoded = base64.b64encode(blob).decode()
    lines = [encoded[i : i + 70] for i in range(0, len(encoded), 70)]
    return "\n".join([_BEGIN_SIG, *lines, _END_SIG]) + "\n"


def parse_signature(armoured: bytes) -> Signature:
    if len(armoured) > MAX_SIGNATURE_BYTES:
        raise SignatureError(
            "malformed", f"the signature is larger than {MAX_SIGNATURE_BYTES} bytes"
        )
    try:
        text = armoured.decode("ascii").strip()
    except UnicodeDecodeError:
        raise SignatureError("malformed", "the signature is not ASCII armour") from None
    if not text.startswith(_BEGIN_SIG) or not text.endswith(_END_SIG):
        raise SignatureError("malformed", "the signature is not an SSH SIGNATURE block")
    try:
        blob = base64.b64decode(
            "".join(text[len(_BEGIN_SIG) : -len(_END_SIG)].split()), validate=True
        )
    except (binascii.Error, ValueError):
        raise SignatureError("malformed", "the signature's base64 does not decode") from None
    reader = _Reader(blob, "signature")
    if reader.take(6) != _MAGIC:
        raise SignatureError("malformed", "the signature does not start with SSHSIG")
    version = reader.uint32()
    if version != _SIG_VERSION:
        raise SignatureError("malformed", f"SSHSIG version {version} is not supported")
    public = PublicKey.from_blob(reader.string(), "the signing key")
    namespace = reader.string().decode("utf-8", "replace")
    reader.string()  # reserved
    hash_alg = reader.string().decode("ascii", "replace")
    inner = _Reader(reader.string(), "signature")
    reader.end()
    if hash_alg not in _HASHES:
        raise SignatureError("malformed", f"signature hash {hash_alg[:20]!r} is not supported")
    if inner.string() != KEY_TYPE.encode():
        raise SignatureError("malformed", "the signature is not an ed25519 signature")
    raw = inner.string()
    inner.end()
    if len(raw) != 64:
        raise SignatureError("malformed", "an ed25519 signature is 64 bytes")
    return Signature(public, namespace, hash_alg, raw)


def verify(armoured: bytes, message: bytes, namespace: str = NAMESPACE) -> Signature:
    """Check that `armoured` is a valid signature over `message` in `namespace` by the key it
    names. Who that key belongs to is the caller's question (`AllowedSigners.principals_for`)."""
    from nacl.exceptions import BadSignatureError
    from nacl.signing import VerifyKey

    parsed = parse_signature(armoured)
    if parsed.namespace != namespace:
        raise SignatureError(
            "wrong-namespace",
            f"the signature is for namespace {parsed.namespace[:64]!r}, not {namespace!r}: "
            "it was made for another purpose and does not sign this bundle",
        )
    try:
        VerifyKey(parsed.public_key.raw).verify(
            _signed_data(namespace, parsed.hash_alg, message), parsed.signature
        )
    except (BadSignatureError, ValueError):
        raise SignatureError(
            "bad-signature",
            "the signature does not match the statement: the statement was changed after it was "
            "signed, or the signature belongs to other bytes",
        ) from None
    return parsed


# ------------------------------------------------------------------------------ allowed_signers

_PRINCIPAL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}")


def check_principal(principal: str) -> str:
    if not _PRINCIPAL.fullmatch(principal):
        raise InvalidInput(
            f"principal {principal[:64]!r} is not allowed",
            hint="use letters, digits and . _ @ + - (an email address works), starting with a "
            "letter or digit",
        )
    return principal


@dataclass(frozen=True, slots=True)
class SignerLine:
    principals: str  # as written: a comma-separated list of names or patterns
    key: PublicKey
    namespaces: tuple[str, ...] | None  # None: every namespace
    valid_after: float | None = None
    valid_before: float | None = None
    comment: str = ""

    def allows(self, namespace: str, now: float) -> bool:
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        if self.valid_after is not None and now < self.valid_after:
            return False
        return not (self.valid_before is not None and now > self.valid_before)

    def render(self) -> str:
        options = []
        if self.namespaces is not None:
            options.append(f'namespaces="{",".join(self.namespaces)}"')
        line = self.principals + (" " + ",".join(options) if options else "")
        return line + " " + self.key.openssh(self.comment)


def _ssh_time(value: str) -> float | None:
    value = value.strip('"')
    utc = value.endswith(("Z", "z"))
    digits = value[:-1] if utc else value
    formats = {8: "%Y%m%d", 12: "%Y%m%d%H%M", 14: "%Y%m%d%H%M%S"}
    fmt = formats.get(len(digits))
    if fmt is None or not digits.isdigit():
        return None
    parsed = time.strptime(digits, fmt)
    import calendar

    return float(calendar.timegm(parsed)) if utc else time.mktime(parsed)


def _split_fields(line: str) -> list[str]:
    """Whitespace-separated fields; double quotes group (ssh's own rule for this file)."""
    fields: list[str] = []
    current: list[str] = []
    quoted = False
    for char in line:
        if char == '"':
            quoted = not quoted
            current.append(char)
        elif char.isspace() and not quoted:
            if current:
                fields.append("".join(current))
                current = []
        else:
            current.append(char)
    if quoted:
        raise ValueError("unbalanced quotes")
    if current:
        fields.append("".join(current))
    return fields


def _split_options(text: str) -> list[str]:
    out: list[str] = []
    current: list[str] = []
    quoted = False
    for char in text:
        if char == '"':
            quoted = not quoted
        if char == "," and not quoted:
            out.append("".join(current))
            current = []
        else:
            current.append(char)
    out.append("".join(current))
    return out


def parse_signer_line(line: str) -> SignerLine | None:
    """One line of `allowed_signers`; None for blanks, comments and lines that cannot be read
    (a line agentstack cannot understand trusts nothing)."""
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return None
    try:
        fields = _split_fields(stripped)
    except ValueError:
        return None
    if len(fields) < 3:
        return None
    principals = fields[0].strip('"')
    rest = fields[1:]
    namespaces: tuple[str, ...] | None = None
    valid_after = valid_before = None
    if rest[0] != KEY_TYPE and not rest[0].startswith(("ssh-", "ecdsa-", "sk-")):
        for option in _split_options(rest[0]):
            name, _, value = option.partition("=")
            name = name.lower()
            if name == "cert-authority":
                return None  # certificates are not supported: such a line trusts no plain key
            if name == "namespaces":
                namespaces = tuple(v for v in value.strip('"').split(",") if v)
            elif name == "valid-after":
                valid_after = _ssh_time(value)
                if valid_after is None:
                    return None
            elif name == "valid-before":
                valid_before = _ssh_time(value)
                if valid_before is None:
                    return None
            else:
                return None  # an option we do not understand: fail closed
        rest = rest[1:]
    if len(rest) < 2 or rest[0] != KEY_TYPE:
        return None
    try:
        key = PublicKey.from_blob(base64.b64decode(rest[1], validate=True))
    except (binascii.Error, ValueError, SignatureError):
        return None
    return SignerLine(
        principals=principals,
        key=key,
        namespaces=namespaces,
        valid_after=valid_after,
        valid_before=valid_before,
        comment=" ".join(rest[2:]),
    )


class AllowedSigners:
    """An OpenSSH `allowed_signers` file (read whole; written atomically, 0600)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _text(self) -> str:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return ""
        try:
            data = os.read(fd, MAX_SIGNERS_BYTES + 1)
        finally:
            os.close(fd)
        if len(data) > MAX_SIGNERS_BYTES:
            raise Refused(f"{self.path} is larger than {MAX_SIGNERS_BYTES} bytes")
        return data.decode("utf-8", "replace")

    def lines(self) -> list[SignerLine]:
        return [p for p in map(parse_signer_line, self._text().splitlines()) if p is not None]

    def principals_for(
        self, key: PublicKey, namespace: str = NAMESPACE, now: float | None = None
    ) -> list[str]:
        """The principals this file trusts `key` as, for `namespace`, at `now`."""
        moment = time.time() if now is None else now
        out: list[str] = []
        for line in self.lines():
            if line.key == key and line.allows(namespace, moment):
                out.extend(p for p in line.principals.split(",") if p and p not in out)
        return out

    def add(self, principal: str, key: PublicKey, comment: str = "") -> bool:
        """Trust `key` as `principal` for agentstack bundles; False when it already was."""
        check_principal(principal)
        if principal in self.principals_for(key):
            return False
        line = SignerLine(principal, key, (NAMESPACE,), comment=comment).render()
        text = self._text()
        if text and not text.endswith("\n"):
            text += "\n"
        self._write(text + line + "\n")
        return True

    def remove(self, principal: str) -> int:
        """Stop trusting `principal`: its own lines go, and it leaves shared lines. Returns the
        number of lines changed."""
        check_principal(principal)
        changed = 0
        out: list[str] = []
        for raw in self._text().splitlines():
            parsed = parse_signer_line(raw)
            names = parsed.principals.split(",") if parsed is not None else []
            if parsed is None or principal not in names:
                out.append(raw)
                continue
            changed += 1
            kept = [n for n in names if n != principal]
            if kept:
                # Keep the line's options and key exactly; only the principals field changes.
                line = raw.strip()
                first = _split_fields(line)[0]
                out.append(",".join(kept) + line[len(first) :])
        if changed:
            self._write("".join(f"{line}\n" for line in out))
        return changed

    def _write(self, text: str) -> None:
        from agentstack.fsutil import write_atomic
        from agentstack.paths import ensure_private_dir

        ensure_private_dir(self.path.parent)
        write_atomic(self.path, text.encode("utf-8"), 0o600)

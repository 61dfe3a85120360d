"""The `.astack` container: a gzip-compressed POSIX (ustar) tar, written byte for byte and read
back by a strict streaming reader.

Writing is deterministic: mtime 0, uid/gid 0, no user names, modes 0644/0755, gzip mtime 0 and no
file name; a name longer than ustar allows goes into a pax header holding only `path`.

Reading accepts only regular-file members (and `path`-only pax headers), checks every header's
checksum and magic, and inflates at most one 64 KiB chunk ahead of what is asked for: the ratio and the total are
checked as the stream is inflated, so a decompression bomb is refused before it is expanded into
memory or onto disk, and anything after the end-of-archive marker is refused. (`tarfile` and
`zipfile` strip `/` and `..` silently, follow pax overrides, or let the last duplicate win.)
"""

from __future__ import annotations

import unicodedata
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

import blake3

from agentstack.errors import Refused
from agentstack.lock.gitmeta import is_git_name

MAX_RATIO = 200  # inflated bytes per compressed byte, once more than RATIO_GRACE are out
RATIO_GRACE = 1 << 20
MAX_PAX_BYTES = 8192
BLOCK = 512
_BLOCK = BLOCK
_CHUNK = 1 << 16
MAX_PATH_BYTES = 1024
MAX_DEPTH = 32
# NAME_MAX is 255 bytes; a release writes `.<name>.agentstack-<12 hex>` next to a file first.
MAX_COMPONENT_BYTES = 200
# Bidirectional overrides and isolates: they make a name read differently from its bytes.
_BIDI = frozenset(chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A)))


class BundleRejected(Refused):
    """A bundle that is refused; `code` names the reason (one per kind of refusal)."""

    def __init__(self, code: str, message: str, *, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.code = code


def reject(code: str, message: str, hint: str = "") -> BundleRejected:
    return BundleRejected(code, f"bundle refused ({code}): {message}", hint=hint)


# ------------------------------------------------------------------------------ names


def check_name(path: str) -> None:
    """The rules for every member name, checked before anything is written under it: relative,
    no `..`, `.` or empty component, no NUL or backslash, UTF-8 and NFC, no control, line
    separator or bidirectional-override character, at most MAX_COMPONENT_BYTES per component,
    MAX_PATH_BYTES and MAX_DEPTH in all, and no component git treats as `.git`
    (agentstack.lock.gitmeta)."""
    shown = repr(path[:80])
    if not path:
        raise reject("unsafe-path", "a member has an empty path")
    try:
        raw = path.encode("utf-8")
    except UnicodeEncodeError:
        raise reject("unsafe-path", f"member {shown} is not valid UTF-8") from None
    if "\0" in path or "\\" in path:
        raise reject("unsafe-path", f"member {shown} has a NUL or backslash in its path")
    if path.startswith("/"):
        raise reject("absolute-path", f"member {shown} has an absolute path")
    parts = path.split("/")
    if ".." in parts:
        raise reject("dotdot-path", f"member {shown} climbs out with '..'")
    if any(p in ("", ".") for p in parts):
        raise reject("unsafe-path", f"member {shown} has an empty or '.' path component")
    if len(raw) > MAX_PATH_BYTES or len(parts) > MAX_DEPTH:
        raise reject(
            "unsafe-path",
            f"member {shown} has a path that is too long or deep (at most {MAX_PATH_BYTES} "
            f"bytes and {MAX_DEPTH} components)",
        )
    longest = (
        max(map(len, parts)) if path.isascii() else max(len(p.encode("utf-8")) for p in parts)
    )
    if longest > MAX_COMPONENT_BYTES:
        raise reject(
            "name-too-long",
            f"member {shown} has a path component of {longest} bytes (at most "
            f"{MAX_COMPONENT_BYTES})",
        )
    if not path.isascii() or not path.isprintable():
        for char in path:
            if unicodedata.category(char) in ("Cc", "Zl", "Zp") or char in _BIDI:
                raise reject(
                    "control-character",
                    f"member {path[:80].encode('unicode_escape').decode()!r} has a control "
                    f"character (U+{ord(char):04X}) in its path",
                )
        if unicodedata.normalize("NFC", path) != path:
            raise reject("not-nfc", f"member {shown} is not NFC-normalised Unicode")
    if "git" in path.casefold() or not path.isascii():
        bad = next((p for p in parts if is_git_name(p)), None)
        if bad is not None:
            raise reject(
                "git-metadata",
                f"member {shown} is git metadata ({bad!r}): a bundle never carries a repository",
            )


# ------------------------------------------------------------------------------ writing


def _octal(value: int, width: int) -> bytes:
    return f"{value:0{width - 1}o}".encode() + b"\0"


def _split_name(name: bytes) -> tuple[bytes, bytes] | None:
    if len(name) <= 100:
        return b"", name
    for index in range(len(name) - 1, 0, -1):
        if name[index : index + 1] == b"/" and index <= 155 and len(name) - index - 1 <= 100:
            return name[:index], name[index + 1 :]
    return None


def _header(name: bytes, prefix: bytes, size: int, mode: int, typeflag: bytes) -> bytes:
    block = bytearray(_BLOCK)
    block[0 : len(name)] = name
    block[100:108] = _octal(mode, 8)
    block[108:116] = _octal(0, 8)
    block[116:124] = _octal(0, 8)
    block[124:136] = _octal(size, 12)
    block[136:148] = _octal(0, 12)
    block[148:156] = b" " * 8
    block[156:157] = typeflag
    block[257:263] = b"ustar\0"
    block[263:265] = b"00"
    block[329:337] = _octal(0, 8)
    block[337:345] = _octal(0, 8)
    block[345 : 345 + len(prefix)] = prefix
    block[148:156] = f"{sum(block):06o}".encode() + b"\0 "
    return bytes(block)


def _pad(size: int) -> bytes:
    return b"\0" * (-size % _BLOCK)


def _pax_record(key: str, value: bytes) -> bytes:
    body = f" {key}=".encode() + value + b"\n"
    length = len(body) + 1
    while len(str(length).encode()) + len(body) != length:
        length = len(str(length).encode()) + len(body)
    return str(length).encode() + body


def tar_member(path: str, data: bytes, executable: bool) -> bytes:
    name = path.encode("utf-8")
    mode = 0o755 if executable else 0o644
    split = _split_name(name)
    out = b""
    if split is None:
        pax = _pax_record("path", name)
        out += _header(b"././@PaxHeader", b"", len(pax), 0o644, b"x") + pax + _pad(len(pax))
        split = (b"", name[:100])
    out += _header(split[1], split[0], len(data), mode, b"0") + data + _pad(len(data))
    return out


def write_archive(members: list[tuple[str, bytes, bool]]) -> bytes:
    """A deterministic .tar.gz of (path, bytes, executable), in the order given."""
    import gzip
    import io

    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as gz:
        for path, data, executable in members:
            gz.write(tar_member(path, data, executable))
        gz.write(b"\0" * (2 * _BLOCK))
    return raw.getvalue()


# ------------------------------------------------------------------------------ reading


class Inflater:
    """Reads the bytes asked for from a gzip stream, never inflating more than one chunk (64 KiB)
    ahead of them, and refuses a stream that inflates beyond the caps (a decompression bomb) as
    soon as it does."""

    def __init__(self, handle: IO[bytes], limit: int) -> None:
        self.handle = handle
        self.limit = limit
        self.z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self.total_in = 0
        self.total_out = 0
        self.hasher = blake3.blake3()  # of the compressed file: the bundle digest
        # Inflated, not yet read: at most one chunk is inflated ahead of what was asked for (a
        # header or a small member costs a slice, not a call into zlib), and every chunk passes
        # the bomb checks before any of it is handed on.
        self._buf = b""
        self._pos = 0

    def _feed(self) -> bytes:
        if self.z.unconsumed_tail:
            return self.z.unconsumed_tail
        chunk = self.handle.read(_CHUNK)
        self.total_in += len(chunk)
        self.hasher.update(chunk)
        return chunk

    def read(self, n: int) -> bytes:
        buf, pos = self._buf, self._pos
        if len(buf) - pos >= n:
            self._pos = pos + n
            return buf[pos : pos + n]
        out = bytearray(buf[pos:])
        self._buf, self._pos = b"", 0
        while len(out) < n:
            if self.z.eof:
                raise reject("truncated", "the archive ends in the middle of a member")
            data = self._feed()
            if not data:
                raise reject("truncated", "the file ends before the archive does (truncated)")
            try:
                # The first read exactly (damage right at the start is "not a bundle").
                want = n - len(out) if self.total_out == 0 else max(n - len(out), _CHUNK)
                chunk = self.z.decompress(data, want)
            except zlib.error as exc:
                raise reject("corrupt", f"the compressed data is damaged ({exc})") from None
            self.total_out += len(chunk)
            self._check()
            out += chunk
        if len(out) > n:
            self._buf = bytes(out[n:])
            del out[n:]
        return bytes(out)

    def _check(self) -> None:
        if self.total_out > self.limit:
            raise reject("too-large", f"the archive inflates beyond {self.limit} bytes")
        # Against the compressed bytes inflated so far, not those read ahead: a bomb is refused
        # within RATIO_GRACE plus one chunk of output, whatever the size of its file.
        consumed = self.total_in - len(self.z.unconsumed_tail) - len(self.z.unused_data)
        if self.total_out > RATIO_GRACE and self.total_out > MAX_RATIO * max(consumed, 1):
            raise reject(
                "compression-bomb",
                f"the archive inflates more than {MAX_RATIO}x (a decompression bomb)",
            )

    def finish(self) -> None:
        """After the end-of-archive blocks: only zero padding, then the gzip trailer, then EOF."""
        if self._buf[self._pos :].strip(b"\0"):
            raise reject("trailing-data", "there is data after the end-of-archive marker")
        self._buf, self._pos = b"", 0
        while not self.z.eof:
            data = self._feed()
            if not data:
                raise reject("truncated", "the file ends before the compressed stream does")
            try:
                chunk = self.z.decompress(data, _CHUNK)
            except zlib.error as exc:
                raise reject("corrupt", f"the compressed data is damaged ({exc})") from None
            self.total_out += len(chunk)
            self._check()
            if chunk.strip(b"\0"):
                raise reject("trailing-data", "there is data after the end-of-archive marker")
        rest = self.z.unused_data + self.handle.read(1)
        if rest:
            raise reject("trailing-data", "there are bytes after the end of the compressed archive")


@dataclass(frozen=True, slots=True)
class TarMember:
    path: str
    size: int
    executable: bool


_TYPE_NAMES = {
    b"1": ("hardlink", "a hard link"),
    b"2": ("symlink", "a symbolic link"),
    b"3": ("device", "a character device"),
    b"4": ("device", "a block device"),
    b"5": ("directory-member", "a directory entry"),
    b"6": ("device", "a FIFO"),
    b"7": ("device", "a contiguous file"),
    b"L": ("gnu-longname", "a GNU long-name record"),
    b"K": ("gnu-longname", "a GNU long-link record"),
    b"g": ("pax-global", "a pax global header"),
    b"S": ("sparse", "a sparse file"),
}


def _field(block: bytes, start: int, end: int) -> bytes:
    return block[start:end].split(b"\0", 1)[0]


def _number(block: bytes, start: int, end: int, what: str) -> int:
    raw = block[start:end].rstrip(b"\0 ").lstrip(b" ")
    if not raw or raw.strip(b"01234567"):
        raise reject("bad-header", f"a member header has a malformed {what} field")
    return int(raw, 8)


class TarReader:
    """Iterates the members of a strict ustar stream; the caller must read each member's bytes
    (`read_data`) before asking for the next."""

    def __init__(self, inflater: Inflater) -> None:
        self.src = inflater
        self._pending = 0
        # Off only when the caller checks each name against a list it checked itself.
        self.check_names = True

    def next(self) -> TarMember | None:
        if self._pending:
            raise AssertionError("read the previous member first")
        pax_path: str | None = None
        while True:
            block = self.src.read(_BLOCK)
            if block == bytes(_BLOCK):
                if self.src.read(_BLOCK) != bytes(_BLOCK):
                    raise reject("bad-header", "a lone zero block inside the archive")
                if pax_path is not None:
                    raise reject("bad-header", "a pax header with no member after it")
                return None
            stored = _number(block, 148, 156, "checksum")
            if stored != sum(block[:148]) + 256 + sum(block[156:]):
                raise reject("bad-header", "a member header's checksum does not match (damaged)")
            if block[257:263] != b"ustar\0" or block[263:265] != b"00":
                raise reject("bad-header", "a member header is not POSIX ustar")
            typeflag = block[156:157]
            size = _number(block, 124, 136, "size")
            if typeflag == b"x":
                if pax_path is not None or size > MAX_PAX_BYTES:
                    raise reject("bad-header", "a pax header is repeated or too large")
                pax_path = self._pax(self.src.read(size + (-size % _BLOCK))[:size])
                continue
            if typeflag in _TYPE_NAMES:
                code, what = _TYPE_NAMES[typeflag]
                name = _field(block, 0, 100).decode("utf-8", "replace")
                raise reject(
                    code, f"member {name[:80]!r} is {what}; only regular files are allowed"
                )
            if typeflag not in (b"0", b"\0"):
                raise reject("bad-header", f"member type {typeflag!r} is not allowed")
            mode = _number(block, 100, 108, "mode")
            if mode & 0o7000:
                raise reject("bad-mode", "a member has setuid, setgid or sticky bits")
            if pax_path is not None:
                path = pax_path
            else:
                raw = _field(block, 0, 100)
                prefix = _field(block, 345, 500)
                joined = prefix + b"/" + raw if prefix else raw
                try:
                    path = joined.decode("utf-8")
                except UnicodeDecodeError:
                    raise reject("unsafe-path", "a member name is not UTF-8") from None
            if self.check_names:
                check_name(path)
            self._pending = size
            return TarMember(path=path, size=size, executable=bool(mode & 0o100))

    @staticmethod
    def _pax(data: bytes) -> str:
        pos = 0
        path: str | None = None
        while pos < len(data):
            space = data.find(b" ", pos)
            if space < 0 or not data[pos:space].isdigit():
                raise reject("bad-header", "a malformed pax record")
            length = int(data[pos:space])
            record = data[space + 1 : pos + length]
            if length <= 0 or pos + length > len(data) or not record.endswith(b"\n"):
                raise reject("bad-header", "a malformed pax record")
            key, sep, value = record[:-1].partition(b"=")
            if not sep or key != b"path" or path is not None:
                raise reject(
                    "bad-header",
                    f"pax key {key[:40].decode('ascii', 'replace')!r} is not allowed "
                    "(only a single 'path')",
                )
            try:
                path = value.decode("utf-8")
            except UnicodeDecodeError:
                raise reject("unsafe-path", "a member name is not UTF-8") from None
            pos += length
        if path is None:
            raise reject("bad-header", "an empty pax header")
        return path

    def read_data(self) -> Iterator[bytes]:
        """The pending member's bytes in chunks (then its padding is skipped)."""
        remaining = self._pending
        while remaining:
            chunk = self.src.read(min(_CHUNK, remaining))
            remaining -= len(chunk)
            yield chunk
        self.src.read(-self._pending % _BLOCK)
        self._pending = 0

    def read_all(self) -> bytes:
        return b"".join(self.read_data())

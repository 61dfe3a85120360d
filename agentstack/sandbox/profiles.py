"""What every confined process needs (the system profile) and what each harness needs on top.

A profile contributes *lists* (grants, environment names, fixed environment values); the manifest's
`[sandbox]` adds to every list and overrides every scalar (`network.block`). Paths starting with
`~` are relative to the user's home directory; install directories are found at resolve time from
the harness's binary.

The system profile is deliberately narrower than "/etc and /dev read-only": a root process could
read /etc/shadow or the raw disk (/dev/vda) through such grants, so only the files programs need
are granted.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import NamedTuple

import agentstack.manifest.rules as rules
from agentstack import harnesses as _harnesses

# (path, access, is_file). Missing paths are skipped: systems differ.
SYSTEM_READ_DIRS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki/tls/certs",
    "/etc/pki/ca-trust",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/terminfo",
    "/etc/fonts",
    "/proc",  # other processes' environ/mem are guarded by ptrace checks (capabilities dropped)
    "/sys/fs/cgroup",
    "/sys/devices/system/cpu",
)
SYSTEM_READ_GLOBS = ("/etc/python3*",)
SYSTEM_READ_FILES = (
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/resolv.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/locale.alias",
    "/etc/locale.conf",
    "/etc/default/locale",
    "/etc/os-release",
    "/etc/lsb-release",
    "/etc/debian_version",
    "/etc/mime.types",
    "/etc/inputrc",
    "/etc/bash.bashrc",
    "/etc/profile",
    "/etc/gitconfig",
    "/etc/mailcap",
    "/etc/ca-certificates.conf",
    "/dev/zero",
    "/dev/random",
    "/dev/urandom",
)
SYSTEM_WRITE_FILES = ("/dev/null", "/dev/full", "/dev/tty", "/dev/ptmx")
# Not /dev/pts: the user's own terminals live there. An interactive run grants only the
# pseudo-terminal it allocated and relays (see runner.run_confined).
SYSTEM_WRITE_DIRS: tuple[str, ...] = ()
BASE_ENV = ("HOME", "PATH", "TERM", "LANG")
# Never passed into the sandbox, whatever the manifest says.
# (One list with the manifest's rules, which refuse them at `lock`.)
FORBIDDEN_ENV = rules.FORBIDDEN_SANDBOX_ENV
FORBIDDEN_ENV_PREFIXES = rules.FORBIDDEN_SANDBOX_ENV_PREFIXES


class HarnessProfile(NamedTuple):
    name: str
    binary: str | None
    write_dirs: tuple[str, ...] = ()
    write_files: tuple[str, ...] = ()
    read_dirs: tuple[str, ...] = ()
    env_set: tuple[tuple[str, str], ...] = ()
    # A file created empty with this content when missing (Landlock can only grant what exists).
    file_seed: dict[str, str] = {}  # noqa: RUF012 - never mutated
    # Its user-level state is a private per-project copy (agentstack.sandbox.private_state), not
    # the user's real one.
    private_state: bool = False


# One per harness description (agentstack.harnesses): its state directories opened for writing,
# unless `run` gives it a private copy of them.
PROFILES: dict[str, HarnessProfile] = {
    h.name: HarnessProfile(
        name=h.name,
        binary=h.binary,
        write_dirs=() if h.private_state else tuple("~/" + d for d in h.state_dirs),
        read_dirs=h.sandbox_read_dirs,
        env_set=h.sandbox_env,
        private_state=h.private_state,
    )
    for h in _harnesses.ALL
}
BINARY_TO_HARNESS = {p.binary: p.name for p in PROFILES.values() if p.binary}
# The binaries of the harnesses verified against a pinned version (scripts/install-harnesses).
DOCTOR_BINARIES = tuple(h.binary for h in _harnesses.ALL if h.version != "docs")


def repo_tools_bin() -> Path | None:
    """<checkout>/.tools/npm/node_modules/.bin, where scripts/install-harnesses puts harnesses."""
    candidate = Path(__file__).resolve().parents[2] / ".tools" / "npm" / "node_modules" / ".bin"
    return candidate if candidate.is_dir() else None


def find_binary(name: str, path: str | None) -> str | None:
    """`name` on PATH, else in the checkout's .tools; None when absent."""
    import shutil

    found = shutil.which(name, path=path)
    if found:
        return found
    tools = repo_tools_bin()
    if tools is not None:
        candidate = tools / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def system_grants() -> list[tuple[str, str, bool]]:
    out: list[tuple[str, str, bool]] = []
    dirs = list(SYSTEM_READ_DIRS)
    for pattern in SYSTEM_READ_GLOBS:
        dirs.extend(sorted(glob.glob(pattern)))
    for path in dirs:
        if os.path.isdir(path):
            out.append((path, "ro", False))
    for path in SYSTEM_READ_FILES:
        if os.path.exists(path) and not os.path.isdir(path):
            out.append((path, "ro", True))
    for path in SYSTEM_WRITE_DIRS:
        if os.path.isdir(path):
            out.append((path, "rw", False))
    for path in SYSTEM_WRITE_FILES:
        if os.path.exists(path) and not os.path.isdir(path):
            out.append((path, "rw", True))
    return out


def install_dirs(binary: str, path: str | None) -> list[str]:
    """Directories a harness binary needs read (and execute) access to.

    The resolved binary's package: the outermost `node_modules` holding it (so its dependencies
    and platform packages resolve), else its own directory; plus, for a `#!` script, the
    interpreter's installation prefix (`/usr/bin/env node` -> node's prefix)."""
    real = os.path.realpath(binary)
    out: list[str] = []
    parts = Path(real).parts
    if "node_modules" in parts:
        index = parts.index("node_modules")
        out.append(str(Path(*parts[: index + 1])))
    else:
        out.append(os.path.dirname(real))
    interpreter = _shebang(real)
    if interpreter:
        program = interpreter[0]
        if os.path.basename(program) == "env" and len(interpreter) > 1:
            args = [a for a in interpreter[1:] if not a.startswith("-")]
            program = (_which(args[0], path) or "") if args else ""
        if program:
            resolved = os.path.realpath(program)
            prefix = os.path.dirname(os.path.dirname(resolved))
            out.append(prefix if prefix not in ("/", "") else os.path.dirname(resolved))
    return out


def _which(name: str, path: str | None) -> str | None:
    import shutil

    return shutil.which(name, path=path)


def _shebang(path: str) -> list[str] | None:
    try:
        with open(path, "rb") as handle:
            head = handle.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    return line.split() or None

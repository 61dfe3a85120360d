"""One atomic writer: every file the package replaces goes through `fsutil.write_atomic` (temp
file created O_EXCL|O_NOFOLLOW beside the target, fsync, rename, fsync of the directory; no link
followed below the trusted base). An AST scan finds every other way of writing a file; each one
left is listed below with the reason it is not a replacement of a file (or the lane that migrates
it), so a new ad-hoc writer fails this test."""

from __future__ import annotations

import ast
from pathlib import Path

import agentstack

PACKAGE = Path(agentstack.__file__).parent

# Writers that are not "replace this file's content", each with its reason.
NOT_A_REPLACEMENT = {
    "fsutil.py": "the atomic writer itself",
    "relay.py": "the MCP relay's pins with write_atomic's steps (O_EXCL temp, fsync, rename; "
    "standard library only, no pathlib, on every server start) and its append-only receipts "
    "(O_APPEND, one write per line)",
    "serverbox.py": "hands the sandbox launcher its spec on a pipe, not a file",
    "relayboot.py": "the unconfined server's stdin, a pipe (posix_spawn), not a file",
    "lock/gitsource.py": "renames a freshly cloned mirror directory into place",
    "share/keys.py": "creates a private key exclusively (O_EXCL: never replaces one)",
    "share/quarantine.py": "stages a bundle in a fresh 0700 directory (O_EXCL), renames directories, "
    "writes git loose objects the way git does (read-only, renamed in), and installs released "
    "files through its own descriptor walk (candidate for write_atomic/link_atomic with "
    "base=dest)",
    "_guard_more.py": "the guard settles its own snapshot with write_atomic's steps (O_EXCL|"
    "O_NOFOLLOW temp, fsync, rename, directory fsync), without importing the library into the hook",
    "_guard.py": "the proof that it cannot create a file in a run's directory (O_EXCL probe)",
    "sandbox/probe.py": "the probe run inside the sandbox: its writes are what it tests",
    "sandbox/runner.py": "cgroup control files; the run's read-only copies (O_EXCL, fresh dir); "
    "the spec pipe",
    "sandbox/verify.py": "plants decoys in a throwaway home for the kernel check",
    "sandbox/confine.py": "maps a new user namespace's ids in /proc/self (kernel control files, "
    "written once in place)",
    "lock/treehash.py": "the stat cache: a cache, not state (losing it costs a re-hash), written "
    "temp+rename without fsync so that a lock pays no flush for it; write errors ignored",
    "manifest/load.py": "the manifest cache: same as the stat cache (temp+rename, no fsync, "
    "errors ignored; an entry is checked before use)",
    "githooks.py": "moves the user's own hook aside to chain it (a rename, not a replacement; "
    "the new hook itself goes through write_atomic)",
    "consent/document.py": "write_manifest_defaults: a developer's code generator for the source tree",
    "sandbox/private_state.py": "replaces files relative to the held state-root descriptor "
    "(openat-style temp + rename), which a path-based writer cannot express",
    "sandbox/rollback.py": "restores git's execution state after a session through O_NOFOLLOW "
    "directory descriptors from the workdir (temp + fsync + rename), re-creating a directory a "
    "session removed, which a path-based writer cannot express",
    "trust/store.py": "the append-only log (O_APPEND) and its lock file; the head is replaced with "
    "its own temp+fsync+rename (migrates to write_atomic at merge)",
}
# Replacements of a file in other lanes this round; the lead points them at write_atomic at merge
# and empties this set.
MIGRATED_AT_MERGE: frozenset[str] = frozenset()


def writes(source: str) -> list[tuple[int, str]]:
    """Calls that write a file: Path.write_text/write_bytes, os.replace/os.rename, open/fdopen in
    a writing mode, os.open with O_CREAT."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        attr = func.attr if isinstance(func, ast.Attribute) else None
        name = attr or (func.id if isinstance(func, ast.Name) else None)
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(
            func.value, ast.Name) else None
        if attr in ("write_text", "write_bytes"):
            found.append((node.lineno, attr))
        elif owner == "os" and name in ("replace", "rename"):
            found.append((node.lineno, f"os.{name}"))
        elif owner == "os" and name == "open" and "O_CREAT" in ast.dump(node):
            found.append((node.lineno, "os.open(O_CREAT)"))
        elif name in ("open", "fdopen") and owner in (None, "os", "io"):
            mode = node.args[1] if len(node.args) > 1 else next(
                (k.value for k in node.keywords if k.arg == "mode"), None)
            if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and (
                set(mode.value) & set("wax+")
            ):
                found.append((node.lineno, f"{name}({mode.value!r})"))
    return sorted(found)


def _modules() -> dict[str, Path]:
    """The package's modules, and the adapters' (which never touch the disk at all)."""
    adapters = PACKAGE.parent / "adapters"
    return {
        **{p.relative_to(PACKAGE).as_posix(): p for p in PACKAGE.rglob("*.py")},
        **{"adapters/" + p.relative_to(adapters).as_posix(): p for p in adapters.rglob("*.py")},
    }


def test_every_file_replacement_goes_through_write_atomic() -> None:
    offenders = {
        rel: hits for rel, path in sorted(_modules().items())
        if rel not in NOT_A_REPLACEMENT and rel not in MIGRATED_AT_MERGE
        and (hits := writes(path.read_text(encoding="utf-8")))
    }
    assert not offenders, f"write these with agentstack.fsutil.write_atomic: {offenders}"


def test_the_lists_name_only_modules_that_still_write() -> None:
    modules = _modules()
    stale = sorted(
        rel for rel in (*NOT_A_REPLACEMENT, *MIGRATED_AT_MERGE)
        if rel not in modules or not writes(modules[rel].read_text(encoding="utf-8"))
    )
    assert not stale, f"no longer writes: drop from the lists: {stale}"


def test_the_scan_sees_each_kind_of_write() -> None:
    source = """
p.write_text("x")
p.write_bytes(b"x")
os.replace(a, b)
open(p, "w")
open(p, mode="ab")
os.fdopen(fd, "wb")
os.open(p, os.O_WRONLY | os.O_CREAT)
open(p)
open(p, "rb")
write_bytes(p, b"x")
"""
    assert [kind for _, kind in writes(source)] == [
        "write_text", "write_bytes", "os.replace", "open('w')", "open('ab')", "fdopen('wb')",
        "os.open(O_CREAT)",
    ]

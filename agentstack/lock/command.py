"""`agentstack lock`: resolve every item and pin it into agentstack.lock."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from agentstack.output import echo, print_json

LOCK_NAME = "agentstack.lock"  # agentstack.manifest.view.LOCK_NAME (not imported: start-up cost)

if TYPE_CHECKING:
    from agentstack.lock.treehash import Limits
    from agentstack.manifest.view import ManifestView


def limits_from(
    max_file_size: int | None, max_files: int | None, max_total_size: int | None
) -> Limits:
    """The lock limits from the command line (never from the project or the environment)."""
    from agentstack.lock.treehash import Limits

    default = Limits()
    return Limits(
        max_file_bytes=max_file_size or default.max_file_bytes,
        max_files=max_files or default.max_files,
        max_total_bytes=max_total_size or default.max_total_bytes,
    )


def run_lock(
    *,
    project: Path | None,
    check: bool,
    frozen: bool,
    update: bool,
    as_json: bool,
    limits: Limits | None = None,
) -> int:
    from agentstack import progress

    progress.quiet(as_json)
    with progress.step("lock: checking and hashing the pinned files"):
        return _run_lock(project=project, check=check, frozen=frozen, update=update,
                         as_json=as_json, limits=limits)


def _run_lock(
    *,
    project: Path | None,
    check: bool,
    frozen: bool,
    update: bool,
    as_json: bool,
    limits: Limits | None = None,
) -> int:
    from agentstack.paths import find_project

    root = find_project(explicit=project)
    recorder = None
    if not frozen and not update:
        import agentstack.lock.relock as relock

        # Nothing changed since the last lock (the record's fingerprints say so): no resolution.
        if relock.unchanged(str(root), limits):
            relock.report_unchanged(str(root), check=check, as_json=as_json)
            return 0
        recorder = relock.Recorder(str(root))
    from agentstack.lock.resolve import (
        changed_by_text,
        changed_items,
        dumps_lock,
        fresh_lock,
        has_git_skills,
        loads_unvalidated,
        parse_lock,
        resolver_for,
    )
    from agentstack.manifest.load import load_view

    # Validated with the models only when these manifest bytes are new (agentstack.manifest.view).
    manifest = load_view(root)
    _refuse_unenforceable(manifest, root)
    if frozen:
        fresh_lock(root, manifest, verify_git=True)
        if as_json:
            print_json({"lock": "fresh", "changed": []})
        else:
            echo(f"{LOCK_NAME} matches the manifest and every pinned byte")
        return 0
    lock_path = root / LOCK_NAME
    try:
        old_bytes: bytes | None = lock_path.read_bytes()
    except FileNotFoundError:
        old_bytes = None
    # The previous lock is read only when its git pins are needed, and then without validation:
    # rendering the new lock and comparing bytes is far cheaper than parsing and validating a
    # large lock to learn that nothing changed. It is validated (parse_lock) as soon as the
    # bytes differ, with the errors a malformed lock has always had.
    previous = None
    if old_bytes is not None and has_git_skills(manifest):
        previous = loads_unvalidated(old_bytes)
        if previous is None:
            previous = parse_lock(old_bytes)  # raises what a malformed lock raises
    resolver = resolver_for(
        root, previous, update_git=update, limits=limits or limits_from(None, None, None)
    )
    if recorder is not None:
        resolver.stat_cache.observed = []
    try:
        new = resolver.resolve(manifest)
    except Exception:
        if previous is not None and old_bytes is not None:
            parse_lock(old_bytes)  # a malformed previous lock is the error to report first
        raise
    finally:
        resolver.stat_cache.save()
    text = dumps_lock(new).encode("utf-8")
    if old_bytes is None:
        changed = ["all"]
    elif text == old_bytes:
        changed = []
    elif previous is not None:
        changed = changed_items(parse_lock(old_bytes), new)
    elif recorder is not None and relock.rendered_here(str(root), old_bytes):
        # The old lock is this code's rendering (its record says so): the items whose text
        # differs are the items that changed; nothing of the old lock is parsed.
        changed = changed_by_text(old_bytes, text, new)
    else:
        changed = changed_items(_parse_loosely(old_bytes), new)

    if recorder is not None:  # before the lock is written into the project's root
        recorder.seal(
            manifest=_manifest_bytes(root),
            lock_text=text,
            observed=resolver.stat_cache.observed,
            totals=(resolver.files_seen, resolver.bytes_seen, resolver.biggest),
            git=has_git_skills(manifest),
            lock=new,
        )
    if as_json:
        print_json({"lock": "stale" if changed else "fresh", "changed": changed})
    if check:
        if recorder is not None:
            recorder.finish(None if changed else text)
        if not as_json:
            echo(
                f"{LOCK_NAME} would change: {', '.join(changed)}"
                if changed
                else f"{LOCK_NAME} is up to date"
            )
        return 1 if changed else 0
    if changed:
        from agentstack.fsutil import write_atomic

        write_atomic(lock_path, text)
    if recorder is not None:
        recorder.finish(text)
    if not as_json:
        echo(
            f"{'wrote' if changed else 'unchanged:'} {lock_path}"
            + (f" ({', '.join(changed)})" if changed and old_bytes is not None else "")
        )
    return 0


def _refuse_unenforceable(manifest: ManifestView, root: Path) -> None:
    """What `agentstack run` can never accept is refused here, with the field's dotted path."""
    if not manifest.sandbox.enabled or not any(
        getattr(manifest.sandbox, key)
        for key in ("read_dirs", "write_dirs", "read_files", "write_files")
    ):
        return
    from agentstack.errors import ManifestInvalid, Problem
    from agentstack.manifest.view import MANIFEST_NAME
    from agentstack.sandbox.resolve import lock_problems

    found = lock_problems(manifest.sandbox, root)
    if found:
        raise ManifestInvalid([
            Problem(file=MANIFEST_NAME, path=source, message=text,
                    hint="agentstack run refuses it; see docs/sandbox.md#refusals-fail-closed")
            for source, text in found
        ])


def _say(message: str) -> None:
    """`echo`, without importing the sanitiser for printable ASCII (which it leaves as it is)."""
    if message.isascii() and message.isprintable():
        sys.stderr.write(message + "\n")
    else:
        echo(message)


def _manifest_bytes(root: Path) -> bytes:
    try:
        return (root / "agentstack.toml").read_bytes()
    except OSError:
        return b"\\u"  # unreadable now: nothing is recorded


def _parse_loosely(data: bytes) -> dict[str, object]:
    """The old lock for a change summary only (which items differ, for the message); an
    unreadable old lock is simply replaced. Not validated: the new lock is written whole from
    the resolution, whatever the old one held, and validating a large lock (the models over
    every pinned file) cost as much as the first lock itself to name one changed item."""
    from agentstack.lock.resolve import loads_unvalidated

    return loads_unvalidated(data) or {}

"""The guard's watch over the harness surface: the guard snapshot's "surface" entries (written
with the snapshot by apply and trust), and the drift check over that snapshot before a harness
starts (the guard's own check, read by `status`, `run` and the shims).

Standard library only (with `scan`'s matching rules).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# `harnesses` and `scan` are imported by `snapshot_entries` alone: the drift check before a
# harness starts (`drift`, run by `agentstack run` and the shims) needs neither.


_RENDERED_RAW = {"kind": "raw", "role": "rendered"}


def snapshot_entries(
    root: Path, document: dict[str, Any], existing: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Guard snapshot entries (role "surface") so that the guard's drift check covers the surface:
    every pinned surface file by bytes and executable bit; every surface file a harness would load
    from an existing directory, even when absent (its creation is drift: each directory's listing
    of the surface names); and the full listing of every directory inside a surface tree (a new
    skill, agent or command is drift). Files agentstack renders into are watched whole as well:
    what is foreign in them was reviewed with the digest, and any change to them is drift. (A
    reviewed foreign server's tools stay denied: the guard allows only locked servers' tools.)
    A directory created after the snapshot is walked by the guard when the watched directory
    above it changes (a surface name in it is drift); `status`, `run` and every digest see it."""
    from agentstack import harnesses as H
    from agentstack.surface.scan import (
        _above_rules,
        _anchors,
        _harness_rewrites,
        _match,
        _matcher,
        _rules,
        _walk_above,
        checkout_above,
        plugin_roots,
    )

    root = root.resolve()
    rules = _rules(list(document["project"]["harnesses"]))
    out: dict[str, dict[str, Any]] = {}

    def watch(path: Path, entry: dict[str, Any]) -> None:
        key = str(path)
        current = existing.get(key)
        role = (
            "rendered" if current is not None and current.get("role") == "rendered" else "surface"
        )
        out[key] = {**entry, "role": role}

    def watchable(path: Path) -> bool:  # a FIFO would block the guard: its directory is listed
        return path.is_symlink() or path.is_file() or not path.exists()

    def rewritten(parts: list[str]) -> bool:
        return _harness_rewrites([r for r in rules if _match(r.parts, parts)])

    for pinned in (document.get("surface") or {}).values():
        path = Path(os.path.normpath(root / pinned["path"]))  # `../CLAUDE.md`: above the project
        if watchable(path) and not rewritten(pinned["path"].split("/")):
            watch(path, {"kind": "raw"})
    # Names a harness loads from a directory (the first literal segment after "**/").
    anywhere = sorted(
        {r.parts[1] for r in rules if r.parts[0] == "**" and len(r.parts) > 1}
        | {r.parts[0] for r in rules if r.parts[0] != "**"}
    )
    trees = [[*r.parts[:-1], "**"] for r in rules if r.entry.format == "tree"]
    files = [r.parts for r in rules if r.entry.format != "tree"]
    anchors = _anchors(rules)
    is_file_rule = _matcher(files)
    temp = {
        rel for h in document["project"]["harnesses"] for rel in H.HARNESS_TEMP_DIRS.get(h, ())
    }
    # A file agentstack rendered whole is watched by its bytes already ({"kind": "raw", "role":
    # "rendered"}, from the apply ledger), which is all `watch` would make of it: it is not
    # matched against the rules again (a rendered skill tree is most of a large project's files).
    rendered = {key for key, entry in existing.items() if entry == _RENDERED_RAW}
    # Every directory of the project is watched, at any size: one listing entry each (its stat
    # proves it unchanged; a name added anywhere below is found by the guard's walk).
    # Each tree pattern ends in "**": a directory below one inside a tree is inside it too.
    within: set[str] = set()
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d != ".git")
        rel_dir = os.path.relpath(directory, root)
        parts = [] if rel_dir == "." else rel_dir.split(os.sep)
        in_tree = os.path.dirname(directory) in within or any(_match(t, parts) for t in trees)
        if in_tree:
            within.add(directory)
        skip = sorted(os.path.basename(t) for t in temp if os.path.dirname(t) == rel_dir)
        # The harness's own temporary directory is not walked either (nothing there is loaded).
        subdirs[:] = [d for d in subdirs if d not in skip]
        if in_tree and skip:
            watch(Path(directory), {"kind": "listing", "skip": skip})
        elif in_tree:
            watch(Path(directory), {"kind": "listing"})
        else:
            watch(Path(directory), {"kind": "listing", "names": anywhere})
        for name in [*names, *subdirs]:
            if rendered and os.path.join(directory, name) in rendered:
                continue
            child = [*parts, name]
            if not anchors.intersection(child):
                continue
            path = Path(directory) / name
            if name in subdirs and not path.is_symlink():
                continue
            if (
                is_file_rule(child)
                and str(path) not in out
                and watchable(path)
                and not rewritten(child)
            ):
                watch(path, {"kind": "raw"})
    # A plugin root is pinned whole: the full listing of each of its directories is watched (a
    # new script or skill in it is drift).
    pinned_paths = [str(p["path"]) for p in (document.get("surface") or {}).values()]
    for base in plugin_roots(root, rules, [p for p in pinned_paths if not p.startswith("../")]):
        top = root / base if base else root
        if top.is_symlink() or not top.is_dir():
            continue
        for directory, subdirs, _names in os.walk(top):
            subdirs[:] = sorted(d for d in subdirs if d != ".git")
            watch(Path(directory), {"kind": "listing"})
    # A file agentstack renders keys into inside a surface tree (Copilot's
    # `.github/hooks/agentstack.json`) is watched whole like any other rendered surface file: a
    # key added next to agentstack's (`disableAllHooks`) is drift.
    prefix = str(root) + os.sep
    is_rule = _matcher([r.parts for r in rules])
    for key, current in existing.items():
        if current.get("role") != "rendered" or not key.startswith(prefix) or key in out:
            continue
        if key in rendered:
            continue
        rel_parts = key[len(prefix) :].split(os.sep)
        if is_rule(rel_parts) and watchable(Path(key)):
            watch(Path(key), {"kind": "raw"})
    # Surface files and trees at the root, even while absent (or a link in a tree's place).
    for rule in rules:
        parts = rule.parts[:-1] if rule.parts[-1] == "**" else rule.parts
        literal = [p for p in parts if p != "**"]
        if not literal or any(c in p for p in literal for c in "*?["):
            continue
        path = root.joinpath(*literal)
        if str(path) in out or (rule.entry.format != "tree" and rewritten(rule.parts)):
            continue
        if path.is_symlink() or (path.is_file() and rule.entry.format == "tree"):
            watch(path, {"kind": "raw"})
        elif not path.exists():
            watch(path, {"kind": "listing" if rule.entry.format == "tree" else "raw"})
    # Above the project, within the checkout: each path a harness loads there, even while absent
    # (the first missing component: its creation is drift), and the full listing of every
    # directory of a tree there. Never a listing of the directory itself: a sibling project's
    # change is not this project's drift.
    above_rules = _above_rules(list(document["project"]["harnesses"]))
    for upper in checkout_above(root) if above_rules else []:
        for rule in above_rules:
            matched, missing = _walk_above(upper, rule)
            if missing is not None:
                absent = upper.joinpath(*missing)
                if str(absent) not in out:
                    watch(absent, {"kind": "raw"})
                continue
            for parts in matched:
                path = upper.joinpath(*parts)
                if str(path) in out:
                    continue
                # A directory (or a FIFO) where the harness expects a file: its listing, so that
                # a file put in its place is drift (a FIFO's listing fails: the guard denies).
                watch(path, {"kind": "raw" if watchable(path) else "listing"})
            top = upper.joinpath(*rule.parts[:-1])
            if rule.parts[-1] == "**" and top.is_dir() and not top.is_symlink():
                for here, dirs, _ in os.walk(top):
                    dirs.sort()
                    watch(Path(here), {"kind": "listing"})
    return out


def drift(root: Path) -> list[str] | None:
    """Files of the guard snapshot that changed since trust/apply (the guard's own check), or
    None when there is no snapshot."""
    from agentstack._guard import Deny
    from agentstack.fingerprints import drifted, load_snapshot
    from agentstack.paths import guard_snapshot_path

    root = root.resolve()
    try:
        snapshot = load_snapshot(str(guard_snapshot_path(root)))
        files = snapshot["files"]
    except (OSError, ValueError, KeyError, TypeError, Deny):
        return None
    prefix = str(root) + os.sep
    return [
        path.removeprefix(prefix) for path, entry in sorted(files.items()) if drifted(path, entry)
    ]

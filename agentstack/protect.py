"""The guard's write-protected set, compiled from `agentstack.harnesses` (one list).

A file tool may never write what a harness loads as configuration or code: every surface pattern
of every harness (`harnesses.ALL`), except the instruction files the agent may edit
(`harnesses.AGENT_EDITS`), plus `harnesses.PROTECTED_DIRS` and `PROTECTED_FILES`. The rules are
position-independent, as a harness started in any directory (the project, a subdirectory, the
home directory) loads them there: a rule is a sequence of path components, and `tail` says whether
it must end the path (a file) or may be followed by anything (a directory and what is below it).

`snapshot.compile_policy` writes `compile_rules()` into the guard snapshot's policy (`protect`);
the guard (`_guard_more.protected`) matches a path against them without importing this module.
"""

from __future__ import annotations

from collections.abc import Iterable

from agentstack import harnesses as H


def _rule(pattern: str) -> tuple[tuple[str, ...], bool]:
    """(components, tail) for one surface pattern. A `**` inside a pattern matches any number of
    directories: only the components after the last one are kept (a rule that matches more
    paths, never fewer)."""
    parts = [p for p in pattern.split("/") if p]
    tree = bool(parts) and parts[-1] == "**"
    if tree:
        parts = parts[:-1]
    if "**" in parts:
        parts = parts[len(parts) - parts[::-1].index("**") :]
    return tuple(parts), not tree


def compile_rules(harnesses: Iterable[str] | None = None) -> list[list[object]]:
    """The write-protected set as plain JSON: [[components...], tail], sorted, without repeats.

    Every harness's patterns are protected, whichever harnesses the project targets (a user may
    start any of them here), except a bare file name that is generic (`harnesses.
    GENERIC_FILE_NAMES`, such as Kilo's bare `config.json`): protecting it everywhere would stop
    the agent editing an ordinary file of that name in every project, so it is protected only
    where its harness is among the project's `harnesses` (all of them when None)."""
    targeted = None if harnesses is None else set(harnesses)
    rules: set[tuple[tuple[str, ...], bool]] = set()
    for harness in H.ALL:
        for entry in harness.surface:
            if entry.pattern in H.AGENT_EDITS:
                continue
            *above, name = entry.pattern.split("/")
            generic = name in H.GENERIC_FILE_NAMES and all(p == "**" for p in above)
            if generic and targeted is not None and harness.name not in targeted:
                continue
            parts, tail = _rule(entry.pattern)
            if parts:
                rules.add((parts, tail))
    rules.update((tuple(d.split("/")), False) for d in H.PROTECTED_DIRS)
    rules.update((tuple(f.split("/")), True) for f in H.PROTECTED_FILES)
    return [[list(parts), tail] for parts, tail in sorted(rules)]

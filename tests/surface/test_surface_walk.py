"""The surface scan's walk (agentstack.surface.scan.surface_paths): one listing per directory,
entry types from the listing, the rules worked out once per set of literal segments a directory
holds. Whatever the tree, it finds exactly the paths a rule-by-rule match of every name finds."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentstack.surface import scan

NAMES = [
    "CLAUDE.md", "AGENTS.md", ".claude", "settings.json", "skills", "commands", ".codex",
    "config.toml", "hooks", ".agents", "rules", ".git", "x", "a.md", ".mcp.json", "agents",
]  # fmt: skip
TARGETS = ["claude-code", "codex"]


def naive(root: Path, rules: list[scan._Rule]) -> dict[str, list[str]]:
    """Every name of the tree (files, and links among the directories) matched against every
    rule, with os.walk; a link to a directory that matches none is pinned when a rule's path
    leads through it. (Links here lead outside the tree: nothing is walked through them.)"""
    out: dict[str, list[str]] = {}
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        rel = os.path.relpath(directory, root)
        base = [] if rel == "." else rel.split(os.sep)
        linked = [d for d in dirs if os.path.islink(os.path.join(directory, d))]
        for name in files + linked:
            parts = [*base, name]
            matched = [r for r in rules if scan._match(r.parts, parts)]
            if not matched and name in linked:  # a link on the way to a surface path
                matched = [r for r in rules if scan._leads_into(r.parts, parts)]
            if matched:
                out["/".join(parts)] = sorted(f"{r.harness.name} {r.entry.pattern}" for r in matched)
    return out


def walked(root: Path, rules: list[scan._Rule]) -> dict[str, list[str]]:
    return {
        rel: sorted(f"{r.harness.name} {r.entry.pattern}" for r in matched)
        for rel, matched in scan.surface_paths(root, rules).items()
    }


paths = st.lists(st.lists(st.sampled_from(NAMES), min_size=1, max_size=5), max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=paths, links=st.lists(st.tuples(paths, st.booleans()), max_size=3))
def test_the_walk_finds_what_matching_every_name_finds(
    tmp_path_factory: object, files: list[list[str]], links: list[tuple[list[list[str]], bool]]
) -> None:
    root = tmp_path_factory.mktemp("walk")  # type: ignore[attr-defined]
    for parts in files:
        path = root.joinpath(*parts)
        with contextlib.suppress(OSError):  # a name already taken by a file or a directory
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("x\n")
    for where, to_file in links:
        if not where:
            continue
        path = root.joinpath(*where[0])
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            # A link to a file (a name on a surface path), or to a directory outside the tree
            # (pinned as a link, never walked into).
            path.symlink_to("/etc/hostname" if to_file else "/etc")
    rules = scan._rules(TARGETS)
    assert walked(root, rules) == naive(root, rules)
    shutil.rmtree(root)


def test_a_directory_that_cannot_be_listed_is_skipped_as_os_walk_skips_it(tmp_path: Path) -> None:
    (tmp_path / "a/.claude").mkdir(parents=True)
    (tmp_path / "a/.claude/settings.json").write_text("{}\n")
    (tmp_path / "b").mkdir()
    (tmp_path / "b/CLAUDE.md").write_text("x\n")
    rules = scan._rules(TARGETS)
    assert set(walked(tmp_path, rules)) == {"a/.claude/settings.json", "b/CLAUDE.md"}
    listed = list(scan._directories(str(tmp_path / "missing")))
    assert listed == []

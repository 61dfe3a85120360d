"""One list: the guard's write protection is compiled from the harness descriptions.

Every surface pattern of every harness (`agentstack.harnesses`) is either write-protected by the
guard, wherever it lies (the project, a subdirectory, the home directory), or listed as an
instruction file the agent may edit (`harnesses.AGENT_EDITS`). The guard keeps no list of its own:
what it protects is what the snapshot carries (`policy.protect`, from `agentstack.protect`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import agentstack.apply.snapshot as snapshot
from agentstack import _guard, _guard_more, protect
from agentstack import harnesses as H
from tests.surface.test_surface import guard_denies, trusted_and_applied

DOCUMENT = {"sandbox": {
    "read_dirs": ["~"], "read_files": [], "write_dirs": ["~"], "write_files": [],
    "network": {"block": True, "allow_domains": []},
}}

# Where the guard and the surface disagreed: configuration or code a file tool could write.
DISAGREED = [
    ("claude-code", "**/.claude-plugin/**"),
    ("gemini-cli", "**/.env"),
    ("copilot", ".github/mcp.json"),
    ("copilot", ".github/skills/**"),
    ("copilot", ".github/agents/**"),
    ("copilot", ".github/prompts/**"),
    ("cursor", ".cursorrules"),
]


def _samples(pattern: str) -> list[str]:
    """Paths (relative) that `pattern` matches: at the project root and two directories down, a
    glob component filled in, a tree with a file in it."""
    parts = pattern.split("/")
    tree = parts[-1] == "**"
    body = parts[:-1] if tree else parts
    inner = [p.replace("*", "x").replace("?", "x") if p != "**" else "d" for p in body]
    if inner and inner[0] == "d" and body[0] == "**":
        inner = inner[1:]
    leaf = [*inner, "f.md"] if tree else inner
    return ["/".join(leaf), "/".join(["sub", "dir", *leaf])]


def _write_denied(policy: dict[str, object], path: str) -> bool:
    try:
        _guard.check_path(policy, path, "write")
    except _guard.Deny:
        return True
    return False


@pytest.fixture
def places(isolated_home: Path) -> tuple[dict[str, object], list[Path]]:
    home = Path(os.path.realpath(isolated_home))
    root = home / "proj"
    root.mkdir(exist_ok=True)
    return snapshot.compile_policy(root, DOCUMENT), [root, home]


def test_every_surface_pattern_is_protected_or_an_instruction_file_the_agent_may_edit(
    places: tuple[dict[str, object], list[Path]],
) -> None:
    policy, bases = places
    assert not _write_denied(policy, str(bases[0] / "notes.md"))  # the premise: writes allowed
    neither = []
    for harness in H.ALL:
        for entry in harness.surface:
            editable = entry.pattern in H.AGENT_EDITS
            for rel in _samples(entry.pattern):
                for base in bases:
                    denied = _write_denied(policy, str(base / rel))
                    if not denied and not editable:
                        neither.append(f"{harness.name} {entry.pattern}: {base / rel}")
    assert neither == []


def test_only_instruction_files_may_be_marked_editable() -> None:
    roles = {e.pattern: e.role for h in H.ALL for e in h.surface}
    assert set(roles) >= H.AGENT_EDITS, sorted(H.AGENT_EDITS - set(roles))  # no stale marks
    assert {p: roles[p] for p in H.AGENT_EDITS if roles[p] != "instructions"} == {}


def test_an_editable_instruction_file_is_writable_unless_it_lies_in_a_protected_place(
    places: tuple[dict[str, object], list[Path]],
) -> None:
    policy, (root, _) = places
    assert not _write_denied(policy, str(root / "CLAUDE.md"))
    assert not _write_denied(policy, str(root / "pkg" / "AGENTS.md"))
    assert not _write_denied(policy, str(root / ".github" / "copilot-instructions.md"))
    assert _write_denied(policy, str(root / ".claude" / "CLAUDE.md"))  # in a config directory


@pytest.mark.parametrize(("harness", "pattern"), DISAGREED)
def test_the_patterns_the_guard_once_left_writable_are_protected(
    places: tuple[dict[str, object], list[Path]], harness: str, pattern: str
) -> None:
    policy, bases = places
    assert pattern in {e.pattern for e in H.BY_NAME[harness].surface}
    for rel in _samples(pattern):
        for base in bases:
            assert _write_denied(policy, str(base / rel)), base / rel


def test_the_guard_protects_what_the_snapshot_carries_and_nothing_of_its_own(
    places: tuple[dict[str, object], list[Path]],
) -> None:
    policy, (root, _) = places
    assert policy["protect"] == protect.compile_rules()
    # A rule added to the compiled set is protected at once; with the set gone, nothing is
    # left to the guard's own judgement: every write is denied (fail closed).
    assert not _write_denied(policy, str(root / "tools" / "x.json"))
    widened = {**policy, "protect": [*protect.compile_rules(), [["tools", "x.json"], True]]}
    assert _write_denied(widened, str(root / "tools" / "x.json"))
    for broken in (None, [], [["a"]], [[[], True]], "x"):
        assert _write_denied({**policy, "protect": broken}, str(root / "notes.md")), broken
    assert not [n for n in vars(_guard_more) if n.startswith("SURFACE_")]


def test_a_pattern_with_a_wildcard_component_is_matched_by_the_guard() -> None:
    rules = [[list(p), t] for p, t in (protect._rule(".github/*.agent.md"),
                                        protect._rule("x/**/y/**"))]
    assert rules == [[[".github", "*.agent.md"], True], [["y"], False]]
    assert _guard_more.protected("/p/.github/a.agent.md", rules)
    assert not _guard_more.protected("/p/.github/a.md", rules)
    assert _guard_more.protected("/p/q/y/z", rules)


def test_the_snapshot_the_guard_reads_carries_the_compiled_set(tmp_path: Path) -> None:
    """End to end through `trust` + `apply --write`: the guard denies a Write tool call into
    Copilot's `.github/agents/` (formerly allowed) and allows one into a plain file."""
    from tests.conftest import copy_example

    root = copy_example("minimal", tmp_path).resolve()
    trusted_and_applied(root)
    assert guard_denies(root) is None

    def write(rel: str) -> str | None:
        event = json.dumps({"tool_name": "Write", "cwd": str(root), "tool_input": {
            "file_path": str(root / rel), "content": "x"}})
        try:
            _guard.decide("claude-code", event.encode(), state=os.environ["AGENTSTACK_HOME"],
                          project=str(root))
        except _guard.Deny as deny:
            return str(deny)
        return None

    assert write("notes.txt") is None
    reason = write(".github/agents/x.agent.md")
    assert reason is not None and "harness configuration" in reason, reason


def test_a_generic_file_name_is_protected_only_where_its_harness_is_targeted(
    isolated_home: Path, tmp_path: Path
) -> None:
    """Kilo loads a bare `config.json` where it starts: the guard protects that name in a
    project that targets Kilo, and leaves an ordinary `config.json` writable in every other
    project (a name that common, protected everywhere, would stop the agent editing it)."""
    assert "config.json" in H.GENERIC_FILE_NAMES
    root = tmp_path / "p"
    root.mkdir()
    for harnesses, denied in ((["kilo"], True), (["claude-code", "codex"], False)):
        document = {**DOCUMENT, "project": {"harnesses": harnesses}}
        policy = snapshot.compile_policy(root, document)
        for rel in ("config.json", "src/app/config.json"):
            assert _write_denied(policy, str(root / rel)) is denied, (harnesses, rel)
        # Harness-specific names stay protected in every project.
        assert _write_denied(policy, str(root / "opencode.json"))
        assert _write_denied(policy, str(root / ".claude" / "settings.json"))
        assert _write_denied(policy, str(root / ".factory" / "config.json"))

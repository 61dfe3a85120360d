"""The surface probe (tests/harness/surface_probe.py): its committed output per harness and version,
docs/surface.md's measured section generated from it, the probe failing when a surface entry is
removed, and (slow) a re-run of the probe against every pinned harness diffed with what is
committed.

The harness runs skip locally without the CLIs or strace and fail in CI (CI=true).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from agentstack import harnesses as H
from tests.harness import surface_probe as probe
from tests.harness.binaries import harness_bin, in_ci

VERSIONS = probe.pinned_versions()


def _reports() -> dict[str, dict[str, Any]]:
    return {r["harness"]: r for r in probe.committed()}


def _observed(report: dict[str, Any]) -> dict[str, Any]:
    return probe.observed_from(report)


def _without(harness: H.Harness, pattern: str) -> H.Harness:
    bare = pattern.removeprefix("**/")
    return harness._replace(
        surface=tuple(e for e in harness.surface if e.pattern != pattern
                      and e.pattern.removeprefix("**/") != bare),
        above=tuple(p for p in harness.above if p != bare))


def test_every_pinned_harness_version_has_a_committed_report_with_no_findings() -> None:
    reports = _reports()
    assert set(VERSIONS) == {"claude-code", "codex", "gemini-cli", "opencode", "copilot",
                             "qwen-code", "droid", "kilo", "cline", "aider", "continue"}
    for name, version in VERSIONS.items():
        assert probe.output_path(name, version).exists(), (name, version)
        report = reports[name]
        assert report["version"] == version == H.get(name).version
        assert report["findings"] == [], (name, report["findings"])
        assert report["loads"], name
        # Each load is covered now, by the surface or the inert list, as the report says.
        assert probe.findings(name, _observed(report)) == [], name
        for key, load in report["loads"].items():
            location, _, rel = key.partition(":")
            assert load["surface"] == probe.covered(H.get(name), location, rel), (name, key)


def test_docs_surface_md_is_generated_from_the_probe_output() -> None:
    text = probe.DOCS.read_text(encoding="utf-8")
    assert probe.docs_section(text) == probe.render_docs(probe.committed()), (
        "docs/surface.md disagrees with tests/harness/surface/: run "
        "python -m tests.harness.surface_probe --docs")
    for name, version in VERSIONS.items():
        assert f"#### {H.get(name).display} {version}" in text


def test_a_removed_surface_entry_makes_the_probe_fail() -> None:
    """Every pattern that covers a load in the committed output is needed: without it, the
    probe's check reports the file that pattern covered."""
    checked = 0
    for name, report in _reports().items():
        observed = _observed(report)
        for key, load in report["loads"].items():
            if not load["surface"]:
                continue
            weaker = _without(H.get(name), load["surface"])
            location, _, rel = key.partition(":")
            if probe.covered(weaker, location, rel) is not None:
                continue  # another pattern covers it too
            assert key in probe.findings(name, observed, weaker), (name, key)
            checked += 1
    assert checked > 50, checked


def test_strace_parsing_attributes_each_open_to_the_program_of_its_process() -> None:
    log = "\n".join([
        '100 1.0 openat(AT_FDCWD, "/p/CLAUDE.md", O_RDONLY|O_CLOEXEC) = 3',
        "100 1.1 clone3({flags=CLONE_VM}, 88) = 101",
        '101 1.2 execve("/usr/bin/git", ["git", "add"], 0x1 /* 3 vars */ <unfinished ...>',
        "101 1.3 <... execve resumed>) = 0",
        '101 1.4 openat(AT_FDCWD, "/p/AGENTS.md", O_RDONLY) = 4',
        "100 1.5 vfork( <unfinished ...>",
        "100 1.6 <... vfork resumed>) = 102",
        '102 1.7 open("/p/.mcp.json", O_RDONLY) = 5',
        '100 1.8 openat(AT_FDCWD, "/p/.claude/rules", O_RDONLY|O_DIRECTORY) = 6',
        '100 1.9 openat(AT_FDCWD, "/p/.claude/rules/r.md", O_RDONLY|O_PATH) = 7',
        '100 2.0 openat(AT_FDCWD, "/p/missing", O_RDONLY) = -1 ENOENT (No such file)',
        '100 2.1 execve("/p/.claude/hooks/x.sh", ["x"], 0x1 /* 1 var */) = 0',
    ])
    seen = [(a.call, a.path, a.program) for a in probe.parse_strace(log, "claude")]
    assert seen == [
        ("open", "/p/CLAUDE.md", "claude"),
        ("exec", "/usr/bin/git", "git"),
        ("open", "/p/AGENTS.md", "git"),
        ("open", "/p/.mcp.json", "claude"),
        ("exec", "/p/.claude/hooks/x.sh", "x.sh"),
    ]


def test_harvested_globs_are_made_concrete() -> None:
    assert probe._expand("{agent,agents}/**/*.md") == ["agent/probe/canary.md",
                                                       "agents/probe/canary.md"]
    assert probe._expand(".github/lsp.json") == [".github/lsp.json"]
    assert not probe._plausible(".git/config")
    assert probe._plausible(".github/lsp.json")


def _need_probe(name: str) -> None:
    from agentstack.harnesses import BY_NAME

    harness_bin(BY_NAME[name].binary)
    if not shutil.which(probe.STRACE) and not Path(probe.STRACE).exists():
        message = f"{probe.STRACE} is missing (.ci/run installs strace)"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


def _shape(report: dict[str, Any]) -> dict[str, tuple[str, str | None, str | None]]:
    return {k: (v["how"], v["surface"], v.get("inert")) for k, v in report["loads"].items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(VERSIONS))
def test_the_probe_rerun_matches_what_is_committed(name: str) -> None:
    _need_probe(name)
    result = probe.probe(name, VERSIONS[name])
    assert result["findings"] == [], result["findings"]
    committed = _reports()[name]
    assert result["candidates"] == committed["candidates"]
    assert _shape(result) == _shape(committed), (
        "the harness loads something else now: python -m tests.harness.surface_probe --write "
        f"--harness {name}, then review the diff")


@pytest.mark.slow
def test_the_probe_run_fails_when_copilots_lsp_json_is_taken_off_the_surface(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _need_probe("copilot")
    weaker = _without(H.COPILOT, ".github/lsp.json")
    monkeypatch.setitem(H.BY_NAME, "copilot", weaker)
    result = probe.probe("copilot", VERSIONS["copilot"])
    assert "project:.github/lsp.json" in result["findings"], result["findings"]

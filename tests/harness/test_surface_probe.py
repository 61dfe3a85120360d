"""The surface probe (tests/harness/surface_probe.py): its committed output per harness and version,
docs/surface.md's measured section generated from it, the probe failing when a surface entry is
removed (the session's skill, subagent and MCP files too), every harness exercised through its
skill, subagent and MCP tools and started on a pseudo-terminal (or the reason it is not), and
(slow) a re-run of the probe against every pinned harness diffed with what is committed.

The harness runs skip locally without the CLIs or strace and fail in CI (CI=true).
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from agentstack import harnesses as H
from tests.harness import surface_probe as probe
from tests.harness.binaries import harness_bin, in_ci
from tests.harness.deadline import scaled
from tests.harness.mock_model import MockModel, ToolCall
from tests.support import shared

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
                             "qwen-code", "droid", "kilo", "cline", "aider", "continue",
                             "auggie"}
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
            if (probe.covered(weaker, location, rel) is not None
                    or probe._inert(name, location, rel) is not None):
                continue  # another pattern (or the inert list) covers it too
            assert key in probe.findings(name, observed, weaker), (name, key)
            checked += 1
    assert checked > 50, checked


def test_every_harness_session_exercises_a_skill_a_subagent_and_an_mcp_server() -> None:
    """Each pinned harness's committed run called the planted skill, subagent and the probe's MCP
    server's tool, and each one's proof reached the model (or the report says why it could not
    be, from the probe's own list); the server was started; each planted file was read and is
    covered by the harness's surface."""
    for name, report in _reports().items():
        session = report["session"]
        assert set(session) == {*probe.KINDS, "server"}, name
        assert session["server"] or f"{name}:mcp" in probe.NOT_EXERCISED, (
            name, "the probe's MCP server never started")
        kinds = {c.kind for c in probe.capabilities(name, ["python3"])}
        for kind in probe.KINDS:
            used = session[kind]
            if kind not in kinds:  # the harness has none, or loads it from no file it is given
                assert used == {"call": None, "exercised": False, "files": [],
                                "why_not": probe.NOT_EXERCISED[f"{name}:{kind}"]}, (name, kind)
                continue
            assert used["call"], (name, kind, "never called")
            if not used["exercised"]:
                assert used.get("why_not") == probe.NOT_EXERCISED[f"{name}:{kind}"], (name, kind)
            for rel in used["files"]:
                load = report["loads"].get(f"project:{rel}")
                assert load is not None, (name, kind, rel, "planted, never opened")
                assert load["surface"] == probe.covered(H.get(name), "project", rel), (name, rel)
                assert load["surface"], (name, rel)
    exercised = {(n, k) for n, r in _reports().items() for k in probe.KINDS
                 if r["session"][k]["exercised"]}
    assert len(exercised) >= 3 * len(VERSIONS) - len(probe.NOT_EXERCISED)


def test_a_removed_entry_for_a_session_file_makes_the_probe_fail() -> None:
    """The skill, subagent and MCP files the session planted are each needed on the surface:
    without the pattern that covers one, the probe reports it."""
    checked: set[tuple[str, str]] = set()
    for name, report in _reports().items():
        observed = _observed(report)
        for kind in probe.KINDS:
            for rel in report["session"][kind]["files"]:
                pattern = report["loads"][f"project:{rel}"]["surface"]
                weaker = _without(H.get(name), pattern)
                while (other := probe.covered(weaker, "project", rel)) is not None:
                    weaker = _without(weaker, other)  # every pattern that covers it goes
                assert f"project:{rel}" in probe.findings(name, observed, weaker), (name, rel)
                checked.add((name, kind))
    planted = {(n, c.kind) for n in VERSIONS for c in probe.capabilities(n, ["python3"])
               if c.files}
    assert checked == planted, sorted(checked ^ planted)


def test_every_harness_is_started_on_a_pseudo_terminal_or_says_why() -> None:
    for name, report in _reports().items():
        if name in probe.INTERACTIVE:
            assert report["interactive"].startswith("ran: "), (name, report["interactive"])
            assert " planted files read or run at start" in report["interactive"], name
        else:
            assert report["interactive"] == probe.NOT_INTERACTIVE[name], name
    assert set(VERSIONS) <= {*probe.INTERACTIVE, *probe.NOT_INTERACTIVE}


def _chat(url: str, messages: list[dict[str, Any]]) -> bytes:
    body = {"model": "m", "stream": True, "messages": messages,
            "tools": [{"type": "function", "function": {"name": "task", "parameters": {}}}]}
    request = urllib.request.Request(f"{url}/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=scaled(60)) as response:
        return bytes(response.read())


def test_the_mock_answers_a_subagent_with_text_and_never_replays_the_script() -> None:
    """A subagent's request (its definition's prompt holds the marker) gets text, so the
    main agent's script is not replayed inside it; the main agent's requests get the script."""
    call = ToolCall("task", {"subagent_type": "probe-agent"})
    with MockModel([call]) as model:
        model.sub_marker = probe.AGENT_TOKEN
        main = _chat(model.url, [{"role": "user", "content": "probe"}])
        sub = _chat(model.url, [{"role": "system", "content": f"{probe.AGENT_TOKEN}: hello"},
                                {"role": "user", "content": "Say hello."}])
    assert b'"name": "task"' in main and b"tool_calls" in main
    assert model.sub_text.encode() in sub and b"tool_calls" not in sub
    assert len(model.tool_calls) == 1


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

    if name == "aider":  # installed in its own virtualenv under .tools/aider
        if not probe.AIDER_BIN.exists():
            message = f"{probe.AIDER_BIN} is missing: run scripts/install-harnesses"
            if in_ci():
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
    else:
        harness_bin(BY_NAME[name].binary)
    if not shutil.which(probe.STRACE) and not Path(probe.STRACE).exists():
        message = f"{probe.STRACE} is missing (.ci/run installs strace)"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


def _shape(report: dict[str, Any]) -> dict[str, Any]:
    loads = {k: (v["how"], v["surface"], v.get("inert")) for k, v in report["loads"].items()}
    session = {k: report["session"][k]["exercised"] for k in probe.KINDS}
    return {"loads": loads, "session": session,
            "interactive": report["interactive"].partition(":")[0]}


# One full probe run per harness and test session (its xdist workers share it, tests/support/
# shared.py): the re-run test makes it, and the tests that take a surface entry off read the same
# run (its findings are a function of what the run observed and the surface; nothing on the
# surface changes what the harness is given or does).
_RUNS: dict[str, dict[str, Any]] = {}


def _run_key(name: str) -> str:
    return f"surface-probe-{name}-{VERSIONS[name]}"


def _probed(name: str) -> dict[str, Any]:
    """The report of a fresh full probe run of `name` (made once per session)."""
    if name not in _RUNS:
        _need_probe(name)
        _RUNS[name] = shared.once(_run_key(name), lambda: probe.probe(name, VERSIONS[name]))
    return _RUNS[name]


def _made(name: str) -> dict[str, Any] | None:
    """The session's full probe run of `name` if one was made (by any worker), else None."""
    made = _RUNS.get(name) or shared.made(_run_key(name))
    return dict(made) if made is not None else None


def _findings_off(name: str, weaker: H.Harness, run: dict[str, Any]) -> list[str]:
    """The findings of `run` as the probe reports them with `weaker` as the harness's entry (the
    registry looked up as the probe does when it writes its report)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(H.BY_NAME, name, weaker)
        return list(probe.report(name, run["version"], ["?"] * run["candidates"],
                                 probe.observed_from(run), run["session"],
                                 run["interactive"])["findings"])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(VERSIONS))
def test_the_probe_rerun_matches_what_is_committed(name: str) -> None:
    result = _probed(name)
    assert result["findings"] == [], result["findings"]
    committed = _reports()[name]
    assert result["candidates"] == committed["candidates"]
    fresh, kept = _shape(result), _shape(committed)
    # No finding (above), and each committed load this run saw is read, covered and inert alike.
    # A load may come and go between runs (a file read only when the start takes long enough,
    # one more file of a directory it lists): the committed output is the union of runs, and
    # `--write` adds what a run saw.
    new = {k: v for k, v in fresh["loads"].items()
           if k in kept["loads"] and kept["loads"][k] != v}
    assert not new and fresh["session"] == kept["session"], (
        f"the harness loads something else now ({sorted(new)}): python -m "
        f"tests.harness.surface_probe --write --harness {name}, then review the diff")
    assert fresh["interactive"] == kept["interactive"], result["interactive"]


@pytest.mark.slow
def test_the_probe_run_fails_when_copilots_lsp_json_is_taken_off_the_surface() -> None:
    result = _probed("copilot")  # the re-run's (this fresh run read .github/lsp.json)
    assert "project:.github/lsp.json" in result["loads"], sorted(result["loads"])
    findings = _findings_off("copilot", _without(H.COPILOT, ".github/lsp.json"), result)
    assert "project:.github/lsp.json" in findings, findings


@pytest.mark.slow
@pytest.mark.parametrize(("name", "pattern", "planted"), [
    ("claude-code", "**/.claude/skills/**", ".claude/skills/probe-skill/SKILL.md"),
    ("copilot", ".github/agents/**", ".github/agents/probe-agent.agent.md"),
])
def test_the_probe_session_fails_when_a_skill_or_agent_directory_is_taken_off_the_surface(
    monkeypatch: pytest.MonkeyPatch, name: str, pattern: str, planted: str,
) -> None:
    """The real harness's scripted session: with the directory its skill or subagent was loaded
    from off the surface, the probe fails on that file. The re-run's full probe when this session
    (any worker) made it (its session is the same), else the session alone (no harvested
    canaries)."""
    weaker = _without(H.get(name), pattern)
    result = _made(name)
    if result is not None:
        findings = _findings_off(name, weaker, result)
    else:
        _need_probe(name)
        monkeypatch.setitem(H.BY_NAME, name, weaker)
        result = probe.probe(name, VERSIONS[name], session_only=True)
        findings = result["findings"]
    kind = "skill" if "skill" in planted else "agent"
    assert result["session"][kind]["exercised"], result["session"]
    assert f"project:{planted}" in findings, findings

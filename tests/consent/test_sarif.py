"""`--format sarif` on `check`, `diff` and `status`: valid SARIF 2.1.0 (the OASIS schema, vendored
here), a rule id and level per finding, the agentstack.toml line of the item it is about."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from agentstack.consent.sarif import Finding, ManifestLines, sarif_log
from tests.conftest import run_cli_in_process
from tests.support.project import locked_project, manifest

SCHEMA = Path(__file__).parent / "sarif-schema-2.1.0.json"

MANIFEST = str(manifest("demo", "claude-code").server("clock", "clock.py"))

MORE = """
# a later addition
[servers.fetcher]
command = "npx"
args = ["-y", "some-fetch-server@latest"]
"""


@cache
def _validator() -> jsonschema.Draft4Validator:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def _valid(log: dict[str, Any]) -> dict[str, Any]:
    errors = sorted(_validator().iter_errors(log), key=lambda e: list(e.path))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
    return log


def _results(proc: Any) -> list[dict[str, Any]]:
    log = _valid(json.loads(proc.stdout))
    assert log["version"] == "2.1.0"
    (run,) = log["runs"]
    assert run["tool"]["driver"]["name"] == "agentstack"
    rules = [r["id"] for r in run["tool"]["driver"]["rules"]]
    for result in run["results"]:
        assert rules[result["ruleIndex"]] == result["ruleId"]
    return list(run["results"])


def _project(tmp_path: Path) -> Path:
    return locked_project(tmp_path / "demo", MANIFEST, {"clock.py": "print('tick')\n"})


def _line_of(root: Path, text: str) -> int:
    lines = (root / "agentstack.toml").read_text(encoding="utf-8").splitlines()
    return lines.index(text) + 1


def test_the_vendored_schema_is_sarif_2_1_0() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert schema["title"].startswith("Static Analysis Results Format (SARIF) Version 2.1.0")
    # and it rejects what is not SARIF, so a passing validation means something
    assert list(_validator().iter_errors({"version": "2.1.0", "runs": [{"results": []}]}))


def test_diff_sarif_names_the_rule_and_the_line(tmp_path: Path) -> None:
    root = _project(tmp_path)
    assert run_cli_in_process("trust", "--yes", "--accept-risk", cwd=root).returncode == 0
    with (root / "agentstack.toml").open("a", encoding="utf-8") as f:
        f.write(MORE)
    assert run_cli_in_process("lock", cwd=root).returncode == 0
    proc = run_cli_in_process("diff", "--format", "sarif", cwd=root)
    assert proc.returncode == 0, proc.stderr
    results = _results(proc)
    new = [r for r in results if r["ruleId"] == "diff/new-executable"]
    assert new, [r["ruleId"] for r in results]
    assert new[0]["level"] == "error"
    where = new[0]["locations"][0]["physicalLocation"]
    assert where["artifactLocation"]["uri"] == "agentstack.toml"
    assert where["region"]["startLine"] == _line_of(root, "[servers.fetcher]")
    assert any(r["ruleId"] == "diff/unpinned-package" for r in results)


def test_status_sarif_on_a_stale_lock(tmp_path: Path) -> None:
    root = _project(tmp_path)
    (root / "clock.py").write_text("print('tock')\n", encoding="utf-8")
    proc = run_cli_in_process("status", "--format", "sarif", cwd=root)
    assert proc.returncode == 1  # the same exit code as the text and JSON forms
    results = _results(proc)
    assert [r["ruleId"] for r in results][:1] == ["status/lock-stale"]
    uri = results[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == "agentstack.lock"


def test_status_sarif_on_an_untrusted_project_and_a_trusted_one(tmp_path: Path) -> None:
    root = _project(tmp_path)
    untrusted = _results(run_cli_in_process("status", "--format", "sarif", cwd=root))
    assert "status/not-trusted" in [r["ruleId"] for r in untrusted]
    assert run_cli_in_process("trust", "--yes", "--accept-risk", cwd=root).returncode == 0
    assert run_cli_in_process("apply", "--write", cwd=root).returncode == 0
    proc = run_cli_in_process("status", "--format", "sarif", cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert _results(proc) == []


def test_check_sarif_points_at_the_item_beyond_the_boundary(tmp_path: Path) -> None:
    root = _project(tmp_path)
    with (root / "agentstack.toml").open("a", encoding="utf-8") as f:
        f.write(MORE)
    assert run_cli_in_process("lock", cwd=root).returncode == 0
    boundary = tmp_path / "boundary.toml"
    boundary.write_text(f'[filesystem]\nwrite = ["{tmp_path}"]\n[commands]\n'
                        'executables = ["python3"]\n', encoding="utf-8")
    proc = run_cli_in_process("check", "--boundary", str(boundary), "--format", "sarif", cwd=root)
    assert proc.returncode == 1
    results = _results(proc)
    commands = [r for r in results if r["ruleId"] == "boundary/commands"]
    assert commands, [r["ruleId"] for r in results]
    assert commands[0]["level"] == "error"
    region = commands[0]["locations"][0]["physicalLocation"]["region"]
    assert region["startLine"] == _line_of(root, "[servers.fetcher]")


def test_format_is_checked(tmp_path: Path) -> None:
    root = _project(tmp_path)
    assert run_cli_in_process("status", "--format", "xml", cwd=root).returncode == 2
    assert run_cli_in_process("status", "--json", "--format", "sarif", cwd=root).returncode == 2
    json_form = run_cli_in_process("status", "--format", "json", cwd=root)
    assert json.loads(json_form.stdout)["trust"] == "untrusted"


def test_manifest_lines_find_tables_inline_tables_and_keys() -> None:
    lines = ManifestLines(
        '[project]\nname = "x"\n\n[servers]\nclock = { command = "python3" }\n'
        '[servers."my-srv"]\ncommand = "node"\n[settings.permissions]\nallow = ["Bash(ls)"]\n'
    )
    assert lines.line("servers.clock") == 5
    assert lines.line("servers.my-srv") == 6
    assert lines.line("settings.permissions.allow") == 9
    assert lines.line("settings.permissions.deny") == 8  # the nearest declared parent
    assert lines.line("hooks.x") is None


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
_findings = st.lists(st.builds(
    Finding,
    rule=st.from_regex(r"[a-z]+/[a-z-]{1,12}", fullmatch=True),
    severity=st.sampled_from(["high", "medium", "low"]),
    message=_text.filter(bool),
    path=st.one_of(st.none(), st.from_regex(r"[a-z]{1,8}(/[a-z]{1,8})?\.[a-z]{2,4}", fullmatch=True)),
    line=st.one_of(st.none(), st.integers(1, 10_000)),
    item=st.one_of(st.none(), _text),
), max_size=6)


@settings(max_examples=60, deadline=None)
@given(findings=_findings)
def test_every_log_validates(findings: list[Finding]) -> None:
    log = _valid(sarif_log(findings, command="check", root=Path("/tmp/p")))
    assert [r["ruleId"] for r in log["runs"][0]["results"]] == [f.rule for f in findings]

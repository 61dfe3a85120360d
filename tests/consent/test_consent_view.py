"""The consent view, the consent diff and the schemas."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentstack.consent.diff import consent_diff
from agentstack.sanitize import identifier, sanitize
from agentstack.schema import SCHEMA_FILES, render
from tests.conftest import REPO, make_project

# The commands run in process: what these tests check is the library's answer, not the process.
from tests.support.cli import run_cli_in_process as run_cli

HOSTILE = [
    "\u202eexe.txt",  # right-to-left override
    "safe\u200bname",  # zero-width space
    "\x1b[31mred\x1b[0m",  # ANSI colour
    "\x1b]8;;https://evil.example\x07click\x1b]8;;\x07",  # OSC 8 hyperlink
    "\x1b]0;pwned\x07",  # OSC title
    "[bold red]markup[/]",  # rich markup
    "[/]",  # rich markup that crashes a naive renderer
    "line\u2028separator",
    "private\ue000use",
    "bell\x07",
]


def _hostile_manifest() -> str:
    def q(text: str) -> str:
        return json.dumps(text)  # a JSON string is a valid TOML basic string

    args = ", ".join(q(h) for h in HOSTILE)
    return f"""\
[project]
name = "hostile"

[servers.evil]
command = {q(HOSTILE[0])}
args = [{args}]
env = {{ A = {q(HOSTILE[2])} }}

[servers.remote]
url = "https://example.com/{HOSTILE[1]}"
headers = {{ X-Note = {q(HOSTILE[3])} }}

[hooks.h]
event = "Stop"
matcher = {q(HOSTILE[5])}
command = [{args}]

[settings.permissions]
allow = [{args}]

[settings.passthrough.codex]
note = {q(HOSTILE[4])}

[sandbox]
write_dirs = [{args}]
"""


def test_show_never_sends_control_sequences_to_the_terminal(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", _hostile_manifest())
    assert run_cli("lock", cwd=project).returncode == 0
    result = run_cli("show", cwd=project, env={"COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for char in ("\x1b", "\x07", "\u202e", "\u200b", "\u2028", "\ue000"):
        assert char not in out
    for escaped in ("\\u202e", "\\u200b", "\\u001b", "\\u0007", "\\u2028", "\\ue000"):
        assert escaped in out
    assert "[bold red]markup[/]" in out  # shown literally, not interpreted
    # The JSON form keeps exact values (a machine reader gets the real bytes, escaped by JSON).
    doc = json.loads(run_cli("show", "--json", cwd=project).stdout)
    assert doc["servers"]["evil"]["command"] == HOSTILE[0]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_sanitize_leaves_no_unsafe_character(text: str) -> None:
    import unicodedata

    out = sanitize(text)
    assert all(unicodedata.category(c) not in {"Cc", "Cf", "Co", "Cn", "Cs", "Zl", "Zp"}
               for c in out)
    # Safe text passes unchanged.
    if all(unicodedata.category(c) not in {"Cc", "Cf", "Co", "Cn", "Cs", "Zl", "Zp"}
           for c in text):
        assert out == text


@given(st.text())
def test_identifier_is_ascii(text: str) -> None:
    assert identifier(text).isascii()


def _doc(**servers: dict[str, object]) -> dict[str, object]:
    return {
        "consent": 1,
        "project": {"name": "p", "harnesses": ["codex"]},
        "servers": servers,
        "skills": {},
        "instructions": [],
        "hooks": {},
        "settings": {"permissions": {"allow": [], "deny": [], "ask": []}, "passthrough": {}},
        "sandbox": {"enabled": True, "read_dirs": [], "write_dirs": ["."], "read_files": [],
                    "write_files": [], "env": [], "network": {"block": True, "allow_domains": [],
                                                             "localhost_ports": []}, "risks": []},
        "lock": "b3:" + "0" * 64,
    }


def _server(command: str, *args: str, env: dict[str, object] | None = None,
            risks: list[str] | None = None) -> dict[str, object]:
    return {"transport": "stdio", "command": command, "args": list(args), "cwd": ".",
            "env": env or {}, "files": [], "risks": risks or []}


def test_diff_findings_cover_each_risk() -> None:
    old = _doc(a=_server("python3", "a.py", env={"T": {"secret": "tok"}}))
    new = _doc(
        a=_server("python3", "a2.py", env={"T": {"secret": "tok"}}),
        b=_server("npx", "pkg@latest", env={"T": {"secret": "tok"}},
                  risks=["unpinned-package:npm:pkg@latest"]),
        meta={"transport": "http", "url": "http://169.254.169.254/", "headers":
              {"Authorization": {"secret": "tok"}}, "files": [],
              "risks": ["remote-host:169.254.169.254", "link-local:169.254.169.254",
                        "plain-http:169.254.169.254"]},
    )
    new["sandbox"]["write_dirs"] = [".", "~/.ssh"]  # type: ignore[index]
    result = consent_diff(old, new)
    codes = {(f.code, f.item) for f in result.findings}
    assert ("changed-executable", "servers.a") in codes
    assert ("new-executable", "servers.b") in codes
    assert ("unpinned-package", "servers.b") in codes
    assert ("link-local", "servers.meta") in codes
    assert ("secret-new-process", "servers.b") in codes
    assert ("secret-new-process", "servers.meta") in codes
    assert ("new-credentialed-host", "servers.meta") in codes
    assert ("widened-write", "sandbox.write_dirs") in codes
    severities = [f.severity for f in result.findings]
    assert severities == sorted(severities, key=["high", "medium", "low"].index)
    assert {c.path for c in result.changes} >= {"servers.a.args", "servers.b", "servers.meta"}
    assert consent_diff(new, new).findings == [] and consent_diff(new, new).changes == []


def test_diff_command_shows_findings_first(tmp_path: Path) -> None:
    old = _doc(a=_server("python3", "a.py"))
    new = _doc(a=_server("python3", "a.py"), b=_server("uvx", "tool"))
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    result = run_cli("diff", "old.json", "new.json", cwd=tmp_path, env={"COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.index("Risk findings") < result.stdout.index("Changes")
    assert "new-executable" not in result.stdout  # codes are for JSON; people read messages
    assert "new server runs: uvx tool" in result.stdout
    as_json = json.loads(run_cli("diff", "old.json", "new.json", "--json", cwd=tmp_path).stdout)
    assert {f["code"] for f in as_json["findings"]} >= {"new-executable", "unpinned-package"}
    bad = run_cli("diff", "old.json", "missing.json", cwd=tmp_path)
    assert bad.returncode == 2


def test_show_json_round_trips_through_diff(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", '[project]\nname = "p"\n[servers.a]\ncommand = "echo"\n')
    run_cli("lock", cwd=project)
    (tmp_path / "a.json").write_text(run_cli("show", "--json", cwd=project).stdout)
    manifest = project / "agentstack.toml"
    manifest.write_text(manifest.read_text().replace('"echo"', '"/bin/echo"'))
    run_cli("lock", cwd=project)
    result = run_cli("diff", str(tmp_path / "a.json"), "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    findings = json.loads(result.stdout)["findings"]
    assert [f["code"] for f in findings] == ["changed-executable"]


def test_schemas_are_current() -> None:
    for which, filename in SCHEMA_FILES.items():
        on_disk = (REPO / "schemas" / filename).read_text(encoding="utf-8")
        assert on_disk == render(which), (
            f"schemas/{filename} is stale: run 'python -m agentstack.schema'"
        )


def test_schema_command_prints_the_manifest_schema(tmp_path: Path) -> None:
    result = run_cli("schema", cwd=tmp_path)
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    assert set(schema["properties"]) >= {"project", "servers", "skills", "hooks", "sandbox"}

"""The risk model is complete: every field of the consent document maps to a finding rule (or is
documented as cosmetic in `risk.FIELD_RULES`), and changing each field raises that finding."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from agentstack.consent.diff import HIGH_RISK_CODES, consent_diff
from agentstack.consent.risk import FIELD_RULES, sensitive_path
from tests.conftest import _isolate
from tests.consent.test_digest_properties import build_project

ITEM_SECTIONS = {"servers", "hooks", "skills", "plugins", "sandbox.credentials"}


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory, session_home: Path) -> dict[str, Any]:
    # session_home: the temporary HOME is in place before this module-scoped fixture builds a
    # project (which mirrors a git repository into agentstack's cache).
    base = tmp_path_factory.mktemp("risk")
    with pytest.MonkeyPatch.context() as patch:
        # Its own homes as well (the mirror goes to this cache), whatever an earlier module left.
        _isolate(patch, base / "home")
        p = build_project(base)
        p.data["sandbox"]["credentials"] = {
            "model": {
                "upstream": "https://api.example.com",
                "secret": "api-key",
                "env": "API_KEY",
                "base_url_env": "API_BASE",
            }
        }
        p.write()
        return p.digest()[1]


def _fields(value: Any, path: str, out: set[str], missing: list[str]) -> None:
    if path in FIELD_RULES:
        out.add(path)
        return
    if not isinstance(value, dict):
        missing.append(path)
        return
    for key, item in value.items():
        generic = "*" if path in ITEM_SECTIONS else key
        _fields(item, f"{path}.{generic}" if path else generic, out, missing)


def test_every_field_of_the_consent_document_has_a_rule(document: dict[str, Any]) -> None:
    seen: set[str] = set()
    missing: list[str] = []
    _fields(document, "", seen, missing)
    assert not missing, f"fields without a finding rule or a 'cosmetic:' entry: {missing}"
    # ... and no rule is left for a field the document no longer has.
    assert seen == set(FIELD_RULES), set(FIELD_RULES) - seen


def test_a_new_field_without_a_rule_fails_the_enumeration(document: dict[str, Any]) -> None:
    grown = copy.deepcopy(document)
    grown["servers"]["local"]["retries"] = 3
    missing: list[str] = []
    _fields(grown, "", set(), missing)
    assert missing == ["servers.*.retries"]


def _mutate(value: Any, rule: str) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "-changed"
    if value is None:
        return "CHANGED"
    if isinstance(value, dict):
        return {**value, "NEW_NAME": {"literal": "x"}} if value or rule else {"k": "v"}
    if isinstance(value, list):
        if value and isinstance(value[0], dict) and "digest" in value[0]:
            first = dict(value[0])
            first["digest"] = "b3:" + "0" * 64
            return [first, *value[1:]]
        if rule == "permission-relaxed":
            return value[1:] if value else ["Bash(x)"]
        if value and isinstance(value[0], int):
            return [*value, 4444]
        if rule == "harness-added":
            return [*value, "opencode"]
        if rule == "new-host":
            return [*value, "new.example.com"]
        return [*value, "/srv/new-entry" if "widened" in rule else "NEW_ENTRY"]
    raise AssertionError(type(value))


def _locate(document: dict[str, Any], pattern: str) -> tuple[dict[str, Any], str] | None:
    """The first concrete (parent, key) in the document matching `pattern`."""
    parts = pattern.split(".")

    def walk(node: Any, index: int) -> tuple[dict[str, Any], str] | None:
        if index == len(parts) - 1:
            return (node, parts[index]) if isinstance(node, dict) and parts[index] in node else None
        if not isinstance(node, dict):
            return None
        part = parts[index]
        children = sorted(node) if part == "*" else [part] if part in node else []
        for child in children:
            found = walk(node[child], index + 1)
            if found is not None:
                return found
        return None

    return walk(document, 0)


@pytest.mark.parametrize(
    "pattern", [p for p, rule in FIELD_RULES.items() if not rule.startswith("cosmetic:")]
)
def test_changing_each_field_raises_its_finding(document: dict[str, Any], pattern: str) -> None:
    changed = copy.deepcopy(document)
    located = _locate(changed, pattern)
    assert located is not None, pattern
    parent, key = located
    rule = FIELD_RULES[pattern]
    parent[key] = _mutate(parent[key], rule)
    codes = {f.code for f in consent_diff(document, changed).findings}
    assert rule in codes, (pattern, codes)


@pytest.mark.parametrize(
    ("key", "value", "code"),
    [
        ("read_dirs", "~", "sandbox-reaches-secrets"),
        ("read_dirs", "$HOME", "sandbox-reaches-secrets"),
        ("read_dirs", "~/.ssh", "sandbox-reaches-secrets"),
        ("read_files", "~/.aws/credentials", "sandbox-reaches-secrets"),
        ("read_dirs", "~/.config", "sandbox-reaches-secrets"),
        ("write_dirs", "/", "sandbox-reaches-secrets"),
        ("read_dirs", "/srv/data", "widened-read"),
        ("env", "GITHUB_TOKEN", "secret-env"),
        ("env", "SSH_AUTH_SOCK", "secret-env"),
        ("env", "LD_PRELOAD", "secret-env"),
        ("env", "TERM", "widened-env"),
    ],
)
def test_sandbox_widening_is_a_finding(
    document: dict[str, Any], key: str, value: str, code: str
) -> None:
    changed = copy.deepcopy(document)
    changed["sandbox"][key] = [*changed["sandbox"][key], value]
    findings = [f for f in consent_diff(document, changed).findings if f.code == code]
    assert findings, [f.code for f in consent_diff(document, changed).findings]
    high = code in ("sandbox-reaches-secrets", "secret-env")
    assert (findings[0].severity == "high") is high
    assert (code in HIGH_RISK_CODES) is high


def test_new_localhost_port_is_a_finding(document: dict[str, Any]) -> None:
    changed = copy.deepcopy(document)
    changed["sandbox"]["network"]["localhost_ports"].append(22)
    codes = {f.code for f in consent_diff(document, changed).findings}
    assert "widened-port" in codes


@pytest.mark.parametrize("path", ["~/src", "/usr/share", "build", "~/.cargo/bin", "~/.rustup"])
def test_ordinary_paths_are_not_sensitive(path: str) -> None:
    assert sensitive_path(path) is None


def test_first_review_shows_sandbox_reach_too(document: dict[str, Any]) -> None:
    changed = copy.deepcopy(document)
    changed["sandbox"]["read_dirs"].append("~/.gnupg")
    assert any(f.code == "sandbox-reaches-secrets" for f in consent_diff(None, changed).findings)


def test_reexecution_is_compared_on_what_runs(tmp_path: Path, document: dict[str, Any]) -> None:
    """Env of a server is part of what it executes: changing a literal is a changed-executable."""
    changed = copy.deepcopy(document)
    changed["servers"]["local"]["env"]["LOG_LEVEL"] = {"literal": "trace"}
    findings = consent_diff(document, changed).findings
    assert any(f.code == "changed-executable" and "env LOG_LEVEL" in f.message for f in findings)


def test_a_grant_over_a_credential_file_the_sandbox_closes_is_sensitive() -> None:
    """The risk model reads the one credential list the guard and the sandbox share: granting a
    directory that holds one (`~/.cargo` holds `credentials`) reaches it."""
    assert sensitive_path("~/.cargo") is not None
    assert sensitive_path("~/.config/gh/hosts.yml") is not None

"""The boundary check answers every domain, in linear work, and says when it cannot decide.

A disabled sandbox reaches every path, host, variable and secret; a domain the check did not get
to (past its limits, past its time budget) is `inconclusive`, never a pass; the answer names the
domains it covered.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from agentstack.consent.boundary import (
    DOMAINS,
    LIMITS,
    Boundary,
    check,
    check_document,
    describe,
    parse_boundary,
)
from agentstack.consent.reach import build_reach
from tests.conftest import copy_example, run_cli

HOME = "/h/u"
ROOT = "/p/project"

PERMIT_ALL_BUT_ENVIRONMENT = b"""
[filesystem]
write = ["/"]
[network]
connect = ["*"]
[secrets]
"*" = ["*"]
[commands]
executables = ["*"]
packages = ["*"]
unpinned = true
shell = true
unpinnable = true
loader_env = true
[servers]
remote = ["*"]
[permissions]
allow = ["*"]
[settings]
passthrough = { "*" = ["*"] }
[surface]
executing = ["*"]
"""


def _boundary(text: bytes) -> Boundary:
    return parse_boundary(text, home=HOME, source="b.toml")


def _disabled(env: list[str]) -> dict[str, Any]:
    return {"sandbox": {"enabled": False, "env": env}}


def test_a_disabled_sandbox_is_not_within_a_boundary_without_environment_rules() -> None:
    """The reported case: `sandbox.enabled = false` with `env = ["LANG"]` passed a boundary that
    has no environment rules, because the disabled sandbox's environment was left empty."""
    result = check_document(_disabled(["LANG"]), Path(ROOT), _boundary(PERMIT_ALL_BUT_ENVIRONMENT),
                            home=HOME)
    assert result.result == "exceeds_boundary", result
    env = [v for v in result.violations if v.domain == "environment"]
    assert env and "unconfined harness" in env[0].counterexample, result
    assert dict(result.domains)["environment"] == "exceeds"
    # Even with no names listed at all: the unconfined harness gets the whole environment.
    assert check_document(_disabled([]), Path(ROOT), _boundary(PERMIT_ALL_BUT_ENVIRONMENT),
                          home=HOME).result == "exceeds_boundary"


def test_a_disabled_sandbox_reaches_every_secret() -> None:
    only_servers = PERMIT_ALL_BUT_ENVIRONMENT.replace(b'"*" = ["*"]', b'"*" = ["servers.*"]')
    text = only_servers + b'[environment]\nsandbox = ["*"]\nservers = ["*"]\n'
    result = check_document(_disabled([]), Path(ROOT), _boundary(text), home=HOME)
    assert result.result == "exceeds_boundary", result
    assert [v.domain for v in result.violations] == ["secrets"]
    assert "reaches the unconfined harness" in result.violations[0].counterexample
    everything = PERMIT_ALL_BUT_ENVIRONMENT + b'[environment]\nsandbox = ["*"]\nservers = ["*"]\n'
    assert check_document(_disabled(["LANG"]), Path(ROOT), _boundary(everything),
                          home=HOME).result == "within_boundary"


def test_every_domain_is_answered() -> None:
    result = check_document({}, Path(ROOT), _boundary(b"[filesystem]\nwrite = ['/p']\n"),
                            home=HOME)
    assert result.result == "within_boundary"
    assert [d for d, _ in result.domains] == list(DOMAINS)
    assert set(dict(result.domains).values()) == {"within"}
    assert result.to_json()["coverage"] == {"domains": list(DOMAINS)}
    assert describe(result)[-1] == "coverage: domains=" + ",".join(DOMAINS)
    unknown = check_document({"teleport": {}}, Path(ROOT),
                             _boundary(b"[filesystem]\nwrite = ['/p']\n"), home=HOME)
    assert unknown.result == "unsupported"
    assert dict(unknown.domains)["document"] == "unsupported"
    assert "document" not in unknown.to_json()["coverage"]["domains"]


# ----------------------------------------------------------------------------- linear work


def _calls(n: int) -> int:
    """Python function calls the check makes for `n` allow_domains against `n` host rules."""
    document = {"sandbox": {"network": {"allow_domains": [f"h{i}.example.net" for i in range(n)]}}}
    rules = ",".join(f"'h{i}.example.net'" for i in range(n))
    boundary = _boundary(f"[filesystem]\nwrite = ['/p']\n[network]\nconnect = [{rules}]\n"
                         .encode())
    reach = build_reach(document, ROOT, HOME)
    count = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        result = check(reach, boundary)
    finally:
        sys.setprofile(None)
    assert result.result == "within_boundary", result
    return count


def test_the_checks_work_grows_linearly_with_rules_and_endpoints() -> None:
    """4,000 allow_domains against 4,000 rules took seconds: every endpoint was compared with
    every rule. Counted in calls, not timed: four times the input is about four times the work
    (quadratic would be sixteen). The time itself: benchmarks/boundary.py."""
    small, large = _calls(200), _calls(800)
    assert large / small < 6, (small, large)


# ------------------------------------------------------------------------ inconclusive


def test_past_the_rule_limit_the_answer_is_inconclusive() -> None:
    rules = ",".join(f"'/srv/d{i}'" for i in range(LIMITS.rules + 1))
    boundary = _boundary(f"[filesystem]\nread = [{rules}]\nwrite = ['/p']\n".encode())
    result = check_document({}, Path(ROOT), boundary, home=HOME)
    assert result.result == "inconclusive"
    assert result.inconclusive is not None and f"{LIMITS.rules:,}" in result.inconclusive
    assert result.to_json()["coverage"] == {"domains": []}


def test_past_the_access_limit_the_answer_is_inconclusive() -> None:
    domains = [f"h{i}.example.net" for i in range(LIMITS.accesses // 2 + 1)]
    boundary = _boundary(b"[filesystem]\nwrite = ['/p']\n[network]\nconnect = ['*']\n")
    result = check_document({"sandbox": {"network": {"allow_domains": domains}}}, Path(ROOT),
                            boundary, home=HOME)
    assert result.result == "inconclusive", result
    assert f"{LIMITS.accesses:,}" in (result.inconclusive or "")


def test_past_the_time_budget_the_answer_is_inconclusive() -> None:
    boundary = _boundary(b"[filesystem]\nwrite = ['/p']\n")
    document = {"sandbox": {"env": ["LANG"]}}
    reach = build_reach(document, ROOT, HOME)
    result = check(reach, boundary, budget=0.0)
    assert result.result == "inconclusive"
    assert "time budget" in (result.inconclusive or "")
    assert "inconclusive" in dict(result.domains).values()
    assert describe(result)[0].startswith("inconclusive")
    assert check(reach, boundary).result == "exceeds_boundary"


@pytest.mark.slow
def test_inconclusive_exits_1_even_with_allow_unsupported(tmp_path: Path) -> None:
    root = copy_example("minimal", tmp_path)
    assert run_cli("lock", cwd=root).returncode == 0
    many = tmp_path / "many.toml"
    rules = ",".join(f'"/srv/d{i}"' for i in range(LIMITS.rules + 1))
    many.write_text(f'[filesystem]\nread = [{rules}]\nwrite = ["/"]\n', encoding="utf-8")
    done = run_cli("check", "--boundary", str(many), "--allow-unsupported", cwd=root)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("inconclusive")
    assert "coverage: domains=" in done.stdout
    as_json = run_cli("check", "--boundary", str(many), "--json", cwd=root)
    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    assert report["result"] == "inconclusive" and report["coverage"] == {"domains": []}


def test_a_counterexample_for_every_host_is_found_past_suffix_rules() -> None:
    """`*` (network.block = false) against `*.example` rules: the host named is one no rule
    permits (the old candidates all ended in `.example`, and the check crashed)."""
    boundary = _boundary(b"[filesystem]\nwrite = ['/p']\n[network]\n"
                         b"connect = ['*.example', 'h0', '192.0.2.1']\n")
    reach = build_reach({"sandbox": {"network": {"block": False}}}, ROOT, HOME)
    result = check(reach, boundary)
    assert result.result == "exceeds_boundary"
    shown = result.violations[0].counterexample
    assert shown.startswith("network connect ")
    host, _, port = shown.removeprefix("network connect ").rpartition(":")
    assert not any(rule.host.matches(host.strip("[]")) and rule.low <= int(port) <= rule.high
                   for rule in boundary.connect), shown


def test_cached_parent_resolution_is_realpath(tmp_path: Path) -> None:
    """Boundary prefixes resolve through a per-file cache of parents; that is os.path.realpath
    whatever the links (a linked parent, a linked leaf, a dangling one, a missing tree)."""
    import os

    from agentstack.consent.boundary import _path

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "leaf").symlink_to(tmp_path / "link")
    (tmp_path / "real" / "dangling").symlink_to(tmp_path / "gone")
    cache: dict[str, str] = {}
    for rel in ("link/x", "link", "real/leaf", "real/leaf/y", "real/dangling", "real/dangling/z",
                "nope/z", "link/../real/x"):
        path = str(tmp_path / rel)
        assert _path(path, HOME, "w", cache) == os.path.realpath(os.path.normpath(path)), rel
    assert _path("/", HOME, "w", cache) == "/"

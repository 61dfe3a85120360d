"""A harness is one description (`agentstack.harnesses`): every module's per-harness table is built
from the descriptions, and the guard's is compiled from them."""

from __future__ import annotations

import typing

from agentstack import _guard, harnesses, harnessgen, manifest, manifestrules, mcp_status, snapshot
from agentstack.harnesses import ALL, DENY_SHAPES, HOOK_INPUTS


def test_the_guards_generated_table_is_current() -> None:
    text = harnessgen.GUARD.read_text(encoding="utf-8")
    assert harnessgen.rewrite(text, harnessgen.render_block()) == text, (
        "agentstack/_guard.py's harness table is stale: run 'python -m agentstack.harnessgen'"
    )
    table = harnessgen.guard_table()
    assert _guard.HARNESSES == harnesses.NAMES == table["HARNESSES"]
    for name in ("DENY_SHAPE", "HOOK_INPUT", "NAMES_EVENT", "TOOL_TABLE", "TABLE_REFUSED"):
        assert getattr(_guard, name) == table[name], name
    assert table["TABLE_TOOLS"] == _guard.TABLE_TOOLS
    assert {t: sorted(v) for t, v in _guard._INERT.items()} == table["TABLE_INERT"]


def test_the_guard_judges_each_harness_by_its_description() -> None:
    for h in ALL:
        assert h.deny_shape in DENY_SHAPES, h.name
        assert set(h.hook_input) <= set(HOOK_INPUTS), h.name
        assert h.tool_table in harnesses.BY_NAME, h.name  # a table named after a harness
        sharing = [o for o in ALL if o.tool_table == h.tool_table]
        assert set(_guard.TOOLS[h.name]) == {t for o in sharing for t in o.tools}
        assert _guard.INERT[h.name] == {t for o in sharing for t in o.inert_tools}
        refused = {t for o in sharing for t in o.refused_tools}
        assert set(_guard.REFUSED.get(h.name, {})) == refused
        # a tool is in one table only: known, inert or refused
        assert not set(h.tools) & set(h.refused_tools) and not h.inert_tools & set(h.refused_tools)
        for spec in h.tools.values():
            for item in spec:
                key, kind = item.split(":")
                assert key and kind.rstrip("?") in (
                    "read", "write", "pattern", "url", "urls", "server", "patch", "regex", "opaque"
                ), (h.name, item)
    body = _guard.deny_body("vscode", "why")
    assert body["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert _guard.deny_body("opencode", "why") == {"decision": "deny", "reason": "why"}
    assert _guard.deny_body("copilot", "why") == {
        "permissionDecision": "deny", "permissionDecisionReason": "why"
    }
    assert _guard.deny_body("cursor", "why")["permission"] == "deny"
    unknown = _guard.deny_body("no-such-harness", "why")  # every shape at once
    assert {"hookSpecificOutput", "decision", "permissionDecision"} <= set(unknown)


def test_every_per_harness_table_is_built_from_the_descriptions() -> None:
    from agentstack_adapters.registry import BUILTIN

    from agentstack.sandbox import private_state, profiles

    names = harnesses.NAMES
    assert manifestrules.HARNESSES == manifest.HARNESSES == names
    assert typing.get_args(manifest.HarnessName) == names
    assert tuple(h.name for h in ALL if h.default) == manifestrules.DEFAULT_HARNESSES
    assert tuple(h.name for h in ALL if h.mcp_list) == mcp_status.HAS_MCP_LIST
    assert tuple(h.name for h in ALL if h.private_state) == private_state.HARNESSES
    assert {h.name: h.watched for h in ALL if h.watched} == snapshot.WATCHED
    assert list(BUILTIN) == [h.name for h in ALL if h.adapter]
    assert {h.name for h in ALL if h.has_adapter} == {h.name for h in ALL if h.adapter}
    for h in ALL:
        if h.adapter:
            assert BUILTIN[h.name].name == h.name
            assert type(BUILTIN[h.name]).__name__ == h.adapter.partition(":")[2]
            assert getattr(BUILTIN[h.name], "renders_into", ()) in ((), h.renders_into)
        profile = profiles.PROFILES[h.name]
        assert (profile.binary, profile.read_dirs, profile.env_set) == (
            h.binary, h.sandbox_read_dirs, h.sandbox_env
        )
        assert profile.private_state == h.private_state
        for d in h.config_dirs:
            assert d in harnesses.PROTECTED_DIRS, (h.name, d)
        for rel, fmt, keys in h.watched:
            assert fmt in ("json", "toml") and keys and all(keys), (h.name, rel)
    assert {h.name: h.renders_into for h in ALL if h.renders_into} == harnesses.RENDERS_INTO
    assert {h.name: h.plugin_markers for h in ALL if h.plugin_markers} == harnesses.PLUGIN_MARKERS
    assert len(harnesses.PROTECTED_DIRS) == len(set(harnesses.PROTECTED_DIRS))


def test_the_schema_lists_the_descriptions_harnesses() -> None:
    import json

    from agentstack.schemas import schema_for

    text = json.dumps(schema_for("manifest"))
    listed = json.loads(text)["$defs"]["ProjectSection"]["properties"]["harnesses"]
    assert tuple(listed["items"]["enum"]) == harnesses.NAMES

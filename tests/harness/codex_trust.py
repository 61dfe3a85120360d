"""Codex hook trust: the ``[hooks.state."<key>"] trusted_hash`` entries Codex needs in
``$CODEX_HOME/config.toml`` before it runs a project hook. Codex SILENTLY SKIPS a hook whose entry is
missing or whose hash does not match (the tool then runs unguarded), so this must be exact.

Measured against Codex 0.171.0 (``codex app-server`` → ``hooks/list`` reports each hook's ``key``
and ``currentHash``; every case below was compared with it, and a trusted deny hook was proved to
block a real ``codex exec`` tool call in ``test_harness_kit.py``):

Key: ``"<abs path of the hooks file>:<event>:<group>:<index>"``, e.g.
``/work/p/.codex/hooks.json:pre_tool_use:0:0``.

* ``<event>`` is the snake_case event name (``PreToolUse`` → ``pre_tool_use``).
* ``<group>`` is the index of the matcher group in ``hooks.<Event>`` and ``<index>`` the index of
  the handler in that group's ``hooks`` list. Each handler is trusted separately.
* The path is the hooks file under the project directory as Codex sees it (for ``codex exec`` that
  is its working directory, which the kernel reports resolved: use the realpath). ``app-server``
  given a symlinked cwd keys by the symlinked path, not the resolved one.
* Hooks in a TOML ``[hooks]`` table use the TOML file's path in the same way.

Hash: ``"sha256:" + sha256(canonical JSON as UTF-8).hexdigest()`` where canonical JSON is
``json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`` (non-ASCII stays raw
UTF-8, as serde_json writes it: measured with ``é``/``✓`` in the command and matcher) of::

    {"event_name": "pre_tool_use",          # snake_case
     "matcher": "*",                          # OMITTED when absent/null, kept when "" ;
                                              # always omitted for events Codex gives no matcher:
                                              # pre/post_model_request, user_prompt_submit, stop,
                                              # interrupt
     "hooks": [                               # ONE element: the handler the key names
        {"type": "command",
         "command": "...",
         "timeout": 30,                       # seconds; 600 when absent
         "async": false,                      # false when absent
         "statusMessage": "...",              # only when present (even ""); omitted when absent/null
         "additionalContextLimit": 100}]}     # only when present AND the event can emit
                                              # additionalContext (pre_tool_use, post_tool_use,
                                              # session_start, user_prompt_submit, subagent_start);
                                              # ignored (with a warning) for other events

Unknown handler keys (e.g. Claude Code's ``onFailure``) are ignored by Codex and not hashed.
Any change to a hashed field changes the hash, and Codex then reports the hook ``modified`` and
skips it until the entry is updated.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_TIMEOUT_SEC = 600
# Events for which Codex 0.171.0 drops the matcher (hooks/list reports matcher null).
EVENTS_WITHOUT_MATCHER = frozenset(
    {"pre_model_request", "post_model_request", "user_prompt_submit", "stop", "interrupt"})
# Events whose handlers may carry additionalContextLimit (hashed only for these).
EVENTS_WITH_ADDITIONAL_CONTEXT = frozenset(
    {"pre_tool_use", "post_tool_use", "session_start", "user_prompt_submit", "subagent_start"})


def snake_event(event: str) -> str:
    """``PreToolUse`` / ``preToolUse`` / ``pre_tool_use`` → ``pre_tool_use``."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", event).lower()


def _normalize_handler(event: str, handler: Mapping[str, Any]) -> dict[str, Any]:
    kind = handler.get("type", "command")
    if kind != "command":
        raise ValueError(f"only command hooks were measured, not {kind!r}")
    out: dict[str, Any] = {
        "type": "command",
        "command": handler["command"],
        "timeout": handler.get("timeout", DEFAULT_TIMEOUT_SEC),
        "async": bool(handler.get("async", False)),
    }
    if handler.get("statusMessage") is not None:
        out["statusMessage"] = handler["statusMessage"]
    if handler.get("additionalContextLimit") is not None and event in EVENTS_WITH_ADDITIONAL_CONTEXT:
        out["additionalContextLimit"] = handler["additionalContextLimit"]
    return out


def codex_hook_trusted_hash(event_name: str, matcher: str | None,
                            hooks: list[dict[str, Any]]) -> str:
    """The ``trusted_hash`` value (``"sha256:<64 hex>"``) for one Codex hook handler.

    ``event_name``: ``"PreToolUse"`` or ``"pre_tool_use"``. ``matcher``: the group's matcher as
    written (None when the group has none). ``hooks``: the handler(s) exactly as written in
    hooks.json; Codex hashes each handler on its own, so pass ONE: ``[group["hooks"][index]]``.
    Defaults are filled in as Codex does (timeout 600, async false)."""
    event = snake_event(event_name)
    obj: dict[str, Any] = {
        "event_name": event,
        "hooks": [_normalize_handler(event, h) for h in hooks],
    }
    if matcher is not None and event not in EVENTS_WITHOUT_MATCHER:
        obj["matcher"] = matcher
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def codex_hook_state_key(hooks_json_path: Path, event: str, group: int, index: int) -> str:
    """``"<abs hooks.json path>:<snake event>:<group>:<index>"``, the ``[hooks.state."…"]`` key.
    The path is made absolute but not resolved: pass the path as Codex will see it (for
    ``codex exec`` run in the project: the realpath)."""
    path = Path(hooks_json_path)
    if not path.is_absolute():
        path = Path.cwd() / path
    return f"{path}:{snake_event(event)}:{group}:{index}"


def codex_hook_trust_entries(hooks_json_path: Path, document: Mapping[str, Any]) -> dict[str, str]:
    """Every ``key → trusted_hash`` for a hooks.json document (``{"hooks": {Event: [groups]}}``)."""
    entries: dict[str, str] = {}
    for event, groups in (document.get("hooks") or {}).items():
        for g, group in enumerate(groups or []):
            for i, handler in enumerate(group.get("hooks") or []):
                key = codex_hook_state_key(hooks_json_path, event, g, i)
                entries[key] = codex_hook_trusted_hash(event, group.get("matcher"), [handler])
    return entries


def toml_string(value: str) -> str:
    """A TOML basic string. JSON's escapes (\\", \\\\, \\n, \\uXXXX for controls) are TOML's too;
    raw non-ASCII is kept (JSON's surrogate-pair escapes would be invalid TOML) and DEL, which
    TOML forbids raw, is escaped."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def codex_hook_trust_toml(entries: Mapping[str, str]) -> str:
    """``[hooks.state."<key>"]\\ntrusted_hash = "…"`` blocks for config.toml."""
    return "".join(f"\n[hooks.state.{toml_string(key)}]\ntrusted_hash = {toml_string(value)}\n"
                   for key, value in entries.items())

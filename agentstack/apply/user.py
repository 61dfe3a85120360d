"""What the user-level setup (`$AGENTSTACK_HOME/agentstack.toml`) renders: not project files, but
the harnesses' user-level configs, and there only what agentstack owns (every other key, file and
line the user has stays):

| harness | file | owned |
|---|---|---|
| claude-code | `~/.claude.json` | `mcpServers.NAME` (the container is watched: an entry added by hand is foreign) |
| claude-code | `~/.claude/settings.json` | `hooks.EVENT` of the guard's events (the user-level guard first) and of the setup's hooks |
| claude-code | `~/.claude/skills/NAME/` | every file of the setup's skill NAME (whole files) |
| claude-code | `~/.claude/CLAUDE.md` | the agentstack block: the setup's instructions |
| codex | `$CODEX_HOME/config.toml` | `mcp_servers.NAME` (watched), the user-level guard (`hooks.PreToolUse`, `hooks.UserPromptSubmit`) and the trusted hash of every hook rendered |
| codex | `$CODEX_HOME/hooks.json` | `hooks.EVENT` of the setup's hooks |
| codex | `~/.agents/skills/NAME/` | every file of the setup's skill NAME |
| codex | `$CODEX_HOME/AGENTS.md` | the agentstack block: the setup's instructions |
| gemini-cli | `~/.gemini/settings.json` | `mcpServers.NAME` (watched), `hooks.BeforeTool`: the user-level guard |
| qwen-code | `~/.qwen/settings.json` | `mcpServers.NAME` (watched), `hooks.PreToolUse`: the user-level guard |
| droid | `~/.factory/mcp.json` | `mcpServers.NAME` (watched) |
| droid | `~/.factory/settings.json` | `hooks.PreToolUse`: the user-level guard |
| copilot | `~/.copilot/mcp-config.json` | `mcpServers.NAME` (watched) |
| copilot | `~/.copilot/hooks/agentstack-guard.json` | the user-level guard |

The engine (`agentstack.apply.engine`) calls `render_user` with its render context; this module
imports nothing above it (the command side of the user-level setup is `agentstack.userlevel`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from agentstack import harnesses as _harnesses
from agentstack.errors import InvalidInput

# The harnesses whose descriptions say the user-level setup renders for them (each has its
# rendering below).
HARNESSES = tuple(h.name for h in _harnesses.ALL if h.user_level)
# What a user-level setup may declare: servers, skills, hooks and instructions (rendered), and
# the settings/sandbox tables every manifest has. Anything else is refused by `trust --user` and
# `apply --user`, never half-rendered.
# The harnesses that get the skills, hooks and instructions too (the others: servers only).
CONTEXT_HARNESSES = ("claude-code", "codex")
_UNRENDERED_KINDS = ("plugins", "agents", "commands")
# The user-level guard's own events: their hook lists hold the guard first, then the setup's
# hooks. `revoke --user` keeps the guard there and removes the rest.
GUARD_EVENTS = ("PreToolUse", "UserPromptSubmit")
# Where each harness loads a person's own skills and instructions (measured with the pinned
# binaries: tests/harness/test_harness_user_level.py).
CLAUDE_SKILLS = (".claude", "skills")
CLAUDE_INSTRUCTIONS = (".claude", "CLAUDE.md")
CODEX_SKILLS = (".agents", "skills")
CODEX_INSTRUCTIONS = "AGENTS.md"  # in $CODEX_HOME
CODEX_HOOKS = "hooks.json"  # in $CODEX_HOME


def unrendered(document: dict[str, Any]) -> list[str]:
    """Items of a user-level setup that `apply --user` does not render (it refuses them)."""
    out: list[str] = []
    for kind in _UNRENDERED_KINDS:
        section = document.get(kind)
        if isinstance(section, dict) and section:
            out.extend(f"{kind}.{name}" for name in sorted(section))
        elif isinstance(section, list) and section:
            out.append(kind)
    settings = document.get("settings") or {}
    if any((settings.get("permissions") or {}).values()):
        out.append("settings.permissions")
    for harness, keys in sorted((settings.get("passthrough") or {}).items()):
        if keys:
            out.append(f"settings.passthrough.{harness}")
    return out


def check_renderable(document: dict[str, Any]) -> None:
    harnesses = list(document["project"]["harnesses"])
    other = [h for h in harnesses if h not in HARNESSES]
    if other:
        raise InvalidInput(
            f"the user-level setup names {', '.join(other)}: user-level configs are rendered for "
            + ", ".join(HARNESSES) + " only",
            hint="set [project] harnesses in $AGENTSTACK_HOME/agentstack.toml to those",
        )
    servers_only = [h for h in harnesses if h not in CONTEXT_HARNESSES]
    context = [k for k in ("skills", "hooks", "instructions") if document.get(k)]
    if servers_only and context:
        raise InvalidInput(
            f"the user-level setup declares {', '.join(context)} and names "
            f"{', '.join(servers_only)}, for which user-level configs hold its servers only",
            hint="set [project] harnesses to " + " and ".join(CONTEXT_HARNESSES) + ", or keep "
            "those items per project",
        )
    left = unrendered(document)
    if left:
        raise InvalidInput(
            "the user-level setup declares what 'apply --user' does not render yet: "
            + ", ".join(left),
            hint="user-level setups render servers, skills, hooks and instructions; declare the "
            "rest per project",
        )


def skill_dirs(home: Path, harness: str) -> Path:
    """Where `harness` loads a person's own skills from (below the home, whatever $CODEX_HOME
    says, as measured)."""
    return home.joinpath(*(CLAUDE_SKILLS if harness == "claude-code" else CODEX_SKILLS))


def render_user(context: Any, harnesses: list[str] | None = None) -> list[Any]:
    """The owned keys, blocks and files of the user-level configs (see the module docstring);
    `context` is the engine's `RenderContext` for the user-level setup."""
    from agentstack_adapters import OwnedBlock, OwnedKeys
    from agentstack_adapters.claude_code import _server as claude_server
    from agentstack_adapters.codex import _server as codex_server
    from agentstack_adapters.codex import codex_home, hook_state_key, hook_trusted_hash
    from agentstack_adapters.common import guard_groups, instructions_text

    consent = context.consent
    check_renderable(consent)
    servers = consent["servers"]
    targets = harnesses or list(consent["project"]["harnesses"])
    home: Path = context.user_home
    instructions = instructions_text(context) if consent["instructions"] else ""
    ops: list[Any] = []
    if "claude-code" in targets:
        ops.append(OwnedKeys(
            path=str(home / ".claude.json"), format="json",
            keys={("mcpServers", n): claude_server(context, s) for n, s in sorted(servers.items())},
            user_level=True, guarded=(("mcpServers",),),
        ))
        guard, rest = _hook_lists(context, "claude-code",
                                  guard_groups(context, "claude-code", user_level=True,
                                               extra={"onFailure": "block"}))
        settings = str(home / ".claude" / "settings.json")
        ops.append(OwnedKeys(
            path=settings, format="json",
            keys={("hooks", event): value for event, value in guard.items()},
            user_level=True, keep_on_revoke=True, guarded=(("disableAllHooks",),),
        ))
        if rest:
            ops.append(OwnedKeys(path=settings, format="json", user_level=True,
                                 keys={("hooks", event): value for event, value in rest.items()}))
        ops.extend(_skills(context, skill_dirs(home, "claude-code")))
        if instructions:
            ops.append(OwnedBlock(path=str(home.joinpath(*CLAUDE_INSTRUCTIONS)),
                                  text=instructions, user_level=True))
    if "codex" in targets:
        config = codex_home(context) / "config.toml"
        ops.append(OwnedKeys(
            path=str(config), format="toml",
            keys={("mcp_servers", n): _codex_user_server(codex_server(context, s), s)
                  for n, s in sorted(servers.items())},
            user_level=True, guarded=(("mcp_servers",),),
        ))
        hashes: dict[tuple[str, ...], Any] = {}
        kept: dict[tuple[str, ...], Any] = {}
        for event, groups in guard_groups(context, "codex", user_level=True).items():
            kept[("hooks", event)] = groups
            kept[("hooks", "state", hook_state_key(config, event, 0, 0), "trusted_hash")] = (
                hook_trusted_hash(event, groups[0]))
        # The setup's own hooks go to $CODEX_HOME/hooks.json (Codex 0.171.0 loads it as the
        # user's): the guard's lists in config.toml are also written by every project's apply.
        hooks_file = codex_home(context) / CODEX_HOOKS
        _, own = _hook_lists(context, "codex", {})
        for event, groups in own.items():
            for g, group in enumerate(groups):
                for i in range(len(group["hooks"])):
                    single = {**group, "hooks": [group["hooks"][i]]}
                    key = hook_state_key(hooks_file, event, g, i)
                    hashes[("hooks", "state", key, "trusted_hash")] = hook_trusted_hash(
                        event, single)
        ops.append(OwnedKeys(path=str(config), format="toml", keys=kept, user_level=True,
                             keep_on_revoke=True))
        if own:
            ops.append(OwnedKeys(path=str(config), format="toml", keys=hashes, user_level=True))
            ops.append(OwnedKeys(path=str(hooks_file), format="json", user_level=True,
                                 keys={("hooks", event): groups for event, groups in own.items()}))
        ops.extend(_skills(context, skill_dirs(home, "codex")))
        if instructions:
            ops.append(OwnedBlock(path=str(codex_home(context) / CODEX_INSTRUCTIONS),
                                  text=instructions, user_level=True))
    if "gemini-cli" in targets:
        ops.extend(_gemini(context, servers))
    if "qwen-code" in targets:
        ops.extend(_qwen(context, servers))
    if "droid" in targets:
        ops.extend(_droid(context, servers))
    if "copilot" in targets:
        ops.extend(_copilot(context, servers))
    return ops


def _copilot(context: Any, servers: dict[str, Any]) -> list[Any]:
    """Copilot CLI: `~/.copilot/mcp-config.json` `mcpServers.NAME` (`type: local`, every tool;
    watched whole), and the user-level guard in `~/.copilot/hooks/agentstack-guard.json` (the
    file every project's apply writes, kept on revoke). Measured with 1.0.102
    (tests/harness/test_harness_user_level.py)."""
    from agentstack_adapters import OwnedKeys
    from agentstack_adapters.claude_code import _server
    from agentstack_adapters.copilot import guard_hook

    def entry(server: dict[str, Any]) -> dict[str, Any]:
        rendered = _server(context, server)
        if rendered["type"] == "stdio":
            rendered["type"] = "local"
        return {**rendered, "tools": ["*"]}

    copilot = context.user_home / ".copilot"
    return [
        OwnedKeys(path=str(copilot / "mcp-config.json"), format="json", user_level=True,
                  guarded=(("mcpServers",),),
                  keys={("mcpServers", n): entry(s) for n, s in sorted(servers.items())}),
        OwnedKeys(path=str(copilot / "hooks" / "agentstack-guard.json"), format="json",
                  user_level=True, keep_on_revoke=True,
                  keys={("version",): 1,
                        ("hooks", "preToolUse"): [guard_hook(context, user_level=True)]}),
    ]


def _droid(context: Any, servers: dict[str, Any]) -> list[Any]:
    """Factory Droid: `~/.factory/mcp.json` `mcpServers.NAME` (watched whole), and the
    user-level guard as the `PreToolUse` hook of `~/.factory/settings.json` (kept on revoke).
    Measured with 0.225.2 (tests/harness/test_harness_user_level.py)."""
    from agentstack_adapters import OwnedKeys
    from agentstack_adapters.common import GUARD_TIMEOUT_S, guard_command
    from agentstack_adapters.droid import _server

    factory = context.user_home / ".factory"
    guard = {"type": "command", "command": guard_command(context, "droid", user_level=True),
             "timeout": GUARD_TIMEOUT_S}
    return [
        OwnedKeys(path=str(factory / "mcp.json"), format="json", user_level=True,
                  guarded=(("mcpServers",),),
                  keys={("mcpServers", n): _server(context, s) for n, s in sorted(servers.items())}),
        OwnedKeys(path=str(factory / "settings.json"), format="json", user_level=True,
                  keep_on_revoke=True,
                  keys={("hooks", "PreToolUse"): [{"matcher": "*", "hooks": [guard]}]}),
    ]


def _qwen(context: Any, servers: dict[str, Any]) -> list[Any]:
    """Qwen Code: `~/.qwen/settings.json` `mcpServers.NAME` (watched whole), and the user-level
    guard as its `PreToolUse` hook (the entry every project's apply writes there, kept on
    revoke). Measured with 0.24.4 (tests/harness/test_harness_user_level.py)."""
    from agentstack_adapters import OwnedKeys
    from agentstack_adapters.common import gemini_server as _server
    from agentstack_adapters.qwen_code import guard_group

    settings = str(context.user_home / ".qwen" / "settings.json")
    return [
        OwnedKeys(path=settings, format="json", user_level=True, guarded=(("mcpServers",),),
                  keys={("mcpServers", n): _codex_user_server(_server(context, s), s)
                        for n, s in sorted(servers.items())}),
        OwnedKeys(path=settings, format="json", user_level=True, keep_on_revoke=True,
                  keys={("hooks", "PreToolUse"): [guard_group(context, user_level=True)]}),
    ]


def _gemini(context: Any, servers: dict[str, Any]) -> list[Any]:
    """Gemini CLI: `~/.gemini/settings.json` `mcpServers.NAME` (watched whole), and the
    user-level guard as its `BeforeTool` hook (the same entry every project's apply writes
    there, kept on revoke). Measured with 0.61.0: Gemini starts user-level servers only in a
    folder it trusts (tests/harness/test_harness_user_level.py)."""
    from agentstack_adapters import OwnedKeys
    from agentstack_adapters.common import gemini_server as _server
    from agentstack_adapters.gemini_cli import guard_group

    settings = str(context.user_home / ".gemini" / "settings.json")
    return [
        OwnedKeys(path=settings, format="json", user_level=True, guarded=(("mcpServers",),),
                  keys={("mcpServers", n): _codex_user_server(_server(context, s), s)
                        for n, s in sorted(servers.items())}),
        OwnedKeys(path=settings, format="json", user_level=True, keep_on_revoke=True,
                  keys={("hooks", "BeforeTool"): [guard_group(context, user_level=True)]}),
    ]


def _hook_lists(
    context: Any, harness: str, guard: dict[str, list[dict[str, Any]]]
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """The hook lists by event: the guard's events (the guard's group first, then the setup's
    hooks of that event) and the setup's other events."""
    from agentstack_adapters.common import hook_command

    guard = {event: list(groups) for event, groups in guard.items()}
    rest: dict[str, list[dict[str, Any]]] = {}
    for _, hook in sorted(context.consent["hooks"].items()):
        entry = {"type": "command", "command": hook_command(context, hook),
                 "timeout": hook["timeout"]}
        group: dict[str, Any] = {"hooks": [entry]}
        if hook.get("matcher") is not None:
            group["matcher"] = hook["matcher"]
        (guard if hook["event"] in guard else rest).setdefault(hook["event"], []).append(group)
    return guard, rest


def _skills(context: Any, base: Path) -> list[Any]:
    from agentstack_adapters.common import skill_files

    return [dataclasses.replace(op, user_level=True) for op in skill_files(context, str(base))]


def _codex_user_server(rendered: dict[str, Any], server: dict[str, Any]) -> dict[str, Any]:
    """A user-level server without a `cwd` of its own starts where the harness runs (Codex,
    Gemini CLI), as in Claude Code: its root, `$AGENTSTACK_HOME`, is closed to every server's
    sandbox."""
    if server.get("cwd", ".") == ".":
        rendered = {k: v for k, v in rendered.items() if k != "cwd"}
    return rendered

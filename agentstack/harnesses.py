"""Every harness agentstack knows, described once: its name, binary, project-dir variable, the
state directories it keeps under $HOME, and its *surface* — every file, directory and settings key
it loads from a project (and the project's subdirectories).

The surface is the consent boundary: a harness trusted in a folder loads all of it, so everything
on it that agentstack did not render is pinned in the lock and shown in the review
(`agentstack.surface`). Each entry says how it was established: "run" (a marker placed there reached
the model or ran, with the version in `verified`), "src" (read in the harness's shipped code),
"docs" (its public documentation only).

Standard library only, and NamedTuples only: the guard may import this on its hot path.
"""

from __future__ import annotations

from typing import NamedTuple

# What a settings key does, from the point of view of consent. The review rates each one.
RUNS = "runs"  # runs a command (hooks, helpers, status lines, notifiers, wrappers)
ENV = "env"  # sets the harness's environment (a base URL or proxy sends the API key elsewhere)
PERMISSION = "permission"  # grants permissions, widens the sandbox, lowers approvals
HOST = "host"  # points the harness (or its credentials) at a host
FILE = "file"  # names a file the harness reads into the prompt or executes
SERVER = "server"  # enables MCP servers, plugins, marketplaces or agents
GUARD_OFF = "guard-off"  # can switch hooks (and with them the guard) off
SETTING = "setting"  # anything else the harness reads (shown, not rated high)

HIGH_KEY_RISKS = frozenset({RUNS, ENV, PERMISSION, HOST, FILE, SERVER, GUARD_OFF})

def instruction_targets(harnesses: list[str]) -> dict[str, str]:
    """Project files the built-in adapters of `harnesses` write instructions into (path ->
    harness, the first harness to claim a path)."""
    out: dict[str, str] = {}
    for harness in harnesses:
        for path in RENDERS_INTO.get(harness, ()):
            out.setdefault(path, harness)
    return out


class SurfaceEntry(NamedTuple):
    """One thing a harness loads from a project.

    `pattern` is project-relative, `/`-separated; `**` matches any number of directories (so
    `**/CLAUDE.md` is every CLAUDE.md at any depth). `format` decides how agentstack reads it:
    "json"/"toml" (settings: every key is checked against `keys`), "text" (read by the model),
    "tree" (every file under it)."""

    pattern: str
    role: str  # settings | mcp | hooks | instructions | skills | agents | commands | rules | ...
    format: str
    keys: str  # the key table in Harness.keys that applies ("" for non-settings)
    verified: str  # "run" | "src" | "docs"
    note: str
    # Keys the harness writes into this file itself (a key path each, with the value it writes
    # matching `harness_value`): left out of the pin, so the harness's own write is not drift.
    # The guard does not watch such a file byte for byte; `status`, `run`, the shims, the git
    # hooks and the digest see every other change.
    harness_writes: tuple[tuple[str, ...], ...] = ()
    harness_value: str = ""  # a regular expression the written value matches


class Harness(NamedTuple):
    name: str  # the manifest's harness name
    display: str
    binary: str
    project_dir_var: str  # what the harness sets for hooks ("" when it sets none)
    state_dirs: tuple[str, ...]  # under $HOME: what the harness writes (the sandbox opens them)
    version: str  # the version the surface was verified against
    has_adapter: bool
    surface: tuple[SurfaceEntry, ...]
    keys: dict[str, dict[str, str]]  # key table name -> top-level key -> risk class
    trust_entries: tuple[str, ...]  # harness-side trust agentstack writes (while trusted)
    # What the harness, started in the project, also loads from each directory above it up to
    # the top of the checkout (the directory holding `.git`): patterns relative to that
    # directory, each one of `surface`'s (without its leading `**/`), measured with the real
    # harness started in a subdirectory of a git checkout.
    above: tuple[str, ...] = ()

    # ---- its pre-tool hook, as the guard sees it (compiled into agentstack/_guard.py's
    # generated table by `python -m agentstack.harnessgen`: the guard does not import this module)
    # How its hook is told "deny" (one of DENY_SHAPES; "" = every known shape at once).
    deny_shape: str = ""
    # The guard's tool table it is judged by: harnesses naming tools alike share one (the union
    # of the `tools`/`inert_tools`/`refused_tools` of every harness naming that table).
    tool_table: str = ""
    # Its tools, exactly as it names them (case matters), and the arguments that name what they
    # touch: "key:kind" with kind "read"/"write" (a path), "pattern" (a path pattern read),
    # "url", "urls" (URLs in a text), "server" (an MCP server's name), "patch" (apply_patch's
    # text), "regex"/"opaque" (named, nothing to judge); a trailing "?" marks an optional one.
    tools: dict[str, tuple[str, ...]] = {}  # noqa: RUF012 - never mutated
    # Tools that name nothing the guard judges (shells run under the sandbox, not the guard;
    # plans, todos and questions touch nothing; a sub-agent's own calls come back through the hook).
    inert_tools: frozenset[str] = frozenset()
    # Tools it offers that the guard refuses whatever their input, with the reason.
    refused_tools: dict[str, str] = {}  # noqa: RUF012 - never mutated
    # Its hook input's own shapes beyond Claude Code's (`tool_name`/`tool_input`, MCP tools named
    # `mcp__<server>__<tool>`), each one of HOOK_INPUTS.
    hook_input: tuple[str, ...] = ()
    # Its hook input names the hook event (`hook_event_name`): one for another event is denied.
    names_event: bool = False

    # ---- everything else that differs per harness
    default: bool = False  # in a new manifest's `project.harnesses`
    adapter: str = ""  # its built-in adapter: "module:Class" in agentstack_adapters
    renders_into: tuple[str, ...] = ()  # project files its adapter writes the instructions into
    mcp_list: bool = False  # its CLI has `mcp list` (doctor asks it about the locked servers)
    at_imports: bool = False  # it follows `@path` imports in its instruction files
    # `run` gives it a private per-project copy of its user-level state
    # (agentstack.sandbox.private_state) instead of the real `state_dirs`.
    private_state: bool = False
    # agentstack's user-level setup (`apply --user`, agentstack.userlevel) renders into its
    # user-level configuration.
    user_level: bool = False
    # Sandbox extras for `run` beyond its `state_dirs` (opened for writing unless private_state).
    sandbox_read_dirs: tuple[str, ...] = ()  # "~/..."
    sandbox_env: tuple[tuple[str, str], ...] = ()  # set inside the sandbox
    # Project files it loads that agentstack does not render, and the keys in them that would
    # run code or switch the guard off (agentstack.apply.snapshot watches them): (path, format, keys).
    watched: tuple[tuple[str, str, tuple[tuple[str, ...], ...]], ...] = ()
    # Its configuration directories, write-protected whole wherever they lie (PROTECTED_DIRS).
    config_dirs: tuple[str, ...] = ()
    # Plugin roots (PLUGIN_MARKERS) and marketplace files (PLUGIN_MARKETPLACES) it loads.
    plugin_markers: tuple[str, ...] = ()
    plugin_marketplaces: tuple[str, ...] = ()


# The deny shapes of the pre-tool hooks (agentstack._guard.deny_body writes each one).
DENY_SHAPES = (
    "hookSpecificOutput",  # {"hookSpecificOutput": {..., "permissionDecision": "deny", ...}}
    "decision",  # {"decision": "deny", "reason": ...}
    "permissionDecision",  # {"permissionDecision": "deny", "permissionDecisionReason": ...}
    "permission",  # {"permission": "deny", "user_message": ..., "agent_message": ...}
    "cancel",  # {"cancel": true, "errorMessage": ...} (Cline: it aborts the run)
)
# Hook input shapes beyond Claude Code's (agentstack._guard reads each one).
HOOK_INPUTS = (
    "toolName",  # `toolName`/`toolArgs` (the arguments as a JSON text)
    "mcp_context",  # an `mcp_context` names the MCP server of an `mcp_<server>_<tool>` tool
    "MCP:",  # MCP tools named `MCP:<server>:<tool>`
    "server-tool",  # MCP tools named `<server>-<tool>` (its own tools have no '-')
    "server___tool",  # MCP tools named `<server>___<tool>` (Droid)
    "tool_call",  # the call as `tool_call: {name, input}` (Cline)
    "server__tool",  # MCP tools named `<server>__<tool>` (Cline; its own tools have no `__`)
    "mcp_server_tool",  # MCP tools named `mcp_<server>_<tool>` (Crush; no `mcp__`)
    "tool_server",  # MCP tools named `<tool>_<server>`, told by `is_mcp_tool: true` (Auggie)
)


_CLAUDE_SETTINGS: dict[str, str] = {
    # Claude Code 2.1.332's settings schema (read in the shipped binary); everything else is SETTING.
    "hooks": RUNS,
    "statusLine": RUNS,
    "subagentStatusLine": RUNS,
    "apiKeyHelper": RUNS,
    "proxyAuthHelper": RUNS,
    "awsCredentialExport": RUNS,
    "awsAuthRefresh": RUNS,
    "gcpAuthRefresh": RUNS,
    "otelHeadersHelper": RUNS,
    "processWrapper": RUNS,
    "policyHelper": RUNS,
    "policyHelpers": RUNS,
    "fileSuggestion": RUNS,
    "defaultShell": RUNS,
    "env": ENV,
    "permissions": PERMISSION,
    "additionalDirectoryConfigRoots": PERMISSION,
    "sandbox": PERMISSION,
    "allowedHttpHookUrls": PERMISSION,
    "httpHookAllowedEnvVars": PERMISSION,
    "allowManagedHooksOnly": PERMISSION,
    "allowManagedPermissionRulesOnly": PERMISSION,
    "disableSkillShellExecution": PERMISSION,
    "modelCatalogUrl": HOST,
    "forceLoginGatewayUrl": HOST,
    "gatewayInternalNetworks": HOST,
    "xaaIdp": HOST,
    "forceLoginMethod": HOST,
    "tipsFile": FILE,
    "outputStyle": FILE,
    "enableAllProjectMcpServers": SERVER,
    "enabledMcpjsonServers": SERVER,
    "disabledMcpjsonServers": SERVER,
    "managedMcpServers": SERVER,
    "allowedMcpServers": SERVER,
    "deniedMcpServers": SERVER,
    "allowAllClaudeAiMcps": SERVER,
    "mcpServers": SERVER,
    "enabledPlugins": SERVER,
    "prependPlugins": SERVER,
    "appendPlugins": SERVER,
    "extraKnownMarketplaces": SERVER,
    "additionalMarketplaces": SERVER,
    "skillOverrides": SERVER,
    "agent": SERVER,
    "disableAllHooks": GUARD_OFF,
}

_CODEX_CONFIG: dict[str, str] = {
    # Codex 0.171.0's ConfigToml (read in the shipped binary); everything else is SETTING.
    "notify": RUNS,
    "hooks": RUNS,
    "js_repl_node_path": RUNS,
    "js_repl_node_module_dirs": RUNS,
    "file_opener": RUNS,
    "plugins": RUNS,
    "tools": RUNS,
    "code_mode": RUNS,
    "browser_use": RUNS,
    "computer_use": RUNS,
    "shell_environment_policy": ENV,
    "approval_policy": PERMISSION,
    "approvals_reviewer": PERMISSION,
    "auto_review": PERMISSION,
    "sandbox_mode": PERMISSION,
    "sandbox_workspace_write": PERMISSION,
    "default_permissions": PERMISSION,
    "permissions": PERMISSION,
    "allow_login_shell": PERMISSION,
    "allow_symlinked_codex_home": PERMISSION,
    "projects": PERMISSION,
    "model_instructions_file": FILE,
    "instructions": FILE,
    "developer_instructions": FILE,
    "compact_prompt": FILE,
    "project_doc_fallback_filenames": FILE,
    "project_doc_max_bytes": FILE,
    "model_catalog_json": FILE,
    "experimental_conversation_history_prompt": FILE,
    "experimental_realtime_ws_backend_prompt": FILE,
    "experimental_realtime_start_instructions": FILE,
    "sqlite_home": FILE,
    "log_dir": FILE,
    "history": FILE,
    "model_provider": HOST,
    "model_providers": HOST,
    "profile": HOST,
    "profiles": HOST,
    "openai_base_url": HOST,
    "chatgpt_base_url": HOST,
    "experimental_realtime_ws_base_url": HOST,
    "experimental_realtime_webrtc_call_base_url": HOST,
    "experimental_thread_store_endpoint": HOST,
    "otel": HOST,
    "analytics": HOST,
    "mcp_oauth_callback_url": HOST,
    "forced_login_method": HOST,
    "forced_chatgpt_workspace_id": HOST,
    "mcp_servers": SERVER,
    "apps_mcp_product_sku": SERVER,
    "orchestrator": SERVER,
}

_HOOKS_FILE: dict[str, str] = {"hooks": RUNS, "disableAllHooks": GUARD_OFF}
_MCP_FILE: dict[str, str] = {"mcpServers": SERVER, "servers": SERVER, "mcp": SERVER}


def _e(
    pattern: str,
    role: str,
    fmt: str,
    verified: str,
    note: str,
    keys: str = "",
    writes: tuple[tuple[str, ...], ...] = (),
    value: str = "",
) -> SurfaceEntry:
    return SurfaceEntry(pattern, role, fmt, keys, verified, note, writes, value)


# ------------------------------------------------------------ the tools each harness offers
# Every tool name here is one a pinned harness version offers, or did (the captures in
# tests/harness/tools/, compared with each harness in CI): the guard denies any other name.

_CLAUDE_TOOLS: dict[str, tuple[str, ...]] = {
    "Read": ("file_path:read",),
    "NotebookRead": ("notebook_path:read",),
    "Write": ("file_path:write",),
    "Edit": ("file_path:write",),
    "MultiEdit": ("file_path:write",),
    "NotebookEdit": ("notebook_path:write",),
    "Glob": ("pattern:pattern", "path:read?"),
    "Grep": ("path:read?", "glob:pattern?", "pattern:regex?"),
    "LS": ("path:read",),
    "WebFetch": ("url:url",),
    "ListMcpResourcesTool": ("server:server",),
    "ReadMcpResourceTool": ("server:server", "uri:opaque?"),
    "Workflow": ("scriptPath:read?",),  # a script file it runs
}
_CODEX_TOOLS: dict[str, tuple[str, ...]] = {
    "apply_patch": ("*:patch",),
    "view_image": ("path:read",),
    "read_mcp_resource": ("server:server", "uri:opaque?"),
    "list_mcp_resources": ("server:server",),
    "list_mcp_resource_templates": ("server:server",),
    "Bash": ("workdir:read?",),
    "shell": ("workdir:read?",),
    "exec_command": ("workdir:read?",),
    "shell_command": ("workdir:read?",),
    "local_shell": ("workdir:read?",),
    # Sub-agents, named by their ids (`target` is an agent id, not a path).
    "multi_agent_v1__close_agent": ("target:opaque",),
    "multi_agent_v1__send_input": ("target:opaque",),
}
_GEMINI_TOOLS: dict[str, tuple[str, ...]] = {
    "read_file": ("absolute_path:read?", "file_path:read?", "path:read?"),
    "read_many_files": ("paths:read?",),
    "list_directory": ("path:read?", "dir_path:read?"),
    "glob": ("pattern:pattern", "path:read?", "dir_path:read?"),
    "search_file_content": ("path:read?", "dir_path:read?", "include:pattern?"),
    "grep_search": ("dir_path:read?", "include_pattern:pattern?", "pattern:regex?"),
    "write_file": ("file_path:write?", "absolute_path:write?"),
    "replace": ("file_path:write?", "absolute_path:write?"),
    "web_fetch": ("prompt:urls",),
}
_COPILOT_TOOLS: dict[str, tuple[str, ...]] = {
    "view": ("path:read",),
    "create": ("path:write",),
    "edit": ("path:write",),
    "str_replace": ("path:write",),
    "web_fetch": ("url:url",),
    "apply_patch": ("*:patch",),
    "glob": ("pattern:pattern", "paths:read?"),
    "rg": ("paths:read?", "glob:pattern?", "pattern:regex?"),
    "session_store_sql": ("source:opaque?",),  # `cloud` or `local`: which session store
}
_OPENCODE_TOOLS: dict[str, tuple[str, ...]] = {
    "read": ("filePath:read",),
    "list": ("path:read?",),
    "glob": ("pattern:pattern", "path:read?"),
    "grep": ("path:read?", "include:pattern?"),
    "write": ("filePath:write",),
    "edit": ("filePath:write",),
    "patch": ("*:patch",),
    "webfetch": ("url:url",),
}
_CLAUDE_INERT = frozenset({
    "Bash",
    "BashOutput",
    "KillShell",
    "KillBash",
    "Task",
    "Agent",
    "TodoWrite",
    "TodoRead",
    "ExitPlanMode",
    "EnterPlanMode",
    "AskUserQuestion",
    "SlashCommand",
    "Skill",
    "TaskOutput",
    "TaskStop",
    "TaskCreate",
    "TaskGet",
    "TaskList",
    "TaskUpdate",
    "WebSearch",
    "Monitor",
    "SendMessage",
    "ListAgents",
    "ReportFindings",
    "ScheduleWakeup",
    "CronCreate",
    "CronDelete",
    "CronList",
    "ToolSearch",
    "DeferredToolPlaceholder",
})
_CODEX_INERT = frozenset({
    "update_plan",
    "write_stdin",
    "web_search",
    "request_user_input",
    "create_goal",
    "get_goal",
    "update_goal",
    "multi_agent_v1__spawn_agent",
    "multi_agent_v1__resume_agent",
    "multi_agent_v1__wait_agent",
})
_GEMINI_INERT = frozenset({
    "run_shell_command",
    "google_web_search",
    "save_memory",
    "write_todos",
    "activate_skill",
    "enter_plan_mode",
    "invoke_agent",
    "list_background_processes",
    "read_background_output",
    "update_topic",
})
_COPILOT_INERT = frozenset({
    "bash",
    "write_bash",
    "read_bash",
    "stop_bash",
    "list_bash",
    "report_intent",
    "skill",
    "task",
    "read_agent",
    "list_agents",
    "write_agent",
    "sql",  # the session's own database
    "semantic_code_search",  # a query to GitHub's code search for a named repository
    "fetch_copilot_cli_documentation",
})
_OPENCODE_INERT = frozenset({"bash", "todowrite", "todoread", "task", "skill"})
_CLAUDE_REFUSED: dict[str, str] = {
    "EnterWorktree": "it creates a git worktree under .claude/, which no tool may write",
    "ExitWorktree": "it can remove a git worktree under .claude/, which no tool may write",
}
_COPILOT_REFUSED: dict[str, str] = {
    "lsp": (
        "it asks language servers started from configuration (and its rename edits files "
        "the guard never sees)"
    ),
}


# Claude Code's project settings: agentstack renders into `.claude/settings.local.json` only, so
# these keys in the shared file would run code or switch the guard off.
_CLAUDE_WATCHED: tuple[str, str, tuple[tuple[str, ...], ...]] = (
    ".claude/settings.json",
    "json",
    (
        ("hooks",),
        ("disableAllHooks",),
        ("enableAllProjectMcpServers",),
        ("enabledMcpjsonServers",),
        ("env",),
        ("apiKeyHelper",),
        ("mcpServers",),
    ),
)

CLAUDE_CODE = Harness(
    name="claude-code",
    display="Claude Code",
    binary="claude",
    project_dir_var="CLAUDE_PROJECT_DIR",
    state_dirs=(".claude", ".cache/claude-cli-nodejs", ".claude.json"),
    version="2.1.332",
    has_adapter=True,
    surface=(
        _e("**/.claude/settings.json", "settings", "json", "run", "shared settings", "claude"),
        _e("**/.claude/settings.local.json", "settings", "json", "run", "local settings", "claude"),
        _e("**/.mcp.json", "mcp", "json", "run", "project MCP servers", "mcp"),
        _e("**/CLAUDE.md", "instructions", "text", "run", "memory, nested ones too"),
        _e("**/CLAUDE.local.md", "instructions", "text", "run", "local memory"),
        _e("**/.claude/CLAUDE.md", "instructions", "text", "src", "memory"),
        # Found by the surface probe (2.1.332): read into the prompt where there is no CLAUDE.md.
        _e("**/AGENTS.md", "instructions", "text", "run", "memory without CLAUDE.md"),
        _e("**/.claude/AGENTS.md", "instructions", "text", "run", "memory without CLAUDE.md"),
        _e("**/.claude/rules/**", "rules", "tree", "run", "rules (memory)"),
        _e("**/.claude/skills/**", "skills", "tree", "run", "skills (inline shell runs)"),
        _e("**/.claude/agents/**", "agents", "tree", "run", "subagents"),
        _e("**/.claude/commands/**", "commands", "tree", "src", "slash commands"),
        _e("**/.claude/output-styles/**", "output-styles", "tree", "src", "output styles"),
        _e("**/.claude/hooks/**", "hooks", "tree", "docs", "hook scripts by convention"),
        _e("**/.claude-plugin/**", "plugins", "tree", "src", "plugin and marketplace manifests"),
        # Found by the surface probe (2.1.332 reads the first at start; all are in its own list of
        # project files its sandbox keeps the agent from writing).
        _e("**/.claude/scheduled_tasks.json", "runs", "tree", "run", "scheduled prompts it runs"),
        _e("**/.claude/launch.json", "runs", "tree", "src", "launch configurations (commands)"),
        _e("**/.claude/workflows/**", "commands", "tree", "src", "workflows"),
        _e("**/.claude/routines/**", "commands", "tree", "src", "routines"),
        _e("**/.claude/loop.md", "instructions", "text", "src", "the loop prompt"),
    ),
    keys={"claude": _CLAUDE_SETTINGS, "mcp": _MCP_FILE},
    trust_entries=(
        "~/.claude.json projects.<root>.hasTrustDialogAccepted",
        ".claude/settings.local.json enabledMcpjsonServers",
    ),
    deny_shape="hookSpecificOutput",
    tool_table="claude-code",
    tools=_CLAUDE_TOOLS,
    inert_tools=_CLAUDE_INERT,
    refused_tools=_CLAUDE_REFUSED,
    names_event=True,
    default=True,
    adapter="claude_code:ClaudeCodeAdapter",
    renders_into=("CLAUDE.md",),
    mcp_list=True,
    at_imports=True,
    private_state=True,
    user_level=True,
    sandbox_read_dirs=("~/.local/share/claude",),
    sandbox_env=(("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),),
    watched=(_CLAUDE_WATCHED,),
    config_dirs=(".claude",),
    plugin_markers=(".claude-plugin/plugin.json",),
    plugin_marketplaces=(".claude-plugin/marketplace.json",),
    # Measured with 2.1.332: memory, rules, skills and agents reach the model and `.mcp.json`'s
    # servers start; `.claude/settings.json` above the project is not read (its hooks do not run).
    above=(
        ".mcp.json",
        "CLAUDE.md",
        "CLAUDE.local.md",
        ".claude/CLAUDE.md",
        "AGENTS.md",
        ".claude/AGENTS.md",
        ".claude/rules/**",
        ".claude/skills/**",
        ".claude/agents/**",
        ".claude/commands/**",
        # Read at the checkout's top (the surface probe, 2.1.332): pinned in every directory above.
        ".claude/settings.local.json",
        # Read above the project at interactive start (the surface probe, 2.1.332).
        ".claude/workflows/**",
    ),
)

CODEX = Harness(
    name="codex",
    display="Codex",
    binary="codex",
    project_dir_var="",
    state_dirs=(".codex",),
    version="0.171.0",
    has_adapter=True,
    surface=(
        _e("**/.codex/config.toml", "settings", "toml", "run", "project config layer", "codex"),
        _e("**/.codex/hooks.json", "hooks", "json", "run", "hooks (need a trusted hash)", "hooks"),
        _e("**/.codex/hooks/**", "hooks", "tree", "src", "hook files"),
        _e("**/AGENTS.md", "instructions", "text", "run", "instructions, root to cwd"),
        _e("**/AGENTS.override.md", "instructions", "text", "src", "instructions override"),
        _e("**/.agents/skills/**", "skills", "tree", "run", "skills"),
        _e("**/.codex/skills/**", "skills", "tree", "src", "skills"),
        _e("**/.codex/agents/**", "agents", "tree", "src", "agent roles"),
        _e("**/.codex/prompts/**", "commands", "tree", "src", "prompts"),
        _e(
            "**/.codex/rules/**", "permissions", "tree", "src", "exec-policy rules (allow commands)"
        ),
        # Found by the surface probe in 0.171.0's binary: a plugin's manifest (its root is pinned
        # whole, see PLUGIN_MARKERS) and the project's plugin marketplace.
        _e("**/.codex-plugin/**", "plugins", "tree", "src", "plugin manifests (root pinned whole)"),
        _e(".agents/plugins/marketplace.json", "plugins", "tree", "src", "plugin marketplace"),
    ),
    keys={"codex": _CODEX_CONFIG, "hooks": _HOOKS_FILE},
    trust_entries=(
        '~/.codex/config.toml projects."<root>".trust_level',
        '~/.codex/config.toml hooks.state."<hook>".trusted_hash',
    ),
    # Codex names its hook tools after Claude Code's where they are the same ("Bash"): the two
    # share one table, so a name either one uses is judged the same way by both.
    deny_shape="hookSpecificOutput",
    tool_table="claude-code",
    tools=_CODEX_TOOLS,
    inert_tools=_CODEX_INERT,
    names_event=True,
    default=True,
    adapter="codex:CodexAdapter",
    renders_into=("AGENTS.md",),
    mcp_list=True,
    private_state=True,
    user_level=True,
    config_dirs=(".codex", ".agents"),
    plugin_markers=(".codex-plugin/plugin.json",),
    plugin_marketplaces=(".agents/plugins/marketplace.json",),
    # Measured with 0.171.0: instructions and skills reach the model; `.codex/config.toml` above
    # the project is read only where Codex trusts that directory itself (agentstack trusts the
    # project's root only).
    above=(
        "AGENTS.md",
        "AGENTS.override.md",
        ".agents/skills/**",
        ".codex/skills/**",
        ".agents/plugins/marketplace.json",
        ".codex-plugin/**",
    ),
)

_GEMINI_SETTINGS = {
    "hooks": RUNS,
    "hooksConfig": GUARD_OFF,
    "mcpServers": SERVER,
    "mcp": SERVER,
    "tools": RUNS,
    "context": FILE,
    "security": PERMISSION,
    "advanced": ENV,
}

GEMINI_CLI = Harness(
    name="gemini-cli",
    display="Gemini CLI",
    binary="gemini",
    project_dir_var="GEMINI_PROJECT_DIR",
    state_dirs=(".gemini",),
    version="0.61.0",
    has_adapter=True,
    surface=(
        _e("**/.gemini/settings.json", "settings", "json", "run", "settings", "gemini"),
        _e("**/GEMINI.md", "instructions", "text", "run", "context hierarchy + @imports"),
        _e("**/.gemini/commands/**", "commands", "tree", "docs", "commands"),
        _e("**/.gemini/skills/**", "skills", "tree", "run", "skills"),
        _e("**/.agents/skills/**", "skills", "tree", "run", "skills"),
        _e("**/.gemini/agents/**", "agents", "tree", "docs", "agents"),
        _e("**/.gemini/extensions/**", "plugins", "tree", "docs", "extensions"),
        # Gemini CLI loads the first `.gemini/.env` or `.env` from the working directory up:
        # GOOGLE_GEMINI_BASE_URL there sends the API key to another host.
        _e("**/.gemini/.env", "env", "tree", "docs", "environment loaded at start"),
        _e("**/.env", "env", "tree", "docs", "environment loaded at start"),
        # Found by the surface probe (0.61.0, interactive start): its update check reads the
        # registry from the nearest `.npmrc` from the working directory up, and installs the
        # version that registry calls latest (`npm install -g @google/gemini-cli@<version>`).
        _e(".npmrc", "runs", "tree", "run", "its update check's npm registry (what it installs)"),
    ),
    keys={"gemini": _GEMINI_SETTINGS},
    trust_entries=("~/.gemini/trustedFolders.json",),
    deny_shape="decision",
    tool_table="gemini-cli",
    tools=_GEMINI_TOOLS,
    inert_tools=_GEMINI_INERT,
    hook_input=("mcp_context",),
    adapter="gemini_cli:GeminiCliAdapter",
    mcp_list=True,
    user_level=True,
    at_imports=True,
    config_dirs=(".gemini",),
    # Measured with 0.61.0: the GEMINI.md hierarchy reaches the model; `.gemini/settings.json`
    # above the project is not read (its servers and hooks do not start).
    # Its `.env` is looked for from the working directory up (docs); so is the `.npmrc` its
    # interactive start's update check reads (measured: the checkout top's, without the project's).
    above=("GEMINI.md", ".gemini/.env", ".env", ".npmrc"),
)

# Qwen Code 0.24.4 (a fork of Gemini CLI; its hooks are Claude Code's): the tools its requests
# offer (tests/harness/tools/), with the arguments that name what they touch.
_QWEN_TOOLS: dict[str, tuple[str, ...]] = {
    "read_file": ("file_path:read",),
    "write_file": ("file_path:write",),
    "edit": ("file_path:write",),
    "notebook_edit": ("notebook_path:write",),
    "glob": ("pattern:pattern", "path:read?"),
    "grep_search": ("path:read?", "glob:pattern?", "pattern:regex?"),
    "run_shell_command": ("directory:read?",),
    "agent": ("working_dir:read?",),
}
_QWEN_INERT = frozenset({
    "skill",
    "list_agents",
    "get_goal",
    "update_goal",
    "tool_search",
})
_QWEN_SETTINGS = {
    "hooks": RUNS,
    "disableAllHooks": GUARD_OFF,
    "hooksConfig": GUARD_OFF,
    "mcpServers": SERVER,
    "mcp": SERVER,
    "tools": RUNS,
    "context": FILE,
    "security": PERMISSION,
    "permissions": PERMISSION,
    "env": ENV,
    "advanced": ENV,
    "modelProviders": HOST,
}

QWEN_CODE = Harness(
    name="qwen-code",
    display="Qwen Code",
    binary="qwen",
    project_dir_var="QWEN_PROJECT_DIR",
    state_dirs=(".qwen",),
    version="0.24.4",
    has_adapter=True,
    surface=(
        _e("**/.qwen/settings.json", "settings", "json", "run", "settings", "qwen"),
        _e("**/.qwen/settings.local.json", "settings", "json", "src", "local settings", "qwen"),
        _e("**/QWEN.md", "instructions", "text", "run", "context hierarchy + @imports"),
        _e("**/AGENTS.md", "instructions", "text", "run", "context file"),
        _e("**/.qwen/QWEN.local.md", "instructions", "text", "run", "local context"),
        _e("**/.qwen/rules/**", "rules", "tree", "run", "rules"),
        # Its `.mcp.json` servers are gated by ~/.qwen/mcpApprovals.json (not in --yolo).
        _e("**/.mcp.json", "mcp", "json", "run", "MCP servers (Claude Code's file)", "mcp"),
        _e("**/.qwen/commands/**", "commands", "tree", "run", "commands"),
        _e("**/.qwen/skills/**", "skills", "tree", "run", "skills"),
        _e("**/.agents/skills/**", "skills", "tree", "run", "skills"),
        _e("**/.qwen/agents/**", "agents", "tree", "run", "subagents"),
        _e("**/.qwen/extensions/**", "plugins", "tree", "src", "extensions"),
        # The first `.qwen/.env` or `.env` from the working directory up (in a trusted folder).
        _e("**/.qwen/.env", "env", "tree", "run", "environment loaded at start"),
        _e("**/.env", "env", "tree", "src", "environment loaded at start"),
        # Found by the surface probe (0.24.4, interactive start): the summary its "welcome back"
        # screen offers to resume from (sent to the model), from the working directory only.
        _e(".qwen/PROJECT_SUMMARY.md", "instructions", "text", "run",
           "project summary its interactive start offers to resume from"),
    ),
    keys={"qwen": _QWEN_SETTINGS, "mcp": _MCP_FILE},
    trust_entries=("~/.qwen/trustedFolders.json", "~/.qwen/mcpApprovals.json"),
    deny_shape="hookSpecificOutput",
    tool_table="qwen-code",
    tools=_QWEN_TOOLS,
    inert_tools=_QWEN_INERT,
    refused_tools={
        "tool_call": "it calls another tool by name (a deferred one), which the guard would not "
        "judge as itself",
    },
    names_event=True,
    adapter="qwen_code:QwenCodeAdapter",
    mcp_list=True,
    user_level=True,
    at_imports=True,
    config_dirs=(".qwen",),
    # Measured with 0.24.4 started in a subdirectory of a checkout: QWEN.md, AGENTS.md and
    # `.qwen/.env` from every directory up to the top; `.qwen/QWEN.local.md` and `.qwen/rules/`
    # at the top. Its `.env` is looked for from the working directory up (src).
    above=("QWEN.md", "AGENTS.md", ".qwen/.env", ".env", ".qwen/QWEN.local.md",
           ".qwen/rules/**"),
)

# Factory Droid 0.225.2: the tools its requests offer (tests/harness/tools/).
_DROID_TOOLS: dict[str, tuple[str, ...]] = {
    "Read": ("file_path:read",),
    "LS": ("directory_path:read",),
    "ApplyPatch": ("*:patch",),
    "Grep": ("path:read?", "glob_pattern:pattern?", "pattern:regex?"),
    "Glob": ("folder:read?", "patterns:opaque?", "excludePatterns:opaque?"),
    "Task": ("image_paths:read?",),
    "GenerateImage": ("input_image_paths:read?",),
}
_DROID_INERT = frozenset({"Execute", "TaskOutput", "TaskStop", "ToolSearch", "Skill"})
_DROID_SETTINGS = {
    "hooks": RUNS,
    "hooksDisabled": GUARD_OFF,
    "allowManagedHooksOnly": GUARD_OFF,
    "mcpServers": SERVER,
    "customModels": HOST,
    "enabledPlugins": SERVER,
    "commandAllowlist": PERMISSION,
    "commandDenylist": PERMISSION,
}

DROID = Harness(
    name="droid",
    display="Factory Droid",
    binary="droid",
    project_dir_var="FACTORY_PROJECT_DIR",
    state_dirs=(".factory",),
    version="0.225.2",
    has_adapter=True,
    surface=(
        # No trust gate: all of it loads as soon as Droid starts, from the working directory
        # and every directory above it up to the checkout's top (the surface probe, 0.225.2).
        _e("**/.factory/settings.json", "settings", "json", "run", "settings (hooks)", "droid"),
        _e("**/.factory/settings.local.json", "settings", "json", "run", "local settings",
           "droid"),
        _e("**/.factory/mcp.json", "mcp", "json", "run", "MCP servers", "mcp"),
        _e("**/.factory/hooks.json", "hooks", "json", "run", "hooks", "hooks"),
        _e("**/.factory/config.json", "settings", "json", "run", "config", "droid"),
        _e("**/.factory/commands/**", "commands", "tree", "run", "commands"),
        _e("**/.factory/skills/**", "skills", "tree", "src", "skills"),
        _e("**/.factory/droids/**", "agents", "tree", "src", "custom droids"),
        _e("**/.agents/commands/**", "commands", "tree", "run", "commands"),
        _e("**/.agents/skills/**", "skills", "tree", "run", "skills"),
        _e("**/.agents/settings.json", "settings", "json", "run", "settings", "droid"),
        _e("**/.agents/settings.local.json", "settings", "json", "run", "settings", "droid"),
        # Its instruction files, found case-insensitively, also in `.factory/` and `.agents/`.
        _e("**/AGENTS.md", "instructions", "text", "run", "instructions"),
        _e("**/Agents.md", "instructions", "text", "run", "instructions"),
        _e("**/agents.md", "instructions", "text", "run", "instructions"),
        _e("**/CLAUDE.md", "instructions", "text", "run", "instructions"),
        _e("**/Claude.md", "instructions", "text", "run", "instructions"),
        _e("**/DESIGN.md", "instructions", "text", "run", "instructions"),
        *(
            _e(f"**/{d}/{n}", "instructions", "text", "run", "instructions")
            for d in (".factory", ".agents")
            for n in ("AGENTS.md", "Agents.md", "agents.md", "CLAUDE.md", "Claude.md", "DESIGN.md")
        ),
    ),
    keys={"droid": _DROID_SETTINGS, "mcp": _MCP_FILE, "hooks": _HOOKS_FILE},
    trust_entries=(),
    deny_shape="hookSpecificOutput",
    tool_table="droid",
    tools=_DROID_TOOLS,
    inert_tools=_DROID_INERT,
    refused_tools={
        "ConnectorSearch": "it calls a Factory connector's tool by name, which the guard cannot "
        "judge",
    },
    hook_input=("server___tool",),
    names_event=True,
    adapter="droid:DroidAdapter",
    mcp_list=True,
    user_level=True,
    config_dirs=(".factory",),
)
DROID = DROID._replace(above=tuple(e.pattern.removeprefix("**/") for e in DROID.surface))

OPENCODE = Harness(
    name="opencode",
    display="OpenCode",
    binary="opencode",
    project_dir_var="",
    state_dirs=(
        ".config/opencode",
        ".local/share/opencode",
        ".cache/opencode",
        ".local/state/opencode",
    ),
    version="1.18.33",
    has_adapter=True,
    surface=(
        # OpenCode looks for its config from the working directory up to the worktree: a nested
        # one loads when it is started below the root.
        _e("**/opencode.json", "settings", "json", "run", "config (no trust gate)", "opencode"),
        _e("**/opencode.jsonc", "settings", "text", "docs", "config (JSONC)"),
        _e(".opencode/opencode.json", "settings", "json", "run", "config", "opencode"),
        _e(".opencode/opencode.jsonc", "settings", "text", "docs", "config (JSONC)"),
        _e(".opencode/tool/**", "plugins", "tree", "docs", "custom tools (code it runs)"),
        _e(".opencode/tools/**", "plugins", "tree", "docs", "custom tools (code it runs)"),
        _e(".opencode/.npmrc", "packages", "text", "docs", "where its npm install fetches from"),
        _e(".opencode/plugins/**", "plugins", "tree", "run", "plugins run at start"),
        _e(".opencode/plugin/**", "plugins", "tree", "docs", "plugins"),
        _e("**/AGENTS.md", "instructions", "text", "run", "instructions"),
        _e("**/CLAUDE.md", "instructions", "text", "run", "instructions without AGENTS.md"),
        _e(".opencode/skills/**", "skills", "tree", "run", "skills"),
        _e(".opencode/skill/**", "skills", "tree", "run", "skills"),
        _e(".agents/skills/**", "skills", "tree", "run", "skills"),
        _e(".claude/skills/**", "skills", "tree", "run", "skills"),
        _e(".opencode/agent/**", "agents", "tree", "docs", "agents"),
        _e(".opencode/agents/**", "agents", "tree", "docs", "agents"),
        # Found by the surface probe (1.18.33): primary agents (modes) that replace the default
        # agent's prompt and permissions, and the instruction file read when neither AGENTS.md
        # nor CLAUDE.md exists (from the working directory up to the worktree's top).
        _e(".opencode/mode/**", "agents", "tree", "run", "modes: primary agents"),
        _e(".opencode/modes/**", "agents", "tree", "run", "modes: primary agents"),
        _e("**/CONTEXT.md", "instructions", "text", "run", "instructions without AGENTS.md"),
        _e(".opencode/command/**", "commands", "tree", "docs", "commands"),
        _e(".opencode/commands/**", "commands", "tree", "docs", "commands"),
        # Measured with 1.18.33: with plugins present, OpenCode adds its own plugin package at its
        # own version and runs `npm install` in `.opencode/` at start; the project's other
        # dependencies are installed too (no install script ran, the root's or a dependency's).
        _e(
            ".opencode/package.json",
            "packages",
            "json",
            "run",
            "npm packages installed at start (OpenCode adds its own plugin package)",
            "opencode-package",
            (("dependencies", "@opencode-ai/plugin"),),
            r"[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?",
        ),
    ),
    keys={
        "opencode-package": {
            "dependencies": RUNS,
            "devDependencies": RUNS,
            "optionalDependencies": RUNS,
            "peerDependencies": RUNS,
            "bundleDependencies": RUNS,
            "bundledDependencies": RUNS,
            "overrides": RUNS,
            "resolutions": RUNS,
            "workspaces": RUNS,
            "scripts": RUNS,
        },
        "opencode": {
            "mcp": SERVER,
            "plugin": SERVER,
            "provider": HOST,
            "permission": PERMISSION,
            "instructions": FILE,
            "agent": SERVER,
            "command": RUNS,
            "formatter": RUNS,
            "lsp": RUNS,
        },
    },
    trust_entries=(),
    deny_shape="decision",
    tool_table="opencode",
    tools=_OPENCODE_TOOLS,
    inert_tools=_OPENCODE_INERT,
    adapter="opencode:OpenCodeAdapter",
    mcp_list=True,
    sandbox_read_dirs=("~/.opencode/bin",),
    # It merges a second project config: servers, plugins and providers load code.
    watched=(
        (".opencode/opencode.json", "json", (("mcp",), ("plugin",), ("plugins",), ("provider",))),
    ),
    config_dirs=(".opencode", ".config/opencode"),
)
# Measured with 1.18.33: OpenCode reads its config, its `.opencode/` directory, instructions and
# skills from every directory up to the worktree's top (`opencode.json`'s servers start there).
OPENCODE = OPENCODE._replace(above=tuple(e.pattern.removeprefix("**/") for e in OPENCODE.surface))

# Kilo 7.7.7 (a fork of OpenCode): its own configuration names, OpenCode's tools and plugins.
_KILO_DIR_PARTS = (
    "agent/**", "agents/**", "command/**", "commands/**", "mode/**", "modes/**", "skill/**",
    "skills/**", "tool/**", "tools/**", "plugin/**", "plugins/**", "rules/**", "workflows/**",
    "kilo.json", "kilo.jsonc", "config.json", "opencode.json", "opencode.jsonc", "mcp.json",
)

KILO = Harness(
    name="kilo",
    display="Kilo",
    binary="kilo",
    project_dir_var="",
    state_dirs=(".config/kilo", ".local/share/kilo", ".cache/kilo", ".local/state/kilo"),
    version="7.7.7",
    has_adapter=True,
    surface=(
        # No trust gate: all of it loads as soon as Kilo starts, from the working directory and
        # every directory above it up to the checkout's top (the surface probe, 7.7.7).
        _e("**/kilo.json", "settings", "json", "run", "config", "opencode"),
        _e("**/kilo.jsonc", "settings", "text", "src", "config (JSONC)"),
        _e("**/opencode.json", "settings", "json", "run", "OpenCode's config", "opencode"),
        _e("**/opencode.jsonc", "settings", "text", "run", "OpenCode's config (JSONC)"),
        # A bare `config.json` where it starts and above (not in a subdirectory): pinned there
        # only (the guard write-protects it in every project).
        _e("config.json", "settings", "json", "run", "config (a bare config.json)", "opencode"),
        *(
            _e(f"**/{d}/{part}", "plugins" if part.startswith(("tool", "plugin")) else (
               "settings" if "." in part else "agents"), "tree" if "**" in part else (
               "json" if part.endswith(".json") else "text"), "run", f"{d} {part}",
               "opencode" if part.endswith(".json") else "")
            for d in (".kilo", ".kilocode")
            for part in _KILO_DIR_PARTS
        ),
        _e("**/AGENTS.md", "instructions", "text", "run", "instructions"),
        _e("**/CLAUDE.md", "instructions", "text", "run", "instructions without AGENTS.md"),
        _e("**/CONTEXT.md", "instructions", "text", "run", "instructions without AGENTS.md"),
        _e("**/.agents/skills/**", "skills", "tree", "run", "skills"),
    ),
    keys={"opencode": OPENCODE.keys["opencode"]},
    trust_entries=(),
    deny_shape="decision",
    tool_table="kilo",
    tools=_OPENCODE_TOOLS,
    inert_tools=frozenset({
        "bash", "todowrite", "task", "skill", "background_process", "board_post", "board_read",
        "cancel_wakeup", "schedule_wakeup", "kilo_local_recall",
    }),
    adapter="kilo:KiloAdapter",
    mcp_list=True,
    config_dirs=(".kilo", ".kilocode"),
)
KILO = KILO._replace(above=tuple(e.pattern.removeprefix("**/") for e in KILO.surface))

# Cline CLI 3.0.65: the tools its requests offer (tests/harness/tools/), with the arguments that
# name what they touch (`files` a list of {path, ...}, `requests` a list of {url, prompt}).
_CLINE_TOOLS: dict[str, tuple[str, ...]] = {
    "read_files": ("files:read",),
    "search_codebase": ("queries:regex",),
    "fetch_web_content": ("requests:url",),
    "apply_patch": ("*:patch",),
}
_CLINE_INERT = frozenset({
    "run_commands", "ask_question", "spawn_agent", "team_spawn_teammate",
    "team_shutdown_teammate", "team_status", "team_task", "team_run_task", "team_cancel_run",
    "team_list_runs", "team_await_runs", "team_send_message", "team_broadcast",
    "team_read_mailbox", "team_mission_log", "team_cleanup", "team_create_outcome",
    "team_attach_outcome_fragment", "team_review_outcome_fragment", "team_finalize_outcome",
    "team_list_outcomes",
})

CLINE = Harness(
    name="cline",
    display="Cline CLI",
    binary="cline",
    project_dir_var="",
    state_dirs=(".cline",),
    version="3.0.65",
    has_adapter=True,
    surface=(
        # No trust gate: all of it loads as soon as Cline starts, from its workspace root (the
        # checkout's top, `git rev-parse --show-toplevel`): the surface probe saw 3.0.65 read
        # the hooks and AGENTS.md there; rules, workflows and skills are looked up there too
        # (named in its bundle, their directories opened under strace).
        # Hooks: one executable per event, run with the call on stdin.
        _e("**/.clinerules/hooks/**", "hooks", "tree", "run", "hooks (executables it runs)"),
        _e("**/.cline/hooks/**", "hooks", "tree", "run", "hooks (executables it runs)"),
        # `.clinerules` is a rules file or a directory of rules (workflows, skills, hooks in it).
        _e("**/.clinerules", "rules", "text", "src", "rules (a file)"),
        _e("**/.clinerules/**", "rules", "tree", "src", "rules, workflows, skills"),
        _e("**/.cline/rules/**", "rules", "tree", "src", "rules"),
        _e("**/.cline/workflows/**", "commands", "tree", "src", "workflows"),
        _e("**/.cline/skills/**", "skills", "tree", "src", "skills"),
        _e("**/.agents/skills/**", "skills", "tree", "src", "skills"),
        _e("**/.cline/agents/**", "agents", "tree", "src", "agents"),
        # Plugins are JavaScript it loads and runs (tools, providers, MCP servers).
        _e("**/.cline/plugins/**", "plugins", "tree", "src", "plugins (code it runs)"),
        _e("**/AGENTS.md", "instructions", "text", "run", "instructions"),
    ),
    keys={},
    trust_entries=(),
    deny_shape="cancel",
    tool_table="cline",
    tools=_CLINE_TOOLS,
    inert_tools=_CLINE_INERT,
    hook_input=("tool_call", "server__tool"),
    adapter="cline:ClineAdapter",
    config_dirs=(".cline", ".clinerules"),
)
CLINE = CLINE._replace(above=tuple(e.pattern.removeprefix("**/") for e in CLINE.surface))

# Auggie 0.36.0 (npm `@augmentcode/auggie`): the tools its chat-stream requests offer
# (tests/harness/tools/), with the arguments that name what they touch. Paths are relative to its
# workspace root (the checkout's top).
_AUGGIE_TOOLS: dict[str, tuple[str, ...]] = {
    "view": ("path:read", "search_query_regex:regex?"),
    "save-file": ("path:write",),
    "str-replace-editor": ("path:write",),
    "remove-files": ("file_paths:write",),
    "apply_patch": ("*:patch",),
    "web-fetch": ("url:url",),
    "launch-process": ("cwd:read?",),
    "codebase-retrieval": ("workspace_folder:read?",),
    # Ids of its own earlier outputs and sessions (under ~/.augment), named, nothing to judge.
    "view-range-untruncated": ("reference_id:opaque",),
    "search-untruncated": ("reference_id:opaque",),
}
_AUGGIE_INERT = frozenset({
    "kill-process", "read-process", "write-process", "list-processes", "view_tasklist",
    "reorganize_tasklist", "update_tasks", "add_tasks",
})
_AUGGIE_SETTINGS = {
    # Auggie 0.36.0's settings schema (read in its bundle); everything else is SETTING.
    "hooks": RUNS,
    "shell": RUNS,
    "startupScript": RUNS,
    "mcpServers": SERVER,
    "enabledPlugins": SERVER,
    "recommendedMarketplaces": SERVER,
    "autoUpdateMarketplaces": SERVER,
    "toolPermissions": PERMISSION,
    "removedTools": PERMISSION,
    "indexingAllowDirs": FILE,
    "worktreeDir": FILE,
    "bringYourOwnKey": HOST,
    "cloudAgent": HOST,
    # The tenant's feature flags, `enableHooks` among them (where the tenant allows overrides).
    "featureFlagOverrides": GUARD_OFF,
}

AUGGIE = Harness(
    name="auggie",
    display="Auggie",
    binary="auggie",
    project_dir_var="",
    state_dirs=(".augment",),
    version="0.36.0",
    has_adapter=True,
    surface=(
        # No trust gate: all of it loads as soon as Auggie starts, from its workspace root (the
        # checkout's top): measured with 0.36.0 (the surface probe, and under strace
        # `auggie mcp list` and a session against a local tenant): the settings' servers start
        # and hooks run, the instruction files and rules reach the model ("run"); commands,
        # agents, skills, hooks and plugin manifests are named in its bundle and opened there by
        # `auggie mcp list` and an indexing session ("src").
        _e("**/.augment/settings.json", "settings", "json", "run", "settings (hooks, servers)",
           "auggie"),
        _e("**/.augment/settings.local.json", "settings", "json", "run",
           "local settings (hooks, servers)", "auggie"),
        _e("**/.augment/rules/**", "rules", "tree", "run", "rules (reach the model)"),
        _e("**/.augment-guidelines", "instructions", "text", "run", "workspace guidelines"),
        _e("**/AGENTS.md", "instructions", "text", "run", "instructions"),
        _e("**/CLAUDE.md", "instructions", "text", "run", "instructions"),
        _e("**/.augment/commands/**", "commands", "tree", "src", "custom commands"),
        _e("**/.claude/commands/**", "commands", "tree", "src", "custom commands (Claude's)"),
        _e("**/.augment/agents/**", "agents", "tree", "src", "subagents"),
        _e("**/.claude/agents/**", "agents", "tree", "src", "subagents (Claude's)"),
        _e("**/.augment/skills/**", "skills", "tree", "src", "skills"),
        _e("**/.agents/skills/**", "skills", "tree", "src", "skills"),
        _e("**/.claude/skills/**", "skills", "tree", "src", "skills (Claude's)"),
        _e("**/.augment/hooks/**", "hooks", "tree", "src", "hook scripts by convention"),
        _e("**/.augment-plugin/**", "plugins", "tree", "src", "plugin and marketplace manifests"),
        _e("**/.claude-plugin/**", "plugins", "tree", "src", "plugin manifests (Claude's)"),
    ),
    keys={"auggie": _AUGGIE_SETTINGS},
    trust_entries=(),
    deny_shape="hookSpecificOutput",
    tool_table="auggie",
    tools=_AUGGIE_TOOLS,
    inert_tools=_AUGGIE_INERT,
    refused_tools={
        "view-session": "it reads another recorded session of the user's (~/.augment/sessions/), "
        "which the guard cannot judge",
    },
    hook_input=("tool_server",),
    names_event=True,
    adapter="auggie:AuggieAdapter",
    renders_into=("AGENTS.md",),
    mcp_list=True,
    # `.augment/settings.json` holds hooks and servers the shared file may carry: agentstack
    # renders into the local one.
    watched=(
        (".augment/settings.json", "json",
         (("hooks",), ("mcpServers",), ("featureFlagOverrides",), ("startupScript",),
          ("shell",))),
    ),
    config_dirs=(".augment",),
    plugin_markers=(".augment-plugin/plugin.json", ".claude-plugin/plugin.json"),
    plugin_marketplaces=(".augment-plugin/marketplace.json", ".claude-plugin/marketplace.json"),
)
AUGGIE = AUGGIE._replace(above=tuple(e.pattern.removeprefix("**/") for e in AUGGIE.surface))

COPILOT = Harness(
    name="copilot",
    display="GitHub Copilot CLI",
    binary="copilot",
    project_dir_var="COPILOT_PROJECT_DIR",
    state_dirs=(".copilot",),
    version="1.0.102",
    has_adapter=True,
    surface=(
        _e(".mcp.json", "mcp", "json", "run", "MCP servers", "mcp"),
        _e(".github/mcp.json", "mcp", "json", "run", "MCP servers", "mcp"),
        _e(".github/hooks/**", "hooks", "tree", "run", "hooks"),
        _e(".github/copilot/settings.json", "settings", "json", "run", "settings", "hooks"),
        _e(".github/copilot/settings.local.json", "settings", "json", "run", "settings", "hooks"),
        _e(".claude/settings.json", "settings", "json", "run", "Claude hooks", "hooks"),
        _e(".claude/settings.local.json", "settings", "json", "run", "Claude hooks", "hooks"),
        # Nested ones too (the surface probe, 1.0.102: read when a tool touches the directory).
        _e("**/.github/copilot-instructions.md", "instructions", "text", "run", "instructions"),
        _e(".github/instructions/**", "instructions", "tree", "run", "instructions"),
        _e("**/AGENTS.md", "instructions", "text", "run", "instructions"),
        _e("**/CLAUDE.md", "instructions", "text", "run", "instructions"),
        _e("**/GEMINI.md", "instructions", "text", "run", "instructions"),
        _e("**/.claude/CLAUDE.md", "instructions", "text", "run", "Claude Code memory"),
        _e(".github/skills/**", "skills", "tree", "run", "skills"),
        _e(".agents/skills/**", "skills", "tree", "run", "skills"),
        _e(".claude/skills/**", "skills", "tree", "run", "skills"),
        _e(".claude/agents/**", "agents", "tree", "run", "Claude Code subagents"),
        _e(".claude/commands/**", "commands", "tree", "run", "Claude Code commands"),
        _e(".claude/rules/**", "rules", "tree", "run", "Claude Code rules"),
        _e(".github/agents/**", "agents", "tree", "run", "custom agents"),
        _e(".github/prompts/**", "commands", "tree", "docs", "prompt files"),
        # Found by the surface probe (1.0.102): language servers it starts from the project.
        _e(".github/lsp.json", "lsp", "json", "run", "language servers it starts", "lsp"),
    ),
    keys={"mcp": _MCP_FILE, "hooks": _HOOKS_FILE, "lsp": {"lspServers": RUNS}},
    trust_entries=("~/.copilot/config.json trustedFolders",),
    deny_shape="permissionDecision",
    tool_table="copilot",
    tools=_COPILOT_TOOLS,
    inert_tools=_COPILOT_INERT,
    refused_tools=_COPILOT_REFUSED,
    hook_input=("toolName", "server-tool"),
    adapter="copilot:CopilotAdapter",
    mcp_list=True,
    user_level=True,
    # `disableAllHooks` there switches off every hook, the user's too; `hooks` adds some. It also
    # runs Claude Code's project hooks: the same file, with the same keys, as for claude-code.
    watched=(
        (".github/copilot/settings.json", "json", (("disableAllHooks",), ("hooks",))),
        (".github/copilot/settings.local.json", "json", (("disableAllHooks",), ("hooks",))),
        # read when there is no .mcp.json (no server is rendered there when none is locked)
        (".github/mcp.json", "json", (("mcpServers",),)),
        _CLAUDE_WATCHED,
    ),
    config_dirs=(".copilot", ".github/hooks", ".github/copilot"),
    # Measured with 1.0.102: instructions, rules, skills and agents reach the model, and in a
    # folder it trusts, the hooks of `.github/hooks/` and `.github/copilot/settings.json` run;
    # servers above the project (`.github/mcp.json`, `.mcp.json`) and Claude Code's hooks do not.
    above=(
        ".github/hooks/**",
        ".github/copilot/settings.json",
        ".github/copilot/settings.local.json",
        "AGENTS.md",
        "CLAUDE.md",
        "GEMINI.md",
        ".github/copilot-instructions.md",
        ".github/instructions/**",
        ".github/skills/**",
        ".agents/skills/**",
        ".claude/skills/**",
        ".claude/agents/**",
        ".claude/commands/**",
        ".claude/rules/**",
        ".github/agents/**",
        ".claude/CLAUDE.md",
        # Read above the project at interactive start (the surface probe, 1.0.102).
        ".github/lsp.json",
        # Read at the checkout's top (the surface probe, 1.0.102); pinned in every directory above.
        ".claude/settings.json",
        ".claude/settings.local.json",
    ),
)

CURSOR = Harness(
    name="cursor",
    display="Cursor",
    binary="cursor-agent",
    project_dir_var="",
    state_dirs=(".cursor",),
    version="docs",
    has_adapter=True,
    surface=(
        _e(".cursor/mcp.json", "mcp", "json", "docs", "MCP servers", "mcp"),
        _e(".cursor/hooks.json", "hooks", "json", "docs", "hooks", "hooks"),
        _e(".cursor/rules/**", "rules", "tree", "docs", "rules"),
        _e(".cursorrules", "rules", "text", "docs", "legacy rules"),
        _e("**/AGENTS.md", "instructions", "text", "docs", "instructions"),
    ),
    keys={"mcp": _MCP_FILE, "hooks": _HOOKS_FILE},
    trust_entries=(),
    deny_shape="permission",
    tool_table="claude-code",  # it runs Claude Code's hook protocol and tool names
    hook_input=("MCP:",),
    adapter="cursor:CursorAdapter",
    config_dirs=(".cursor",),
)

VSCODE = Harness(
    name="vscode",
    display="VS Code",
    binary="code",
    project_dir_var="",
    state_dirs=(".vscode", ".config/Code"),
    version="docs",
    has_adapter=True,
    surface=(
        _e(".vscode/mcp.json", "mcp", "json", "docs", "MCP servers", "mcp"),
        _e(".github/hooks/**", "hooks", "tree", "docs", "hooks"),
        _e(".claude/settings.json", "settings", "json", "docs", "Claude hooks", "hooks"),
        _e(".claude/settings.local.json", "settings", "json", "docs", "Claude hooks", "hooks"),
        _e(".github/copilot-instructions.md", "instructions", "text", "docs", "instructions"),
        _e("AGENTS.md", "instructions", "text", "docs", "instructions"),
    ),
    keys={"mcp": _MCP_FILE, "hooks": _HOOKS_FILE},
    trust_entries=(),
    deny_shape="hookSpecificOutput",
    tool_table="claude-code",  # it runs Claude Code's hook protocol and tool names
    adapter="vscode:VSCodeAdapter",
    config_dirs=(".vscode",),
)

# Crush (npm @charmland/crush 0.96.1): not installable here (its package holds no binary: its
# postinstall downloads one from GitHub releases), so described from its documented keys and its
# source (the public repository's config loader, hooks runner and tools), not run.
_CRUSH_TOOLS: dict[str, tuple[str, ...]] = {
    "view": ("file_path:read",),
    "write": ("file_path:write",),
    "edit": ("file_path:write",),
    "multiedit": ("file_path:write",),
    "ls": ("path:read?",),
    "glob": ("pattern:pattern", "path:read?"),
    "grep": ("path:read?", "include:pattern?", "pattern:regex?"),
    "fetch": ("url:url",),
    "web_fetch": ("url:url",),
    "download": ("url:url", "file_path:write"),
    "list_mcp_resources": ("mcp_name:server",),
    "read_mcp_resource": ("mcp_name:server", "uri:opaque?"),
    "bash": ("working_dir:read?",),
    "lsp_diagnostics": ("file_path:read?",),
    "lsp_symbols": ("file_path:read",),
    "lsp_references": ("path:read?", "symbol:opaque?"),
    "lsp_definition": ("path:read?", "symbol:opaque?"),
    "lsp_call_hierarchy": ("path:read?", "symbol:opaque?"),
}
_CRUSH_INERT = frozenset({
    "job_output", "job_kill", "todos", "question", "web_search", "sourcegraph", "crush_info",
    "crush_logs", "lsp_restart",
})
_CRUSH_REFUSED: dict[str, str] = {
    "agent": "its sub-agent's own tool calls are not hooked (Crush runs sub-agents without "
    "its PreToolUse hooks), so the guard would never judge them",
    "agentic_fetch": "it runs a sub-agent whose own tool calls are not hooked",
    "lsp_rename": "it edits files through a language server, which the guard never sees",
    "lsp_replace_symbol": "it edits files through a language server, which the guard never sees",
}
_CRUSH_CONFIG = {
    "hooks": RUNS,
    "lsp": RUNS,  # language servers it starts (command, args, env)
    "providers": HOST,  # base_url, api_key, extra_headers; aws_auth_refresh runs a command
    "env": ENV,
    "mcp": SERVER,
    "permissions": PERMISSION,  # allowed_tools: no permission prompt
    "options": FILE,  # context_paths, skills_paths, data_directory, disabled_tools
}

CRUSH = Harness(
    name="crush",
    display="Crush",
    binary="crush",
    project_dir_var="CRUSH_PROJECT_DIR",
    state_dirs=(".config/crush", ".local/share/crush", ".cache/crush"),
    version="docs",
    has_adapter=True,
    surface=(
        # No trust gate: its configs are merged from the working directory up to the checkout's
        # top (the git worktree root; the working directory alone outside git), `crushrc` files
        # beating JSON in the same directory and `.crush.json` beating `crush.json`.
        _e("**/crush.json", "settings", "json", "src", "config (no trust gate)", "crush"),
        _e("**/.crush.json", "settings", "json", "src", "config (beats crush.json)", "crush"),
        _e("**/crushrc", "runs", "tree", "src", "a Bash script it runs at start (config)"),
        _e("**/.crushrc", "runs", "tree", "src", "a Bash script it runs at start (config)"),
        # Its data directory (the nearest `.crush` up to the checkout's top): a workspace
        # config it merges last (it writes the models it selects there itself), and skills.
        _e(".crush/crush.json", "settings", "json", "src", "workspace config (merged last)",
           "crush"),
        _e("**/.crush/skills/**", "skills", "tree", "src", "skills"),
        _e("**/.agents/skills/**", "skills", "tree", "src", "skills"),
        _e("**/.claude/skills/**", "skills", "tree", "src", "skills"),
        _e("**/.cursor/skills/**", "skills", "tree", "src", "skills"),
        # Its context files, read from the working directory (options.context_paths adds more).
        *(
            _e(f"**/{n}", "instructions", "text", "src", "context file")
            for n in ("AGENTS.md", "agents.md", "Agents.md", "CRUSH.md", "CRUSH.local.md",
                      "crush.md", "crush.local.md", "Crush.md", "Crush.local.md", "CLAUDE.md",
                      "CLAUDE.local.md", "GEMINI.md", "gemini.md")
        ),
        _e("**/.github/copilot-instructions.md", "instructions", "text", "src", "context file"),
        _e("**/.cursorrules", "rules", "text", "src", "context file"),
        _e("**/.cursor/rules/**", "rules", "tree", "src", "context files"),
    ),
    keys={"crush": _CRUSH_CONFIG},
    trust_entries=(),
    deny_shape="decision",
    tool_table="crush",
    tools=_CRUSH_TOOLS,
    inert_tools=_CRUSH_INERT,
    refused_tools=_CRUSH_REFUSED,
    hook_input=("mcp_server_tool",),
    adapter="crush:CrushAdapter",
    renders_into=("AGENTS.md",),
    watched=(
        # `.crush.json` beats the `crush.json` agentstack renders into: its hooks, servers and
        # permissions would replace or widen the rendered ones.
        (".crush.json", "json", (("hooks",), ("mcp",), ("permissions",), ("env",))),
    ),
    config_dirs=(".crush",),
)
# Configs, crushrc files and skills are read up to the checkout's top (its loader).
CRUSH = CRUSH._replace(above=("crush.json", ".crush.json", "crushrc", ".crushrc",
                              ".agents/skills/**", ".crush/skills/**", ".claude/skills/**",
                              ".cursor/skills/**"))

# Harnesses described (their surface pinned and reviewed) that agentstack renders nothing for,
# because no guard can protect them: neither has a pre-tool hook that runs (the review and
# `doctor` say so; start them through `agentstack run`). NO_GUARD says why, per harness.
# Aider 0.86.2 (PyPI `aider-chat`): no MCP, no hooks, no tool calls (it edits files from the
# model's text); its options files can name commands it runs.
AIDER = Harness(
    name="aider",
    display="Aider",
    binary="aider",
    project_dir_var="",
    state_dirs=(".aider",),
    version="0.86.2",
    has_adapter=False,
    surface=(
        # Read in the working directory and at the checkout's top (the surface probe, 0.86.2).
        # `lint-cmd`, `test-cmd` (with `auto-lint`/`auto-test` on by default after an edit),
        # `notifications-command`, `editor` and `git-commit-verify` run commands; `env-file`,
        # `set-env`, `openai-api-base` and the like send the key elsewhere.
        _e("**/.aider.conf.yml", "runs", "tree", "run",
           "its options: lint-cmd, test-cmd, notifications-command, editor run commands"),
        _e("**/.aider.model.settings.yml", "env", "tree", "run",
           "model settings (extra_params: api_base, headers)"),
        _e("**/.aider.model.metadata.json", "settings", "tree", "run", "model metadata"),
        _e("**/.env", "env", "tree", "run", "environment loaded at start (its --env-file)"),
    ),
    keys={},
    trust_entries=(),
)
AIDER = AIDER._replace(above=tuple(e.pattern.removeprefix("**/") for e in AIDER.surface))

# Continue CLI 1.5.47 (npm `@continuedev/cli`, binary `cn`): it reads `hooks` from its settings
# files but never fires them (a PreToolUse hook that exits 2 did not run): no guard can protect it.
CONTINUE = Harness(
    name="continue",
    display="Continue CLI",
    binary="cn",
    project_dir_var="",
    state_dirs=(".continue",),
    version="1.5.47",
    has_adapter=False,
    surface=(
        _e(".continue/rules/**", "rules", "tree", "run", "rules (reach the model)"),
        _e(".continue/skills/**", "skills", "tree", "run", "skills (reach the model)"),
        _e(".continue/settings.json", "settings", "json", "run", "settings (hooks, not fired)",
           "hooks"),
        _e(".continue/settings.local.json", "settings", "json", "run",
           "local settings (hooks, not fired)", "hooks"),
        _e(".claude/settings.json", "settings", "json", "run", "Claude hooks (not fired)",
           "hooks"),
        _e(".claude/settings.local.json", "settings", "json", "run", "Claude hooks (not fired)",
           "hooks"),
        _e("AGENTS.md", "instructions", "text", "run", "instructions"),
        _e("AGENT.md", "instructions", "text", "run", "instructions without AGENTS.md"),
        _e("CLAUDE.md", "instructions", "text", "run", "instructions without AGENTS.md"),
        _e("CODEX.md", "instructions", "text", "run", "instructions without AGENTS.md"),
    ),
    keys={"hooks": _HOOKS_FILE},
    trust_entries=(),
    config_dirs=(".continue",),
)

# Why the guard cannot protect a described harness (the review and `doctor` say it).
NO_GUARD: dict[str, str] = {
    "aider": "Aider has no hook that can block (and makes no tool calls): no agentstack guard "
    "can protect it; its .aider.conf.yml can name commands it runs (lint-cmd, test-cmd). "
    "Start it through 'agentstack run', whose kernel sandbox does not depend on it.",
    "continue": "Continue CLI never fires the hooks it reads (measured with 1.5.47): no "
    "agentstack guard can protect it. Start it through 'agentstack run', whose kernel sandbox "
    "does not depend on it.",
}
# Harnesses whose hook runs only under a condition agentstack cannot set (doctor says so): why.
GUARD_DEPENDS: dict[str, str] = {
    "auggie": "Auggie 0.36.0 runs hooks (the agentstack guard among them) only when the Augment "
    "tenant's enableHooks feature flag is on (sent by Augment's server with the models; off by "
    "default): where it is off, no guard protects Auggie; start it through 'agentstack run'",
}
# Harnesses agentstack knows of whose binary was not run here (doctor says so): why.
NOT_VERIFIED: dict[str, str] = {
    "crush": "Crush 0.96.1 (npm @charmland/crush) cannot be installed from the registries "
    "this project reaches (its package holds no binary: its install script downloads one from "
    "GitHub releases): rendered from its documented keys and its source, never run here; "
    "'agentstack run' does not depend on it",
}

# Every harness, in the order the manifest's schema, `doctor` and the review list them. Every table
# below, and every module's per-harness table, is built from these descriptions.
ALL: tuple[Harness, ...] = (
    CLAUDE_CODE, CODEX, GEMINI_CLI, OPENCODE, COPILOT, CURSOR, VSCODE, QWEN_CODE, DROID,
    KILO, CLINE, AUGGIE, CRUSH, AIDER, CONTINUE,
)
BY_NAME: dict[str, Harness] = {h.name: h for h in ALL}
NAMES: tuple[str, ...] = tuple(h.name for h in ALL)
DEFAULT_NAMES: tuple[str, ...] = tuple(h.name for h in ALL if h.default)

# The project files each built-in adapter writes the instructions into (its `renders_into`): such a
# file cannot also be an instruction source. Here, not only on the adapters, so that checking a lock
# does not import the renderers.
RENDERS_INTO: dict[str, tuple[str, ...]] = {h.name: h.renders_into for h in ALL if h.renders_into}
# Plugin roots are pinned whole: a file here (relative to the directory it is in) makes that
# directory a plugin root the harness loads everything of (hooks, skills, servers, scripts), and a
# marketplace file names more roots in its `plugins[].source` (a relative path, or an object with
# a relative `path`). Measured or read per harness; Gemini CLI's extensions are whole trees on its
# surface already (`.gemini/extensions/**`).
PLUGIN_MARKERS: dict[str, tuple[str, ...]] = {
    h.name: h.plugin_markers for h in ALL if h.plugin_markers
}
PLUGIN_MARKETPLACES: dict[str, tuple[str, ...]] = {
    h.name: h.plugin_marketplaces for h in ALL if h.plugin_marketplaces
}


def get(name: str) -> Harness:
    return BY_NAME[name]


def key_risk(harness: Harness, table: str, key: str) -> str:
    return harness.keys.get(table, {}).get(key, SETTING)


# ------------------------------------------------------------------ what a file tool may write
# File names so common in projects that write-protecting them in every project would stop the
# agent editing ordinary files: the guard protects a pattern ending in one of them only where its
# harness is among the project's harnesses (agentstack.protect).
GENERIC_FILE_NAMES: frozenset[str] = frozenset({"config.json"})

# The guard's write protection is compiled from this module (agentstack.protect, into the guard
# snapshot): every surface pattern of every harness is write-protected, wherever it lies, except
# the instruction files listed here, which the agent may edit (a change is still drift: the guard
# denies the next call until it is reviewed). A pattern added to a surface is protected unless it
# is added here too; a test fails when a pattern is neither.
AGENT_EDITS: frozenset[str] = frozenset(
    {
        "**/CLAUDE.md",
        "**/CLAUDE.local.md",
        "**/AGENTS.md",
        "**/AGENTS.override.md",
        "**/GEMINI.md",
        "**/QWEN.md",
        "**/DESIGN.md",
        "**/Agents.md",
        "**/agents.md",
        "**/Claude.md",
        "**/CONTEXT.md",
        "AGENTS.md",
        "AGENT.md",
        "CLAUDE.md",
        "CODEX.md",
        ".github/copilot-instructions.md",
        "**/.github/copilot-instructions.md",
        ".github/instructions/**",
    }
)
# Directories a harness makes itself inside its project configuration directory for its own
# atomic writes (temporary files it renames into place, never loaded): left out of the guard's
# listing of that directory. Measured with Claude Code 2.1.332: with a plugin enabled from a
# local marketplace, a `-p` run that edits a project file leaves an empty `.claude/.cc-writes/`.
HARNESS_TEMP_DIRS: dict[str, tuple[str, ...]] = {"claude-code": (".claude/.cc-writes",)}

# Also protected, whole, wherever they lie: each harness's configuration directory (what it adds
# there later is configuration too), those of harnesses agentstack does not render for, git's
# metadata (what git executes), and files that run code or steer agentstack itself.
PROTECTED_DIRS: tuple[str, ...] = tuple(
    dict.fromkeys(
        (
            ".git",
            *(d for h in ALL for d in h.config_dirs),
            # those of harnesses agentstack has no description of
            ".windsurf",
            ".kiro",
            ".roo",
        )
    )
)
PROTECTED_FILES: tuple[str, ...] = (
    ".claude.json",
    ".envrc",
    ".gitmodules",
    "agentstack.toml",
    "agentstack.lock",
)

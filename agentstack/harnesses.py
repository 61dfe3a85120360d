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

# The project files each built-in adapter writes the instructions into (its `renders_into`): such a
# file cannot also be an instruction source. Here, not only on the adapters, so that checking a lock
# does not import the renderers.
RENDERS_INTO: dict[str, tuple[str, ...]] = {"claude-code": ("CLAUDE.md",), "codex": ("AGENTS.md",)}


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
    ),
    keys={"gemini": _GEMINI_SETTINGS},
    trust_entries=("~/.gemini/trustedFolders.json",),
    # Measured with 0.61.0: the GEMINI.md hierarchy reaches the model; `.gemini/settings.json`
    # above the project is not read (its servers and hooks do not start).
    # Its `.env` is looked for from the working directory up (docs).
    above=("GEMINI.md", ".gemini/.env", ".env"),
)

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
)
# Measured with 1.18.33: OpenCode reads its config, its `.opencode/` directory, instructions and
# skills from every directory up to the worktree's top (`opencode.json`'s servers start there).
OPENCODE = OPENCODE._replace(above=tuple(e.pattern.removeprefix("**/") for e in OPENCODE.surface))

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
)

# Plugin roots are pinned whole: a file here (relative to the directory it is in) makes that
# directory a plugin root the harness loads everything of (hooks, skills, servers, scripts), and a
# marketplace file names more roots in its `plugins[].source` (a relative path, or an object with
# a relative `path`). Measured or read per harness; Gemini CLI's extensions are whole trees on its
# surface already (`.gemini/extensions/**`).
PLUGIN_MARKERS: dict[str, tuple[str, ...]] = {
    "claude-code": (".claude-plugin/plugin.json",),
    "codex": (".codex-plugin/plugin.json",),
}
PLUGIN_MARKETPLACES: dict[str, tuple[str, ...]] = {
    "claude-code": (".claude-plugin/marketplace.json",),
    "codex": (".agents/plugins/marketplace.json",),
}

ALL: tuple[Harness, ...] = (CLAUDE_CODE, CODEX, GEMINI_CLI, OPENCODE, COPILOT, CURSOR, VSCODE)
BY_NAME: dict[str, Harness] = {h.name: h for h in ALL}
NAMES: tuple[str, ...] = tuple(h.name for h in ALL)


def get(name: str) -> Harness:
    return BY_NAME[name]


def key_risk(harness: Harness, table: str, key: str) -> str:
    return harness.keys.get(table, {}).get(key, SETTING)


# ------------------------------------------------------------------ what a file tool may write
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
        "**/CONTEXT.md",
        "AGENTS.md",
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
PROTECTED_DIRS: tuple[str, ...] = (
    ".git",
    ".claude",
    ".codex",
    ".agents",
    ".gemini",
    ".cursor",
    ".opencode",
    ".copilot",
    ".vscode",
    ".windsurf",
    ".kiro",
    ".roo",
    ".qwen",
    ".github/hooks",
    ".github/copilot",
    ".config/opencode",
)
PROTECTED_FILES: tuple[str, ...] = (
    ".claude.json",
    ".envrc",
    ".gitmodules",
    "agentstack.toml",
    "agentstack.lock",
)

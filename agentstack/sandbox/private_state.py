"""The harness's private user-level state inside `agentstack run`.

A confined harness never sees the user's real `~/.claude`, `~/.claude.json` or `~/.codex` (they
are not granted, and a manifest grant that reaches them is refused): what a session writes there
would run, unconfined, in every later session in any directory. Instead, each project has its own
directory, `$AGENTSTACK_HOME/projects/<id>/harness-state/`, read-write to the harness and pointed
at by environment variables (no bind mounts):

    claude/        CLAUDE_CONFIG_DIR   (settings.json, .claude.json, sessions, todos, ...)
    codex/         CODEX_HOME          (config.toml, sessions, ...)
    xdg/config     XDG_CONFIG_HOME     (re-created empty at every start)
    xdg/cache      XDG_CACHE_HOME
    xdg/data       XDG_DATA_HOME
    xdg/state      XDG_STATE_HOME

At every start, before anything runs, `seed()` rewrites what decides behaviour: the settings
files (only an allowlist of the user's own harmless keys: model, theme, ...; never hooks, servers,
status lines, helpers or `env`), the onboarding and project-trust state, and the user-level keys
`apply` renders (the Codex guard hook and its trusted hash); and removes whatever else configures
the harness (hooks, plugins, skills, agents, commands, instruction files). Conversation history and
caches persist. Everything here is written through directory file descriptors opened with
O_NOFOLLOW: a symbolic link planted by a session is replaced, never followed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from agentstack import harnesses as _harnesses
from agentstack import layout as _layout

STATE_DIR = _layout.HARNESS_STATE
# The harnesses whose descriptions ask for a private copy (each has its layout below).
HARNESSES = tuple(h.name for h in _harnesses.ALL if h.private_state)

# The user's own settings that only change presentation or the model, copied into the private
# state. Anything else (hooks, statusLine, apiKeyHelper, env, mcpServers, enabledPlugins,
# permissions, ...) is left out: inside `run` the harness's behaviour comes from the trusted
# declaration only.
CLAUDE_SETTINGS_KEYS = ("model", "theme", "outputStyle", "language", "includeCoAuthoredBy",
                        "cleanupPeriodDays", "alwaysThinkingEnabled", "verbose",
                        "spinnerTipsEnabled")
CLAUDE_GLOBAL_KEYS = ("hasCompletedOnboarding", "lastOnboardingVersion", "theme",
                      "autoUpdates", "hasSeenTasksHint")
CLAUDE_PROJECT_KEYS = ("hasTrustDialogAccepted", "hasCompletedProjectOnboarding")
CLAUDE_ONBOARDING_KEYS = ("hasCompletedOnboarding", "lastOnboardingVersion", "theme")
CLAUDE_API_KEY_ENV = "ANTHROPIC_API_KEY"
CLAUDE_KEY_SUFFIX = 20  # Claude Code records an approved key by its last 20 characters
CODEX_CONFIG_KEYS = ("model", "model_provider", "model_providers", "model_reasoning_effort",
                     "model_reasoning_summary", "model_verbosity", "model_context_window",
                     "model_max_output_tokens", "hide_agent_reasoning", "approval_policy",
                     "sandbox_mode", "features", "analytics")
# Removed at every start: they configure what the harness runs or is told.
CLAUDE_RESET = ("settings.json", "settings.local.json", ".claude.json", "CLAUDE.md", "hooks",
                "plugins", "skills", "agents", "commands", "output-styles", "rules")
CODEX_RESET = ("config.toml", "hooks.json", "AGENTS.md", "AGENTS.override.md", "prompts",
               "skills", "rules", "plugins")


class Layout(NamedTuple):
    """Where the private state of one project lives."""

    root: str

    @property
    def claude(self) -> str:
        return os.path.join(self.root, "claude")

    @property
    def codex(self) -> str:
        return os.path.join(self.root, "codex")

    def env(self) -> tuple[tuple[str, str], ...]:
        return (
            ("CLAUDE_CONFIG_DIR", self.claude),
            ("CODEX_HOME", self.codex),
            ("XDG_CONFIG_HOME", os.path.join(self.root, "xdg", "config")),
            ("XDG_CACHE_HOME", os.path.join(self.root, "xdg", "cache")),
            ("XDG_DATA_HOME", os.path.join(self.root, "xdg", "data")),
            ("XDG_STATE_HOME", os.path.join(self.root, "xdg", "state")),
        )


ENV_NAMES = tuple(name for name, _ in Layout("/").env())


def layout_for(agentstack_home: str, workdir: str) -> Layout:
    return Layout(_layout.harness_state(agentstack_home, workdir))


# ------------------------------------------------------------------------ safe file operations


class StateError(OSError):
    pass


def _open_dir(parent: int, name: str) -> int:
    """Open (creating it 0700) the directory `name` under `parent`, never through a link: a
    symbolic link or file in its place is moved aside first."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(3):
        try:
            return os.open(name, flags, dir_fd=parent)
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=parent)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            _remove(parent, name)
    raise StateError(errno.EAGAIN, f"cannot open {name} in the private harness state")


def _remove(parent: int, name: str) -> None:
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(name, dir_fd=parent)  # fd-based: links inside are removed, not followed
    else:
        os.unlink(name, dir_fd=parent)


def _write(parent: int, name: str, data: bytes) -> None:
    temporary = f".{name}.agentstack-{os.getpid()}"
    _remove(parent, temporary)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=parent)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    _remove(parent, name)  # a directory in its place would make the rename fail
    os.rename(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)


@contextlib.contextmanager
def _state_root(layout: Layout) -> Iterator[int]:
    """An fd for the state directory: its parent (`projects/<id>`, agentstack's own, never
    granted) is opened as it is; the state directory itself without following a link."""
    parent = os.path.dirname(layout.root)
    os.makedirs(parent, mode=0o700, exist_ok=True)
    parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = _open_dir(parent_fd, os.path.basename(layout.root))
    finally:
        os.close(parent_fd)
    try:
        yield fd
    finally:
        os.close(fd)


# ------------------------------------------------------------------------ seeding


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read(8 * 1024 * 1024))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_json_nofollow(path: str) -> dict[str, Any]:
    """A JSON object from a file the confined harness wrote (never through a link it planted)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return {}
    try:
        with open(fd, "rb", closefd=False) as handle:
            data = json.loads(handle.read(8 * 1024 * 1024))
    except (OSError, ValueError):
        return {}
    finally:
        os.close(fd)
    return data if isinstance(data, dict) else {}


def _read_toml(path: str) -> dict[str, Any]:
    import tomllib

    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except (OSError, ValueError):
        return {}


def _pick(source: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: source[k] for k in keys if k in source}


def _set(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = doc
    for key in path[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[path[-1]] = value


def seed(
    layout: Layout,
    *,
    workdir: str,
    home: str,
    user_keys: Mapping[str, Mapping[tuple[str, ...], Any]] | None = None,
    route_urls: Mapping[str, str] | None = None,
    api_keys: tuple[str, ...] = (),
) -> None:
    """Rewrite the private state's behaviour-deciding files before a session (see the module).

    `user_keys`: the user-level keys `apply` renders, by file ("claude.json", "codex.toml").
    `route_urls`: credential route upstream -> the proxy's URL for it; a Codex provider whose
    `base_url` lies under a route's upstream is pointed at the route (Codex reads its base URL
    from the config only)."""
    import tomlkit

    keys = user_keys or {}
    real_claude = os.path.join(home, ".claude")
    settings = _pick(_read_json(os.path.join(real_claude, "settings.json")), CLAUDE_SETTINGS_KEYS)
    real_global = _read_json(os.path.join(home, ".claude.json"))
    # What the harness learnt in an earlier session about its own onboarding (a theme picked, the
    # onboarding done), kept: plain values only; the user's own ~/.claude.json decides over them.
    earlier = _read_json_nofollow(os.path.join(layout.claude, ".claude.json"))
    claude_global: dict[str, Any] = {k: v for k, v in _pick(earlier, CLAUDE_ONBOARDING_KEYS).items()
                                     if isinstance(v, (bool, str))}
    claude_global.update(_pick(real_global, CLAUDE_GLOBAL_KEYS))
    projects = real_global.get("projects")
    own = projects.get(workdir) if isinstance(projects, dict) else None
    claude_global["projects"] = {workdir: _pick(own, CLAUDE_PROJECT_KEYS)
                                 if isinstance(own, dict) else {}}
    for path, value in keys.get("claude.json", {}).items():
        _set(claude_global, path, value)
    if api_keys:
        # The phantom token(s) the credential proxy hands Claude Code as ANTHROPIC_API_KEY,
        # approved in the private state: unapproved, interactive Claude Code treats the session
        # as not logged in and, before its first prompt, checks that api.anthropic.com answers
        # (a CONNECT through https_proxy, which the gate refuses by design). Claude Code keys
        # its approvals by the last 20 characters of the key. The token is agentstack's own,
        # valid for this session only; the user's own approvals are never copied in.
        claude_global["customApiKeyResponses"] = {
            "approved": [key[-CLAUDE_KEY_SUFFIX:] for key in api_keys], "rejected": []}
    codex = _pick(_read_toml(os.path.join(home, ".codex", "config.toml")), CODEX_CONFIG_KEYS)
    for path, value in keys.get("codex.toml", {}).items():
        _set(codex, path, value)
    providers = codex.get("model_providers")
    if isinstance(providers, dict):
        for provider in providers.values():
            url = provider.get("base_url") if isinstance(provider, dict) else None
            if not isinstance(url, str):
                continue
            for upstream, proxied in (route_urls or {}).items():
                if url.rstrip("/") == upstream or url.startswith(upstream + "/"):
                    provider["base_url"] = proxied + url.rstrip("/")[len(upstream):]
                    break

    with _state_root(layout) as root_fd:
        claude_fd = _open_dir(root_fd, "claude")
        try:
            for name in CLAUDE_RESET:
                _remove(claude_fd, name)
            _write(claude_fd, "settings.json", _json(settings))
            _write(claude_fd, ".claude.json", _json(claude_global))
        finally:
            os.close(claude_fd)
        codex_fd = _open_dir(root_fd, "codex")
        try:
            for name in CODEX_RESET:
                _remove(codex_fd, name)
            _write(codex_fd, "config.toml", tomlkit.dumps(codex).encode("utf-8"))
        finally:
            os.close(codex_fd)
        xdg_fd = _open_dir(root_fd, "xdg")
        try:
            _remove(xdg_fd, "config")
            for name in ("config", "cache", "data", "state"):
                os.close(_open_dir(xdg_fd, name))
        finally:
            os.close(xdg_fd)


def _json(doc: Mapping[str, Any]) -> bytes:
    return (json.dumps(doc, indent=2, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")


def describe(layout: Layout) -> list[str]:
    """What the harness sees, for `why` and the docs."""
    return [
        f"private harness state {layout.root} (read-write; per project)",
        *(f"  {name}={value}" for name, value in layout.env()),
        "  seeded at every start: settings without hooks, servers, status line, helpers or env; "
        "onboarding and project trust; the user-level guard apply renders",
        "  the real ~/.claude, ~/.claude.json and ~/.codex are never granted",
    ]


__all__ = ["ENV_NAMES", "HARNESSES", "Layout", "describe", "layout_for", "seed"]

"""Harness plugins as consented items: what a pinned plugin contributes, and how it is rendered.

A `[plugins.NAME]` item is pinned by the lock like a skill (every file's bytes; a git source by
full commit and tree, read through the mirror with plumbing only). This module reads nothing from
disk or git itself: it is given the pinned file list and a function that returns a pinned file's
bytes, and it

- **expands** the plugin into what it contributes, each as what it is (`expand`): the hooks
  (event, matcher, command), the MCP servers (command, arguments, environment or URL), the
  skills, agents, commands and instruction files, the executables it ships, and any manifest key
  agentstack does not model (a risk finding, never silently ignored). The expansion is part of
  the lock entry and of the consent document, so `show` and `diff` present a plugin's hook as a
  hook, and a plugin update is a diff like any other;
- **materializes** it for its harness (`claude_marketplace`): a one-plugin local marketplace whose
  directory is named by the digest of everything in it (content-addressed), holding exactly the
  pinned bytes of the enabled components.

Nothing of a plugin is executed, imported or evaluated here: its JSON manifests are parsed as
data, its Markdown files are only listed.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Callable
from typing import Any

from agentstack.canonical import digest_of

FORMATS = ("claude-code", "codex", "gemini-cli")
COMPONENTS = ("hooks", "servers", "skills", "agents", "commands", "instructions")

# The manifest file that makes a directory a plugin of each format.
MARKERS = {
    "claude-code": ".claude-plugin/plugin.json",
    "codex": ".codex-plugin/plugin.json",
    "gemini-cli": "gemini-extension.json",
}
# Keys of a plugin manifest that only describe it (shown, never loaded as code or config).
_DESCRIPTIVE = frozenset(
    {
        "name", "version", "description", "author", "homepage", "repository", "license",
        "keywords", "$schema", "category", "tags", "interface", "displayName",
    }
)
# Keys that point at components, modelled below.
_MODELLED = {
    "claude-code": frozenset({"hooks", "mcpServers", "commands", "agents", "skills"}),
    "codex": frozenset({"hooks", "mcpServers", "skills", "agents", "commands"}),
    "gemini-cli": frozenset({"mcpServers", "contextFileName", "excludeTools", "hooks"}),
}
PLUGIN_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
MAX_JSON = 1 << 20  # a plugin's JSON manifests are read whole; larger ones are refused


class PluginError(Exception):
    """A plugin that cannot be pinned as it is: `file` (relative to the plugin) and why."""

    def __init__(self, file: str, message: str, hint: str = "") -> None:
        super().__init__(f"{file}: {message}")
        self.file = file
        self.message = message
        self.hint = hint


Reader = Callable[[str], bytes]


def _json(read: Reader, rel: str) -> Any:
    data = read(rel)
    if len(data) > MAX_JSON:
        raise PluginError(rel, f"is larger than {MAX_JSON} bytes")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise PluginError(
            rel, f"is not valid JSON ({exc})", "fix the plugin, or pin a commit where it is valid"
        ) from None


def _norm(base: str, ref: str, where: str) -> str:
    """A path a plugin manifest names (`./hooks/x.json`), relative to the plugin root; one that
    leaves the plugin is refused."""
    text = ref.replace("${CLAUDE_PLUGIN_ROOT}/", "").replace("${extensionPath}/", "")
    rel = posixpath.normpath(posixpath.join(base, text))
    if rel.startswith("../") or rel == ".." or posixpath.isabs(rel):
        raise PluginError(where, f"names {ref!r}, which is outside the plugin")
    return "" if rel == "." else rel


def _refs(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise PluginError(where, "must be a path or a list of paths")


def _hooks(doc: Any, source: str, out: dict[str, dict[str, Any]]) -> None:
    """Claude Code's (and Codex's, Gemini CLI's) hooks file: {"hooks": {EVENT: [{matcher,
    hooks: [{type, command, timeout}]}]}}; each hook becomes one item `EVENT[i]`."""
    table = doc.get("hooks", doc) if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        raise PluginError(source, "has no hooks table")
    for event, groups in sorted(table.items()):
        if not isinstance(groups, list):
            raise PluginError(source, f"hooks.{event} is not a list")
        for group in groups:
            if not isinstance(group, dict) or not isinstance(group.get("hooks", []), list):
                raise PluginError(source, f"hooks.{event} has an entry that is not a hook group")
            matcher = group.get("matcher", "*")
            for hook in group.get("hooks", []):
                if not isinstance(hook, dict):
                    raise PluginError(source, f"hooks.{event} has a hook that is not a table")
                index = sum(1 for k in out if k.startswith(f"{event}["))
                item: dict[str, Any] = {
                    "event": str(event),
                    "matcher": str(matcher) if matcher not in (None, "") else "*",
                    "type": str(hook.get("type", "command")),
                    "source": source,
                }
                for key in ("command", "prompt", "url", "timeout", "shell", "async", "once"):
                    if key in hook:
                        item[key] = hook[key]
                extra = sorted(set(hook) - set(item) - {"type"})
                if extra:
                    item["other_keys"] = {k: hook[k] for k in extra}
                out[f"{event}[{index}]"] = item


def _servers(doc: Any, source: str, out: dict[str, dict[str, Any]]) -> None:
    table = doc.get("mcpServers", doc) if isinstance(doc, dict) else None
    if not isinstance(table, dict):
        raise PluginError(source, "has no mcpServers table")
    for name, spec in sorted(table.items()):
        if not isinstance(spec, dict):
            raise PluginError(source, f"server {name!r} is not a table")
        server: dict[str, Any] = {"source": source}
        if "command" in spec:
            server["transport"] = "stdio"
            server["command"] = spec["command"]
            server["args"] = spec.get("args", [])
        else:
            server["transport"] = "http"
            server["url"] = spec.get("url", spec.get("httpUrl"))
        for key in sorted(set(spec) - {"command", "args", "url", "httpUrl"}):
            server[key] = spec[key]
        out[str(name)] = server


def _under(paths: list[str], directory: str, suffix: str) -> list[str]:
    prefix = directory.rstrip("/") + "/" if directory else ""
    return sorted(p for p in paths if p.startswith(prefix) and p.endswith(suffix))


def _skill_names(paths: list[str], directory: str) -> list[str]:
    prefix = directory.rstrip("/") + "/"
    names = {
        p[len(prefix) :].split("/")[0]
        for p in paths
        if p.startswith(prefix) and p.endswith("/SKILL.md")
    }
    return sorted(names)


def expand(harness: str, files: list[dict[str, Any]], read: Reader) -> dict[str, Any]:
    """What the plugin contributes (the lock's `components`). `files` are the pinned entries
    (path relative to the plugin root, kind, executable, size, digest); `read(path)` returns a
    pinned file's bytes. Raises PluginError for a plugin that cannot be pinned as it is."""
    if harness not in MARKERS:
        raise PluginError("", f"{harness!r} has no plugin format agentstack knows")
    paths = [f["path"] for f in files]
    marker = MARKERS[harness]
    for entry in files:
        if entry["kind"] == "link":
            raise PluginError(
                entry["path"],
                "is a symbolic link; a plugin is rendered file by file, so links cannot be pinned",
                "replace the link with the file it points to",
            )
    if marker not in paths:
        raise PluginError(
            marker, f"is missing: this is not a {harness} plugin",
            "point path (or git + subdir) at the plugin's root directory",
        )
    manifest = _json(read, marker)
    if not isinstance(manifest, dict):
        raise PluginError(marker, "is not a JSON object")
    name = manifest.get("name")
    if not isinstance(name, str) or not PLUGIN_NAME.match(name):
        raise PluginError(
            marker, f"names the plugin {name!r}; a plugin name is lowercase letters, digits, "
            "'.', '_' and '-'",
        )
    base = "" if harness == "gemini-cli" else posixpath.dirname(posixpath.dirname(marker))
    hooks: dict[str, dict[str, Any]] = {}
    servers: dict[str, dict[str, Any]] = {}
    unmodelled = sorted(set(manifest) - _DESCRIPTIVE - _MODELLED[harness])
    # Hooks: the default file, plus what the manifest names or holds inline.
    if "hooks/hooks.json" in paths:
        _hooks(_json(read, "hooks/hooks.json"), "hooks/hooks.json", hooks)
    if "hooks" in manifest:
        if isinstance(manifest["hooks"], dict):
            _hooks(manifest["hooks"], marker, hooks)
        else:
            for ref in _refs(manifest["hooks"], f"{marker}: hooks"):
                rel = _norm(base, ref, marker)
                if rel not in paths:
                    raise PluginError(marker, f"names hooks file {ref!r}, which is not in it")
                if rel != "hooks/hooks.json":
                    _hooks(_json(read, rel), rel, hooks)
    # Servers.
    if ".mcp.json" in paths and harness != "gemini-cli":
        _servers(_json(read, ".mcp.json"), ".mcp.json", servers)
    if "mcpServers" in manifest:
        if isinstance(manifest["mcpServers"], dict):
            _servers(manifest["mcpServers"], marker, servers)
        else:
            for ref in _refs(manifest["mcpServers"], f"{marker}: mcpServers"):
                rel = _norm(base, ref, marker)
                if rel not in paths:
                    raise PluginError(marker, f"names server file {ref!r}, which is not in it")
                if rel != ".mcp.json":
                    _servers(_json(read, rel), rel, servers)
    # What the model reads: skills, agents, commands, instruction files.
    skill_dirs, agent_dirs, command_dirs = ["skills"], ["agents"], ["commands"]
    for key, dirs in (("skills", skill_dirs), ("agents", agent_dirs), ("commands", command_dirs)):
        if key in manifest and harness != "gemini-cli":
            dirs += [_norm(base, r, marker) for r in _refs(manifest[key], f"{marker}: {key}")]
    command_suffix = ".toml" if harness == "gemini-cli" else ".md"
    instructions: list[str] = []
    if harness == "gemini-cli":
        context = manifest.get("contextFileName", "GEMINI.md")
        for ref in _refs(context, f"{marker}: contextFileName"):
            rel = _norm("", ref, marker)
            if rel in paths:
                instructions.append(rel)
    components: dict[str, Any] = {
        "name": name,
        "version": str(manifest.get("version", "")),
        "description": str(manifest.get("description", "")),
        "hooks": hooks,
        "servers": servers,
        "skills": sorted({s for d in skill_dirs for s in _skill_names(paths, d)}),
        "agents": sorted({p for d in agent_dirs for p in _under(paths, d, ".md")}),
        "commands": sorted({p for d in command_dirs for p in _under(paths, d, command_suffix)}),
        "instructions": sorted(instructions),
        "executables": sorted(f["path"] for f in files if f["executable"] or
                              f["path"].startswith("bin/")),
    }
    if harness == "gemini-cli" and "excludeTools" in manifest:
        components["exclude_tools"] = manifest["excludeTools"]
    if unmodelled:
        components["unmodelled"] = {k: manifest[k] for k in unmodelled}
    return _plain(components)  # type: ignore[no-any-return]


def _plain(value: Any) -> Any:
    """`value` as data the lock (TOML) can hold: null and non-integer numbers become their JSON
    text, so nothing of a plugin's manifests is lost or reinterpreted."""
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return json.dumps(value)


def enabled(plugin: dict[str, Any], kind: str) -> bool:
    """Whether the item renders its components of `kind` (`enable` absent: all of them)."""
    chosen = plugin.get("enable")
    return chosen is None or kind in chosen


def shown(components: dict[str, Any], enable: list[str] | None) -> dict[str, Any]:
    """`components` as the consent document shows them: a kind `enable` leaves out renders
    nothing and is emptied."""
    out = dict(components)
    plugin = {"enable": enable}
    for kind in ("hooks", "servers"):
        if not enabled(plugin, kind):
            out[kind] = {}
    for kind in ("skills", "agents", "commands", "instructions"):
        if not enabled(plugin, kind):
            out[kind] = []
    return out


def hook_argv(hook: dict[str, Any]) -> list[str]:
    """A plugin hook's command as an argument vector (for the risk rules): the harness runs the
    string through a shell."""
    command = hook.get("command")
    if not isinstance(command, str):
        return [str(hook.get("type", "hook")), json.dumps(hook.get("prompt", hook.get("url")))]
    try:
        return shlex.split(command)
    except ValueError:
        return ["sh", "-c", command]


def describe_hook(hook: dict[str, Any]) -> str:
    matcher = hook.get("matcher", "*")
    on = "" if matcher == "*" else f" on {matcher}"
    what = hook.get("command", hook.get("prompt", hook.get("url", "")))
    return f"a {hook.get('event')} hook{on} that runs {what}"


# ------------------------------------------------------------------------- what is rendered

# The component files each kind owns in a plugin's tree (Claude Code and Codex layout).
_KIND_FILES = {
    "hooks": ("hooks/hooks.json",),
    "servers": (".mcp.json",),
}
_KIND_DIRS = {"skills": "skills/", "agents": "agents/", "commands": "commands/"}
_KIND_KEYS = {"hooks": "hooks", "servers": "mcpServers", "skills": "skills", "agents": "agents",
              "commands": "commands"}


def rendered_files(plugin: dict[str, Any]) -> list[dict[str, Any]]:
    """The pinned files of `plugin` (a consent document entry) that are rendered: all of them
    but the component files of kinds `enable` leaves out."""
    out = []
    for entry in plugin["files"]:
        rel = entry["path"]
        dropped = any(
            not enabled(plugin, kind) and rel in names for kind, names in _KIND_FILES.items()
        ) or any(
            not enabled(plugin, kind) and rel.startswith(prefix)
            for kind, prefix in _KIND_DIRS.items()
        )
        if not dropped:
            out.append(entry)
    return out


def rendered_manifest(plugin: dict[str, Any], data: bytes) -> bytes:
    """The plugin manifest as rendered: as pinned, unless `enable` leaves out a kind whose key it
    holds (then that key is removed)."""
    if plugin.get("enable") is None:
        return data
    doc = json.loads(data.decode("utf-8"))
    drop = [key for kind, key in _KIND_KEYS.items() if not enabled(plugin, kind) and key in doc]
    if not drop:
        return data
    for key in drop:
        del doc[key]
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")


PLUGINS_DIR = "plugins"  # under $AGENTSTACK_CACHE: the materialized marketplaces
PLUGIN_DIR = "plugin"  # the plugin's directory inside its marketplace
MARKETPLACE_FILE = ".claude-plugin/marketplace.json"


def render_key(name: str, plugin: dict[str, Any]) -> str:
    """The content address of a plugin's marketplace: blake3 over the item's name, its plugin
    name, `enable`, and every rendered file's path, bytes digest and executable bit."""
    files = [(f["path"], f["digest"], f["executable"]) for f in rendered_files(plugin)]
    value = {
        "item": name,
        "name": plugin["components"]["name"],
        "enable": plugin.get("enable"),
        "files": [list(f) for f in files],
    }
    return digest_of(value).split(":", 1)[1][:32]


def marketplace_name(key: str) -> str:
    return f"agentstack-{key[:16]}"


def claude_marketplace(name: str, plugin: dict[str, Any]) -> tuple[str, str, bytes]:
    """(directory name, marketplace name, marketplace.json bytes) of the one-plugin marketplace
    agentstack renders for the Claude Code plugin `name`."""
    key = render_key(name, plugin)
    market = marketplace_name(key)
    components = plugin["components"]
    document = {
        "name": market,
        "owner": {"name": "agentstack"},
        "metadata": {"description": f"agentstack: the trusted bytes of plugins.{name}"},
        "plugins": [
            {
                "name": components["name"],
                "source": f"./{PLUGIN_DIR}",
                "description": components.get("description", ""),
                **({"version": components["version"]} if components.get("version") else {}),
            }
        ],
    }
    return key, market, (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8")

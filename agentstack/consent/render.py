"""Rendering consent documents and diffs for a terminal.

Every string that came from a manifest, a lock or a file name is untrusted: it is passed through
`sanitize` and placed in a rich `Text` (never parsed as markup), so a manifest cannot restyle the
review, hide text with bidi controls, or send escape sequences to the terminal.

Layout: sections of items, each item a list of labelled fields. A field's value is wrapped at
spaces with a hanging indent and never broken inside a token (a command, a path, a hash): a token
wider than the terminal gets a line of its own instead. Values are shown as TOML would write them
(`true`, `"text"`, `["a", "b"]`), commands as a shell would need them quoted (`shlex.join`), and
hashes short (12 hex digits; `--json` has them in full).

To add a section, write a function `(doc) -> Section | None` and list it in `CONSENT_SECTIONS`.
"""

from __future__ import annotations

import difflib
import json
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rich._wrap import divide_line
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.segment import Segment
from rich.text import Text

from agentstack.consent.diff import Change, ConsentDiff, file_entry
from agentstack.sanitize import identifier, sanitize

_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan"}
LABEL_WIDTH = 12
MAX_DIFF_LINES = 200


class ContentSource(Protocol):
    def get(self, digest: str) -> bytes | None: ...


def t(value: Any, style: str = "") -> Text:
    """Untrusted value -> safe Text."""
    return Text(sanitize(str(value)), style=style)


def lines(*values: Any, style: str = "") -> Text:
    """Several untrusted values, one per line (the newlines are ours, so they are not escaped)."""
    return Text("\n".join(sanitize(str(v)) for v in values), style=style)


def name(value: str) -> Text:
    return Text(identifier(value), style="bold")


def short(digest: str) -> str:
    """`b3:` and the first 12 hex digits: enough to tell files apart in a review."""
    return digest[:15] if digest.startswith("b3:") else digest[:12]


def toml_value(value: Any) -> str:
    """A value as TOML writes it (JSON agrees for strings, numbers, booleans and arrays)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "(none)"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        return (
            "{ " + ", ".join(f"{_toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
            if value
            else "{}"
        )
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _toml_key(key: str) -> str:
    import re

    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)


class Wrapped:
    """`text` wrapped at spaces to the console width, continuation lines indented by `indent`;
    a token wider than the line is never broken (it overflows on a line of its own)."""

    def __init__(self, text: Text, indent: int = 0, first: Text | None = None) -> None:
        self.text = text
        self.indent = indent
        self.first = first if first is not None else Text(" " * indent)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(1, options.max_width - self.indent)
        pad = Text(" " * self.indent)
        first = True
        for line in self.text.split("\n", allow_blank=True):
            pieces = line.divide(divide_line(str(line), width, fold=False)) if line else [line]
            for piece in pieces:
                piece.rstrip()
                out = (self.first if first else pad).copy()
                out.append_text(piece)
                first = False
                yield from out.render(console)
                yield Segment.line()


class Raw:
    """Lines printed as they are, never re-wrapped (a unified diff: its columns matter)."""

    def __init__(self, text: Text) -> None:
        self.text = text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in self.text.split("\n", allow_blank=True):
            yield from line.render(console)
            yield Segment.line()


@dataclass
class Item:
    """One item of a section: a heading and labelled fields."""

    heading: Text
    fields: list[tuple[str, Text]] = field(default_factory=list)
    extra: list[Any] = field(default_factory=list)  # renderables after the fields (diffs)

    def add(self, label: str, value: Text) -> Item:
        self.fields.append((label, value))
        return self

    def renderables(self, indent: int = 2) -> list[Any]:
        out: list[Any] = [Wrapped(self.heading, indent + 2, first=Text(" " * indent))]
        for label, value in self.fields:
            first = Text(" " * (indent + 2) + f"{label:<{LABEL_WIDTH - 1}} ", style="dim")
            out.append(Wrapped(value, indent + 2 + LABEL_WIDTH, first=first))
        out.extend(self.extra)
        return out


@dataclass
class Section:
    title: str
    items: list[Item]

    def renderable(self) -> Group:
        parts: list[Any] = [Text(""), Text(self.title, style="bold underline")]
        for item in self.items:
            parts.extend(item.renderables())
        return Group(*parts)


# ------------------------------------------------------------------ field values


def _sources(table: dict[str, dict[str, str]]) -> Text:
    out = Text()
    for key, source in sorted(table.items()):
        if out:
            out.append("\n")
        out.append(sanitize(key))
        if "secret" in source:
            out.append(" ← secret:", style="magenta")
            out.append(sanitize(source["secret"]), style="magenta")
        else:
            out.append(" = ")
            out.append(sanitize(toml_value(source.get("literal", ""))))
    return out


def _file_line(entry: dict[str, Any]) -> Text:
    out = Text(sanitize(entry["path"]))
    out.append(f"  {short(entry['digest'])}", style="dim")
    out.append(f"  {entry.get('size', 0)} bytes", style="dim")
    if entry.get("executable"):
        out.append("  executable", style="red")
    return out


def _files(files: list[dict[str, Any]], roots: list[dict[str, Any]] | None = None) -> Text:
    out = Text()
    for entry in files:
        if out:
            out.append("\n")
        out.append_text(_file_line(entry))
    for root in roots or []:  # code roots (lock): whole trees the command loads code from
        if out:
            out.append("\n")
        out.append(sanitize(root["path"]) + "/")
        if "files" in root:
            out.append(f"  {len(root['files'])} files  {short(root['digest'])}", style="dim")
        else:  # a tree several commands load, pinned once (the lock's code_roots)
            out.append(f"  shared code root  {short(root['digest'])}", style="dim")
        if root.get("excluded"):
            skipped = ", ".join(sanitize(p) for p in root["excluded"])
            out.append(f"  (not pinned: {skipped})", style="yellow")
    return out


def command_line(item: dict[str, Any]) -> str:
    if isinstance(item.get("command"), list):
        argv = [str(a) for a in item["command"]]
    elif item.get("script") is not None:
        argv = [str(item["script"]), *map(str, item.get("args", []))]
    else:
        argv = [str(item.get("command", "")), *map(str, item.get("args", []))]
    return shlex.join(argv)


def server_item(key: str, server: dict[str, Any], heading: Text | None = None) -> Item:
    item = Item(heading if heading is not None else name(key))
    if server.get("transport") == "http":
        item.add("url", t(server.get("url", "")))
        if server.get("headers"):
            item.add("headers", _sources(server["headers"]))
    else:
        item.add("runs", t(command_line(server)))
        if server.get("cwd", ".") != ".":
            item.add("cwd", t(server["cwd"]))
        if server.get("env"):
            item.add("env", _sources(server["env"]))
    if server.get("files"):
        item.add("files", _files(server["files"], server.get("roots")))
    if server.get("risks"):
        item.add("risks", lines(*server["risks"], style="yellow"))
    return item


def hook_item(key: str, hook: dict[str, Any], heading: Text | None = None) -> Item:
    item = Item(heading if heading is not None else name(key))
    item.add("event", t(hook.get("event", "")))
    item.add("matcher", t(hook.get("matcher", "*")))
    item.add("runs", t(command_line(hook)))
    if hook.get("files"):
        item.add("files", _files(hook["files"], hook.get("roots")))
    return item


def skill_item(key: str, skill: dict[str, Any], heading: Text | None = None) -> Item:
    item = Item(heading if heading is not None else Text.assemble("skill ", name(key)))
    if skill.get("source") == "git":
        item.add("git", t(f"{skill['git']} @ {skill['rev']}"))
        item.add("commit", t(skill["commit"]))
        if skill.get("subdir"):
            item.add("subdir", t(skill["subdir"]))
    else:
        item.add("path", t(skill.get("path", "")))
    files = skill.get("files", [])
    count = f"{len(files)} file{'s' if len(files) != 1 else ''}"
    item.add("files", Text(f"{count}, tree {short(skill.get('digest', ''))}"))
    executables = [f for f in files if f.get("executable")]
    if executables:
        item.add("runnable", _files(executables[:20]))
    return item


# ------------------------------------------------------------------ the consent view


def _servers(doc: dict[str, Any]) -> Section | None:
    if not doc.get("servers"):
        return None
    return Section(
        "MCP servers (these run with your credentials)",
        [server_item(k, s) for k, s in sorted(doc["servers"].items())],
    )


def _hooks(doc: dict[str, Any]) -> Section | None:
    if not doc.get("hooks"):
        return None
    return Section(
        "Hooks (run by the harness)", [hook_item(k, h) for k, h in sorted(doc["hooks"].items())]
    )


def _code_roots(doc: dict[str, Any]) -> Section | None:
    """Trees several servers or hooks load, pinned once: the entries above name them."""
    shared = doc.get("code_roots")
    if not shared:
        return None
    users: dict[str, list[str]] = {}
    for section in ("servers", "hooks"):
        for key, item in sorted((doc.get(section) or {}).items()):
            for root in item.get("roots", []):
                if "files" not in root:
                    users.setdefault(root["path"], []).append(f"{section}.{key}")
    items = []
    for path, tree in sorted(shared.items()):
        item = Item(Text(sanitize(path) + "/", style="bold"))
        item.add("files", t(f"{len(tree['files'])} files  {short(tree['digest'])}"))
        loaded = users.get(path, [])
        shown = ", ".join(loaded[:5]) + (f" and {len(loaded) - 5} more" if len(loaded) > 5 else "")
        item.add("loaded by", t(f"{len(loaded)}: {shown}"))
        if tree.get("excluded"):
            item.add("not pinned", lines(*tree["excluded"], style="yellow"))
        items.append(item)
    return Section("Code roots shared by several commands", items)


def _reads(doc: dict[str, Any]) -> Section | None:
    if not doc.get("skills") and not doc.get("instructions"):
        return None
    items = [skill_item(k, s) for k, s in sorted(doc.get("skills", {}).items())]
    if doc.get("instructions"):
        items.append(
            Item(Text("instructions (in this order)", style="bold")).add(
                "files", _files(doc["instructions"])
            )
        )
    return Section("What the model reads", items)


def plugin_item(key: str, plugin: dict[str, Any], heading: Text | None = None) -> Item:
    """A plugin as what it contributes: each hook and server as what it runs, then what the
    model reads (agentstack.plugins)."""
    from agentstack.plugins import describe_hook

    components = plugin.get("components", {})
    label = Text.assemble("plugin ", name(key), f" ({plugin.get('harness', '')})")
    item = skill_item(key, plugin, heading if heading is not None else label)
    item.add("plugin", t(f"{components.get('name', '')} {components.get('version', '')}".strip()))
    if plugin.get("enable") is not None:
        item.add("enable", t(", ".join(plugin["enable"]) or "(nothing)"))
    for hook_key, hook in sorted(components.get("hooks", {}).items()):
        item.add("hook", t(f"{hook_key}: {describe_hook(hook)}", style="red"))
    for server_name, server in sorted(components.get("servers", {}).items()):
        if server.get("transport") == "http":
            runs = f"{server_name}: talks to {server.get('url')}"
        else:
            runs = f"{server_name}: runs {command_line(server)}"
        item.add("server", t(runs, style="red"))
    for kind in ("skills", "agents", "commands", "instructions"):
        if components.get(kind):
            item.add(kind, t(", ".join(components[kind])))
    if components.get("unmodelled"):
        item.add(
            "unmodelled",
            t(", ".join(sorted(components["unmodelled"])) + " (not understood by agentstack)",
              style="red"),
        )
    return item


def _plugins(doc: dict[str, Any]) -> Section | None:
    if not doc.get("plugins"):
        return None
    return Section(
        "Plugins (their hooks and servers run with your credentials)",
        [plugin_item(k, p) for k, p in sorted(doc["plugins"].items())],
    )


def _settings(doc: dict[str, Any]) -> Section | None:
    settings = doc.get("settings", {})
    permissions = settings.get("permissions", {})
    if not any(permissions.values()) and not settings.get("passthrough"):
        return None
    item = Item(Text("settings", style="bold"))
    for key in ("allow", "deny", "ask"):
        if permissions.get(key):
            item.add(key, lines(*permissions[key]))
    for harness, values in sorted(settings.get("passthrough", {}).items()):
        for key, value in sorted(values.items()):
            item.add("set", Text(f"{identifier(harness)}: ") + t(f"{key} = {toml_value(value)}"))
    return Section("Settings", [item])


def _sandbox(doc: dict[str, Any]) -> Section | None:
    sandbox = doc.get("sandbox")
    if not sandbox:
        return None
    item = Item(Text("sandbox (agentstack run)", style="bold"))
    item.add(
        "enabled",
        Text(
            toml_value(sandbox.get("enabled", True)),
            style="" if sandbox.get("enabled", True) else "bold red",
        ),
    )
    for key in ("read_dirs", "write_dirs", "read_files", "write_files", "env"):
        values = sandbox.get(key, [])
        item.fields.append((key.replace("_", " "), t(", ".join(values) or "-")))
    network = sandbox.get("network", {})
    item.add(
        "network",
        t(
            ("blocked" if network.get("block", True) else "OPEN")
            + "; hosts: "
            + (", ".join(network.get("allow_domains", [])) or "none")
            + "; localhost ports: "
            + (", ".join(map(str, network.get("localhost_ports", []))) or "none")
        ),
    )
    return Section("Sandbox policy", [item])


def _surface(doc: dict[str, Any]) -> list[Section]:
    """One section per harness: what it also loads from the repository, not declared in
    agentstack.toml (agentstack.surface), with what the harness would do with each entry."""
    from agentstack.harnesses import BY_NAME

    surface = doc.get("surface") or {}
    sections = []
    for harness in sorted({h for entry in surface.values() for h in entry["harnesses"]}):
        display = BY_NAME[harness].display if harness in BY_NAME else identifier(harness)
        items = []
        for rel, entry in sorted(surface.items()):
            if harness not in entry["harnesses"]:
                continue
            what = Text(f"{entry['role']} ({entry['kind']})  {short(entry['digest'])}")
            if entry.get("executable"):
                what.append("  executable", style="red")
            item = Item(t(rel, style="bold")).add("what", what)
            for fact in entry.get("facts", []):
                code = fact.partition(":")[0]
                style = "cyan" if code in ("model-reads", "setting") else "bold red"
                item.add("does", t(fact, style=style))
            items.append(item)
        sections.append(
            Section(
                f"Also loaded by {display} from this repository, not declared in agentstack.toml",
                items,
            )
        )
    return sections


CONSENT_SECTIONS: list[Callable[[dict[str, Any]], Section | list[Section] | None]] = [
    _servers,
    _hooks,
    _code_roots,
    _plugins,
    _reads,
    _settings,
    _sandbox,
    _surface,
]


def consent_renderable(doc: dict[str, Any], digest: str) -> Group:
    header = Text("consent digest ", style="bold")
    header.append(digest, style="green")
    header.append("\nproject ")
    header.append(identifier(doc["project"]["name"]), style="bold")
    header.append("  harnesses: " + ", ".join(identifier(h) for h in doc["project"]["harnesses"]))
    parts: list[Any] = [Wrapped(header)]
    for build in CONSENT_SECTIONS:
        built = build(doc)
        for section in built if isinstance(built, list) else [built] if built else []:
            parts.append(section.renderable())
    return Group(*parts)


# ------------------------------------------------------------------ the consent diff


def findings_renderable(diff: ConsentDiff) -> Any:
    if not diff.findings:
        return Group(Text(""), Text("No risk findings.", style="green"))
    parts: list[Any] = [Text(""), Text("Risk findings", style="bold underline")]
    for finding in diff.findings:
        first = Text("  ")
        first.append(f"{finding.severity:<7}", style=_STYLE[finding.severity])
        body = t(finding.item, style="bold")
        body.append(": ")
        body.append(sanitize(finding.message))
        parts.append(Wrapped(body, 9, first=first))
    return Group(*parts)


def _text_of(data: bytes | None) -> list[str] | None:
    if data is None or b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None


def content_diff(
    path: str,
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
    contents: ContentSource | None,
) -> Any:
    """A unified diff of one pinned file, or its size and hash when it is binary or its earlier
    bytes are not kept on this machine."""
    old_data = contents.get(old["digest"]) if contents is not None and old else None
    new_data = contents.get(new["digest"]) if contents is not None and new else None
    old_lines = [] if old is None else _text_of(old_data)
    new_lines = [] if new is None else _text_of(new_data)
    if old_lines is None or new_lines is None:

        def describe(entry: dict[str, Any] | None, data: bytes | None) -> str:
            if entry is None:
                return "(none)"
            kind = "binary" if data is not None else "not kept on this machine"
            return f"{entry.get('size', '?')} bytes {short(entry['digest'])} ({kind})"

        return Group(
            Wrapped(t(f"was {describe(old, old_data)}"), 10, first=Text("      ")),
            Wrapped(t(f"now {describe(new, new_data)}"), 10, first=Text("      ")),
        )
    body = Text()
    diff_lines = list(
        difflib.unified_diff(
            old_lines,
            new_lines,
            fromfile=f"{path} (trusted)" if old is not None else "/dev/null",
            tofile=f"{path} (now)" if new is not None else "/dev/null",
            lineterm="",
        )
    )
    if old is not None and new is not None and old.get("executable") != new.get("executable"):
        diff_lines.insert(0, f"mode: {'executable' if new.get('executable') else 'not executable'}")
    shown = diff_lines[:MAX_DIFF_LINES]
    for index, line in enumerate(shown):
        if index:
            body.append("\n")
        style = ""
        if line.startswith(("+++", "---")):
            style = "bold"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        elif line.startswith("@@"):
            style = "cyan"
        body.append("      " + sanitize(line), style=style)
    if len(diff_lines) > MAX_DIFF_LINES:
        body.append(f"\n      … {len(diff_lines) - MAX_DIFF_LINES} more lines", style="dim")
    if not shown:
        body.append("      (same text; only the size or mode changed)", style="dim")
    return Raw(body)


_MARK = {"added": ("+", "green"), "removed": ("-", "red"), "changed": ("~", "yellow")}
_ITEM_RENDERERS = {
    "servers": server_item,
    "hooks": hook_item,
    "skills": skill_item,
    "plugins": plugin_item,
}


def _heading(change: Change) -> Text:
    symbol, style = _MARK[change.kind]
    heading = Text(f"{symbol} ", style=style)
    heading.append(sanitize(change.path), style="bold")
    return heading


def _change_item(change: Change, contents: ContentSource | None) -> Item:
    heading = _heading(change)
    located = file_entry(change)
    if located is not None:
        _, path = located
        old = change.old if change.kind != "added" else None
        new = change.new if change.kind != "removed" else None
        item = Item(heading)
        item.extra.append(content_diff(path, old, new, contents))
        return item
    section, _, rest = change.path.partition(".")
    whole = section in _ITEM_RENDERERS and rest and "." not in rest
    if whole and change.kind in ("added", "removed"):
        value = change.new if change.kind == "added" else change.old
        item = _ITEM_RENDERERS[section](rest, value, heading)
        if change.kind == "added":
            for entry in value.get("files", [])[:20]:
                item.extra.append(Wrapped(Text("    ") + _file_line(entry), 6))
                item.extra.append(content_diff(entry["path"], None, entry, contents))
        return item
    item = Item(heading)
    if change.kind != "added":
        item.add("was", t(_value(change.old)))
    if change.kind != "removed":
        item.add("now", t(_value(change.new)))
    return item


def _value(value: Any) -> str:
    """A changed value: a hash short (the full one is in --json), anything else as TOML."""
    from agentstack.canonical import is_digest

    if isinstance(value, str) and is_digest(value):
        return short(value)
    return toml_value(value)


def diff_renderable(diff: ConsentDiff, contents: ContentSource | None = None) -> Group:
    """Risk findings first, then each change; a changed file as a unified diff of its lines."""
    parts: list[Any] = [findings_renderable(diff)]
    if not diff.changes:
        parts.append(Text("No changes."))
        return Group(*parts)
    parts.append(Text(""))
    parts.append(Text("Changes", style="bold underline"))
    for change in diff.changes[:500]:
        parts.extend(_change_item(change, contents).renderables())
    if len(diff.changes) > 500:
        parts.append(Text(f"  … {len(diff.changes) - 500} more changes"))
    return Group(*parts)


def outside_renderable(entries: Iterable[str]) -> Group:
    return Group(*(Wrapped(t(e), 4, first=Text("  ")) for e in entries))


class _Console(Console):
    """A console that never crops a line: a token wider than the terminal is printed whole (the
    terminal wraps it) rather than cut off at the edge."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        kwargs.setdefault("crop", False)
        super().print(*objects, **kwargs)


def console(stderr: bool = False, *, file: Any = None, width: int | None = None) -> Console:
    from agentstack.progress import stop

    stop()  # output follows: a progress bar (if any) goes away first
    # highlight=False: rich's repr highlighter must not restyle untrusted text either.
    return _Console(
        stderr=stderr, highlight=False, soft_wrap=False, file=file, width=width,
        color_system=None if file is not None else "auto",
    )

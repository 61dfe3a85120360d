"""Rendering consent documents and diffs for a terminal.

Every string that came from a manifest, a lock or a file name is untrusted: it is passed through
`sanitize` and placed in a rich `Text` (never parsed as markup), so a manifest cannot restyle the
review, hide text with bidi controls, or send escape sequences to the terminal.
"""

from __future__ import annotations

import shlex
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from agentstack.diff import ConsentDiff
from agentstack.sanitize import identifier, sanitize

_STYLE = {"high": "bold red", "medium": "yellow", "low": "cyan"}


def t(value: Any, style: str = "") -> Text:
    """Untrusted value -> safe Text."""
    return Text(sanitize(str(value)), style=style)


def lines(*values: Any, style: str = "") -> Text:
    """Several untrusted values, one per line (the newlines are ours, so they are not escaped)."""
    return Text("\n".join(sanitize(str(v)) for v in values), style=style)


def name(value: str) -> Text:
    return Text(identifier(value), style="bold")


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
            out.append(sanitize(source["literal"]))
    return out


def _risks(facts: list[str]) -> Text:
    return lines(*facts, style="yellow") if facts else Text("-")


def _files(files: list[dict[str, Any]]) -> Text:
    out = Text()
    for entry in files:
        if out:
            out.append("\n")
        out.append(sanitize(entry["path"]))
        if entry.get("executable"):
            out.append(" (executable)", style="red")
        out.append(f" {entry['digest'][3:15]}", style="dim")
    return out


def consent_renderable(doc: dict[str, Any], digest: str) -> Group:
    parts: list[Any] = []
    header = Text("consent digest ", style="bold")
    header.append(digest, style="green")
    header.append("\nproject ")
    header.append(identifier(doc["project"]["name"]), style="bold")
    header.append("  harnesses: " + ", ".join(identifier(h) for h in doc["project"]["harnesses"]))
    parts.append(header)

    if doc["servers"]:
        table = _table(
            "MCP servers (these run with your credentials)",
            "name",
            "runs",
            "env / headers",
            "pinned files",
            "risk facts",
        )
        for key, server in sorted(doc["servers"].items()):
            if server["transport"] == "stdio":
                runs = t(shlex.join([server["command"], *server["args"]]))
                if server.get("cwd", ".") != ".":
                    runs.append(f"\n(cwd {sanitize(server['cwd'])})", style="dim")
                env = _sources(server["env"])
            else:
                runs = t(server["url"])
                env = _sources(server["headers"])
            table.add_row(name(key), runs, env, _files(server["files"]), _risks(server["risks"]))
        parts.append(table)

    if doc["hooks"]:
        table = _table(
            "Hooks (run by the harness)", "name", "event", "matcher", "runs", "pinned files"
        )
        for key, hook in sorted(doc["hooks"].items()):
            argv = hook.get("command") or [hook.get("script", ""), *hook.get("args", [])]
            table.add_row(
                name(key),
                t(hook["event"]),
                t(hook["matcher"]),
                t(shlex.join(argv)),
                _files(hook["files"]),
            )
        parts.append(table)

    if doc["skills"] or doc["instructions"]:
        table = _table("What the model reads", "item", "source", "files")
        for key, skill in sorted(doc["skills"].items()):
            if skill["source"] == "git":
                source = lines(
                    f"{skill['git']} @ {skill['rev']}",
                    f"commit {skill['commit']}",
                    *([f"subdir {skill['subdir']}"] if skill.get("subdir") else []),
                )
            else:
                source = t(skill["path"])
            files = skill["files"]
            executables = [f for f in files if f["executable"]]
            summary = Text(f"{len(files)} files, tree {skill['digest'][3:15]}")
            if executables:
                summary.append("\n")
                summary.append_text(_files(executables[:20]))
            table.add_row(Text.assemble("skill ", name(key)), source, summary)
        for entry in doc["instructions"]:
            table.add_row(Text("instructions"), t(entry["path"]), Text(entry["digest"][3:15]))
        parts.append(table)

    permissions = doc["settings"]["permissions"]
    if any(permissions.values()) or doc["settings"]["passthrough"]:
        table = _table("Settings", "setting", "value", lines=False)
        for key in ("allow", "deny", "ask"):
            if permissions.get(key):
                table.add_row(Text(f"permissions.{key}"), lines(*permissions[key]))
        for harness, values in sorted(doc["settings"]["passthrough"].items()):
            for key, value in sorted(values.items()):
                table.add_row(Text(f"passthrough.{identifier(harness)}.") + t(key), t(value))
        parts.append(table)

    sandbox = doc["sandbox"]
    table = _table("Sandbox policy", "rule", "value", lines=False)
    table.add_row(
        Text("enabled"),
        Text(str(sandbox["enabled"]).lower(), style="" if sandbox["enabled"] else "bold red"),
    )
    for key in ("read_dirs", "write_dirs", "read_files", "write_files", "env"):
        table.add_row(Text(key), t(", ".join(sandbox[key]) or "-"))
    network = sandbox["network"]
    table.add_row(
        Text("network"),
        t(
            ("blocked" if network["block"] else "OPEN")
            + "; allowed hosts: "
            + (", ".join(network["allow_domains"]) or "none")
            + "; localhost ports: "
            + (", ".join(map(str, network["localhost_ports"])) or "none")
        ),
    )
    parts.append(table)
    parts += surface_tables(doc)
    return Group(*parts)


def surface_tables(doc: dict[str, Any]) -> list[Table]:
    """One table per harness: what it also loads from the repository, not declared in
    agentstack.toml (agentstack.surface), with what the harness would do with each entry."""
    from agentstack.harnesses import BY_NAME

    surface = doc.get("surface") or {}
    tables = []
    for harness in sorted({h for entry in surface.values() for h in entry["harnesses"]}):
        display = BY_NAME[harness].display if harness in BY_NAME else identifier(harness)
        table = _table(
            f"Also loaded by {display} from this repository, not declared in agentstack.toml",
            "path",
            "what",
            "what the harness does with it",
        )
        for rel, entry in sorted(surface.items()):
            if harness not in entry["harnesses"]:
                continue
            what = Text(f"{entry['role']} ({entry['kind']}) {entry['digest'][3:15]}")
            if entry.get("executable"):
                what.append(" executable", style="red")
            facts = Text()
            for fact in entry.get("facts", []):
                code = fact.partition(":")[0]
                if facts:
                    facts.append("\n")
                style = "cyan" if code in ("model-reads", "setting") else "bold red"
                facts.append(sanitize(fact), style=style)
            table.add_row(t(rel), what, facts)
        tables.append(table)
    return tables


def diff_renderable(diff: ConsentDiff) -> Group:
    parts: list[Any] = []
    if diff.findings:
        table = _table("Risk findings", "severity", "item", "finding", lines=False)
        for finding in diff.findings:
            table.add_row(
                Text(finding.severity, style=_STYLE[finding.severity]),
                t(finding.item),
                t(finding.message),
            )
        parts.append(table)
    else:
        parts.append(Text("No risk findings.", style="green"))
    if diff.changes:
        table = _table("Changes", "", "path", "was", "now", lines=False)
        mark = {"added": ("+", "green"), "removed": ("-", "red"), "changed": ("~", "yellow")}
        for change in diff.changes[:500]:
            symbol, style = mark[change.kind]
            table.add_row(
                Text(symbol, style=style),
                t(change.path),
                t(_short(change.old)) if change.kind != "added" else Text(""),
                t(_short(change.new)) if change.kind != "removed" else Text(""),
            )
        if len(diff.changes) > 500:
            table.add_row(
                Text("…"), Text(f"{len(diff.changes) - 500} more changes"), Text(""), Text("")
            )
        parts.append(table)
    else:
        parts.append(Text("No changes."))
    return Group(*parts)


def _short(value: Any) -> str:
    import json

    text = (
        value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    )
    return text if len(text) <= 200 else text[:197] + "…"


def _table(title: str, *columns: str, lines: bool = True) -> Table:
    # overflow="fold": a security review never hides the end of a command behind an ellipsis.
    table = Table(title=title, title_justify="left", show_lines=lines)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def console(stderr: bool = False) -> Console:
    # highlight=False: rich's repr highlighter must not restyle untrusted text either.
    return Console(stderr=stderr, highlight=False, soft_wrap=False)

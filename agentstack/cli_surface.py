"""`adopt` (move a project's own harness config under the manifest) and `shims install|remove`."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from agentstack.cli_base import JSON, USER, Opt, app, root_dir, use_user
from agentstack.entry import echo, print_json
from agentstack.errors import InvalidInput, Refused

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any

shims_app = app.group(
    "shims",
    "Launchers for the harness binaries (claude, codex, gemini, opencode, copilot, …) ahead "
    "on PATH that check the harness surface first.",
)

_SECRET_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_NAME = re.compile(r"[^a-z0-9._-]+")


# ------------------------------------------------------------------------------- shims


def _shim_dir(directory: Path | None) -> Path:
    from agentstack import layout
    from agentstack.paths import agentstack_home

    return (directory or Path(layout.shims_dir(str(agentstack_home())))).expanduser().resolve()


DIR = Opt(
    ("--dir",), "directory", "Where to put the launchers (default: $AGENTSTACK_HOME/shims).",
    type=Path,
)


GIT_HOOKS = Opt(
    ("--git-hooks",),
    "git_hooks",
    "Also install post-checkout/post-merge/post-rewrite hooks in this project's git "
    "repository that re-check the surface and withdraw harness trust on a difference.",
    kind="flag",
)


@shims_app.command(DIR, GIT_HOOKS, JSON, name="install")
def shims_install(
    directory: Path | None = None, git_hooks: bool = False, as_json: bool = False
) -> None:
    """Write a launcher for each harness binary agentstack renders for (`claude`, `codex`,
    `gemini`, `opencode`, `copilot`, …); put their directory first on PATH to use them."""
    import shlex

    hooks: list[str] = []
    if git_hooks:
        from agentstack import githooks

        hooks = [str(p) for p in githooks.install(root_dir().resolve())]
    from agentstack import harnesses
    from agentstack.fsutil import write_atomic
    from agentstack.shim import MARKER

    target = _shim_dir(directory)
    target.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    for harness in harnesses.ALL:
        if not harness.has_adapter:
            continue
        command = shlex.join(
            [sys.executable, "-I", "-m", "agentstack.shim", str(target), harness.binary]
        )
        text = (
            f"#!/bin/sh\n{MARKER} for {harness.display}: checks the project's harness surface "
            f"against the trusted digest, then runs the real {harness.binary}.\n"
            f'exec {command} "$@"\n'
        )
        path = target / harness.binary
        if path.exists() and MARKER.encode() not in path.read_bytes()[:512]:
            raise Refused(f"{path} exists and is not an agentstack shim; nothing was written")
        write_atomic(path, text.encode(), 0o755)
        written.append(str(path))
    if as_json:
        print_json({"dir": str(target), "shims": written, "git_hooks": hooks})
        return
    for shown in [*written, *hooks]:
        echo(f"wrote {shown}")
    echo(f'put the shims first on PATH, e.g. in your shell profile: export PATH="{target}:$PATH"')


@shims_app.command(DIR, GIT_HOOKS, JSON, name="remove")
def shims_remove(
    directory: Path | None = None, git_hooks: bool = False, as_json: bool = False
) -> None:
    """Remove the launchers `shims install` wrote (nothing else); with --git-hooks, also this
    project's git hooks (chained hooks are put back)."""
    from agentstack import harnesses
    from agentstack.shim import MARKER

    target = _shim_dir(directory)
    removed = []
    if git_hooks:
        from agentstack import githooks

        removed += [str(p) for p in githooks.remove(root_dir().resolve())]
    for harness in harnesses.ALL:
        path = target / harness.binary
        try:
            if MARKER.encode() in path.read_bytes()[:512]:
                path.unlink()
                removed.append(str(path))
        except FileNotFoundError:
            continue
    if as_json:
        print_json({"dir": str(target), "removed": removed})
    else:
        echo("\n".join(f"removed {p}" for p in removed) or "no shims to remove")


# ------------------------------------------------------------------------------- adopt


def _value(value: Any, notes: list[str]) -> str:
    """A native config value as a manifest value: `${VAR}` becomes a secret reference."""
    text = str(value)
    match = _SECRET_REF.match(text)
    if match:
        notes.append(f"store it once with 'agentstack secret set {match.group(1)}'")
        return f"secret:{match.group(1)}"
    return text


def _server(spec: Any, notes: list[str]) -> dict[str, Any] | None:
    if not isinstance(spec, dict):
        return None
    url = spec.get("url") or spec.get("httpUrl")
    if isinstance(url, str):
        out: dict[str, Any] = {"url": url}
        headers = spec.get("headers") or spec.get("http_headers") or {}
        if headers:
            out["headers"] = {str(k): _value(v, notes) for k, v in headers.items()}
        return out
    command = spec.get("command")
    if not isinstance(command, str) or not command:
        return None
    out = {"command": command}
    args = spec.get("args") or []
    if args:
        out["args"] = [str(a) for a in args]
    env = dict(spec.get("env") or {})
    for name in spec.get("env_vars") or []:
        env[str(name)] = "${" + str(name) + "}"
    if env:
        out["env"] = {str(k): _value(v, notes) for k, v in env.items()}
    return out


def _hooks(doc: Any) -> list[tuple[str, str | None, str]]:
    """(event, matcher, command) of each command hook in a Claude/Codex hooks table."""
    found = []
    table = doc.get("hooks") if isinstance(doc, dict) else None
    for event, groups in (table or {}).items():
        for group in groups if isinstance(groups, list) else []:
            if not isinstance(group, dict):
                continue
            for hook in group.get("hooks") or []:
                if isinstance(hook, dict) and isinstance(hook.get("command"), str):
                    matcher = group.get("matcher")
                    found.append(
                        (str(event), matcher if isinstance(matcher, str) else None, hook["command"])
                    )
    return found


def _name(text: str, taken: set[str]) -> str:
    base = _NAME.sub("-", text.lower()).strip("-._") or "adopted"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    taken.add(name)
    return name


def plan_adoption(root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """What `adopt` would move into agentstack.toml (each with its source), and what it leaves
    for the user (with why). Reads only what is on the surface and not rendered by agentstack."""
    import json
    import tomllib

    from agentstack.manifest import load_manifest
    from agentstack.surface import _read_ledger, foreign_settings, scan

    manifest = load_manifest(root)
    surface = scan(root, list(manifest.project.harnesses))
    ledger = _read_ledger(root.resolve())
    taken = set(manifest.servers) | set(manifest.hooks) | set(manifest.plugins)
    items: list[dict[str, Any]] = []
    left: list[str] = []
    for entry in surface.values():
        rel = entry["path"]
        notes: list[str] = []
        if "unparseable" in " ".join(entry["facts"]) or "unreadable" in " ".join(entry["facts"]):
            left.append(f"{rel}: cannot be read or parsed; fix it first")
            continue
        data = (root / rel).read_bytes()
        if entry["kind"] != "keys":
            if entry["role"] in ("skills", "instructions", "agents", "commands", "rules"):
                left.append(
                    f"{rel}: {entry['role']} are read by the model; declare them with "
                    "'agentstack add skill' / 'add instructions' after moving them "
                    "outside the harness's directories"
                )
            else:
                left.append(
                    f"{rel}: {entry['role']} ({entry['kind']}) is not something adopt "
                    "can express in agentstack.toml"
                )
            continue
        doc = json.loads(data) if rel.endswith(".json") else tomllib.loads(data.decode())
        doc = foreign_settings(root.resolve(), rel, doc, ledger)
        for key in ("mcpServers", "mcp_servers"):
            for name, spec in sorted((doc.get(key) or {}).items()):
                server = _server(spec, notes)
                if server is None:
                    left.append(f"{rel}: {key}.{name} has neither a command nor a url")
                    continue
                items.append(
                    {
                        "kind": "servers",
                        "name": _name(name, taken),
                        "values": server,
                        "source": rel,
                        "key": [key, name],
                        "notes": list(notes),
                    }
                )
        for event, matcher, command in _hooks(doc):
            values: dict[str, Any] = {"event": event, "command": ["sh", "-c", command]}
            if matcher and matcher != "*":
                values["matcher"] = matcher
            items.append(
                {
                    "kind": "hooks",
                    "name": _name(f"{event}-{len(items)}", taken),
                    "values": values,
                    "source": rel,
                    "key": ["hooks", event],
                    "notes": [],
                }
            )
        from agentstack import plugin_adopt

        found, skipped = plugin_adopt.plan(root, rel, doc, lambda n: _name(n, taken))
        items += found
        left += skipped
        handled = {"mcpServers", "mcp_servers", "hooks"} | ({"enabledPlugins"} if found else set())
        rest = sorted(set(doc) - handled)
        if rest:
            left.append(f"{rel}: {', '.join(rest)} stay where they are (reviewed as foreign)")
    return items, left


def plan_user_adoption(root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """`adopt --user`: the servers in the user-level configs that the user-level setup does not
    declare (foreign), to move into $AGENTSTACK_HOME/agentstack.toml."""
    import json
    import tomllib

    from agentstack.manifest import load_manifest

    manifest = load_manifest(root)
    taken = set(manifest.servers)
    declared = set(manifest.servers)
    home = Path.home()
    codex = Path(os.environ["CODEX_HOME"]) if os.environ.get("CODEX_HOME") else home / ".codex"
    sources = {"claude-code": (home / ".claude.json", "mcpServers"),
               "codex": (codex / "config.toml", "mcp_servers")}
    items: list[dict[str, Any]] = []
    left: list[str] = []
    for harness in manifest.project.harnesses:
        if harness not in sources:
            continue
        path, key = sources[harness]
        try:
            data = path.read_bytes()
            doc = json.loads(data) if path.suffix == ".json" else tomllib.loads(data.decode())
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as exc:
            left.append(f"{path}: cannot be read or parsed ({exc}); fix it first")
            continue
        for name, spec in sorted((doc.get(key) or {}).items()):
            if name in declared:
                continue  # rendered from the user-level setup
            notes: list[str] = []
            server = _server(spec, notes)
            if server is None:
                left.append(f"{path}: {key}.{name} has neither a command nor a url")
                continue
            items.append({"kind": "servers", "name": _name(name, taken), "values": server,
                          "source": str(path), "key": [key, name], "notes": notes})
    return items, left


def _remove_from_source(root: Path, items: list[dict[str, Any]]) -> None:
    """Take adopted entries out of the native files (apply renders them back from the manifest)."""
    import json

    import tomlkit

    from agentstack.fsutil import write_atomic

    by_file: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        by_file.setdefault(item["source"], []).append(item)
    for rel, adopted in by_file.items():
        path = root / rel
        text = path.read_text(encoding="utf-8")
        doc: Any = json.loads(text) if rel.endswith(".json") else tomlkit.parse(text)
        for item in adopted:
            container, name = item["key"]
            table = doc.get(container)
            if table is not None and name in table:
                del table[name]
                if not table:
                    del doc[container]
        data = (json.dumps(doc, indent=2) + "\n") if rel.endswith(".json") else tomlkit.dumps(doc)
        mode = path.stat().st_mode & 0o777
        write_atomic(path, data.encode("utf-8"), mode)


@app.command(
    Opt(("--write",), "write", "Edit agentstack.toml and the native files.", kind="flag"),
    JSON,
    USER,
)
def adopt(write: bool = False, as_json: bool = False, user: bool = False) -> None:
    """Move the servers and hooks already in the project's native configs into agentstack.toml.

    Dry run by default; with --write, agentstack.toml is edited (comments kept) and the adopted
    entries are taken out of the native files, so nothing is lost and nothing is doubled: review
    them with 'agentstack lock' and 'agentstack trust', and 'apply --write' renders them back."""
    from agentstack.edit import ManifestEditor

    use_user(user)
    root = root_dir()
    items, left = plan_user_adoption(root) if user else plan_adoption(root)
    if write and items:
        editor = ManifestEditor(root)
        for item in items:
            try:
                editor.add_item(item["kind"], item["name"], item["values"], replace=False)
            except InvalidInput as exc:
                raise InvalidInput(
                    f"cannot adopt {item['source']} {'.'.join(item['key'])}: {exc.message}",
                    hint="fix it in the native file, or declare it by hand",
                ) from None
        editor.save()
        _remove_from_source(root, items)
    report = {"written": write and bool(items), "adopted": items, "left": left}
    if as_json:
        print_json(report)
        return
    for item in items:
        echo(
            f"{'adopted' if write else 'would adopt'} {item['source']} "
            f"{'.'.join(item['key'])} as {item['kind']}.{item['name']}"
        )
        for note in item["notes"]:
            echo(f"  note: {note}")
    for line in left:
        echo(f"left as is: {line}")
    if not items:
        echo("nothing to adopt")
    elif write:
        u = " --user" if user else ""
        echo(f"next: 'agentstack lock{u}', 'agentstack trust{u}', 'agentstack apply{u} --write'")
    else:
        echo("dry run: nothing was written; 'agentstack adopt"
             + (" --user" if user else "") + " --write' does it")

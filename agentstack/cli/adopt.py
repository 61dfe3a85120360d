"""`adopt`: move the servers and hooks already in a project's (or the user's) native harness
configs into agentstack.toml."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from agentstack.cli._app import Command, commands
from agentstack.cli._common import Json, User, root_dir, use_user
from agentstack.errors import InvalidInput
from agentstack.output import echo, print_json

app = commands()

_SECRET_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_NAME = re.compile(r"[^a-z0-9._-]+")

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

    from agentstack.manifest.load import load_manifest
    from agentstack.surface.scan import _read_ledger, foreign_settings, scan

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

    from agentstack.manifest.load import load_manifest

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
    items.extend(_user_skills(root, manifest, left))
    return items, left


def _user_skills(root: Path, manifest: Any, left: list[str]) -> list[dict[str, Any]]:
    """The skills in the harnesses' user-level skill directories that the user-level setup does
    not declare: each moved to $AGENTSTACK_HOME/skills/NAME (and declared with that path), from
    where `apply --user --write` renders it back."""
    from agentstack.apply.user import CONTEXT_HARNESSES, skill_dirs

    items: list[dict[str, Any]] = []
    seen: set[str] = set()
    for harness in manifest.project.harnesses:
        if harness not in CONTEXT_HARNESSES:
            continue
        base = skill_dirs(Path.home(), harness)
        try:
            found = sorted(p for p in base.iterdir() if p.is_dir() and not p.is_symlink())
        except OSError:
            continue
        for source in found:
            name = source.name
            if name in manifest.skills:
                continue  # rendered from the user-level setup
            if name in seen or (root / "skills" / name).exists():
                left.append(f"{source}: a skill named {name!r} is adopted already, or "
                            f"{root / 'skills' / name} exists; move it by hand")
                continue
            if not (source / "SKILL.md").is_file():
                left.append(f"{source}: no SKILL.md, not a skill")
                continue
            seen.add(name)
            items.append({"kind": "skills", "name": name, "values": {"path": f"skills/{name}"},
                          "source": str(source), "key": [str(source.parent.name), name],
                          "notes": []})
    return items


def _remove_from_source(root: Path, items: list[dict[str, Any]]) -> None:
    """Take adopted entries out of the native files (apply renders them back from the manifest)."""
    import json
    import shutil

    import tomlkit

    from agentstack.fsutil import write_atomic

    by_file: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        if item["kind"] == "skills":  # a user-level skill directory: moved into the setup
            (root / "skills").mkdir(mode=0o700, exist_ok=True)
            shutil.move(item["source"], root / item["values"]["path"])
            continue
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


@app.command(cls=Command)
def adopt(
    write: Annotated[bool, typer.Option(
        "--write", help="Edit agentstack.toml and the native files.")] = False,
    as_json: Json = False,
    user: User = False,
) -> None:
    """Move the servers and hooks already in the project's native configs into agentstack.toml.

    Dry run by default; with --write, agentstack.toml is edited (comments kept) and the adopted
    entries are taken out of the native files, so nothing is lost and nothing is doubled: review
    them with 'agentstack lock' and 'agentstack trust', and 'apply --write' renders them back."""
    from agentstack.manifest.edit import ManifestEditor

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

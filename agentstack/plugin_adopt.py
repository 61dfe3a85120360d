"""`adopt` for plugins: the Claude Code plugins a project's settings enable (`enabledPlugins`,
with their marketplace from `extraKnownMarketplaces` or the user's known marketplaces), as
`[plugins.NAME]` items pinned at what is installed now.

- A plugin of a `directory` marketplace inside the project becomes `path = "<its directory>"`.
- A plugin of a `git`/`github` marketplace becomes `git` + `rev` + `subdir`: `rev` is the commit
  Claude Code installed (`gitCommitSha` in `~/.claude/plugins/installed_plugins.json`), else the
  commit of its marketplace clone (`~/.claude/plugins/marketplaces/<name>`, read from git's files
  without running git), else the marketplace's `ref` (then `lock` pins the commit it names).
- Anything else (a directory outside the project, an unknown source) is left as is, with why.

Nothing here runs git or any program: files are read as data.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _claude_dir() -> Path:
    explicit = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(explicit) if explicit else Path.home() / ".claude"


def _clone_commit(clone: Path) -> str | None:
    """HEAD's commit of a clone, from `.git/HEAD` and the refs (loose or packed)."""
    git_dir = clone / ".git"
    try:
        head = (git_dir / "HEAD").read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if _COMMIT.match(head):
        return head
    if not head.startswith("ref: "):
        return None
    ref = head[5:].strip()
    try:
        loose = (git_dir / ref).read_text(encoding="ascii").strip()
        if _COMMIT.match(loose):
            return loose
    except (OSError, UnicodeDecodeError):
        pass
    try:
        for line in (git_dir / "packed-refs").read_text(encoding="ascii").splitlines():
            sha, _, name = line.partition(" ")
            if name == ref and _COMMIT.match(sha):
                return sha
    except (OSError, UnicodeDecodeError):
        pass
    return None


def _git_url(source: dict[str, Any]) -> str | None:
    kind = source.get("source")
    if kind == "github" and isinstance(source.get("repo"), str):
        return f"https://github.com/{source['repo']}.git"
    if kind in ("git", "url") and isinstance(source.get("url"), str):
        return str(source["url"])
    return None


def _installed_commit(plugin_id: str) -> str | None:
    installed = _read_json(_claude_dir() / "plugins" / "installed_plugins.json")
    entries = ((installed or {}).get("plugins") or {}).get(plugin_id) or []
    for entry in entries if isinstance(entries, list) else []:
        sha = entry.get("gitCommitSha") if isinstance(entry, dict) else None
        if isinstance(sha, str) and _COMMIT.match(sha):
            return sha
    return None


def plan(
    root: Path, rel: str, doc: dict[str, Any], name_of: Callable[[str], str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The `[plugins.*]` items for the plugins the settings file `rel` (parsed: `doc`) enables,
    and what is left as is (with why); `name_of` gives an item name not taken yet."""
    items: list[dict[str, Any]] = []
    left: list[str] = []
    enabled = doc.get("enabledPlugins")
    if not isinstance(enabled, dict):
        return items, left
    markets = doc.get("extraKnownMarketplaces")
    markets = markets if isinstance(markets, dict) else {}
    known = _read_json(_claude_dir() / "plugins" / "known_marketplaces.json")
    known = known if isinstance(known, dict) else {}
    real_root = root.resolve()
    for plugin_id, on in sorted(enabled.items()):
        if on is not True:
            continue
        name, _, market = str(plugin_id).partition("@")
        where = f"{rel}: enabledPlugins.{plugin_id}"
        entry = markets.get(market) or known.get(market)
        source = entry.get("source") if isinstance(entry, dict) else None
        if not isinstance(source, dict):
            left.append(f"{where}: its marketplace {market!r} is not known here")
            continue
        if source.get("source") == "directory":
            base = Path(str(source.get("path", "")))
            base = base if base.is_absolute() else real_root / base
            listing = _read_json(base / ".claude-plugin" / "marketplace.json")
        else:
            clone = _claude_dir() / "plugins" / "marketplaces" / market
            listing = _read_json(clone / ".claude-plugin" / "marketplace.json")
        plugins = (listing or {}).get("plugins") if isinstance(listing, dict) else None
        spec = next(
            (p for p in plugins or [] if isinstance(p, dict) and p.get("name") == name), None
        )
        if spec is None:
            left.append(f"{where}: not found in marketplace {market!r} on this machine")
            continue
        plugin_source = spec.get("source")
        values: dict[str, Any] = {"harness": "claude-code"}
        if isinstance(plugin_source, str):  # a directory of the marketplace
            sub = posixpath.normpath(plugin_source.removeprefix("./"))
            if sub.startswith("..") or posixpath.isabs(sub):
                left.append(f"{where}: its source {plugin_source!r} leaves its marketplace")
                continue
            if source.get("source") == "directory":
                target = (base / sub).resolve()
                if target != real_root and real_root not in target.parents:
                    left.append(f"{where}: its directory {target} is outside the project; "
                                "declare it from its git repository instead")
                    continue
                values["path"] = target.relative_to(real_root).as_posix()
            else:
                url = _git_url(source)
                if url is None:
                    left.append(f"{where}: marketplace {market!r} has a source adopt cannot pin")
                    continue
                rev = _installed_commit(str(plugin_id)) or _clone_commit(clone)
                values.update(git=url, rev=rev or str(source.get("ref") or "main"))
                if sub != ".":
                    values["subdir"] = sub
        elif isinstance(plugin_source, dict) and _git_url(plugin_source) is not None:
            rev = _installed_commit(str(plugin_id))
            values.update(git=_git_url(plugin_source),
                          rev=rev or str(plugin_source.get("ref") or "main"))
            if isinstance(plugin_source.get("path"), str):
                values["subdir"] = plugin_source["path"]
        else:
            left.append(f"{where}: its source {plugin_source!r} is not something adopt can pin")
            continue
        items.append({
            "kind": "plugins",
            "name": name_of(name),
            "values": values,
            "source": rel,
            "key": ["enabledPlugins", str(plugin_id)],
            "notes": [] if "path" in values or _COMMIT.match(str(values.get("rev"))) else
            [f"pinned by 'agentstack lock' at the commit {values['rev']!r} names now"],
        })
    return items, left

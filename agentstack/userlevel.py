"""The user-level setup: `$AGENTSTACK_HOME/agentstack.toml` (+ its lock), the servers a person uses
in every directory, under the same consent as a project's.

It is a project whose root is `$AGENTSTACK_HOME` itself: the same manifest, lock, consent document
and digest, its own trust record (the trust log keys it by that path), and its own guard snapshot.
Only what it renders differs: not project files, but the harnesses' user-level configs, and there
only the keys agentstack owns (every other key the user has stays):

| harness | file | owned keys |
|---|---|---|
| claude-code | `~/.claude.json` | `mcpServers.NAME` (the container is watched: an entry added by hand is foreign) |
| claude-code | `~/.claude/settings.json` | `hooks.PreToolUse`, `hooks.UserPromptSubmit`: the user-level guard |
| codex | `$CODEX_HOME/config.toml` | `mcp_servers.NAME` (watched), the user-level guard and its trusted hashes |

The guard (`agentstack._guard`) decides a tool of a user-level server by the user setup's own
trust and drift, in any directory; inside a project, a project server shadows a user-level
server of the same name (docs/user-level.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentstack import harnesses as _harnesses
from agentstack.errors import InvalidInput

# The harnesses whose descriptions say the user-level setup renders for them (each has its
# rendering below).
HARNESSES = tuple(h.name for h in _harnesses.ALL if h.user_level)
# What a user-level setup may declare, for now: servers (rendered), and the settings/sandbox
# tables every manifest has. Anything else is refused by `apply --user`, never half-rendered.
_RENDERED_KINDS = ("servers",)
_UNRENDERED_KINDS = ("skills", "hooks", "instructions", "plugins", "agents", "commands")


def user_root() -> Path:
    """The user-level setup's root: $AGENTSTACK_HOME, resolved (created 0700 when missing)."""
    from agentstack.paths import agentstack_home, ensure_private_dir

    return ensure_private_dir(agentstack_home()).resolve()


def require_manifest() -> Path:
    root = user_root()
    if not (root / "agentstack.toml").is_file():
        raise InvalidInput(
            f"no user-level setup: {root / 'agentstack.toml'} does not exist",
            hint=f"write one ('agentstack --project {root} init', then 'agentstack add server "
            "… --user'), see docs/user-level.md",
        )
    return root


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
            + " and ".join(HARNESSES) + " only",
            hint="set [project] harnesses in $AGENTSTACK_HOME/agentstack.toml to those",
        )
    left = unrendered(document)
    if left:
        raise InvalidInput(
            "the user-level setup declares what 'apply --user' does not render yet: "
            + ", ".join(left),
            hint="user-level setups render servers; declare the rest per project",
        )


def render_user(root: Path, consent: dict[str, Any], digest: str,
                harnesses: list[str] | None = None) -> list[Any]:
    """The owned keys of the user-level configs (see the module docstring)."""
    from agentstack_adapters import OwnedKeys
    from agentstack_adapters.claude_code import _server as claude_server
    from agentstack_adapters.codex import _server as codex_server
    from agentstack_adapters.codex import codex_home, hook_state_key, hook_trusted_hash
    from agentstack_adapters.common import guard_groups

    from agentstack.apply.engine import _context

    check_renderable(consent)
    context = _context(root, consent, digest)
    servers = consent["servers"]
    targets = harnesses or list(consent["project"]["harnesses"])
    ops: list[Any] = []
    if "claude-code" in targets:
        ops.append(OwnedKeys(
            path=str(context.user_home / ".claude.json"), format="json",
            keys={("mcpServers", n): claude_server(context, s) for n, s in sorted(servers.items())},
            user_level=True, guarded=(("mcpServers",),),
        ))
        groups = guard_groups(context, "claude-code", user_level=True,
                              extra={"onFailure": "block"})
        ops.append(OwnedKeys(
            path=str(context.user_home / ".claude" / "settings.json"), format="json",
            keys={("hooks", event): value for event, value in groups.items()},
            user_level=True, keep_on_revoke=True, guarded=(("disableAllHooks",),),
        ))
    if "codex" in targets:
        config = codex_home(context) / "config.toml"
        ops.append(OwnedKeys(
            path=str(config), format="toml",
            keys={("mcp_servers", n): _codex_user_server(codex_server(context, s), s)
                  for n, s in sorted(servers.items())},
            user_level=True, guarded=(("mcp_servers",),),
        ))
        guard: dict[tuple[str, ...], Any] = {}
        for event, event_groups in guard_groups(context, "codex", user_level=True).items():
            guard[("hooks", event)] = event_groups
            guard[("hooks", "state", hook_state_key(config, event, 0, 0), "trusted_hash")] = (
                hook_trusted_hash(event, event_groups[0])
            )
        ops.append(OwnedKeys(path=str(config), format="toml", keys=guard, user_level=True,
                             keep_on_revoke=True))
    return ops


def _codex_user_server(rendered: dict[str, Any], server: dict[str, Any]) -> dict[str, Any]:
    """A user-level server without a `cwd` of its own starts where Codex runs, as in Claude
    Code: its root, `$AGENTSTACK_HOME`, is closed to every server's sandbox."""
    if server.get("cwd", ".") == ".":
        rendered = {k: v for k, v in rendered.items() if k != "cwd"}
    return rendered


# ------------------------------------------------------------------ composition (`show`)


def composed(project: dict[str, Any] | None, user: dict[str, Any] | None) -> dict[str, Any]:
    """How a project and the user-level setup compose, item by item: every server of either, with
    where it comes from; a project item shadows a user-level item of the same name."""
    out: dict[str, Any] = {}
    for kind in ("servers",):
        rows = []
        names = sorted(set((project or {}).get(kind, {})) | set((user or {}).get(kind, {})))
        for name in names:
            in_project = name in (project or {}).get(kind, {})
            in_user = name in (user or {}).get(kind, {})
            rows.append({
                "name": f"{kind}.{name}",
                "from": "project" if in_project else "user",
                "shadows_user": in_project and in_user,
            })
        out[kind] = rows
    return out


def user_document() -> tuple[dict[str, Any], str] | None:
    """The user-level setup's consent document and digest (None when there is none)."""
    from agentstack import layout

    root = Path(layout.home())
    if not (root / "agentstack.toml").is_file():
        return None
    from agentstack.consent.document import current

    _, _, document, digest = current(root.resolve())
    return document, digest


def foreign(root: Path, document: dict[str, Any], digest: str) -> list[str]:
    """Entries of the user-level configs' watched containers that the user-level setup does not
    render (servers added by hand): shown as foreign in the review; while they are there the
    guard refuses the user-level servers' tools ('agentstack adopt --user' moves them in)."""
    import json
    import tomllib

    out: list[str] = []
    for op in render_user(root, document, digest):
        for container in op.guarded:
            try:
                data = Path(op.path).read_bytes()
                doc = json.loads(data) if op.format == "json" else tomllib.loads(data.decode())
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                out.append(f"{op.path}: cannot be read ({exc})")
                continue
            value: Any = doc
            for part in container:
                value = value.get(part) if isinstance(value, dict) else None
            if value is None:
                continue
            rendered = {key[len(container)] for key in op.keys if key[: len(container)] == container
                        and len(key) > len(container)}
            if isinstance(value, dict):
                out.extend(f"{op.path}: {'.'.join(container)}.{name}" for name in sorted(value)
                           if name not in rendered)
            elif not rendered:
                out.append(f"{op.path}: {'.'.join(container)}")
    return out


def doctor_check() -> Any:
    """`doctor`'s row: the user-level setup, its digest and trust state (or that there is none)."""
    from agentstack import layout
    from agentstack.errors import AgentstackError
    from agentstack.sandbox.doctor import Check
    from agentstack.trust.review import TrustStore

    root = Path(layout.home())
    manifest = root / "agentstack.toml"
    if not manifest.is_file():
        return Check("user-level", "ok", f"no user-level setup ({manifest} does not exist)",
                     {"user_level": None})
    try:
        found = user_document()
    except AgentstackError as exc:
        return Check("user-level", "warn", f"{manifest}: {exc.message}", {"user_level": None})
    assert found is not None
    document, digest = found
    trust = TrustStore(explicit=[]).state(root.resolve(), digest).state
    servers = sorted(document.get("servers", {}))
    return Check("user-level", "ok" if trust == "trusted" else "warn",
                 f"{manifest}: {digest}, {trust}; servers: {', '.join(servers) or 'none'}",
                 {"user_level": {"digest": digest, "trust": trust, "servers": servers}})

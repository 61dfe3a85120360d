"""The user-level setup: `$AGENTSTACK_HOME/agentstack.toml` (+ its lock), the servers, skills,
hooks and instructions a person uses in every directory, under the same consent as a project's.

It is a project whose root is `$AGENTSTACK_HOME` itself: the same manifest, lock, consent document
and digest, its own trust record (the trust log keys it by that path), and its own guard snapshot.
Only what it renders differs: not project files, but the harnesses' user-level configs, and there
only what agentstack owns (`agentstack.apply.user`, below the engine, renders it; this module is
the command side: its root, `show`'s composition, the foreign entries of the review, `doctor`).

The guard (`agentstack._guard`) decides a tool of a user-level server by the user setup's own
trust and drift, in any directory; inside a project, a project server shadows a user-level
server of the same name; while its skills, hooks or instructions drifted, every call is denied
(docs/user-level.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentstack.apply import user as _user
from agentstack.errors import InvalidInput

# The rendering (below apply's engine, which calls it) is agentstack.apply.user.
HARNESSES = _user.HARNESSES
check_renderable = _user.check_renderable
unrendered = _user.unrendered


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


# ------------------------------------------------------------------ composition (`show`)


def composed(project: dict[str, Any] | None, user: dict[str, Any] | None) -> dict[str, Any]:
    """How a project and the user-level setup compose, item by item: every server, skill and hook
    of either (and the user-level instructions), with where it comes from; a project item shadows
    a user-level item of the same name (`shadows_user`)."""
    out: dict[str, Any] = {}
    for kind in ("servers", "skills", "hooks"):
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
    out["instructions"] = [{"name": "instructions", "from": "user", "shadows_user": False}] if (
        (user or {}).get("instructions")) else []
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

    from agentstack_adapters import OwnedKeys

    from agentstack.apply.engine import render_operations

    out: list[str] = []
    for op in render_operations(root, document, digest):
        if not isinstance(op, OwnedKeys):
            continue
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


def foreign_skills(document: dict[str, Any]) -> list[str]:
    """The skills in the harnesses' user-level skill directories that the user-level setup does
    not render: the person's own (they stay, and load as before); listed in the review, and
    'agentstack adopt --user' moves them in."""
    from agentstack.apply.user import CONTEXT_HARNESSES, skill_dirs

    out: list[str] = []
    home = Path.home()
    seen: set[Path] = set()
    for harness in document["project"]["harnesses"]:
        if harness not in CONTEXT_HARNESSES:
            continue  # servers only there
        base = skill_dirs(home, harness)
        if base in seen:
            continue
        seen.add(base)
        try:
            names = sorted(p.name for p in base.iterdir() if p.is_dir())
        except OSError:
            continue
        out.extend(f"{base / name}" for name in names if name not in document["skills"])
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

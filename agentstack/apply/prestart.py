"""Before a harness starts in a project: refuse unless the surface is what the trusted digest
covers, and withdraw the harness-side trust apply wrote when it is not (the harness then shows its
own prompt, or skips the project's config, instead of loading what nobody reviewed).

Called by `run`, the shims and the git hooks (`python -I -m agentstack.githooks`).
"""

from __future__ import annotations

from pathlib import Path

from agentstack.surface.watch import drift


def check_before_start(root: Path) -> None:
    """Refuse (exit 1) unless the project's surface is what the trusted digest covers. The caller
    has already checked that the current digest (over a fresh lock, which re-scans the surface) is
    trusted; this adds the rendered files and the guard's watch list."""
    from agentstack.errors import Refused

    changed = drift(root)
    if changed:
        withdraw_harness_trust(root)
        raise Refused(
            "the harness surface changed since it was trusted: "
            + ", ".join(changed[:8])
            + (f" and {len(changed) - 8} more" if len(changed) > 8 else ""),
            hint="run 'agentstack status' to see what changed, then 'agentstack lock', "
            "'agentstack trust' and 'agentstack apply --write'",
        )


def withdraw_harness_trust(root: Path) -> list[Path]:
    """Remove the harness-side trust entries agentstack wrote for this project (Claude's
    workspace trust, Codex's trust_level and hook hashes): the harness then shows its own trust
    prompt, or skips the project's config, instead of loading a surface nobody reviewed."""
    from agentstack.apply.engine import remove_user_level
    from agentstack.errors import AgentstackError

    try:
        return remove_user_level(root)
    except AgentstackError:
        return []

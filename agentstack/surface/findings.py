"""The review's findings over the harness surface: what is new or changed in the lock's `surface`
section since the trusted one, rated by the facts `scan` recorded.

Standard library only (with `scan`'s codes): the consent diff imports it on the `digest` path.
"""

from __future__ import annotations

from typing import Any

from agentstack import harnesses as H
from agentstack.surface.scan import HIGH_CODES

_MESSAGES = {
    H.RUNS: "runs a command",
    H.ENV: "sets the harness's environment",
    H.PERMISSION: "grants permissions",
    H.HOST: "points the harness at a host",
    H.FILE: "names a file the harness reads or runs",
    H.SERVER: "enables a server, plugin or agent",
    H.GUARD_OFF: "can switch hooks, and the guard, off",
    "unparseable": "cannot be parsed (the harness may ignore it or read it differently)",
    "unreadable": "cannot be read by agentstack",
    "executable": "is an executable file",
    "link-outside": "is a link out of the project",
    "inline-shell": "runs shell inline when invoked",
    "imports-outside": "imports a file from outside the project into the model's context",
    "model-reads": "reaches the model",
    "setting": "changes a harness setting",
}
SURFACE_HIGH_CODES = frozenset({f"surface-{c}" for c in HIGH_CODES} | {"surface-changed"})


def findings(old: dict[str, Any] | None, new: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(severity, code, item, message) for each surface entry new or changed since `old`."""
    before = (old or {}).get("surface", {}) or {}
    out: list[tuple[str, str, str, str]] = []
    for rel, entry in sorted((new.get("surface") or {}).items()):
        previous = before.get(rel)
        if previous is not None and previous.get("digest") == entry.get("digest"):
            continue
        item = f"surface[{rel}]"
        who = ", ".join(H.BY_NAME[h].display for h in entry.get("harnesses", []) if h in H.BY_NAME)
        old_facts = set((previous or {}).get("facts", []))
        fresh = [f for f in entry.get("facts", []) if f not in old_facts]
        for fact in fresh:
            code, _, detail = fact.partition(":")
            severity = "high" if code in HIGH_CODES else "low" if code == "setting" else "medium"
            message = f"loaded by {who}, not in agentstack.toml: {_MESSAGES.get(code, code)}"
            out.append((severity, f"surface-{code}", item, f"{message}: {detail}"))
        if not fresh:
            risky = any(f.partition(":")[0] in HIGH_CODES for f in entry.get("facts", []))
            out.append(
                (
                    "high" if risky else "medium",
                    "surface-changed" if risky else "surface-model-reads",
                    item,
                    f"loaded by {who}, not in agentstack.toml: changed",
                )
            )
    for rel in sorted(set(before) - set(new.get("surface") or {})):
        out.append(("low", "surface-removed", f"surface[{rel}]", "no longer on the surface"))
    return out

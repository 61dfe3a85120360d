"""The apply ledger: what `apply --write` rendered for a project, under $AGENTSTACK_HOME (never the
project). Read by `apply`, the guard snapshot and `status`; a module of its own so that reading it
costs no more than the read (`status` must not import the renderer)."""

from __future__ import annotations

import json

from agentstack.errors import Refused
from agentstack.paths import apply_ledger_path

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

LEDGER_VERSION = 1


def load_ledger(root: Path) -> dict[str, Any]:
    path = apply_ledger_path(root)
    try:
        ledger = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {"v": LEDGER_VERSION, "files": {}}
    except (OSError, ValueError) as exc:
        raise Refused(
            f"the apply ledger {path} is unreadable ({exc})",
            hint="inspect or delete it; with it gone, every rendered file that already "
            "exists counts as not written by agentstack",
        ) from None
    if not isinstance(ledger, dict) or ledger.get("v") != LEDGER_VERSION:
        raise Refused(f"the apply ledger {path} has an unknown format")
    return ledger

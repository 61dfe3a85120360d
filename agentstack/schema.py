"""JSON Schemas for agentstack.toml and agentstack.lock, generated from the pydantic models.

`python -m agentstack.schema` rewrites schemas/*.schema.json; a test fails when they are stale.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from agentstack import layout
from agentstack.fsutil import write_atomic

SCHEMA_FILES = {
    "manifest": "manifest.schema.json",
    "lock": "lock.schema.json",
    "boundary": "boundary.schema.json",
}
TITLES = {"manifest": layout.MANIFEST, "lock": layout.LOCK, "boundary": layout.BOUNDARY}


def schema_for(which: str) -> dict[str, Any]:
    from pydantic import BaseModel

    from agentstack.consent.boundary import BoundaryFile
    from agentstack.lock.model import LockModel
    from agentstack.manifest.model import Manifest

    models: dict[str, type[BaseModel]] = {
        "manifest": Manifest,
        "lock": LockModel,
        "boundary": BoundaryFile,
    }
    schema = models[which].model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = TITLES[which]
    return schema


def render(which: str) -> str:
    return json.dumps(schema_for(which), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    target = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "schemas"
    target.mkdir(parents=True, exist_ok=True)
    for which, filename in SCHEMA_FILES.items():
        write_atomic(target / filename, render(which).encode("utf-8"), 0o644)
        sys.stdout.write(f"wrote {target / filename}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

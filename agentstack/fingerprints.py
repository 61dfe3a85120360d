"""What the guard and the renderer must agree on, in one place: the markers of the block agentstack
manages in CLAUDE.md / AGENTS.md, how a config file's owned keys are looked up and viewed, and how
a file is fingerprinted and found drifted. Standard library only.

`apply` renders with these, `snapshot` records with them, `surface` and `status` compare with them,
and the guard checks with them: one object each (a test asserts the identity), so a change to the
markers or to a key view cannot make the guard silently miss an edit of what apply wrote.

The definitions live with the guard (`agentstack._guard` and, off its hot path,
`agentstack._guard_more`), because the guard must stay one cheap module per tool call; they are
re-exported here, and library code imports them from this module, never `_guard`'s private names.
"""

from __future__ import annotations

from agentstack._guard import (
    BLOCK_BEGIN,
    BLOCK_END,
    SNAPSHOT_VERSION,
    drifted,
    load_snapshot,
    stat_key,
)
from agentstack._guard import _mark_of as mark_of
from agentstack._guard import _sha as sha256_hex
from agentstack._guard_more import _canonical as canonical
from agentstack._guard_more import _key_value as key_value
from agentstack._guard_more import content_hash, encode_snapshot, fingerprint, keys_view, shape

__all__ = [
    "BLOCK_BEGIN",
    "BLOCK_END",
    "SNAPSHOT_VERSION",
    "canonical",
    "content_hash",
    "drifted",
    "encode_snapshot",
    "fingerprint",
    "key_value",
    "keys_view",
    "load_snapshot",
    "mark_of",
    "sha256_hex",
    "shape",
    "stat_key",
]

"""Waits that stay deadlines on a busy machine: `scaled(seconds)`.

agentstack waits for other processes in a few places (a harness printing its version for
`doctor`, a probe row of `doctor --verify`, `mcp list`, git). Each wait's seconds are what it
takes on an idle machine, with room; on a loaded machine (a shared CI runner, a laptop building
something) the same work takes several times longer, and a fixed timeout would turn slowness into
a failure. `scaled` stretches a wait by the 1-minute load average per CPU (1x to 8x).

Only the machine's load steers it, never an environment variable a project's settings could set;
and a longer wait never turns a failure into a pass: a timeout is always a failure, a proof is
always the process's own answer.
"""

from __future__ import annotations

import os

MAX_FACTOR = 8.0


def factor() -> float:
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # no load average on this system
        return 1.0
    return max(1.0, min(MAX_FACTOR, load))


def scaled(seconds: float) -> float:
    """`seconds` (enough on an idle machine) stretched by how busy this machine is now."""
    return seconds * factor()

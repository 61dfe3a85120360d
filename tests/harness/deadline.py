"""The one deadline for tests that drive harnesses or start processes, scaled to the machine.

A test's verdict must not depend on the machine being idle. Every wait in the suite is for a
condition (a process exiting, a line printed, a file appearing, a request arriving), bounded by a
deadline from here: `scaled(base)` is `base` seconds (what the wait takes on an idle machine,
with room) times `factor()`:

* the machine's load: the 1-minute load average per CPU, at least 1 and at most `MAX_LOAD`,
  the highest seen in this test process so far (a load average lags; a run that got slower does
  not get faster deadlines again);
* `AGENTSTACK_TEST_SLOWDOWN` (a number, default 1): a CI machine's own factor, multiplied in
  (a shared runner whose load average cannot see its neighbours).

A deadline only bounds how long a hang takes to be reported; a longer one never lets a broken
behaviour pass. `Deadline` re-reads the factor on every question, so a wait that started on an
idle machine stretches when the machine gets busy. Product code keeps its own waits robust the
same way (`agentstack.patience`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

MAX_LOAD = 8.0
ENV = "AGENTSTACK_TEST_SLOWDOWN"
_seen = 1.0


def load_factor() -> float:
    """The 1-minute load average per CPU, within 1..MAX_LOAD, the highest seen so far."""
    global _seen
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # no load average on this system
        load = 1.0
    _seen = max(_seen, min(MAX_LOAD, load))
    return _seen


def slowdown() -> float:
    try:
        value = float(os.environ.get(ENV, "1"))
    except ValueError:
        raise ValueError(f"{ENV} must be a number (a CI machine's slowdown factor)") from None
    return max(1.0, value)


def factor() -> float:
    return load_factor() * slowdown()


def scaled(seconds: float) -> float:
    """`seconds` (the base deadline on an idle machine) scaled to this machine now."""
    return seconds * factor()


class Deadline:
    """A deadline `base` seconds from now on an idle machine, stretched while the machine is
    busy: `left()` and `expired()` re-read the factor."""

    def __init__(self, base: float) -> None:
        self.start = time.monotonic()
        self.base = base

    def left(self) -> float:
        return self.start + scaled(self.base) - time.monotonic()

    def expired(self) -> bool:
        return self.left() <= 0


def wait_for(condition: Callable[[], bool], base: float, *, interval: float = 0.02) -> bool:
    """Poll `condition` until it holds (True) or the scaled deadline passes (False)."""
    deadline = Deadline(base)
    while True:
        if condition():
            return True
        if deadline.expired():
            return condition()
        time.sleep(interval)

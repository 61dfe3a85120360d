"""The one deadline of the suite, and agentstack's own waits: scaled to the machine's load."""

from __future__ import annotations

import os
from typing import Any

import pytest

from agentstack import patience
from tests.harness import deadline


def test_the_deadline_grows_with_the_load_and_the_ci_factor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadline, "_seen", 1.0)
    cpus = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.0, 0.0))
    assert deadline.scaled(10) == 10  # an idle machine: the base
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0 * cpus, 0.0, 0.0))
    assert deadline.scaled(10) == pytest.approx(30)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.0, 0.0))
    assert deadline.scaled(10) == pytest.approx(30)  # it never shrinks again within a run
    monkeypatch.setattr(os, "getloadavg", lambda: (100.0 * cpus, 0.0, 0.0))
    assert deadline.scaled(10) == pytest.approx(10 * deadline.MAX_LOAD)
    monkeypatch.setenv(deadline.ENV, "2")
    assert deadline.scaled(10) == pytest.approx(20 * deadline.MAX_LOAD)
    monkeypatch.setenv(deadline.ENV, "fast")
    with pytest.raises(ValueError, match=deadline.ENV):
        deadline.scaled(10)


def test_a_deadline_stretches_while_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadline, "_seen", 1.0)
    cpus = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    wait = deadline.Deadline(0.05)
    assert not wait.expired()
    monkeypatch.setattr(os, "getloadavg", lambda: (8.0 * cpus, 0.0, 0.0))
    assert wait.left() > 0.3  # the machine got busy: the same wait has more time
    assert deadline.wait_for(lambda: True, 0.0)
    monkeypatch.setattr(deadline, "_seen", 1.0)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert not deadline.wait_for(lambda: False, 0.05)


def test_agentstacks_own_waits_follow_the_load_only(monkeypatch: pytest.MonkeyPatch) -> None:
    cpus = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.0, 0.0))
    monkeypatch.setenv(deadline.ENV, "5")  # a test-suite setting: agentstack never reads it
    assert patience.scaled(30) == 30
    monkeypatch.setattr(os, "getloadavg", lambda: (4.0 * cpus, 0.0, 0.0))
    assert patience.scaled(30) == pytest.approx(120)
    monkeypatch.setattr(os, "getloadavg", lambda: (50.0 * cpus, 0.0, 0.0))
    assert patience.scaled(30) == pytest.approx(30 * patience.MAX_FACTOR)

    def no_load() -> tuple[float, float, float]:
        raise OSError("no load average")

    monkeypatch.setattr(os, "getloadavg", no_load)
    assert patience.scaled(30) == 30


def test_what_reached_the_denied_listener_is_known_not_guessed() -> None:
    """`doctor --verify` used to sleep 20 ms and count accepts, so on a busy machine a
    connection the sandbox let through could be counted after the row had passed. Now a
    connection of its own goes in behind the probe's and the count is taken once it is in."""
    import socket
    from types import SimpleNamespace

    from agentstack.sandbox import verify

    accepted: list[str] = []
    listener = verify._listener(accepted=accepted)
    try:
        scene: Any = SimpleNamespace(values={"denied_port": str(listener.getsockname()[1])},
                                     denied_accepts=accepted)
        assert verify._arrived(scene, 0) == []
        before = len(accepted)
        with socket.create_connection(listener.getsockname()) as leaked:
            through = str(leaked.getsockname())
        assert verify._arrived(scene, before) == [through]
    finally:
        listener.close()

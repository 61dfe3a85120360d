"""Older kernels, by a fail-closed table (`agentstack/sandbox/abi.py`): what each Landlock ABI
enforces, what `run` does without it, and the confinement rows with the ruleset forced to each
lower ABI this kernel can emulate (rows that need a missing feature are reported refused, never
passed silently; the emulation is real: the same row run unscoped is not denied)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agentstack.sandbox import abi


def test_the_table_refuses_degrades_or_covers_each_missing_feature() -> None:
    assert abi.assess(6).state == "full" and abi.assess(7).state == "full"
    for version in range(1, 6):
        answer = abi.assess(version)
        assert answer.state == "refused"  # signals to processes outside: nothing covers them
        assert any("signal scoping" in r for r in answer.refused)
        assert any("abstract unix" in c for c in answer.covered)
    assert any("TCP connect/bind" in r for r in abi.assess(3).refused)
    assert not any("TCP connect/bind" in r for r in abi.assess(3, network_block=False).refused)
    assert any("truncate" in d for d in abi.assess(2).degraded)
    assert any("ioctl" in d for d in abi.assess(4).degraded)
    assert not any("ioctl" in d for d in abi.assess(5).degraded)
    # Without seccomp, what seccomp covers is refused instead.
    assert any("abstract unix" in r for r in abi.assess(5, seccomp=False).refused)
    assert abi.assess(0).state == "refused"


def test_a_pid_namespace_covers_signal_scoping_at_abi_4_and_5() -> None:
    """Where the launcher can make a PID namespace, ABI 4-5 run degraded (what another layer
    covers named), never full; ABI 1-3 stay refused with the network blocked; ABI 6 needs none."""
    for version in (4, 5):
        answer = abi.assess(version, pid_namespace=True)
        assert answer.state == "degraded" and not answer.refused, answer
        assert any("PID namespace" in c for c in answer.covered)
        assert any("abstract unix" in c for c in answer.covered)
        assert abi.needs_pid_namespace(version)
        assert abi.covered("signal-scoping", version, pid_namespace=True)
        assert not abi.covered("signal-scoping", version, pid_namespace=False)
        assert not abi.covered("network", version, pid_namespace=True)
    for version in (1, 2, 3):
        assert abi.assess(version, pid_namespace=True).state == "refused"
        assert abi.assess(version, network_block=False, pid_namespace=True).state == "degraded"
    assert abi.assess(6, pid_namespace=True).state == "full"
    assert not abi.needs_pid_namespace(6)


def test_rights_grow_with_the_abi() -> None:
    previous = 0
    for version in range(1, 7):
        bits = abi.fs_access(version)
        assert bits & previous == previous
        previous = bits
    assert abi.net_access(3) == 0 and abi.net_access(4)
    assert abi.scoped(5) == 0 and abi.scoped(6)


def _kernel_abi() -> int:
    pytest.importorskip("nono_py")
    from agentstack.sandbox.confine import load_nono
    from agentstack.sandbox.runner import abi_number

    return min(abi_number(load_nono().detect_abi()), abi.LATEST)


ROWS = ("ssh-key", "write-outside", "sibling", "etc-shadow", "abstract-unix", "kill",
        "tcp-port", "workdir", "allowed-port")


@pytest.mark.slow
def test_confinement_rows_at_each_emulated_abi() -> None:
    from agentstack.sandbox import verify
    from agentstack.sandbox.runner import pid_namespace_available

    kernel = _kernel_abi()
    pidns = pid_namespace_available()
    rows = tuple(r for r in verify.ROWS if r.name in ROWS)
    for version in range(1, kernel + 1):
        results = verify.run_suite(rows, modes=("direct",), landlock_abi=version)
        by_row = {r.row: r for r in results}
        assert set(by_row) == set(ROWS)
        for name, result in by_row.items():
            needs = abi.ROW_NEEDS.get(name)
            if needs is not None and abi.covered(needs, version, pid_namespace=pidns):
                # Signals, without Landlock's scoping: the PID namespace's ESRCH.
                assert result.passed and not result.refused, (version, result.to_json())
                assert "PID namespace" in result.detail and "ESRCH" in result.output
            elif needs is not None and not abi.feature_available(needs, version):
                assert result.refused and not result.passed, (version, result)
                assert f"ABI {version}" in result.detail
            else:
                assert result.passed and not result.refused, (version, result.to_json())


@pytest.mark.slow
def test_the_emulation_really_lacks_the_feature(monkeypatch: pytest.MonkeyPatch) -> None:
    """At ABI 5 the kill row, run anyway, is not denied (the kernel would let it through), and
    at ABI 3 a connect to a non-allowed port is not denied: the suite's refusals are the truth,
    not a formality."""
    from agentstack.sandbox import verify

    kernel = _kernel_abi()
    if kernel < 6:
        pytest.skip("this kernel has no ABI 6 to compare with")
    kill = next(r for r in verify.ROWS if r.name == "kill")
    tcp = next(r for r in verify.ROWS if r.name == "tcp-port")
    unscoped = (dataclasses.replace(kill, name="kill-anyway", modes=("direct",)),
                dataclasses.replace(tcp, name="tcp-anyway", modes=("direct",)))
    at_6 = {r.row: r for r in verify.run_suite(unscoped, modes=("direct",), landlock_abi=6)}
    assert at_6["kill-anyway"].passed and at_6["tcp-anyway"].passed
    at_3 = {r.row: r for r in verify.run_suite(unscoped[1:], modes=("direct",), landlock_abi=3)}
    assert not at_3["tcp-anyway"].passed
    # At ABI 5 with a PID namespace the signal finds no such process (the decoy lives on)...
    from agentstack.sandbox import runner

    if runner.pid_namespace_available():
        at_5 = {r.row: r for r in verify.run_suite(unscoped[:1], modes=("direct",),
                                                   landlock_abi=5)}
        assert "DENIED ESRCH No such process" in at_5["kill-anyway"].output, at_5
        assert "was killed" not in at_5["kill-anyway"].detail
    # ... and without one, nothing stops it: the namespace is what covers ABI 5.
    monkeypatch.setattr(runner, "pid_namespace_available", lambda: False)
    at_5 = {r.row: r for r in verify.run_suite(unscoped[:1], modes=("direct",), landlock_abi=5)}
    assert not at_5["kill-anyway"].passed
    assert "was killed" in at_5["kill-anyway"].detail or "signalled" in at_5[
        "kill-anyway"].output, at_5


# ------------------------------------------------------------------ the PID namespace (ABI 4-5)


def _in_namespace(argv: list[str], *, landlock_abi: int = 5) -> tuple[int, str]:
    import subprocess

    from agentstack.patience import scaled
    from agentstack.sandbox import runner, verify

    if not runner.pid_namespace_available():
        pytest.skip("no PID namespace can be made here (run refuses ABI 4-5 then)")
    with verify.scenario() as sc, runner.confined(
        sc.workdir, sc.policy._replace(landlock_abi=landlock_abi), argv,
        {"PATH": "/usr/bin:/bin"}, interactive=False, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    ) as child:
        assert child.enforcement.pid_namespace
        out, _ = child.process.communicate(timeout=scaled(60))
        return child.process.returncode, out.decode()


@pytest.mark.parametrize(("script", "code"), [
    ("echo pid=$$; exit 7", 7),  # the command is pid 2: its init is pid 1
    ("echo pid=$$; kill -TERM $$", -15),  # killed by a signal: `run` sees the signal
])
def test_the_command_runs_in_a_pid_namespace_and_exits_as_it_does(script: str, code: int) -> None:
    returncode, out = _in_namespace(["/bin/sh", "-c", script])
    assert "pid=2" in out and returncode == code, (returncode, out)


def test_a_forwarded_signal_reaches_the_command_once() -> None:
    """`run` forwards SIGTERM to the command's process group; the waiters ignore it, the command
    gets it (once) with its default disposition back."""
    import os
    import signal
    import subprocess

    from agentstack.patience import scaled
    from agentstack.sandbox import runner, verify

    if not runner.pid_namespace_available():
        pytest.skip("no PID namespace can be made here")
    script = ('trap \'echo got; exit 3\' TERM; echo ready; while :; do sleep 0.05; done')
    with verify.scenario() as sc, runner.confined(
        sc.workdir, sc.policy._replace(landlock_abi=4), ["/bin/sh", "-c", script],
        {"PATH": "/usr/bin:/bin"}, interactive=False, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    ) as child:
        stdout = child.process.stdout
        assert stdout is not None
        assert stdout.readline() == b"ready\n"
        os.killpg(child.pid, signal.SIGTERM)
        out, _ = child.process.communicate(timeout=scaled(60))
    # (the group's `sleep` gets it too, and sh reports it "Terminated")
    assert child.process.returncode == 3 and out.count(b"got\n") == 1, (
        child.process.returncode, out)


def test_without_a_pid_namespace_abi_5_is_refused() -> None:
    """Where none can be made, `run` at the kernel's own ABI 4-5 refuses, naming signal
    scoping (the table, fed the kernel's ABI as such a kernel would report it)."""
    for version in (4, 5):
        answer = abi.assess(version, pid_namespace=False)
        assert answer.state == "refused"
        assert any("signal scoping" in r for r in answer.refused)


@pytest.mark.slow
def test_doctor_verify_at_abi_4_is_degraded_and_passes_every_row(tmp_path: Path) -> None:
    """`doctor --verify --landlock-abi 4` (Ubuntu 24.04's kernel): degraded, naming what is
    missing (device ioctls) and what covers what (seccomp, the PID namespace); every row of the
    suite passes, the ones naming a process outside on ESRCH."""
    import json

    from agentstack.sandbox import runner
    from tests.conftest import run_cli

    if not runner.pid_namespace_available():
        pytest.skip("no PID namespace can be made here (ABI 4 is refused then)")
    done = run_cli("doctor", "--verify", "--landlock-abi", "4", "--json", cwd=tmp_path)
    report = json.loads(done.stdout)
    emulated = report["emulated_abi"]
    assert emulated["state"] == "degraded" and not emulated["refused"], emulated
    assert any("ioctl" in d for d in emulated["degraded"])
    assert any("PID namespace" in c for c in emulated["covered"])
    rows = report["verify"]["rows"]
    assert report["verify"]["failed"] == 0, [r for r in rows if not r["passed"]]
    outside = [r for r in rows if r["row"] in ("kill", "join-group")]
    assert outside and all("DENIED ESRCH" in r["output"] and "PID namespace" in r["detail"]
                           for r in outside), outside

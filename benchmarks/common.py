"""Helpers shared by the benchmark scripts lock.py, guard.py, apply.py and run.py.

Not a benchmark itself. The scripts are run as `python benchmarks/X.py`, which puts this directory
first on sys.path, so they import it as `from common import ...`.
"""

from __future__ import annotations

import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class BenchError(Exception):
    """Something failed (a command errored, a result is wrong): the script exits non-zero."""


# ------------------------------------------------------------------------------------- set-up


def write(path: Path, text: str, mode: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    if mode is not None:
        path.chmod(mode)


def in_workdir(keep: Path | None, prefix: str, body: Callable[[Path], int]) -> int:
    """`body(tmp)` in a fresh temporary directory, removed afterwards, or in `keep` (created; left
    there). A BenchError is printed and turns into exit status 1."""
    if keep is not None:
        keep.mkdir(parents=True)
        tmp = keep.resolve()
    else:
        tmp = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
    try:
        return body(tmp)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if keep is not None:
            print(f"kept the generated projects in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------ running


def check_run(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    stdin: bytes | None = None,
    *,
    devnull: bool = False,
) -> subprocess.CompletedProcess[bytes]:
    """Run `argv` with its output captured; raise BenchError with the tail of that output when it
    exits non-zero. It reads `stdin` when given, else /dev/null with `devnull`, else our stdin."""
    proc = subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        stdin=subprocess.DEVNULL if devnull else None,
    )
    if proc.returncode != 0:
        raise BenchError(
            f"{shlex.join(argv)} (in {cwd}) exited {proc.returncode}:\n{output(proc)[-4000:]}"
        )
    return proc


def output(proc: subprocess.CompletedProcess[bytes]) -> str:
    """A finished command's stdout and then its stderr, as text."""
    return (proc.stdout + proc.stderr).decode("utf-8", "replace")


def check_output(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    stdin: bytes | None = None,
    *,
    devnull: bool = False,
) -> str:
    """`check_run`, returning the command's stdout and then its stderr as text."""
    return output(check_run(argv, cwd, env, stdin, devnull=devnull))


# ------------------------------------------------------------------------------------- timing


def timed(action: Callable[[], object]) -> float:
    """Wall-clock seconds (time.perf_counter) that `action()` takes."""
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def round_robin(
    actions: Callable[[int], Mapping[str, Callable[[], object]]], warmup: int, runs: int
) -> dict[str, list[float]]:
    """`warmup + runs` rounds; round i times each of `actions(i)` once, in order (interleaved, so
    drift on a shared machine hits every action alike). The first `warmup` rounds are not kept."""
    samples: dict[str, list[float]] = {}
    for round_ in range(warmup + runs):
        for name, action in actions(round_).items():
            elapsed = timed(action)
            if round_ >= warmup:
                samples.setdefault(name, []).append(elapsed)
    return samples


# ------------------------------------------------------------------------------------- report


def p90(values: list[float]) -> float:
    """The 90th percentile; with fewer than 10 values, the maximum."""
    return statistics.quantiles(values, n=10)[-1] if len(values) >= 10 else max(values)


def fmt_times(times: list[float]) -> str:
    return ", ".join(f"{t:.3f}" for t in times)


def machine(tools: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """nproc, cpu, os and python rows, then `tools` (the script's own tool versions), then the load
    average, read now (call this at the end of a run)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return [
        ("nproc", str(os.cpu_count())),
        ("cpu", cpu),
        ("os", f"{platform.system()} {platform.release()}"),
        ("python", f"{platform.python_version()} ({sys.executable})"),
        *tools,
        ("load avg", " ".join(f"{x:.2f}" for x in os.getloadavg()) + " (1/5/15 min, at the end)"),
    ]

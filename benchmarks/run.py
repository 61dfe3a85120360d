"""Benchmark `agentstack run -- /bin/true` against `python -I -c pass`, `/bin/true` and bwrap.

    python benchmarks/run.py [--runs 30] [--warmup 3] [--compare REV]

The agentstack under test is a NON-editable install, what a user gets (a wheel of this checkout in
a throw-away venv, as benchmarks/cli.py builds it). A throw-away trusted project under /var/tmp
(its own AGENTSTACK_HOME and HOME, so nothing of yours is read or written) is timed, in one run and
interleaved round-robin so drift hits every command alike:

* `python -I -c pass` with the venv's interpreter (the anchor of issue 16's goal: run <= 6x);
* `/bin/true` (fork + exec, the floor);
* `bwrap --ro-bind / / /bin/true` (Debian `bubblewrap`: a namespace sandbox, no policy; skipped
  when bwrap is not installed);
* `agentstack run -- /bin/true`: the whole command (interpreter start-up, manifest, lock freshness,
  trust check, policy resolution, the seccomp program, the launcher, Landlock, capabilities,
  seccomp, execve, reaping, the after-session watch);
* with `--compare REV`, the same command from a wheel of git revision REV;
* `run_confined(...)` called in-process (this checkout): the sandbox alone, without the CLI.

Prints each median wall time (and p90), the median CPU time (user + system of the whole process
tree: far steadier than wall time on a shared machine), and the ratios to `python -I -c pass`,
`/bin/true` and bwrap. Exit status 0 whatever the figures are (a benchmark, not a test); non-zero
only when something fails.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cli import home_env, wheel_venv
from common import REPO, BenchError, p90

MANIFEST = '[project]\nname = "bench"\nharnesses = ["claude-code"]\n\n[sandbox]\nwrite_dirs = ["."]\n'
ANCHOR = "python -I -c pass"
BWRAP = "bwrap --ro-bind / / /bin/true"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--compare", metavar="REV",
                        help="also time `run` from a wheel of git revision REV, in the same rounds")
    args = parser.parse_args()

    bwrap = shutil.which("bwrap")
    if bwrap is None:
        print("bwrap not found (apt-get install bubblewrap): no bwrap row", file=sys.stderr)
    base_env = {k: v for k, v in os.environ.items()
                if k not in ("PYTHONPATH", "AGENTSTACK_TRUSTED_DIGESTS")}
    base = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="agentstack-bench-")).resolve()
    try:
        print("building a wheel of this checkout into a throw-away venv ...", file=sys.stderr)
        (base / "new").mkdir()
        python, agentstack = wheel_venv(base / "new", base_env)
        commands = {"agentstack run -- /bin/true": agentstack}
        if args.compare:
            print(f"building a wheel of {args.compare} ...", file=sys.stderr)
            (base / "old").mkdir()
            commands[f"{args.compare}: agentstack run -- /bin/true"] = wheel_venv(
                base / "old", base_env, args.compare)[1]
        cases: dict[str, Callable[[], float]] = {
            ANCHOR: lambda: _child_cpu([python, "-I", "-c", "pass"], base, base_env),
            "/bin/true": lambda: _child_cpu(["/bin/true"], base, base_env),
        }
        if bwrap is not None:
            cases[BWRAP] = lambda: _child_cpu([bwrap, "--ro-bind", "/", "/", "/bin/true"], base,
                                              base_env)
        for index, (name, script) in enumerate(commands.items()):
            project, env = _trusted_project(base / f"p{index}", script, base_env)
            cases[name] = (lambda script=script, project=project, env=env: _child_cpu(
                [script, "run", "--", "/bin/true"], project, env))
        cases["run_confined() in-process"] = _in_process(base / "p0" / "project", base / "p0")
        wall, cpu = _rounds(cases, args.warmup, args.runs)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    _report(wall, cpu, args)
    return 0


def _trusted_project(where: Path, script: str, base_env: dict[str, str]
                     ) -> tuple[Path, dict[str, str]]:
    project = where / "project"
    project.mkdir(parents=True)
    (project / "agentstack.toml").write_text(MANIFEST)
    # The top of a git checkout, as a project usually is (a re-lock record, which spares `run`
    # the lock's full check, is kept only for such a project: docs/lockfile.md).
    subprocess.run(["git", "init", "-q", str(project)], check=True, capture_output=True)
    env = home_env(base_env, where / "home")
    for argv in (["lock"], ["trust", "--yes", "--accept-risk"], ["run", "--", "/bin/true"]):
        done = subprocess.run([script, *argv], cwd=project, env=env, capture_output=True,
                              stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise BenchError(f"agentstack {' '.join(argv)} exited {done.returncode}: "
                             f"{(done.stdout + done.stderr).decode()[-2000:]}")
    return project, env


def _child_cpu(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Run `argv` to completion (output discarded); the CPU seconds its whole tree used."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read() if proc.stderr else b""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(argv)} exited {proc.returncode}: {err.decode()[-2000:]}")
    return usage.ru_utime + usage.ru_stime


def _in_process(project: Path, where: Path) -> Callable[[], float]:
    """run_confined() of this checkout, in this process (its policy resolved once)."""
    os.environ.update(HOME=str(where / "home"),
                      AGENTSTACK_HOME=str(where / "home" / ".config/agentstack"))
    sys.path.insert(0, str(REPO))
    from agentstack.manifest.load import load_manifest
    from agentstack.sandbox.resolve import resolve_policy
    from agentstack.sandbox.runner import run_confined

    policy = resolve_policy(load_manifest(project).sandbox, project)
    env = {"PATH": "/usr/bin:/bin"}

    def action() -> float:
        before = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        code = run_confined(project, policy, ["/bin/true"], env, False, stdin=subprocess.DEVNULL)
        if code != 0:
            raise BenchError(f"run_confined returned {code}")
        after = resource.getrusage(resource.RUSAGE_SELF)
        done = resource.getrusage(resource.RUSAGE_CHILDREN)
        return sum(getattr(b, f) - getattr(a, f) for a, b in ((before, after), (children, done))
                   for f in ("ru_utime", "ru_stime"))

    return action


def _rounds(cases: dict[str, Callable[[], float]], warmup: int, runs: int
            ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    for round_ in range(warmup + runs):
        for name, action in cases.items():
            start = time.perf_counter()
            used = action()
            elapsed = time.perf_counter() - start
            if round_ >= warmup:
                wall.setdefault(name, []).append(elapsed)
                cpu.setdefault(name, []).append(used)
    return wall, cpu


def _report(wall: dict[str, list[float]], cpu: dict[str, list[float]],
            args: argparse.Namespace) -> None:
    median = {name: statistics.median(values) for name, values in wall.items()}
    cpu_median = {name: statistics.median(values) for name, values in cpu.items()}
    anchor, floor = median[ANCHOR], median["/bin/true"]
    bw = median.get(BWRAP)
    print(f"{args.runs} runs each (after {args.warmup} warm-up rounds), interleaved; "
          f"Python {sys.version.split()[0]}, Linux {os.uname().release}, "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'command':<44} {'median':>9} {'p90':>9} {'cpu':>9} {'x python':>9} {'cpu x py':>9} "
          f"{'x true':>8}" + (f" {'x bwrap':>8}" if bw else ""))
    for name, values in wall.items():
        print(f"{name:<44} {median[name] * 1000:>7.1f}ms {p90(values) * 1000:>7.1f}ms "
              f"{cpu_median[name] * 1000:>7.1f}ms {median[name] / anchor:>8.1f}x "
              f"{cpu_median[name] / cpu_median[ANCHOR]:>8.1f}x {median[name] / floor:>7.1f}x"
              + (f" {median[name] / bw:>7.1f}x" if bw else ""))
    ratio = median["agentstack run -- /bin/true"] / anchor
    print(f"\nagentstack run -- /bin/true / {ANCHOR}: {ratio:.1f}x (goal <= 6x: "
          f"{'PASS' if ratio <= 6 else 'MISS'})")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        sys.exit(1)

"""Benchmark `agentstack run -- /bin/true` against plain `/bin/true` and `bwrap --ro-bind / / /bin/true`.

    python benchmarks/run.py [--runs 30] [--warmup 3]

Creates a throw-away trusted project under /var/tmp (its own AGENTSTACK_HOME and HOME, so nothing
of yours is read or written), then, in one run and interleaved round-robin so drift hits every
command alike:

* `/bin/true` (fork + exec, the floor);
* `bwrap --ro-bind / / /bin/true` (Debian `bubblewrap`: a namespace sandbox, no policy);
* `agentstack run -- /bin/true`: the whole command (interpreter start-up, manifest, lock freshness,
  trust check, policy resolution, seccomp compilation, launcher, Landlock, capabilities, seccomp,
  execve, reaping);
* `run_confined(...)` called in-process: the sandbox alone, without the CLI's start-up.

Prints each median (and p90) and the ratios to `/bin/true` and to bwrap. Exit status 0 whatever the
figures are (a benchmark, not a test); non-zero only when something fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from common import REPO, BenchError, check_run, p90, round_robin

MANIFEST = '[project]\nname = "bench"\nharnesses = ["claude-code"]\n\n[sandbox]\nwrite_dirs = ["."]\n'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()

    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise BenchError("bwrap not found: apt-get install bubblewrap")
    base = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="agentstack-bench-")).resolve()
    try:
        project, home = base / "project", base / "home"
        project.mkdir()
        home.mkdir()
        (project / "agentstack.toml").write_text(MANIFEST)
        env = dict(os.environ, HOME=str(home), AGENTSTACK_HOME=str(home / ".agentstack"),
                   AGENTSTACK_CACHE=str(home / ".cache"), PYTHONPATH=str(REPO))
        env.pop("AGENTSTACK_TRUSTED_DIGESTS", None)
        cli = [sys.executable, "-m", "agentstack"]
        check_run([*cli, "lock"], project, env)
        check_run([*cli, "trust", "--yes", "--accept-risk"], project, env)

        os.environ.update(HOME=env["HOME"], AGENTSTACK_HOME=env["AGENTSTACK_HOME"])
        sys.path.insert(0, str(REPO))
        from agentstack.manifest import load_manifest
        from agentstack.sandbox.resolve import resolve_policy
        from agentstack.sandbox.runner import run_confined

        policy = resolve_policy(load_manifest(project).sandbox, project)

        def in_process() -> None:
            code = run_confined(project, policy, ["/bin/true"], env, False,
                                stdin=subprocess.DEVNULL)
            if code != 0:
                raise BenchError(f"run_confined returned {code}")

        cases: dict[str, Callable[[], object]] = {
            "/bin/true": lambda: check_run(["/bin/true"], project, env),
            "bwrap --ro-bind / / /bin/true": lambda: check_run(
                [bwrap, "--ro-bind", "/", "/", "/bin/true"], project, env),
            "agentstack run -- /bin/true": lambda: check_run([*cli, "run", "--", "/bin/true"],
                                                        project, env),
            "run_confined() in-process": in_process,
        }
        samples = round_robin(lambda _: cases, args.warmup, args.runs)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    medians = {name: statistics.median(values) for name, values in samples.items()}
    floor, bw = medians["/bin/true"], medians["bwrap --ro-bind / / /bin/true"]
    print(f"{args.runs} runs each (after {args.warmup} warm-up rounds), interleaved; "
          f"Python {sys.version.split()[0]}, Linux {os.uname().release}")
    print(f"{'command':<32} {'median':>10} {'p90':>10} {'x /bin/true':>12} {'x bwrap':>9}")
    for name, values in samples.items():
        print(f"{name:<32} {medians[name] * 1000:>8.2f}ms {p90(values) * 1000:>8.2f}ms "
              f"{medians[name] / floor:>11.1f}x {medians[name] / bw:>8.1f}x")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        sys.exit(1)

"""Benchmark the `agentstack` command's start-up and the one-step setup, as ratios measured in one run.

    python benchmarks/cli.py [--runs 15] [--warmup 2] [--ruler-version 0.3.44] [--tools DIR]
                             [--compare REV] [--no-ruler]

The agentstack under test is a NON-editable install, what a user gets: this checkout is built
into a wheel (`pip wheel --no-deps`, from a copy of the sources) and installed into a throw-away
venv whose dependencies are this checkout's `.venv` site-packages (a plain path: no editable
finder, no import hook), with the console script pip would write. Everything runs with its own
HOME and AGENTSTACK_HOME in a temporary directory; ruler (`@intellectronica/ruler`, installed by
npm into <repo>/.tools/ruler as benchmarks/apply.py does) gets the same sample as apply.py.

Interleaved round-robin (drift on a shared machine hits every command alike), it times:

* `python -I -c pass` with the venv's interpreter (the anchor);
* `agentstack status`, `digest` and `show --json` in a locked, trusted, applied project;
* the command table on typer (`agentstack.cli`: typer and the one module of the command named)
  in the same project: `--help`, `keys list`, `secret list` and `trust log --verify`;
* `agentstack run -- /bin/true` in a trusted project (the real sandbox path, as benchmarks/run.py);
* cold (a fresh, unlocked copy of apply.py's sample each run) and re-apply (the same project again):
  `lock && trust --yes --accept-risk && apply --write` (three processes),
  `trust --lock --apply --yes --accept-risk` (one), and `ruler apply --agents claude,codex`.

With `--compare REV`, the same read-only commands and `run` from a wheel of git revision REV are
timed in the same rounds (before/after under the same load).

Prints medians and the ratios: each command / `python -I -c pass`, and each setup / ruler. For
the single commands it also prints the median CPU time (user + system, from the child's rusage) and
its ratio: on a shared, loaded machine that is the steadier figure.
Exit status 0 whatever the figures are (a benchmark, not a test); 1 when something fails.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

from apply import (
    OFFLINE,
    RULER_VERSION,
    SCRUB,
    agentstack_changed,
    install_ruler,
    make_agentstack,
    make_ruler,
    ruler_ok,
)
from common import REPO, BenchError, check_output, in_workdir, machine, p90, round_robin

RUN_MANIFEST = (
    '[project]\nname = "bench"\nharnesses = ["claude-code"]\n\n[sandbox]\nwrite_dirs = ["."]\n'
)


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    return check_output(argv, cwd, env, devnull=True)


def wheel_venv(tmp: Path, base: dict[str, str], rev: str | None = None) -> tuple[str, str]:
    """(python, agentstack console script) of a throw-away venv holding a wheel of this checkout
    (its working tree, or the git revision `rev`)."""
    src = tmp / "src"
    if rev is None:
        for name in ("agentstack", "adapters"):
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (REPO / name).exists():
                shutil.copy2(REPO / name, src / name)
    else:
        src.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "agentstack", "adapters",
                                  "pyproject.toml", "README.md"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    wheels = tmp / "wheels"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(wheels), str(src)], tmp, base)  # fmt: skip
    wheel = next(wheels.glob("*.whl"))
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp, base)
    python = venv / "bin" / "python"
    site = Path(
        run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            tmp, base).strip()
    )  # fmt: skip
    run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--upgrade",
         "--target", str(site), str(wheel)], tmp, base)  # fmt: skip
    deps = sysconfig.get_paths()["purelib"]  # this checkout's .venv: the dependencies
    (site / "zz-agentstack-bench-deps.pth").write_text(deps + "\n", encoding="utf-8")
    script = venv / "bin" / "agentstack"
    script.write_text(
        f"#!{python}\nimport sys\nfrom agentstack.entry import main\n"
        "if __name__ == '__main__':\n    sys.exit(main())\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    where = run([str(python), "-c", "import agentstack; print(agentstack.__file__)"], tmp, base)
    if not where.strip().startswith(str(site)):
        raise BenchError(f"the venv imports agentstack from {where.strip()}, not its wheel")
    return str(python), str(script)


def home_env(base: dict[str, str], home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    return {
        **base,
        "HOME": str(home),
        "AGENTSTACK_HOME": str(home / ".config/agentstack"),
        "AGENTSTACK_CACHE": str(home / ".cache/agentstack"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local/share"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="timed rounds (>= 5; 15)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed first rounds (2)")
    parser.add_argument("--ruler-version", default=RULER_VERSION)
    parser.add_argument("--tools", type=Path, default=REPO / ".tools" / "ruler",
                        help="npm prefix for ruler (default <repo>/.tools/ruler)")
    parser.add_argument("--no-ruler", dest="ruler", action="store_false",
                        help="skip the rows against ruler (no node/npm)")
    parser.add_argument("--compare", metavar="REV",
                        help="also time --help, status, digest, show --json and run from a wheel "
                        "of git revision REV (e.g. the commit before a change), in the same rounds")
    args = parser.parse_args(argv)
    if args.runs < 5:
        parser.error("--runs must be >= 5")
    return in_workdir(None, "agentstack-cli-bench-", lambda tmp: bench(tmp, args))


def bench(tmp: Path, args: argparse.Namespace) -> int:
    base = {k: v for k, v in os.environ.items() if k not in SCRUB and k != "PYTHONPATH"}
    base.update(OFFLINE)
    print("building a wheel of this checkout into a throw-away venv ...")
    py, agentstack = wheel_venv(tmp, base)
    before: str | None = None
    if args.compare:
        print(f"building a wheel of {args.compare} for the comparison rows ...")
        (tmp / "before").mkdir()
        before = wheel_venv(tmp / "before", base, args.compare)[1]
    node = shutil.which("node")
    ruler_cli: Path | None = None
    if args.ruler:
        if node is None or shutil.which("npm") is None:
            raise BenchError("node and npm must be on PATH for the ruler rows (or --no-ruler)")
        npm_env = {**base, "HOME": str(tmp / "npm-home"), "npm_config_cache": str(tmp / "npm")}
        ruler_cli = install_ruler(args.tools.resolve(), args.ruler_version, npm_env)

    # A locked, trusted, applied project for the read-only commands: the top of a git checkout
    # (as benchmarks/lock.py's), and the same project as a plain directory (no `.git` in it or
    # above it: its re-lock record also keeps the `.git` paths found absent above it).
    ready = tmp / "ready"
    loose = tmp / "loose"
    env_ready = home_env(base, tmp / "ready-home")
    for where, checkout in ((ready, True), (loose, False)):
        make_agentstack(where)
        if checkout:
            git_init(where, base)
        run([agentstack, "trust", "--lock", "--apply", "--yes", "--accept-risk"], where, env_ready)
        if json.loads(run([agentstack, "status", "--json"], where, env_ready))["trust"] != "trusted":
            raise BenchError(f"the prepared project {where} is not trusted")
    # A trusted project with a sandbox for `run` (outside /tmp, like benchmarks/run.py).
    var = Path(tmp_dir_outside_tmp()) / f"agentstack-cli-bench-{os.getpid()}"
    boxed = var / "project"
    boxed.mkdir(parents=True)
    try:
        (boxed / "agentstack.toml").write_text(RUN_MANIFEST, encoding="utf-8")
        git_init(boxed, base)
        env_boxed = home_env(base, var / "home")
        run([agentstack, "trust", "--lock", "--yes", "--accept-risk"], boxed, env_boxed)
        run([agentstack, "run", "--", "/bin/true"], boxed, env_boxed)
        samples = measure(tmp, args, py, agentstack, node, ruler_cli, base, ready, env_ready,
                          boxed, env_boxed, loose, before)
    finally:
        shutil.rmtree(var, ignore_errors=True)
    report(samples, args, py)
    return 0


def git_init(where: Path, env: dict[str, str]) -> None:
    """Make `where` the top of an (empty) git checkout, as a project usually is."""
    run(["git", "init", "-q", str(where)], where, env)


def tmp_dir_outside_tmp() -> str:
    return "/var/tmp" if os.access("/var/tmp", os.W_OK) else str(Path.home())


def measure(
    tmp: Path, args: argparse.Namespace, py: str, agentstack: str, node: str | None,
    ruler_cli: Path | None, base: dict[str, str], ready: Path, env_ready: dict[str, str],
    boxed: Path, env_boxed: dict[str, str], loose: Path, before: str | None = None,
) -> dict[str, list[float]]:
    rounds = args.warmup + args.runs
    chain = [["lock"], ["trust", "--yes", "--accept-risk"], ["apply", "--write"]]
    one = ["trust", "--lock", "--apply", "--yes", "--accept-risk"]

    def fresh(kind: str, i: int) -> tuple[Path, dict[str, str]]:
        where = tmp / f"{kind}-{i:03d}"
        project = where / "project"
        (make_ruler if kind == "ruler" else make_agentstack)(project)
        return project, home_env(base, where / "home")

    print(f"preparing {rounds} fresh copies per setup ...")
    cold = {kind: [fresh(kind, i) for i in range(rounds)] for kind in ("chain", "one", "ruler")}
    again = {kind: fresh(kind, rounds) for kind in ("chain", "one", "ruler")}

    def chain_run(project: Path, env: dict[str, str], expect_changes: bool) -> None:
        out = ""
        for step in chain:
            out = run([agentstack, *step], project, env)
        if (agentstack_changed(out) > 0) != expect_changes:
            raise BenchError(f"apply --write changed {agentstack_changed(out)} file(s)")

    def one_run(project: Path, env: dict[str, str], expect_changes: bool) -> None:
        out = run([agentstack, *one], project, env)
        if (agentstack_changed(out) > 0) != expect_changes:
            raise BenchError(f"trust --apply changed {agentstack_changed(out)} file(s)")

    def ruler_run(project: Path, env: dict[str, str]) -> None:
        assert node is not None and ruler_cli is not None
        ruler_ok(run([node, str(ruler_cli), "apply", "--agents", "claude,codex"], project, env))

    chain_run(*again["chain"], True)
    one_run(*again["one"], True)
    if ruler_cli is not None:
        ruler_run(*again["ruler"])

    def actions(i: int) -> dict[str, Callable[[], object]]:
        cases: dict[str, Callable[[], object]] = {
            "python -I -c pass": lambda: run([py, "-I", "-c", "pass"], tmp, base),
            "agentstack --help": lambda: run([agentstack, "--help"], ready, env_ready),
            "agentstack status": lambda: run([agentstack, "status"], ready, env_ready),
            LOOSE: lambda: run([agentstack, "status"], loose, env_ready),
            "agentstack digest": lambda: run([agentstack, "digest"], ready, env_ready),
            "agentstack show --json": lambda: run([agentstack, "show", "--json"], ready, env_ready),
            **{f"agentstack {' '.join(argv)}": (lambda argv=argv: run([agentstack, *argv], ready,
                                                                       env_ready))
               for argv in TABLE},
            "agentstack run -- /bin/true": lambda: run([agentstack, "run", "--", "/bin/true"],
                                                        boxed, env_boxed),
            "lock && trust && apply, cold": lambda: chain_run(*cold["chain"][i], True),
            "trust --lock --apply, cold": lambda: one_run(*cold["one"][i], True),
            "lock && trust && apply, re-apply": lambda: chain_run(*again["chain"], False),
            "trust --lock --apply, re-apply": lambda: one_run(*again["one"], False),
        }
        if before is not None:
            for name, argv, where, env in (
                ("--help", ["--help"], ready, env_ready),
                ("status", ["status"], ready, env_ready),
                ("digest", ["digest"], ready, env_ready),
                ("show --json", ["show", "--json"], ready, env_ready),
                ("run -- /bin/true", ["run", "--", "/bin/true"], boxed, env_boxed),
                *((" ".join(argv), argv, ready, env_ready) for argv in TABLE),
            ):
                cases[f"{args.compare}: agentstack {name}"] = (
                    lambda argv=argv, where=where, env=env: run([before, *argv], where, env)
                )
        if ruler_cli is not None:
            cases["ruler apply, cold"] = lambda: ruler_run(*cold["ruler"][i])
            cases["ruler apply, re-apply"] = lambda: ruler_run(*again["ruler"])
        return cases

    def with_cpu(i: int) -> dict[str, Callable[[], object]]:
        cases = actions(i)
        for name in [n for n in cases if n == ANCHOR or n.split(": ")[-1] in ANCHORED
                     or n.split(", ")[0] in (*SETUPS, "ruler apply")]:
            cases[name] = lambda name=name, action=cases[name]: cpu_timed(name, action, i)
        return cases

    def cpu_timed(name: str, action: Callable[[], object], i: int) -> object:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        result = action()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if i >= args.warmup:
            CPU.setdefault(name, []).append(
                after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
            )
        return result

    return round_robin(with_cpu, args.warmup, args.runs)


ANCHOR = "python -I -c pass"
CPU: dict[str, list[float]] = {}  # CPU seconds of each single command's process tree, per round
# Table commands: through typer and the command's own module of agentstack.cli (not a fast
# path), as `--help` is (typer writes the help).
TABLE = (["keys", "list"], ["secret", "list"], ["trust", "log", "--verify"])
LOOSE = "agentstack status (no .git)"
ANCHORED = ("agentstack status", LOOSE, "agentstack digest", "agentstack show --json",
            "agentstack run -- /bin/true", "agentstack --help",
            *(f"agentstack {' '.join(argv)}" for argv in TABLE))
GOALS = ({name: 4.0 for name in ANCHORED} | {"agentstack run -- /bin/true": 6.0}
         | {"agentstack --help": 10.0} | {f"agentstack {' '.join(argv)}": 10.0 for argv in TABLE})
SETUPS = ("lock && trust && apply", "trust --lock --apply")
# Goals against ruler (issue 32: the one-step setup, cold, at most half of ruler's time).
SETUP_GOALS = {"trust --lock --apply, cold": 0.5}


def report(samples: dict[str, list[float]], args: argparse.Namespace, py: str) -> None:
    med = {name: statistics.median(values) for name, values in samples.items()}
    print(f"\n{args.runs} rounds (after {args.warmup} warm-up), interleaved; wheel install, {py}")
    cpu = {name: statistics.median(values) for name, values in CPU.items()}
    print(f"{'command':<36} {'median':>10} {'p90':>10} {'cpu':>10}")
    for name, values in samples.items():
        used = f" {cpu[name] * 1000:>8.1f}ms" if name in cpu else ""
        print(f"{name:<36} {med[name] * 1000:>8.1f}ms {p90(values) * 1000:>8.1f}ms{used}")
    anchor, cpu_anchor = med[ANCHOR], cpu[ANCHOR]
    print(f"\n{'ratio to python -I -c pass':<44} {'ratio':>7} {'goal':>7}      {'cpu':>6}"
          + (f" {args.compare + ' (before)':>18} {'cpu':>6}" if args.compare else ""))
    for name in ANCHORED:
        ratio = med[name] / anchor
        goal = GOALS[name]
        old = med.get(f"{args.compare}: {name}")
        old_cpu = cpu.get(f"{args.compare}: {name}")
        print(f"{name:<44} {ratio:>6.1f}x {'<=' + format(goal, '.0f') + 'x':>7} "
              f"{'PASS' if ratio <= goal else 'MISS'} {cpu[name] / cpu_anchor:>5.1f}x"
              + (f" {old / anchor:>17.1f}x" if old is not None else "")
              + (f" {old_cpu / cpu_anchor:>5.1f}x" if old_cpu is not None else ""))
    if "ruler apply, cold" in med:
        print(f"\n{'ratio to ruler apply --agents claude,codex':<44} {'ratio':>7} {'goal':>7}"
              f"      {'cpu':>6}")
        for setup in SETUPS:
            for when in ("cold", "re-apply"):
                name, anchor_name = f"{setup}, {when}", f"ruler apply, {when}"
                ratio = med[name] / med[anchor_name]
                goal = SETUP_GOALS.get(name, 1.0)
                cpu_ratio = cpu[name] / cpu[anchor_name]
                print(f"{name:<44} {ratio:>6.2f}x {'<=' + format(goal, 'g') + 'x':>7} "
                      f"{'PASS' if ratio <= goal else 'MISS'} {cpu_ratio:>5.2f}x")
    print()
    for key, value in machine([]):
        print(f"{key:<10} {value}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        sys.exit(1)
    except subprocess.CalledProcessError as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        sys.exit(1)

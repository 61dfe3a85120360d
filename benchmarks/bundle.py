"""share -> receive (-> release) of generated setups, each step a real `agentstack` process,
against `tar czf` / `tar xzf` of the same tree in the same run.

    .venv/bin/python benchmarks/bundle.py [--files 1000,10000] [--big] [--bytes 400]
                                          [--release] [--keep DIR]

For each size N: a local skill of N files (`--bytes` each on average; half random bytes, half
text, so it compresses like a real tree) in 100 directories, locked and trusted in one
AGENTSTACK_HOME (in process: what is measured is sharing, not trusting), a key generated there and
trusted in a second home. Then, once each (a shared machine: one run per figure), as child
processes measured by wait4 (CPU = user + system; peak memory = the child's maxrss):

* `agentstack share -o B` against `tar czf` of the project (the same files, gzip -6 as share);
* `agentstack receive B` in the second home against `tar xzf` of that tarball into an empty
  directory, run just before and just after receive (the mean is the anchor: file creation's
  system time swings with the machine's load) (the goal of issue 32: receive <= 2x tar xzf, peak memory flat in the file count);
* with --release, `agentstack quarantine release ID --into DIR --yes` (re-verifies the copy,
  writes the project, proves the lock; no anchor).

Prints one row per step with CPU seconds, wall seconds, the ratio to its anchor and maxrss, and
the load average before and after each size. --big adds 100,000 files. Leaves nothing behind
unless --keep. Exit 0 unless a command fails.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, BenchError

PY = sys.executable


Run = tuple[float, float, int, bytes, float]


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> Run:
    """(CPU seconds, wall seconds, maxrss in KiB, stdout, user CPU seconds) of one child;
    BenchError on failure."""
    os.sync()  # the previous step's dirty pages are not this one's to wait for
    start = time.perf_counter()
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=errors)
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        errors.seek(0)
        err = errors.read()
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = (out + err).decode("utf-8", "replace")[-2000:]
        raise BenchError(f"{' '.join(argv[:5])} exited {proc.returncode}:\n{tail}")
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss, out, usage.ru_utime


def generate(root: Path, files: int, average: int) -> None:
    rng = random.Random(7)
    skill = root / "skills/big"
    skill.mkdir(parents=True)
    (root / "agentstack.toml").write_text(
        '[project]\nname = "bench"\n\n[skills.big]\npath = "skills/big"\n'
    )
    (skill / "SKILL.md").write_text("---\nname: big\ndescription: b\n---\n")
    words = ["lorem", "ipsum", "dolor", "sit", "amet"]
    for index in range(files - 1):
        directory = skill / f"d{index % 100:02d}"
        directory.mkdir(exist_ok=True)
        size = rng.randint(average // 2, average * 3 // 2)
        data = (rng.randbytes(size) if index % 2
                else " ".join(rng.choice(words) for _ in range(size // 6 + 1)).encode()[:size])
        (directory / f"f{index}.txt").write_bytes(data)


def environment(home: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTSTACK_")}
    env.update(AGENTSTACK_HOME=str(home), AGENTSTACK_CACHE=str(cache), HOME=str(home.parent),
               COLUMNS="100", PYTHONPATH=f"{REPO}:{REPO / 'adapters'}")
    return env


def lock_and_trust(project: Path, env: dict[str, str]) -> None:
    """In a child (its own AGENTSTACK_HOME): lock, and record trust as `trust` does, without the
    review's work (what is measured here is sharing)."""
    code = (
        "from pathlib import Path\n"
        "from agentstack.lock.command import run_lock\n"
        "from agentstack.lock.resolve import fresh_lock\n"
        "from agentstack.manifest.load import load_manifest\n"
        "from agentstack.consent.document import consent_digest, consent_document\n"
        "from agentstack.trust.review import TrustStore\n"
        "p = Path('.').resolve()\n"
        "assert run_lock(project=p, check=False, frozen=False, update=False, as_json=False) == 0\n"
        "m = load_manifest(p); lock = fresh_lock(p, m); d = consent_document(m, lock)\n"
        "TrustStore().trust(p, consent_digest(d), d, 'b3:' + '0' * 64)\n"
    )
    run([PY, "-c", code], project, env)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(n: int, average: int, where: Path, release: bool) -> list[tuple[str, float, float,
                                                                                 int, str, float]]:
    project = where / "project"
    generate(project, n, average)
    alice = environment(where / "alice/.agentstack", where / "alice/cache")
    bob = environment(where / "bob/.agentstack", where / "bob/cache")
    print(f"\n{n:,} files: load {load()}", flush=True)
    lock_and_trust(project, alice)
    public = run([PY, "-m", "agentstack", "keys", "generate", "k"], project, alice)[3]
    run([PY, "-m", "agentstack", "keys", "trust", "alice", public.decode().strip()], where, bob)
    out = where / "b.astack"
    share = run([PY, "-m", "agentstack", "share", "-o", str(out), "--key", "k"], project, alice)
    tarball = where / "t.tar.gz"
    czf = run(["tar", "czf", str(tarball), "-C", str(project), "."], where, alice)

    def untar() -> Run:
        (where / "x").mkdir()
        try:
            return run(["tar", "xzf", str(tarball), "-C", str(where / "x")], where, alice)
        finally:
            shutil.rmtree(where / "x")

    # File creation's system time swings with the machine's load: tar xzf just before and just
    # after receive, and the mean of the two is the anchor.
    before = untar()
    received = run([PY, "-m", "agentstack", "receive", str(out), "--json"], where, bob)
    after = untar()
    xzf = ((before[0] + after[0]) / 2, (before[1] + after[1]) / 2, max(before[2], after[2]), b"",
           (before[4] + after[4]) / 2)
    print(f"  tar xzf before / after receive: {before[0]:.2f} / {after[0]:.2f} s CPU (user "
          f"{before[4]:.2f} / {after[4]:.2f})", flush=True)
    import json

    ident = json.loads(received[3])["id"]
    rows = [
        ("share", *share[:3], "tar czf", czf[0]),
        ("receive", *received[:3], "tar xzf", xzf[0]),
        ("tar czf", *czf[:3], "-", 0.0),
        ("tar xzf", *xzf[:3], "-", 0.0),
    ]
    print(f"  receive user {received[4]:.2f} s + system {received[0] - received[4]:.2f} s; "
          f"tar xzf user {xzf[4]:.2f} s + system {xzf[0] - xzf[4]:.2f} s", flush=True)
    if release:
        into = where / "into"
        rel = run([PY, "-m", "agentstack", "quarantine", "release", ident, "--into", str(into),
                   "--yes"], where, bob)  # fmt: skip
        rows.append(("release", *rel[:3], "tar xzf", xzf[0]))
    print(f"  bundle {out.stat().st_size / 1e6:.1f} MB, tarball {tarball.stat().st_size / 1e6:.1f}"
          " MB", flush=True)
    for name, cpu, wall, rss, anchor, base in rows:
        ratio = f"{cpu / base:6.2f}x {anchor}" if base > 0 else " " * 7 + "-"
        print(f"  {name:8} {cpu:8.2f} s CPU {wall:8.2f} s wall  {ratio:16}  maxrss "
              f"{rss / 1024:7.1f} MB", flush=True)
    print(f"  load after: {load()}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", default="1000,10000")
    parser.add_argument("--big", action="store_true", help="add 100,000 files")
    parser.add_argument("--bytes", type=int, default=400, help="average file size")
    parser.add_argument("--release", action="store_true")
    parser.add_argument("--keep", type=Path, default=None)
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.files.split(",") if x] + ([100_000] if args.big else [])
    tmp = Path(tempfile.mkdtemp(prefix="bundle-bench-")) if args.keep is None else args.keep
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        for n in sizes:
            measure(n, args.bytes, tmp / f"n{n}", args.release)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    print("\ngoal (issue 32): share/receive of 100,000 files work; receive <= 2x tar xzf; peak "
          "memory flat in the file count")
    print(f"load avg at the end: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

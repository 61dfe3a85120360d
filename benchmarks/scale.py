"""Benchmark agentstack at the sizes users have: curves as CPU ratios to anchors of the same run.

    python benchmarks/scale.py [--files 1000,10000] [--servers 10,100,1000] [--big]
                               [--only skill,coderoot,monorepo,servers,servers-apart]
                               [--src DIR]
                               [--profile DIR] [--keep DIR]

Setups (each in a fresh temporary directory with its own HOME, AGENTSTACK_HOME, AGENTSTACK_CACHE;
the project is the top of an empty git checkout; harnesses Claude Code and Codex):

* skill N:    one local skill of N small text files (100 directories);
* coderoot N: one stdio server whose script sits in a code root of N files;
* monorepo N: a project in a checkout of N files that nothing pins (one small skill);
* servers S:  S stdio servers whose scripts share one directory (`servers/sNNNN.py`): one code
              root all of them load, pinned once (the lock's `code_roots`);
* servers-apart S: S stdio servers each in its own directory (`servers/sNNNN/main.py`).

Each command runs once (a shared machine: one run per figure, no loops) and is measured in CPU
seconds (user + system of the child, getrusage), the anchors in the same run:

* skill setups also `share` (after trust) and `receive` of the bundle in a second home, against
  `tar czf` of the project and `tar xzf` of that (benchmarks/bundle.py's measure, with maxrss);
* first lock (lock with no lock and an empty cache), re-lock (unchanged), re-lock after one
  file of the tree was edited (anchor: the unchanged re-lock plus `b3sum` of that file), then `trust --yes`,
  `apply --write` (first), `apply --write` (unchanged), `status`, the guard (one steady call
  of the PreToolUse command apply rendered for Claude Code, after one call that may settle);
* anchors: `cp -r` of the skill tree twice (apply writes two harnesses' copies), `git status` of
  the same tree (committed; before apply, and again after it: apply lists every rendered file in
  `.git/info/exclude`), `python -I -c pass` and `python -I` lstat-ing every path of the guard's snapshot.

Prints one row per command and size with its CPU seconds and its ratio to its anchor, and the
goal of issue 32 where there is one, and the load average before and after each setup. --big adds
100,000-file setups (minutes, gigabytes: run sparingly). --src DIR runs the agentstack source in
DIR (e.g. an exported older commit) instead of this checkout's, with the same interpreter, for a
before/after. --profile DIR writes a cProfile summary (top functions by cumulative time) of trust,
unchanged apply and status of the largest skill setup into DIR, and of `status` of the largest
code root and monorepo setups (named by --profile-label, default "after-"). Exit 0 unless a
command fails.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pstats
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, BenchError, write

PY = sys.executable


def cpu_of(argv: list[str], cwd: Path, env: dict[str, str], stdin: bytes | None = None,
           ok: tuple[int, ...] = (0,)) -> float:
    """CPU seconds (user + system) of running argv once; BenchError when it exits otherwise."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, cwd=cwd, env=env, input=stdin, capture_output=True,
                          stdin=None if stdin is not None else subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in ok:
        tail = (proc.stdout + proc.stderr).decode("utf-8", "replace")[-3000:]
        raise BenchError(f"{' '.join(argv[:6])} (in {cwd}) exited {proc.returncode}:\n{tail}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


class Setup:
    def __init__(self, where: Path, src: Path | None) -> None:
        self.where = where
        self.project = where / "project"
        self.home = where / "home"
        self.home.mkdir(parents=True)
        self.project.mkdir(parents=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AGENTSTACK_", "CLAUDE_", "CODEX_", "XDG_"))}
        env.update(HOME=str(self.home), AGENTSTACK_HOME=str(self.home / ".config/agentstack"),
                   AGENTSTACK_CACHE=str(self.home / ".cache/agentstack"),
                   XDG_CONFIG_HOME=str(self.home / ".config"),
                   XDG_CACHE_HOME=str(self.home / ".cache"), COLUMNS="100",
                   GIT_CONFIG_NOSYSTEM="1")
        if src is not None:
            env["PYTHONPATH"] = f"{src}:{src / 'adapters'}"
        self.env = env
        subprocess.run(["git", "init", "-q", str(self.project)], check=True, env=env)

    def cli(self, *args: str) -> list[str]:
        return [PY, "-m", "agentstack", *args]

    def cpu(self, *args: str) -> float:
        return cpu_of(self.cli(*args), self.project, self.env)


def text_tree(top: Path, count: int, seed: int, suffix: str = ".md") -> None:
    rng = random.Random(seed)
    for i in range(count):
        d = top / f"d{i % 100:02d}" / f"s{(i // 100) % 10}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}{suffix}").write_text(f"line {i}\n" * rng.randint(1, 40), encoding="utf-8")


SKILL_MD = "---\nname: {name}\ndescription: A generated skill.\n---\n\n# {name}\n"
HEAD = '[project]\nname = "scale"\nharnesses = ["claude-code", "codex"]\n\n'


def make_skill(s: Setup, n: int) -> Path:
    top = s.project / "skills/big"
    write(top / "SKILL.md", SKILL_MD.format(name="big"))
    text_tree(top, n - 1, 1)
    write(s.project / "agentstack.toml", HEAD + '[skills.big]\npath = "skills/big"\n')
    return top


def make_coderoot(s: Setup, n: int) -> Path:
    top = s.project / "tools/server"
    write(top / "main.py", "import sys\nsys.stdout.write('x')\n")
    text_tree(top / "lib", n - 1, 2, ".py")
    write(s.project / "agentstack.toml",
          HEAD + '[servers.tool]\ncommand = "python3"\nargs = ["tools/server/main.py"]\n')
    return top


def make_monorepo(s: Setup, n: int) -> Path:
    text_tree(s.project / "src", n, 3, ".py")
    write(s.project / "skills/small/SKILL.md", SKILL_MD.format(name="small"))
    write(s.project / "agentstack.toml", HEAD + '[skills.small]\npath = "skills/small"\n')
    return s.project / "skills/small"


def make_servers(s: Setup, n: int) -> Path:
    parts = [HEAD]
    for i in range(n):
        write(s.project / f"servers/s{i:04d}.py", f"print({i})\n")
        parts.append(f'[servers.s{i:04d}]\ncommand = "python3"\nargs = ["servers/s{i:04d}.py"]\n')
    write(s.project / "agentstack.toml", "\n".join(parts))
    return s.project / "servers"


def make_servers_apart(s: Setup, n: int) -> Path:
    parts = [HEAD]
    for i in range(n):
        write(s.project / f"servers/s{i:04d}/main.py", f"print({i})\n")
        parts.append(f'[servers.s{i:04d}]\ncommand = "python3"\n'
                     f'args = ["servers/s{i:04d}/main.py"]\n')
    write(s.project / "agentstack.toml", "\n".join(parts))
    return s.project / "servers"


MAKERS = {"skill": make_skill, "coderoot": make_coderoot, "monorepo": make_monorepo,
          "servers": make_servers, "servers-apart": make_servers_apart}


def guard_argv(s: Setup) -> list[str]:
    import shlex

    settings = json.loads((s.project / ".claude/settings.local.json").read_text())
    (group,) = settings["hooks"]["PreToolUse"]
    (hook,) = group["hooks"]
    argv = shlex.split(hook["command"])
    return [PY, *argv[1:]]


def snapshot_paths(s: Setup) -> list[str]:
    from agentstack._guard import Deny, load_snapshot

    found = list((s.home / ".config/agentstack").rglob("guard.json"))
    for path in found:
        try:
            return sorted(load_snapshot(str(path)).get("files", {}))
        except (ValueError, Deny):
            continue
    return []


LSTAT = "import os,sys\nfor p in open(sys.argv[1]).read().split('\\0'):\n    try: os.lstat(p)\n" \
        "    except OSError: pass\n"


def profile(s: Setup, out: Path, label: str, *args: str) -> None:
    raw = s.where / f"{label}.prof"
    # The command through the CLI's dispatcher (entry.main ends with os._exit on its fast paths,
    # which would leave no profile behind).
    code = ("import cProfile, sys\nfrom agentstack.cli import dispatch\n"
            "from agentstack.entry import outcome\n"
            f"cProfile.run({f'outcome(lambda: dispatch({list(args)!r}))'!r}, {str(raw)!r})\n")
    cpu_of([PY, "-c", code], s.project, s.env, ok=(0, 1))
    if not raw.exists():
        raise BenchError(f"no profile of {args} was written")
    text = io.StringIO()
    stats = pstats.Stats(str(raw), stream=text).strip_dirs()
    stats.sort_stats("cumulative").print_stats(30)
    stats.sort_stats("tottime").print_stats(12)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{label}.txt").write_text(text.getvalue(), encoding="utf-8")


def share_rows(s: Setup, where: Path) -> list[tuple[str, float, str, float]]:
    """`share` of the trusted setup and `receive` of it in a second home, against `tar czf` of
    the project and `tar xzf` of that (just before and after receive: the mean), with maxrss."""
    from bundle import run as child

    bob = dict(s.env, AGENTSTACK_HOME=str(where / "bob/agentstack"),
               AGENTSTACK_CACHE=str(where / "bob/cache"))
    public = child(s.cli("keys", "generate", "k"), s.project, s.env)[3].decode().strip()
    child(s.cli("keys", "trust", "alice", public), where, bob)
    out = where / "b.astack"
    shared = child(s.cli("share", "-o", str(out), "--key", "k"), s.project, s.env)
    tarball = where / "t.tar.gz"
    czf = child(["tar", "czf", str(tarball), "--exclude=.git", "-C", str(s.project), "."], where,
                s.env)

    def untar() -> float:
        (where / "x").mkdir()
        try:
            return child(["tar", "xzf", str(tarball), "-C", str(where / "x")], where, s.env)[0]
        finally:
            shutil.rmtree(where / "x")

    before = untar()
    received = child(s.cli("receive", str(out)), where, bob)
    xzf = (before + untar()) / 2
    print(f"  share maxrss {shared[2] / 1024:.1f} MB, receive maxrss {received[2] / 1024:.1f} MB",
          flush=True)
    for path in (out, tarball):
        path.unlink()
    shutil.rmtree(where / "bob", ignore_errors=True)
    return [("share", shared[0], "tar czf", czf[0]), ("receive", received[0], "tar xzf", xzf)]


def measure(kind: str, n: int, where: Path, args: argparse.Namespace) -> list[tuple[str, float,
                                                                                     str, float]]:
    s = Setup(where, args.src)
    tree = MAKERS[kind](s, n)
    # Committed, as users have it (git status then stats every file); every file's times in the
    # past and one second waited, so the stat cache's racy-timestamp rule forces no re-hash.
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@example.com"]
    cpu_of([*git, "add", "-A"], s.project, s.env)
    cpu_of([*git, "commit", "-qm", "setup"], s.project, s.env)
    past = time.time() - 10
    for directory, _dirs, names in os.walk(s.project):
        for name in names:
            os.utime(os.path.join(directory, name), (past, past))
    time.sleep(1.2)
    rows: list[tuple[str, float, str, float]] = []
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\n{kind} {n:,}: load {load}", flush=True)
    try:
        first = s.cpu("lock")
    except BenchError as exc:
        print(f"  first lock fails: {str(exc).splitlines()[1:2]}", flush=True)
        return rows
    relock = s.cpu("lock")
    # One file of the tree edited (its size changes): the re-lock hashes it again, renders the
    # lock and names what changed; anchor: an unchanged re-lock plus hashing that file (b3sum).
    edited = min(p for p in tree.rglob("*") if p.is_file())
    with edited.open("ab") as handle:
        handle.write(b"one more line\n")
    relock_edit = s.cpu("lock")
    hash_one = cpu_of(["b3sum", "--no-names", str(edited)], s.project, s.env)
    time.sleep(1.2)  # out of the racy window again: the next lock records the tree
    s.cpu("lock")
    cpu_of(["git", "status", "--porcelain"], s.project, s.env)  # refreshes the index once
    git_status = cpu_of(["git", "status", "--porcelain"], s.project, s.env)  # before apply
    # Servers: the review's work, without starting each server to list its tools (that is one
    # confined process per server, the relay's cost, not the review's: --pins-at-first-run).
    starts = ("--pins-at-first-run",) if kind.startswith("servers") else ()
    trust = s.cpu("trust", "--yes", "--accept-risk", *starts)
    prof = args.profile is not None and kind == "skill" and n == max(args.files)
    cp_dst = where / "cp"
    cp_dst.mkdir()
    cp = sum(cpu_of(["cp", "-r", str(tree), str(cp_dst / c)], where, s.env) for c in "ab")
    shutil.rmtree(cp_dst)
    apply_first = s.cpu("apply", "--write")
    apply_again = s.cpu("apply", "--write")
    status = cpu_of(s.cli("status"), s.project, s.env, ok=(0, 1))
    git_after = cpu_of(["git", "status", "--porcelain"], s.project, s.env)
    event = json.dumps({"cwd": str(s.project), "hook_event_name": "PreToolUse",
                        "tool_name": "Bash", "tool_input": {"command": "ls"},
                        "session_id": "bench"}).encode()
    hook = guard_argv(s)
    cpu_of(hook, s.project, s.env, event, ok=(0, 2))
    guard = min(cpu_of(hook, s.project, s.env, event, ok=(0, 2)) for _ in range(3))
    bare = min(cpu_of([PY, "-I", "-c", "pass"], s.project, s.env) for _ in range(3))
    listing = where / "paths"
    paths = snapshot_paths(s)
    listing.write_text("\0".join(paths))
    lstat = min(cpu_of([PY, "-I", "-c", LSTAT, str(listing)], s.project, s.env)
                for _ in range(3))
    if kind == "skill":
        rows += share_rows(s, where)
    rows += [
        ("first lock", first, "-", 0.0),
        ("re-lock, unchanged", relock, "first lock", first),
        ("re-lock, one file edited", relock_edit, "re-lock + b3sum of it", relock + hash_one),
        ("trust --yes" + (" (pins at 1st run)" if starts else ""), trust, "first lock", first),
        ("apply --write, first", apply_first, "cp -r x2", cp),
        ("apply --write, unchanged", apply_again, "re-lock", relock),
        ("status", status, "git status", git_status),
        ("git status after apply", git_after, "git status", git_status),
        ("guard, steady call", guard, f"py -I + lstat {len(paths)}", lstat),
        ("guard, steady call", guard, "python -I -c pass", bare),
    ]
    for name, value, anchor, base in rows:
        ratio = f"{value / base:6.2f}x" if base > 0 and value == value else "      "
        print(f"  {name:34} {value:8.3f} s   {ratio}  {anchor} ({base:.3f} s)", flush=True)
    if args.profile is not None and kind != "skill" and n == max(args.files):
        # The status of the other setups (a code root, a monorepo): the steady one, as a user
        # who runs it twice meets it.
        profile(s, args.profile, f"{args.profile_label}status-{kind}-{n}", "status")
    if prof:  # after the figures: a profiled run costs several times its CPU
        assert args.profile is not None
        profile(s, args.profile, f"after-status-{kind}-{n}", "status")
        profile(s, args.profile, f"after-apply-unchanged-{kind}-{n}", "apply", "--write")
        # A first trust again: no trust log, no content store.
        shutil.rmtree(s.home / ".config/agentstack", ignore_errors=True)
        shutil.rmtree(s.home / ".cache/agentstack/content", ignore_errors=True)
        profile(s, args.profile, f"after-trust-{kind}-{n}", "trust", "--yes", "--accept-risk")
    print(f"  load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", default="1000,10000")
    parser.add_argument("--servers", default="10,100,1000")
    parser.add_argument("--big", action="store_true", help="add the 100,000-file setups")
    parser.add_argument("--only", default="skill,coderoot,monorepo,servers,servers-apart")
    parser.add_argument("--src", type=Path, default=None)
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument("--keep", type=Path, default=None)
    parser.add_argument("--profile-label", default="after-",
                        help="prefix of the status profiles of the code root and monorepo setups")
    args = parser.parse_args(argv)
    args.files = [int(x) for x in args.files.split(",") if x] + ([100_000] if args.big else [])
    servers = [int(x) for x in args.servers.split(",") if x]
    src = args.src.resolve() if args.src else REPO
    print(f"agentstack source: {src}; python: {PY}")
    tmp = Path(tempfile.mkdtemp(prefix="scale-bench-")) if args.keep is None else args.keep
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        for kind in args.only.split(","):
            for n in servers if kind.startswith("servers") else args.files:
                measure(kind, n, tmp / f"{kind}-{n}", args)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    print("\ngoals (issue 32): trust <= 2x first lock; re-lock after a one-file edit <= 2x"
          " (re-lock + hashing that file);"
          " apply first <= 3x cp -r; apply unchanged"
          " <= 2x re-lock; status <= 1.5x git status; guard <= 1.2x (py -I + lstat), <= 1.5x"
          " python -I -c pass in a monorepo; 1,000 servers: each under 1 s CPU; receive <= 2x tar xzf")
    print(f"load avg at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

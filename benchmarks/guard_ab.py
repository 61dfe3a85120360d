"""The guard's steady call from two agentstack sources on setups `scale.py --keep` left, interleaved.

    python benchmarks/guard_ab.py BEFORE_SETUP BEFORE_SRC AFTER_SETUP AFTER_SRC [--rounds 7]

e.g. `scale.py --only skill --files 10000 --src /tmp/main-export --keep /tmp/b` and the same
without `--src` into /tmp/a, then `guard_ab.py /tmp/b/skill-10000 /tmp/main-export
/tmp/a/skill-10000 .`: each setup keeps the snapshot its own source wrote (a format the other may
not read), and its rendered PreToolUse command is run with that source on PYTHONPATH. In
`--rounds` interleaved rounds: each guard (a `Bash` call), `python -I` lstat-ing every path of
that setup's snapshot (the `paths` file scale.py leaves), and `python -I -c pass`; CPU seconds of
the child, the fastest of the rounds, with the ratios and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
from pathlib import Path

PY = sys.executable
LSTAT = ("import os,sys\nfor p in open(sys.argv[1]).read().split('\\0'):\n    try: os.lstat(p)\n"
         "    except OSError: pass\n")


def cpu(argv: list[str], cwd: Path, env: dict[str, str], stdin: bytes | None = None) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, cwd=cwd, env=env, input=stdin, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv[:4]} exited {done.returncode}: {done.stderr[-800:]!r}")
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("before_setup", "before_src", "after_setup", "after_src"):
        parser.add_argument(name, type=Path)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    cases = []
    for label, setup, src in (("before", args.before_setup, args.before_src),
                              ("after", args.after_setup, args.after_src)):
        settings = json.loads((setup / "project/.claude/settings.local.json").read_text())
        (group,) = settings["hooks"]["PreToolUse"]
        (hook,) = group["hooks"]
        argv = [PY, *shlex.split(hook["command"])[1:]]
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTSTACK_")}
        env.update(HOME=str(setup / "home"), PYTHONPATH=str(src.resolve()))
        event = json.dumps({"cwd": str(setup / "project"), "hook_event_name": "PreToolUse",
                            "tool_name": "Bash", "tool_input": {"command": "ls"},
                            "session_id": "bench"}).encode()
        cpu(argv, setup / "project", env, event)  # a call that may settle the snapshot
        cases.append((label, setup, argv, env, event, []))
    bare: list[float] = []
    lstat: dict[str, list[float]] = {label: [] for label, *_ in cases}
    for _ in range(args.rounds):
        for label, setup, argv, env, event, times in cases:
            times.append(cpu(argv, setup / "project", env, event))
            lstat[label].append(cpu([PY, "-I", "-c", LSTAT, str(setup / "paths")], setup, env))
        bare.append(cpu([PY, "-I", "-c", "pass"], Path("/"), dict(os.environ)))
    anchor = min(bare)
    print(f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}; python -I -c pass {anchor:.3f} s")
    for label, setup, _argv, _env, _event, times in cases:
        guard, paths = min(times), min(lstat[label])
        print(f"  {label:6} {setup.name:16} guard {guard:.3f} s  {guard / paths:5.2f}x "
              f"py -I + lstat ({paths:.3f} s)  {guard / anchor:5.2f}x python -I -c pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())

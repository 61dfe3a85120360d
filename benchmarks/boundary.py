"""Benchmark `agentstack check --boundary` (10,000 rules) against `agentstack digest` on examples/full.

    python benchmarks/boundary.py [--runs 20] [--warmup 2] [--rules 10000]

Copies examples/full into a throw-away directory (its own HOME, AGENTSTACK_HOME and
AGENTSTACK_CACHE), locks it, writes a boundary of N rules spread over every domain (the rules the
example needs among them, so the answer is `within_boundary` and every rule is looked at), then
times, interleaved round-robin in one run:

* `agentstack digest` (the baseline: the same start-up, manifest, lock and consent document);
* `agentstack check --boundary FILE` (all of that, plus parsing the boundary and the check);
* the check alone, in process (`check_document` on an already built consent document);
* parsing the boundary file and the check, in process (the goal: under 100 ms for 10,000 rules).

Prints medians, p90, the ratio check / digest (the goal: under 10x) and the in-process figures as a
ratio of the digest command too, so a loaded machine shifts both sides. Exit 0 whatever the figures;
non-zero only when something fails (including a check that does not answer within_boundary).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

from common import REPO, BenchError, check_output, check_run, in_workdir, machine, p90, round_robin


def boundary_text(rules: int, project: Path) -> str:
    """`rules` rules: what examples/full needs, then filler spread over every domain."""
    needed = {
        "read": [],
        "write": [str(project)],
        "connect": ["api.anthropic.com", "*.example.invalid:443"],
        "remote": ["docs.example.invalid:443"],
        "sandbox_env": ["LANG", "TERM"],
        "server_env": ["NOTES_*"],
        "executables": ["python3", "sh", "hooks/*"],
        "permissions": ["Bash(git status)", "Bash(git log:*)"],
    }
    filler = rules - sum(len(v) for v in needed.values()) - 4  # 2 secrets + 2 passthrough keys
    per = max(filler // 8, 0)
    for index, key in enumerate(needed):
        for i in range(per + (1 if index < filler - per * 8 else 0)):
            needed[key].append(
                {
                    "read": f"/srv/data{i}",
                    "write": f"/srv/out{i}",
                    "connect": f"host{i}.example.net:{1 + i % 65535}",
                    "remote": f"mcp{i}.example.net:443",
                    "sandbox_env": f"VAR_{i}",
                    "server_env": f"SERVER_VAR_{i}",
                    "executables": f"/opt/tool{i}/bin/tool",
                    "permissions": f"Bash(tool{i}:*)",
                }[key]
            )

    def strings(items: list[str]) -> str:
        return "[" + ", ".join('"' + s.replace('"', '\\"') + '"' for s in items) + "]"

    return (
        f"[filesystem]\nread = {strings(needed['read'])}\nwrite = {strings(needed['write'])}\n"
        f"[network]\nconnect = {strings(needed['connect'])}\n"
        '[secrets]\nnotes-token = ["servers.notes"]\ndocs-token = ["servers.docs"]\n'
        f"[environment]\nsandbox = {strings(needed['sandbox_env'])}\n"
        f"servers = {strings(needed['server_env'])}\n"
        f"[commands]\nexecutables = {strings(needed['executables'])}\nshell = true\n"
        f"[servers]\nremote = {strings(needed['remote'])}\n"
        f"[permissions]\nallow = {strings(needed['permissions'])}\n"
        '[settings]\npassthrough = { claude-code = ["cleanupPeriodDays"], '
        'codex = ["model_reasoning_effort"] }\n'
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rules", type=int, default=10_000)
    parser.add_argument("--keep", type=Path, help="work here instead of a temporary directory")
    args = parser.parse_args()

    def body(tmp: Path) -> int:
        env = dict(os.environ, HOME=str(tmp / "home"), AGENTSTACK_HOME=str(tmp / "state"),
                   AGENTSTACK_CACHE=str(tmp / "cache"))
        env.pop("XDG_CONFIG_HOME", None)
        (tmp / "home").mkdir()
        project = tmp / "full"
        shutil.copytree(REPO / "examples" / "full", project, symlinks=True)
        check_run(["sh", str(project / "make-skill-repo.sh")], project, env)
        agentstack = [sys.executable, "-m", "agentstack"]
        check_run([*agentstack, "lock"], project, env)
        boundary = tmp / "boundary.toml"
        boundary.write_text(boundary_text(args.rules, project.resolve()), encoding="utf-8")
        verdict = check_output([*agentstack, "check", "--boundary", str(boundary)], project, env)
        if not verdict.startswith("within_boundary"):
            raise BenchError(f"expected within_boundary, got:\n{verdict}")

        sys.path.insert(0, str(REPO))
        os.environ.update(env)
        from agentstack.consent.boundary import check_document, load_boundary, rule_count
        from agentstack.consent.document import consent_document
        from agentstack.lock.resolve import fresh_lock
        from agentstack.manifest.load import load_manifest

        manifest = load_manifest(project)
        document = consent_document(manifest, fresh_lock(project, manifest))
        home = str((tmp / "home").resolve())
        compiled = load_boundary(boundary, home=home)
        print(f"  the boundary file has {rule_count(compiled):,} rules")

        samples = round_robin(
            lambda _i: {
                "agentstack digest": lambda: check_run([*agentstack, "digest"], project, env),
                "agentstack check --boundary": lambda: check_run(
                    [*agentstack, "check", "--boundary", str(boundary)], project, env
                ),
                "check alone (in process)": lambda: check_document(
                    document, project, compiled, home=home
                ),
                "parse + check (in process)": lambda: check_document(
                    document, project, load_boundary(boundary, home=home), home=home
                ),
            },
            args.warmup,
            args.runs,
        )
        medians = {name: statistics.median(times) for name, times in samples.items()}
        print(f"boundary check of examples/full against {args.rules} rules, "
              f"{args.runs} runs (+{args.warmup} warm-up), interleaved")
        for name, times in samples.items():
            print(f"  {name:<30} median {medians[name] * 1000:8.2f} ms   p90 "
                  f"{p90(times) * 1000:8.2f} ms")
        ratio = medians["agentstack check --boundary"] / medians["agentstack digest"]
        print(f"  ratio check / digest: {ratio:.2f}x (goal: under 10x)")
        alone = medians["parse + check (in process)"]
        print(f"  parse + check in process: {alone * 1000:.1f} ms (goal: under 100 ms), "
              f"{alone / medians['agentstack digest']:.2f}x the digest command")
        for key, value in machine([]):
            print(f"  {key}: {value}")
        return 0

    return in_workdir(args.keep, "agentstack-bench-boundary-", body)


if __name__ == "__main__":
    raise SystemExit(main())

"""The kernel sandbox behind `agentstack run`, `why` and `doctor`.

- `policy`: `SandboxPolicy`, the one policy object (standard library only).
- `resolve`: `resolve_policy(manifest.sandbox, root, harness=...)` builds it from the manifest and
  the system and harness profiles (`profiles`).
- `runner`: `run_confined(root, policy, argv, env, interactive)` enforces it: Landlock through
  nono-py, agentstack's seccomp blocklist (`seccomp`), an allowlisted environment and nono's
  credential proxy; `launch` is the launcher that confines itself and execs the command.
- `gate`: agentstack's filter in front of nono's proxy (no tunnels but to allowed domains);
- `private_state`: the harness's private per-project user-level state; `credentials`: the one
  credential deny list (standard library only);
- `watch`: what `run` compares before and after a session (git execution state, on-open files);
  `rollback`: what git executes, put back before `run` returns;
- `abi`: the fail-closed table of Landlock ABI versions (refused, degraded, covered);
- `native`: the policy rendered into Claude Code's and Codex's own sandboxes (the third plane);
- `doctor` and `verify`: what this machine supports, and the confinement suite that proves it.

Import the submodules directly; this package imports nothing heavy on its own.
"""

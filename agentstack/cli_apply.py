"""`apply`: render each harness's native config from the trusted declaration."""

from __future__ import annotations

from agentstack.cli_base import JSON, USER, Opt, app, root_dir, store, use_user


@app.command(
    Opt(("--harness",), "harness", "Only this harness; repeatable.", kind="list"),
    Opt(("--write",), "write", "Write the files (only when trusted).", kind="flag"),
    Opt(("--check",), "check", "Exit 1 if anything would change.", kind="flag"),
    Opt(("--force",), "force", "Overwrite hand edits (backed up first).", kind="flag"),
    Opt(
        ("--no-git-hooks",),
        "no_git_hooks",
        "Do not install the git hooks that re-check the surface after pull/checkout/merge/rebase.",
        kind="flag",
    ),
    JSON,
    USER,
)
def apply(
    harness: list[str] | None = None,
    write: bool = False,
    check: bool = False,
    force: bool = False,
    no_git_hooks: bool = False,
    as_json: bool = False,
    user: bool = False,
) -> int:
    """Render native harness config: without --write, show the planned diff and write nothing."""
    from agentstack.apply_command import run_apply
    from agentstack.consent import current

    use_user(user)
    root = root_dir()
    _, _, document, digest = current(root)
    code, _ = run_apply(
        root, document, digest, store(), harness=harness, write=write,
        check=check, force=force, as_json=as_json, git_hooks=not (no_git_hooks or user),
    )  # fmt: skip
    return code

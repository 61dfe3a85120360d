"""`apply` as one function (the `apply` command and `trust --apply` both call it): plan the
native harness files for a consent digest, and write them only while that digest is trusted."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from agentstack.errors import Refused
from agentstack.output import echo, print_json


def _sanitized(text: str) -> str:
    from agentstack.sanitize import sanitize

    return sanitize(text, keep_newlines=True)


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def run_apply(
    root: Path,
    document: dict[str, Any],
    digest: str,
    store: Any,
    *,
    harness: list[str] | None = None,
    write: bool = False,
    check: bool = False,
    force: bool = False,
    as_json: bool = False,
    report_only: bool = False,
    git_hooks: bool = True,
) -> tuple[int, dict[str, Any]]:
    """Plan (and with `write`, write) the rendered files; prints the outcome unless
    `report_only`. Returns the exit code and the JSON report. `git_hooks`: with `write`, also
    install the git hooks that re-check the surface after git changes the tree (githooks)."""
    from agentstack.teampolicy import enforce as enforce_policy

    enforce_policy(document, root, action="apply")  # the team policy in force, if any
    state = store.state(root, digest) if write else None
    if write and (state is None or not state.trusted):
        raise Refused(
            f"not trusted: {digest} has not been trusted for {root.resolve()}; nothing was written",
            hint="review it with 'agentstack trust' first",
        )
    if write and not force:
        from agentstack.apply import record as apply_record

        proved = apply_record.proven(root.resolve(), digest, harness, git_hooks)
        if proved is not None:
            return _unchanged(root, document, digest, proved, as_json, report_only, git_hooks)
    import agentstack.apply.engine as engine  # the renderer: not needed for a proven apply

    plan = engine.plan(root, document, digest, harness)
    report: dict[str, Any] = {
        "digest": digest,
        "changes": [c.display for c in plan.pending],
        "conflicts": {c.display: c.conflicts for c in plan.conflicts},
        "written": False,
    }
    if write:
        exclude = root / ".git" / "info" / "exclude"
        excluded_before = _read_or_none(exclude)
        from agentstack.apply import record as apply_record
        from agentstack.progress import step

        apply_record.forget(root.resolve())  # a crash half-way leaves no record behind
        with step("apply: writing the rendered files", total=len(plan.pending)):
            backups = engine.write(plan, force=force)
        exclude_changed = _read_or_none(exclude) != excluded_before
        from agentstack.apply.snapshot import write_snapshot

        kept = write_snapshot(root, document, digest)
        for item in kept:
            echo(_kept_warning(item))
        hooks, hooks_problem = _install_git_hooks(root) if git_hooks else ([], None)
        report.update(
            written=True,
            backups=[str(b) for b in backups],
            git_exclude=str(exclude) if exclude_changed else None,
            git_hooks=[str(h) for h in hooks],
        )
        if not plan.conflicts and hooks_problem is None:
            import contextlib

            with contextlib.suppress(OSError):  # no record: the next apply is a full one
                apply_record.write_record(
                    root.resolve(), digest, harness, git_hooks,
                    [str(c.path) for c in plan.changes], kept, report,
                )  # fmt: skip
        if as_json:
            if not report_only:
                print_json(report)
        else:
            for change in plan.pending:
                echo(
                    f"wrote {change.display}"
                    if change.new is not None or change.link_target
                    else f"removed {change.display}"
                )
            for backup in backups:
                echo(f"backed up a hand-edited file to {backup}")
            if exclude_changed:
                echo(
                    "updated .git/info/exclude: rendered files are per machine, so git ignores "
                    "them (never committed)"
                )
            echo(f"{len(plan.pending)} file(s) changed; rendered from {digest}")
            if hooks:
                echo(
                    f"git hooks in {hooks[0].parent} ({', '.join(h.name for h in hooks)}) "
                    "re-check the surface after every pull, checkout, merge and rebase; "
                    "'--no-git-hooks' leaves them out"
                )
            elif hooks_problem is not None:
                echo(f"warning: no git hooks installed: {hooks_problem}")
            from agentstack.projectstatus import missing_secrets

            for entry in missing_secrets(document):
                echo(
                    f"warning: {entry['item']} needs secret:{entry['secret']}, which is not "
                    f"stored; it cannot start until 'agentstack secret set {entry['secret']}'"
                )
        return 0, report
    if as_json:
        report["diff"] = plan.diff_text()
        if not report_only:
            print_json(report)
    else:
        sys.stdout.write(_sanitized(plan.diff_text()))
        for change in plan.conflicts:
            echo(f"conflict: {change.display}: {', '.join(change.conflicts)}")
        where = _hooks_to_install(root) if git_hooks else None
        if where is not None:
            echo(
                f"'agentstack apply --write' also installs git hooks in {where} (post-checkout, "
                "post-merge, post-rewrite) that re-check the surface after every pull, checkout, "
                "merge and rebase; '--no-git-hooks' leaves them out"
            )
        if not plan.pending:
            echo("nothing to change")
        elif not check:
            trusted = store is not None and store.state(root, digest).trusted
            echo(
                f"{len(plan.pending)} file(s) would change; 'agentstack apply --write' writes "
                + ("them (the digest is trusted)" if trusted else "them once the digest is trusted")
            )
    return (1 if check and (plan.pending or plan.conflicts) else 0), report


def _kept_warning(item: str) -> str:
    return (
        f"warning: kept {item}, which is not in agentstack.toml: the guard blocks "
        "every tool call while it is there; declare it in agentstack.toml or remove it"
    )


def _unchanged(
    root: Path,
    document: dict[str, Any],
    digest: str,
    proved: dict[str, Any],
    as_json: bool,
    report_only: bool,
    git_hooks: bool,
) -> tuple[int, dict[str, Any]]:
    """`apply --write` when the apply record proves nothing changed (agentstack.apply.record):
    the full apply's outcome and output, without planning. The git hooks are the ones it
    installed (their files are in the record, unchanged: writing them again would change
    nothing)."""
    hooks = [Path(str(h)) for h in proved.get("git_hooks", [])] if git_hooks else []
    report: dict[str, Any] = {
        "digest": digest,
        "changes": [],
        "conflicts": {},
        "written": True,
        "backups": [],
        "git_exclude": None,
        "git_hooks": [str(h) for h in hooks],
    }
    if as_json:
        if not report_only:
            print_json(report)
        return 0, report
    for item in proved["warnings"]:
        echo(_kept_warning(str(item)))
    echo(f"0 file(s) changed; rendered from {digest}")
    if hooks:
        echo(
            f"git hooks in {hooks[0].parent} ({', '.join(h.name for h in hooks)}) "
            "re-check the surface after every pull, checkout, merge and rebase; "
            "'--no-git-hooks' leaves them out"
        )
    from agentstack.projectstatus import missing_secrets

    for entry in missing_secrets(document):
        echo(
            f"warning: {entry['item']} needs secret:{entry['secret']}, which is not "
            f"stored; it cannot start until 'agentstack secret set {entry['secret']}'"
        )
    return 0, report


def _hooks_to_install(root: Path) -> Path | None:
    """The hooks directory `apply --write` would install the git hooks in (None: there is no git
    working tree, or they are installed already)."""
    from agentstack import githooks

    try:
        where = githooks.hooks_dir(githooks.worktree_of(root)).path
    except Refused:
        return None
    for event in githooks.HOOKS:
        try:
            text = githooks.hook_text(root.resolve(), event, where / (event + githooks.CHAINED))
            if (where / event).read_text(encoding="utf-8") != text:
                return where
        except (OSError, UnicodeDecodeError):
            return where
    return None


def _install_git_hooks(root: Path) -> tuple[list[Path], str | None]:
    """Install the git hooks for `root` (chained with what is there): (hooks written, why none
    were). Outside a git working tree there is nothing to do, and nothing to say."""
    from agentstack import githooks

    try:
        githooks.worktree_of(root)
    except Refused:
        return [], None
    try:
        return githooks.install(root), None
    except Refused as exc:
        return [], exc.message
    except OSError as exc:
        return [], f"{exc.strerror or exc} ({exc.filename})"

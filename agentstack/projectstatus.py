"""Project status, as data: lock freshness, trust of the current digest, what changed since
the trusted one, drift of the files the guard watches, missing secrets; and `doctor`'s project
checks. The `status` and `doctor` commands print these; nothing here parses arguments."""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

    from agentstack.trust.review import TrustStore


def project_status(root: Path, store: TrustStore, *, withdraw: bool = True) -> dict[str, Any]:
    """The status report of `root` (what `agentstack status --json` prints); `report["ok"]` is
    whether the lock is fresh, its digest trusted and nothing drifted. When it is not, and
    something was trusted before, the harness-side trust entries are withdrawn (`withdraw`)."""
    from agentstack.apply.ledger import load_ledger
    from agentstack.consent.document import current
    from agentstack.errors import StaleLock

    report: dict[str, Any] = {"project": str(root.resolve())}
    document: dict[str, Any] | None
    digest: str | None
    try:
        _, _, document, found = current(root)
    except StaleLock as exc:
        report.update(lock="stale", lock_problem=exc.message, digest=None, trust="unknown")
        document, digest = None, None
    else:
        digest = found
        report.update(lock="fresh", digest=digest)
        state = store.state(root, found)
        report.update(trust=state.state, trust_source=state.source, moved_from=state.moved_from)
    last = store.last_trusted(root)
    report["last_trusted"] = last.digest if last else None
    if document is not None and last is not None and last.digest != digest:
        before = store.load_consent(last.digest)
        if before is not None:
            from agentstack.consent.diff import changed_items, consent_diff

            changes = consent_diff(before, document)
            report["findings"] = [f.to_json() for f in changes.findings]
            report["changed"] = changed_items(changes)
    read: list[dict[str, Any]] = []

    def ledger() -> dict[str, Any]:  # read once, when needed (as before: no read, no error)
        if not read:
            read.append(load_ledger(root))
        return read[0]

    report.update(rendered_state(root, ledger))
    report["missing_secrets"] = missing_secrets(document)
    report["guard_expected"] = snapshot_expected(root, report, ledger)
    report["shims_behind"] = shims_behind(document)
    ok = (
        report["lock"] == "fresh"
        and report["trust"] == "trusted"
        and not report["drift"]
        and (report["snapshot"] or not report["guard_expected"])
    )
    if not ok and last is not None and withdraw:
        # Harness-side trust follows the digest: what the harness would load is not what was
        # trusted, so it must not start with the folder pre-trusted (agentstack.surface).
        from agentstack.apply.prestart import withdraw_harness_trust

        report["withdrawn"] = [str(p) for p in withdraw_harness_trust(root)]
    report["ok"] = ok
    return report


def missing_secrets(document: dict[str, Any] | None) -> list[dict[str, str]]:
    """Secrets the servers name that the store does not hold (the server cannot start)."""
    if document is None:
        return []
    store = None
    missing = []
    for name, server in sorted(document.get("servers", {}).items()):
        for table in ("env", "headers"):
            for key, source in sorted(server.get(table, {}).items()):
                if "secret" not in source:
                    continue
                if store is None:  # only then: the secret store's module and its imports
                    from agentstack.secrets import SecretStore

                    store = SecretStore()
                if not store.exists(source["secret"]):
                    missing.append(
                        {"item": f"servers.{name}", "key": key, "secret": source["secret"]}
                    )
    return missing


def snapshot_expected(
    root: Path, report: dict[str, Any], ledger: Callable[[], dict[str, Any]] | None = None
) -> bool:
    """A guard snapshot exists once `trust` recorded trust or `apply --write` rendered files
    (`ledger`: the project's apply ledger, read once by the caller)."""
    if report.get("trust_source") == "log":
        return True
    if ledger is None:
        from agentstack.apply.ledger import load_ledger

        return bool(load_ledger(root).get("files"))
    return bool(ledger().get("files"))


def rendered_state(
    root: Path, ledger: Callable[[], dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Drift of every fingerprinted file (the guard's own check), per harness file, and rendered
    files that git tracks (they are per machine and must not be committed). `ledger`: the
    project's apply ledger, read once by the caller."""
    from agentstack import _guard
    from agentstack.paths import guard_snapshot_path

    snapshot_path = str(guard_snapshot_path(root))
    try:
        # As the guard reads it: the index, each entry decoded only when its stat does not prove
        # it unchanged (a key older than the snapshot's mark proves it), a directory's listing
        # judged by its content (not by directories created since: that is the guard's own rule).
        snapshot = _guard._decode(_guard._read_snapshot_bytes(snapshot_path), snapshot_path)
        changed = _guard.changed_files(snapshot, new_dirs=False)
        files = _guard.files_mentioning(snapshot, '"rendered"')  # a superset of the rendered
    except (OSError, ValueError, _guard.Deny):
        return {"drift": [], "drift_roles": {}, "rendered": [], "tracked": [], "snapshot": False}
    real = str(root.resolve())

    def shown_of(path: str) -> str:
        return path[len(real) + 1 :] if path.startswith(real + "/") else path

    rendered = [
        shown_of(path) for path, entry in sorted(files.items()) if entry.get("role") == "rendered"
    ]
    drift = [shown_of(path) for path, _ in changed]
    roles = {shown_of(path): str(entry.get("role", "")) for path, entry in changed}
    # Only files agentstack created are per machine; a user's own CLAUDE.md or AGENTS.md holding
    # an agentstack block stays theirs to commit.
    if ledger is None:
        from agentstack.apply.ledger import load_ledger

        files = load_ledger(root).get("files", {})
    else:
        files = ledger().get("files", {})
    created = {
        path[len(real) + 1 :]
        for path, recorded in files.items()
        if path.startswith(real + "/")
        and (recorded.get("kind") == "whole" or recorded.get("created"))
    }
    tracked = tracked_files(root, sorted(created & set(rendered)))
    return {
        "drift": drift,
        "drift_roles": roles,
        "rendered": rendered,
        "tracked": tracked,
        "snapshot": True,
    }


def tracked_files(root: Path, paths: list[str]) -> list[str]:
    """Which rendered files git tracks. Only called for a trusted project's own files, with
    fsmonitor and hooks disabled on the command line (ls-files never runs repo hooks). The
    answer is kept in the user's cache, keyed by the git index's stat and the paths asked about:
    git changes what it tracks only by rewriting its index, so an unchanged index (outside the
    racy window) gives the same answer without starting git."""
    if not paths or not (root / ".git").exists():
        return []
    import json
    import os

    from agentstack import layout

    if any(name in os.environ for name in _GIT_LOCATION):
        # Inside a git hook, or a user's own setting: git would read another index, or another
        # repository, than the one the kept answer is keyed by. Ask git, keep nothing.
        return _ls_files(root, paths) or []
    index = _git_index(root)
    if index is not None and not os.path.lexists(index):
        return []  # no index (nothing added yet): git tracks nothing
    key = _settled_key(index) if index is not None else None
    cache_file = layout.tracked_cache(layout.cache(), str(root))
    if key is not None:
        from agentstack.layout import read_own

        try:
            cached = json.loads(read_own(cache_file) or b"null")
            if cached["index"] == key and cached["paths"] == paths:
                return [str(p) for p in cached["tracked"]]
        except (OSError, ValueError, KeyError, TypeError):
            pass  # no answer kept, or a damaged one: ask git
    tracked = _ls_files(root, paths)
    if tracked is not None and key is not None and index is not None and _settled_key(index) == key:
        from agentstack.lock.treehash import write_private

        data = json.dumps({"index": key, "paths": paths, "tracked": tracked}).encode("utf-8")
        import contextlib

        with contextlib.suppress(OSError):  # a cache: a failed write costs the next status a git run
            write_private(cache_file, data)
    return tracked or []


# Environment variables that point git at another repository, index or configuration.
_GIT_LOCATION = (
    "GIT_DIR",
    "GIT_INDEX_FILE",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
)


def _git_index(root: Path) -> str | None:
    """The git index of the checkout at `root` (`.git/index`, or the index of the directory a
    `.git` file names), None when it cannot be told."""
    import os

    dot_git = os.path.join(root, ".git")
    if os.path.isdir(dot_git):
        return os.path.join(dot_git, "index")
    try:
        with open(dot_git, "rb") as handle:
            line = handle.read(4096).split(b"\n", 1)[0].decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if not line.startswith("gitdir: "):
        return None
    return os.path.join(root, line[len("gitdir: ") :].strip(), "index")


def _settled_key(index: str) -> list[int] | None:
    """The index's stat key, None when it is missing or changed within the racy window (a
    rewrite in the same clock tick could keep the key)."""
    import os
    import time

    from agentstack._guard import RACY_SLACK_NS

    try:
        st = os.stat(index)
    except OSError:
        return None
    if max(st.st_mtime_ns, st.st_ctime_ns) >= time.time_ns() - RACY_SLACK_NS:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _ls_files(root: Path, paths: list[str]) -> list[str] | None:
    """`git ls-files` of `paths` (None when git could not answer)."""
    import subprocess

    try:
        result = subprocess.run(
            [
                "git",
                "-c",
                "core.fsmonitor=false",
                "-c",
                "core.hooksPath=/dev/null",
                "ls-files",
                "-z",
                "--",
                *paths,
            ],
            cwd=root,
            capture_output=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return None
    return sorted(p for p in result.stdout.decode("utf-8", "replace").split("\0") if p)


def drift_line(path: str, report: dict[str, Any]) -> str:
    """What changed, and whether agentstack itself made the change (add, lock) or something else
    did it behind agentstack's back."""
    role = report.get("drift_roles", {}).get(path, "")
    if role == "rendered":
        return (
            f"{path} was edited behind agentstack's back (not by 'agentstack apply'): "
            "'agentstack apply' shows how; 'agentstack apply --write --force' restores it"
        )
    if role == "watched":
        return (
            f"{path} changed outside agentstack, and agentstack.toml does not declare it: "
            "remove it, or declare it, lock and trust"
        )
    if path in ("agentstack.toml", "agentstack.lock") and report["lock"] == "fresh":
        return (
            f"{path} changed since you trusted (an agentstack edit: add, remove or lock): "
            "review it with 'agentstack trust'"
        )
    if report["lock"] == "fresh":
        return f"{path} changed since you trusted it and is locked: review it with 'agentstack trust'"
    return (
        f"{path} changed since it was locked and trusted: run 'agentstack lock', then review "
        "it with 'agentstack trust'"
    )


def shims_behind(document: dict[str, Any] | None) -> list[dict[str, str | None]]:
    """The project's harness binaries whose installed shim PATH does not find first."""
    from agentstack import harnesses
    from agentstack.shim import path_order

    names = (document or {}).get("project", {}).get("harnesses") or [
        h.name for h in harnesses.ALL if h.has_adapter
    ]
    binaries = [harnesses.BY_NAME[n].binary for n in names if n in harnesses.BY_NAME]
    return path_order(list(dict.fromkeys(binaries)))


def shim_line(entry: dict[str, Any]) -> str:
    from agentstack.shim import path_fix

    found = entry["found"]
    runs = f"PATH runs {found}" if found else "PATH finds none"
    return (
        f"{entry['binary']}: {runs}, not the agentstack shim in {entry['shims']}, so nothing "
        f"checks the project before {entry['binary']} starts; fix: {path_fix(entry['shims'])}"
    )


def status_lines(report: dict[str, Any]) -> list[str]:
    """The report as `agentstack status` prints it."""
    lines = [f"project   {report['project']}"]
    if report["lock"] == "fresh":
        lines.append(f"lock      fresh; digest {report['digest']}")
    else:
        lines.append(f"lock      STALE: {report['lock_problem']} (run 'agentstack lock')")
    trust_line = {
        "trusted": "trusted",
        "revoked": "REVOKED",
        "untrusted": "NOT TRUSTED",
        "superseded": "NOT TRUSTED (an older setup; a later trust replaced it: review it again)",
        "unknown": "unknown (the lock is stale)",
    }[report["trust"]]
    if report.get("trust_source") in ("env", "flag"):
        trust_line += (
            " (explicitly, by "
            + (
                "AGENTSTACK_TRUSTED_DIGESTS"
                if report["trust_source"] == "env"
                else "--trust-digest"
            )
            + ")"
        )
    if report.get("moved_from"):
        trust_line += f"; it was trusted for {report['moved_from']} (trust binds the location)"
    lines.append(f"trust     {trust_line}")
    if report["last_trusted"] and report["last_trusted"] != report.get("digest"):
        lines.append(f"last trusted digest {report['last_trusted']}")
        for finding in report.get("findings", []):
            lines.append(f"  {finding['severity']:<6} {finding['item']}: {finding['message']}")
        if report.get("changed"):
            lines.append("  changed: " + ", ".join(report["changed"]))
    if report["trust"] == "trusted" and not report.get("snapshot") and report.get("guard_expected"):
        lines.append(
            "guard     no readable guard snapshot: the guard denies every tool call; "
            "run 'agentstack apply --write'"
        )
    for path in report.get("drift", []):
        lines.append(f"drift     {drift_line(path, report)}")
    if report.get("drift"):
        lines.append("          (the guard blocks every tool call until this is resolved)")
    for entry in report.get("missing_secrets", []):
        lines.append(
            f"secret    {entry['item']} needs secret:{entry['secret']} (as {entry['key']}), "
            f"which is not stored: 'agentstack secret set {entry['secret']}'"
        )
    for entry in report.get("shims_behind", []):
        lines.append(f"shims     {shim_line(entry)}")
    for path in report.get("tracked", []):
        lines.append(
            f"warning   {path} is tracked by git, but it is rendered per machine: "
            f"'git rm --cached {path}'"
        )
    if report["trust"] != "trusted":
        lines.append(
            "next: 'agentstack trust' to review"
            + (" after 'agentstack lock'" if report["lock"] != "fresh" else "")
        )
    return lines


def project_checks(root: Path | None, store: Callable[[], TrustStore]) -> list[Any]:
    """`doctor`'s rows for the project at `root` (None: not inside a project): manifest, lock,
    trust, each harness's MCP view, and the sandbox policy per harness."""
    from agentstack.consent.document import current
    from agentstack.errors import AgentstackError, StaleLock
    from agentstack.manifest.load import load_manifest
    from agentstack.manifest.model import MANIFEST_NAME
    from agentstack.sandbox.doctor import Check
    from agentstack.sandbox.resolve import resolve_policy

    if root is None:
        return [Check("project", "ok", f"not inside a project (no {MANIFEST_NAME} here or above)")]
    out = [Check("project", "ok", str(root), {"root": str(root)})]
    try:
        manifest = load_manifest(root)
    except AgentstackError as exc:
        return [*out, Check("manifest", "fail", exc.message)]
    digest: str | None
    try:
        _, _, _, digest = current(root)
    except StaleLock as exc:
        out.append(
            Check(
                "lock", "warn", f"stale: {exc.message} (run 'agentstack lock')", {"lock": "stale"}
            )
        )
        digest = None
    except AgentstackError as exc:
        out.append(Check("lock", "warn", exc.message, {"lock": "unknown"}))
        digest = None
    else:
        out.append(Check("lock", "ok", "fresh", {"lock": "fresh", "digest": digest}))
    if digest is not None:
        try:
            state = store().state(root, digest)
        except AgentstackError as exc:
            out.append(Check("trust", "fail", exc.message))
        else:
            out.append(
                Check(
                    "trust",
                    "ok" if state.trusted else "warn",
                    f"{state.state}: {digest}"
                    + ("" if state.trusted else " ('agentstack trust' to review)"),
                    {"trust": state.state, "digest": digest},
                )
            )
    from agentstack.mcp_status import harness_mcp_checks

    for entry in shims_behind({"project": {"harnesses": manifest.project.harnesses}}):
        out.append(Check(f"shim {entry['binary']}", "warn", shim_line(entry), dict(entry)))

    trusted = any(c.name == "trust" and c.status == "ok" for c in out)
    out.extend(
        harness_mcp_checks(root, manifest.project.harnesses, sorted(manifest.servers), trusted)
    )
    if not manifest.sandbox.enabled:
        out.append(Check("sandbox policy", "warn", "sandbox.enabled = false: 'run' refuses"))
    else:
        for harness in [None, *manifest.project.harnesses]:
            try:
                policy = resolve_policy(manifest.sandbox, root, harness=harness, command=None)
            except AgentstackError as exc:
                out.append(Check(f"policy {harness or 'command'}", "fail", exc.message))
            else:
                out.append(
                    Check(
                        f"policy {harness or 'command'}",
                        "ok",
                        f"{len(policy.grants)} grants, {len(policy.denies)} denies, "
                        f"network {'blocked' if policy.network_block else 'OPEN'}",
                    )
                )
    return out

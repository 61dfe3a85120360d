"""The consent review's rules: findings over two consent documents, from the risk facts the lock
recorded (`lock.facts`: what a declaration executes or reaches) and the fields that changed.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

# ================================================================================= the review
#
# Findings over two consent documents (`old` None on a first review). `diff.py` shows them; these
# are the rules. Every field of the consent document is either covered by a rule here (or by the
# rules in diff.py) or named cosmetic in FIELD_RULES, and a test enumerates the fields.

Finding = tuple[str, str, str, str]  # (severity, code, item, message)

# Codes that need `--accept-risk` on a re-review (added to diff.HIGH_RISK_CODES).
HIGH_RISK_CODES = frozenset(
    {"unpinnable-code", "loader-env", "sandbox-reaches-secrets", "secret-env"}
)

# Every field of the consent document -> the finding code a change of it raises, or
# "cosmetic: why". `*` stands for an item name. Kept next to the rules so a new field without a
# rule is caught by tests/consent/test_risk_model.py.
FIELD_RULES: dict[str, str] = {
    "consent": "cosmetic: the document format; a new format is a new digest anyway",
    "lock": "cosmetic: the manifest digest; every meaning it covers is a field of its own here",
    "project.name": "cosmetic: a label",
    "project.harnesses": "harness-added",
    "servers.*.transport": "changed-executable",
    "servers.*.command": "changed-executable",
    "servers.*.args": "changed-executable",
    "servers.*.cwd": "changed-executable",
    "servers.*.env": "changed-executable",
    "servers.*.files": "changed-executable",
    "servers.*.roots": "changed-executable",
    "servers.*.risks": "cosmetic: derived from the other fields and recomputed by the review",
    "servers.*.url": "changed-endpoint",
    "servers.*.headers": "changed-endpoint",
    "hooks.*.event": "hook-trigger",
    "hooks.*.matcher": "hook-trigger",
    "hooks.*.timeout": "hook-trigger",
    "hooks.*.command": "changed-executable",
    "hooks.*.script": "changed-executable",
    "hooks.*.args": "changed-executable",
    "hooks.*.files": "changed-executable",
    "hooks.*.roots": "changed-executable",
    "hooks.*.risks": "cosmetic: derived from the other fields and recomputed by the review",
    "skills.*.source": "skill-source",
    "skills.*.path": "skill-source",
    "skills.*.git": "skill-source",
    "skills.*.rev": "skill-source",
    "skills.*.subdir": "skill-source",
    "skills.*.commit": "skill-source",
    "skills.*.git_tree": "model-reads",
    "skills.*.digest": "model-reads",
    "skills.*.files": "model-reads",
    "instructions": "model-reads",
    "plugins.*.harness": "plugin-source",
    "plugins.*.source": "plugin-source",
    "plugins.*.path": "plugin-source",
    "plugins.*.git": "plugin-source",
    "plugins.*.rev": "plugin-source",
    "plugins.*.subdir": "plugin-source",
    "plugins.*.commit": "plugin-source",
    "plugins.*.git_tree": "plugin-source",
    "plugins.*.digest": "changed-executable",
    "plugins.*.files": "changed-executable",
    "plugins.*.enable": "plugin-enable",
    "plugins.*.components": "plugin-components",
    "settings.permissions.allow": "permission-allowed",
    "settings.permissions.deny": "permission-relaxed",
    "settings.permissions.ask": "permission-relaxed",
    "settings.passthrough": "passthrough",
    "sandbox.enabled": "sandbox-disabled",
    "sandbox.read_dirs": "widened-read",
    "sandbox.read_files": "widened-read",
    "sandbox.write_dirs": "widened-write",
    "sandbox.write_files": "widened-write",
    "sandbox.env": "widened-env",
    "sandbox.network.block": "network-open",
    "sandbox.network.allow_domains": "new-host",
    "sandbox.network.localhost_ports": "widened-port",
    "sandbox.credentials.*.upstream": "new-credentialed-host",
    "sandbox.credentials.*.secret": "secret-new-process",
    "sandbox.credentials.*.header": "credential-route",
    "sandbox.credentials.*.env": "credential-route",
    "sandbox.credentials.*.base_url_env": "credential-route",
    "sandbox.risks": "cosmetic: derived from the other fields and recomputed by the review",
}


def _argv(item: dict[str, Any]) -> list[str]:
    if isinstance(item.get("command"), list):
        return [str(a) for a in item["command"]]
    if item.get("script"):
        return [str(item["script"]), *map(str, item.get("args") or [])]
    if item.get("command") is not None:
        return [str(item["command"]), *map(str, item.get("args") or [])]
    return []


def executes(item: dict[str, Any]) -> tuple[Any, ...]:
    """What decides the code an item runs: argv, cwd, env, every pinned file and code root."""
    files = tuple((f["path"], f["digest"], f["executable"]) for f in item.get("files", []))
    roots = tuple(
        (r["path"], r["digest"], tuple(r.get("excluded", []))) for r in item.get("roots", [])
    )
    env = tuple(sorted((k, tuple(sorted(v.items()))) for k, v in (item.get("env") or {}).items()))
    return (item.get("transport"), tuple(_argv(item)), item.get("cwd"), env, files, roots)


def execution_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What changed in what an item runs, in words (for the changed-executable finding)."""
    out: list[str] = []
    if _argv(old) != _argv(new):
        out.append("command line")
    if old.get("cwd") != new.get("cwd"):
        out.append(f"working directory {new.get('cwd')}")
    old_env, new_env = old.get("env") or {}, new.get("env") or {}
    for name in sorted(set(old_env) | set(new_env)):
        if old_env.get(name) != new_env.get(name):
            out.append(f"env {name}")
    old_files = {f["path"]: f for f in old.get("files", [])}
    for entry in new.get("files", []):
        before = old_files.pop(entry["path"], None)
        if before is None:
            out.append(f"new file {entry['path']}")
        elif (before["digest"], before["executable"]) != (entry["digest"], entry["executable"]):
            out.append(f"file {entry['path']}")
    out += [f"file {path} no longer pinned" for path in old_files]
    old_roots = {r["path"]: r for r in old.get("roots", [])}
    for root in new.get("roots", []):
        before = old_roots.pop(root["path"], None)
        if before is None:
            out.append(f"new code root {root['path']}/ ({len(root['files'])} files)")
            continue
        if before["digest"] == root["digest"]:
            continue
        was = {f["path"]: f["digest"] for f in before["files"]}
        now = {f["path"]: f["digest"] for f in root["files"]}
        changed = sorted(p for p in set(was) | set(now) if was.get(p) != now.get(p))
        shown = ", ".join(f"{root['path']}/{p}" for p in changed[:5])
        more = f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        out.append(f"code in {root['path']}/ changed: {shown}{more}")
    out += [f"code root {path}/ no longer pinned" for path in old_roots]
    return out


def loader_env(item: dict[str, Any]) -> dict[str, Any]:
    """The loader variables an item sets (name -> value source)."""
    from agentstack.lock.coderoots import is_loader_env

    env = item.get("env") or {}
    out = {k: v for k, v in env.items() if is_loader_env(k)}
    if "PATH" in env and any(f == "loader-env:PATH" for f in item.get("risks", [])):
        out["PATH"] = env["PATH"]
    return out


_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW|PASSPHRASE|API_?KEY|PRIVATE|CREDENTIAL|AUTH|COOKIE|SESSION|_KEY$|^KEY",
    re.IGNORECASE,
)
_SECRET_ENV = frozenset(
    {"SSH_AUTH_SOCK", "GPG_AGENT_INFO", "AWS_PROFILE", "KUBECONFIG", "DOCKER_CONFIG", "NETRC"}
)


def secret_looking(name: str) -> bool:
    from agentstack.lock.coderoots import is_loader_env

    return bool(_SECRET_NAME.search(name)) or name in _SECRET_ENV or is_loader_env(name)


def sensitive_path(path: str) -> str | None:
    """Why a sandbox path reaches secrets ($HOME itself or above, a credential store), or None."""
    from agentstack.sandbox.credentials import GUARD_DENY_PATHS as CREDENTIAL_PATHS

    text = path.strip()
    for prefix in ("$HOME", "${HOME}"):
        if text.startswith(prefix):
            text = "~" + text[len(prefix) :]
    text = text.rstrip("/") or "/"
    if text in ("~", "/", "/home", "/root", "/Users") or (text.startswith("~") and "/" not in text):
        return f"{path} is or holds a home directory"
    if not text.startswith("~/"):
        return None
    rel = posixpath.normpath(text[2:])
    if rel in (".", ""):
        return f"{path} is the home directory"
    for cred in CREDENTIAL_PATHS:
        if rel == cred or rel.startswith(cred + "/") or cred.startswith(rel + "/"):
            return f"{path} reaches the credential store ~/{cred}"
    return None


class _Review:
    def __init__(self, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        self.old = old or {}
        self.first = old is None
        self.new = new
        self.out: list[Finding] = []

    def add(self, severity: str, code: str, item: str, message: str) -> None:
        self.out.append((severity, code, item, message))

    def commands(self, section: str) -> None:
        before = self.old.get(section, {})
        for name, item in sorted(self.new.get(section, {}).items()):
            where = f"{section}.{name}"
            previous = before.get(name)
            changed = previous is None or executes(previous) != executes(item)
            facts = set(item.get("risks", []))
            old_facts = set((previous or {}).get("risks", []))
            for fact in sorted(facts):
                if fact.startswith("unpinnable:") and (changed or fact not in old_facts):
                    self.add(
                        "high",
                        "unpinnable-code",
                        where,
                        f"runs code agentstack cannot pin: {fact.split(':', 1)[1]}; name it "
                        "with pin = [...]",
                    )
                if fact.startswith("excluded:") and (previous is None or fact not in old_facts):
                    path = fact.split(":", 1)[1]
                    self.add(
                        "medium",
                        "excluded-code",
                        where,
                        f"{path}/ is not pinned: the packages installed there run unreviewed "
                        f"(pin it to review it: pin = [..., {path!r}])",
                    )
            old_loader = loader_env(previous or {})
            for var, source in sorted(loader_env(item).items()):
                if old_loader.get(var) != source:
                    value = source.get("literal", f"secret:{source.get('secret')}")
                    self.add(
                        "high",
                        "loader-env",
                        where,
                        f"sets {var}={value}, which changes what code the process loads",
                    )
            if previous is None:
                continue
            if item.get("transport") == "http" and (
                item.get("url") != previous.get("url")
                or item.get("headers") != previous.get("headers")
            ):
                self.add(
                    "medium",
                    "changed-endpoint",
                    where,
                    f"talks to {item.get('url')} with headers "
                    f"{', '.join(sorted(item.get('headers') or {})) or '(none)'} now",
                )
            if section == "hooks":
                for key in ("event", "matcher", "timeout"):
                    if item.get(key) != previous.get(key):
                        self.add(
                            "low" if key == "timeout" else "medium",
                            "hook-trigger",
                            where,
                            f"{key} changed from {previous.get(key)} to {item.get(key)}",
                        )

    def project(self) -> None:
        if self.first:
            return
        before = set(self.old.get("project", {}).get("harnesses", []))
        for harness in sorted(set(self.new.get("project", {}).get("harnesses", [])) - before):
            self.add(
                "medium",
                "harness-added",
                "project.harnesses",
                f"configuration is now rendered for {harness}",
            )

    def skills(self) -> None:
        before = self.old.get("skills", {})
        for name, skill in sorted(self.new.get("skills", {}).items()):
            previous = before.get(name)
            if previous is None:
                continue
            keys = ("source", "path", "git", "rev", "subdir", "commit")
            if any(previous.get(k) != skill.get(k) for k in keys):
                self.add("medium", "skill-source", f"skills.{name}", _source_change(previous, skill))
            elif previous != skill and previous.get("digest") == skill.get("digest"):
                self.add("low", "model-reads", f"skills.{name}", "skill entry changed")

    def permissions(self) -> None:
        if self.first:
            return
        before = self.old.get("settings", {}).get("permissions", {})
        after = self.new.get("settings", {}).get("permissions", {})
        for key in ("deny", "ask"):
            for rule in sorted(set(before.get(key, [])) - set(after.get(key, []))):
                self.add(
                    "medium",
                    "permission-relaxed",
                    f"settings.permissions.{key}",
                    f"no longer {'refused' if key == 'deny' else 'asked'}: {rule}",
                )
            for rule in sorted(set(after.get(key, [])) - set(before.get(key, []))):
                self.add(
                    "low", "permission-relaxed", f"settings.permissions.{key}", f"added: {rule}"
                )

    def sandbox(self) -> None:
        before, after = self.old.get("sandbox", {}), self.new.get("sandbox", {})
        for key in ("read_dirs", "read_files", "write_dirs", "write_files"):
            for path in sorted(set(after.get(key, [])) - set(before.get(key, []))):
                why = sensitive_path(str(path))
                if why is not None:
                    verb = "write" if key.startswith("write") else "read"
                    self.add(
                        "high", "sandbox-reaches-secrets", f"sandbox.{key}", f"may {verb}: {why}"
                    )
                elif key.startswith("read"):
                    self.add("medium", "widened-read", f"sandbox.{key}", f"may now read {path}")
        for name in sorted(set(after.get("env", [])) - set(before.get("env", []))):
            if secret_looking(name):
                self.add(
                    "high",
                    "secret-env",
                    "sandbox.env",
                    f"passes {name} into the sandbox; it looks like a secret or changes what "
                    "code runs",
                )
            else:
                self.add("medium", "widened-env", "sandbox.env", f"passes {name} into the sandbox")
        old_net, new_net = before.get("network", {}), after.get("network", {})
        for port in sorted(
            set(new_net.get("localhost_ports", [])) - set(old_net.get("localhost_ports", []))
        ):
            self.add(
                "medium", "widened-port", "sandbox.network", f"may connect to localhost:{port}"
            )
        old_creds = before.get("credentials", {})
        for name, cred in sorted(after.get("credentials", {}).items()):
            previous = old_creds.get(name)
            if previous is None:
                continue
            for key in ("header", "env", "base_url_env"):
                if previous.get(key) != cred.get(key):
                    self.add(
                        "medium",
                        "credential-route",
                        f"sandbox.credentials.{name}",
                        f"{key} changed from {previous.get(key)} to {cred.get(key)}",
                    )

    def run(self) -> list[Finding]:
        self.project()
        self.commands("servers")
        self.commands("hooks")
        self.skills()
        self.permissions()
        self.sandbox()
        return self.out


def review_findings(old: dict[str, Any] | None, new: dict[str, Any]) -> list[Finding]:
    """The findings of the rules above (diff.py adds its own and shows them all)."""
    return _Review(old, new).run()


def _source_change(previous: dict[str, Any], skill: dict[str, Any]) -> str:
    """What moved in a skill's source, in words: another origin, another rev or subdir, or the
    same rev of the same repository resolving to another commit (a moved tag or branch)."""
    origin = skill.get("git") or skill.get("path")
    was = previous.get("git") or previous.get("path")
    if origin != was or previous.get("source") != skill.get("source"):
        return f"now comes from {origin} (was {was})"
    changed = [k for k in ("rev", "subdir") if previous.get(k) != skill.get(k)]
    if changed:
        moves = "; ".join(f"{k} {previous.get(k)} -> {skill.get(k)}" for k in changed)
        return f"{moves} in {origin}"
    old, new = str(previous.get("commit") or ""), str(skill.get("commit") or "")
    return (f"{skill.get('rev')} in {origin} now resolves to commit {new[:12]} (was {old[:12]}): "
            "the same name, other code")

"""The consent diff: what changed between two consent documents, risk findings first.

`old` may be None (a first review): then every risk fact of `new` is a finding. Findings are
computed from the documents alone, so `trust`, `quarantine release` and `agentstack diff A B` agree.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Literal

from agentstack.consent.risk import HIGH_RISK_CODES as _REVIEW_HIGH_RISK_CODES
from agentstack.consent.risk import executes, execution_changes, review_findings
from agentstack.lock.facts import command_facts, host_facts, url_facts

Severity = Literal["high", "medium", "low"]
_ORDER = {"high": 0, "medium": 1, "low": 2}

# Findings that must be accepted explicitly (`--accept-risk`) on a re-review.
HIGH_RISK_CODES = frozenset(
    {
        "new-executable",
        "changed-executable",
        "link-local",
        "secret-new-process",
        "unpinned-package",
        "sandbox-disabled",
        "plugin-unmodelled",
        "plugin-components",
    }
)
_PLUGIN_SOURCE = ("harness", "source", "path", "git", "rev", "subdir", "commit", "git_tree")
HIGH_RISK_CODES |= _REVIEW_HIGH_RISK_CODES  # the rules in risk.py


@dataclass(frozen=True, kw_only=True)
class Finding:
    severity: Severity
    code: str
    item: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {
            "severity": self.severity,
            "code": self.code,
            "item": self.item,
            "message": self.message,
        }


@dataclass(frozen=True, kw_only=True)
class Change:
    path: str
    kind: Literal["added", "removed", "changed"]
    old: Any = None
    new: Any = None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "old": self.old, "new": self.new}


@dataclass(frozen=True, kw_only=True)
class ConsentDiff:
    findings: list[Finding]
    changes: list[Change]

    @property
    def high_risk(self) -> list[Finding]:
        from agentstack.surface.findings import SURFACE_HIGH_CODES

        return [f for f in self.findings if f.code in HIGH_RISK_CODES | SURFACE_HIGH_CODES]

    def to_json(self) -> dict[str, Any]:
        return {
            "findings": [f.to_json() for f in self.findings],
            "changes": [c.to_json() for c in self.changes],
        }


def _command_line(item: dict[str, Any]) -> list[str]:
    if "command" in item and isinstance(item["command"], list):
        return list(item["command"])
    if "script" in item:
        return [item["script"], *item.get("args", [])]
    if item.get("command") is not None:
        return [item["command"], *item.get("args", [])]
    return []


_executes = executes  # argv, cwd, env, pinned files and code roots (risk.py)


def _secrets(doc: dict[str, Any]) -> dict[str, set[str]]:
    """secret name -> the processes or hosts that receive it."""
    out: dict[str, set[str]] = {}
    for name, server in doc.get("servers", {}).items():
        for table in ("env", "headers"):
            for source in server.get(table, {}).values():
                if "secret" in source:
                    out.setdefault(source["secret"], set()).add(f"servers.{name}")
    for name, credential in doc.get("sandbox", {}).get("credentials", {}).items():
        out.setdefault(str(credential.get("secret")), set()).add(f"sandbox.credentials.{name}")
    return out


def _facts(item: dict[str, Any], prefix: str) -> set[str]:
    """Risk facts recomputed from the item itself: a document from someone else (a bundle) could
    carry a `risks` list that leaves things out, so it is never taken on trust."""
    if not item:
        return set()
    if item.get("transport") == "http":
        facts = url_facts(str(item.get("url", "")))
    else:
        facts = command_facts(_command_line(item))
    return {f for f in facts if f.startswith(prefix)}


class _Differ:
    def __init__(self, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        self.old = old or {}
        self.new = new
        self.findings: list[Finding] = []

    def add(self, severity: Severity, code: str, item: str, message: str) -> None:
        self.findings.append(Finding(severity=severity, code=code, item=item, message=message))

    def commands(self, section: str, noun: str) -> None:
        before, after = self.old.get(section, {}), self.new.get(section, {})
        for name, item in sorted(after.items()):
            where = f"{section}.{name}"
            previous = before.get(name)
            argv = shlex.join(str(a) for a in _command_line(item))
            if item.get("transport") != "http":
                if previous is None:
                    self.add("high", "new-executable", where, f"new {noun} runs: {argv}")
                elif _executes(previous) != _executes(item):
                    what = "; ".join(execution_changes(previous, item))
                    self.add(
                        "high",
                        "changed-executable",
                        where,
                        f"{noun} now runs something different: {argv}"
                        + (f" ({what})" if what else ""),
                    )
            if (
                section == "servers"
                and item.get("sandbox") is False
                and (previous or {}).get("sandbox") is not False
            ):
                self.add(
                    "high",
                    "unconfined-server",
                    where,
                    f"runs unconfined (sandbox = false): the {noun} gets your full privileges, "
                    "your home directory and the network",
                )
            if section == "servers":
                self.server_network(where, item, previous)
            if section == "servers" and (previous or {}).get("tools") != item.get("tools") and (
                previous is not None
            ):
                self.add("medium", "server-tools", where,
                         f"the tools allowed by name changed: {item.get('tools')}")
            for fact in sorted(
                _facts(item, "unpinned-package:") - _facts(previous or {}, "unpinned-package:")
            ):
                package = fact.split(":", 2)[-1]
                self.add(
                    "high",
                    "unpinned-package",
                    where,
                    f"fetches and runs {package!r} from a registry at launch, unpinned",
                )
            for fact in sorted(_facts(item, "link-local:") - _facts(previous or {}, "link-local:")):
                self.add(
                    "high",
                    "link-local",
                    where,
                    f"reaches link-local / cloud-metadata host {fact.split(':', 1)[1]}",
                )
            if item.get("transport") == "http":
                host = next((f.split(":", 1)[1] for f in _facts(item, "remote-host:")), "")
                old_hosts = {f.split(":", 1)[1] for f in _facts(previous or {}, "remote-host:")}
                sends_secret = any("secret" in s for s in item.get("headers", {}).values())
                if host not in old_hosts and (sends_secret or item.get("headers")):
                    self.add(
                        "medium",
                        "new-credentialed-host",
                        where,
                        f"sends credentials to a new host: {host}",
                    )
                for fact in sorted(
                    _facts(item, "plain-http:") - _facts(previous or {}, "plain-http:")
                ):
                    self.add(
                        "medium",
                        "plain-http",
                        where,
                        f"talks to {fact.split(':', 1)[1]} over unencrypted http",
                    )

    def secrets(self) -> None:
        before, after = _secrets(self.old), _secrets(self.new)
        for secret, consumers in sorted(after.items()):
            for consumer in sorted(consumers - before.get(secret, set())):
                self.add(
                    "high",
                    "secret-new-process",
                    consumer,
                    f"secret {secret!r} now reaches {consumer}",
                )

    def skills(self) -> None:
        before, after = self.old.get("skills", {}), self.new.get("skills", {})
        for name, skill in sorted(after.items()):
            where = f"skills.{name}"
            previous = before.get(name)
            old_files = {f["path"]: f for f in (previous or {}).get("files", [])}
            for entry in skill.get("files", []):
                if not entry["executable"]:
                    continue
                old = old_files.get(entry["path"])
                if old is None or not old["executable"]:
                    self.add(
                        "high", "new-executable", where, f"new executable file {entry['path']}"
                    )
                elif old["digest"] != entry["digest"]:
                    self.add(
                        "high",
                        "changed-executable",
                        where,
                        f"executable file {entry['path']} changed",
                    )
            if previous is None:
                self.add("medium", "model-reads", where, "new skill the model will read")
            elif previous.get("digest") != skill.get("digest"):
                self.add("low", "model-reads", where, "skill content changed")

    def instructions(self) -> None:
        old = [(i["path"], i["digest"]) for i in self.old.get("instructions", [])]
        new = [(i["path"], i["digest"]) for i in self.new.get("instructions", [])]
        if new != old and new:
            message = (
                "instructions to the model changed" if old else "new instructions the model reads"
            )
            self.add("medium", "model-reads", "instructions", message)

    def server_network(self, where: str, item: dict[str, Any],
                       previous: dict[str, Any] | None) -> None:
        """`servers.NAME.sandbox` as a table: each host the server may reach through its proxy,
        and each secret that proxy injects, new since the last review."""
        after, before = _server_reach(item), _server_reach(previous or {})
        for host in sorted(set(after[0]) - set(before[0])):
            self.add("medium", "server-network", f"{where}.sandbox.network",
                     f"the server may reach {host} (through its proxy only)")
        for name, (secret, upstream) in sorted(after[1].items()):
            if before[1].get(name) != (secret, upstream):
                self.add("medium", "new-credentialed-host", f"{where}.sandbox.credentials.{name}",
                         f"secret {secret!r} is injected into the server's requests to {upstream}")
        old_facts = {f for h in before[0] for f in host_facts(h)}
        for host in after[0]:
            for fact in sorted({*host_facts(host)} - old_facts):
                if fact.startswith("link-local:"):
                    self.add("high", "link-local", f"{where}.sandbox.network",
                             f"may reach link-local / cloud-metadata host {fact.split(':', 1)[1]}")

    def sandbox(self) -> None:
        before, after = self.old.get("sandbox"), self.new.get("sandbox", {})
        if not after.get("enabled", True) and (before is None or before.get("enabled", True)):
            self.add("high", "sandbox-disabled", "sandbox", "the kernel sandbox is turned off")
        old = before or {}
        for key in ("write_dirs", "write_files"):
            for path in sorted(set(after.get(key, [])) - set(old.get(key, []))):
                self.add("medium", "widened-write", f"sandbox.{key}", f"may now write {path}")
        new_net, old_net = after.get("network", {}), old.get("network", {})
        if not new_net.get("block", True) and old_net.get("block", True):
            self.add("medium", "network-open", "sandbox.network", "network is no longer blocked")
        old_creds = old.get("credentials", {})
        for name, cred in sorted(after.get("credentials", {}).items()):
            previous = old_creds.get(name)
            if previous is None or previous.get("upstream") != cred.get("upstream"):
                self.add(
                    "medium",
                    "new-credentialed-host",
                    f"sandbox.credentials.{name}",
                    f"secret {cred.get('secret')!r} is injected into requests to "
                    f"{cred.get('upstream')}",
                )
        for host in sorted(
            set(new_net.get("allow_domains", [])) - set(old_net.get("allow_domains", []))
        ):
            self.add("medium", "new-host", "sandbox.network", f"may now connect to {host}")
        reach_before = {f for h in old_net.get("allow_domains", []) for f in host_facts(h)}
        reach_after = {f for h in new_net.get("allow_domains", []) for f in host_facts(h)}
        for fact in sorted(reach_after - reach_before):
            if fact.startswith("link-local:"):
                self.add(
                    "high",
                    "link-local",
                    "sandbox.network",
                    f"may reach link-local / cloud-metadata host {fact.split(':', 1)[1]}",
                )

    def settings(self) -> None:
        before = self.old.get("settings", {}).get("permissions", {})
        after = self.new.get("settings", {}).get("permissions", {})
        for rule in sorted(set(after.get("allow", [])) - set(before.get("allow", []))):
            self.add(
                "medium",
                "permission-allowed",
                "settings.permissions.allow",
                f"tool use allowed without asking: {rule}",
            )
        if self.new.get("settings", {}).get("passthrough") != self.old.get("settings", {}).get(
            "passthrough"
        ) and self.new.get("settings", {}).get("passthrough"):
            # At least medium: passthrough reaches the harness's own settings unreviewed by kind
            # (keys that execute, read files or name hosts are refused at lock).
            self.add(
                "medium",
                "passthrough",
                "settings.passthrough",
                "harness settings passed through verbatim changed",
            )

    def plugins(self) -> None:
        """A plugin's hooks and servers get the findings of declared ones, named as what they
        are ("plugin P adds a PreToolUse hook that runs ..."); a change of any of its files is a
        change of what its hooks and servers run."""
        from agentstack.consent.risk import _source_change
        from agentstack.plugins import describe_hook, hook_argv

        before = self.old.get("plugins", {})
        for name, plugin in sorted(self.new.get("plugins", {}).items()):
            where = f"plugins.{name}"
            previous = before.get(name)
            parts = plugin.get("components", {})
            old_parts = (previous or {}).get("components", {})
            origin = plugin.get("git") or plugin.get("path")
            if previous is None:
                self.add("medium", "plugin-added", where,
                         f"new {plugin.get('harness')} plugin {parts.get('name')} from {origin}")
            elif any(previous.get(k) != plugin.get(k) for k in _PLUGIN_SOURCE):
                if previous.get("harness") != plugin.get("harness"):
                    self.add("medium", "plugin-source", where,
                             f"is now a {plugin.get('harness')} plugin "
                             f"(was {previous.get('harness')})")
                else:
                    self.add("medium", "plugin-source", where, _source_change(previous, plugin))
            if previous is not None and previous.get("enable") != plugin.get("enable"):
                chosen = plugin.get("enable")
                self.add("medium", "plugin-enable", where,
                         "now renders " + ("all of its components" if chosen is None else
                                           ", ".join(chosen) or "none of its components"))
            old_hooks = old_parts.get("hooks", {})
            for key, hook in sorted(parts.get("hooks", {}).items()):
                was = old_hooks.get(key)
                argv = shlex.join(hook_argv(hook))
                if was is None:
                    self.add("high", "new-executable", where,
                             f"plugin {name} adds {describe_hook(hook)}")
                elif was != hook:
                    self.add("high", "changed-executable", where,
                             f"plugin {name} changes its {key} hook: now {describe_hook(hook)}")
                self._package_facts(where, command_facts(hook_argv(hook)),
                                    command_facts(hook_argv(was)) if was else [], argv)
            old_servers = old_parts.get("servers", {})
            for key, server in sorted(parts.get("servers", {}).items()):
                was = old_servers.get(key)
                if server.get("transport") == "http":
                    facts = url_facts(str(server.get("url", "")))
                    old_facts = url_facts(str(was.get("url", ""))) if was else []
                    if was is None or was != server:
                        self.add("medium", "new-host" if was is None else "changed-endpoint",
                                 where,
                                 f"plugin {name} adds MCP server {key} at {server.get('url')}"
                                 if was is None else
                                 f"plugin {name}'s MCP server {key} now talks to "
                                 f"{server.get('url')}")
                else:
                    argv_list = _command_line(server)
                    facts = command_facts(argv_list)
                    old_facts = command_facts(_command_line(was)) if was else []
                    line = shlex.join(str(a) for a in argv_list)
                    if was is None:
                        self.add("high", "new-executable", where,
                                 f"plugin {name} adds MCP server {key} that runs {line}")
                    elif was != server:
                        self.add("high", "changed-executable", where,
                                 f"plugin {name}'s MCP server {key} now runs {line}")
                self._package_facts(where, facts, old_facts, key)
            if previous is not None and (previous.get("digest"), previous.get("files")) != (
                plugin.get("digest"), plugin.get("files")
            ):
                old_files = {f["path"]: f["digest"] for f in previous.get("files", [])}
                new_files = {f["path"]: f["digest"] for f in plugin.get("files", [])}
                changed = sorted(p for p in set(old_files) | set(new_files)
                                 if old_files.get(p) != new_files.get(p))
                shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more"
                                                  if len(changed) > 5 else "")
                runs = bool(parts.get("hooks") or parts.get("servers") or
                            parts.get("executables"))
                self.add("high" if runs else "low",
                         "changed-executable" if runs else "model-reads", where,
                         f"plugin {name}'s files changed: {shown}"
                         + (" (its hooks and servers run from them)" if runs else ""))
            old_exec = set(old_parts.get("executables", []))
            for path in parts.get("executables", []):
                if path not in old_exec:
                    self.add("high", "new-executable", where,
                             f"plugin {name} ships executable file {path}")
            for kind, noun in (("skills", "skill"), ("agents", "agent"),
                               ("commands", "command"), ("instructions", "instruction file")):
                for entry in sorted(set(parts.get(kind, [])) - set(old_parts.get(kind, []))):
                    self.add("medium", "model-reads", where,
                             f"plugin {name} adds {noun} {entry} the model will read")
            for key in sorted(parts.get("unmodelled", {})):
                if key not in old_parts.get("unmodelled", {}) or (
                    old_parts["unmodelled"][key] != parts["unmodelled"][key]
                ):
                    self.add("high", "plugin-unmodelled", where,
                             f"plugin {name}'s manifest sets {key!r}, which agentstack does not "
                             "model: review the plugin's files yourself")

            known = ("hooks", "servers", "skills", "agents", "commands", "instructions",
                     "executables", "unmodelled")
            if previous is not None:
                moved = sorted(k for k in set(parts) | set(old_parts)
                               if k not in known and parts.get(k) != old_parts.get(k))
                labels = [k for k in moved if k in ("name", "version", "description")]
                if labels:
                    self.add("low", "plugin-label", where,
                             f"plugin {name}'s {', '.join(labels)} changed")
                if len(labels) != len(moved):
                    self.add("high", "plugin-components", where,
                             f"what plugin {name} declares changed: "
                             + ", ".join(k for k in moved if k not in labels))

    def _package_facts(self, where: str, facts: list[str], old: list[str], what: str) -> None:
        for fact in sorted(set(facts) - set(old)):
            if fact.startswith("unpinned-package:"):
                self.add("high", "unpinned-package", where,
                         f"{what}: fetches and runs {fact.split(':', 2)[-1]!r} from a registry "
                         "at launch, unpinned")
            elif fact.startswith("link-local:"):
                self.add("high", "link-local", where,
                         f"{what}: reaches link-local / cloud-metadata host "
                         f"{fact.split(':', 1)[1]}")

    def run(self) -> list[Finding]:
        self.commands("servers", "server")
        self.commands("hooks", "hook")
        self.plugins()
        self.secrets()
        self.skills()
        self.instructions()
        self.sandbox()
        self.settings()
        for severity, code, item, message in review_findings(self.old or None, self.new):
            self.add(severity, code, item, message)  # type: ignore[arg-type]
        from agentstack.surface.findings import findings as surface_findings

        for severity, code, item, message in surface_findings(self.old or None, self.new):
            self.add(severity, code, item, message)  # type: ignore[arg-type]
        return sorted(self.findings, key=lambda f: (_ORDER[f.severity], f.item, f.code, f.message))


def _leaf_changes(old: Any, new: Any, path: str, out: list[Change]) -> None:
    if old == new:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            sub = f"{path}.{key}" if path else key
            if key not in old:
                out.append(Change(path=sub, kind="added", new=new[key]))
            elif key not in new:
                out.append(Change(path=sub, kind="removed", old=old[key]))
            else:
                _leaf_changes(old[key], new[key], sub, out)
        return
    if path.endswith(".roots") and _is_root_list(old) and _is_root_list(new):
        # A code root is shown file by file (`servers.x.roots[servers/mod.py]`, a content diff
        # each); what the roots are and what they leave out, as one summary line.
        if _root_shape(old) != _root_shape(new):
            out.append(Change(path=path, kind="changed", old=_root_shape(old),
                              new=_root_shape(new)))
        _leaf_changes(root_files(old), root_files(new), path, out)
        return
    if (_is_file_list(old) or old == []) and (_is_file_list(new) or new == []):
        # Keyed by file path, shown as `skills.x.files[scripts/run.sh]` (paths contain dots).
        before = {f["path"]: f for f in old}
        after = {f["path"]: f for f in new}
        for key in sorted(set(before) | set(after)):
            sub = f"{path}[{key}]"
            if key not in before:
                out.append(Change(path=sub, kind="added", new=after[key]))
            elif key not in after:
                out.append(Change(path=sub, kind="removed", old=before[key]))
            elif before[key] != after[key]:
                # A file is one unit: its bytes (shown as a diff), size and mode change together.
                out.append(Change(path=sub, kind="changed", old=before[key], new=after[key]))
        return
    out.append(Change(path=path, kind="changed", old=old, new=new))


def _is_root_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, dict) and "path" in v and isinstance(v.get("files"), list) for v in value
    )


def _root_shape(roots: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"path": r["path"], "excluded": list(r.get("excluded", []))} for r in roots]


def root_files(roots: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every file of a list of code roots, with its project-relative path."""
    out: list[dict[str, Any]] = []
    for root in roots:
        prefix = "" if root["path"] in ("", ".") else root["path"].rstrip("/") + "/"
        out.extend({**f, "path": prefix + f["path"]} for f in root["files"])
    return out


def _is_file_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, dict) and "path" in v and "digest" in v for v in value)
    )


def changed_items(diff: ConsentDiff) -> list[str]:
    """The items a diff touches (`servers.notes`, `instructions`), for one-line summaries."""
    items = set()
    for change in diff.changes:
        match = re.match(r"^[^.\[]+(?:\.[^.\[]+)?", change.path)
        items.add(match.group(0) if match else change.path)
    return sorted(items)


# Keys of a consent document that are bookkeeping, not something a reviewer decides on: `lock` is
# the manifest's digest, and every change it reflects is shown item by item.
_INTERNAL_KEYS = frozenset({"lock", "consent"})


def file_entry(change: Change) -> tuple[str, str] | None:
    """(item, file path) when `change` is one pinned file (`servers.x.files[run.py]`,
    `instructions[AGENTS.md]`, `skills.y.files[SKILL.md]`), else None."""
    match = re.match(
        r"^(instructions|(?:servers|hooks|skills|plugins)\.[^\[]+?\.(?:files|roots))\[(.*)\]$",
        change.path,
    )
    if match is None:
        return None
    item = match.group(1).removesuffix(".files").removesuffix(".roots")
    return item, match.group(2)


def consent_diff(old: dict[str, Any] | None, new: dict[str, Any]) -> ConsentDiff:
    changes: list[Change] = []
    if old is not None and ("code_roots" in old or "code_roots" in new):
        old, new = shared_roots_for_diff(old, new)
    visible_old = {k: v for k, v in (old or {}).items() if k not in _INTERNAL_KEYS}
    visible_new = {k: v for k, v in new.items() if k not in _INTERNAL_KEYS}
    _leaf_changes(visible_old, visible_new, "", changes)
    return ConsentDiff(findings=_Differ(old, new).run(), changes=changes)


def _server_reach(item: dict[str, Any]) -> tuple[list[str], dict[str, tuple[Any, Any]]]:
    box = item.get("sandbox")
    if not isinstance(box, dict):
        return [], {}
    network = box.get("network") or {}
    hosts = [str(h) for h in network.get("allow_domains", [])]
    hosts += [f"127.0.0.1:{p}" for p in network.get("localhost_ports", [])]
    credentials = {str(n): (c.get("secret"), c.get("upstream"))
                   for n, c in (box.get("credentials") or {}).items() if isinstance(c, dict)}
    return hosts, credentials


def shared_roots_for_diff(
    old: dict[str, Any], new: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both documents with every code root as one list of files per command, so that a file
    changed in a tree several commands share (the lock's `code_roots`) is a change of each of them
    (`servers.a.roots[servers/x.py]`, `servers.b.roots[servers/x.py]`). A root with the same digest
    and excluded list on both sides carries no files on either (nothing of it changed; at 1,000
    servers sharing a directory, comparing its files for each would be a million comparisons).
    The `code_roots` table itself is left out: every change of it is shown where it is loaded."""
    out_old = {k: v for k, v in old.items() if k != "code_roots"}
    out_new = {k: v for k, v in new.items() if k != "code_roots"}
    for section in ("servers", "hooks"):
        before, after = old.get(section) or {}, new.get(section) or {}
        if not isinstance(before, dict) or not isinstance(after, dict):
            continue
        was_items, now_items = dict(before), dict(after)
        for name in set(before) | set(after):
            was, now = before.get(name), after.get(name)
            was_roots = {r["path"]: r for r in (was or {}).get("roots", [])}
            now_roots = {r["path"]: r for r in (now or {}).get("roots", [])}
            same = {
                path
                for path in was_roots.keys() & now_roots.keys()
                if (was_roots[path]["digest"], was_roots[path].get("excluded", []))
                == (now_roots[path]["digest"], now_roots[path].get("excluded", []))
            }

            if was is not None and was_roots:
                was_items[name] = {**was, "roots": _shown_roots(old, was_roots, same)}
            if now is not None and now_roots:
                now_items[name] = {**now, "roots": _shown_roots(new, now_roots, same)}
        out_old[section], out_new[section] = was_items, now_items
    return out_old, out_new


def _shown_roots(
    doc: dict[str, Any], roots: dict[str, dict[str, Any]], same: set[str]
) -> list[dict[str, Any]]:
    from agentstack.lock.coderoots import root_files as files_of

    return [{**r, "files": [] if path in same else files_of(doc, r)} for path, r in roots.items()]

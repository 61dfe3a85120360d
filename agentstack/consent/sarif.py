"""SARIF 2.1.0 output for `check`, `diff` and `status` (`--format sarif`), for code-scanning views.

Every finding becomes a SARIF result: a rule id (the finding's code, prefixed by the command that
found it: `diff/new-executable`, `boundary/network`, `status/lock-stale`), a level from its
severity, and a location in the project when the finding has one: the line of `agentstack.toml`
that declares the item it is about, or the file it is about (a drifted harness file, the lock).

Standard library only (it runs in CI and pre-commit hooks; nothing heavy to import).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
MANIFEST = "agentstack.toml"

# severity -> (SARIF level, GitHub's `security-severity` score for the rule)
LEVELS: dict[str, tuple[str, str]] = {
    "high": ("error", "8.0"),
    "medium": ("warning", "5.0"),
    "low": ("note", "2.0"),
}


@dataclass(frozen=True)
class Finding:
    """One result: `rule` (the id), `severity` (high/medium/low), `message`, and where: a
    project-relative `path` (None: the project as a whole) and a 1-based `line` (None: the file)."""

    rule: str
    severity: str
    message: str
    path: str | None = None
    line: int | None = None
    item: str | None = None


# ------------------------------------------------------------------ locations


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"^\s*(\"[^\"]*\"|'[^']*'|[A-Za-z0-9_-]+)\s*=")


def _split_dotted(text: str) -> list[str]:
    """`servers."my.server"` -> ["servers", "my.server"] (TOML dotted keys, quotes kept apart)."""
    parts: list[str] = []
    for match in re.finditer(r"\"([^\"]*)\"|'([^']*)'|([^.\s\"']+)", text):
        parts.append(next(g for g in match.groups() if g is not None))
    return parts


def _unquote(key: str) -> str:
    return key[1:-1] if key[:1] in "\"'" and key[-1:] == key[:1] else key


class ManifestLines:
    """Where each table and key of agentstack.toml is declared (1-based lines): a small reader
    of table headers and `key =` lines, enough to point a finding at its item."""

    def __init__(self, text: str) -> None:
        self.where: dict[tuple[str, ...], int] = {}
        table: tuple[str, ...] = ()
        for number, line in enumerate(text.splitlines(), start=1):
            header = _HEADER.match(line)
            if header:
                table = tuple(_split_dotted(header.group(1)))
                self.where.setdefault(table, number)
                continue
            key = _KEY.match(line)
            if key:
                self.where.setdefault((*table, _unquote(key.group(1))), number)

    @classmethod
    def of(cls, root: Path) -> ManifestLines:
        try:
            return cls((root / MANIFEST).read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return cls("")

    def line(self, item: str) -> int | None:
        """The line declaring `item` ("servers.notes", "settings.permissions.allow"), or of its
        nearest declared parent; None when nothing of it is in the file."""
        parts = tuple(_split_item(item))
        while parts:
            if parts in self.where:
                return self.where[parts]
            parts = parts[:-1]
        return None


def _split_item(item: str) -> list[str]:
    # An item is SECTION.NAME[.FIELD...]; a name may hold dots only when quoted in TOML, and the
    # consent document's item strings never quote, so the longest declared prefix wins.
    return item.split(".")


def locate(lines: ManifestLines, item: str | None) -> tuple[str | None, int | None]:
    """(path, line) for a finding about `item`: agentstack.toml at its declaration when the item
    is declared there, else the project as a whole."""
    if not item:
        return None, None
    line = lines.line(item)
    if line is None:
        return None, None
    return MANIFEST, line


# ------------------------------------------------------------------ the log


def _rule_entry(rule: str, severity: str, description: str) -> dict[str, Any]:
    level, score = LEVELS.get(severity, LEVELS["medium"])
    return {
        "id": rule,
        "name": "".join(w.capitalize() for w in re.split(r"[^A-Za-z0-9]+", rule) if w),
        "shortDescription": {"text": description},
        "defaultConfiguration": {"level": level},
        "properties": {"security-severity": score, "tags": ["security", "agentstack"]},
    }


def sarif_log(findings: list[Finding], *, command: str, root: Path | None) -> dict[str, Any]:
    """A SARIF 2.1.0 log with one run of agentstack `command` over the project at `root`."""
    from agentstack import __version__

    rules: dict[str, dict[str, Any]] = {}
    results: list[dict[str, Any]] = []
    for f in findings:
        if f.rule not in rules:
            rules[f.rule] = _rule_entry(f.rule, f.severity, f.rule.split("/", 1)[-1]
                                        .replace("-", " "))
        level = LEVELS.get(f.severity, LEVELS["medium"])[0]
        result: dict[str, Any] = {
            "ruleId": f.rule,
            "ruleIndex": list(rules).index(f.rule),
            "level": level,
            "message": {"text": f.message},
        }
        if f.path is not None:
            physical: dict[str, Any] = {
                "artifactLocation": {"uri": f.path, "uriBaseId": "PROJECTROOT"}
            }
            if f.line is not None:
                physical["region"] = {"startLine": f.line}
            result["locations"] = [{"physicalLocation": physical}]
        elif f.item:
            result["locations"] = [{"logicalLocations": [{"fullyQualifiedName": f.item}]}]
        if f.item:
            result["properties"] = {"item": f.item, "severity": f.severity}
        else:
            result["properties"] = {"severity": f.severity}
        results.append(result)
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "agentstack",
                "version": __version__,
                "rules": list(rules.values()),
            }
        },
        "automationDetails": {"id": f"agentstack/{command}/"},
        "results": results,
    }
    if root is not None:
        run["originalUriBaseIds"] = {"PROJECTROOT": {"uri": root.resolve().as_uri() + "/"}}
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def print_sarif(findings: list[Finding], *, command: str, root: Path | None) -> None:
    from agentstack.output import print_json

    print_json(sarif_log(findings, command=command, root=root))


# ------------------------------------------------------------------ per command


def diff_findings(findings: list[dict[str, str]], lines: ManifestLines) -> list[Finding]:
    """The consent diff's risk findings (`ConsentDiff.findings`, as JSON)."""
    out = []
    for f in findings:
        item = f.get("item") or None
        path, line = locate(lines, item)
        out.append(Finding(rule=f"diff/{f['code']}", severity=f["severity"],
                           message=f"{item}: {f['message']}" if item else f["message"],
                           path=path, line=line, item=item))
    return out


def check_findings(result: dict[str, Any], lines: ManifestLines) -> list[Finding]:
    """`check --boundary`'s result (`CheckResult.to_json()`): a violation is an error at the item
    it comes from; something unmodelled a warning."""
    out = []
    for v in result.get("violations", []):
        item = str(v.get("source", "")) or None
        path, line = locate(lines, item)
        out.append(Finding(
            rule=f"boundary/{v['domain']}", severity="high",
            message=f"exceeds the boundary ({result.get('boundary')}): {v['domain']}: "
            f"{v['counterexample']}" + (f" (from {item})" if item else ""),
            path=path, line=line, item=item,
        ))
    for u in result.get("unsupported", []):
        what = str(u.get("what", ""))
        item = what.split(":", 1)[0] if ":" in what else None
        path, line = locate(lines, item)
        out.append(Finding(
            rule=f"boundary-unsupported/{u['domain']}", severity="medium",
            message=f"cannot be checked against the boundary: {what}: {u.get('reason')}",
            path=path, line=line, item=item,
        ))
    return out


def status_findings(report: dict[str, Any], lines: ManifestLines) -> list[Finding]:
    """`status`'s report (`project_status`): what makes it exit 1, and what it warns about."""
    out: list[Finding] = []
    if report.get("lock") == "stale":
        out.append(Finding("status/lock-stale", "high",
                           f"the lock is stale: {report.get('lock_problem')}; run 'agentstack lock'",
                           path="agentstack.lock" if (Path(report["project"]) / "agentstack.lock")
                           .is_file() else MANIFEST))
    elif report.get("trust") != "trusted":
        out.append(Finding("status/not-trusted", "high",
                           f"the consent digest {report.get('digest')} is not trusted on this "
                           "machine; review it with 'agentstack trust'", path=MANIFEST))
    for f in diff_findings(report.get("findings", []), lines):
        out.append(Finding(f"status/{f.rule}", f.severity, f.message, f.path, f.line, f.item))
    for path in report.get("drift", []):
        role = report.get("drift_roles", {}).get(path, "")
        rel = path if not path.startswith("/") else None
        out.append(Finding("status/drift", "high",
                           f"{path} changed since 'agentstack apply' wrote it"
                           + (f" ({role})" if role else "")
                           + "; the guard blocks tools until 'agentstack apply --write'",
                           path=rel, item=None if rel else path))
    if report.get("guard_expected") and not report.get("snapshot"):
        out.append(Finding("status/no-guard-snapshot", "high",
                           "the guard has no snapshot for this project; run "
                           "'agentstack apply --write'"))
    for missing in report.get("missing_secrets", []):
        item = missing.get("item")
        path, line = locate(lines, item)
        out.append(Finding("status/missing-secret", "medium",
                           f"{item}: {missing.get('key')} names secret "
                           f"{missing.get('secret')!r}, which the secret store does not hold",
                           path=path, line=line, item=item))
    for path in report.get("tracked", []):
        out.append(Finding("status/rendered-file-tracked", "medium",
                           f"{path} is rendered per machine but tracked by git", path=path))
    return out


# ------------------------------------------------------------------ the option

FORMATS = ("text", "json", "sarif")


def output_format(value: str | None, as_json: bool) -> str:
    """`--format text|json|sarif` (with the older `--json`): the format to print in."""
    from agentstack.errors import InvalidInput

    if value is None:
        return "json" if as_json else "text"
    if value not in FORMATS:
        raise InvalidInput(f"--format {value!r}: not a format", hint="text, json or sarif")
    if as_json and value != "json":
        raise InvalidInput(f"--json and --format {value} disagree", hint="give one of them")
    return value

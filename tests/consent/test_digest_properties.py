"""Properties of the consent digest (README "Security model", docs/lockfile.md).

1. Every semantic mutation moves the digest: each field of each item kind, list membership and
   order, booleans, the executable bit and any byte of any pinned file, git commits and subdirs.
   It must also move the consent *view* (the document without its `lock` manifest hash), because
   that is what the user reviews: a change visible only through an opaque hash is not consent.
2. Cosmetic edits of agentstack.toml never move it: comments, whitespace, blank lines, table and
   key order, string quoting styles, integer spellings, inline vs. [table] vs. dotted keys.
3. Resolution is deterministic: byte-identical lock text, nothing machine-specific or time-based.
4. `canonical_bytes` is one byte form per JSON value.

Projects are built in directories made inside each test (hypothesis re-runs a test body many times
with the same function-scoped fixtures).
"""

from __future__ import annotations

import copy
import json
import os
import random
import re
import shutil
import stat
import string
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentstack.canonical import CanonicalError, canonical_bytes
from agentstack.consent.document import consent_digest, consent_document
from agentstack.errors import ManifestInvalid
from agentstack.lock.resolve import dumps_lock, parse_lock, resolver_for
from agentstack.manifest.load import load_manifest
from agentstack.manifest.model import _EXPANSION as EXPANSION
from tests.conftest import git

# ============================================================================ the base project

FILES: dict[str, str] = {
    "servers/a.py": "import sys\nprint('server a', sys.argv)\n",
    "servers/b.py": "import sys\nprint('server a', sys.argv)\n",  # same bytes, other name
    "skills/local/SKILL.md": "---\nname: local\n---\nUse run.sh.\n",
    "skills/local/run.sh": "#!/bin/sh\necho run\n",
    "skills/local/lib/notes.txt": "notes\n",
    "skills/copy/SKILL.md": "---\nname: local\n---\nUse run.sh.\n",  # an identical twin
    "skills/copy/run.sh": "#!/bin/sh\necho run\n",
    "skills/copy/lib/notes.txt": "notes\n",
    "docs/one.md": "# One\nBe careful.\n",
    "docs/two.md": "# Two\nBe kind.\n",
    "docs/three.md": "# Three\nBe brief.\n",
    "hooks/audit.sh": "#!/bin/sh\nexit 0\n",
    "hooks/audit-copy.sh": "#!/bin/sh\nexit 0\n",
    "hooks/rules.txt": "no secrets\n",
    "servers/helper.py": "def helper():\n    return 1\n",  # imported by a.py: in its code root
    "vendor/lib.py": "VALUE = 1\n",  # on PYTHONPATH: a code root of its own
    "vendor/pkg/__init__.py": "# package\n",
    "node/package.json": '{"name": "n", "scripts": {"start": "node index.js"}}\n',
    "node/index.js": "require('./dep')\n",
    "node/dep.js": "module.exports = 1\n",
    "node/node_modules/x/index.js": "module.exports = 2\n",  # excluded, and reported
    # A Claude Code plugin in the project (its hooks and skills enabled, not its commands).
    "plugins/team/.claude-plugin/plugin.json": '{"name": "team", "version": "1.0.0"}\n',
    "plugins/team/hooks/hooks.json": json.dumps(
        {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "command": "${CLAUDE_PLUGIN_ROOT}/bin/check.sh", "timeout": 5}
        ]}]}}
    ),
    "plugins/team/bin/check.sh": "#!/bin/sh\nexit 0\n",
    "plugins/team/skills/review/SKILL.md": "---\nname: review\n---\nReview.\n",
    "plugins/team/commands/ship.md": "Ship it.\n",
}
# Every file of the project's plugin (each byte of each one is pinned by the plugin item).
PLUGIN_FILES = tuple(p for p in FILES if p.startswith("plugins/team/"))
EXECUTABLES = ("skills/local/run.sh", "skills/copy/run.sh", "hooks/audit.sh", "hooks/audit-copy.sh",
               "plugins/team/bin/check.sh")
# Every local file whose bytes the base manifest pins (directly, or named on a command line).
PINNED = (
    "servers/a.py",
    "servers/b.py",
    "servers/helper.py",
    "vendor/lib.py",
    "vendor/pkg/__init__.py",
    "node/package.json",
    "node/index.js",
    "node/dep.js",
    "hooks/audit-copy.sh",
    "skills/local/SKILL.md",
    "skills/local/run.sh",
    "skills/local/lib/notes.txt",
    "docs/one.md",
    "docs/two.md",
    "hooks/audit.sh",
    "hooks/rules.txt",
)


def base_data(git_url: str) -> dict[str, Any]:
    """The base manifest as TOML data: every item kind, every field set."""
    return {
        "project": {"name": "demo", "harnesses": ["claude-code", "codex", "gemini-cli"]},
        "servers": {
            "local": {
                "command": "python3",
                "args": ["-u", "a.py", "--port", "8080"],
                "env": {
                    "LOG_LEVEL": "debug",
                    "API_TOKEN": "secret:api-token",
                    "PYTHONPATH": "../vendor",
                },
                "cwd": "servers",
            },
            "node": {"command": "npm", "args": ["start"], "cwd": "node"},
            "remote": {
                "url": "https://mcp.example.com/v1?team=core",
                "headers": {"X-Team": "core", "Authorization": "secret:remote-auth"},
            },
        },
        "skills": {
            "local-skill": {"path": "skills/local"},
            "git-skill": {"git": git_url, "rev": "v1", "subdir": "skill"},
        },
        "instructions": {"files": ["docs/one.md", "docs/two.md"]},
        "plugins": {
            "team": {"harness": "claude-code", "path": "plugins/team", "enable": ["hooks", "skills"]},
            "git-plugin": {
                "harness": "claude-code", "git": git_url, "rev": "v1", "subdir": "plugin"
            },
        },
        "hooks": {
            "guard": {
                "event": "PreToolUse",
                "matcher": "Bash|Write",
                "command": ["python3", "-c", "print('ok\\n')"],
                "timeout": 10,
            },
            "audit": {
                "event": "PostToolUse",
                "matcher": "Edit.*",
                "script": "hooks/audit.sh",
                "args": ["--rules", "hooks/rules.txt"],
                "timeout": 20,
            },
        },
        "settings": {
            "permissions": {
                "allow": ["Bash(git status:*)", "Read"],
                "deny": ["Bash(rm -rf *)"],
                "ask": ["WebFetch(domain:example.com)"],
            },
            "passthrough": {
                "codex": {
                    "model": 'o3 "mini"',
                    "max_turns": 12,
                    "tools": {"web_search": True, "depth": 2, "label": "na\u00efve \u2713"},
                }
            },
        },
        "sandbox": {
            "enabled": True,
            "read_dirs": ["~/.cargo", "/usr/share"],
            "write_dirs": ["build"],
            "read_files": ["~/.gitconfig"],
            "write_files": ["out.log"],
            "env": ["PATH", "LANG"],
            "network": {
                "block": True,
                "allow_domains": ["api.example.com", "*.pypi.org"],
                "localhost_ports": [8080, 9090],
            },
        },
    }


@dataclass
class Project:
    root: Path
    repo: Path
    data: dict[str, Any]

    def write(self, rng: random.Random | None = None) -> str:
        text = emit(self.data, rng)
        (self.root / "agentstack.toml").write_text(text, encoding="utf-8", newline="")
        return text

    def resolve(self) -> tuple[Any, dict[str, Any]]:
        manifest = load_manifest(self.root)
        return manifest, resolver_for(self.root, None).resolve(manifest)  # fresh StatCache

    def digest(self) -> tuple[str, dict[str, Any]]:
        manifest, lock = self.resolve()
        document = consent_document(manifest, lock)
        return consent_digest(document), document

    def file(self, rel: str) -> Path:
        return self.root / rel


def _commit_all(repo: Path, message: str) -> None:
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", message, cwd=repo)


def build_project(base: Path) -> Project:
    """A project under `base/project` and its git skill source under `base/src`."""
    repo = base / "src"
    for rel, text in {
        "skill/SKILL.md": "---\nname: remote\n---\nRemote skill.\n",
        "skill/tool.sh": "#!/bin/sh\necho tool\n",
        "other/SKILL.md": "---\nname: other\n---\nOther skill.\n",
        "plugin/.claude-plugin/plugin.json": '{"name": "shared", "version": "2.0.0"}\n',
        "plugin/.codex-plugin/plugin.json": '{"name": "shared", "version": "2.0.0"}\n',
        "plugin/.mcp.json": '{"mcpServers": {"docs": {"command": "node", "args": ["s.js"]}}}\n',
        "plugin/s.js": "console.log(1)\n",
    }.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    (repo / "skill/tool.sh").chmod(0o755)
    git("init", "-q", "-b", "main", cwd=repo)
    _commit_all(repo, "one")
    git("tag", "v1", cwd=repo)
    (repo / "skill/SKILL.md").write_text("---\nname: remote\n---\nRemote skill, v2.\n")
    _commit_all(repo, "two")
    git("tag", "v2", cwd=repo)

    root = base / "project"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    for rel in EXECUTABLES:
        (root / rel).chmod(0o755)
    project = Project(root=root, repo=repo, data=base_data(repo.as_uri()))
    project.write()
    return project


# ================================================================ TOML written in many styles
#
# `emit(data)` writes the data in one plain style; `emit(data, rng)` makes every stylistic choice
# TOML allows at random. Every emitted text is checked to parse back to exactly `data`.

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")
_SHORT_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_COMMENTS = (
    "#",
    "# a comment",
    "# [not.a.table]",
    "# key = 'value' \"quoted\" = 1",
    "#\tünïcode comment ✓",
    "## dashes -- and = signs",
)


def _pick(rng: random.Random | None, options: list[str]) -> str:
    return options[0] if rng is None else rng.choice(options)


def _is_control(ch: str) -> bool:
    return ord(ch) < 0x20 or ord(ch) == 0x7F


def _unicode_escape(ch: str) -> str:
    return f"\\u{ord(ch):04X}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08X}"


def _lower_hex(escape: str) -> str:
    return escape[:2] + escape[2:].lower()  # \U0001F980 -> \U0001f980, never \u (4 digits)


def _escape_basic(text: str, rng: random.Random | None) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append(_pick(rng, ["\\" + ch, _unicode_escape(ch)]))
        elif ch in _SHORT_ESCAPES:
            out.append(_pick(rng, [_SHORT_ESCAPES[ch], _unicode_escape(ch)]))
        elif _is_control(ch):
            out.append(_unicode_escape(ch))
        elif rng is not None and (not ch.isascii() or rng.random() < 0.05):
            out.append(_pick(rng, [ch, _unicode_escape(ch), _lower_hex(_unicode_escape(ch))]))
        else:
            out.append(ch)
    return "".join(out)


def _string(text: str, rng: random.Random | None, nl: str, *, inline: bool) -> str:
    basic = '"' + _escape_basic(text, rng) + '"'
    if rng is None:
        return basic
    options = [basic]
    plain = "'" not in text and not any(_is_control(c) and c != "\t" for c in text)
    if plain:
        options.append(f"'{text}'")
    if not inline:
        lead = rng.choice(["", nl])  # a newline right after the opening quotes is trimmed
        body = _escape_basic(text, rng)
        if text and rng.random() < 0.5:
            # A line-ending backslash swallows the newline and the next line's indentation.
            cuts = [i for i in range(1, len(text)) if not text[i].isspace()]
            if cuts:
                cut = rng.choice(cuts)
                body = (
                    _escape_basic(text[:cut], rng)
                    + "\\"
                    + nl
                    + rng.choice(["", "  ", "\t", nl + "    "])
                    + _escape_basic(text[cut:], rng)
                )
        options.append(f'"""{lead}{body}"""')
        if plain and not text.endswith("'"):
            options.append(f"'''{lead}{text}'''")
    return rng.choice(options)


def _integer(value: int, rng: random.Random | None) -> str:
    if rng is None or value < 0:
        return str(value)
    digits = str(value)
    options = [digits, "+" + digits, f"0x{value:x}", f"0x{value:X}", f"0o{value:o}", f"0b{value:b}"]
    if len(digits) > 1:
        cut = rng.randrange(1, len(digits))
        options.append(digits[:cut] + "_" + digits[cut:])
    return rng.choice(options)


def _key(key: str, rng: random.Random | None) -> str:
    options = [key] if _BARE.fullmatch(key) else []
    options.append('"' + _escape_basic(key, rng) + '"')
    if "'" not in key and not any(_is_control(c) for c in key):
        options.append(f"'{key}'")
    return _pick(rng, options)


def _dotted_key(parts: list[str], rng: random.Random | None) -> str:
    sep = _pick(rng, [".", " . ", ".", "\t.\t"])
    return sep.join(_key(p, rng) for p in parts)


def _ws(rng: random.Random | None, plain: str = " ") -> str:
    return plain if rng is None else rng.choice([" ", "", "  ", "\t"])


def _value(value: Any, rng: random.Random | None, nl: str, *, inline: bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return _integer(value, rng)
    if isinstance(value, str):
        return _string(value, rng, nl, inline=inline)
    if isinstance(value, list):
        items = [_value(v, rng, nl, inline=inline) for v in value]
        if rng is None or inline or rng.random() < 0.5:
            comma = _pick(rng, [", ", ",", " ,  "])
            trailing = "," if items and rng is not None and rng.random() < 0.3 else ""
            return "[" + _ws(rng, "") + comma.join(items) + trailing + _ws(rng, "") + "]"
        lines = ["["]
        for index, item in enumerate(items):
            last = index == len(items) - 1
            comma = "" if last and rng.random() < 0.5 else ","
            comment = " " + rng.choice(_COMMENTS) if rng.random() < 0.3 else ""
            lines.append(rng.choice(["  ", "    ", "\t", ""]) + item + comma + comment)
            if rng.random() < 0.15:
                lines.append(rng.choice(["", "  " + rng.choice(_COMMENTS)]))
        lines.append("]")
        return nl.join(lines)
    if isinstance(value, dict):
        return _inline_table(value, rng, nl)
    raise TypeError(type(value))


def _inline_table(table: dict[str, Any], rng: random.Random | None, nl: str) -> str:
    pairs: list[str] = []
    for key, value in _items(table, rng):
        if isinstance(value, dict) and value and rng is not None and rng.random() < 0.5:
            pairs += _dotted_pairs([key], value, rng, nl, inline=True)
        else:
            pairs.append(
                f"{_key(key, rng)}{_ws(rng)}={_ws(rng)}{_value(value, rng, nl, inline=True)}"
            )
    if rng is not None:
        rng.shuffle(pairs)
    if not pairs:
        return _pick(rng, ["{}", "{ }"])
    return "{" + _ws(rng) + _pick(rng, [", ", ",", " , "]).join(pairs) + _ws(rng) + "}"


def _dotted_pairs(
    parts: list[str], table: dict[str, Any], rng: random.Random | None, nl: str, *, inline: bool
) -> list[str]:
    """`a.b.c = v` for every leaf under `table` (an empty sub-table is written `a.b = {}`)."""
    if not table:
        return [f"{_dotted_key(parts, rng)}{_ws(rng)}={_ws(rng)}{{}}"]
    pairs: list[str] = []
    for key, value in _items(table, rng):
        if isinstance(value, dict) and (rng is None or rng.random() < 0.6):
            pairs += _dotted_pairs([*parts, key], value, rng, nl, inline=inline)
        else:
            rendered = _value(value, rng, nl, inline=inline)
            pairs.append(f"{_dotted_key([*parts, key], rng)}{_ws(rng)}={_ws(rng)}{rendered}")
    return pairs


def _items(table: dict[str, Any], rng: random.Random | None) -> list[tuple[str, Any]]:
    items = list(table.items())
    if rng is not None:
        rng.shuffle(items)
    return items


def _sections(
    path: list[str],
    table: dict[str, Any],
    rng: random.Random | None,
    nl: str,
    out: list[tuple[list[str], list[str], bool]],
) -> None:
    """Collect (header path, body lines, has own data) for `table` and its [table] descendants."""
    lines: list[str] = []
    mine = (path, lines, not table)
    out.append(mine)
    for key, value in _items(table, rng):
        if isinstance(value, dict):
            mode = "header" if rng is None else rng.choice(["header", "header", "inline", "dotted"])
            if mode == "header":
                _sections([*path, key], value, rng, nl, out)
            elif mode == "inline":
                lines.append(
                    f"{_key(key, rng)}{_ws(rng)}={_ws(rng)}{_inline_table(value, rng, nl)}"
                )
            else:
                lines += _dotted_pairs([key], value, rng, nl, inline=False)
        else:
            lines.append(
                f"{_key(key, rng)}{_ws(rng)}={_ws(rng)}{_value(value, rng, nl, inline=False)}"
            )
    if rng is not None:
        rng.shuffle(lines)


def emit(data: dict[str, Any], rng: random.Random | None = None) -> str:
    """`data` as TOML; with `rng`, in a random but equivalent style. Checked to parse back."""
    nl = "\n" if rng is None or rng.random() < 0.8 else "\r\n"
    sections: list[tuple[list[str], list[str], bool]] = []
    _sections([], data, rng, nl, sections)
    root, rest = sections[0], sections[1:]
    if rng is not None:
        rng.shuffle(rest)  # a super-table may follow its sub-tables; siblings in any order
    out: list[str] = []

    def decorate(line: str) -> None:
        if rng is not None and rng.random() < 0.2:
            out.append(rng.choice(["", "   ", "\t", rng.choice(_COMMENTS)]))
        if rng is None:
            out.append(line)
            return
        indent = rng.choice(["", "", "  ", "\t"])
        trailing = rng.choice(
            ["", "", "  ", " " + rng.choice(_COMMENTS), "\t" + rng.choice(_COMMENTS)]
        )
        out.append(indent + line + trailing)

    if rng is not None and rng.random() < 0.5:
        out += [rng.choice(_COMMENTS), ""]
    for line in root[1]:
        decorate(line)
    for path, lines, empty in rest:
        has_body = bool(lines) or empty
        if rng is None or has_body or rng.random() < 0.5:  # [a] may stay implicit before [a.b]
            out.append("")
            header = "[" + _ws(rng, "") + _dotted_key(path, rng) + _ws(rng, "") + "]"
            decorate(header)
        for line in lines:
            decorate(line)
    if rng is not None and rng.random() < 0.5:
        out += ["", rng.choice(_COMMENTS)]
    text = nl.join(out).lstrip(nl) + nl
    parsed = tomllib.loads(text)
    assert parsed == data, text  # the emitter itself must be faithful
    assert _types(parsed) == _types(data), text
    return text


def _types(value: Any) -> Any:
    """The value with every leaf replaced by its type (True == 1 in Python; not in TOML)."""
    if isinstance(value, dict):
        return {k: _types(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_types(v) for v in value]
    return type(value).__name__


# ============================================================================ 1. mutations


def _view(document: dict[str, Any]) -> bytes:
    """The consent view the user reviews: the document without the manifest's digest (as bytes,
    so that True and 1 differ as they do in the document)."""
    return canonical_bytes({k: v for k, v in document.items() if k != "lock"})


def _flip(path: Path, index: int = 0, xor: int = 0x20) -> None:
    data = bytearray(path.read_bytes())
    data[index % len(data)] ^= xor
    mode = path.stat().st_mode
    path.write_bytes(bytes(data))
    assert path.stat().st_mode == mode


def _toggle_x(path: Path) -> None:
    path.chmod(stat.S_IMODE(path.stat().st_mode) ^ stat.S_IXUSR)


def _at(data: dict[str, Any], dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("/"):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def _set(dotted: str, value: Any) -> Callable[[Project], None]:
    parent, _, leaf = dotted.rpartition("/")

    def mutate(p: Project) -> None:
        _at(p.data, parent)[leaf] = value

    return mutate


def _drop(dotted: str) -> Callable[[Project], None]:
    parent, _, leaf = dotted.rpartition("/")

    def mutate(p: Project) -> None:
        del _at(p.data, parent)[leaf]

    return mutate


def _list(dotted: str, change: Callable[[list[Any]], None]) -> Callable[[Project], None]:
    def mutate(p: Project) -> None:
        change(_at(p.data, dotted))

    return mutate


def _rename(dotted: str, new: str) -> Callable[[Project], None]:
    parent, _, leaf = dotted.rpartition("/")

    def mutate(p: Project) -> None:
        table = _at(p.data, parent)
        table[new] = table.pop(leaf)

    return mutate


def _file(rel: str, change: Callable[[Path], None]) -> Callable[[Project], None]:
    def mutate(p: Project) -> None:
        change(p.file(rel))

    return mutate


def _swap(items: list[Any]) -> None:
    items[0], items[1] = items[1], items[0]


def _move_tag_after(change: Callable[[Path], None]) -> Callable[[Project], None]:
    """Commit something new in the source repository and move tag v1 onto it."""

    def mutate(p: Project) -> None:
        git("checkout", "-q", "v1", cwd=p.repo)
        change(p.repo)
        _commit_all(p.repo, "moved")
        git("tag", "-f", "v1", cwd=p.repo)

    return mutate


def _git_url_of_a_clone(p: Project) -> None:
    clone = p.repo.parent / "clone"
    git("clone", "-q", str(p.repo), str(clone), cwd=p.repo.parent)
    p.data["skills"]["git-skill"]["git"] = clone.as_uri()


def _both(*mutations: Callable[[Project], None]) -> Callable[[Project], None]:
    def mutate(p: Project) -> None:
        for m in mutations:
            m(p)

    return mutate


def _add_skill_file(p: Project) -> None:
    (p.file("skills/local/extra.md")).write_text("extra\n")


def _remove_skill_file(p: Project) -> None:
    p.file("skills/local/lib/notes.txt").unlink()


def _rename_skill_file(p: Project) -> None:
    p.file("skills/local/lib/notes.txt").rename(p.file("skills/local/lib/notes.md"))


def _append_byte(path: Path) -> None:
    with path.open("ab") as handle:
        handle.write(b"\n")


MUTATIONS: dict[str, Callable[[Project], None]] = {
    # project
    "project.name": _set("project/name", "other"),
    "project.harnesses add": _list("project/harnesses", lambda v: v.append("opencode")),
    "project.harnesses remove": _list("project/harnesses", lambda v: v.remove("codex")),
    "project.harnesses replace": _list("project/harnesses", lambda v: v.__setitem__(2, "cursor")),
    # stdio server
    "server rename": _rename("servers/local", "local2"),
    "server remove": _drop("servers/local"),
    "server.command": _set("servers/local/command", "python3.12"),
    "server.args value": _list("servers/local/args", lambda v: v.__setitem__(3, "8081")),
    "server.args add": _list("servers/local/args", lambda v: v.append("--debug")),
    "server.args remove": _list("servers/local/args", lambda v: v.remove("-u")),
    "server.args reorder": _list("servers/local/args", lambda v: v.reverse()),
    "server.args script name": _list("servers/local/args", lambda v: v.__setitem__(1, "b.py")),
    "server.env literal value": _set("servers/local/env/LOG_LEVEL", "info"),
    "server.env secret name": _set("servers/local/env/API_TOKEN", "secret:other-token"),
    "server.env literal->secret": _set("servers/local/env/LOG_LEVEL", "secret:debug"),
    "server.env secret->literal": _set("servers/local/env/API_TOKEN", "api-token"),
    "server.env add": _set("servers/local/env/EXTRA", "1"),
    "server.env remove": _drop("servers/local/env/LOG_LEVEL"),
    "server.env rename": _rename("servers/local/env/LOG_LEVEL", "LOGLEVEL"),
    "server.cwd": _both(
        _set("servers/local/cwd", "."),
        _list("servers/local/args", lambda v: v.__setitem__(1, "servers/a.py")),
    ),
    "server script byte": _file("servers/a.py", _flip),
    "server script last byte": _file("servers/a.py", lambda f: _flip(f, -1, 0x01)),
    "server script size": _file("servers/a.py", _append_byte),
    "server script exec bit": _file("servers/a.py", _toggle_x),
    # code roots: what the script loads without naming it
    "code root module byte": _file("servers/helper.py", _flip),
    "code root module size": _file("servers/helper.py", _append_byte),
    "code root module exec bit": _file("servers/helper.py", _toggle_x),
    "code root file added": _file("servers/new.py", lambda f: f.write_text("x = 1\n")),
    "code root file removed": _file("servers/b.py", lambda f: f.unlink()),
    "code root file renamed": _file("servers/b.py", lambda f: f.rename(f.with_name("c.py"))),
    "code root symlink added": _file("servers/link.py", lambda f: f.symlink_to("a.py")),
    "code root subdir file added": _file(
        "servers/sub/m.py", lambda f: (f.parent.mkdir(), f.write_text("\n"))
    ),
    "package.json script": _file("node/package.json", lambda f: _flip(f, 40)),
    "package.json tree byte": _file("node/dep.js", _flip),
    "pin replaces the inferred root": _set("servers/node/pin", ["node/index.js"]),
    "pin includes node_modules": _set("servers/node/pin", ["node", "node/node_modules"]),
    "hook script sibling byte": _file("hooks/audit-copy.sh", lambda f: _flip(f, 3)),
    # loader environment
    "loader env value": _set("servers/local/env/PYTHONPATH", "../vendor/pkg"),
    "loader env removed": _drop("servers/local/env/PYTHONPATH"),
    "loader env path byte": _file("vendor/lib.py", _flip),
    "loader env path new module": _file("vendor/new.py", lambda f: f.write_text("\n")),
    "loader env added": _set("servers/local/env/NODE_OPTIONS", "--require ../node/dep.js"),
    # remote server
    "remote.url": _set("servers/remote/url", "https://mcp.example.com/v2?team=core"),
    "remote.url host": _set("servers/remote/url", "https://mcp.example.org/v1?team=core"),
    "remote.header literal value": _set("servers/remote/headers/X-Team", "infra"),
    "remote.header secret name": _set("servers/remote/headers/Authorization", "secret:auth2"),
    "remote.header secret->literal": _set("servers/remote/headers/Authorization", "remote-auth"),
    "remote.header add": _set("servers/remote/headers/X-Extra", "1"),
    "remote.header remove": _drop("servers/remote/headers/X-Team"),
    "remote.header rename": _rename("servers/remote/headers/X-Team", "X-Group"),
    "remote -> stdio": _set("servers/remote", {"command": "mcp-remote"}),
    # local skill
    "skill rename": _rename("skills/local-skill", "local-skill-2"),
    "skill.path (identical twin)": _set("skills/local-skill/path", "skills/copy"),
    "skill file byte": _file("skills/local/SKILL.md", _flip),
    "skill executable file byte": _file("skills/local/run.sh", lambda f: _flip(f, 5)),
    "skill nested file byte": _file("skills/local/lib/notes.txt", _flip),
    "skill file exec bit on": _file("skills/local/SKILL.md", _toggle_x),
    "skill file exec bit off": _file("skills/local/run.sh", _toggle_x),
    "skill file added": _add_skill_file,
    "skill file removed": _remove_skill_file,
    "skill file renamed": _rename_skill_file,
    # git skill
    "git.url (a clone)": _git_url_of_a_clone,
    "git.rev other tag": _set("skills/git-skill/rev", "v2"),
    "git.subdir": _set("skills/git-skill/subdir", "other"),
    "git tag moved, subdir bytes changed": _move_tag_after(
        lambda repo: (repo / "skill/SKILL.md").write_text("---\nname: remote\n---\nEvil.\n")
    ),
    "git tag moved, subdir untouched": _move_tag_after(
        lambda repo: (repo / "other/SKILL.md").write_text("changed elsewhere\n")
    ),
    "git tag moved, exec bit": _move_tag_after(lambda repo: _toggle_x(repo / "skill/tool.sh")),
    # plugins
    "plugin rename": _rename("plugins/team", "team-2"),
    "plugin remove": _drop("plugins/git-plugin"),
    "plugin.harness": _set("plugins/git-plugin/harness", "codex"),
    "plugin.enable add": _list("plugins/team/enable", lambda v: v.append("commands")),
    "plugin.enable remove": _list("plugins/team/enable", lambda v: v.remove("hooks")),
    "plugin.enable all": _drop("plugins/team/enable"),
    "plugin hook byte": _file("plugins/team/hooks/hooks.json", lambda f: _flip(f, 40)),
    "plugin manifest byte": _file(
        "plugins/team/.claude-plugin/plugin.json", lambda f: _flip(f, f.read_bytes().index(b"1."), 0x01)
    ),
    "plugin executable byte": _file("plugins/team/bin/check.sh", lambda f: _flip(f, 5)),
    "plugin exec bit": _file("plugins/team/commands/ship.md", _toggle_x),
    "plugin file added": _file("plugins/team/agents/new.md", lambda f: (
        f.parent.mkdir(parents=True, exist_ok=True), f.write_text("Agent.\n"))),
    "plugin file removed": _file("plugins/team/commands/ship.md", lambda f: f.unlink()),
    "git plugin rev": _set("plugins/git-plugin/rev", "v2"),
    "git plugin tag moved, server changed": _move_tag_after(
        lambda repo: (repo / "plugin/s.js").write_text("console.log(2)\n")
    ),
    # instructions
    "instructions order": _list("instructions/files", _swap),
    "instructions add": _list("instructions/files", lambda v: v.append("docs/three.md")),
    "instructions remove": _list("instructions/files", lambda v: v.pop()),
    "instructions replace": _list(
        "instructions/files", lambda v: v.__setitem__(1, "docs/three.md")
    ),
    "instruction 1 byte": _file("docs/one.md", _flip),
    "instruction 2 byte": _file("docs/two.md", lambda f: _flip(f, 7, 0x01)),
    "instruction size": _file("docs/two.md", _append_byte),
    # command hook
    "hook rename": _rename("hooks/guard", "guard2"),
    "hook remove": _drop("hooks/guard"),
    "hook.event": _set("hooks/guard/event", "UserPromptSubmit"),
    "hook.matcher": _set("hooks/guard/matcher", "Bash"),
    "hook.matcher removed": _drop("hooks/guard/matcher"),
    "hook.command value": _list("hooks/guard/command", lambda v: v.__setitem__(2, "print(2)")),
    "hook.command add": _list("hooks/guard/command", lambda v: v.append("extra")),
    "hook.command program": _list("hooks/guard/command", lambda v: v.__setitem__(0, "python")),
    "hook.timeout": _set("hooks/guard/timeout", 11),
    "hook.timeout default": _drop("hooks/guard/timeout"),
    # script hook
    "hook.script path (identical twin)": _set("hooks/audit/script", "hooks/audit-copy.sh"),
    "hook script byte": _file("hooks/audit.sh", _flip),
    "hook script size": _file("hooks/audit.sh", _append_byte),
    "hook.args value": _list("hooks/audit/args", lambda v: v.__setitem__(0, "--strict")),
    "hook.args add": _list("hooks/audit/args", lambda v: v.append("-v")),
    "hook.args remove": _list("hooks/audit/args", lambda v: v.pop(0)),
    "hook.args reorder": _list("hooks/audit/args", lambda v: v.reverse()),
    "hook arg file byte": _file("hooks/rules.txt", _flip),
    "hook script event": _set("hooks/audit/event", "Stop"),
    "hook script matcher": _set("hooks/audit/matcher", "Edit"),
    "hook script timeout": _set("hooks/audit/timeout", 600),
    # settings
    "permissions.allow add": _list("settings/permissions/allow", lambda v: v.append("Write")),
    "permissions.allow remove": _list("settings/permissions/allow", lambda v: v.remove("Read")),
    "permissions.deny value": _list(
        "settings/permissions/deny", lambda v: v.__setitem__(0, "Bash(rm *)")
    ),
    "permissions.ask remove": _list("settings/permissions/ask", lambda v: v.clear()),
    "permissions allow->ask": _both(
        _list("settings/permissions/allow", lambda v: v.remove("Read")),
        _list("settings/permissions/ask", lambda v: v.append("Read")),
    ),
    "passthrough string": _set("settings/passthrough/codex/model", "o4"),
    "passthrough int": _set("settings/passthrough/codex/max_turns", 13),
    "passthrough int->string": _set("settings/passthrough/codex/max_turns", "12"),
    "passthrough bool->int": _set("settings/passthrough/codex/tools/web_search", 1),
    "passthrough nested value": _set("settings/passthrough/codex/tools/depth", 3),
    "passthrough nested add": _set("settings/passthrough/codex/tools/extra", "x"),
    "passthrough nested remove": _drop("settings/passthrough/codex/tools/label"),
    "passthrough harness": _rename("settings/passthrough/codex", "gemini-cli"),
    "passthrough list": _set("settings/passthrough/codex/list", ["a", "b"]),
    # sandbox
    "sandbox.enabled": _set("sandbox/enabled", False),
    "sandbox.read_dirs add": _list("sandbox/read_dirs", lambda v: v.append("~/.ssh")),
    "sandbox.read_dirs remove": _list("sandbox/read_dirs", lambda v: v.pop()),
    "sandbox.write_dirs value": _list("sandbox/write_dirs", lambda v: v.__setitem__(0, "dist")),
    "sandbox.read_files remove": _list("sandbox/read_files", lambda v: v.clear()),
    "sandbox.write_files add": _list("sandbox/write_files", lambda v: v.append("err.log")),
    "sandbox read->write dir": _both(
        _list("sandbox/read_dirs", lambda v: v.remove("~/.cargo")),
        _list("sandbox/write_dirs", lambda v: v.append("~/.cargo")),
    ),
    "sandbox.env add": _list("sandbox/env", lambda v: v.append("HOME")),
    "sandbox.env remove": _list("sandbox/env", lambda v: v.remove("LANG")),
    "network.block": _set("sandbox/network/block", False),
    "network.allow_domains add": _list(
        "sandbox/network/allow_domains", lambda v: v.append("169.254.169.254")
    ),
    "network.allow_domains value": _list(
        "sandbox/network/allow_domains", lambda v: v.__setitem__(1, "*.npmjs.org")
    ),
    "network.localhost_ports value": _list(
        "sandbox/network/localhost_ports", lambda v: v.__setitem__(0, 8081)
    ),
    "network.localhost_ports add": _list("sandbox/network/localhost_ports", lambda v: v.append(1)),
    "network.localhost_ports remove": _list("sandbox/network/localhost_ports", lambda v: v.pop()),
}


def test_base_project_pins_everything(tmp_path: Path) -> None:
    """Sanity for the mutations below: the base resolves and pins every file in PINNED."""
    p = build_project(tmp_path)
    _, lock = p.resolve()
    pinned = {f["path"] for item in lock["servers"].values() for f in item["files"]}
    pinned |= {f["path"] for item in lock["hooks"].values() for f in item["files"]}
    for section in ("servers", "hooks"):
        for item in lock[section].values():
            for root in item.get("roots", []):
                pinned |= {f"{root['path']}/{f['path']}" for f in root["files"]}
    pinned |= {f["path"] for f in lock["instructions"]}
    local = lock["skills"]["local-skill"]
    pinned |= {f"{local['path']}/{f['path']}" for f in local["files"]}
    assert pinned == set(PINNED)
    assert [f["path"] for f in lock["instructions"]] == ["docs/one.md", "docs/two.md"]
    assert {f["path"]: f["executable"] for f in local["files"]}["run.sh"] is True
    remote = lock["skills"]["git-skill"]
    assert remote["commit"] == git("rev-parse", "v1^{commit}", cwd=p.repo).strip()
    assert {f["path"] for f in remote["files"]} == {"SKILL.md", "tool.sh"}
    assert len(MUTATIONS) >= 40


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_semantic_mutation_changes_the_digest(tmp_path: Path, name: str) -> None:
    p = build_project(tmp_path)
    base_digest, base_document = p.digest()
    MUTATIONS[name](p)
    p.write()
    digest, document = p.digest()
    assert digest != base_digest
    # ... and visibly: the view the user reviews differs, not only the manifest hash inside it.
    assert _view(document) != _view(base_document)


def _pin_byte_strategy() -> st.SearchStrategy[tuple[str, int, int]]:
    return st.tuples(
        st.sampled_from(PINNED), st.integers(min_value=0, max_value=10_000), st.integers(1, 255)
    )


def test_any_byte_of_any_pinned_file_changes_the_digest(tmp_path: Path) -> None:
    p = build_project(tmp_path)
    base_digest, _ = p.digest()

    @settings(max_examples=60, deadline=None)
    @given(where=_pin_byte_strategy())
    def flip(where: tuple[str, int, int]) -> None:
        rel, index, xor = where
        path = p.file(rel)
        original = path.read_bytes()
        try:
            _flip(path, index, xor)
            assert p.digest()[0] != base_digest, (rel, index % len(original), xor)
        finally:
            path.write_bytes(original)

    flip()
    assert p.digest()[0] == base_digest


def test_any_byte_of_any_plugin_file_changes_the_digest(tmp_path: Path) -> None:
    """Every byte of every file of a plugin is pinned (not only its manifests), and the view the
    user reviews moves with it."""
    p = build_project(tmp_path)
    base_digest, base_document = p.digest()

    @settings(max_examples=40, deadline=None)
    @given(where=st.tuples(st.sampled_from(PLUGIN_FILES), st.integers(0, 10_000),
                           st.integers(1, 255)))
    def flip(where: tuple[str, int, int]) -> None:
        rel, index, xor = where
        path = p.file(rel)
        original = path.read_bytes()
        try:
            _flip(path, index, xor)
            try:
                digest, document = p.digest()
            except ManifestInvalid as exc:  # a manifest no longer JSON: refused, never pinned
                assert any(problem.path == "plugins.team" for problem in exc.problems)
                return
            assert digest != base_digest, (rel, index % len(original), xor)
            assert _view(document) != _view(base_document)
        finally:
            path.write_bytes(original)

    flip()
    assert p.digest()[0] == base_digest


_COMMAND_LINES: dict[str, Callable[[Project], None]] = {
    "server command is the script": _both(
        _set("servers/local/command", "./servers/a.py"),
        _set("servers/local/args", ["--port", "8080"]),
        _drop("servers/local/cwd"),
    ),
    "server arg from the project root": _both(
        _drop("servers/local/cwd"),
        _list("servers/local/args", lambda v: v.__setitem__(1, "servers/a.py")),
    ),
    "hook command arg": _list("hooks/guard/command", lambda v: v.__setitem__(2, "servers/a.py")),
    "script hook arg": _list("hooks/audit/args", lambda v: v.append("servers/a.py")),
    "arg through a symlinked directory": _both(
        _file("servers", lambda d: os.symlink("servers", d.parent / "srv")),
        _drop("servers/local/cwd"),
        _list("servers/local/args", lambda v: v.__setitem__(1, "srv/a.py")),
    ),
}


@pytest.mark.parametrize("name", list(_COMMAND_LINES))
def test_project_files_named_on_a_command_line_are_pinned(tmp_path: Path, name: str) -> None:
    p = build_project(tmp_path)
    _COMMAND_LINES[name](p)
    p.write()
    before, _ = p.digest()
    _flip(p.file("servers/a.py"), 3)
    assert p.digest()[0] != before


def test_symlink_named_on_a_command_line_is_pinned_or_refused(tmp_path: Path) -> None:
    """`python3 link.py` with link.py -> a.py executes a.py's bytes. They must be pinned (or the
    lock refused, as it is for a symlinked hook script or instruction file); silently skipping the
    link leaves the code that runs outside the consent digest."""
    p = build_project(tmp_path)
    os.symlink("a.py", p.file("servers/link.py"))
    p.data["servers"]["local"]["args"][1] = "link.py"
    p.write()
    try:
        before, _ = p.digest()
    except ManifestInvalid as exc:  # refusing is an acceptable answer
        assert any("servers.local.args" in problem.path for problem in exc.problems)
        return
    _flip(p.file("servers/a.py"), 3)  # the bytes `python3 link.py` runs
    assert p.digest()[0] != before


ARG_LISTS = ("servers/local/args", "hooks/guard/command", "hooks/audit/args")


def test_any_arg_replaced_by_any_string_changes_the_digest(tmp_path: Path) -> None:
    p = build_project(tmp_path)
    pristine = copy.deepcopy(p.data)
    base_digest, base_document = p.digest()

    @settings(max_examples=60, deadline=None)
    @given(data=st.data())
    def replace(data: st.DataObject) -> None:
        where = data.draw(st.sampled_from(ARG_LISTS))
        args = _at(p.data, where)
        index = data.draw(st.integers(0, len(args) - 1))
        # Expansion syntax (`$X`, `${`, `{env:`) is refused at validation, never digested.
        new = data.draw(
            st.text(max_size=40).filter(
                lambda s, old=args[index]: s != old and not EXPANSION.search(s)
            )
        )
        try:
            args[index] = new
            p.write()
            digest, document = p.digest()
            assert digest != base_digest
            assert _view(document) != _view(base_document)
        finally:
            p.data = copy.deepcopy(pristine)
            p.write()

    replace()


# ============================================================================ 2. cosmetics


def test_emitter_plain_style_is_ordinary_toml() -> None:
    text = emit(base_data("file:///src"))
    assert text.startswith('[project]\nname = "demo"\n')
    assert "[servers.local.env]" in text


def test_cosmetic_edits_do_not_change_the_digest(tmp_path: Path) -> None:
    p = build_project(tmp_path)
    base_digest, _ = p.digest()
    seen: set[str] = set()

    # A seed rather than st.randoms(): the emitter makes hundreds of choices per manifest, more
    # than hypothesis lets one example draw; every failure prints the offending text.
    @settings(max_examples=80, deadline=None)
    @given(seed=st.integers(min_value=0, max_value=2**64 - 1))
    def restyle(seed: int) -> None:
        text = p.write(random.Random(seed))
        seen.add(text)
        assert p.digest()[0] == base_digest, text

    restyle()
    assert len(seen) > 40  # the styles really varied


def test_handwritten_cosmetic_variant_keeps_the_digest(tmp_path: Path) -> None:
    """One readable example of the transformations the generator combines at random."""
    p = build_project(tmp_path)
    base_digest, _ = p.digest()
    plain = (p.root / "agentstack.toml").read_text()
    url = p.data["skills"]["git-skill"]["git"]
    variant = plain.replace('name = "demo"', "name = 'demo'   # the project")
    variant = variant.replace("[servers.local]\n", '# the local server\n[ servers . "local" ]\n\n')
    variant = variant.replace('cwd = "servers"', "cwd = '''servers'''")
    variant = variant.replace("timeout = 10", "timeout = 0xA")
    variant = variant.replace('"8080"', '"""80\\\n    80"""')
    variant = variant.replace(f'git = "{url}"', f"git = '{url}'")
    assert variant != plain
    moved = "[project]\nname = 'demo'   # the project\n"
    assert variant.startswith(moved)
    # Move the [project] table to the end of the file.
    head, _, rest = variant.partition("\n\n")
    variant = rest + "\n\n" + head + "\n"
    (p.root / "agentstack.toml").write_text(variant)
    assert tomllib.loads(variant) == p.data
    assert p.digest()[0] == base_digest


# ============================================================================ 3. stability

_TIMESTAMP = re.compile(r"\b(19|20)\d\d-[01]\d-[0-3]\d|\b\d\d:\d\d:\d\d\b")


def _ints(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, dict):
        return [i for v in value.values() for i in _ints(v)]
    if isinstance(value, list):
        return [i for v in value for i in _ints(v)]
    return []


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def test_lock_is_deterministic_and_machine_independent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = build_project(tmp_path / "a")
    manifest, first = p.resolve()
    text = dumps_lock(first)
    assert dumps_lock(p.resolve()[1]) == text  # a second resolution: byte-identical
    digest = consent_digest(consent_document(manifest, first))
    (p.root / "agentstack.lock").write_text(text)
    assert parse_lock(text.encode()) == first  # what is written is what was resolved

    # Nothing machine-specific: no project path, home, cache, user; no timestamps.
    url = p.data["skills"]["git-skill"]["git"]
    scrubbed = text.replace(url, "<declared git url>")  # the user's own declaration
    for machine_specific in (
        str(p.root),
        str(p.root.resolve()),
        str(tmp_path),
        os.environ["HOME"],
        os.environ["AGENTSTACK_CACHE"],
        os.environ["AGENTSTACK_HOME"],
    ):
        assert machine_specific not in scrubbed
    assert not _TIMESTAMP.search(text)
    assert max(_ints(first)) < 1_000_000  # sizes and such, never an epoch or an inode
    assert not {k for k in _keys(first) if re.search(r"time(?!out)|date|created|mtime|ctime|inode", k)}

    # The same project elsewhere, copied later with other mtimes and group bits, from a relative
    # path, with a warm stat cache: the same bytes and the same digest.
    other = tmp_path / "b" / "somewhere" / "else"
    shutil.copytree(p.root, other, symlinks=True)
    for path in other.rglob("*"):
        if path.is_file():
            os.utime(path, (1_000_000_000, 1_000_000_000))
            path.chmod(stat.S_IMODE(path.stat().st_mode) | stat.S_IWGRP | stat.S_IRGRP)
    monkeypatch.chdir(tmp_path / "b")
    relative = Project(root=Path("somewhere/else"), repo=p.repo, data=p.data)
    resolver = resolver_for(relative.root, None)
    moved = resolver.resolve(load_manifest(relative.root))
    resolver.stat_cache.save()
    assert dumps_lock(moved) == text
    assert relative.digest()[0] == digest  # warm cache, same answer
    assert dumps_lock(relative.resolve()[1]) == text


def test_lock_order_does_not_follow_manifest_order(tmp_path: Path) -> None:
    p = build_project(tmp_path)
    text = dumps_lock(p.resolve()[1])
    p.data = {k: dict(reversed(v.items())) if isinstance(v, dict) else v for k, v in p.data.items()}
    p.data = dict(reversed(p.data.items()))
    p.write()
    assert dumps_lock(p.resolve()[1]) == text


# ============================================================================ 4. canonical_bytes

_ASCII_KEYS = st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=8)
_SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=12)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_ASCII_KEYS, inner, max_size=4),
    max_leaves=25,
)


def _shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        items = [(k, _shuffled(v, rng)) for k, v in value.items()]
        rng.shuffle(items)
        return dict(items)
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


def _strict(value: Any) -> Any:
    """A representation where True and 1 differ (they are == in Python)."""
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strict(v) for v in value]
    return (type(value).__name__, value)


@settings(max_examples=200, deadline=None)
@given(value=_JSON, rng=st.randoms(use_true_random=False))
def test_canonical_bytes_ignore_key_order(value: Any, rng: random.Random) -> None:
    assert canonical_bytes(_shuffled(value, rng)) == canonical_bytes(value)


@settings(max_examples=200, deadline=None)
@given(value=_JSON)
def test_canonical_bytes_round_trip(value: Any) -> None:
    data = canonical_bytes(value)
    back = json.loads(data)
    assert back == value
    assert _strict(back) == _strict(value)
    assert canonical_bytes(back) == data  # idempotent
    data.decode("utf-8")  # always valid UTF-8


@settings(max_examples=200, deadline=None)
@given(left=_JSON, right=_JSON)
def test_canonical_bytes_are_injective(left: Any, right: Any) -> None:
    if canonical_bytes(left) == canonical_bytes(right):
        assert _strict(left) == _strict(right)


def test_canonical_form_is_compact_sorted_and_unescaped() -> None:
    value = {"b": [1, True, None], "a": {"z": "é\u2713\U0001f600", "y": ""}, "A": 0}
    assert canonical_bytes(value) == (
        '{"A":0,"a":{"y":"","z":"é\u2713\U0001f600"},"b":[1,true,null]}'.encode()
    )
    assert len({canonical_bytes(v) for v in (1, True, "1", None, "null", [1], {"1": 1})}) == 7


def _nest(value: Any, depth: int, key: str) -> Any:
    for level in range(depth):
        value = [value] if level % 2 else {key: value, "~sibling~": 1}
    return value


@settings(max_examples=150, deadline=None)
@given(
    bad=st.floats(allow_nan=True, allow_infinity=True),
    depth=st.integers(0, 4),
    key=_ASCII_KEYS,
)
def test_floats_raise_canonical_error(bad: float, depth: int, key: str) -> None:
    with pytest.raises(CanonicalError):
        canonical_bytes(_nest(bad, depth, key))


@settings(max_examples=150, deadline=None)
@given(
    key=st.text(min_size=1, max_size=6).filter(lambda k: not k.isascii()),
    value=_SCALARS,
    depth=st.integers(0, 4),
)
def test_non_ascii_keys_raise_canonical_error(key: str, value: Any, depth: int) -> None:
    with pytest.raises(CanonicalError):
        canonical_bytes(_nest({key: value}, depth, "k"))


@pytest.mark.parametrize(
    "bad",
    [{1: "int key"}, {None: 1}, {"k": b"bytes"}, {"k": {1, 2}}, [object()], {"k": [1.0]}],
)
def test_values_without_a_canonical_form_raise_canonical_error(bad: Any) -> None:
    with pytest.raises(CanonicalError):
        canonical_bytes(bad)


def test_string_without_a_utf8_form_raises_canonical_error() -> None:
    """A lone surrogate (json.loads('"\\ud800"') produces one) has no UTF-8 bytes, so no canonical
    form; the contract is CanonicalError, not a stray UnicodeEncodeError."""
    lone = json.loads('"\\ud800"')
    with pytest.raises(CanonicalError):
        canonical_bytes({"k": lone})


def test_printable_ascii_keys_are_fine() -> None:
    keys = {c: i for i, c in enumerate(string.printable)}
    assert json.loads(canonical_bytes(keys)) == keys


# ============================================================================ 5. schema evolution


def test_an_optional_field_at_its_default_does_not_move_the_digest(tmp_path: Path) -> None:
    """A later agentstack adds optional fields (ADR 0006). A manifest that does not set them must
    keep its manifest digest and its consent digest, so upgrading never forces a re-review; once a
    field is set to something else, both move."""
    from pydantic import Field as PydanticField

    import agentstack.manifest.model as m
    from agentstack.lock.resolve import manifest_digest

    class ServerV2(m.Server):
        retries: int = 3
        labels: list[str] = PydanticField(default_factory=list)

    class HookV2(m.Hook):
        quiet: bool = False

    class NetworkV2(m.Network):
        allow_udp: bool = False

    class SandboxV2(m.Sandbox):
        network: NetworkV2 = PydanticField(default_factory=NetworkV2)
        read_only_home: bool = True

    class ProjectV2(m.ProjectSection):
        description: str = ""

    class ManifestV2(m.Manifest):
        project: ProjectV2
        servers: dict[m.ItemName, ServerV2] = PydanticField(default_factory=dict)
        hooks: dict[m.ItemName, HookV2] = PydanticField(default_factory=dict)
        sandbox: SandboxV2 = PydanticField(default_factory=SandboxV2)
        telemetry: bool = False

    p = build_project(tmp_path)
    manifest, lock = p.resolve()
    old_digest = consent_digest(consent_document(manifest, lock))
    raw = tomllib.loads((p.root / "agentstack.toml").read_text())

    def digests(data: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
        upgraded = ManifestV2.model_validate(data)
        new_lock = {**lock, "manifest": manifest_digest(upgraded)}
        document = consent_document(upgraded, new_lock)
        return new_lock["manifest"], consent_digest(document, ManifestV2), document

    lock_digest, digest, document = digests(raw)
    assert lock_digest == lock["manifest"]
    assert digest == old_digest
    # The new fields are in the view the user reads, at their defaults.
    assert document["servers"]["local"]["retries"] == 3
    assert document["hooks"]["guard"]["quiet"] is False
    assert document["sandbox"]["network"]["allow_udp"] is False
    # Writing a default explicitly is cosmetic too.
    explicit = copy.deepcopy(raw)
    explicit["servers"]["local"]["retries"] = 3
    explicit["sandbox"]["read_only_home"] = True
    explicit["telemetry"] = False
    assert digests(explicit)[:2] == (lock["manifest"], old_digest)
    # Set to anything else, each new field moves both digests.
    for path, value in (
        ("servers/local/retries", 4),
        ("servers/remote/labels", ["x"]),
        ("hooks/audit/quiet", True),
        ("sandbox/network/allow_udp", True),
        ("sandbox/read_only_home", False),
        ("project/description", "d"),
        ("telemetry", True),
    ):
        changed = copy.deepcopy(raw)
        parent, _, leaf = path.rpartition("/")
        (_at(changed, parent) if parent else changed)[leaf] = value
        new_lock_digest, new_digest, _ = digests(changed)
        assert new_lock_digest != lock["manifest"], path
        assert new_digest != old_digest, path


def test_defaults_written_out_keep_the_digest(tmp_path: Path) -> None:
    """Spelling out today's defaults (`args = []`, `timeout = 30`, `enabled = true`, ...) is
    cosmetic: it changes neither the manifest digest nor the consent digest."""
    p = build_project(tmp_path)
    del p.data["hooks"]["guard"]["timeout"]
    del p.data["sandbox"]["enabled"]
    p.write()
    base, _ = p.digest()
    p.data["hooks"]["guard"]["timeout"] = 30
    p.data["sandbox"]["enabled"] = True
    p.data["servers"]["remote"]["headers"]["X-Team"] = "core"
    p.data["servers"]["local"]["pin"] = []
    p.data["project"]["harnesses"] = ["claude-code", "codex", "gemini-cli"]
    p.data["settings"]["permissions"]["ask"] = ["WebFetch(domain:example.com)"]
    p.data["sandbox"]["network"]["block"] = True
    p.write()
    assert p.digest()[0] == base

"""The surface probe: what each pinned harness version really opens and runs from a project.

For each harness version pinned in `scripts/install-harnesses`:

(a) *harvest* candidate project paths from the harness's own installed bundle: string literals
    that look like dot-directories (`.github/lsp.json`), configuration and instruction file names
    (`AGENTS.md`, `opencode.json`) and glob patterns (`{mode,modes}/*.md`), read from its
    JavaScript and, for native binaries, by a `strings`-like scan of the binary;
(b) *plant* a canary file at each candidate: in the project, in a nested directory of it, and in
    each directory above it up to the top of the git checkout (`repo/a/proj`: `repo/a` and
    `repo`);
(c) *run* the real binary offline against the mock model (127.0.0.1), headless, in a folder it
    trusts, with a scripted session that reads a file in the nested directory, edits one and runs
    a shell command;
(d) *record* every file it opens or executes with `strace -f` (`openat`, `openat2`, `execve`,
    `execveat`), each one attributed to the phase it happened in (`start`, before the first model
    request, or the tool call the model had just made) and whether the canary's text reached the
    model;
(e) *check* each planted file it opened or ran against the harness's surface in
    `agentstack.harnesses` (`surface` for the project and nested directories, `above` for the
    directories above), or the list of inert files below (each with its reason): anything else is
    a finding, a file the harness loads that agentstack would not pin.

Its output per harness and version (`tests/harness/surface/<harness>-<version>.json`) is
committed; `tests/harness/test_surface_probe.py` re-runs the probe and diffs against it, and
docs/surface.md's measured table is generated from it.

    python -m tests.harness.surface_probe [--harness NAME ...] [--write] [--keep DIR]

Exit 0 when no harness opened a planted file off its surface, 1 with the findings listed, 2 when
a harness could not be run (missing binary, no strace).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentstack import harnesses as H
from agentstack.surface.scan import _match

from .binaries import REPO, TOOLS_BIN, harness_env
from .deadline import scaled
from .mock_model import MockModel, ToolCall

OUT_DIR = Path(__file__).resolve().parent / "surface"
NPM = REPO / ".tools" / "npm" / "node_modules"
COPILOT_CACHE = REPO / ".tools" / "copilot-cache"
NPM_CACHE = REPO / ".tools" / "npm-cache"
STRACE = "/usr/bin/strace"
RUN_TIMEOUT = 240.0
TOKEN = "SURFACE-CANARY-"
LOCATIONS = ("project", "nested", "above1", "above2")

# Planted files a harness opens that carry nothing it acts on, each with the reason. A key is
# `<harness>:<pattern>` (`*:` for every harness), or `<harness>@<location>:<pattern>` for one
# location only; the pattern is matched like a surface pattern against the path relative to the
# directory it was planted in.
INERT: dict[str, str] = {
    "*:**/.gitignore": "ignore rules for file search and listing: no code, not sent to the model",
    "*:**/.ignore": "ignore rules for file search (ripgrep): no code, not sent to the model",
    "*:**/.rgignore": "ignore rules for ripgrep: no code, not sent to the model",
    "*:**/.git": "what marks a checkout's top (read by the harness's git discovery)",
    "*:**/README.md": "the file the scripted session reads itself",
    "*:**/package.json": "read by the harness's project detection (name, workspaces): not loaded",
    "opencode:**/.opencode/package.json": "its npm dependencies: on the surface as `packages`",
    "gemini-cli:**/.geminiignore": "ignore rules for Gemini CLI's file tools: no code",
    "gemini-cli:**/.gitattributes": "read by the harness's git helpers: no code, not sent",
    "qwen-code:**/.qwenignore": "ignore rules for Qwen Code's file tools: no code, not sent",
    "qwen-code:**/.aiignore": "ignore rules for Qwen Code's file tools: no code, not sent",
    "kilo:**/.kilocodeignore": "ignore rules for Kilo's file tools: no code, not sent",
    "auggie:**/.augmentignore": "ignore rules for Auggie's workspace index: no code, not sent",
    "aider:**/.aiderignore": "ignore rules for Aider's repository map: no code, not sent",
    "aider:**/.aider.chat.history.md": "its own chat log, appended every session; read back into "
    "the prompt only with --restore-chat-history (off by default)",
    "kilo:**/.kilocode/themes/**": "colour themes of its terminal UI (JSON of colours): no code, "
    "not sent to the model",
    "kilo:**/.kilo/themes/**": "colour themes of its terminal UI (JSON of colours): no code, "
    "not sent to the model",
    "kilo:**/.opencode/themes/**": "colour themes of its terminal UI (JSON of colours): no code, "
    "not sent to the model",
    "opencode:**/.opencode/themes/**": "colour themes of its terminal UI (JSON of colours): no "
    "code, not sent to the model",
    "codex:**/.codexignore": "ignore rules for file search: no code, not sent to the model",
    "copilot:**/.copilotignore": "ignore rules for file search: no code, not sent to the model",
    "claude-code:.npmrc": "read at the checkout's top to detect the package manager: not config",
    "claude-code:.yarnrc.yml": "read at the checkout's top to detect the package manager",
    "claude-code:environment.yml": "read at the checkout's top to detect a conda environment",
    "claude-code:environment.yaml": "read at the checkout's top to detect a conda environment",
    "codex@above1:.codex/config.toml": "read above the project, applied only in a directory Codex "
    "trusts itself (agentstack trusts the project's root only)",
    "codex@above2:.codex/config.toml": "read above the project, applied only in a directory Codex "
    "trusts itself (agentstack trusts the project's root only)",
}


# ----------------------------------------------------------------------------- versions


def pinned_versions() -> dict[str, str]:
    """harness name -> version, from `scripts/install-harnesses`."""
    text = (REPO / "scripts" / "install-harnesses").read_text(encoding="utf-8")
    out: dict[str, str] = {}
    for var, version in re.findall(r"^([A-Z_]+)_VERSION=(\S+)", text, re.M):
        name = PINNED.get(var)
        if name in H.BY_NAME or (name in PROBED and os.environ.get("SURFACE_PROBE_ALL") == "1"):
            out[name] = version
    return out


# `scripts/install-harnesses`' version variables -> harness names. A harness is probed once it
# has a description in `agentstack.harnesses` (SURFACE_PROBE_ALL=1: every one the probe can
# drive, to measure a harness before it is described).
PINNED = {"CLAUDE_CODE": "claude-code", "CODEX": "codex", "GEMINI": "gemini-cli",
          "OPENCODE": "opencode", "COPILOT": "copilot", "QWEN_CODE": "qwen-code",
          "CLINE": "cline", "KILO": "kilo", "CONTINUE": "continue", "AIDER": "aider",
          "DROID_BINARY": "droid", "AUGGIE": "auggie"}
PROBED = frozenset(PINNED.values())
# The binaries of the harnesses not (yet) described in `agentstack.harnesses`.
BINARIES = {"qwen-code": "qwen", "cline": "cline", "kilo": "kilo", "continue": "cn",
            "aider": "aider", "droid": "droid"}
AIDER_BIN = REPO / ".tools" / "aider" / "bin" / "aider"


def _harness(name: str) -> H.Harness:
    """The harness's description; a blank one (nothing on its surface) while it has none."""
    if name in H.BY_NAME:
        return H.get(name)
    return H.Harness(name, name, BINARIES[name], "", (), "", False, (), {}, ())


def binary_path(name: str) -> Path:
    if name == "aider":
        return AIDER_BIN
    return TOOLS_BIN / _harness(name).binary


# ----------------------------------------------------------------------------- harvest

# A string literal in JavaScript (quoted), or a printable run in a native binary.
_QUOTED = re.compile(rb"[\"'`]([A-Za-z0-9_.*{},/-]{2,90})[\"'`]")
_RUN = re.compile(rb"[\x21-\x7e]{4,}")
# Inside a native binary's printable runs: dot-directory paths with a directory in them.
_DOT_PATH = re.compile(r"(?<![A-Za-z0-9_$@~\\/.-])(\.[a-z][a-z0-9_-]{1,24}(?:/[A-Za-z0-9_.*{},-]{1,40}){1,4})")
_NAME = re.compile(r"(?<![A-Za-z0-9_.-])([A-Z][A-Z0-9_-]{2,30}\.md)(?![a-z0-9])")
_NATIVE_DIR = re.compile(r"(\.(?:claude|codex|gemini|opencode|copilot|agents|github|cursor)"
                         r"(?:-plugin)?)(?![a-z-])")
_NATIVE_NAME = re.compile(r"((?:claude|codex|gemini|opencode|copilot|agents?|skills?|plugins?|"
                          r"hooks?|mcp|lsp|marketplace|settings|config|instructions?|rules?|"
                          r"prompts?|AGENTS|SKILL|CLAUDE|GEMINI)(?:[._-][a-z]+)?"
                          r"\.(?:json|jsonc|toml|md|ya?ml))(?![a-z])")
_NATIVE_WORD = re.compile(r"(?<![a-z])(skills|agents|plugins|hooks|rules|prompts|commands|modes|"
                          r"extensions|instructions)(?![a-z])")
_CONFIG_EXT = re.compile(r"\.(?:md|mdc|json|jsonc|json5|toml|ya?ml|env|txt|js|ts|mjs|sh)$")
# Plain names kept only when they look like a harness's own files: upper-case instruction files
# (AGENTS.md), a name of one of the harnesses or a common agent-config word.
_WORDS = re.compile(
    r"claude|codex|gemini|opencode|copilot|agent|skill|plugin|hook|mcp|lsp|marketplace|"
    r"instruction|prompt|rule|command|mode|extension|settings|config|context|memory|style|"
    r"tool|theme|workflow|policy|polic|permission|server|env",
    re.I,
)
_UPPER_MD = re.compile(r"^[A-Z][A-Z0-9_-]+(\.[a-z]+)?\.mdc?$")
_SKIP_FIRST = {".git", ".node", ".js", ".ts", ".mjs", ".cjs", ".d", ".min", ".map", ".wasm",
               ".so", ".dll", ".exe", ".bin", ".png", ".svg", ".css", ".html", ".lock", ".log",
               ".tmp", ".cache", ".npm", ".local", ".config", ".ssh", ".aws", ".docker", ".kube",
               ".vscode-server", ".cargo", ".rustup", ".nvm", ".bun", ".deno", ".pnpm", ".yarn"}
MAX_CANDIDATES = 8000


# Per harness: its own directories (harvested only when the bundle names them) and the names
# below them that a minified bundle builds at run time, each still only a candidate.
OWN_DIRS: dict[str, tuple[str, ...]] = {
    "qwen-code": (".qwen",),
    "cline": (".cline", ".clinerules"),
    "kilo": (".kilo", ".kilocode", ".opencode"),
    "continue": (".continue",),
    "droid": (".factory",),
    "auggie": (".augment",),
}
EXTRA: dict[str, tuple[str, ...]] = {
    "continue": (".continue/mcpServers/canary.yaml", ".continue/mcpServers/canary.json",
                 ".continue/rules/canary.md", ".continue/prompts/canary.md",
                 ".continue/agents/canary.md", ".continue/agents/canary.yaml",
                 ".continue/models/canary.yaml", ".continue/config.yaml",
                 ".continue/config.json", ".continue/settings.json",
                 ".continue/settings.local.json", ".claude/settings.json",
                 ".claude/settings.local.json", ".continue/skills/canary/SKILL.md"),
    "aider": (".env",),  # its --env-file default, at the checkout's top (and in the cwd)
    "auggie": (".augment/settings.json", ".augment/settings.local.json",
               ".augment/rules/canary.md", ".augment/commands/canary.md",
               ".augment/agents/canary.md", ".augment/skills/canary/SKILL.md",
               ".augment/hooks/canary.sh", ".augment-plugin/plugin.json", ".augment-guidelines",
               ".augment/guidelines.md", ".augment/mcp.json"),
    "cline": (".clinerules/hooks/PreToolUse", ".clinerules/hooks/TaskStart",
              ".cline/hooks/PreToolUse", ".clinerules/workflows/canary.md",
              ".cline/workflows/canary.md", ".cline/rules/canary.md", ".clinerules/canary.md",
              ".cline/agents/canary.md", ".cline/skills/canary/SKILL.md",
              ".clinerules/skills/canary/SKILL.md", ".cline/plugins/canary/plugin.json"),
}


def _bundle_files(harness: str, version: str) -> list[tuple[Path, bool]]:
    """The installed files of a harness whose strings are harvested (path, holds JavaScript)."""
    if harness == "claude-code":
        return [(NPM / "@anthropic-ai" / "claude-code-linux-x64" / "claude", True)]
    if harness == "codex":
        return [(NPM / "@openai" / "codex-linux-x64" / "vendor" / "x86_64-unknown-linux-musl"
                 / "bin" / "codex", False), (NPM / "@openai" / "codex" / "bin" / "codex.js", True)]
    if harness == "gemini-cli":
        return [(p, True) for p in sorted((NPM / "@google" / "gemini-cli" / "bundle").rglob("*.js"))]
    if harness == "opencode":
        return [(NPM / "opencode-linux-x64" / "bin" / "opencode", True)]
    if harness == "qwen-code":
        base = NPM / "@qwen-code" / "qwen-code"
        return [(p, True) for p in sorted([base / "cli.js", *(base / "chunks").glob("*.js")])]
    if harness == "cline":
        return [(NPM / "@cline" / "cli-linux-x64" / "bin" / "cline", True)]
    if harness == "kilo":
        return [(NPM / "@kilocode" / "cli-linux-x64" / "bin" / "kilo", True)]
    if harness == "continue":
        return [(NPM / "@continuedev" / "cli" / "dist" / "index.js", True)]
    if harness == "droid":
        return [(NPM / "@factory" / "cli-linux-x64" / "bin" / "droid", True)]
    if harness == "auggie":
        return [(NPM / "@augmentcode" / "auggie" / "augment.mjs", True)]
    if harness == "aider":
        site = sorted((AIDER_BIN.parent.parent / "lib").glob("python3*/site-packages/aider"))
        return [(p, True) for d in site for p in sorted(d.rglob("*.py"))]
    # Copilot unpacks its JavaScript and native runtime on first run.
    base = COPILOT_CACHE / "copilot" / "pkg" / "linux-x64" / version
    return [(base / "cli-main.js", True), (base / "app.js", True), (base / "index.js", True),
            (base / "prebuilds" / "linux-x64" / "runtime.node", False)]


def _expand(pattern: str) -> list[str]:
    """A harvested glob made concrete: braces expanded, `**` a directory, `*` a name."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if m:
        return [x for alt in m.group(1).split(",")
                for x in _expand(pattern[: m.start()] + alt + pattern[m.end():])]
    parts = []
    for part in pattern.split("/"):
        if part == "**":
            parts.append("probe")
        elif "*" in part or "?" in part:
            parts.append(part.replace("*", "canary").replace("?", "x"))
        else:
            parts.append(part)
    return ["/".join(parts)]


def _plausible(rel: str) -> bool:
    parts = rel.split("/")
    if not rel or len(rel) > 90 or any(p in ("", ".", "..") for p in parts):
        return False
    if any(c in rel for c in "{}[]\\ $%:"):
        return False
    first = parts[0]
    if first in _SKIP_FIRST or (first.startswith(".git") and first not in (".github",)):
        return False
    return "node_modules" not in parts


def _tokens(path: Path, javascript: bool) -> set[str]:
    try:
        data = path.read_bytes()
    except OSError:
        return set()
    out: set[str] = set()
    if javascript:
        out.update(m.decode("ascii") for m in _QUOTED.findall(data))
    if not javascript:
        for run in _RUN.findall(data):
            if b"." not in run:
                continue
            text = run.decode("ascii")
            out.update(m.rstrip(".,") for m in _DOT_PATH.findall(text))
            out.update(_NAME.findall(text))
            # Names joined at run time (`dir.join(".codex").join("config.toml")`) lie next to
            # each other in the binary with no separator: the dot-words and the names of the
            # agent-config vocabulary are cut out of the run.
            out.update("native:" + m for m in _NATIVE_DIR.findall(text))
            out.update("native-name:" + m for m in _NATIVE_NAME.findall(text))
            out.update("native-word:" + m for m in _NATIVE_WORD.findall(text))
    return out


def harvest(harness: str, version: str) -> list[str]:
    """Candidate project paths from the harness's bundle (relative, concrete, sorted).

    A literal path (`.github/lsp.json`, `{agent,agents}/**/*.md`) is a candidate as it is; a
    dot-directory (`.claude`) is planted with each harvested file name and agent-config word under
    it; a file name (`AGENTS.md`, `opencode.json`) at the top as well."""
    tokens: set[str] = set()
    for path, javascript in _bundle_files(harness, version):
        tokens |= _tokens(path, javascript)
    paths: set[str] = set()
    dirs: set[str] = set()
    names: set[str] = set()
    words: set[str] = set()
    native: set[str] = set()
    native_names: set[str] = set()
    for token in tokens:
        if token.startswith("native:"):
            native.add(token.removeprefix("native:"))
            continue
        if token.startswith("native-word:"):
            words.add(token.removeprefix("native-word:"))
            continue
        if token.startswith("native-name:"):
            native_names.add(token.removeprefix("native-name:"))
            continue
        token = token.strip("/").removeprefix("./")
        name = token.rsplit("/", 1)[-1]
        if "/" in token:
            segments = token.split("/")
            if token.startswith(".") or _UPPER_MD.match(name) or (
                    _WORDS.search(token) and _CONFIG_EXT.search(name)):
                paths.update(_expand(token))
                if segments[0].startswith("."):
                    dirs.add(segments[0])
        elif token.startswith("."):
            if re.fullmatch(r"\.[a-z][a-z0-9_-]*", token) and _WORDS.search(token):
                dirs.add(token)
            elif re.fullmatch(r"\.[a-z][a-z0-9_.-]*", token) and (
                    _CONFIG_EXT.search(token) or "rc" in token or "ignore" in token):
                names.add(token)
        elif _UPPER_MD.match(token) or (_CONFIG_EXT.search(token) and _WORDS.search(token)
                                        and re.fullmatch(r"[A-Za-z0-9_.*-]+", token)):
            names.update(_expand(token))
        elif re.fullmatch(r"[a-z][a-z0-9-]{2,20}", token) and _WORDS.fullmatch(
                token.rstrip("s")):
            words.add(token)
    names |= native_names
    # A minified bundle joins its own directory's paths at run time (`join(cwd, ".continue",
    # "settings.json")`): the harness's own directories are crossed with what was harvested.
    own_dirs = {d for d in OWN_DIRS.get(harness, ()) if d in tokens}
    dirs |= own_dirs
    paths.update(p for p in EXTRA.get(harness, ()) if "/" in p and p.split("/")[0] in own_dirs)
    names.update(p for p in EXTRA.get(harness, ()) if "/" not in p)
    names = {n for n in names if not re.fullmatch(r"\.(md|mdc|json|jsonc|toml|ya?ml|txt|sh|js|ts)", n)}
    # A dot-directory gets the names crossed in when the harness names paths below it (three or
    # more literal paths): that is where it reads its own files.
    below = {d: sum(1 for p in paths if p.startswith(d + "/")) for d in dirs}
    below.update({d: 3 for d in native | own_dirs})
    dirs |= native
    out = set(paths) | names
    for d in sorted(dirs):
        own = d in ("." + _harness(harness).binary, "." + harness, ".agents")
        if not _plausible(d) or (below[d] < 3 and not own):
            continue
        out.update(f"{d}/{n}" for n in names)
        out.update(f"{d}/{p}" for p in paths if not p.startswith("."))  # `{mode,modes}/*.md`
        for word in words:
            out.update((f"{d}/{word}/canary.md", f"{d}/{word}/canary/SKILL.md"))
            if d in native:  # a native binary names no paths: its nested config files too
                out.update(f"{d}/{word}/{n}" for n in native_names
                           if n.endswith((".json", ".toml")))
    found = sorted(rel for rel in out if _plausible(rel))
    if len(found) > MAX_CANDIDATES:
        raise RuntimeError(f"{harness}: {len(found)} candidates, more than {MAX_CANDIDATES}")
    return found


# ----------------------------------------------------------------------------- planting


def canary_text(rel: str, cid: str, *, code: bool = False) -> str:
    """Content that every parser of the name accepts, carrying the canary's token where the
    format has room for text (JSON has none: its opening is what strace sees). With `code`,
    JavaScript and TypeScript canaries are modules that load (Kilo fails its whole session on a
    custom tool that does not compile)."""
    token = TOKEN + cid
    name = rel.rsplit("/", 1)[-1]
    if code and name.endswith((".js", ".mjs", ".cjs", ".ts", ".mts", ".tsx", ".jsx")):
        return f"// {token}\nexport {{}};\n"
    if name.endswith((".json", ".json5")):
        return "{}\n"
    if name.endswith(".jsonc"):
        return f"// {token}\n{{}}\n"
    if name.endswith((".yml", ".yaml")):  # a mapping: Aider refuses a config that is not one
        return f"# {token}\n{{}}\n"
    if name.endswith((".toml", ".env", ".yml", ".yaml")) or name.startswith(".env"):
        return f"# {token}\n"
    if name.endswith((".md", ".mdc")):
        return f"---\nname: canary-{cid}\ndescription: {token}\n---\n{token}\n"
    return f"# {token}\n"


@dataclass
class Layout:
    repo: Path  # the checkout's top
    project: Path  # repo/a/proj: where the harness starts
    planted: dict[str, tuple[str, str]] = field(default_factory=dict)  # abs path -> (loc, rel)
    controls: dict[str, tuple[str, str]] = field(default_factory=dict)

    def base(self, location: str) -> Path:
        return {"project": self.project, "nested": self.project / "sub",
                "above1": self.project.parent, "above2": self.repo}[location]


def make_layout(top: Path) -> Layout:
    repo = top / "repo"
    project = repo / "a" / "proj"
    (project / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (project / "sub" / "README.md").write_text("hello from the nested directory\n")
    (project / "notes.txt").write_text("hello\n")
    return Layout(repo.resolve(), project.resolve())


# Files at names no harness knows, planted with the canaries: a thread that opens one of them is
# walking the whole tree (OpenCode's file index reads every file), so what it opens in that burst
# is not a load. Their opening is reported, never a finding.
CONTROLS = ("probe-control.txt", "probe-control.md", "zz-probe-control/control.json",
            ".probe-control/control.md", "zz-probe-control/deep/er/control.toml")
WALK_WINDOW = 1.0  # seconds around a walker thread's control opens
# Harnesses whose loader reads every file of the directories it loads (Droid's commands, skills
# and droids): its opens of the controls there are loads, not a walk of the tree.
READS_DIRECTORIES_WHOLE = frozenset({"droid"})


CODE_CANARIES = frozenset({"kilo"})  # harnesses planted with JavaScript canaries that load


def plant(layout: Layout, candidates: Iterable[str], *, code: bool = False) -> None:
    """A canary at each candidate in each location, never over a file the setup wrote, never
    where a directory of another candidate is (the first one wins)."""
    for n, rel in enumerate(candidates):
        for location in LOCATIONS:
            target = layout.base(location) / rel
            cid = f"{n:04d}{location[0]}{location[-1]}"
            with contextlib.suppress(OSError):
                if target.exists() or target.is_symlink():
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(canary_text(rel, cid, code=code), encoding="utf-8")
                layout.planted[str(target)] = (location, rel)
    parents = sorted({str(Path(rel).parent) for _, rel in layout.planted.values()} - {"."})
    for location in LOCATIONS:
        for rel in (*CONTROLS, *(f"{d}/probe-control.txt" for d in parents)):
            if (layout.base(location) / rel).exists():
                continue
            target = layout.base(location) / rel
            with contextlib.suppress(OSError):  # a file planted where its directory would be
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(canary_text(rel, f"c{location}"), encoding="utf-8")
                layout.controls[str(target)] = (location, rel)


# ----------------------------------------------------------------------------- running


@dataclass
class Session:
    argv: list[str]
    env: dict[str, str]
    script: list[ToolCall]


def _copilot_env(home: Path, model: MockModel) -> dict[str, str]:
    return harness_env(home, XDG_CACHE_HOME=str(COPILOT_CACHE),
                       COPILOT_PROVIDER_BASE_URL=model.openai_base_url, COPILOT_MODEL="gpt-4o")


def _setup(harness: str, layout: Layout, home: Path, model: MockModel) -> Session:
    """Trust the project the harness's own way and point it at the mock; the scripted session."""
    proj = layout.project
    readme = str(proj / "sub" / "README.md")
    notes = str(proj / "notes.txt")
    shell = ToolCall("Bash", {"command": "echo probe", "description": "probe"})
    if harness == "claude-code":
        home.mkdir(parents=True, exist_ok=True)
        (home / ".claude.json").write_text(json.dumps(
            {"projects": {str(proj): {"hasTrustDialogAccepted": True,
                                      "enabledMcpjsonServers": [SERVER]}}}))
        env = harness_env(home, ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY="sk-ant-probe")
        script = [ToolCall("Read", {"file_path": readme}),
                  ToolCall("Edit", {"file_path": notes, "old_string": "hello",
                                    "new_string": "hello probe"}), shell]
        argv = [str(TOOLS_BIN / "claude"), "-p", "probe", "--output-format", "json",
                "--permission-mode", "acceptEdits", "--allowedTools",
                f"Read,Edit,Bash(echo probe),Skill,Agent,mcp__{SERVER}__add_note"]
        return Session(argv, env, script)
    if harness == "codex":
        from .drive import CODEX_OFFLINE_TOML

        env = harness_env(home)
        (home / ".codex" / "config.toml").write_text(
            'approval_policy = "never"\nsandbox_mode = "danger-full-access"\n'
            'model = "gpt-5.1-codex"\nmodel_provider = "mock"\n\n[model_providers.mock]\n'
            f'name = "mock"\nbase_url = "{model.openai_base_url}"\nwire_api = "responses"\n\n'
            f'[projects."{proj}"]\ntrust_level = "trusted"\n' + CODEX_OFFLINE_TOML)
        script = [ToolCall("Bash", {"command": f"head -c 10 {readme}"}), shell]
        argv = [str(TOOLS_BIN / "codex"), "exec", "--skip-git-repo-check", "probe"]
        return Session(argv, env, script)
    if harness == "gemini-cli":
        gemini = home / ".gemini"
        gemini.mkdir(parents=True, exist_ok=True)
        (gemini / "settings.json").write_text(json.dumps(
            {"security": {"auth": {"selectedType": "gemini-api-key"}}}))
        (gemini / "trustedFolders.json").write_text(json.dumps({str(proj): "TRUST_FOLDER"}))
        env = harness_env(home, GEMINI_API_KEY="dummy", GOOGLE_GEMINI_BASE_URL=model.url)
        script = [ToolCall("read_file", {"file_path": readme}), shell]
        argv = [str(TOOLS_BIN / "gemini"), "-p", "probe", "--approval-mode", "yolo"]
        return Session(argv, env, script)
    if harness == "opencode":
        config = home / ".config" / "opencode" / "opencode.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps({
            "provider": {"mock": {"npm": "@ai-sdk/openai-compatible", "name": "mock",
                                  "options": {"baseURL": model.openai_base_url,
                                              "apiKey": "dummy"},
                                  "models": {"mock-model": {"name": "mock", "tool_call": True}}}},
            # No snapshots: after each tool call they `git add` the whole worktree (thousands of
            # canaries, minutes under strace on a loaded machine); git's reads are no loads.
            "model": "mock/mock-model", "autoupdate": False, "share": "disabled",
            "snapshot": False}))
        env = harness_env(home, OPENCODE_DISABLE_AUTOUPDATE="1",
                          OPENCODE_DISABLE_MODELS_FETCH="1", npm_config_cache=str(NPM_CACHE),
                          npm_config_prefer_offline="true")
        script = [ToolCall("read", {"filePath": readme}), shell]
        argv = [str(TOOLS_BIN / "opencode"), "run", "probe"]
        return Session(argv, env, script)
    if harness == "qwen-code":
        qwen = home / ".qwen"
        qwen.mkdir(parents=True, exist_ok=True)
        (qwen / "settings.json").write_text(json.dumps(
            {"security": {"auth": {"selectedType": "openai"}}, "model": {"name": "gpt-4o"}}))
        (qwen / "trustedFolders.json").write_text(json.dumps({str(proj): "TRUST_FOLDER"}))
        env = harness_env(home, OPENAI_API_KEY="dummy", OPENAI_BASE_URL=model.openai_base_url,
                          OPENAI_MODEL="gpt-4o", QWEN_CODE_SUPPRESS_YOLO_WARNING="1")
        script = [ToolCall("read_file", {"file_path": readme}),
                  ToolCall("run_shell_command", {"command": "echo probe"})]
        argv = [str(binary_path(harness)), "-p", "probe", "--yolo"]
        return Session(argv, env, script)
    if harness == "kilo":
        config = home / ".config" / "kilo" / "kilo.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps({
            "provider": {"mock": {"npm": "@ai-sdk/openai-compatible", "name": "mock",
                                  "options": {"baseURL": model.openai_base_url,
                                              "apiKey": "dummy"},
                                  "models": {"mock-model": {"name": "mock", "tool_call": True}}}},
            "model": "mock/mock-model", "autoupdate": False, "share": "disabled",
            "snapshot": False}))  # as for OpenCode
        env = harness_env(home, OPENCODE_DISABLE_AUTOUPDATE="1", KILO_DISABLE_AUTOUPDATE="1",
                          OPENCODE_DISABLE_MODELS_FETCH="1", KILO_DISABLE_MODELS_FETCH="1",
                          npm_config_cache=str(NPM_CACHE), npm_config_prefer_offline="true")
        script = [ToolCall("read", {"filePath": readme}), shell]
        argv = [str(binary_path(harness)), "run", "probe"]
        return Session(argv, env, script)
    if harness == "cline":
        env = harness_env(home)
        subprocess.run([str(binary_path(harness)), "auth", "-p", "openai", "-k", "dummy", "-m",
                        "gpt-4o", "-b", model.openai_base_url], cwd=proj, env=env,
                       capture_output=True, timeout=scaled(120), check=False)
        script = [ToolCall("read_files", {"paths": [readme]}),
                  ToolCall("run_commands", {"commands": ["echo probe"]})]
        argv = [str(binary_path(harness)), "--json", "probe the project"]
        return Session(argv, env, script)
    if harness == "continue":
        env = harness_env(home)
        config = home / "probe-config.yaml"
        config.write_text(
            "name: probe\nversion: 0.0.1\nschema: v1\nmodels:\n  - name: mock\n"
            f"    provider: openai\n    model: gpt-4o\n    apiBase: {model.openai_base_url}\n"
            "    apiKey: dummy\n    roles: [chat]\n")
        script = [ToolCall("Read", {"filepath": readme}), ToolCall("Bash", {"command": "echo probe"})]
        argv = [str(binary_path(harness)), "-p", "probe", "--config", str(config), "--auto"]
        return Session(argv, env, script)
    if harness == "droid":
        factory = home / ".factory"
        factory.mkdir(parents=True, exist_ok=True)
        (factory / "settings.json").write_text(json.dumps({"customModels": [{
            "model": "gpt-4o", "displayName": "mock", "baseUrl": model.openai_base_url,
            "apiKey": "dummy", "provider": "generic-chat-completion-api"}]}))
        env = harness_env(home, FACTORY_API_KEY="fk-probe")  # any key: not checked offline
        script = [ToolCall("Read", {"file_path": readme}),
                  ToolCall("Execute", {"command": "echo probe", "riskLevel": "low",
                                       "riskLevelReason": "prints a word"})]
        argv = [str(binary_path(harness)), "exec", "-m", "custom:gpt-4o", "--auto", "high",
                "probe"]
        return Session(argv, env, script)
    if harness == "auggie":
        # A login naming the mock as the Augment tenant (its API answered there, hooks on).
        env = harness_env(home, AUGMENT_DISABLE_AUTO_UPDATE="1", AUGMENT_SESSION_AUTH=json.dumps(
            {"accessToken": "probe", "tenantURL": model.url + "/", "scopes": ["email"]}))
        script = [ToolCall("view", {"path": readme, "type": "file"}), shell]
        argv = [str(binary_path(harness)), "--print", "probe"]
        return Session(argv, env, script)
    if harness == "aider":
        # Aider makes no tool calls: what it reads at start and for one chat turn.
        env = harness_env(home, LITELLM_LOCAL_MODEL_COST_MAP="True")
        argv = [str(binary_path(harness)), "--model", "openai/gpt-4o", "--openai-api-base",
                model.openai_base_url, "--openai-api-key", "dummy", "--message", "probe",
                "--yes-always", "--no-check-update", "--no-show-model-warnings",
                "--analytics-disable", "--no-pretty", "--no-stream"]
        return Session(argv, env, [])
    config = home / ".copilot" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("// User settings belong in settings.json.\n"
                      "// This file is managed automatically.\n"
                      + json.dumps({"trustedFolders": [str(proj)]}) + "\n")
    script = [ToolCall("view", {"path": readme}), shell]
    argv = [str(TOOLS_BIN / "copilot"), "-p", "probe", "--allow-all-tools"]
    return Session(argv, _copilot_env(home, model), script)


# ----------------------------------------------------------------------------- skills, agents, MCP

# The scripted session also invokes a skill, a subagent and an MCP server's tool, each planted
# (before the canaries, so none is overwritten) where the harness loads it in the project, and
# the probe's MCP server (tests/harness/notes_mcp.py, copied outside the checkout) named in the
# harness's own MCP file. A capability counts as exercised when its proof reached the model
# after its call: the skill's body, the subagent definition's prompt (in the subagent's own
# request, answered by the mock with text), the server tool's answer.
SKILL = "probe-skill"
AGENT = "probe-agent"
SERVER = "probe"
SKILL_TOKEN = TOKEN + "skill"
AGENT_TOKEN = TOKEN + "agent"
MCP_ANSWER = "added note"
KINDS = ("skill", "agent", "mcp")
# A capability a harness has that the offline session cannot exercise, with the reason (its
# files are still planted and checked: what the harness opened of them at start is recorded).
NOT_EXERCISED: dict[str, str] = {
    "cline:agent": "Cline CLI 3.0.65 has no project subagent to call: its spawn_agent tool takes "
    "the subagent's system prompt from the model's call (systemPrompt, task), and the headless "
    "run loads no .cline/agents/ file",
    "cline:skill": "Cline CLI 3.0.65 headless (`cline --json`) offers its skills tool but loaded "
    "no skill: called with the probe's skill planted in the project's .cline/skills/, it opened "
    "neither that file nor the skill canaries at the checkout's top (strace), so no skill "
    "reached the model",
    "continue:agent": "Continue CLI 1.5.47's Subagent tool runs a model of its own config (role "
    "subagent, with chatOptions.baseSystemMessage), never a project file",
    "continue:mcp": "Continue CLI 1.5.47 reads MCP servers from its config (--config, "
    "~/.continue/config.yaml) only, never from the project (its bundle names no "
    ".continue/mcpServers)",
    "aider:skill": "Aider 0.86.2 has no skills (and makes no tool calls)",
    "aider:agent": "Aider 0.86.2 has no subagents (and makes no tool calls)",
    "aider:mcp": "Aider 0.86.2 has no MCP client (and makes no tool calls)",
    "auggie:skill": "Auggie 0.36.0 offers no skill tool in its session (its skills are sent as "
    "the request's `skills`, empty unless the tenant's feature flags turn them on)",
    "auggie:agent": "Auggie 0.36.0 offers no subagent tool in its session (its sub-agent tool "
    "comes with the tenant's feature flags)",
    "droid:agent": "droid exec 0.225.2 runs a subagent through its daemon, which the offline "
    "session does not reach (the Task tool answers 'Could not reach the daemon')",
}


@dataclass(frozen=True)
class Capability:
    kind: str  # "skill" | "agent" | "mcp"
    files: tuple[tuple[str, str], ...]  # (path relative to the project, content)
    call: ToolCall
    proof: str  # what a request after the call holds when the capability ran
    # (path relative to the probe's home, content): what the harness reads only there (Cline's
    # MCP servers), written as its user would.
    home_files: tuple[tuple[str, str], ...] = ()


def _skill_md(extra: str = "") -> str:
    return (f"---\nname: {SKILL}\ndescription: The probe's skill, for a probe.\n{extra}---\n"
            f"{SKILL_TOKEN}: say hello.\n")


def _agent_md(extra: str = "") -> str:
    return (f"---\nname: {AGENT}\ndescription: The probe's subagent, for a probe.\n{extra}---\n"
            f"{AGENT_TOKEN}: answer hello.\n")


def _servers(argv: list[str], **extra: Any) -> dict[str, Any]:
    return {SERVER: {"command": argv[0], "args": argv[1:], **extra}}


def capabilities(harness: str, server: list[str]) -> list[Capability]:
    """What the session plants and calls for `harness`; `server` is the MCP server's argv."""
    mcp_call = ToolCall(f"mcp__{SERVER}__add_note", {"text": "probe"})
    agent_prompt = "Say hello."
    json_mcp = json.dumps({"mcpServers": _servers(server)}, indent=1)
    if harness == "claude-code":
        return [
            Capability("skill", ((f".claude/skills/{SKILL}/SKILL.md", _skill_md()),),
                       ToolCall("Skill", {"skill": SKILL}), SKILL_TOKEN),
            Capability("agent", ((f".claude/agents/{AGENT}.md", _agent_md()),),
                       ToolCall("Agent", {"subagent_type": AGENT, "description": "probe agent",
                                          "prompt": agent_prompt, "run_in_background": False}),
                       AGENT_TOKEN),
            Capability("mcp", ((".mcp.json", json_mcp),), mcp_call, MCP_ANSWER),
        ]
    if harness == "codex":
        toml_server = (f"[mcp_servers.{SERVER}]\ncommand = {json.dumps(server[0])}\n"
                       f"args = {json.dumps(server[1:])}\n")
        agent_toml = (f'name = "{AGENT}"\ndescription = "The probe\'s subagent, for a probe."\n'
                      f'developer_instructions = "{AGENT_TOKEN}: answer hello."\n')
        return [
            # Codex has no skill tool: the model reads the SKILL.md its instructions list.
            Capability("skill", ((f".agents/skills/{SKILL}/SKILL.md", _skill_md()),),
                       ToolCall("Bash", {"command": f"cat .agents/skills/{SKILL}/SKILL.md"}),
                       SKILL_TOKEN),
            Capability("agent", ((f".codex/agents/{AGENT}.toml", agent_toml),),
                       ToolCall("multi_agent_v1__spawn_agent",
                                {"message": agent_prompt, "agent_type": AGENT}), AGENT_TOKEN),
            Capability("mcp", ((".codex/config.toml", toml_server),), mcp_call, MCP_ANSWER),
        ]
    if harness == "gemini-cli":
        return [
            Capability("skill", ((f".gemini/skills/{SKILL}/SKILL.md", _skill_md()),),
                       ToolCall("activate_skill", {"name": SKILL}), SKILL_TOKEN),
            Capability("agent", ((f".gemini/agents/{AGENT}.md", _agent_md("kind: local\n")),),
                       ToolCall("invoke_agent", {"agent_name": AGENT, "prompt": agent_prompt}),
                       AGENT_TOKEN),
            Capability("mcp", ((".gemini/settings.json",
                                json.dumps({"mcpServers": _servers(server, trust=True)})),),
                       mcp_call, MCP_ANSWER),
        ]
    if harness in ("opencode", "kilo"):
        own = ".opencode" if harness == "opencode" else ".kilo"
        config = "opencode.json" if harness == "opencode" else "kilo.json"
        return [
            Capability("skill", ((f"{own}/skills/{SKILL}/SKILL.md", _skill_md()),),
                       ToolCall("skill", {"name": SKILL}), SKILL_TOKEN),
            Capability("agent", ((f"{own}/agents/{AGENT}.md", _agent_md("mode: subagent\n")),),
                       ToolCall("task", {"description": "probe agent", "prompt": agent_prompt,
                                         "subagent_type": AGENT}), AGENT_TOKEN),
            Capability("mcp", ((config, json.dumps({"mcp": {SERVER: {
                "type": "local", "command": server}}})),), mcp_call, MCP_ANSWER),
        ]
    if harness == "copilot":
        return [
            Capability("skill", ((f".github/skills/{SKILL}/SKILL.md", _skill_md()),),
                       ToolCall("skill", {"skill": SKILL}), SKILL_TOKEN),
            Capability("agent", ((f".github/agents/{AGENT}.agent.md", _agent_md()),),
                       ToolCall("task", {"name": "probe", "description": "probe agent",
                                         "prompt": agent_prompt, "agent_type": AGENT,
                                         "mode": "sync"}), AGENT_TOKEN),
            Capability("mcp", ((".mcp.json", json.dumps({"mcpServers": _servers(
                server, type="local", tools=["*"])})),), mcp_call, MCP_ANSWER),
        ]
    if harness == "qwen-code":
        return [
            Capability("skill", ((f".qwen/skills/{SKILL}/SKILL.md", _skill_md()),),
                       ToolCall("skill", {"skill": SKILL}), SKILL_TOKEN),
            Capability("agent", ((f".qwen/agents/{AGENT}.md", _agent_md()),),
                       ToolCall("agent", {"subagent_type": AGENT, "description": "probe agent",
                                          "prompt": agent_prompt}), AGENT_TOKEN),
            Capability("mcp", ((".qwen/settings.json", json.dumps({
                "mcpServers": _servers(server, trust=True)})),), mcp_call, MCP_ANSWER),
        ]
    if harness == "droid":
        return [
            Capability("skill", ((f".factory/skills/{SKILL}/SKILL.md", _skill_md()),),
                       ToolCall("Skill", {"skill": SKILL}), SKILL_TOKEN),
            Capability("agent", ((f".factory/droids/{AGENT}.md", _agent_md()),),
                       ToolCall("Task", {"subagent_type": AGENT, "description": "probe agent",
                                         "prompt": agent_prompt}), AGENT_TOKEN),
            # Droid offers a server's tools deferred, as `<server>___<tool>`.
            Capability("mcp", ((".factory/mcp.json", json_mcp),),
                       ToolCall(f"{SERVER}___add_note", {"text": "probe"}), MCP_ANSWER),
        ]
    if harness == "cline":
        return [
            # Cline reads MCP servers only from the user's settings, its tools named
            # `<server>__<tool>`.
            Capability("mcp", (), ToolCall(f"{SERVER}__add_note", {"text": "probe"}),
                       MCP_ANSWER,
                       ((".cline/data/settings/cline_mcp_settings.json", json_mcp),)),
        ]
    if harness == "auggie":
        return [
            # Auggie's servers load from its workspace root (the checkout's top) and the user's
            # settings: the user's, its tools named `<tool>_<server>`. No workspace is indexed
            # (its user-level `indexingDenyDirs`): its indexer reads every file of the checkout
            # to upload it, which is content, not what it loads.
            Capability("mcp", (), ToolCall(f"add_note_{SERVER}", {"text": "probe"}), MCP_ANSWER,
                       ((".augment/settings.json", json.dumps(
                           {"mcpServers": _servers(server), "indexingDenyDirs": ["/"]})),)),
        ]
    if harness == "continue":
        return [
            Capability("skill", ((f".continue/skills/{SKILL}/SKILL.md", _skill_md()),),
                       ToolCall("Skills", {"skill_name": SKILL}), SKILL_TOKEN),
        ]
    return []


def mcp_server(top: Path) -> list[str]:
    """The probe's MCP server, copied outside the checkout: its argv."""
    script = top / "probe-mcp" / "notes_mcp.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(__file__).with_name("notes_mcp.py"), script)
    return [shutil.which("python3") or "/usr/bin/python3", "-I", str(script)]


def plant_capabilities(layout: Layout, caps: list[Capability], home: Path) -> None:
    for cap in caps:
        for rel, content in cap.home_files:
            target = home / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
        for rel, content in cap.files:
            target = layout.project / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
            layout.planted[str(target)] = ("project", rel)


def acknowledge(harness: str, layout: Layout, home: Path, caps: list[Capability]) -> None:
    """The harness's own consent for the planted definitions, given as its user would.
    Gemini CLI 0.61.0 registers a project's subagent only once the user acknowledged that
    agent's file by its SHA-256 (`~/.gemini/acknowledgments/agents.json`)."""
    if harness != "gemini-cli":
        return
    import hashlib

    agents = {}
    for cap in caps:
        if cap.kind == "agent":
            agents[AGENT] = hashlib.sha256(cap.files[0][1].encode()).hexdigest()
    path = home / ".gemini" / "acknowledgments" / "agents.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({str(layout.project): agents}))


def exercised(harness: str, caps: list[Capability], model: MockModel
              ) -> dict[str, dict[str, Any]]:
    """Per capability: the tool name the harness was sent, and whether its proof reached the
    model after the call."""
    out: dict[str, dict[str, Any]] = {}
    mains = model.main_requests()
    for cap in caps:
        sent = next((c for c in model.tool_calls if model.script[c.script_index] == cap.call),
                    None)
        after = [r for r in mains if sent is not None and r.at >= sent.at]
        proof = any(cap.proof in r.raw_body.decode("utf-8", "replace") for r in after)
        if cap.kind == "mcp":
            proof = any(cap.proof in t for t in model.result_texts())
        out[cap.kind] = {"call": sent.name if sent else None, "exercised": proof,
                         "files": [rel for rel, _ in cap.files]}
        if not proof and f"{harness}:{cap.kind}" in NOT_EXERCISED:
            out[cap.kind]["why_not"] = NOT_EXERCISED[f"{harness}:{cap.kind}"]
    for kind in KINDS:  # what the harness does not have, or loads from no file it is given
        if kind not in out:
            out[kind] = {"call": None, "exercised": False, "files": [],
                         "why_not": NOT_EXERCISED[f"{harness}:{kind}"]}
    return out



_LINE = re.compile(r"^(?P<pid>\d+)\s+(?P<t>\d+\.\d+)\s+(?P<rest>.*)$")
_CALL = re.compile(r"^(?P<call>open|openat2?|execveat|execve|clone3?|vfork|fork)\((?P<args>.*)$")
_RESUMED = re.compile(r"^<\.\.\. (?P<call>clone3?|vfork|fork) resumed>.*=\s+(?P<ret>\d+)")
_RET = re.compile(r"=\s+(?P<ret>-?\d+)(?:\s+\S+.*)?$")
_STR = re.compile(r'"((?:[^"\\]|\\.)*)"')
# Programs the harness runs whose reads are not the harness loading a file: git (OpenCode's
# snapshots add the whole worktree), ripgrep (file search), the shells and commands of the
# scripted session. What they *execute* is still recorded.
HELPERS = frozenset({"git", "rg", "bash", "sh", "dash", "head", "echo", "cat", "ls", "env"})


def _unescape(text: str) -> str:
    return text.encode("latin-1", "backslashreplace").decode("unicode_escape", "replace")


@dataclass
class Access:
    at: float
    call: str  # "open" | "exec"
    path: str
    program: str  # the basename of what the process was running
    pid: str = ""


def parse_strace(log: str, first_program: str) -> list[Access]:
    """Each successful open or exec in an `strace -f -ttt` log traced with the clone calls, with
    the program the process ran (a child runs its parent's until it execs; relative paths of
    `openat(AT_FDCWD, ...)` are not resolved: every planted path is absolute in the probe)."""
    program: dict[str, str] = {}
    root: str | None = None
    out: list[Access] = []
    for line in log.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        pid, at, rest = m.group("pid"), float(m.group("t")), m.group("rest")
        if root is None:
            root = pid
            program[pid] = first_program
        resumed = _RESUMED.match(rest)
        if resumed:
            program[resumed.group("ret")] = program.get(pid, first_program)
            continue
        call = _CALL.match(rest)
        if not call:
            continue
        name = call.group("call")
        ret = _RET.search(rest)
        failed = ret is not None and ret.group("ret").startswith("-")
        if name in ("clone", "clone3", "fork", "vfork"):
            if ret is not None and not failed and "<unfinished" not in rest:
                program[ret.group("ret")] = program.get(pid, first_program)
            continue
        strings = _STR.findall(call.group("args"))
        if not strings or failed:
            continue
        path = _unescape(strings[0])
        if name.startswith("exec"):
            program[pid] = os.path.basename(path)
            out.append(Access(at, "exec", path, program[pid], pid))
        elif "O_PATH" not in rest and "O_DIRECTORY" not in rest:  # those read nothing
            out.append(Access(at, "open", path, program.get(pid, first_program), pid))
    return out


def _strace(log: Path, argv: list[str]) -> list[str]:
    """`argv` under strace: every process, wall-clock times, the opens, execs and clones (to
    know which program each process runs), through a seccomp filter (fast)."""
    return [STRACE, "-f", "-qq", "-ttt", "-s", "4096", "--seccomp-bpf", "-e", "signal=none",
            "-e", "trace=open,openat,openat2,execve,execveat,clone,clone3,fork,vfork",
            "-o", str(log), "--", *argv]


def stop_daemons(under: Path) -> None:
    """End what a harness left running in the background for a directory under `under` (Cline
    starts a hub daemon, `--cline-hub-daemon --cwd DIR`, that outlives its command)."""
    import signal

    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if b"--cline-hub-daemon" in argv and any(
                    a.decode(errors="replace").startswith(str(under)) for a in argv):
                os.kill(int(proc.name), signal.SIGKILL)


def run_traced(session: Session, cwd: Path, log: Path, timeout: float | None = None
               ) -> subprocess.CompletedProcess[str]:
    """`session` run under strace in `cwd`, killed after `timeout` (RUN_TIMEOUT on an idle
    machine, stretched by its load: OpenCode's session over a thousand canaries takes minutes
    on a loaded one)."""
    timeout = scaled(RUN_TIMEOUT) if timeout is None else timeout
    argv = _strace(log, session.argv)
    with subprocess.Popen(argv, cwd=cwd, env=session.env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        done = threading.Event()
        watcher = threading.Thread(target=_end_daemons_after_harness,
                                   args=(proc.pid, cwd.parent.parent.parent, done), daemon=True)
        watcher.start()
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            stdout, stderr = proc.communicate(timeout=scaled(30))  # killed: only the drain is left
            stderr += f"\n(probe: killed after {timeout:.0f} s)"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            done.set()
            stop_daemons(cwd.parent.parent.parent)
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def _children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        return [int(x) for x in text.split()]
    return []


def _end_daemons_after_harness(tracer: int, under: Path, done: threading.Event) -> None:
    """Once the harness strace started has exited, end the daemons it left (strace follows
    them, and would wait for them for ever)."""
    harness: int | None = None
    while not done.wait(0.5):
        if harness is None:
            kids = _children(tracer)
            harness = kids[0] if kids else None
        elif not Path(f"/proc/{harness}").exists():
            stop_daemons(under)


# Started on a pseudo-terminal too, with no prompt: what its interactive start loads.
INTERACTIVE = ("claude-code", "codex", "copilot", "gemini-cli", "opencode", "qwen-code", "kilo",
               "cline", "aider", "continue", "auggie")
# Why a harness is not started on a pseudo-terminal (each probed harness is either here or in
# INTERACTIVE).
NOT_INTERACTIVE: dict[str, str] = {
    "droid": "its interactive start (0.225.2) checks FACTORY_API_KEY with Factory's servers and "
    "exits offline ('Authentication failed. FACTORY_API_KEY is set but appears to be invalid'); "
    "`droid exec` does not, so Droid is probed headless only",
}
FALLBACKS = 3  # runs with what was loaded taken away
QUIET = 4.0  # seconds without a traced call: the interactive start is done
_ANSI = re.compile(
    rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][A-Z0-9]|\x1b[=>]")


def run_traced_pty(session: Session, cwd: Path, log: Path, home: Path,
                   timeout: float = 60.0) -> str:
    """Start the harness interactively on a pseudo-terminal under strace, let it settle (the
    trace quiet for QUIET seconds, or `timeout`), answer its terminal queries, then stop it.
    "ran" when it was still running when stopped, else how it ended and its last words."""
    import fcntl
    import select
    import signal
    import struct
    import termios

    from tests.support.ptyspawn import pty_spawn

    argv = _strace(log, [session.argv[0]])  # the binary alone: its interactive start
    env = {**session.env, "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    pid, master = pty_spawn(argv, env=env, cwd=cwd, inherit=False)
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    screen = b""
    status: int | None = None
    try:
        start = last = time.monotonic()
        size = -1
        while time.monotonic() - start < timeout:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            status = None
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                with contextlib.suppress(OSError):
                    chunk = os.read(master, 65536)
                    screen = (screen + chunk)[-65536:]
                    if b"\x1b[6n" in chunk:  # where is the cursor (Codex, OpenCode ask)
                        os.write(master, b"\x1b[1;1R")
            now_size = log.stat().st_size if log.exists() else 0
            if now_size != size:
                size, last = now_size, time.monotonic()
            elif time.monotonic() - last > QUIET and time.monotonic() - start > 2 * QUIET:
                break
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        if status is None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        os.close(master)
        stop_detached(home)
    if status is None:
        return "ran"
    words = " ".join(_ANSI.sub(b"", screen).decode("utf-8", "replace").split())
    return f"exited {os.waitstatus_to_exitcode(status)}: {words[-300:]}"


def stop_detached(home: Path) -> None:
    """End what a harness started from its (the probe's) home and left running (interactive
    Codex 0.171.0 starts an app-server from `~/.codex/packages/` in a session of its own)."""
    import signal

    prefix = str(home) + os.sep
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv0 = (proc / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
            if argv0.startswith(prefix):
                os.kill(int(proc.name), signal.SIGKILL)


def _interactive_home(name: str, home: Path) -> None:
    if name == "claude-code":  # the first-run screens are not what the probe is about
        config = home / ".claude.json"
        doc = json.loads(config.read_text()) if config.exists() else {}
        doc.update(hasCompletedOnboarding=True,
                   customApiKeyResponses={"approved": ["sk-ant-probe"], "rejected": []})
        config.write_text(json.dumps(doc))


# ----------------------------------------------------------------------------- checking


def _inert(harness: str, location: str, rel: str) -> str | None:
    for key, reason in INERT.items():
        who, _, pattern = key.partition(":")
        who, _, where = who.partition("@")
        if (who in ("*", harness) and where in ("", location)
                and _match(pattern.split("/"), rel.split("/"))):
            return reason
    return None


def covered(harness: H.Harness, location: str, rel: str) -> str | None:
    """The surface pattern that covers a planted file (None: off the surface)."""
    parts = rel.split("/")
    if location in ("project", "nested"):
        full = parts if location == "project" else ["sub", *parts]
        for entry in harness.surface:
            if _match(entry.pattern.split("/"), full):
                return entry.pattern
        return None
    for pattern in harness.above:
        if _match(pattern.split("/"), parts):
            return pattern
    return None


def _phase(at: float, marks: list[tuple[float, str]]) -> str:
    phase = "start"
    for when, name in marks:
        if at >= when:
            phase = name
    return phase


def observe(harness: str, layout: Layout, log: str, model: MockModel) -> dict[str, Any]:
    """What the run opened and executed of the planted files, with the phase of each."""
    # What the harness opens after request i and before request i+1 it opens for the tool call
    # it was sent in answer to request i; before the first request, at start.
    marks = [(call.at, f"tool:{call.name}") for call in model.tool_calls]
    mains = [r for r in model.requests if r.kind == "main"]
    accesses = parse_strace(log, binary_path(harness).name)
    walks: dict[str, list[float]] = {}
    for access in accesses:
        if access.call == "open" and os.path.normpath(access.path) in layout.controls:
            walks.setdefault(access.pid, []).append(access.at)
    windows = {pid: (min(t) - WALK_WINDOW, max(t) + WALK_WINDOW) for pid, t in walks.items()
               if harness not in READS_DIRECTORIES_WHOLE}
    walked = 0
    opened: dict[str, str] = {}
    executed: dict[str, str] = {}
    for access in accesses:
        window = windows.get(access.pid)
        if access.call == "open" and window and window[0] <= access.at <= window[1]:
            walked += 1
            continue
        hit = layout.planted.get(os.path.normpath(access.path))
        if hit is None:
            continue
        key = f"{hit[0]}:{hit[1]}"
        if access.call == "exec":
            executed.setdefault(key, _phase(access.at, marks))
        elif access.program not in HELPERS:
            opened.setdefault(key, _phase(access.at, marks))
    text = "\n".join(r.raw_body.decode("utf-8", "replace") for r in model.requests)
    reached = sorted(
        f"{loc}:{rel}" for path, (loc, rel) in layout.planted.items()
        if f"{loc}:{rel}" in opened and _canary_id(layout, path) in text)
    servers = sorted({_phase(float(m.group(1)), marks) for m in re.finditer(
        r"^\d+\s+(\d+\.\d+)\s+execve\(\"[^\"]*\", \[[^\]]*\"[^\"]*/probe-mcp/notes_mcp\.py\"",
        log, re.M)})
    return {"opened": dict(sorted(opened.items())), "executed": dict(sorted(executed.items())),
            "model": reached, "requests": len(mains), "walked": walked > 0, "server": servers}


def _canary_id(layout: Layout, path: str) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "\0"
    m = re.search(TOKEN + r"[0-9a-z]+", text)
    return m.group(0) if m else "\0"


def findings(name: str, observed: dict[str, Any],
             harness: H.Harness | None = None) -> list[str]:
    """Planted files the harness opened or ran that are neither on its surface nor inert."""
    harness = harness or _harness(name)
    out = []
    for key in sorted({*observed["opened"], *observed["executed"]}):
        location, _, rel = key.partition(":")
        if covered(harness, location, rel) is None and _inert(name, location, rel) is None:
            out.append(key)
    return out


def report(name: str, version: str, candidates: list[str], observed: dict[str, Any],
           session: dict[str, Any] | None = None, interactive: str | None = None
           ) -> dict[str, Any]:
    harness = _harness(name)
    loads = {}
    for key, phase in {**observed["opened"], **observed["executed"]}.items():
        location, _, rel = key.partition(":")
        pattern = covered(harness, location, rel)
        reason = _inert(name, location, rel) if pattern is None else None
        loads[key] = {
            "phase": phase,
            "how": "executed" if key in observed["executed"] else "read",
            "model": key in observed["model"],
            "surface": pattern,
            **({"inert": reason} if reason else {}),
        }
    return {
        "harness": name,
        "version": version,
        "candidates": len(candidates),
        "walks_tree": observed["walked"],
        "loads": dict(sorted(loads.items())),
        "findings": findings(name, observed),
        "session": session or {},
        "interactive": interactive or "not run",
    }


# ----------------------------------------------------------------------------- driver


def probe(name: str, version: str, *, keep: Path | None = None, session_only: bool = False,
          log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Harvest, plant, run and check one harness; its report. With `session_only`, nothing is
    harvested and the harness runs once, headless: what its scripted session's skill, subagent
    and MCP files do (a cheap check of those alone)."""
    if not Path(STRACE).exists():
        raise RuntimeError(f"{STRACE} is missing: install strace (see .ci/run)")
    if not binary_path(name).exists():
        raise RuntimeError(f"{binary_path(name).name} is not installed: run "
                           "scripts/install-harnesses")
    top = Path(tempfile.mkdtemp(prefix=f"probe-{name}-", dir=keep))
    try:
        home = top / "home"
        if name == "copilot":  # unpack the native package before harvesting it
            subprocess.run([str(TOOLS_BIN / "copilot"), "--version"], capture_output=True,
                           env=harness_env(home, XDG_CACHE_HOME=str(COPILOT_CACHE)), timeout=300,
                           check=False)
        started = time.monotonic()
        candidates = [] if session_only else harvest(name, version)
        log(f"{name} {version}: {len(candidates)} candidates ({time.monotonic() - started:.1f} s)")
        layout = make_layout(top)
        caps = capabilities(name, mcp_server(top))
        with MockModel([]) as model:
            session = _setup(name, layout, home, model)
            # The skill, the server's tool, then the subagent (its own requests, answered
            # with text, come last).
            model.script = [*session.script, *(c.call for k in KINDS for c in caps
                                                if c.kind == k)]
            model.sub_marker = AGENT_TOKEN
            plant_capabilities(layout, caps, home)
            acknowledge(name, layout, home, caps)
            plant(layout, candidates, code=name in CODE_CANARIES)
            trace = top / "strace.log"
            started = time.monotonic()
            done = run_traced(session, layout.project, trace)
            log(f"{name}: exit {done.returncode} in {time.monotonic() - started:.1f} s, "
                f"{len(model.main_requests())} model requests, {len(model.tool_calls)} tool calls")
            if not model.main_requests() and not (name == "aider" and model.requests):
                raise RuntimeError(f"{name} sent no model request:\n{done.stdout[-2000:]}\n"
                                   f"{done.stderr[-2000:]}")
            observed = observe(name, layout, trace.read_text(errors="replace"), model)
            used = {**exercised(name, caps, model), "server": observed["server"]}
            interactive: str | None = NOT_INTERACTIVE.get(name)
            if name in INTERACTIVE and not session_only:
                _interactive_home(name, home)
                started = time.monotonic()
                pty_trace = top / "strace-pty.log"
                interactive = run_traced_pty(session, layout.project, pty_trace, home)
                log(f"{name}: interactive start traced in {time.monotonic() - started:.1f} s: "
                    f"{interactive}")
                at_start = observe(name, layout, pty_trace.read_text(errors="replace"),
                                   MockModel([]))
                for table in ("opened", "executed"):
                    for key in at_start[table]:
                        observed[table].setdefault(key, "interactive start")
                read = len({*at_start["opened"], *at_start["executed"]})
                interactive += f": {read} planted files read or run at start"
        # What a harness reads only when another file is absent (OpenCode's CONTEXT.md without
        # AGENTS.md or CLAUDE.md): everything it loaded is taken away and it runs once more.
        # Again while a run finds more (a fallback of a fallback), at most FALLBACKS times.
        for attempt in range(0 if session_only else FALLBACKS):
            loaded = {*observed["opened"], *observed["executed"]}
            for path, (location, rel) in layout.planted.items():
                if f"{location}:{rel}" in loaded:
                    Path(path).unlink(missing_ok=True)
            with MockModel([]) as model:
                session = _setup(name, layout, home, model)
                model.script = list(session.script)
                trace = top / f"strace-fallback-{attempt}.log"
                started = time.monotonic()
                run_traced(session, layout.project, trace)
                log(f"{name}: fallback run in {time.monotonic() - started:.1f} s")
                fallback = observe(name, layout, trace.read_text(errors="replace"), model)
            new = {*fallback["opened"], *fallback["executed"]} - loaded
            for table in ("opened", "executed"):
                for key in fallback[table]:
                    observed[table].setdefault(key, "fallback")
            observed["model"] = sorted({*observed["model"], *fallback["model"]})
            if not new:
                break
        return report(name, version, candidates, observed, used, interactive)
    finally:
        if keep is None:
            shutil.rmtree(top, ignore_errors=True)


def merged(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A new report of the same version with what an earlier run saw kept: a harness reads some
    files only when its start takes long enough (Claude Code's `.claude/workflows/` at its
    interactive start), so what the same binary loaded once stays a load."""
    if old.get("version") != new["version"]:
        return new
    observed = observed_from(new)
    for key, value in observed_from(old).items():
        if isinstance(value, dict):
            observed[key] = {**value, **observed[key]}
        elif isinstance(value, list):
            observed[key] = sorted({*value, *observed[key]})
    return report(new["harness"], new["version"], ["?"] * new["candidates"], observed,
                  new.get("session"), new.get("interactive"))


def observed_from(rep: dict[str, Any]) -> dict[str, Any]:
    """The observation a committed report was made from (what `findings` checks)."""
    loads = rep["loads"]
    return {
        "opened": {k: v["phase"] for k, v in loads.items() if v["how"] == "read"},
        "executed": {k: v["phase"] for k, v in loads.items() if v["how"] == "executed"},
        "model": [k for k, v in loads.items() if v["model"]],
        "walked": rep["walks_tree"],
    }


def recheck() -> list[str]:
    """Re-check every committed observation against the surface as it is now (no harness runs)
    and rewrite the reports and the docs; the findings."""
    out = []
    for rep in list(committed()):
        fresh = report(rep["harness"], rep["version"], ["?"] * rep["candidates"],
                       observed_from(rep), rep.get("session"), rep.get("interactive"))
        output_path(rep["harness"], rep["version"]).write_text(json.dumps(fresh, indent=2) + "\n")
        out += [f"{rep['harness']} {rep['version']} loads {k}" for k in fresh["findings"]]
    write_docs()
    return out


def output_path(name: str, version: str) -> Path:
    return OUT_DIR / f"{name}-{version}.json"


def committed() -> Iterator[dict[str, Any]]:
    for path in sorted(OUT_DIR.glob("*.json")):
        yield json.loads(path.read_text(encoding="utf-8"))


DOCS = REPO / "docs" / "surface.md"
DOCS_BEGIN = "<!-- surface-probe:begin (generated by python -m tests.harness.surface_probe --docs) -->"
DOCS_END = "<!-- surface-probe:end -->"
_WHERE = {"project": "project", "nested": "nested", "above1": "above", "above2": "above"}


def render_docs(reports: Iterable[dict[str, Any]]) -> str:
    """docs/surface.md's measured section: for each harness and version, every planted file it
    read or ran, where from, when, and what covers it."""
    lines = [DOCS_BEGIN, ""]
    for rep in sorted(reports, key=lambda r: (r["harness"], r["version"])):
        harness = _harness(rep["harness"])
        lines += [f"#### {harness.display} {rep['version']}", "",
                  f"{rep['candidates']} candidate paths harvested from its bundle; "
                  f"{len(rep['loads'])} planted files read or run.", "",
                  "| file | where | when | reached the model | covered by |",
                  "|---|---|---|---|---|"]
        rows: dict[str, dict[str, Any]] = {}
        for key, load in rep["loads"].items():
            location, _, rel = key.partition(":")
            row = rows.setdefault(rel, {"where": set(), "when": set(), "model": False,
                                        "how": set(), "cover": set()})
            row["where"].add(_WHERE[location])
            row["when"].add(load["phase"])
            row["how"].add(load["how"])
            row["model"] |= load["model"]
            cover = f"`{load['surface']}`" if load["surface"] else f"inert: {load.get('inert')}"
            row["cover"].add(cover)
        for rel, row in sorted(rows.items()):
            where = ", ".join(w for w in ("project", "nested", "above") if w in row["where"])
            how = "" if row["how"] == {"read"} else " (executed)"
            lines.append(f"| `{rel}`{how} | {where} | {', '.join(sorted(row['when']))} | "
                         f"{'yes' if row['model'] else 'no'} | {'; '.join(sorted(row['cover']))} |")
        if rep["findings"]:
            lines += ["", "Off the surface: " + ", ".join(f"`{k}`" for k in rep["findings"])]
        lines += ["", *_session_lines(rep), ""]
    lines.append(DOCS_END)
    return "\n".join(lines) + "\n"


_KIND_NAMES = {"skill": "a skill", "agent": "a subagent", "mcp": "an MCP server's tool"}


def _session_lines(rep: dict[str, Any]) -> list[str]:
    """What the scripted session exercised, and how the interactive start went."""
    session = rep.get("session") or {}
    parts = []
    for kind in KINDS:
        used = session.get(kind)
        if not used:
            continue
        files = ", ".join(f"`{f}`" for f in used["files"])
        call = f"`{used['call']}`" if used["call"] else "no call"
        state = "exercised" if used["exercised"] else f"not exercised ({used.get('why_not')})"
        parts.append(f"{_KIND_NAMES[kind]} ({files}, called as {call}): {state}")
    out = []
    if parts:
        server = session.get("server") or []
        started = f"started at {', '.join(server)}" if server else "never started"
        out.append("Scripted session, besides reading, editing and a shell command: "
                   + "; ".join(parts) + f"; the probe's MCP server {started}.")
    interactive = rep.get("interactive", "not run")
    out.append(("Interactive on a pseudo-terminal: " if out else "Interactive: ") + (
        f"{interactive}." if interactive.startswith(("ran", "exited")) else
        f"not run ({interactive})."))
    return [" ".join(out)]


def docs_section(text: str) -> str:
    """The generated section as it stands in docs/surface.md ("" when missing)."""
    if DOCS_BEGIN not in text or DOCS_END not in text:
        return ""
    return text[text.index(DOCS_BEGIN): text.index(DOCS_END) + len(DOCS_END)] + "\n"


def write_docs() -> None:
    text = DOCS.read_text(encoding="utf-8")
    section = render_docs(committed())
    old = docs_section(text)
    text = text.replace(old, section) if old else text.rstrip("\n") + "\n\n" + section
    DOCS.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.surface_probe")
    parser.add_argument("--harness", action="append", choices=sorted(pinned_versions()))
    parser.add_argument("--write", action="store_true", help="write the reports under surface/")
    parser.add_argument("--keep", type=Path, help="keep the planted trees and logs under DIR")
    parser.add_argument("--docs", action="store_true",
                        help="only regenerate docs/surface.md's section from surface/")
    parser.add_argument("--recheck", action="store_true",
                        help="re-check the committed observations against harnesses.py (no runs)")
    args = parser.parse_args(argv)
    if args.docs:
        write_docs()
        return 0
    if args.recheck:
        for line in (lost := recheck()):
            print(f"surface-probe: {line}, not on its surface", file=sys.stderr)
        return 1 if lost else 0
    versions = pinned_versions()
    failed = False
    for name in args.harness or sorted(versions):
        try:
            result = probe(name, versions[name], keep=args.keep,
                           log=lambda s: print(s, file=sys.stderr))
        except RuntimeError as exc:
            print(f"surface-probe: {name}: {exc}", file=sys.stderr)
            return 2
        if args.keep is not None:
            (args.keep / f"{name}-{versions[name]}.json").write_text(json.dumps(result, indent=2))
        if args.write:
            OUT_DIR.mkdir(exist_ok=True)
            path = output_path(name, versions[name])
            if path.exists():
                result = merged(json.loads(path.read_text(encoding="utf-8")), result)
            path.write_text(json.dumps(result, indent=2) + "\n")
        for key in result["findings"]:
            failed = True
            print(f"surface-probe: {name} {versions[name]} loads {key}, not on its surface",
                  file=sys.stderr)
        print(f"{name} {versions[name]}: {len(result['loads'])} planted files loaded, "
              f"{len(result['findings'])} off the surface")
    if args.write:
        write_docs()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

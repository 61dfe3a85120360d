"""Find the real harness CLIs and build a minimal, offline environment to run them in.

`scripts/install-harnesses` installs them, pinned, into ``<repo>/.tools/npm``. When a harness is
missing a test skips locally, but FAILS when ``CI=true``: CI must never silently skip a harness test.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOLS_BIN = REPO / ".tools" / "npm" / "node_modules" / ".bin"
HARNESSES = ("claude", "codex", "gemini", "opencode", "copilot", "qwen", "droid", "kilo")


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def harness_bin(name: str) -> Path:
    """Absolute path of a harness executable (``claude``, ``codex``, ``gemini``, ``opencode``,
    ``copilot``): ``<repo>/.tools/npm/node_modules/.bin``
    first, then ``PATH``. Missing: ``pytest.skip`` locally, ``pytest.fail`` when ``CI=true``."""
    if name not in HARNESSES:
        raise ValueError(f"unknown harness {name!r}; expected one of {HARNESSES}")
    local = TOOLS_BIN / name
    if local.is_file() and os.access(local, os.X_OK):
        return local
    found = shutil.which(name)
    if found:
        return Path(found).resolve()
    message = f"{name} is not installed: run scripts/install-harnesses"
    if in_ci():
        pytest.fail(f"{message} (CI=true: harness tests must not be skipped)", pytrace=False)
    pytest.skip(message)


def _path_value() -> str:
    """PATH for the harness: the directory of `node` (Codex's launcher is a node script), the
    installed harnesses, and the system directories (bash, python3 for hook scripts)."""
    dirs: list[str] = []
    node = shutil.which("node")
    if node:
        dirs.append(str(Path(node).resolve().parent))
    dirs.append(str(TOOLS_BIN))
    dirs += ["/usr/local/bin", "/usr/bin", "/bin"]
    seen: list[str] = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return os.pathsep.join(seen)


def harness_env(home: Path, **extra: str) -> dict[str, str]:
    """A minimal environment for running a harness offline with ``HOME=home``.

    Nothing is inherited from the developer's environment (no API keys, proxies, ``CLAUDE_*`` /
    ``CODEX_*`` / ``OPENAI_*`` settings): pass what a test needs as keyword arguments, e.g.
    ``ANTHROPIC_BASE_URL=model.url, ANTHROPIC_API_KEY="dummy"``. Creates ``home``, ``home/.codex``
    (Codex insists that ``CODEX_HOME`` exists) and ``home/.tmp`` (``TMPDIR``: Codex refuses to
    create its helper binaries, ``codex-linux-sandbox`` among them, when ``CODEX_HOME`` lies under
    ``TMPDIR``, and its ``workspace-write`` sandbox then fails with ``bwrap: execvp
    codex-linux-sandbox: No such file or directory``; pytest's tmp_path is under /tmp)."""
    home = Path(home)
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".tmp").mkdir(parents=True, exist_ok=True)
    env = {
        "HOME": str(home),
        "USER": "tester",
        "LOGNAME": "tester",
        "SHELL": "/bin/bash",
        "PATH": _path_value(),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "TMPDIR": str(home / ".tmp"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        # Claude Code: talk to nobody but ANTHROPIC_BASE_URL, fail fast, never self-update.
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_BUG_COMMAND": "1",
        "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
        # Codex: its state (config.toml, sessions, logs) under the temporary home.
        "CODEX_HOME": str(home / ".codex"),
        "RUST_LOG": "error",
    }
    env.update({k: str(v) for k, v in extra.items()})
    return env

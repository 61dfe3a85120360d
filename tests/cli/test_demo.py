"""`scripts/demo` runs end to end and every step shows the outcome it claims (the script checks
each one itself and exits 1 otherwise); its output, with paths, hashes, keys and times redacted,
is the reviewed golden file tests/golden/demo/demo.txt."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO

GOLDEN = REPO / "tests" / "golden" / "demo" / "demo.txt"

_REDACTIONS = (
    (re.compile(r"b3:[0-9a-f]{12,64}"), "b3:<hash>"),
    (re.compile(r"sha256:[0-9a-f]{64}"), "sha256:<hash>"),
    (re.compile(r"SHA256:[A-Za-z0-9+/]{43}"), "SHA256:<key>"),
    (re.compile(r"ssh-ed25519 AAAA[A-Za-z0-9+/=]+"), "ssh-ed25519 <key>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"), "<time>"),
    (re.compile(r"\b\d{8}T\d{6}\b"), "<stamp>"),
    (re.compile(r"\b[0-9a-f]{32}\b"), "<project-id>"),
    (re.compile(r"\b[0-9a-f]{12}\b"), "<id>"),
    # Which check refuses the demo's flipped byte depends on where the byte lands in this run's
    # compressed stream (the signing key and the git skill's commits are new every run): a
    # refusal is what the demo asserts, whichever check makes it.
    (re.compile(r"bundle refused \([a-z-]+\): [^\n]*"), "bundle refused (<why>)"),
)


def redact(text: str, work: str) -> str:
    text = text.replace(work, "<WORK>").replace(str(REPO), "<REPO>")
    for pattern, replacement in _REDACTIONS:
        text = pattern.sub(replacement, text)
    return text


def _words(text: str) -> str:
    # Wrapping depends on the length of the redacted paths; the words and their order do not.
    return " ".join(text.split())


def run_demo() -> tuple[subprocess.CompletedProcess[str], str]:
    # A temporary directory of fixed length directly under /tmp (the demo makes its own inside).
    top = tempfile.mkdtemp(prefix="demo", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTSTACK_")}
    env.update(TMPDIR=top, COLUMNS="120", AGENTSTACK_DEMO_SKIP_INSTALL="1", NO_COLOR="1")
    proc = subprocess.run([str(REPO / "scripts" / "demo")], capture_output=True, text=True,
                          env=env, timeout=900, stdin=subprocess.DEVNULL)
    work = next(Path(top).glob("agentstack-demo.*"))
    return proc, str(work)


@pytest.mark.slow
def test_the_demo_runs_and_shows_what_it_claims() -> None:
    proc, work = run_demo()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "demo: FAILED" not in out
    # The guard allows the trusted call exactly as rendered, and blocks with the reason it shows.
    assert out.count("allowed (exit 0)") == 2, out
    assert "blocked (exit 2): agentstack guard: tool 'mcp__evil__exfiltrate' belongs to MCP server" in out
    assert "names neither a project nor --user-level" not in out
    text = redact(proc.stdout, work)
    if os.environ.get("AGENTSTACK_REGENERATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text, encoding="utf-8")
    assert GOLDEN.exists(), f"no golden file {GOLDEN}; AGENTSTACK_REGENERATE_GOLDEN=1"
    assert _words(text) == _words(GOLDEN.read_text(encoding="utf-8"))


def test_redaction_leaves_no_machine_specific_value() -> None:
    sample = ("/tmp/x/agentstack-demo.abc/full b3:" + "a" * 64 + " id 0123456789ab at "
              "2026-12-01T21:07:24Z from " + str(REPO) + "/.venv/bin/python")
    assert redact(sample, "/tmp/x/agentstack-demo.abc") == (
        "<WORK>/full b3:<hash> id <id> at <time> from <REPO>/.venv/bin/python")

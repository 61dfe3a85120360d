"""The repository stands alone: no file points at a document outside it (design notes, contracts,
research notes or a shared directory kept beside the checkout), and every relative link in a
Markdown file resolves to a file inside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

# Built from pieces so that this file does not match itself.
OUTSIDE = re.compile(
    "|".join([
        # (not as a file name a harness reads: Factory Droid loads `**/DESIGN.md` as instructions)
        r"(?<![`\"/:])\b" + "DESIGN" + r"\.md\b",
        r"\b" + "CONTRACT" + r"\.md\b",
        r"\b" + "STYLE" + r"\.md\b",
        r"(?<![\w.-])" + "research" + r"/[\w.*-]+\.md\b",
        r"\.\./" + "shared" + r"\b",
        "/work/" + "shared" + r"\b",
    ])
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    return [REPO / name for name in out.stdout.decode().split("\0") if name]


def _text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", "replace")


def test_no_file_refers_to_a_document_outside_the_repository() -> None:
    found = []
    for path in _tracked():
        text = _text(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}")
    assert not found, "\n".join(found)


def test_relative_links_in_markdown_stay_inside_and_resolve() -> None:
    broken = []
    for path in _tracked():
        if path.suffix != ".md" or (text := _text(path)) is None:
            continue
        for target in LINK.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL (or mailto:) or an anchor in the same file
            rel = target.split("#", 1)[0]
            if not rel:
                continue
            resolved = (path.parent / rel).resolve()
            if not resolved.is_relative_to(REPO) or not resolved.exists():
                broken.append(f"{path.relative_to(REPO)}: {target}")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize(("line", "outside"), [
    ("see " + "DESIGN" + ".md for the rationale", True),
    ("as " + "research" + "/threats.md says", True),
    ("the shared notes in ../" + "shared/x", True),
    ("docs/design.md and ADRs", False),
    ("Droid reads `**/" + "DESIGN" + ".md` and `" + "DESIGN" + ".md`", False),
    ("the research into harnesses", False),
])
def test_the_pattern(line: str, outside: bool) -> None:
    assert bool(OUTSIDE.search(line)) is outside

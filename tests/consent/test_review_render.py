"""The review a person reads: unified diffs of changed files, commands quoted as a shell needs them,
values as TOML, short hashes, and no token broken across lines at 80 or 120 columns."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
from pathlib import Path

import pytest

from agentstack.consent.diff import consent_diff
from agentstack.consent.render import consent_renderable, console, diff_renderable, toml_value
from agentstack.trust.contentstore import Contents, ContentStore, collect, is_text
from tests.conftest import make_project
from tests.support.cli import REPO

# The commands run in process: what these tests check is the library's answer, not the process.
from tests.support.cli import run_cli_in_process as run_cli
from tests.support.project import Manifest

GOLDEN = REPO / "tests" / "golden" / "review"
REGENERATE = os.environ.get("AGENTSTACK_REGENERATE_GOLDEN") == "1"

MANIFEST = str(Manifest("review", []).server("hello", "servers/hello.py", "--greeting", "good morning")
               .instructions("AGENTS.md"))
FILES = {
    "AGENTS.md": "# Project rules\n\nRun the tests before you commit.\nKeep functions short.\n",
    "servers/hello.py": "import sys\n\nprint('hello', sys.argv[1:])\n",
}
NEW_SERVER = """
[servers.reporter]
command = "sh"
args = ["-c", "echo \\"prompt received\\" >&2 && exec python3 servers/report.py"]
env = { API_TOKEN = "secret:report-token", MODE = "quiet but 'careful'", RETRIES = "3" }
"""


def _changed_project(tmp_path: Path) -> Path:
    root = make_project(tmp_path / "review", MANIFEST, FILES)
    assert run_cli("lock", cwd=root).returncode == 0
    trusted = run_cli("trust", "--yes", "--accept-risk", cwd=root)
    assert trusted.returncode == 0, trusted.stderr
    (root / "AGENTS.md").write_text(
        "# Project rules\n\nRun the tests before you commit.\nNever push to main.\nKeep functions short.\n"
    )
    (root / "servers/hello.py").write_text(
        "import os\nimport sys\n\nprint('hello', sys.argv[1:], os.environ.get('HOME'))\n"
    )
    (root / "servers/report.py").write_text("print('report')\n")
    with (root / "agentstack.toml").open("a") as handle:
        handle.write(NEW_SERVER)
    assert run_cli("lock", cwd=root).returncode == 0, "lock"
    return root


def _normalise(text: str, root: Path) -> str:
    text = text.replace(str(root.resolve()), "PROJECT")
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "DATE", text)
    return re.sub(r"b3:[0-9a-f]{64}", "b3:DIGEST", text)


def _golden(name: str, actual: str) -> None:
    path = GOLDEN / name
    if REGENERATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
    assert path.exists(), f"no golden file {path}; AGENTSTACK_REGENERATE_GOLDEN=1"
    assert actual == path.read_text(), f"the rendering differs from {path}"


def test_golden_diff_and_trust_review_at_80_columns(tmp_path: Path) -> None:
    root = _changed_project(tmp_path)
    diff = run_cli("diff", cwd=root, env={"COLUMNS": "80"})
    assert diff.returncode == 0, diff.stderr
    _golden("diff-80.txt", _normalise(diff.stdout, root))
    review = run_cli("trust", "--yes", cwd=root, env={"COLUMNS": "80"})
    assert review.returncode == 1  # a new server and a changed one: high-risk findings
    assert "--accept-risk" in review.stderr
    _golden("trust-review-80.txt", _normalise(review.stdout, root))
    # What the review must say, independent of the golden bytes (wrapping aside):
    flat = " ".join(diff.stdout.split())
    for expected in (
        "+Never push to main.",
        "-print('hello', sys.argv[1:])",
        "+import os",
        "runs sh -c 'echo \"prompt received\" >&2 && exec python3 servers/report.py'",
        "API_TOKEN ← secret:report-token",
        "MODE = \"quiet but 'careful'\"",
    ):
        assert expected in flat, expected
    assert "lock" not in {line.strip().split(" ")[-1] for line in diff.stdout.splitlines()}
    assert not re.search(r"\bTrue\b|\bFalse\b|\{'", diff.stdout + review.stdout)


def _render(renderable: object, width: int) -> str:
    buffer = io.StringIO()
    console(file=buffer, width=width).print(renderable)  # the CLI's own console, never cropping
    return buffer.getvalue()


@pytest.mark.parametrize("width", [80, 120])
def test_no_token_is_broken_across_lines(tmp_path: Path, width: int) -> None:
    root = _changed_project(tmp_path)
    from agentstack.consent.document import current as _current
    from agentstack.trust.review import TrustStore

    _, _, after, digest = _current(root)
    store = TrustStore()
    last = store.last_trusted(root)
    assert last is not None
    before = store.load_consent(last.digest)
    assert before is not None
    result = consent_diff(before, after)
    contents = Contents(ContentStore(), collect(root, after))
    rendered = _render(diff_renderable(result, contents), width) + _render(
        consent_renderable(after, digest), width
    )
    tokens: set[str] = {digest}
    for server in after["servers"].values():
        tokens.update(shlex.join([server["command"], *server["args"]]).split())
        tokens.update(server["env"])
        for entry in server["files"]:
            tokens.update({entry["path"], entry["digest"][:15]})
    for finding in result.findings:
        tokens.update(finding.item.split())
    for token in tokens:
        for piece in token.split():
            # A token broken across lines would have a newline and indentation inside it.
            assert piece in rendered, f"{piece!r} is broken across lines at {width} columns"
    for line in rendered.splitlines():
        # A line is wider than the terminal only when a single token is.
        if len(line) > width:
            assert len(line.strip().split(" ")) == 1 or line.lstrip().startswith(("+", "-", " ")), line
    hashes = re.findall(r"b3:[0-9a-f]+", rendered)
    assert hashes and all(len(m) == 15 for m in hashes if m != digest), "short hashes (12 hex)"


def test_values_render_as_toml() -> None:
    assert toml_value(True) == "true"
    assert toml_value([{"matcher": "*", "hooks": []}]) == '[{ matcher = "*", hooks = [] }]'
    assert toml_value({"a b": "x"}) == '{ "a b" = "x" }'
    assert toml_value("it's") == '"it\'s"'


def test_json_keeps_full_hashes(tmp_path: Path) -> None:
    root = _changed_project(tmp_path)
    data = json.loads(run_cli("diff", "--json", cwd=root).stdout)
    digests = re.findall(r"b3:[0-9a-f]+", json.dumps(data))
    assert digests and all(len(d) == 67 for d in digests)
    assert not any(c["path"] == "lock" for c in data["changes"])
    changed = {c["path"] for c in data["changes"]}
    assert "servers.hello.files[servers/hello.py]" in changed
    assert "instructions[AGENTS.md]" in changed


def test_content_store_keeps_trusted_text_and_prunes_the_rest(tmp_path: Path) -> None:
    root = _changed_project(tmp_path)
    store = ContentStore()
    old_text = FILES["AGENTS.md"].encode()
    from agentstack.canonical import b3

    assert store.get(b3(old_text)) == old_text  # kept when it was trusted
    (tampered,) = store.packs.iterdir()
    data = tampered.read_bytes()
    tampered.write_bytes(data.replace(old_text, old_text.upper()))
    store = ContentStore()
    assert store.get(b3(old_text)) is None  # read back only when it still hashes to its name
    assert store.problems and "damaged" in store.problems[0]
    assert not is_text(b"\x00\x01binary")
    # After the new setup is trusted and everything revoked, nothing trusted names these bytes.
    assert run_cli("trust", "--yes", "--accept-risk", cwd=root).returncode == 0
    new_digest = b3((root / "AGENTS.md").read_bytes())
    assert ContentStore().get(new_digest) is not None  # (a store reads the packs once)
    assert ContentStore().problems == []  # the damaged pack is gone
    assert run_cli("revoke", cwd=root).returncode == 0
    assert ContentStore().get(new_digest) is None
    assert not [p for p in store.directory.rglob("*") if p.is_file()]


def test_binary_and_unknown_files_show_size_and_hash(tmp_path: Path) -> None:
    old = {"path": "tool.bin", "kind": "file", "executable": True, "size": 4,
           "digest": "b3:" + "1" * 64}
    new = dict(old, size=5, digest="b3:" + "2" * 64)
    from agentstack.consent.diff import Change, ConsentDiff

    change = Change(path="servers.x.files[tool.bin]", kind="changed", old=old, new=new)
    out = _render(diff_renderable(ConsentDiff(findings=[], changes=[change])), 80)
    assert "was 4 bytes b3:111111111111 (not kept on this machine)" in out
    assert "now 5 bytes b3:222222222222" in out


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agentstack.consent.render import Wrapped, t  # noqa: E402

_TOKEN = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1,
                 max_size=90)


@settings(max_examples=200, deadline=None)
@given(tokens=st.lists(_TOKEN, min_size=1, max_size=30), width=st.integers(20, 140),
       indent=st.integers(0, 16))
def test_wrapping_never_breaks_a_token(tokens: list[str], width: int, indent: int) -> None:
    out = _render(Wrapped(t(" ".join(tokens)), indent, first=None), width)
    assert out.split() == tokens  # every token whole, in order
    for line in out.splitlines():
        assert len(line) <= width or len(line.split()) == 1  # only a lone long token overflows


def test_content_diffs_send_no_control_sequence(tmp_path: Path) -> None:
    root = make_project(tmp_path / "hostile", MANIFEST, FILES)
    assert run_cli("lock", cwd=root).returncode == 0
    assert run_cli("trust", "--yes", "--accept-risk", cwd=root).returncode == 0
    (root / "AGENTS.md").write_text("ok\n\x1b]0;pwned\x07\x1b[31mred\x1b[0m \u202eexe.txt\n")
    assert run_cli("lock", cwd=root).returncode == 0
    out = run_cli("diff", cwd=root, env={"COLUMNS": "80"}).stdout
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
    assert "+ok" in out and "\\u202e" in out

"""The manifest → lock → digest path through the real `agentstack` command."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.conftest import git, make_project
from tests.harness.deadline import scaled
from tests.support.cli import REPO

# The commands run in process: what these tests check is the library's answer, not the process.
from tests.support.cli import run_cli_in_process as run_cli

BASE = """\
[project]
name = "demo"
harnesses = ["claude-code", "codex"]

[servers.files]
command = "python3"
args = ["servers/files.py", "--root", "."]
env = { LEVEL = "info", TOKEN = "secret:files-token" }

[skills.review]
path = "skills/review"

[instructions]
files = ["AGENTS.base.md"]

[hooks.fmt]
event = "PostToolUse"
matcher = "Edit|Write"
script = "hooks/fmt.sh"
"""
FILES = {
    "servers/files.py": "print('hi')\n",
    "skills/review/SKILL.md": "---\nname: review\n---\nReview.\n",
    "skills/review/run.sh": "#!/bin/sh\necho review\n",
    "AGENTS.base.md": "Be careful.\n",
    "hooks/fmt.sh": "#!/bin/sh\nexit 0\n",
}
EXECUTABLES = ("skills/review/run.sh", "hooks/fmt.sh")
DIGEST = re.compile(r"^b3:[0-9a-f]{64}$")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "demo", BASE, FILES, EXECUTABLES)


def test_lock_is_deterministic_and_machine_independent(project: Path, tmp_path: Path) -> None:
    assert run_cli("lock", cwd=project).returncode == 0
    first = (project / "agentstack.lock").read_bytes()
    (project / "agentstack.lock").unlink()
    assert run_cli("lock", cwd=project).returncode == 0
    assert (project / "agentstack.lock").read_bytes() == first
    text = first.decode()
    assert str(tmp_path) not in text and "time" not in text
    assert text.splitlines()[1] == "version = 1"
    # The same project elsewhere gives the same lock and the same digest.
    other = make_project(tmp_path / "elsewhere" / "demo", BASE, FILES, EXECUTABLES)
    assert run_cli("lock", cwd=other).returncode == 0
    assert (other / "agentstack.lock").read_bytes() == first
    assert run_cli("digest", cwd=other).stdout == run_cli("digest", cwd=project).stdout


def test_lock_pins_named_files_and_skill_tree(project: Path) -> None:
    run_cli("lock", cwd=project)
    shown = json.loads(run_cli("show", "--json", cwd=project).stdout)
    server = shown["servers"]["files"]
    assert [f["path"] for f in server["files"]] == ["servers/files.py"]
    assert server["env"] == {"LEVEL": {"literal": "info"}, "TOKEN": {"secret": "files-token"}}
    skill = shown["skills"]["review"]
    assert {f["path"]: f["executable"] for f in skill["files"]} == {
        "SKILL.md": False,
        "run.sh": True,
    }
    assert shown["hooks"]["fmt"]["files"][0]["path"] == "hooks/fmt.sh"


def test_digest_prints_one_digest(project: Path) -> None:
    run_cli("lock", cwd=project)
    result = run_cli("digest", cwd=project)
    assert result.returncode == 0, result.stderr
    assert DIGEST.match(result.stdout.strip())
    as_json = json.loads(run_cli("digest", "--json", cwd=project).stdout)
    assert as_json["digest"] == result.stdout.strip()


def test_check_and_frozen_detect_a_changed_byte(project: Path) -> None:
    run_cli("lock", cwd=project)
    assert run_cli("lock", "--check", cwd=project).returncode == 0
    assert run_cli("lock", "--frozen", cwd=project).returncode == 0
    before = (project / "agentstack.lock").read_bytes()
    (project / "skills/review/run.sh").write_text("#!/bin/sh\necho changed\n")
    check = run_cli("lock", "--check", cwd=project)
    assert check.returncode == 1
    assert "skills.review" in check.stderr
    frozen = run_cli("lock", "--frozen", cwd=project)
    assert frozen.returncode == 1 and "skills.review" in frozen.stderr
    stale = run_cli("digest", cwd=project)
    assert stale.returncode == 1 and "agentstack lock" in stale.stderr
    # --check and --frozen write nothing.
    assert (project / "agentstack.lock").read_bytes() == before
    assert run_cli("lock", cwd=project).returncode == 0
    assert run_cli("digest", cwd=project).returncode == 0


def test_manifest_edit_makes_lock_stale(project: Path) -> None:
    run_cli("lock", cwd=project)
    manifest = project / "agentstack.toml"
    manifest.write_text(manifest.read_text().replace('"info"', '"debug"'))
    frozen = run_cli("lock", "--frozen", cwd=project)
    assert frozen.returncode == 1
    assert "does not match" in frozen.stderr
    assert run_cli("show", cwd=project).returncode == 1


def test_missing_lock_is_refused_with_the_fix(project: Path) -> None:
    result = run_cli("digest", cwd=project)
    assert result.returncode == 1
    assert "run 'agentstack lock'" in result.stderr


def test_unknown_lock_major_version_is_an_error(project: Path) -> None:
    run_cli("lock", cwd=project)
    lock = project / "agentstack.lock"
    lock.write_text(lock.read_text().replace("version = 1", "version = 2"))
    result = run_cli("lock", "--frozen", cwd=project)
    assert result.returncode == 2
    assert "format version 2" in result.stderr


def test_bad_manifest_reports_every_problem_and_writes_nothing(tmp_path: Path) -> None:
    bad = """\
[project]
name = "Demo Project"
harnesses = ["claude-code", "emacs"]

[servers.github]
command = "npx"
args = ["-y", "@x/y@1.0.0", 3]
colour = "blue"

[servers.BadName]
url = "ftp://example.com"

[skills.pinned]
git = "file:///nonexistent/repo"
rev = "abc1234"
"""
    project = make_project(tmp_path / "p", bad)
    result = run_cli("lock", cwd=project)
    assert result.returncode == 2
    for path in (
        "project.name",
        "project.harnesses[1]",
        "servers.github.args[2]",
        "servers.github.colour",
        "servers.BadName",
        "servers.BadName.url",
        "skills.pinned.rev",
    ):
        assert f"agentstack.toml: {path}" in result.stderr, path
    assert "hint:" in result.stderr
    assert not (project / "agentstack.lock").exists()


def test_missing_files_and_unreachable_git_all_reported(tmp_path: Path) -> None:
    manifest = """\
[project]
name = "p"

[skills.local]
path = "skills/missing"

[skills.remote]
git = "file:///nonexistent/agentstack-test-repo"
rev = "main"

[instructions]
files = ["AGENTS.base.md", "nope.md"]

[hooks.h]
event = "Stop"
script = "hooks/absent.sh"
"""
    project = make_project(tmp_path / "p", manifest, {"AGENTS.base.md": "x\n"})
    result = run_cli("lock", cwd=project)
    assert result.returncode == 2, result.stderr
    for path in ("skills.local.path", "skills.remote.git", "instructions.files[1]",
                 "hooks.h.script"):
        assert f"agentstack.toml: {path}" in result.stderr, path
    assert "instructions.files[0]" not in result.stderr
    assert not (project / "agentstack.lock").exists()


def test_toml_syntax_error_is_exit_2(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", "[project\nname = 1\n")
    result = run_cli("lock", cwd=project)
    assert result.returncode == 2
    assert "not valid TOML" in result.stderr


def test_paths_cannot_leave_the_project(tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("secret\n")
    manifest = '[project]\nname = "p"\n[instructions]\nfiles = ["link.md", "../outside.md"]\n'
    project = make_project(tmp_path / "p", manifest)
    result = run_cli("lock", cwd=project)
    assert result.returncode == 2
    assert "instructions.files[1]: must stay inside the project" in result.stderr
    # A symlink that leads out of the project is caught when the files are resolved.
    (project / "agentstack.toml").write_text(manifest.replace(', "../outside.md"', ""))
    (project / "link.md").symlink_to(outside)
    result = run_cli("lock", cwd=project)
    assert result.returncode == 2
    assert "instructions.files[0]" in result.stderr and "outside the project" in result.stderr
    assert not (project / "agentstack.lock").exists()


# ------------------------------------------------------------------------------- git sources


def _source_repo(path: Path, canary: Path) -> Path:
    """A repository with a skill, a tag, and a core.fsmonitor canary that records any run."""
    path.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=path)
    (path / "skills" / "style").mkdir(parents=True)
    (path / "skills" / "style" / "SKILL.md").write_text("---\nname: style\n---\nStyle.\n")
    tool = path / "skills" / "style" / "check.sh"
    tool.write_text("#!/bin/sh\necho ok\n")
    tool.chmod(0o755)
    git("add", "-A", cwd=path)
    git("commit", "-qm", "skill", cwd=path)
    git("tag", "v1.0.0", cwd=path)
    hook = path.parent / "fsmonitor-canary.sh"
    hook.write_text(f"#!/bin/sh\necho fired >> {canary}\nexit 1\n")
    hook.chmod(0o755)
    git("config", "core.fsmonitor", str(hook), cwd=path)
    return path


def test_git_skill_is_pinned_to_full_commit_and_tree(tmp_path: Path) -> None:
    canary = tmp_path / "canary.log"
    repo = _source_repo(tmp_path / "src", canary)
    commit = git("rev-parse", "v1.0.0^{commit}", cwd=repo).strip()
    tree = git("rev-parse", "v1.0.0:skills/style", cwd=repo).strip()
    manifest = f"""\
[project]
name = "p"

[skills.style]
git = "{repo.as_uri()}"
rev = "v1.0.0"
subdir = "skills/style"
"""
    project = make_project(tmp_path / "p", manifest)
    # The project is itself an untrusted git repository with a canary fsmonitor.
    git("init", "-q", cwd=project)
    git("config", "core.fsmonitor", str(tmp_path / "fsmonitor-canary.sh"), cwd=project)
    result = run_cli("lock", cwd=project)
    assert result.returncode == 0, result.stderr
    shown = json.loads(run_cli("show", "--json", cwd=project).stdout)
    skill = shown["skills"]["style"]
    assert skill["commit"] == commit and skill["git_tree"] == tree
    assert {f["path"]: f["executable"] for f in skill["files"]} == {
        "SKILL.md": False,
        "check.sh": True,
    }
    # Moving the tag does not move the pin; --update does.
    (repo / "skills" / "style" / "SKILL.md").write_text("changed\n")
    git("-c", "core.fsmonitor=false", "commit", "-qam", "change", cwd=repo)
    git("tag", "-f", "v1.0.0", cwd=repo)
    assert run_cli("lock", "--check", cwd=project).returncode == 0
    assert run_cli("lock", "--update", cwd=project).returncode == 0
    updated = json.loads(run_cli("show", "--json", cwd=project).stdout)["skills"]["style"]
    assert updated["commit"] != commit
    assert not canary.exists(), canary.read_text()


def test_bad_git_rev_and_subdir_are_reported(tmp_path: Path) -> None:
    repo = _source_repo(tmp_path / "src", tmp_path / "canary.log")
    manifest = f"""\
[project]
name = "p"

[skills.a]
git = "{repo.as_uri()}"
rev = "no-such-tag"

[skills.b]
git = "{repo.as_uri()}"
rev = "v1.0.0"
subdir = "skills/absent"
"""
    project = make_project(tmp_path / "p", manifest)
    result = run_cli("lock", cwd=project)
    assert result.returncode == 2
    assert "skills.a.rev" in result.stderr and "skills.b.subdir" in result.stderr
    assert not (tmp_path / "canary.log").exists()


# ------------------------------------------------------------------------ import hygiene

_PROBE = """
import os, runpy, sys
def report(*_):
    heavy = sorted(m for m in ("git", "gitdb") if m in sys.modules)
    print("IMPORTED:" + ",".join(heavy), file=sys.stderr)
    sys.stderr.flush()
os._exit = lambda code, real=os._exit: (report(), real(code))  # the short ending (entry.end)
sys.argv = ["agentstack", *sys.argv[1:]]
try:
    runpy.run_module("agentstack", run_name="__main__")
except SystemExit:
    pass
report()
"""


@pytest.mark.parametrize("args", [["--help"], ["digest"], ["lock", "--check"], ["show", "--json"]])
def test_cli_does_not_import_git_unless_resolving(project: Path, args: list[str]) -> None:
    import subprocess
    import sys

    run_cli("lock", cwd=project)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-c", _PROBE, *args], cwd=project, env=env,
                            capture_output=True, text=True, timeout=scaled(60))
    assert "IMPORTED:\n" in result.stderr or result.stderr.rstrip().endswith("IMPORTED:"), (
        result.stderr
    )


def test_expansion_syntax_in_literals_is_refused(tmp_path: Path) -> None:
    manifest = """\
[project]
name = "p"

[servers.remote]
url = "https://example.com/mcp"
headers = { Authorization = "Bearer ${GITHUB_TOKEN}" }

[servers.local]
command = "npx"
args = ["-y", "tool@1.0.0", "--token=${OPENAI_API_KEY}"]
env = { HOME_COPY = "${HOME}" }
"""
    project = make_project(tmp_path / "p", manifest)
    result = run_cli("lock", cwd=project)
    assert result.returncode == 2
    for path in ("servers.remote.headers.Authorization", "servers.local.args[2]",
                 "servers.local.env.HOME_COPY"):
        assert path in result.stderr, result.stderr
    assert "secret:NAME" in result.stderr


@pytest.mark.parametrize(
    ("snippet", "field"),
    [
        ('[servers.r]\nurl = "https://h.example/mcp?k=${GITHUB_TOKEN}"\n', "servers.r.url"),
        ('[servers.r]\nurl = "https://h.example/$GITHUB_TOKEN"\n', "servers.r.url"),
        ('[servers.r]\nurl = "https://h.example/mcp"\nheaders = { X = "{env:TOKEN}" }\n',
         "servers.r.headers.X"),
        ('[servers.l]\ncommand = "tool"\nargs = ["${env:HOME}"]\n', "servers.l.args[0]"),
        ('[servers.l]\ncommand = "tool"\nargs = ["${input:token}"]\n', "servers.l.args[0]"),
        ('[servers.l]\ncommand = "tool"\nenv = { A = "$HOME/x" }\n', "servers.l.env.A"),
        ('[servers.l]\ncommand = "tool"\ncwd = "a$B"\n', "servers.l.cwd"),
        ('[servers.l]\ncommand = "$TOOL"\n', "servers.l.command"),
        ('[hooks.h]\nevent = "Stop"\ncommand = ["sh", "-c", "curl $URL"]\n', "hooks.h.command[2]"),
        ('[hooks.h]\nevent = "Stop"\ncommand = ["x"]\nmatcher = "${M}"\n', "hooks.h.matcher"),
        ('[settings.permissions]\nallow = ["Bash(echo ${SECRET})"]\n',
         "settings.permissions.allow[0]"),
        ('[settings.passthrough.gemini-cli]\nmodel = { name = "$GEMINI_MODEL" }\n',
         "settings.passthrough"),
    ],
)
def test_every_expansion_syntax_in_every_rendered_string_is_refused(
    tmp_path: Path, snippet: str, field: str
) -> None:
    project = make_project(tmp_path / "p", '[project]\nname = "p"\n\n' + snippet)
    result = run_cli("lock", cwd=project)
    assert result.returncode == 2, result.stderr
    assert f"{field}:" in result.stderr, result.stderr
    assert "would expand" in result.stderr
    assert not (project / "agentstack.lock").exists()


def test_a_dollar_that_expands_nothing_is_kept(tmp_path: Path) -> None:
    manifest = (
        '[project]\nname = "p"\n\n[hooks.h]\nevent = "PreToolUse"\nmatcher = "^Edit$"\n'
        'command = ["printf", "costs 5$ or 5 $"]\n'
    )
    project = make_project(tmp_path / "p", manifest)
    assert run_cli("lock", cwd=project).returncode == 0


def test_the_lock_fast_path_leaves_odd_project_values_to_the_command_table(
    tmp_path: Path,
) -> None:
    from agentstack.entry import _fast_lock

    (tmp_path / "file").write_text("x")
    assert _fast_lock(["--project", str(tmp_path), "lock"]) is not None
    assert _fast_lock(["--project", "-h", "lock"]) is None  # the table: the help
    assert _fast_lock(["--project", str(tmp_path / "file"), "lock"]) is None  # "not a directory"
    assert _fast_lock(["--project", str(tmp_path / "missing"), "lock"]) is None

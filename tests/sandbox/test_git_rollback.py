"""What git runs later is not left writable by a session: after `run`, nothing the session planted
in git's execution state runs in the user's next `git status`, `git commit` or `git pull` (the
real git, unconfined, as the user runs it).

Reproduced first on the landed code: `run` only warned, and the planted `core.fsmonitor` ran in
the next `git status`. The session plants, in one confined command: a `core.fsmonitor` in
`.git/config`, hooks (`pre-commit`, `post-merge`, `post-checkout`, `reference-transaction`), a
`.git/commondir` to a directory with its own config and hooks, `.git/info/attributes` with a
filter the config defines, and a gitlink in the index to a nested repository whose own config
has a `core.fsmonitor`. Each marker is a file outside the workdir that the planted command would
create. The control runs the same plant unconfined and shows git running it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import git, make_project, run_cli
from tests.sandbox.test_confinement import MANIFEST, _explicit, var_home  # noqa: F401 - a fixture

PLANT = r"""
set -e
M="$1"
git config core.fsmonitor "touch $M/fsmonitor; false"
git config filter.evil.clean "touch $M/filter; cat"
mkdir -p .git/hooks .git/info
for hook in pre-commit post-merge post-checkout reference-transaction pre-auto-gc; do
  printf '#!/bin/sh\ntouch %s/hook-%s\n' "$M" "$hook" > .git/hooks/$hook
  chmod +x .git/hooks/$hook
done
echo '* filter=evil' > .git/info/attributes
mkdir -p evil/hooks
printf '[core]\n\trepositoryformatversion = 0\n\tfsmonitor = "touch %s/commondir; false"\n' "$M" \
  > evil/config
git init -q sub
git -C sub config core.fsmonitor "touch $M/sub-fsmonitor; false"
git -C sub -c user.name=x -c user.email=x@x commit -q --allow-empty -m sub
git update-index --add --cacheinfo 160000,$(git -C sub rev-parse HEAD),sub
"""


def _git_env() -> dict[str, str]:
    return dict(os.environ, GIT_AUTHOR_NAME="u", GIT_AUTHOR_EMAIL="u@example.invalid",
                GIT_COMMITTER_NAME="u", GIT_COMMITTER_EMAIL="u@example.invalid")


def _user_runs_git(root: Path) -> None:
    """What the user does next, outside the sandbox."""
    env = _git_env()
    for argv in (["git", "status"], ["git", "add", "-A"],
                 ["git", "commit", "-q", "--allow-empty", "-m", "after the session"],
                 ["git", "pull", "-q", "--no-rebase", "origin", "main"]):
        subprocess.run(argv, cwd=root, env=env, capture_output=True, timeout=120)


def _repository(base: Path) -> tuple[Path, Path]:
    remote = base / "remote.git"
    seed = base / "seed"
    git("init", "-q", "-b", "main", str(seed), cwd=base)
    (seed / "README.md").write_text("hello\n")
    git("add", "README.md", cwd=seed)
    git("commit", "-q", "-m", "first", cwd=seed)
    git("clone", "-q", "--bare", str(seed), str(remote), cwd=base)
    root = base / "demo"
    git("clone", "-q", remote.as_uri(), str(root), cwd=base)
    # Something for the pull to bring in (post-merge runs on a merge).
    (seed / "NEW.md").write_text("new\n")
    git("add", "NEW.md", cwd=seed)
    git("commit", "-q", "-m", "second", cwd=seed)
    git("push", "-q", str(remote), "main", cwd=seed)
    make_project(root, MANIFEST)
    return root, remote


@pytest.mark.slow
def test_nothing_planted_runs_in_the_users_next_git(tmp_path: Path, var_home: Path) -> None:  # noqa: F811
    root, _ = _repository(tmp_path)
    markers = var_home / "markers-confined"
    markers.mkdir()
    script = tmp_path / "plant.sh"
    script.write_text(PLANT)
    env = _explicit(root, {"HOME": str(var_home)})
    shutil.copyfile(script, root / "plant.sh")
    done = run_cli("run", "--", "/bin/sh", "plant.sh", str(markers), cwd=root, env=env)
    assert done.returncode == 0, done.stderr
    assert "rolled back the session's changes to what git executes" in done.stderr
    assert ".git/config (restored)" in done.stderr and ".git/index (restored)" in done.stderr
    # The commondir variant, planted on its own (it redirects where git finds config and hooks).
    done = run_cli("run", "--", "/bin/sh", "-c", "echo ../evil > .git/commondir", cwd=root,
                   env=env)
    assert ".git/commondir (removed)" in done.stderr, done.stderr
    assert not (root / ".git" / "commondir").exists()
    assert not (root / "sub" / ".git" / "config").exists()
    _user_runs_git(root)
    assert sorted(os.listdir(markers)) == []
    log = git("log", "--format=%s", cwd=root)
    assert "after the session" in log  # the user's own git still works


@pytest.mark.slow
def test_the_control_planted_unconfined_runs(tmp_path: Path, var_home: Path) -> None:  # noqa: F811
    """Without `run`'s roll-back, the same plant runs in the user's next git: the test above
    can fail."""
    root, _ = _repository(tmp_path)
    markers = var_home / "markers-control"
    markers.mkdir()
    subprocess.run(["/bin/sh", "-c", PLANT, "plant", str(markers)], cwd=root, check=True,
                   env=_git_env(), capture_output=True)
    _user_runs_git(root)
    ran = set(os.listdir(markers))
    assert {"fsmonitor", "sub-fsmonitor", "hook-pre-commit", "hook-post-merge"} <= ran, ran


@pytest.mark.slow
def test_a_planted_link_is_removed_never_followed(tmp_path: Path, var_home: Path) -> None:  # noqa: F811
    """The session replaces .git/hooks with a link to a directory outside the workdir (that the
    user can write): restoring the hooks must not write through it."""
    root, _ = _repository(tmp_path)
    outside = var_home / "not-hooks"
    outside.mkdir()
    env = _explicit(root, {"HOME": str(var_home)})
    hooks = sorted(os.listdir(root / ".git" / "hooks"))
    assert hooks  # git's sample hooks: restored from the copy taken before the session
    done = run_cli("run", "--", "/bin/sh", "-c",
                   f"rm -rf .git/hooks && ln -s {outside} .git/hooks", cwd=root, env=env)
    assert done.returncode == 0, done.stderr
    assert ".git/hooks (removed)" in done.stderr
    assert os.listdir(outside) == []
    assert not (root / ".git" / "hooks").is_symlink()
    assert sorted(os.listdir(root / ".git" / "hooks")) == hooks

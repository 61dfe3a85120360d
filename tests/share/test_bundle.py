"""share -> receive -> release between two AGENTSTACK_HOMEs, through the command line."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import unicodedata
from pathlib import Path

import blake3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentstack.share.archive as archive
import agentstack.share.bundle as bundle
from agentstack.trust.store import TrustLog
from tests.conftest import copy_example, run_cli
from tests.harness.deadline import scaled
from tests.share.bundle_corpus import make_locked_project

SSH_KEYGEN = shutil.which("ssh-keygen")


def _in_process(
    args: tuple[str, ...], cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """The command run in this process (much faster than a new interpreter), with the exit code
    and messages `agentstack.entry.run` would give."""
    from tests.conftest import run_cli_in_process

    return run_cli_in_process(*args, cwd=cwd, env=env)


class Homes:
    """Two users on one machine: their own HOME, AGENTSTACK_HOME and cache."""

    def __init__(self, base: Path, *, subprocesses: bool = False) -> None:
        self.subprocesses = subprocesses
        self.env = {}
        for who in ("alice", "bob"):
            home = base / who
            home.mkdir(parents=True)
            self.env[who] = {
                "HOME": str(home),
                "AGENTSTACK_HOME": str(home / "state"),
                "AGENTSTACK_CACHE": str(home / "cache"),
                "XDG_CONFIG_HOME": str(home / ".config"),
                "XDG_CACHE_HOME": str(home / ".cache"),
            }

    def run(
        self, who: str, *args: str, cwd: Path, ok: bool = True
    ) -> subprocess.CompletedProcess[str]:
        if self.subprocesses:
            result = run_cli(*args, cwd=cwd, env=self.env[who])
        else:
            result = _in_process(args, cwd, self.env[who])
        if ok:
            assert result.returncode == 0, f"{args}: {result.stderr}"
        return result

    def state(self, who: str) -> Path:
        return Path(self.env[who]["AGENTSTACK_HOME"])


@pytest.fixture
def homes(tmp_path: Path) -> Homes:
    return Homes(tmp_path / "users")


def _full_example(tmp_path: Path, homes: Homes) -> tuple[Path, Path]:
    """examples/full with its git-sourced skill, locked and trusted by alice."""
    project = copy_example("full", tmp_path)
    repo = tmp_path / "skill-repo"
    subprocess.run(
        ["sh", str(project / "make-skill-repo.sh"), str(repo)],
        check=True,
        capture_output=True,
        cwd=project,
    )
    homes.run("alice", "lock", cwd=project)
    homes.run("alice", "trust", "--yes", "--accept-risk", cwd=project)
    return project, repo


def test_round_trip_with_git_source_and_no_network(tmp_path: Path) -> None:
    # Real processes, as a user runs them (the other tests run the commands in-process).
    homes = Homes(tmp_path / "users", subprocesses=True)
    project, repo = _full_example(tmp_path, homes)
    public = homes.run("alice", "keys", "generate", "alice", cwd=project).stdout.strip()
    out = tmp_path / "full.astack"
    shared = homes.run(
        "alice", "share", "-o", str(out), "--version", "1.0.0", "--json", cwd=project
    )
    sent = json.loads(shared.stdout)
    sender_digest = homes.run("alice", "digest", cwd=project).stdout.strip()
    assert sent["consent"] == sender_digest
    # The git repository disappears: the receiver must need nothing but the bundle.
    shutil.move(repo, tmp_path / "gone")
    homes.run("bob", "keys", "trust", "alice@example.com", public, cwd=tmp_path)
    ident = homes.run("bob", "receive", str(out), cwd=tmp_path).stdout.strip()
    assert len(ident) == 64
    listed = json.loads(homes.run("bob", "quarantine", "list", "--json", cwd=tmp_path).stdout)
    assert listed["quarantine"][0]["state"] == "held"
    assert listed["quarantine"][0]["signer"] == ["alice@example.com"]
    shown = homes.run("bob", "quarantine", "show", ident[:12], cwd=tmp_path, ok=True)
    assert "style-guide" in shown.stdout and sender_digest in shown.stdout
    dest = tmp_path / "bob-project"
    released = homes.run(
        "bob",
        "quarantine",
        "release",
        ident[:12],
        "--into",
        str(dest),
        "--yes",
        "--json",
        cwd=tmp_path,
    )
    assert json.loads(released.stdout)["digest"] == sender_digest
    homes.run("bob", "lock", "--check", cwd=dest)
    assert homes.run("bob", "digest", cwd=dest).stdout.strip() == sender_digest
    assert os.access(dest / "hooks/format-check.sh", os.X_OK)
    # Released without --trust: recorded, but not trusted.
    status = homes.run("bob", "status", "--json", cwd=dest, ok=False)
    assert json.loads(status.stdout)["trust"] == "untrusted"
    actions = [r.action for r in TrustLog(homes.state("bob")).records()]
    assert actions == ["receive", "release"]
    # Bob's apply can render the git-sourced skill from the seeded mirror, still without the repo.
    homes.run("bob", "trust", "--yes", "--accept-risk", cwd=dest)
    homes.run("bob", "apply", "--write", cwd=dest)
    assert "Style guide" in (dest / ".claude/skills/style-guide/SKILL.md").read_text()


def test_release_with_trust_and_into_an_existing_project(tmp_path: Path, homes: Homes) -> None:
    project = make_locked_project(tmp_path / "sender")
    homes.run("alice", "trust", "--yes", "--accept-risk", cwd=project)
    public = homes.run("alice", "keys", "generate", "k", cwd=project).stdout.strip()
    homes.run("bob", "keys", "trust", "alice", public, cwd=tmp_path)
    first = tmp_path / "v1.astack"
    homes.run("alice", "share", "-o", str(first), "--version", "1", cwd=project)
    ident = homes.run("bob", "receive", str(first), cwd=tmp_path).stdout.strip()
    dest = tmp_path / "dest"
    homes.run(
        "bob", "quarantine", "release", ident, "--into", str(dest), "--yes", "--trust", "--accept-risk", cwd=tmp_path
    )
    assert (
        json.loads(homes.run("bob", "status", "--json", cwd=dest, ok=False).stdout)["trust"]
        == "trusted"
    )
    # Version 2 changes an instruction; releasing over the trusted v1 shows the diff.
    (project / "AGENTS.md").write_text("Be careful. Run the tests.\n")
    homes.run("alice", "lock", cwd=project)
    homes.run("alice", "trust", "--yes", "--accept-risk", cwd=project)
    second = tmp_path / "v2.astack"
    homes.run("alice", "share", "-o", str(second), "--version", "2", cwd=project)
    ident2 = homes.run("bob", "receive", str(second), cwd=tmp_path).stdout.strip()
    shown = homes.run("bob", "quarantine", "show", ident2, "--into", str(dest), cwd=tmp_path)
    assert (
        "instructions" in shown.stdout and "Changes against the digest you trusted" in shown.stdout
    )
    refused = homes.run(
        "bob", "quarantine", "release", ident2, "--into", str(dest), "--yes", cwd=tmp_path, ok=False
    )
    assert refused.returncode == 1 and "AGENTS.md" in refused.stderr and "--force" in refused.stderr
    assert (dest / "AGENTS.md").read_text() == "Be careful.\n"
    done = json.loads(
        homes.run(
            "bob",
            "quarantine",
            "release",
            ident2,
            "--into",
            str(dest),
            "--yes",
            "--force",
            "--json",
            cwd=tmp_path,
        ).stdout
    )
    assert (dest / "AGENTS.md").read_text() == "Be careful. Run the tests.\n"
    assert (Path(done["backup"]) / "AGENTS.md").read_text() == "Be careful.\n"
    homes.run("bob", "lock", "--check", cwd=dest)
    # Version 1 again is a rollback now, even though it is the very bundle received before.
    rolled = homes.run("bob", "receive", str(first), cwd=tmp_path, ok=False)
    assert rolled.returncode == 1 and "(rollback)" in rolled.stderr


def test_extra_files_in_a_pinned_tree_block_release(tmp_path: Path, homes: Homes) -> None:
    project = make_locked_project(tmp_path / "sender")
    homes.run("alice", "trust", "--yes", "--accept-risk", cwd=project)
    public = homes.run("alice", "keys", "generate", "k", cwd=project).stdout.strip()
    homes.run("bob", "keys", "trust", "alice", public, cwd=tmp_path)
    out = tmp_path / "b.astack"
    homes.run("alice", "share", "-o", str(out), cwd=project)
    ident = homes.run("bob", "receive", str(out), cwd=tmp_path).stdout.strip()
    dest = tmp_path / "dest"
    (dest / "skills/helper").mkdir(parents=True)
    (dest / "skills/helper/stray.md").write_text("not in the bundle\n")
    refused = homes.run(
        "bob", "quarantine", "release", ident, "--into", str(dest), "--yes", cwd=tmp_path, ok=False
    )
    assert refused.returncode == 1 and "stray.md" in refused.stderr
    homes.run(
        "bob", "quarantine", "release", ident, "--into", str(dest), "--yes", "--force", cwd=tmp_path
    )
    homes.run("bob", "lock", "--check", cwd=dest)


def test_release_never_writes_through_a_symlink(tmp_path: Path, homes: Homes) -> None:
    project = make_locked_project(tmp_path / "sender")
    homes.run("alice", "trust", "--yes", "--accept-risk", cwd=project)
    public = homes.run("alice", "keys", "generate", "k", cwd=project).stdout.strip()
    homes.run("bob", "keys", "trust", "alice", public, cwd=tmp_path)
    out = tmp_path / "b.astack"
    homes.run("alice", "share", "-o", str(out), cwd=project)
    ident = homes.run("bob", "receive", str(out), cwd=tmp_path).stdout.strip()
    dest = tmp_path / "dest"
    outside = tmp_path / "outside"
    outside.mkdir()
    dest.mkdir()
    (dest / "hooks").symlink_to(outside)
    refused = homes.run(
        "bob",
        "quarantine",
        "release",
        ident,
        "--into",
        str(dest),
        "--yes",
        "--force",
        cwd=tmp_path,
        ok=False,
    )
    assert refused.returncode == 1 and "symbolic link" in refused.stderr
    assert list(outside.iterdir()) == []


def test_unknown_signer_needs_the_flag(tmp_path: Path, homes: Homes) -> None:
    project = make_locked_project(tmp_path / "sender")
    homes.run("alice", "trust", "--yes", "--accept-risk", cwd=project)
    homes.run("alice", "keys", "generate", "k", cwd=project)
    out = tmp_path / "b.astack"
    homes.run("alice", "share", "-o", str(out), cwd=project)
    ident = homes.run("bob", "receive", str(out), cwd=tmp_path).stdout.strip()
    assert "UNKNOWN" in homes.run("bob", "quarantine", "show", ident, cwd=tmp_path).stdout
    dest = tmp_path / "dest"
    refused = homes.run(
        "bob", "quarantine", "release", ident, "--into", str(dest), "--yes", cwd=tmp_path, ok=False
    )
    assert refused.returncode == 1 and "--allow-unknown-signer" in refused.stderr
    assert not dest.exists()
    homes.run(
        "bob",
        "quarantine",
        "release",
        ident,
        "--into",
        str(dest),
        "--yes",
        "--allow-unknown-signer",
        cwd=tmp_path,
    )
    homes.run("bob", "lock", "--check", cwd=dest)


def test_share_is_deterministic_and_a_plain_tar_gz(tmp_path: Path, homes: Homes) -> None:
    project = make_locked_project(tmp_path / "sender")
    homes.run("alice", "trust", "--yes", "--accept-risk", cwd=project)
    homes.run("alice", "keys", "generate", "k", cwd=project)
    env = {**homes.env["alice"], "SOURCE_DATE_EPOCH": "1764460800"}
    outputs = []
    for name in ("a.astack", "b.astack"):
        result = run_cli(
            "share", "-o", str(tmp_path / name), "--version", "3", cwd=project, env=env
        )
        assert result.returncode == 0, result.stderr
        outputs.append((tmp_path / name).read_bytes())
    assert outputs[0] == outputs[1]
    with tarfile.open(tmp_path / "a.astack") as stdlib:
        names = stdlib.getnames()
        assert all(m.mtime == 0 and m.uid == 0 and m.isfile() for m in stdlib.getmembers())
    assert names[:2] == ["statement.json", "statement.sig"]
    assert "files/skills/helper/run.sh" in names and "files/agentstack.lock" in names


def test_share_refuses_a_stale_lock_and_an_untrusted_digest(tmp_path: Path, homes: Homes) -> None:
    project = make_locked_project(tmp_path / "sender")
    homes.run("alice", "keys", "generate", "k", cwd=project)
    out = tmp_path / "b.astack"
    untrusted = homes.run("alice", "share", "-o", str(out), cwd=project, ok=False)
    assert untrusted.returncode == 1 and "not trusted" in untrusted.stderr
    homes.run("alice", "trust", "--yes", "--accept-risk", cwd=project)
    (project / "AGENTS.md").write_text("changed\n")
    stale = homes.run("alice", "share", "-o", str(out), cwd=project, ok=False)
    assert stale.returncode == 1 and "stale" in stale.stderr
    assert not out.exists()


@pytest.mark.skipif(SSH_KEYGEN is None and os.environ.get("CI") != "true", reason="no ssh-keygen")
def test_inspect_statement_verifies_with_ssh_keygen(tmp_path: Path, homes: Homes) -> None:
    project = make_locked_project(tmp_path / "sender")
    homes.run("alice", "trust", "--yes", "--accept-risk", cwd=project)
    public = homes.run("alice", "keys", "generate", "k", cwd=project).stdout.strip()
    out = tmp_path / "b.astack"
    homes.run("alice", "share", "-o", str(out), "--expires", "7d", cwd=project)
    statement = tmp_path / "statement"
    shown = homes.run(
        "bob", "inspect", str(out), "--statement", str(statement), "--json", cwd=tmp_path
    )
    report = json.loads(shown.stdout)
    assert report["signer"] == [] and report["validity"] == "valid"
    assert not (homes.state("bob") / "quarantine").exists()  # inspect extracts nothing
    signers = tmp_path / "allowed_signers"
    signers.write_text(f'alice namespaces="agentstack-bundle" {public}\n')
    assert SSH_KEYGEN is not None
    verified = subprocess.run(
        [SSH_KEYGEN, "-Y", "verify", "-n", "agentstack-bundle", "-f", str(signers), "-I", "alice",
         "-s", f"{statement}.sig"],
        input=statement.read_bytes(), capture_output=True, check=False,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stderr
    doc = json.loads(statement.read_bytes())
    assert doc["consent"] == homes.run("alice", "digest", cwd=project).stdout.strip()
    # The statement signs the member manifest by its blake3: the chain ssh-keygen -> statement
    # -> members.jsonl -> every member checks with ordinary tools.
    with tarfile.open(out) as tar:
        listed = tar.extractfile("members.jsonl")
        assert listed is not None
        manifest = listed.read()
    assert doc["manifest"]["blake3"] == "b3:" + blake3.blake3(manifest).hexdigest()
    paths = {json.loads(line)["path"] for line in manifest.splitlines()}
    assert paths >= {"files/agentstack.toml", "files/AGENTS.md"}
    assert doc["manifest"]["members"] == len(paths)


def test_share_with_an_ssh_keygen_key(tmp_path: Path, homes: Homes) -> None:
    if SSH_KEYGEN is None:
        pytest.skip("no ssh-keygen")
    project = make_locked_project(tmp_path / "sender")
    homes.run("alice", "trust", "--yes", "--accept-risk", cwd=project)
    key = tmp_path / "id_ed25519"
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    out = tmp_path / "b.astack"
    homes.run("alice", "share", "-o", str(out), "--ssh-key", str(key), cwd=project)
    homes.run("bob", "keys", "trust", "alice", str(key) + ".pub", cwd=tmp_path)
    received = json.loads(homes.run("bob", "receive", str(out), "--json", cwd=tmp_path).stdout)
    assert received["signer"] == ["alice"] and received["state"] == "held"
    encrypted = tmp_path / "enc"
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "secret", "-f", str(encrypted)], check=True
    )
    refused = homes.run(
        "alice", "share", "-o", str(out), "--ssh-key", str(encrypted), cwd=project, ok=False
    )
    assert refused.returncode == 2 and "encrypted" in refused.stderr


def test_pinned_files_walks_any_lock_section() -> None:
    lock = {
        "version": 1,
        "manifest": "b3:" + "0" * 64,
        "instructions": [
            {"path": "A.md", "kind": "file", "executable": False, "size": 1, "digest": "b3:1"}
        ],
        "code_roots": {
            "tools": {
                "source": "path",
                "path": "tools",
                "digest": "b3:2",
                "files": [
                    {
                        "path": "bin/run",
                        "kind": "file",
                        "executable": True,
                        "size": 2,
                        "digest": "b3:3",
                    }
                ],
            },
            "vendored": {
                "source": "git",
                "git": "file:///x",
                "commit": "a" * 40,
                "git_tree": "b" * 40,
                "subdir": "lib",
                "digest": "b3:4",
                "files": [
                    {
                        "path": "x.py",
                        "kind": "file",
                        "executable": False,
                        "size": 3,
                        "digest": "b3:5",
                    }
                ],
            },
        },
    }
    found = {(p.rel, p.git.url if p.git else None) for p in bundle.pinned_files(lock)}
    assert found == {("A.md", None), ("tools/bin/run", None), ("x.py", "file:///x")}
    assert bundle.local_roots(lock) == ["tools"]


_SEGMENT = st.text(alphabet=st.sampled_from("abcXYZ019._-éß日"), min_size=1, max_size=60).filter(
    lambda s: s not in (".", "..") and unicodedata.normalize("NFC", s) == s
)
_PATHS = st.lists(_SEGMENT, min_size=1, max_size=6).map(lambda parts: "files/" + "/".join(parts))


@settings(max_examples=60, deadline=None)
@given(
    entries=st.dictionaries(
        _PATHS, st.tuples(st.binary(max_size=2000), st.booleans()), min_size=1, max_size=8
    )
)
def test_archive_round_trips_through_the_strict_reader(
    entries: dict[str, tuple[bytes, bool]],
) -> None:
    members = [(p, d, x) for p, (d, x) in sorted(entries.items())]
    data = archive.write_archive(members)
    assert archive.write_archive(members) == data  # deterministic
    reader = archive.TarReader(archive.Inflater(io.BytesIO(data), 1 << 30))
    read = []
    while (item := reader.next()) is not None:
        read.append((item.path, reader.read_all(), item.executable))
    reader.src.finish()
    assert read == members
    # The standard library reads the same archive (long names through pax).
    with tarfile.open(fileobj=io.BytesIO(data)) as stdlib:
        assert [(m.name, bool(m.mode & 0o100)) for m in stdlib.getmembers()] == [
            (p, x) for p, _, x in members
        ]


@settings(max_examples=60, deadline=None)
@given(
    name=st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True),
    version=st.from_regex(r"[0-9]{1,4}(\.[0-9]{1,4}){0,3}", fullmatch=True),
    paths=st.sets(_PATHS, max_size=5),
    size=st.integers(min_value=0, max_value=1 << 20),
)
def test_statement_canonical_form_round_trips(
    name: str, version: str, paths: set[str], size: int
) -> None:
    members = tuple(
        bundle.Member(path=p, size=size, blake3="b3:" + "a" * 64, executable=bool(i % 2))
        for i, p in enumerate(sorted(paths, key=lambda p: p.encode()))
    )
    keys = {bundle._collision_key(p) for p in paths}
    statement = bundle.Statement(
        name=name, version=version, created="2026-01-01T00:00:00Z", expires="2026-02-01T00:00:00Z",
        consent="b3:" + "1" * 64, lock="b3:" + "2" * 64, members=members, format=1,
    )  # fmt: skip
    encoded = statement.encode()
    if len(keys) < len(paths) or _has_prefix(paths):
        with pytest.raises(archive.BundleRejected):
            bundle.parse_statement(encoded)
        return
    assert bundle.parse_statement(encoded) == statement
    # Any other spelling of the same document is refused: only the signed bytes count.
    respelled = json.dumps(statement.to_json(), sort_keys=True, indent=1).encode()
    with pytest.raises(archive.BundleRejected):
        bundle.parse_statement(respelled)


def _has_prefix(paths: set[str]) -> bool:
    keys = {bundle._collision_key(p) for p in paths}
    return any(
        "/".join(bundle._collision_key(p).split("/")[:d]) in keys
        for p in paths
        for d in range(1, p.count("/") + 1)
    )


def test_version_order() -> None:
    assert bundle.version_key("1.10") > bundle.version_key("1.9")
    assert bundle.version_key("2") == bundle.version_key("2.0.0")
    assert bundle.version_key("2026.1130.170000") > bundle.version_key("2026.0930.235959")


def test_an_in_tree_symlink_travels_as_a_link(tmp_path: Path, homes: Homes) -> None:
    project = make_locked_project(tmp_path / "sender")
    (project / "skills/helper/alias.md").symlink_to("SKILL.md")
    homes.run("alice", "lock", cwd=project)
    homes.run("alice", "trust", "--yes", "--accept-risk", cwd=project)
    public = homes.run("alice", "keys", "generate", "k", cwd=project).stdout.strip()
    homes.run("bob", "keys", "trust", "alice", public, cwd=tmp_path)
    out = tmp_path / "b.astack"
    homes.run("alice", "share", "-o", str(out), cwd=project)
    ident = homes.run("bob", "receive", str(out), cwd=tmp_path).stdout.strip()
    # In quarantine the link is a plain file holding its target: nothing there resolves.
    held = homes.state("bob") / "quarantine" / ident / "files/skills/helper/alias.md"
    assert not held.is_symlink() and held.read_bytes() == b"SKILL.md"
    dest = tmp_path / "dest"
    homes.run("bob", "quarantine", "release", ident, "--into", str(dest), "--yes", cwd=tmp_path)
    assert os.readlink(dest / "skills/helper/alias.md") == "SKILL.md"
    homes.run("bob", "lock", "--check", cwd=dest)


def test_release_asks_on_a_terminal_and_no_writes_nothing(tmp_path: Path, homes: Homes) -> None:
    import pty
    import select
    import sys
    import time

    from tests.conftest import REPO

    project = make_locked_project(tmp_path / "sender")
    homes.run("alice", "trust", "--yes", "--accept-risk", cwd=project)
    public = homes.run("alice", "keys", "generate", "k", cwd=project).stdout.strip()
    homes.run("bob", "keys", "trust", "alice", public, cwd=tmp_path)
    out = tmp_path / "b.astack"
    homes.run("alice", "share", "-o", str(out), cwd=project)
    ident = homes.run("bob", "receive", str(out), cwd=tmp_path).stdout.strip()
    dest = tmp_path / "dest"

    def release_on_tty(answer: bytes) -> tuple[int, str]:
        master, slave = pty.openpty()
        env = dict(os.environ, **homes.env["bob"], PYTHONPATH=str(REPO), COLUMNS="120")
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentstack", "quarantine", "release", ident, "--into", str(dest)],
            cwd=tmp_path, stdin=slave, stdout=slave, stderr=slave, env=env,
        )  # fmt: skip
        os.close(slave)
        output, answered = b"", False
        deadline = time.monotonic() + scaled(60)
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                output += chunk
                if not answered and b"[y/N]" in output:
                    os.write(master, answer)
                    answered = True
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=scaled(30))
        os.close(master)
        return code, output.decode(errors="replace")

    code, output = release_on_tty(b"n\n")
    assert code == 1 and "declined" in output and "consent digest" in output
    assert not dest.exists()
    code, output = release_on_tty(b"y\n")
    assert code == 0, output
    homes.run("bob", "lock", "--check", cwd=dest)


def test_the_boundary_in_force_is_reported_and_enforced_on_release(
    tmp_path: Path, homes: Homes
) -> None:
    project = make_locked_project(tmp_path / "sender")
    homes.run("alice", "trust", "--yes", "--accept-risk", cwd=project)
    public = homes.run("alice", "keys", "generate", "k", cwd=project).stdout.strip()
    homes.run("bob", "keys", "trust", "alice", public, cwd=tmp_path)
    bundle_file = tmp_path / "v1.astack"
    homes.run("alice", "share", "-o", str(bundle_file), "--version", "1", cwd=project)
    # Bob's boundary permits projects under ~/Code only, and nothing else.
    homes.state("bob").mkdir(parents=True, exist_ok=True)
    (homes.state("bob") / "boundary.toml").write_text('[filesystem]\nwrite = ["~/Code"]\n')
    received = homes.run("bob", "receive", str(bundle_file), "--json", cwd=tmp_path)
    report = json.loads(received.stdout)["boundary"]
    assert report["result"] == "exceeds_boundary"  # its server runs a program not permitted
    ident = json.loads(received.stdout)["bundle"]
    outside = tmp_path / "elsewhere"
    shown = json.loads(
        homes.run("bob", "quarantine", "show", ident, "--into", str(outside), "--json",
                  cwd=tmp_path).stdout
    )
    assert any(v["counterexample"] == f"filesystem write {outside.resolve()}"
               for v in shown["boundary"]["violations"])
    refused = homes.run("bob", "quarantine", "release", ident, "--into", str(outside), "--yes",
                        "--trust", "--accept-risk", cwd=tmp_path, ok=False)
    assert refused.returncode == 1 and "not within the boundary" in refused.stderr
    assert not outside.exists()  # refused before anything was written

"""The third plane: `apply --write` renders the trusted `[sandbox]` into Claude Code's and Codex's
own sandboxes, and the real harness, started directly (not through `run`), is confined by it.

Each harness test drives the real binary offline against the mock model: the model asks for one
shell command that reads a decoy `~/.ssh/id_ed25519` (in a HOME outside /tmp, as the confinement
suite places its decoys), writes a file outside the workdir and one inside it. Only the native
plane is in play: the guard hook is taken out of what the harness loads (it is a plane of its own,
tested elsewhere), so nothing but the harness's sandbox stands between the command and the decoy.
An unconfined control (the same command, no native sandbox) shows each assertion can fail.

Measured errors (bubblewrap, not Landlock): Claude Code's denied read is ENOENT (an empty mount
over the denied directory), Codex's is EACCES; a write outside the workdir is EROFS in both.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentstack.manifest.load import load_manifest
from agentstack.sandbox import native
from agentstack.sandbox.policy import Deny, Grant, SandboxPolicy
from tests.conftest import make_project, run_cli_in_process
from tests.support.cli import REPO
from tests.support.project import manifest

GOLDEN = REPO / "tests" / "golden" / "native"
REGENERATE = os.environ.get("AGENTSTACK_REGENERATE_GOLDEN") == "1"
DECOY = "DECOY-KEY-native-plane\n"

MANIFEST = str(manifest("native", "claude-code", "codex")
               .table("settings", "permissions", allow=["Bash(*)"]).sandbox(write_dirs=["."]))


@pytest.fixture
def var_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """HOME (and agentstack's state) outside /tmp, with a decoy key that exists."""
    base = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="agentstack-native-home-")).resolve()
    (base / ".ssh").mkdir()
    (base / ".ssh" / "id_ed25519").write_text(DECOY)
    for name, value in {"HOME": base, "XDG_CONFIG_HOME": base / ".config",
                        "XDG_CACHE_HOME": base / ".cache",
                        "AGENTSTACK_HOME": base / ".config" / "agentstack",
                        "AGENTSTACK_CACHE": base / ".cache" / "agentstack",
                        "GIT_CONFIG_GLOBAL": base / ".gitconfig"}.items():
        monkeypatch.setenv(name, str(value))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _applied(home: Path) -> Path:
    root = make_project(home / "proj", MANIFEST)
    assert run_cli_in_process("lock", cwd=root).returncode == 0
    trusted = run_cli_in_process("trust", "--yes", "--accept-risk", cwd=root)
    assert trusted.returncode == 0, trusted.stderr
    applied = run_cli_in_process("apply", "--write", cwd=root)
    assert applied.returncode == 0, applied.stderr
    return root


def _command(home: Path) -> str:
    return (f"cat {home}/.ssh/id_ed25519; echo read=$?; touch {home}/outside.txt; "
            "echo outside=$?; touch inside.txt; echo inside=$?")


# The kernel's own answer to lifting each barrier (confined runs only: unconfined, as root, the
# remount would really change this machine's root mount). bubblewrap's denials are file-system
# errors (ENOENT: an empty mount over the denied directory; EROFS: a read-only bind mount, which
# the VFS checks before any permission), so what proves the barrier holds is that the sandboxed
# process cannot take the mount away: umount2() of the mask over ~/.ssh and a read-write remount
# of / are refused with EPERM (no CAP_SYS_ADMIN over the sandbox's mount namespace, checked
# before anything else in the kernel's mount paths).
LIFT = ("import ctypes,errno,sys;c=ctypes.CDLL(None,use_errno=True);"
        "r=c.umount2(sys.argv[1].encode(),2);e=ctypes.get_errno();"
        "print('unmask='+('ok' if r==0 else errno.errorcode[e]));"
        "r=c.mount(None,b'/',None,32|4096,None);e=ctypes.get_errno();"
        "print('remount='+('ok' if r==0 else errno.errorcode[e]))")


def _confined_command(home: Path) -> str:
    return f'{_command(home)}; /usr/bin/python3 -I -c "{LIFT}" {home}/.ssh'


def _assert_barriers_hold(out: str) -> None:
    assert "unmask=EPERM" in out and "remount=EPERM" in out, out


def _outputs(model: object) -> str:
    return "\n".join(str(getattr(r, "text", r)) for r in model.tool_results)  # type: ignore[attr-defined]


# ------------------------------------------------------------------ rendering (no binary)


def test_apply_renders_owned_guarded_native_keys(var_home: Path) -> None:
    root = _applied(var_home)
    settings = json.loads((root / ".claude" / "settings.local.json").read_text())
    sandbox = settings["sandbox"]
    assert sandbox["enabled"] and sandbox["failIfUnavailable"]
    assert sandbox["allowUnsandboxedCommands"] is False
    assert str(var_home / ".ssh") in sandbox["filesystem"]["denyRead"]
    # Codex's profile is not written by apply (its sandbox runs the guard hook, and its
    # synthetic mount targets look like drift there): `why --native` says so.
    codex_config = root / ".codex" / "config.toml"
    assert not codex_config.exists() or "default_permissions" not in codex_config.read_text()
    why = run_cli_in_process("why", "--harness", "codex", "--native", "--json", cwd=root)
    findings = json.loads(why.stdout)["native"]["findings"]
    assert findings[0]["what"] == "not written by apply"
    # Owned and watched like the servers: a changed native key is drift `status` reports.
    settings["sandbox"]["enabled"] = False
    (root / ".claude" / "settings.local.json").write_text(json.dumps(settings))
    status = run_cli_in_process("status", "--json", cwd=root)
    assert status.returncode != 0 or "settings.local.json" in status.stdout
    assert "settings.local.json" in status.stdout


def test_why_native_shows_what_was_given_and_what_it_cannot_express(var_home: Path) -> None:
    root = make_project(var_home / "proj", MANIFEST.replace(
        'write_dirs = ["."]',
        'write_dirs = ["."]\nnetwork = { localhost_ports = [8080] }\n'))
    for harness in ("claude-code", "codex"):
        result = run_cli_in_process("why", "--harness", harness, "--native", "--json", cwd=root)
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout)
        assert out["native"]["harness"] == harness
        kinds = {(f["kind"], f["what"]) for f in out["native"]["findings"]}
        assert ("widened", "reads (deny by default)") in kinds
        assert ("dropped", "sandbox.network.localhost_ports") in kinds
    text = run_cli_in_process("why", "--harness", "codex", "--native", cwd=root)
    shown = text.stdout + text.stderr
    assert "permissions.agentstack.filesystem" in shown and "widened" in shown
    assert "not rendered (agentstack apply --write)" in shown
    none = run_cli_in_process("why", "--harness", "claude-code", "--native", "--path", "x",
                              cwd=root)
    assert none.returncode == 2


def _fixed_policy(home: str, root: str) -> SandboxPolicy:
    return SandboxPolicy(
        workdir=root, home=home, agentstack_home=f"{home}/.config/agentstack", harness=None,
        grants=(Grant(root, "rw", source="workdir"), Grant("/usr", "ro", source="system"),
                Grant(f"{home}/shared", "rw", source="sandbox.write_dirs[0]"),
                Grant(f"{home}/docs", "ro", source="sandbox.read_dirs[0]")),
        denies=(Deny(f"{home}/.config/agentstack", "agentstack-home"),
                Deny(f"{home}/.ssh", "nono:deny_credentials"),
                Deny(f"{home}/.codex", "harness-home"),
                Deny(f"{home}/.codex/auth.json", "credentials"),
                Deny(f"{home}/.docker", "credentials"),
                Deny(f"{home}/.docker/config.json", "credentials")),
        network_block=True, localhost_ports=(8080,), allow_domains=("api.example.com",),
    )


@pytest.mark.parametrize("platform", native.PLATFORMS)
@pytest.mark.parametrize("harness", native.NATIVE_HARNESSES)
def test_native_rendering_goldens(harness: str, platform: str) -> None:
    """The rendered keys and findings for a fixed policy, per platform (macOS: Seatbelt, the
    same keys; not verified on a Mac here)."""
    home = "/Users/me" if platform == "darwin" else "/home/me"
    rendered = native.render(_fixed_policy(home, f"{home}/proj"), harness, platform,
                             check_paths=False)
    assert rendered is not None
    text = json.dumps(rendered.to_json(), indent=2, sort_keys=True) + "\n"
    golden = GOLDEN / f"{harness}-{platform}.json"
    if REGENERATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden}; AGENTSTACK_REGENERATE_GOLDEN=1"
    assert text == golden.read_text()
    keys = rendered.to_json()["keys"]
    if harness == "codex":
        filesystem = keys["permissions"]["agentstack"]["filesystem"]
        assert f"{home}/.docker/config.json" not in filesystem  # inside a mask: one mount
        assert f"{home}/.codex" not in filesystem and filesystem[f"{home}/.codex/auth.json"] == "none"
        assert filesystem[f"{home}/shared"] == "write"
    else:
        assert f"{home}/.docker" in keys["sandbox"]["filesystem"]["denyRead"]


# ------------------------------------------------------------------ the real harnesses


@pytest.mark.slow
def test_claude_codes_own_sandbox_confines_a_directly_started_session(var_home: Path) -> None:
    from tests.harness.drive import run_claude
    from tests.harness.mock_model import MockModel, ToolCall

    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed (.ci/run installs it)")
    root = _applied(var_home)
    settings_path = root / ".claude" / "settings.local.json"
    rendered = json.loads(settings_path.read_text())
    assert "sandbox" in rendered
    rendered.pop("hooks", None)  # only this plane: the guard is tested on its own
    settings_path.write_text(json.dumps(rendered))
    with MockModel([ToolCall("Bash", {"command": _confined_command(var_home)})]) as model:
        run = run_claude(root, var_home, model, "go")
    out = _outputs(model)
    assert run.proc.returncode == 0, run.output
    assert "read=1" in out and "outside=1" in out and "inside=0" in out, out
    assert "No such file or directory" in out and "Read-only file system" in out, out
    _assert_barriers_hold(out)
    assert "DECOY-KEY" not in out and "DECOY-KEY" not in run.output
    assert all("DECOY-KEY" not in json.dumps(r.body) for r in model.requests)  # type: ignore[attr-defined]
    assert not (var_home / "outside.txt").exists()
    assert (root / "inside.txt").exists()

    # The control: without the rendered sandbox the same command reads the decoy.
    rendered.pop("sandbox")
    settings_path.write_text(json.dumps(rendered))
    with MockModel([ToolCall("Bash", {"command": _command(var_home)})]) as model:
        run_claude(root, var_home, model, "go")
    assert "DECOY-KEY" in _outputs(model) and (var_home / "outside.txt").exists()


@pytest.mark.slow
def test_codexs_own_sandbox_confines_a_directly_started_session(var_home: Path) -> None:
    from tests.harness.drive import codex_setup, run_codex
    from tests.harness.mock_model import MockModel, ToolCall

    root = _applied(var_home)
    # The profile `why --native` shows (apply does not write it yet: see native.NOT_APPLIED),
    # given to Codex in the project's config as apply would.
    from agentstack.manifest.load import load_manifest

    policy = native.native_policy(load_manifest(root).sandbox, root)
    rendered = native.render(policy, "codex")
    assert rendered is not None
    config_path = root / ".codex" / "config.toml"
    lines = [f'default_permissions = "{native.CODEX_PROFILE}"', "",
             f"[permissions.{native.CODEX_PROFILE}.filesystem]"]
    for key, access in rendered.keys.items():
        if key[0] == "permissions":
            lines.append(f"{json.dumps(key[-1])} = {json.dumps(access)}")
    existing = config_path.read_text() if config_path.exists() else ""
    config_path.parent.mkdir(exist_ok=True)
    config_path.write_text("\n".join(lines) + "\n\n" + existing)
    state = var_home / ".config" / "agentstack"
    assert any(state.iterdir())  # the trust log and the guard's snapshot
    probe = f"ls {state}; echo state=$?; {_confined_command(var_home)}"
    with MockModel([ToolCall("Bash", {"command": probe})]) as model:
        # The user's own config: the mock provider, the project trusted, and the user's most
        # permissive choice; the project's rendered profile must win over it. (It replaces the
        # user-level hook trust apply wrote, so the guard hook is skipped: only this plane.)
        codex_setup(root, var_home, model, sandbox_mode="danger-full-access")
        run = run_codex(root, var_home, "go")
    out = _outputs(model)
    assert run.proc.returncode == 0, run.output
    assert "read=1" in out and "outside=1" in out and "inside=0" in out, out
    assert "Permission denied" in out and "Read-only file system" in out, out
    assert "state=2" in out, out  # agentstack's state masked for the shell (not for the hooks)
    _assert_barriers_hold(out)
    assert "DECOY-KEY" not in out
    assert not (var_home / "outside.txt").exists()
    assert (root / "inside.txt").exists()

    # The control: the project config without the profile, and the decoy is read.
    (root / ".codex" / "config.toml").write_text("")
    with MockModel([ToolCall("Bash", {"command": _command(var_home)})]) as model:
        codex_setup(root, var_home, model, sandbox_mode="danger-full-access")
        run_codex(root, var_home, "go")
    assert "DECOY-KEY" in _outputs(model) and (var_home / "outside.txt").exists()


def test_a_missing_grant_is_a_finding_not_an_apply_failure(var_home: Path) -> None:
    from agentstack.manifest.model import Sandbox

    root = var_home / "proj"
    root.mkdir()
    policy = native.native_policy(Sandbox.model_validate({"write_dirs": ["~/later"]}), root)
    rendered = native.render(policy, "codex")
    assert rendered is not None
    assert str(var_home / "later") not in rendered.document()["permissions"]["agentstack"][
        "filesystem"]
    assert ("dropped", "sandbox.write_dirs[0]") in {(f.kind, f.what) for f in rendered.findings}


def test_the_unmask_probe_sees_the_kernel_allow_it_unconfined(var_home: Path) -> None:
    """The control for `unmask=EPERM`: outside any sandbox, as root, the same umount2() call is
    let through the capability check and fails only because ~/.ssh is no mount point (EINVAL)."""
    import subprocess

    from tests.harness.deadline import scaled

    if os.geteuid() != 0:
        pytest.skip("needs root: as a user umount2 is refused with EPERM everywhere")
    unmask = LIFT.split(";r=c.mount")[0]
    done = subprocess.run(["/usr/bin/python3", "-I", "-c", unmask, str(var_home / ".ssh")],
                          capture_output=True, text=True, check=False, timeout=scaled(60))
    assert done.stdout.strip() == "unmask=EINVAL", done


@pytest.mark.slow
def test_codex_runs_hooks_outside_its_own_sandbox(var_home: Path) -> None:
    """Why the profile may mask agentstack's state from the shell: with the profile in the
    project's config, a project hook sees the host's mounts (none of the sandbox's over the
    workdir), reads the decoy and writes outside the workdir, as the guard hook reads its state.
    (Codex's shell commands under the same profile are denied both: the test above.)"""
    from tests.harness.drive import codex_setup, run_codex
    from tests.harness.mock_model import MockModel, ToolCall

    root = _applied(var_home)
    policy = native.native_policy(load_manifest(root).sandbox, root)
    rendered = native.render(policy, "codex")
    assert rendered is not None
    lines = [f'default_permissions = "{native.CODEX_PROFILE}"', "",
             f"[permissions.{native.CODEX_PROFILE}.filesystem]"]
    lines += [f"{json.dumps(key[-1])} = {json.dumps(access)}"
              for key, access in rendered.keys.items() if key[0] == "permissions"]
    (root / ".codex" / "config.toml").write_text("\n".join(lines) + "\n")
    log = var_home / "hook.log"
    hook = (f"sh -c 'grep -c {root}/ /proc/self/mountinfo > {log}; "
            f"cat {var_home}/.ssh/id_ed25519 >> {log}; touch {var_home}/hook-outside.txt'")
    with MockModel([ToolCall("Bash", {"command": "echo hi"})]) as model:
        codex_setup(root, var_home, model, hook_command=hook)
        run = run_codex(root, var_home, "go")
    assert run.proc.returncode == 0, run.output
    assert log.exists(), run.output
    mounts_over_workdir, *rest = log.read_text().splitlines()
    assert mounts_over_workdir == "0" and DECOY.strip() in rest, log.read_text()
    assert (var_home / "hook-outside.txt").exists()

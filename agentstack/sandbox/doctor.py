"""`agentstack doctor`: can this machine enforce the sandbox, and what would run under it."""

from __future__ import annotations

import os
import platform
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from agentstack.sandbox import profiles

Status = Literal["ok", "warn", "fail"]
VERSION_TIMEOUT = 20.0


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    data: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "status": self.status, "detail": self.detail}
        if self.data:
            out.update(self.data)
        return out


def kernel_check() -> Check:
    system = platform.system()
    if system != "Linux":
        return Check("kernel", "fail", f"{system}: the sandbox needs Linux (Landlock, seccomp)")
    return Check("kernel", "ok", f"Linux {platform.release()} ({platform.machine()})",
                 {"release": platform.release(), "machine": platform.machine()})


def landlock_check() -> Check:
    from agentstack.sandbox.runner import landlock_kernel_abi

    kernel_abi = landlock_kernel_abi()
    try:
        from agentstack.sandbox.confine import load_nono

        abi = load_nono().detect_abi()
    except (ImportError, RuntimeError, OSError) as exc:
        return Check("landlock", "fail", f"not available: {exc}", {"kernel_abi": kernel_abi})
    from agentstack.sandbox import abi as table
    from agentstack.sandbox.runner import abi_number

    version = min(abi_number(abi), table.LATEST)
    # The default policy: network blocked, seccomp on.
    assessment = table.assess(version, pid_namespace=pid_namespace_covers(version))
    data = {"kernel_abi": kernel_abi, "nono_abi": str(abi.version),
            "features": list(abi.feature_names), "enforcement": assessment.to_json()}
    detail = (f"kernel ABI {kernel_abi}; nono uses {abi.version}: "
              + ", ".join(abi.feature_names))
    if assessment.state == "refused":
        return Check("landlock", "fail", detail + "; not enforced: "
                     + "; ".join(assessment.refused), data)
    if assessment.state == "degraded":
        return Check("landlock", "warn", detail + "; degraded: "
                     + "; ".join((*assessment.degraded, *assessment.covered)), data)
    covered = ("; covered by seccomp: " + "; ".join(assessment.covered)
               if assessment.covered else "")
    return Check("landlock", "ok", detail + "; fully enforced" + covered, data)


def pid_namespace_covers(version: int) -> bool:
    """Landlock `version` lacks signal scoping and the launcher can make a PID namespace here."""
    from agentstack.sandbox import abi as table

    if not table.needs_pid_namespace(version):
        return False
    from agentstack.sandbox.runner import pid_namespace_available

    return pid_namespace_available()


def nono_check() -> Check:
    from agentstack.sandbox.runner import nono_version

    version = nono_version()
    try:
        from agentstack.sandbox.confine import load_nono, nono_module_path

        load_nono()
        path = nono_module_path()
    except (ImportError, OSError) as exc:
        return Check("nono", "fail", f"nono-py is not usable: {exc} (pip install nono-py)",
                     {"version": version})
    return Check("nono", "ok", f"nono-py {version}", {"version": version, "module": path})


def seccomp_check() -> Check:
    from agentstack.sandbox.seccomp import available, libseccomp_version

    usable, detail = available()
    version = libseccomp_version()
    data = {"libseccomp": version}
    if not usable:
        return Check("seccomp", "fail", detail + " (apt-get install libseccomp2; pip install "
                     "pyseccomp)", data)
    return Check("seccomp", "ok", f"libseccomp {version}; {detail}", data)


def containment_check() -> Check:
    """How `run` makes sure no process of a session outlives it."""
    from agentstack.sandbox.runner import Cgroup, _own_cgroup_dir

    group = Cgroup.create()
    if group is not None:
        base = os.path.dirname(group.path)
        group.remove()
        return Check("containment", "ok", f"a cgroup v2 per run under {base} (cgroup.kill)",
                     {"method": "cgroup", "base": base})
    return Check(
        "containment", "ok",
        "this process cannot create a cgroup v2 here"
        + (f" (in {_own_cgroup_dir()})" if _own_cgroup_dir() else "")
        + "; run kills the session's whole process tree as its child subreaper instead",
        {"method": "process-tree"},
    )


# What each harness binary answered to --version in this process, by the binary's identity and
# the PATH it ran with (a library caller asking twice starts no second node process per harness).
_VERSIONS: dict[tuple[str, int, int, int, int, str], str] = {}


def _version(path: str) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, os.environ.get("PATH", ""))
    if key not in _VERSIONS:
        found = _probe_version(path)
        if found is None:
            return None  # a failure is asked again next time
        _VERSIONS[key] = found
    return _VERSIONS[key]


def _probe_version(path: str) -> str | None:
    from agentstack.patience import scaled

    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": os.environ.get("HOME", "/"),
           "TERM": "dumb", "NO_COLOR": "1"}
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, env=env,
                              stdin=subprocess.DEVNULL, timeout=scaled(VERSION_TIMEOUT),
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0].strip()[:200] if done.returncode == 0 and lines else None


def harness_checks() -> list[Check]:
    found = {
        name: profiles.find_binary(name, os.environ.get("PATH"))
        for name in profiles.DOCTOR_BINARIES
    }
    with ThreadPoolExecutor(max_workers=len(found)) as pool:
        versions = {
            name: pool.submit(_version, path) for name, path in found.items() if path
        }
        out: list[Check] = []
        for name, path in found.items():
            harness = profiles.BINARY_TO_HARNESS.get(name, name)
            if path is None:
                out.append(Check(f"harness {harness}", "warn", f"{name}: not found on PATH or "
                                 "in the checkout's .tools", {"harness": harness, "binary": None}))
                continue
            version = versions[name].result()
            out.append(Check(
                f"harness {harness}", "ok" if version else "warn",
                f"{path}: {version or 'no version (--version failed)'}",
                {"harness": harness, "binary": path, "version": version},
            ))
    return out


def git_state_check() -> Check:
    """How `run` keeps what git executes later out of the session's reach."""
    return Check(
        "git state", "ok",
        "rolled back after every session: .git/config, hooks, commondir, info/attributes, "
        "nested and submodule git directories, gitlinks (a read-only mount is not used: "
        "Landlock cannot carve them out of the writable workdir); .gitmodules, .gitattributes "
        "and on-open files are reported only",
        {"method": "rollback"},
    )


def coverage_checks() -> list[Check]:
    """What agentstack could not verify with a harness's own binary, and the harnesses no guard
    can protect (agentstack.harnesses): said, not failed."""
    from agentstack import harnesses as H

    out = [Check(f"harness {h.name}", "ok", "not verified by a binary: rendered from its "
                 "documentation", {"harness": h.name, "verified": False})
           for h in H.ALL if h.version == "docs" and h.name not in H.NOT_VERIFIED]
    out += [Check(f"harness {name}", "ok", f"not verified by a binary: {why}",
                  {"harness": name, "verified": False}) for name, why in H.NOT_VERIFIED.items()]
    out += [Check(f"guard {name}", "ok", why, {"harness": name, "guard": False})
            for name, why in H.NO_GUARD.items()]
    out += [Check(f"guard {name}", "ok", why, {"harness": name, "guard": "conditional"})
            for name, why in H.GUARD_DEPENDS.items()]
    return out


def system_checks() -> list[Check]:
    checks = [kernel_check(), landlock_check(), nono_check(), seccomp_check(),
              containment_check(), git_state_check()]
    return checks + harness_checks() + coverage_checks()


def overall(checks: list[Check]) -> Status:
    if any(c.status == "fail" for c in checks):
        return "fail"
    if any(c.status == "warn" for c in checks):
        return "warn"
    return "ok"

"""OpenCode's and Kilo's plugin package, installed once per test session instead of once per run.

On every start, OpenCode (and Kilo, its fork) installs its plugin package (`@opencode-ai/plugin`,
`@kilocode/plugin`) into each configuration directory it reads: the user's
(`~/.config/opencode`) and each `.opencode` (Kilo: `.kilo`, `.kilocode`, `.opencode`) directory
from the working directory up to the checkout's top. It skips a directory whose `node_modules`
is there and whose `package-lock.json` names the package (its own check), and a run that loads a
plugin (agentstack's guard is one) waits for the installs: ~10 s of CPU each, in every test's
fresh home and project.

`seeded(argv, cwd, env)` wraps a run of the real binary: before it, each such directory without
`node_modules` gets the tree the same binary installed in an earlier run of this session (hard
links of a kept copy: the binary finds it complete and installs nothing); after it, the first
complete install the binary made is kept for the next runs. The first run of each binary in a
session installs for real, and a directory that holds a `package.json` of its own (a project's
dependencies) is never touched. The copies live under the session's temporary root, shared by
the xdist workers (each keeps one with an atomic rename).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.support import shared

# binary name -> (its config directory name under XDG_CONFIG_HOME, the project directories it
# reads, its plugin package)
APPS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "opencode": ("opencode", (".opencode",), "@opencode-ai/plugin"),
    "kilo": ("kilo", (".kilo", ".kilocode", ".opencode"), "@kilocode/plugin"),
}
_KEPT = ("package.json", "package-lock.json", "node_modules")


def _template(binary: Path) -> Path | None:
    root = shared.root()
    if root is None:
        return None
    real = binary.resolve()
    st = real.stat()
    key = hashlib.sha256(f"{real}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:16]
    return root / f"plugin-deps-{real.name}-{key}"


def config_dirs(app: str, cwd: Path, env: Mapping[str, str]) -> list[Path]:
    """The directories `app` installs its plugin package into when started in `cwd` with `env`:
    the user's config directory, and the existing project ones from `cwd` up to the checkout's
    top (`cwd` alone outside a checkout)."""
    config, names, _ = APPS[app]
    home = Path(env.get("HOME", os.path.expanduser("~")))
    dirs = [Path(env.get("XDG_CONFIG_HOME", home / ".config")) / config]
    here = cwd.resolve()
    chain = [here, *here.parents]
    top = next((i for i, d in enumerate(chain) if (d / ".git").exists()), 0)
    for d in chain[: top + 1]:
        dirs += [d / n for n in names if (d / n).is_dir()]
    return dirs


def _complete(directory: Path, package: str) -> bool:
    """The binary's own install finished here: its package alone in package.json, the lock files
    arborist writes last, the package in node_modules."""
    try:
        wanted = json.loads((directory / "package.json").read_text(encoding="utf-8"))
        lock = json.loads((directory / "package-lock.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (list(wanted) == ["dependencies"] and list(wanted["dependencies"]) == [package]
            and package in lock.get("packages", {}).get("", {}).get("dependencies", {})
            and (directory / "node_modules" / ".package-lock.json").is_file()
            and (directory / "node_modules" / package / "package.json").is_file())


def _seed(template: Path, directory: Path) -> None:
    if (directory / "node_modules").exists():
        return
    own = directory / "package.json"
    if own.exists() and own.read_bytes() != (template / "package.json").read_bytes():
        return  # the directory's own dependencies: the binary installs them itself
    directory.mkdir(parents=True, exist_ok=True)
    for name in _KEPT:
        if name == "node_modules":
            subprocess.run(["cp", "-al", str(template / name), str(directory / name)],
                           check=True)
        elif not (directory / name).exists():
            shutil.copyfile(template / name, directory / name)


def _keep(template: Path, directory: Path) -> None:
    staging = Path(tempfile.mkdtemp(dir=template.parent, prefix=".staging-"))
    try:
        for name in _KEPT:
            if name == "node_modules":
                shutil.copytree(directory / name, staging / name, symlinks=True)
            else:
                shutil.copyfile(directory / name, staging / name)
        os.rename(staging, template)  # atomic; another worker may have kept one first
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)


@contextmanager
def seeded(argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> Iterator[None]:
    """Around a run of `argv` (any harness; only OpenCode's and Kilo's are seeded) in `cwd`."""
    binary = Path(argv[0])
    app = binary.name
    template = _template(binary) if app in APPS else None
    if template is None:
        yield
        return
    dirs = config_dirs(app, cwd, env)
    if template.is_dir():
        for directory in dirs:
            _seed(template, directory)
    try:
        yield
    finally:
        if not template.is_dir():
            package = APPS[app][2]
            done = next((d for d in config_dirs(app, cwd, env) if _complete(d, package)), None)
            if done is not None:
                _keep(template, done)

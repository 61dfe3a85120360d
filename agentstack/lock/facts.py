"""Risk facts: deterministic observations about what a declaration will execute or reach.

A fact is a short string `code:detail`, so it can live in the lock and the consent document and be
compared between two of them. Facts describe; the consent review (`consent.risk`) decides what is a
finding. The lock records them (`lock.resolve`), below the consent.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from urllib.parse import urlsplit

from agentstack.manifest.view import METADATA_HOSTS

# Runners that fetch and execute a package from a registry at launch time.
_RUNNERS: dict[tuple[str, ...], str] = {
    ("npx",): "npm",
    ("bunx",): "npm",
    ("pnpx",): "npm",
    ("pnpm", "dlx"): "npm",
    ("yarn", "dlx"): "npm",
    ("npm", "exec"): "npm",
    ("uvx",): "pypi",
    ("uv", "tool", "run"): "pypi",
    ("pipx", "run"): "pypi",
    ("docker", "run"): "oci",
    ("podman", "run"): "oci",
}
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "fish"})
_NPM_EXACT = re.compile(r"^(@[^/@]+/)?[^@/]+@\d+\.\d+\.\d+([-+][0-9A-Za-z.+-]*)?$")
_PACKAGE_OPTIONS = ("-p", "--package", "--from", "--spec")
_OPTIONS_WITH_VALUE = frozenset(
    {
        "--with",
        "-e",
        "--env",
        "-v",
        "--volume",
        "--name",
        "--entrypoint",
        "-w",
        "--workdir",
        "--python",
        "--index-url",
    }
)


def _package_argument(args: list[str]) -> str | None:
    """The package (or image) a runner will fetch: an explicit `-p/--package/--from` value wins,
    else the first positional argument after the runner's own options."""
    skip = False
    for index, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg in _PACKAGE_OPTIONS and index + 1 < len(args):
            return args[index + 1]
        for option in _PACKAGE_OPTIONS:
            if option.startswith("--") and arg.startswith(option + "="):
                return arg.split("=", 1)[1]
        if arg in _OPTIONS_WITH_VALUE:
            skip = True
            continue
        if arg == "--" or arg.startswith("-"):
            continue
        return arg
    return None


def _pinned(ecosystem: str, package: str) -> bool:
    if ecosystem == "npm":
        return bool(_NPM_EXACT.match(package))
    if ecosystem == "pypi":
        return "==" in package and not package.endswith("==")
    return "@sha256:" in package  # oci: only a content digest pins an image


def command_facts(argv: list[str]) -> list[str]:
    """Facts about one command line (a server or hook)."""
    if not argv:
        return []
    facts: list[str] = []
    program = posixpath.basename(argv[0])
    if posixpath.isabs(argv[0]):
        facts.append(f"absolute-binary:{argv[0]}")
    for prefix, ecosystem in _RUNNERS.items():
        if (program, *argv[1 : len(prefix)]) == prefix:
            package = _package_argument(argv[len(prefix) :])
            if package is None or not _pinned(ecosystem, package):
                facts.append(f"unpinned-package:{ecosystem}:{package or '?'}")
            break
    if program in _SHELLS and any(
        a.startswith("-") and not a.startswith("--") and "c" in a for a in argv[1:]
    ):
        facts.append(f"shell-command:{program}")
    return facts


def _host_class(host: str) -> str | None:
    lowered = host.lower().rstrip(".")
    if lowered in METADATA_HOSTS:
        return "link-local"
    if lowered == "localhost" or lowered.endswith(".localhost"):
        return "loopback"
    try:
        address = ipaddress.ip_address(lowered.strip("[]"))
    except ValueError:
        return None
    if address.is_link_local:
        return "link-local"
    if address.is_loopback:
        return "loopback"
    return None


def url_facts(url: str) -> list[str]:
    parts = urlsplit(url)
    host = parts.hostname or ""
    facts = [f"remote-host:{host}"]
    host_class = _host_class(host)
    if host_class == "link-local":
        facts.append(f"link-local:{host}")
    if parts.scheme == "http" and host_class != "loopback":
        facts.append(f"plain-http:{host}")
    return facts


def host_facts(host: str) -> list[str]:
    """Facts about a host the sandbox lets the process reach."""
    return [f"link-local:{host}"] if _host_class(host.removeprefix("*.")) == "link-local" else []


def runner_package(argv: list[str]) -> tuple[str, str, bool] | None:
    """(ecosystem, package, pinned) when `argv` runs a registry runner (npx, uvx, docker run …)."""
    if not argv:
        return None
    program = posixpath.basename(argv[0])
    for prefix, ecosystem in _RUNNERS.items():
        if (program, *argv[1 : len(prefix)]) == prefix:
            package = _package_argument(argv[len(prefix) :]) or "?"
            return ecosystem, package, package != "?" and _pinned(ecosystem, package)
    return None

"""A team policy: what every member's setups must stay within, signed by the team's key and fetched
from a git repository the member names once (`agentstack policy add URL --signer KEY`).

The policy repository holds `agentstack-policy.toml` and `agentstack-policy.toml.sig`, an SSHSIG
over the file's exact bytes in namespace `agentstack-policy` (`agentstack policy sign`, or
`ssh-keygen -Y sign -n agentstack-policy`). The policy in force is pinned by commit; every use
verifies it again (the signature, against the signer pinned at `add`; the bytes, against the
recorded hash), and `policy update` installs a newer version only: signed by the same key, with a
higher `policy.version` (a lower one is a rollback; the same one with other bytes is refused too).
Anything refused leaves the policy in force as it was.

The fetch is the git sources' own (agentstack.lock.gitsource): a `--mirror` clone into the cache
(no hooks, no config copied), hardened options on every git call, and only plumbing that never
consults `core.fsmonitor`; the files are read as git objects. No code of the repository runs.

`trust`, `apply`, `receive` and `quarantine release` call `enforce`: a setup the policy forbids is
refused (exit 1) with each rule it breaks named. With no policy added, `enforce` is one stat.
"""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentstack.errors import InvalidInput, Refused

NAMESPACE = "agentstack-policy"
POLICY_NAME = "agentstack-policy.toml"
SIGNATURE_NAME = POLICY_NAME + ".sig"
MAX_POLICY_BYTES = 256 * 1024
_SECTIONS = {"policy", "require", "forbid", "boundary"}
_FULL_COMMIT = re.compile(r"[0-9a-f]{40}")
_KINDS = ("servers", "skills", "hooks", "instructions", "plugins", "agents", "commands")


class PolicyRefused(Refused):
    """A policy (a new version, or the one in force) that cannot be used, or a setup it forbids."""


# ------------------------------------------------------------------ the policy file


@dataclass(frozen=True)
class Policy:
    name: str
    version: int
    description: str = ""
    require_guard: bool = False
    require_sandbox: bool = False
    require_items: tuple[str, ...] = ()
    require_packages: tuple[str, ...] | None = None
    forbid_items: tuple[str, ...] = ()
    forbid_executables: tuple[str, ...] = ()
    forbid_hosts: tuple[str, ...] = ()
    boundary: dict[str, Any] | None = field(default=None, compare=False)

    def rules(self) -> int:
        return (int(self.require_guard) + int(self.require_sandbox) + len(self.require_items)
                + (len(self.require_packages) if self.require_packages is not None else 0)
                + len(self.forbid_items) + len(self.forbid_executables) + len(self.forbid_hosts)
                + int(self.boundary is not None))


def _strings(table: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InvalidInput(f"{where}.{key}: must be a list of non-empty strings")
    return tuple(value)


def _known(table: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise InvalidInput(f"{where}: unknown key {unknown[0]!r}",
                           hint="see docs/policy.md for the policy file's vocabulary")


def parse_policy(data: bytes, source: str = POLICY_NAME) -> Policy:
    """The policy file, checked whole: unknown keys and wrong types are refused (exit 2)."""
    import tomllib

    if len(data) > MAX_POLICY_BYTES:
        raise InvalidInput(f"{source}: larger than {MAX_POLICY_BYTES} bytes")
    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput(f"{source}: not valid TOML ({exc})") from None
    _known(raw, _SECTIONS, source)
    head = raw.get("policy")
    if not isinstance(head, dict):
        raise InvalidInput(f"{source}: [policy] with name and version is required")
    _known(head, {"name", "version", "description"}, f"{source}: policy")
    name, version = head.get("name"), head.get("version")
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"{source}: policy.name must be a non-empty string")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InvalidInput(f"{source}: policy.version must be an integer of at least 1")
    require = raw.get("require", {})
    forbid = raw.get("forbid", {})
    if not isinstance(require, dict) or not isinstance(forbid, dict):
        raise InvalidInput(f"{source}: [require] and [forbid] are tables")
    _known(require, {"guard", "sandbox", "items", "packages"}, f"{source}: require")
    _known(forbid, {"items", "executables", "hosts"}, f"{source}: forbid")
    for key in ("guard", "sandbox"):
        if not isinstance(require.get(key, False), bool):
            raise InvalidInput(f"{source}: require.{key} must be true or false")
    boundary = raw.get("boundary")
    if boundary is not None:
        if not isinstance(boundary, dict):
            raise InvalidInput(f"{source}: [boundary] is a table (a boundary file's tables)")
        _boundary(boundary, f"{source} [boundary]", home="/")  # validated now, not at use
    items = _strings(require, "items", f"{source}: require")
    forbid_items = _strings(forbid, "items", f"{source}: forbid")
    for item in (*items, *forbid_items):
        if item.split(".", 1)[0] not in _KINDS or "." not in item:
            raise InvalidInput(f"{source}: {item!r} is not KIND.NAME",
                               hint="KIND: " + ", ".join(_KINDS) + "; NAME may be a * pattern")
    return Policy(
        name=name, version=version, description=str(head.get("description", "")),
        require_guard=bool(require.get("guard", False)),
        require_sandbox=bool(require.get("sandbox", False)),
        require_items=items,
        require_packages=(_strings(require, "packages", f"{source}: require")
                          if "packages" in require else None),
        forbid_items=forbid_items,
        forbid_executables=_strings(forbid, "executables", f"{source}: forbid"),
        forbid_hosts=_strings(forbid, "hosts", f"{source}: forbid"),
        boundary=boundary,
    )


def _boundary(table: dict[str, Any], source: str, *, home: str) -> Any:
    from pydantic import ValidationError

    from agentstack.consent.boundary import BoundaryFile, compile_boundary

    try:
        data = BoundaryFile.model_validate(table)
    except ValidationError as exc:
        lines = [f"{source}: {'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}"
                 for err in exc.errors()]
        raise InvalidInput("\n".join(lines),
                           hint="see docs/boundary.md for the boundary vocabulary") from None
    return compile_boundary(data, home=home, source=source)


# ------------------------------------------------------------------ the check


@dataclass(frozen=True)
class Breach:
    rule: str  # e.g. `forbid.items "hooks.*"`, `require.guard`, `boundary.commands`
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"rule": self.rule, "detail": self.detail}


def _items(document: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for kind in _KINDS:
        section = document.get(kind)
        if isinstance(section, dict):
            out.extend(f"{kind}.{name}" for name in sorted(section))
    return out


def _unversioned(package: str) -> str:
    """`@scope/pkg@1.2.3` -> `@scope/pkg`; `mcp-x==1.0` -> `mcp-x` (a pattern names packages)."""
    for sep in ("==", "@"):
        at = package.rfind(sep)
        if at > 0:
            return package[:at]
    return package


def _host(url: str) -> str:
    from urllib.parse import urlsplit

    return (urlsplit(url).hostname or "").lower().rstrip(".")


def check(policy: Policy, document: dict[str, Any], root: Path | None) -> list[Breach]:
    """Every rule of `policy` that the consent `document` breaks (empty: it stays within)."""
    from agentstack.consent.reach import build_reach

    home = os.path.realpath(str(Path.home()))
    out: list[Breach] = []
    items = _items(document)
    for pattern in policy.forbid_items:
        for item in items:
            if fnmatch.fnmatchcase(item, pattern):
                out.append(Breach(f"forbid.items {pattern!r}", f"{item} is declared"))
    for pattern in policy.require_items:
        if not any(fnmatch.fnmatchcase(item, pattern) for item in items):
            out.append(Breach(f"require.items {pattern!r}", "no such item is declared"))
    reach = build_reach(document, str(root) if root is not None else None, home)
    for command in reach.commands:
        if not command.argv:
            continue
        program = command.argv[0]
        for pattern in policy.forbid_executables:
            if fnmatch.fnmatchcase(program, pattern) or fnmatch.fnmatchcase(
                posixpath.basename(program), pattern
            ):
                out.append(Breach(f"forbid.executables {pattern!r}",
                                  f"{command.process} runs {program}"))
        if policy.require_packages is not None and command.package is not None:
            ecosystem, package, _ = command.package
            names = {f"{ecosystem}:{package}", f"{ecosystem}:{_unversioned(package)}"}
            if not any(fnmatch.fnmatchcase(n, p) for n in names for p in policy.require_packages):
                out.append(Breach("require.packages",
                                  f"{command.process} fetches {ecosystem}:{package}, outside "
                                  + (", ".join(policy.require_packages) or "(none permitted)")))
    hosts: list[tuple[str, str]] = [
        (f"servers.{name}", _host(str(server.get("url", ""))))
        for name, server in sorted((document.get("servers") or {}).items())
        if isinstance(server, dict) and server.get("url")
    ]
    hosts += [("sandbox.allow_domains", str(h).lower())
              for h in (document.get("sandbox") or {}).get("allow_domains", [])]
    for pattern in policy.forbid_hosts:
        for where, host in hosts:
            if host and fnmatch.fnmatchcase(host, pattern.lower()):
                out.append(Breach(f"forbid.hosts {pattern!r}", f"{where} reaches {host}"))
    if policy.require_sandbox and (document.get("sandbox") or {}).get("enabled") is False:
        out.append(Breach("require.sandbox", "sandbox.enabled = false"))
    if policy.require_guard:
        out.extend(_guard_off(document))
    if policy.boundary is not None:
        from agentstack.consent.boundary import check_document

        compiled = _boundary(policy.boundary, f"policy {policy.name} v{policy.version}",
                             home=home)
        result = check_document(document, root, compiled, home=home)
        for v in result.violations:
            out.append(Breach(f"boundary.{v.domain}", f"{v.counterexample} (from {v.source})"))
        for u in result.unsupported:
            out.append(Breach(f"boundary.{u.domain}", f"cannot be checked: {u.what}: {u.reason}"))
    return out


def _guard_off(document: dict[str, Any]) -> list[Breach]:
    """What in the setup can switch the guard off: a passthrough key or a file a harness loads
    from the repository whose keys switch hooks off (the surface's `guard-off` facts)."""
    from agentstack import harnesses

    out = []
    passthrough = (document.get("settings") or {}).get("passthrough") or {}
    for harness, keys in sorted(passthrough.items()):
        if harness not in harnesses.BY_NAME or not isinstance(keys, dict):
            continue
        h = harnesses.get(harness)
        for table in h.keys:
            for key in sorted(keys):
                if harnesses.key_risk(h, table, key) == harnesses.GUARD_OFF:
                    out.append(Breach("require.guard",
                                      f"settings.passthrough.{harness}.{key} can switch it off"))
    for rel, entry in sorted((document.get("surface") or {}).items()):
        for fact in entry.get("facts", []) if isinstance(entry, dict) else []:
            if str(fact).startswith(harnesses.GUARD_OFF + ":"):
                out.append(Breach("require.guard", f"{rel} can switch it off ({fact})"))
    return sorted(set(out), key=lambda b: b.detail)


# ------------------------------------------------------------------ the store


@dataclass(frozen=True)
class InForce:
    url: str
    ref: str
    commit: str
    signer: str  # the OpenSSH public key line pinned at `add`
    fingerprint: str
    policy: Policy
    text: bytes
    installed: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.policy.name, "version": self.policy.version, "url": self.url,
                "ref": self.ref, "commit": self.commit, "signer": self.fingerprint,
                "installed": self.installed, "rules": self.policy.rules()}

    def label(self) -> str:
        return (f"{self.policy.name} v{self.policy.version} from {self.url} "
                f"at {self.commit[:12]} (signer {self.fingerprint})")


def policy_dir(home: Path | None = None) -> Path:
    from agentstack.paths import agentstack_home

    return (home or agentstack_home()) / "policy"


def _state_path(home: Path | None) -> Path:
    return policy_dir(home) / "state.json"


def is_added(home: Path | None = None) -> bool:
    return os.path.lexists(_state_path(home))


def _read_private(path: Path, limit: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise PolicyRefused(f"{path} is larger than {limit} bytes")
    return data


def verify(text: bytes, signature: bytes, signer: str, *, where: str) -> Policy:
    """The policy in `text`, when `signature` is a valid SSHSIG over it by `signer` in the policy
    namespace; PolicyRefused otherwise (the reason named)."""
    from agentstack.share.sshsig import PublicKey, SignatureError
    from agentstack.share.sshsig import verify as verify_sig

    key = PublicKey.parse(signer)
    if not signature:
        raise PolicyRefused(f"{where}: unsigned ({SIGNATURE_NAME} is missing)",
                            hint="the team signs it with 'agentstack policy sign'")
    try:
        parsed = verify_sig(signature, text, namespace=NAMESPACE)
    except SignatureError as exc:
        raise PolicyRefused(f"{where}: the signature does not verify: {exc.message}") from None
    if parsed.public_key != key:
        raise PolicyRefused(
            f"{where}: signed by {parsed.public_key.fingerprint}, not by the policy's signer "
            f"{key.fingerprint}",
            hint="only the key named at 'agentstack policy add' can sign this policy",
        )
    try:
        return parse_policy(text, POLICY_NAME)
    except InvalidInput as exc:
        raise PolicyRefused(f"{where}: signed, but not a valid policy: {exc.message}") from None


def in_force(home: Path | None = None) -> InForce | None:
    """The policy in force, verified now (None when none was added). PolicyRefused when what is
    stored does not verify: every command that enforces the policy then refuses."""
    state_path = _state_path(home)
    if not os.path.lexists(state_path):
        return None
    try:
        state = json.loads(_read_private(state_path, 64 * 1024))
        if not _FULL_COMMIT.fullmatch(str(state["commit"])):
            raise ValueError(f"{state['commit']!r} is not a commit id")
        version_dir = policy_dir(home) / str(state["commit"])
        text = _read_private(version_dir / POLICY_NAME, MAX_POLICY_BYTES)
        signature = _read_private(version_dir / SIGNATURE_NAME, 16 * 1024)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PolicyRefused(
            f"the team policy in force cannot be read ({policy_dir(home)}: {exc})",
            hint="run 'agentstack policy update' to fetch it again",
        ) from None
    from agentstack.canonical import b3

    where = f"the team policy in force ({state.get('url')} at {str(state['commit'])[:12]})"
    if b3(text) != state.get("digest"):
        raise PolicyRefused(f"{where}: its file changed since it was installed",
                            hint="run 'agentstack policy update' to fetch it again")
    policy = verify(text, signature, str(state["signer"]), where=where)
    if policy.version != state.get("version") or policy.name != state.get("name"):
        raise PolicyRefused(f"{where}: does not match what was installed",
                            hint="run 'agentstack policy update' to fetch it again")
    from agentstack.share.sshsig import PublicKey

    return InForce(url=str(state["url"]), ref=str(state["ref"]), commit=str(state["commit"]),
                   signer=str(state["signer"]),
                   fingerprint=PublicKey.parse(str(state["signer"])).fingerprint,
                   policy=policy, text=text, installed=str(state.get("installed", "")))


def _install(home: Path | None, *, url: str, ref: str, commit: str, signer: str, text: bytes,
             signature: bytes, policy: Policy) -> None:
    """Write the version's files into their own directory, then switch `state.json` to it (one
    atomic rename: the policy in force is the old one or the new one, never a mix)."""
    from agentstack.canonical import b3
    from agentstack.fsutil import write_atomic
    from agentstack.paths import ensure_private_dir

    base = ensure_private_dir(policy_dir(home))
    version_dir = ensure_private_dir(base / commit)
    write_atomic(version_dir / POLICY_NAME, text, 0o600, base=base)
    write_atomic(version_dir / SIGNATURE_NAME, signature, 0o600, base=base)
    state = {"url": url, "ref": ref, "commit": commit, "signer": signer, "digest": b3(text),
             "name": policy.name, "version": policy.version,
             "installed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_atomic(base / "state.json",
                 (json.dumps(state, indent=2, sort_keys=True) + "\n").encode(), 0o600, base=base)


# ------------------------------------------------------------------ the fetch


def fetch(url: str, ref: str) -> tuple[str, bytes, bytes]:
    """(commit, policy bytes, signature bytes; b"" when absent) of `ref` in the repository at
    `url`, through the git sources' mirror (no repository code runs)."""
    import agentstack.lock.gitsource as gitsource
    from agentstack.paths import agentstack_cache
    from agentstack.share.gitobjects import (
        commit_tree,
        read_mirror_object,
        split_object,
        tree_entries,
    )

    cache = agentstack_cache()
    try:
        commit = gitsource.fetch_and_resolve(cache, url, ref)
    except gitsource.GitSourceError as exc:
        raise PolicyRefused(f"cannot fetch the policy: {exc.message}", hint=exc.hint) from None
    read = read_mirror_object(cache, url)
    _, body = split_object(read(commit), f"commit {commit[:12]}")
    _, tree = split_object(read(commit_tree(body, f"commit {commit[:12]}")), "the root tree")
    blobs = {name: (mode, sha) for mode, name, sha in tree_entries(tree, "the root tree")}

    def blob(name: str) -> bytes | None:
        if name not in blobs:
            return None
        mode, sha = blobs[name]
        if mode not in ("100644", "100755"):
            raise PolicyRefused(f"{url} at {commit[:12]}: {name} is not a regular file")
        kind, data = split_object(read(sha), name)
        if kind != "blob" or len(data) > MAX_POLICY_BYTES:
            raise PolicyRefused(f"{url} at {commit[:12]}: {name} is not a policy-sized file")
        return data

    text = blob(POLICY_NAME)
    if text is None:
        raise PolicyRefused(f"{url} at {commit[:12]} holds no {POLICY_NAME}",
                            hint="the policy file lives at the top of the repository")
    return commit, text, blob(SIGNATURE_NAME) or b""


# ------------------------------------------------------------------ the commands' library


def add(url: str, signer: str, ref: str = "HEAD", home: Path | None = None) -> InForce:
    """`policy add`: fetch, verify, pin, install. Refused when a policy is already in force."""
    if is_added(home):
        current = _current_or_none(home)
        raise PolicyRefused(
            "a team policy is already in force" + (f": {current.label()}" if current else ""),
            hint="'agentstack policy update' refreshes it; 'agentstack policy remove' first to "
            "follow another one",
        )
    commit, text, signature = fetch(url, ref)
    policy = verify(text, signature, signer, where=f"{url} at {commit[:12]}")
    _install(home, url=url, ref=ref, commit=commit, signer=signer, text=text,
             signature=signature, policy=policy)
    found = in_force(home)
    assert found is not None
    return found


def _current_or_none(home: Path | None) -> InForce | None:
    try:
        return in_force(home)
    except PolicyRefused:
        return None


@dataclass(frozen=True)
class Update:
    before: InForce
    after: InForce | None  # None: nothing new
    diff: str


def update(home: Path | None = None) -> Update:
    """`policy update`: the newest commit of the pinned ref, installed only when it is signed by
    the pinned signer and newer; PolicyRefused otherwise (the policy in force stays)."""
    import difflib

    state_path = _state_path(home)
    if not os.path.lexists(state_path):
        raise PolicyRefused("no team policy was added",
                            hint="add one with 'agentstack policy add URL --signer KEY'")
    try:
        state = json.loads(_read_private(state_path, 64 * 1024))
        url, ref, signer = str(state["url"]), str(state["ref"]), str(state["signer"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PolicyRefused(f"{state_path} cannot be read ({exc})",
                            hint="'agentstack policy remove', then add it again") from None
    before = _current_or_none(home)
    commit, text, signature = fetch(url, ref)
    where = f"{url} at {commit[:12]}"
    policy = verify(text, signature, signer, where=where)
    if before is not None and commit == before.commit:
        return Update(before, None, "")
    # The floor: the version in force (or, when what is stored no longer verifies, the version
    # recorded at its install: a damaged store is no way around the rollback rule).
    floor = before.policy.version if before is not None else int(state.get("version", 0))
    if before is not None and policy.name != before.policy.name:
        raise PolicyRefused(f"{where}: policy {policy.name!r}, not {before.policy.name!r}")
    if policy.version < floor:
        raise PolicyRefused(
            f"{where}: version {policy.version} is older than the version in force "
            f"({floor}): a rollback is refused",
            hint="the team publishes a higher policy.version to change the policy",
        )
    if before is not None and policy.version == floor and text != before.text:
        raise PolicyRefused(
            f"{where}: version {policy.version} is the version in force, with other "
            "content: refused",
            hint="the team publishes a higher policy.version to change the policy",
        )
    old = before.text.decode("utf-8", "replace") if before is not None else ""
    diff = "".join(difflib.unified_diff(
        old.splitlines(keepends=True), text.decode("utf-8", "replace").splitlines(keepends=True),
        fromfile=f"{POLICY_NAME} (v{before.policy.version}, {before.commit[:12]})"
        if before is not None else "(none in force)",
        tofile=f"{POLICY_NAME} (v{policy.version}, {commit[:12]})",
    ))
    _install(home, url=url, ref=ref, commit=commit, signer=signer, text=text,
             signature=signature, policy=policy)
    after = in_force(home)
    assert after is not None
    if before is None:
        # What was stored did not verify (it was damaged): the fetched one is the policy now.
        before = after
    return Update(before, after, diff)


def remove(home: Path | None = None) -> bool:
    import shutil

    base = policy_dir(home)
    if not os.path.lexists(base / "state.json"):
        return False
    os.unlink(base / "state.json")
    shutil.rmtree(base, ignore_errors=True)
    return True


def sign(path: Path, key: Any) -> Path:
    """`policy sign FILE`: check the file is a valid policy, write FILE.sig next to it."""
    from agentstack.fsutil import write_atomic
    from agentstack.share.sshsig import sign as sign_bytes

    try:
        text = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read it ({exc.strerror})") from None
    parse_policy(text, str(path))
    out = path.with_name(path.name + ".sig")
    write_atomic(out, sign_bytes(key, text, namespace=NAMESPACE).encode("ascii"), 0o644)
    return out


def enforce(document: dict[str, Any], root: Path | None, *, action: str,
            home: Path | None = None) -> InForce | None:
    """Refuse (PolicyRefused, exit 1) a setup the policy in force forbids, naming each rule it
    breaks; None when no policy was added. A policy that does not verify refuses everything."""
    if not is_added(home):
        return None
    current = in_force(home)
    assert current is not None
    breaches = check(current.policy, document, root)
    if breaches:
        lines = [f"  {b.rule}: {b.detail}" for b in breaches]
        raise PolicyRefused(
            f"{action} refused by the team policy {current.policy.name} "
            f"v{current.policy.version}:\n" + "\n".join(lines),
            hint="change the setup (the rules are in 'agentstack policy show')",
        )
    return current


def doctor_check() -> Any:
    """`doctor`'s row: which team policy is in force (verified now)."""
    from agentstack.sandbox.doctor import Check

    try:
        current = in_force()
    except PolicyRefused as exc:
        return Check("policy", "fail", f"{exc.message} (trust, apply, receive and release "
                     "refuse until it verifies)", {"policy": None})
    if current is None:
        return Check("policy", "ok", "no team policy ('agentstack policy add URL --signer KEY')",
                     {"policy": None})
    return Check("policy", "ok", f"{current.label()}: {current.policy.rules()} rules; trust, "
                 "apply, receive and release refuse what it forbids",
                 {"policy": current.to_json()})

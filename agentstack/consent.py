"""The consent document: everything that will execute or reach the model, and its digest.

Built from the manifest and a fresh lock only. It covers each server's transport, command, args, cwd,
env names with the *source* of each value (a literal, or a secret reference — never the secret), URL
and header sources; every byte and executable bit of every skill, instruction, hook and project file a
command names; hook events, matchers and commands; settings; the sandbox policy; the harness targets;
git sources' commit and tree. The consent digest is blake3 over its canonical JSON.
"""

from __future__ import annotations

from typing import Any

from agentstack.canonical import digest_of
from agentstack.manifest import Manifest, is_secret, secret_name
from agentstack.risk import host_facts

CONSENT_FORMAT = 1


def _value_source(value: str) -> dict[str, str]:
    return {"secret": secret_name(value)} if is_secret(value) else {"literal": value}


def _server(manifest: Manifest, name: str, locked: dict[str, Any]) -> dict[str, Any]:
    server = manifest.servers[name]
    view: dict[str, Any] = {
        "transport": server.transport,
        "files": locked["files"],
        "risks": locked["risks"],
    }
    if server.command is not None:
        view.update(
            command=server.command,
            args=list(server.args),
            cwd=server.cwd or ".",
            env={k: _value_source(v) for k, v in server.env.items()},
        )
    else:
        view.update(
            url=server.url, headers={k: _value_source(v) for k, v in server.headers.items()}
        )
    return view


def _hook(manifest: Manifest, name: str, locked: dict[str, Any]) -> dict[str, Any]:
    hook = manifest.hooks[name]
    view: dict[str, Any] = {
        "event": hook.event,
        "matcher": hook.matcher or "*",
        "timeout": hook.timeout,
        "files": locked["files"],
        "risks": locked["risks"],
    }
    if hook.script is not None:
        view.update(script=hook.script, args=list(hook.args))
    else:
        view.update(command=list(hook.command or []))
    return view


def _sandbox(manifest: Manifest) -> dict[str, Any]:
    sandbox = manifest.sandbox.model_dump(mode="json")
    sandbox["risks"] = [
        fact for host in manifest.sandbox.network.allow_domains for fact in host_facts(host)
    ]
    return sandbox


def consent_document(manifest: Manifest, lock: dict[str, Any]) -> dict[str, Any]:
    """The consent view as a plain JSON document (the thing a user trusts)."""
    document = {
        "consent": CONSENT_FORMAT,
        "project": {"name": manifest.project.name, "harnesses": list(manifest.project.harnesses)},
        "servers": {n: _server(manifest, n, lock["servers"][n]) for n in manifest.servers},
        "skills": {n: dict(lock["skills"][n]) for n in manifest.skills},
        "instructions": list(lock["instructions"]),
        "hooks": {n: _hook(manifest, n, lock["hooks"][n]) for n in manifest.hooks},
        "settings": manifest.settings.model_dump(mode="json"),
        "sandbox": _sandbox(manifest),
        "lock": lock["manifest"],
    }
    if lock.get("surface"):
        # Also loaded by the harnesses from the project, not declared (agentstack.surface).
        document["surface"] = lock["surface"]
    return document


def consent_digest(document: dict[str, Any]) -> str:
    return digest_of(document)

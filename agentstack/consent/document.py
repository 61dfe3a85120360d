"""The consent document: everything that will execute or reach the model, and its digest.

Built from the manifest and a fresh lock only. It covers each server's transport, command, args, cwd,
env names with the *source* of each value (a literal, or a secret reference — never the secret), URL
and header sources; every byte and executable bit of every skill, instruction, hook and project file a
command names; hook events, matchers and commands; settings; the sandbox policy; the harness targets;
git sources' commit and tree. The consent digest is blake3 over its canonical JSON.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from agentstack.canonical import canonical_bytes, digest_of
from agentstack.manifest.view import (
    EACH,
    ManifestView,
    Section,
    Spec,
    as_view,
    copy_json,
    encode_spec,
    is_secret,
    manifest_spec,
    secret_name,
)

if TYPE_CHECKING:
    from pathlib import Path

    from pydantic import BaseModel

    from agentstack.lock.relock import Recorder
    from agentstack.manifest.model import Manifest

CONSENT_FORMAT = 1


def _value_source(value: str) -> dict[str, str]:
    return {"secret": secret_name(value)} if is_secret(value) else {"literal": value}


def _declared(section: Section, shown: dict[str, Any]) -> dict[str, Any]:
    """`shown` plus every other declared field of `section`, as JSON. A field added to the
    manifest later is in the view at once; at its default it is left out of the digest
    (`digest_form`)."""
    out = dict(shown)
    for field, value in section.data.items():
        if field not in out and field not in _SHOWN_ELSEWHERE and value is not None:
            out[field] = copy_json(value)
    return out


def _json(value: Any) -> Any:
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    return value


def _locked(locked: dict[str, Any]) -> dict[str, Any]:
    """What the lock pinned for a server or hook: named files, code roots, risk facts."""
    view: dict[str, Any] = {"files": locked["files"], "risks": locked["risks"]}
    if "roots" in locked:
        view["roots"] = locked["roots"]
    return view


def _server(manifest: ManifestView, name: str, locked: dict[str, Any]) -> dict[str, Any]:
    server = manifest.servers[name]
    view: dict[str, Any] = {"transport": server.transport, **_locked(locked)}
    if server.command is not None:
        view.update(
            command=server.command,
            args=list(server.args),
            cwd=server.cwd or ".",
            env={k: _value_source(v) for k, v in server.env.items()},
            url=None,  # a process has no URL: the remote-only fields are not part of its view
            headers=None,
        )
    else:
        view.update(
            url=server.url, headers={k: _value_source(v) for k, v in server.headers.items()}
        )
        # A remote server has no process: its stdio-only fields are not part of its view.
        view.update({k: None for k in ("command", "args", "env", "cwd")})
    return {k: v for k, v in _declared(server, view).items() if v is not None}


def _hook(manifest: ManifestView, name: str, locked: dict[str, Any]) -> dict[str, Any]:
    hook = manifest.hooks[name]
    view: dict[str, Any] = {
        "event": hook.event,
        "matcher": hook.matcher or "*",
        "timeout": hook.timeout,
        **_locked(locked),
    }
    if hook.script is not None:
        view.update(script=hook.script, args=list(hook.args))
    else:
        view.update(command=list(hook.command or []), script=None, args=None)
    return {k: v for k, v in _declared(hook, view).items() if v is not None}


def _sandbox(manifest: ManifestView) -> dict[str, Any]:
    from agentstack.lock.facts import host_facts

    sandbox = manifest.sandbox.dump()
    sandbox["risks"] = [
        fact for host in manifest.sandbox.allow_domains for fact in host_facts(host)
    ]
    return sandbox


def consent_document(manifest: Manifest | ManifestView, lock: dict[str, Any]) -> dict[str, Any]:
    """The consent view as a plain JSON document (the thing a user trusts). Built from the
    manifest's plain-data view: the same document whether the models were just validated or the
    view came from the manifest cache."""
    manifest = as_view(manifest)
    document = {
        "consent": CONSENT_FORMAT,
        "project": _declared(
            manifest.project,
            {"name": manifest.project.name, "harnesses": list(manifest.project.harnesses)},
        ),
        "servers": {n: _server(manifest, n, lock["servers"][n]) for n in manifest.servers},
        "skills": {n: dict(lock["skills"][n]) for n in manifest.skills},
        "instructions": list(lock["instructions"]),
        "hooks": {n: _hook(manifest, n, lock["hooks"][n]) for n in manifest.hooks},
        "settings": manifest.settings.dump(),
        "sandbox": _sandbox(manifest),
        "lock": lock["manifest"],
    }
    if manifest.plugins:
        document["plugins"] = {
            n: _plugin(manifest, n, lock["plugins"][n]) for n in manifest.plugins
        }
    else:
        document["plugins"] = None  # none declared: not part of the document (nor its digest)
    if lock.get("code_roots"):
        # Trees several commands load, pinned once; each command's root entry names one by its
        # path and tree digest (agentstack.lock.coderoots, "shared code roots").
        document["code_roots"] = lock["code_roots"]
    if lock.get("surface"):
        # Also loaded by the harnesses from the project, not declared (agentstack.surface).
        document["surface"] = lock["surface"]
    out = _declared(manifest, document)
    if out["plugins"] is None:
        del out["plugins"]
    return out


def _plugin(manifest: ManifestView, name: str, locked: dict[str, Any]) -> dict[str, Any]:
    """A plugin as reviewed: its pin, `enable`, and what it contributes of the enabled kinds
    (agentstack.plugins.expand); a kind left out renders nothing and is not shown."""
    from agentstack.plugins import shown

    plugin = manifest.plugins[name]
    view: dict[str, Any] = copy_json(locked)
    if plugin.enable is not None:
        view["enable"] = list(plugin.enable)
    view["components"] = shown(view["components"], plugin.enable)
    return view


def project_consent(
    root: Path, *, verify_git: bool = False
) -> tuple[ManifestView, dict[str, Any], dict[str, Any], str]:
    """(manifest view, fresh lock, consent document, consent digest) of the project at `root`.

    With a manifest whose bytes this agentstack validated before, nothing here imports pydantic:
    the view comes from the manifest cache (`agentstack.manifest.view`)."""
    root = root.resolve()  # the stat cache is keyed by absolute paths
    if verify_git:
        return _project_consent(root, verify_git=True)
    import agentstack.lock.relock as relock

    # The lock proved fresh by its re-lock record, and the document kept for exactly these
    # manifest and lock bytes (agentstack.lock.relock, "the kept consent entry"): no resolution.
    proved, kept = relock.consent_state(str(root))
    if kept is not None:
        found = _from_kept(kept)
        if found is not None:
            return found
    # In full; a record is written only when none proves the lock fresh already.
    recorder = None if proved else relock.Recorder(str(root))
    return _project_consent(root, verify_git=False, recorder=recorder, keep=True)


def _project_consent(
    root: Path, *, verify_git: bool, recorder: Recorder | None = None, keep: bool = False
) -> tuple[ManifestView, dict[str, Any], dict[str, Any], str]:
    from agentstack.lock.resolve import dumps_lock, fresh_lock
    from agentstack.manifest.load import read_manifest, view_of_bytes

    source = read_manifest(root)
    manifest = view_of_bytes(source)
    lock = fresh_lock(root, manifest, verify_git=verify_git, recorder=recorder)
    document = consent_document(manifest, lock)
    digest = consent_digest(document)
    if keep:
        import agentstack.lock.relock as relock

        fields: dict[str, object] = {
            "view": manifest.data,
            "view_digest": manifest.digest,
            "lock_data": lock,
            "document": document,
            "digest": digest,
        }
        relock.keep_consent(str(root), source, dumps_lock(lock).encode("utf-8"), fields)
    return manifest, lock, document, digest


def _from_kept(
    kept: dict[str, Any],
) -> tuple[ManifestView, dict[str, Any], dict[str, Any], str] | None:
    """A kept entry as `project_consent`'s answer. Its fields were computed together and are
    covered by the entry's checksum, and the entry is read only when it is the user's own (as the
    re-lock record is): the digest is not computed again (at 10,000 pinned files that alone is
    ~30 ms, a third of the work the entry saves)."""
    view, view_digest, lock = kept.get("view"), kept.get("view_digest"), kept.get("lock_data")
    document, digest = kept.get("document"), kept.get("digest")
    if not (
        isinstance(view, dict) and isinstance(view_digest, str) and isinstance(lock, dict)
        and isinstance(document, dict) and isinstance(digest, str)
    ):  # fmt: skip
        return None
    return ManifestView(view, view_digest), lock, document, digest


# ------------------------------------------------------------------------------- the digest
#
# The digest is taken over `digest_form(document)`: the document without what carries no
# information of its own (ADR 0006, "Schema evolution"):
# - a key whose value is its field's default (`[]`, `{}`, `30`, `"*"`, `true`...): an optional field
#   added in a later version is therefore invisible to the digest until it is set;
# - risk facts (`risks`): they are derived from the other fields by this version of agentstack, and
#   the review recomputes them; a better analysis must not force every user to re-review.
# Defaults are frozen once released: changing one would change a meaning without a digest change,
# so a new default needs a new field (or a new `consent` format).

_SHOWN_ELSEWHERE = frozenset({"pin"})  # declared fields the lock already shows as code roots
_DERIVED = frozenset({"risks"})
_EACH = EACH


_Spec = Spec  # defaults for the keys of one table (agentstack.manifest.view.Spec)


def _model_spec(model: type[BaseModel]) -> _Spec:
    from pydantic import BaseModel

    spec = _Spec()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            spec[name] = _model_spec(annotation)
            continue
        args: tuple[Any, ...] = tuple(getattr(annotation, "__args__", ()))
        value_type = args[1] if len(args) == 2 else None
        if (
            getattr(annotation, "__origin__", None) is dict
            and isinstance(value_type, type)
            and issubclass(value_type, BaseModel)
        ):
            spec[name] = _Spec({_EACH: _model_spec(value_type)})
            continue
        if not field.is_required():
            spec[name] = _json(field.get_default(call_default_factory=True))
    return spec


def _finish(spec: _Spec) -> _Spec:
    """The document's defaults from the manifest's (plus the few places where the document shows
    a default in its own words)."""
    spec["servers"][_EACH].update(cwd=".", files=[], roots=[])
    spec["hooks"][_EACH].update(matcher="*", files=[], roots=[])
    for section in ("skills", "instructions"):  # pinned by the lock: nothing there is a default
        spec.pop(section, None)
    return spec


@cache
def _document_spec(manifest_model: type[BaseModel]) -> _Spec:
    """The defaults of the document, derived from the manifest's models."""
    return _finish(_model_spec(manifest_model))


# The defaults of this version's `Manifest`, written out so that a digest needs no pydantic (the
# models are imported only to validate a manifest). A test checks that they equal what the models
# say; after changing a default or a field, regenerate them with
#   python -c "from agentstack.consent.document import write_manifest_defaults; write_manifest_defaults()"
# (and remember that a released default is frozen: see above).


def manifest_defaults() -> dict[str, Any]:
    """The encoded defaults of this version's `Manifest` models (imports pydantic)."""
    from agentstack.manifest.model import Manifest

    return encode_spec(_model_spec(Manifest))


def write_manifest_defaults() -> None:
    import pprint
    from pathlib import Path

    text = pprint.pformat(manifest_defaults(), indent=1, width=99, sort_dicts=True)
    target = Path(__file__).resolve().parents[1] / "manifest" / "_defaults.py"
    target.write_text(
        '"""The defaults of the manifest models (generated: agentstack.consent.document.'
        'write_manifest_defaults)."""\n\n'
        "from typing import Any\n\n# fmt: off\n"
        f"DEFAULTS: dict[str, Any] = {text}\n",
        encoding="utf-8",
    )


@cache
def _default_spec() -> _Spec:
    return _finish(manifest_spec())


def _prune(value: Any, spec: _Spec) -> Any:
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key in _DERIVED:
            continue
        default = spec.get(_EACH, spec.get(key, _MISSING))
        if isinstance(default, _Spec):
            pruned = _prune(item, default)
            if pruned == {} and _EACH not in spec and item is not None:
                continue  # a sub-table holding only defaults is its default
            out[key] = pruned
        elif default is not _MISSING and canonical_bytes(item) == canonical_bytes(default):
            continue
        else:
            out[key] = item
    return out


_MISSING = object()


def digest_form(
    document: dict[str, Any], manifest_model: type[BaseModel] | None = None
) -> dict[str, Any]:
    """The part of the consent document the digest covers (see above). `manifest_model` is the
    manifest model whose defaults apply (this version's `Manifest` unless a test says otherwise)."""
    spec = _default_spec() if manifest_model is None else _document_spec(manifest_model)
    return _prune(document, spec)  # type: ignore[no-any-return]


def consent_digest(document: dict[str, Any], manifest_model: type[BaseModel] | None = None) -> str:
    return digest_of(digest_form(document, manifest_model))


from pathlib import Path  # noqa: E402 - here with current(), which alone needs it


def current(root: Path) -> tuple[ManifestView, dict[str, Any], dict[str, Any], str]:
    """The pipeline every command starts from: the project's manifest (as validated plain data),
    its lock (refused when stale: `StaleLock`), the consent document both make, and that
    document's digest. An unchanged manifest is not validated again (`project_consent`)."""
    return project_consent(root)


def current_validated(root: Path) -> tuple[Manifest, dict[str, Any], dict[str, Any], str]:
    """`current`, with the manifest as its validated pydantic models (for the code that needs the
    models themselves, such as the sandbox policy); same lock, document and digest."""
    from agentstack.lock.resolve import fresh_lock
    from agentstack.manifest.load import load_manifest

    manifest = load_manifest(root)
    lock = fresh_lock(root, manifest)
    document = consent_document(manifest, lock)
    return manifest, lock, document, consent_digest(document)

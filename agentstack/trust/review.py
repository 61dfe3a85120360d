"""Trust decisions: which (project realpath, consent digest) pairs the user has consented to.

The only sources of trust are user-level: the hash-chained log in $AGENTSTACK_HOME, and — for CI —
digests passed explicitly (`--trust-digest` or AGENTSTACK_TRUSTED_DIGESTS). Nothing is ever read
from the project for this (the mise GHSA-436v-8fw5-4mj8 bug), and `CI=true` alone trusts nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from agentstack import layout
from agentstack.canonical import canonical_bytes, is_digest
from agentstack.errors import InvalidInput
from agentstack.paths import agentstack_home, ensure_private_dir
from agentstack.trust.record import TrustRecord, Value
from agentstack.trust.store import TrustLog

TRUSTED_DIGESTS_ENV = "AGENTSTACK_TRUSTED_DIGESTS"

TrustSource = Literal["log", "env", "flag"]


class TrustState(Value):
    """The answer to "is this digest trusted for this project?", with why."""

    __slots__ = ("moved_from", "source", "state", "trusted_on")
    _fields = ("state", "source", "moved_from", "trusted_on")
    state: Literal["trusted", "revoked", "untrusted", "superseded"]
    source: TrustSource | None
    moved_from: str | None  # the digest was trusted, but for a project at another path
    # "superseded": the digest was trusted, but a later trust for the project replaced it; going
    # back to it is a new review (returning to an older setup is a change like any other).
    trusted_on: str | None

    def __init__(
        self,
        *,
        state: Literal["trusted", "revoked", "untrusted", "superseded"],
        source: TrustSource | None = None,
        moved_from: str | None = None,
        trusted_on: str | None = None,
    ) -> None:
        self._set(state=state, source=source, moved_from=moved_from, trusted_on=trusted_on)

    @property
    def trusted(self) -> bool:
        return self.state == "trusted"


class TrustStore:
    """The user's trust log plus the consent documents that were trusted."""

    def __init__(self, home: Path | None = None, *, explicit: list[str] | None = None) -> None:
        self.home = home if home is not None else agentstack_home()
        self.log = TrustLog(self.home)
        self.explicit = list(explicit or [])

    # ---------------------------------------------------------------- explicit (CI) trust
    def explicit_digests(self) -> tuple[list[str], TrustSource | None]:
        if self.explicit:
            return self.explicit, "flag"
        raw = os.environ.get(TRUSTED_DIGESTS_ENV, "").split()
        self.check_explicit(raw, TRUSTED_DIGESTS_ENV)  # a typo must not pass silently
        return (raw, "env") if raw else ([], None)

    @staticmethod
    def check_explicit(values: list[str], origin: str) -> None:
        for value in values:
            if not is_digest(value):
                raise InvalidInput(
                    f"{origin}: {value!r} is not a consent digest (b3:<64 hex>)",
                    hint="copy it from 'agentstack digest'",
                )

    # ---------------------------------------------------------------- queries
    def state(self, project: Path, digest: str) -> TrustState:
        """Trust of (project realpath, digest). Raises TrustLogTampered on a damaged log."""
        realpath = str(project.resolve())
        logged = self.log.state_for(realpath, digest)
        if logged == "revoked":
            return TrustState(state="revoked", source="log")
        explicit, source = self.explicit_digests()
        if logged == "trusted":
            last = self.log.last_trusted(realpath)
            if last is None or last.digest == digest:
                return TrustState(state="trusted", source="log")
            if digest in explicit:
                return TrustState(state="trusted", source=source)
            return TrustState(state="superseded", trusted_on=self._trusted_on(realpath, digest))
        if digest in explicit:
            return TrustState(state="trusted", source=source)
        moved_from = self._trusted_elsewhere(realpath, digest)
        return TrustState(state="untrusted", moved_from=moved_from)

    def _trusted_elsewhere(self, realpath: str, digest: str) -> str | None:
        for record in reversed(self.log.records()):
            if (
                record.digest == digest
                and record.project
                and record.project != realpath
                and (self.log.state_for(record.project, digest) == "trusted")
            ):
                return record.project
        return None

    def _trusted_on(self, realpath: str, digest: str) -> str | None:
        for record in reversed(self.log.records()):
            if record.project == realpath and record.digest == digest and record.action != "revoke":
                return record.time
        return None

    def trusted_digests(self, project: Path) -> list[str]:
        """Every digest still trusted for the project (the current one and superseded ones)."""
        return self.log.trusted_digests(str(project.resolve()))

    def last_trusted(self, project: Path) -> TrustRecord | None:
        return self.log.last_trusted(str(project.resolve()))

    # ---------------------------------------------------------------- consent documents
    def consent_path(self, digest: str) -> Path:
        if not is_digest(digest):
            raise InvalidInput(f"{digest!r} is not a consent digest")
        return Path(layout.consent_file(str(self.home), digest))

    def save_consent(self, digest: str, document: dict[str, Any]) -> Path:
        """Store what was reviewed, so a later change is shown as a diff against it."""
        path = self.consent_path(digest)
        from agentstack.fsutil import write_atomic

        ensure_private_dir(path.parent)
        write_atomic(path, canonical_bytes(document), 0o600)
        return path

    def load_consent(self, digest: str) -> dict[str, Any] | None:
        """The stored document, only if it still hashes to its digest."""
        from agentstack.canonical import CanonicalError
        from agentstack.consent.document import consent_digest

        try:
            document = json.loads(self.consent_path(digest).read_bytes())
            if not isinstance(document, dict) or consent_digest(document) != digest:
                return None
        except (OSError, ValueError, CanonicalError):  # damaged: as good as absent
            return None
        return document

    # ---------------------------------------------------------------- changes
    def trust(
        self, project: Path, digest: str, document: dict[str, Any], lock_hash: str
    ) -> TrustRecord:
        self.save_consent(digest, document)
        return self.log.append("trust", str(project.resolve()), digest, lock_hash)

    def revoke(self, project: Path, digest: str) -> TrustRecord:
        return self.log.append("revoke", str(project.resolve()), digest)


def current_trusts(records: list[TrustRecord]) -> list[TrustRecord]:
    """The latest trusting record of every (project, digest) pair that is not revoked since."""
    latest: dict[tuple[str, str], TrustRecord] = {}
    for record in records:
        if record.action in ("trust", "revoke") and record.project:
            latest[(record.project, record.digest)] = record
    return [r for r in latest.values() if r.action == "trust"]


# -------------------------------------------------------------------- the review
# The rules of every trust decision, whoever asks (`trust`, `trust --apply`, `quarantine release
# --trust`): what is reviewed (the whole consent view the first time, the diff against the last
# trusted digest later), and that high-risk findings need an explicit acceptance.

ACCEPT_WORD = "accept-risk"


class Review:
    """What a trust decision for (project, digest) is about."""

    __slots__ = ("before", "digest", "document", "previous", "result", "root", "state")

    def __init__(
        self,
        root: Path,
        document: dict[str, Any],
        digest: str,
        state: TrustState,
        previous: TrustRecord | None,  # the last trusted record of the project, if any
        before: dict[str, Any] | None,  # its stored consent document (None: a first review)
        result: Any,  # agentstack.consent.diff.ConsentDiff against `before`, risk findings first
    ) -> None:
        self.root, self.document, self.digest, self.state = root, document, digest, state
        self.previous, self.before, self.result = previous, before, result

    @property
    def first(self) -> bool:
        """No earlier trusted document to compare with: the whole consent view is reviewed."""
        return self.before is None

    @property
    def already_trusted(self) -> bool:
        """Trusted in the log already: nothing to review, nothing to record."""
        return self.state.trusted and self.state.source == "log"

    @property
    def high_risk(self) -> list[Any]:
        return list(self.result.high_risk)


def review(store: TrustStore, root: Path, document: dict[str, Any], digest: str) -> Review:
    """The review of `digest` for `root`: its trust state and the diff against the last trusted
    document (a return to a superseded setup is itself a finding)."""
    from agentstack.consent.diff import Finding, consent_diff

    state = store.state(root, digest)
    previous = store.last_trusted(root)
    before = store.load_consent(previous.digest) if previous is not None else None
    result = consent_diff(before, document)
    if state.state == "superseded":
        result.findings.insert(
            0,
            Finding(
                severity="medium",
                code="returns-to-earlier",
                item="project",
                message=f"returns to a setup you trusted on {state.trusted_on or 'an earlier date'}"
                ", which a later trust replaced",
            ),
        )
    return Review(root, document, digest, state, previous, before, result)


def require_acceptance(
    high: int,
    *,
    yes: bool,
    accept_risk: bool,
    interactive: bool,
    ask: Callable[[str], str],
    prompt_high: str,
    prompt_plain: str,
    refusal: str = "not trusted",
    new: str = "",
    high_declined: str = " (high-risk findings need the word accept-risk)",
) -> None:
    """The one acceptance rule: without --yes, ask on a terminal (high-risk findings need the
    word accept-risk, anything else a yes); with --yes, high-risk findings need --accept-risk.
    Raises Refused (nothing is recorded) otherwise."""
    from agentstack.errors import Refused

    if not yes:
        if not interactive:
            raise Refused(
                f"{refusal}: no terminal to ask on",
                hint="review the output above, then re-run with --yes"
                + (" --accept-risk" if high else ""),
            )
        if high:
            if ask(prompt_high).lower() != ACCEPT_WORD:
                raise Refused(f"{refusal}: declined{high_declined}")
        elif ask(prompt_plain).lower() not in {"y", "yes"}:
            raise Refused(f"{refusal}: declined")
    elif high and not accept_risk:
        raise Refused(
            f"{refusal}: {high} {new}high-risk finding(s) need explicit acceptance",
            hint="review them above, then re-run with --yes --accept-risk",
        )


def lock_hash(root: Path) -> str:
    from agentstack.canonical import b3
    from agentstack.manifest.view import LOCK_NAME

    return b3((root / LOCK_NAME).read_bytes())


def review_contents(root: Path, document: dict[str, Any]) -> Any:
    """The bytes a review shows: the files on disk now (checked against the lock), then the
    content store (what was trusted before)."""
    from agentstack.trust.contentstore import Contents, ContentStore, collect

    return Contents(ContentStore(), collect(root, document))


def keep_contents(store: TrustStore, contents: Any | None,
                  known: dict[str, dict[str, Any]] | None = None) -> None:
    """After a trust decision: keep the trusted files' bytes, drop what nothing trusted names.
    `known`: consent documents already in hand (digest -> document), not read back."""
    import contextlib

    from agentstack.trust.contentstore import ContentStore, keep_trusted

    content_store = contents.store if contents is not None else ContentStore()
    if contents is not None:
        content_store.put_all(contents.found, checked=True)  # `collect` checked every text
    with contextlib.suppress(OSError):  # a cache that cannot be pruned is only a cache
        keep_trusted(content_store, trusted_documents(store, known))


def trusted_documents(store: TrustStore,
                      known: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The consent documents the trust log still trusts, for every project (`known`: documents
    already in hand by digest, used instead of reading the stored copy)."""
    documents = []
    for found in current_trusts(store.log.records()):
        doc = (known or {}).get(found.digest) or store.load_consent(found.digest)
        if doc is not None:
            documents.append(doc)
    return documents


def record(store: TrustStore, reviewed: Review, contents: Any | None) -> TrustRecord:
    """Record trust in a reviewed digest (after `require_acceptance`) and keep the reviewed bytes.
    The guard's snapshot is apply's to write (`apply.snapshot.write_snapshot`): the `trust`
    command writes it right after, or `trust --apply`'s apply does."""
    done = store.trust(reviewed.root, reviewed.digest, reviewed.document, lock_hash(reviewed.root))
    keep_contents(store, contents, {reviewed.digest: reviewed.document})
    return done


def harness_notes(document: dict[str, Any]) -> list[str]:
    """What the trust review should say about the manifest's harnesses (an adapter's optional
    `review_note`), e.g. that a harness has no trust gate of its own."""
    from agentstack_adapters import load_adapters

    harnesses = list(document["project"]["harnesses"])
    adapters = load_adapters(harnesses)
    from agentstack.harnesses import NO_GUARD

    notes = [NO_GUARD.get(h) or getattr(adapters.get(h), "review_note", None) for h in harnesses]
    return [n for n in notes if isinstance(n, str) and n]

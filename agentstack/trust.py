"""Trust decisions: which (project realpath, consent digest) pairs the user has consented to.

The only sources of trust are user-level: the hash-chained log in $AGENTSTACK_HOME, and — for CI —
digests passed explicitly (`--trust-digest` or AGENTSTACK_TRUSTED_DIGESTS). Nothing is ever read
from the project for this (the mise GHSA-436v-8fw5-4mj8 bug), and `CI=true` alone trusts nothing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agentstack.canonical import canonical_bytes, is_digest
from agentstack.errors import InvalidInput
from agentstack.fsutil import write_atomic
from agentstack.paths import agentstack_home, ensure_private_dir
from agentstack.trustlog import TrustLog, TrustRecord

TRUSTED_DIGESTS_ENV = "AGENTSTACK_TRUSTED_DIGESTS"

TrustSource = Literal["log", "env", "flag"]


@dataclass(frozen=True, kw_only=True)
class TrustState:
    """The answer to "is this digest trusted for this project?", with why."""

    state: Literal["trusted", "revoked", "untrusted", "superseded"]
    source: TrustSource | None = None
    moved_from: str | None = None  # the digest was trusted, but for a project at another path
    # "superseded": the digest was trusted, but a later trust for the project replaced it; going
    # back to it is a new review (returning to an older setup is a change like any other).
    trusted_on: str | None = None

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
        return self.home / "consents" / f"{digest.replace(':', '-')}.json"

    def save_consent(self, digest: str, document: dict[str, Any]) -> Path:
        """Store what was reviewed, so a later change is shown as a diff against it."""
        path = self.consent_path(digest)
        ensure_private_dir(path.parent)
        write_atomic(path, canonical_bytes(document), 0o600)
        return path

    def load_consent(self, digest: str) -> dict[str, Any] | None:
        """The stored document, only if it still hashes to its digest."""
        from agentstack.canonical import CanonicalError
        from agentstack.consent import consent_digest

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

"""Bytes for rendering, read back from where the lock pinned them and checked against the lock.

A skill file or instruction that no longer matches its locked digest is never rendered: the
rendered config must be exactly what was trusted.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from agentstack.canonical import b3
from agentstack.errors import StaleLock


class Materializer:
    def __init__(self, root: Path, consent: dict[str, Any]) -> None:
        self.root = root
        self.consent = consent
        self._repos: dict[str, Any] = {}

    @staticmethod
    def _verify(data: bytes, entry: dict[str, Any], where: str) -> bytes:
        if b3(data) != entry["digest"]:
            raise StaleLock(
                f"{where} changed since it was locked and trusted",
                hint="run 'agentstack lock', review with 'agentstack trust'",
            )
        return data

    def project_file(self, rel: str) -> bytes:
        entry = next((e for e in self.consent["instructions"] if e["path"] == rel), None)
        if entry is None:
            raise StaleLock(f"{rel} is not a locked instruction file")
        return self._verify(self._read_local(self.root / rel, rel), entry, rel)

    @staticmethod
    def _read_local(path: Path, where: str) -> bytes:
        try:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                return os.fsencode(os.readlink(path))
            return path.read_bytes()
        except OSError as exc:
            raise StaleLock(
                f"{where}: {exc.strerror}", hint="run 'agentstack lock' and review the change"
            ) from None

    def skill_file(self, name: str, entry: dict[str, Any]) -> bytes:
        skill = self.consent["skills"][name]
        where = f"skills.{name}: {entry['path']}"
        if skill["source"] == "path":
            data = self._read_local(self.root / skill["path"] / entry["path"], where)
            return self._verify(data, entry, where)
        return self._verify(self._git_blob(skill, entry["path"]), entry, where)

    def _git_blob(self, skill: dict[str, Any], rel: str) -> bytes:
        from agentstack import gitsource
        from agentstack.paths import agentstack_cache

        url = skill["git"]
        repo = self._repos.get(url)
        if repo is None:
            # Makes sure the mirror holds the pinned commit, fetching only if it does not.
            gitsource.read_pinned(agentstack_cache(), url, skill["commit"], skill.get("subdir"))
            repo = gitsource.open_mirror(agentstack_cache(), url)
            self._repos[url] = repo
        tree = repo.commit(skill["commit"]).tree
        if skill.get("subdir"):
            tree = tree / skill["subdir"]
        blob = tree / rel
        data: bytes = blob.data_stream.read()
        return data

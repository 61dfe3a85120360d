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
        self._checked: set[str] = set()

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

    def plugin_file(self, name: str, entry: dict[str, Any]) -> bytes:
        """A pinned file of plugin `name`, verified against the lock. The first read of a plugin
        also derives what it contributes again from the verified bytes and refuses when that is
        not what the consent document says (a lock entry edited by hand)."""
        plugin = self.consent["plugins"][name]
        if name not in self._checked:
            self._checked.add(name)
            self._check_plugin(name, plugin)
        return self._plugin_bytes(name, plugin, entry)

    def _plugin_bytes(self, name: str, plugin: dict[str, Any], entry: dict[str, Any]) -> bytes:
        where = f"plugins.{name}: {entry['path']}"
        if plugin["source"] == "path":
            data = self._read_local(self.root / plugin["path"] / entry["path"], where)
            return self._verify(data, entry, where)
        return self._verify(self._git_blob(plugin, entry["path"]), entry, where)

    def _check_plugin(self, name: str, plugin: dict[str, Any]) -> None:
        from agentstack import plugins

        by_path = {e["path"]: e for e in plugin["files"]}

        def read(rel: str) -> bytes:
            if rel not in by_path:
                raise plugins.PluginError(rel, "is not pinned")
            return self._plugin_bytes(name, plugin, by_path[rel])

        try:
            derived = plugins.expand(plugin["harness"], plugin["files"], read)
        except plugins.PluginError as exc:
            raise StaleLock(f"plugins.{name}: {exc}", hint="run 'agentstack lock'") from None
        if plugins.shown(derived, plugin.get("enable")) != plugin["components"]:
            raise StaleLock(
                f"plugins.{name}: what the plugin contributes is not what the lock says",
                hint="run 'agentstack lock --check', then 'agentstack lock' and review",
            )

    def _git_blob(self, skill: dict[str, Any], rel: str) -> bytes:
        import agentstack.lock.gitsource as gitsource
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

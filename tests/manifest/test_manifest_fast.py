"""The fast manifest validator (agentstack.manifest.fast) against the models, its reference.

1. Differential: on every manifest one edit away from a valid one (each leaf across a length
   bound, a type, a pattern or a rule; each key removed; an unknown key in each table), and on
   generated manifests (valid, near-valid and adversarial: wrong types, booleans for integers,
   extra keys, bad names, expansions, Unicode, huge values): a fast accept means the models accept
   with the identical dump and digest; whatever the models reject, the fast path does not accept,
   and the user sees the models' exact problems. Every manifest the models accept with TOML's own
   types is accepted by the fast path (so the fast path is the one taken).
2. Its tables follow the models: field names, order, types, defaults and validators, compared
   with the models themselves, so a model change the fast path does not know fails here.
3. A fresh project's `lock` and `digest` import no pydantic; an invalid manifest still gets the
   models' error and exit code.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import os
import random
import subprocess
import sys
import textwrap
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

import agentstack.manifest.fast as manifestfast
import agentstack.manifest.load as load
import agentstack.manifest.rules as manifestrules
from agentstack.errors import ManifestInvalid
from agentstack.manifest.load import view_of_bytes
from agentstack.manifest.model import Manifest, parse_manifest
from agentstack.manifest.view import ManifestView
from tests.conftest import EXAMPLES, REPO, make_project
from tests.consent.test_digest_properties import emit
from tests.harness.deadline import scaled

# ============================================================================ the generators

WRONG_TYPES: list[Any] = [
    True, False, 0, 1, 30, 600, 601, 65535, 65536, -1, 2**63, 2**64 + 1, -(2**70), 1.5, 30.0,
    float("inf"), None, [], {}, [1], ["a"], {"a": 1}, {"name": "p"}, "", "x", "30", "true",
    dt.date(2020, 1, 2), dt.datetime(2020, 1, 2, 3, 4, 5), dt.time(1, 2, 3),
]  # fmt: skip

ADVERSARIAL: list[str] = [
    "", " ", "\n", "a\n", "p\n", "a\x00", "a\tb", "${HOME}", "$HOME", "$1", "{env:X}", "${env:X}",
    "${input:x}", "{ENV:x}", "$", "$$", "a$", "..", "../x", "a/../b", "/abs", "a\\b", ".", "./",
    "./a", "a/./b", "a//b", "a/", "é", "ǅ", "\u212a", "\u0130", "🦀",
    "A", "_", "-a", "a b",
    "secret:", "secret:A", "secret:a b", "secret:a\n", "secret:${X}", "http://", "http://h",
    "https://u:p@h", "https://u@h", "https://h/x?q", "https://h#f", "ftp://h", "https://[::1]:1",
    "file:x", "file:///x", "file://h/x", "git@h:o/r", "git@h:/r", "git@h:o/r\n", "ssh://h/r",
    "v1", "v1^0", "main~1", "HEAD", "@", "@{u}", "a..b", "x.lock", "abc1", "ABCD", "a" * 40,
    "0" * 40, "0" * 40 + "\n", "A" * 40, "refs/tags/v1", "*.example.com", "example.com\n",
    "[::1]", "127.0.0.1", "(", "[a-", "a{99999999999}", "claude-code",
    "codex", "Codex", "claude-code\n", "PreToolUse", "pretooluse", "Authorization", "X-Key",
    "a:b", "a\r", "\u2028", "\ud800", "a\udfff",
]  # fmt: skip

# Long ones are built when drawn (a strategy's repr stays small).
LONG = [("a", 64), ("a", 65), ("x", 1024), ("x", 1025), ("x", 8192), ("x", 8193), ("é", 8192),
        ("🦀", 8192), ("🦀", 8193), ("()", 300), ("(", 3000), ("a/", 600)]  # fmt: skip

text = st.text(max_size=12)
strings = st.one_of(
    st.sampled_from(ADVERSARIAL), text, st.sampled_from(LONG).map(lambda p: p[0] * p[1])
)
junk = st.one_of(st.sampled_from(WRONG_TYPES), strings)


def mixed(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly `good`, sometimes adversarial or of the wrong type."""
    return st.one_of(good, good, good, junk)


name = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,8}", fullmatch=True)
env_name = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
header_name = st.sampled_from(["Authorization", "X-Api-Key", "x_y", "a!#$%&'*+.^_`|~-"])
rel_path = st.from_regex(r"[a-z]{1,4}(/[a-z.]{1,4}){0,2}", fullmatch=True)
secret_ref = name.map(lambda n: "secret:" + n)
plain_text = st.text(
    alphabet=st.characters(blacklist_characters="$\x00", blacklist_categories=["Cs"]), max_size=10
)
value_source = st.one_of(plain_text, secret_ref)
full_commit = st.from_regex(r"[0-9a-f]{40}", fullmatch=True)
rev = st.one_of(full_commit, st.sampled_from(["v1", "main", "refs/tags/v1.2", "release/1"]))
git_url = st.sampled_from(
    ["https://example.com/o/r.git", "git@example.com:o/r.git", "file:///srv/r.git",
     "ssh://git@h/r", "http://h/r", "git+ssh://h/r"]
)  # fmt: skip
url = st.sampled_from(["https://api.example.com/mcp", "http://127.0.0.1:8080/x", "https://h"])
domain = st.sampled_from(["example.com", "*.example.com", "a-b.c", "127.0.0.1", "[::1]", "x"])
harness = st.sampled_from(manifestrules.HARNESSES)
event = st.sampled_from(manifestrules.HOOK_EVENTS)


def lists(item: st.SearchStrategy[Any], **kw: Any) -> st.SearchStrategy[Any]:
    return mixed(st.lists(mixed(item), max_size=3, **kw))


def dicts(key: st.SearchStrategy[Any], value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return mixed(st.dictionaries(st.one_of(key, key, key, strings), value, max_size=3))


def table(
    required: dict[str, st.SearchStrategy[Any]], optional: dict[str, st.SearchStrategy[Any]]
) -> st.SearchStrategy[dict[str, Any]]:
    """A table of these fields; now and then with an unknown key or without a required one."""
    known = list(required) + list(optional)
    extra = st.dictionaries(
        st.one_of(st.sampled_from([k + "s" for k in known] + ["bogus", "Name"]), text),
        junk,
        max_size=1,
    )
    base = st.fixed_dictionaries(required, optional=optional)

    def combine(parts: tuple[dict[str, Any], dict[str, Any], int]) -> dict[str, Any]:
        data, more, roll = parts
        if roll == 0:
            data = {**data, **{k: v for k, v in more.items() if k not in data}}
        elif roll == 1 and data:
            data = dict(list(data.items())[1:])
        return data

    return st.tuples(base, extra, st.integers(0, 9)).map(combine)


passthrough_value = st.recursive(
    st.one_of(st.booleans(), st.integers(), plain_text, st.sampled_from(["${X}", "{env:Y}"])),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["model", "theme", "size", "path", "Ünï"]), inner,
                        max_size=3),
    ),
    max_leaves=6,
)  # fmt: skip

project = table({"name": mixed(name)}, {"harnesses": lists(harness)})
stdio_server = table(
    {"command": mixed(st.sampled_from(["node", "uvx", "./bin/x", "python3"]))},
    {
        "args": lists(plain_text),
        "env": dicts(env_name, mixed(value_source)),
        "cwd": mixed(rel_path),
        "pin": lists(rel_path),
        "headers": dicts(header_name, mixed(value_source)),
        "url": mixed(url),
    },
)
remote_server = table(
    {"url": mixed(url)},
    {"headers": dicts(header_name, mixed(value_source)), "command": mixed(plain_text),
     "args": lists(plain_text)},
)  # fmt: skip
local_skill = table({"path": mixed(rel_path)}, {"rev": mixed(rev), "git": mixed(git_url)})
git_skill = table({"git": mixed(git_url), "rev": mixed(rev)}, {"subdir": mixed(rel_path)})
plugin_harness = st.sampled_from(["claude-code", "codex", "gemini-cli", "opencode", "Codex"])
component = st.sampled_from(["hooks", "servers", "skills", "agents", "commands", "instructions",
                             "scripts"])
plugin = table(
    {"harness": mixed(plugin_harness)},
    {"path": mixed(rel_path), "git": mixed(git_url), "rev": mixed(rev),
     "subdir": mixed(rel_path), "enable": lists(component)},
)
hook = table(
    {"event": mixed(event)},
    {
        "matcher": mixed(st.sampled_from(["Bash", "Edit|Write", ".*", "mcp__.*"])),
        "command": lists(plain_text),
        "script": mixed(rel_path),
        "args": lists(plain_text),
        "timeout": mixed(st.integers(-5, 700)),
        "pin": lists(rel_path),
    },
)
settings_table = table(
    {},
    {
        "permissions": table(
            {}, {"allow": lists(plain_text), "deny": lists(plain_text), "ask": lists(plain_text)}
        ),
        "passthrough": dicts(harness, mixed(st.dictionaries(st.text(max_size=6),
                                                            passthrough_value, max_size=3))),
    },
)  # fmt: skip
credential = table(
    {"upstream": mixed(url), "secret": mixed(name), "env": mixed(env_name)},
    {"header": mixed(header_name), "base_url_env": mixed(env_name)},
)
sandbox = table(
    {},
    {
        "enabled": mixed(st.booleans()),
        "read_dirs": lists(plain_text),
        "write_dirs": lists(plain_text),
        "read_files": lists(plain_text),
        "write_files": lists(plain_text),
        "env": lists(env_name),
        "network": table(
            {},
            {"block": mixed(st.booleans()), "allow_domains": lists(domain),
             "localhost_ports": lists(st.integers(-1, 70000))},
        ),
        "credentials": dicts(name, credential),
    },
)  # fmt: skip
manifests = table(
    {"project": mixed(project)},
    {
        "servers": dicts(name, st.one_of(stdio_server, remote_server)),
        "skills": dicts(name, st.one_of(local_skill, git_skill)),
        "instructions": table({}, {"files": lists(rel_path)}),
        "hooks": dicts(name, hook),
        "plugins": dicts(name, plugin),
        "settings": settings_table,
        "sandbox": sandbox,
    },
)


@st.composite
def near_valid(draw: st.DrawFn) -> Any:
    """A manifest the models accept, then zero to two edits anywhere in it."""
    raw = draw(valid_manifests)
    for _ in range(draw(st.integers(0, 2))):
        raw = _edit(raw, draw)
    return raw


def _tweaks(value: Any) -> list[Any]:
    """Values next to `value`: across a length bound, a type, a pattern, a rule."""
    if type(value) is bool:
        return [int(value), not value, "true", [value]]
    if type(value) is int:
        return [True, False, value + 1, value - 1, -value, 0, 1, 600, 601, 65535, 65536,
                float(value), str(value), 2**64]  # fmt: skip
    if type(value) is str:
        return [
            value + "\n", "\n" + value, value + "\r", value.upper(), value + " ", "", value + "é",
            value + "$X", value + "${X}", value + "{env:X}", value + "\x00", value + "\ud800",
            "/" + value, "../" + value, value + "/..", value + "\\", "./", ".", value + "/",
            value.ljust(64, "a"), value.ljust(65, "a"), value.ljust(1024, "a"),
            value.ljust(1025, "a"), value.ljust(8192, "a"), value.ljust(8193, "a"),
            value.ljust(8193, "é"), value.ljust(8192, "🦀"), value.ljust(1024, "🦀"),
            value.ljust(1025, "🦀"), value + "@{u}", value + "^0", value[:-1], value[1:], [value],
        ]  # fmt: skip
    if type(value) is list:
        return [None, {}, [value], tuple(value)]
    return [None, [], [value]]


def _edit(raw: Any, draw: st.DrawFn) -> Any:
    raw = copy.deepcopy(raw)
    node = raw
    while True:
        if isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node)))
            if isinstance(node[key], dict | list) and node[key] and draw(st.integers(0, 4)):
                node = node[key]
                continue
            action = draw(st.integers(0, 4))
            if action == 0:
                node[key] = draw(junk)
            elif action == 1:
                del node[key]
            elif action == 2:
                node[
                    draw(st.one_of(strings, st.sampled_from(["command", "url", "rev", "pin"])))
                ] = draw(junk)
            else:
                node[key] = draw(st.sampled_from(_tweaks(node[key])))
            return raw
        if isinstance(node, list) and node:
            index = draw(st.integers(0, len(node) - 1))
            if isinstance(node[index], dict | list) and node[index] and draw(st.integers(0, 4)):
                node = node[index]
                continue
            action = draw(st.integers(0, 3))
            if action == 0:
                node[index] = draw(junk)
            elif action == 1:
                node.append(copy.deepcopy(node[index]))  # a duplicate
            elif action == 2:
                del node[index]
            else:
                node[index] = draw(st.sampled_from(_tweaks(node[index])))
            return raw
        return raw


def _accepted(raw: Any) -> bool:
    try:
        Manifest.model_validate(raw)
    except Exception:
        return False
    return True


def _valid_table(
    required: dict[str, st.SearchStrategy[Any]], optional: dict[str, st.SearchStrategy[Any]]
) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(required, optional=optional)


def _few(item: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    return st.lists(item, max_size=3, unique=True)


def _map(key: st.SearchStrategy[str], value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.dictionaries(key, value, max_size=3)


_VALID_STDIO = _valid_table(
    {"command": st.sampled_from(["node", "uvx", "./bin/x"])},
    {"args": _few(plain_text), "env": _map(env_name, value_source), "cwd": rel_path,
     "pin": _few(rel_path)},
)  # fmt: skip
_VALID_REMOTE = _valid_table({"url": url}, {"headers": _map(header_name, value_source)})
_VALID_HOOK = st.one_of(
    _valid_table({"event": event, "command": st.lists(plain_text, min_size=1, max_size=3)},
                 {"matcher": st.sampled_from(["Bash", "Edit|Write"]), "timeout": st.integers(1, 600),
                  "pin": _few(rel_path)}),
    _valid_table({"event": event, "script": rel_path},
                 {"args": _few(plain_text), "timeout": st.integers(1, 600)}),
)  # fmt: skip
_VALID_PASSTHROUGH = _map(
    harness, _map(st.sampled_from(["model", "theme", "size", "Mode", "a_b"]), passthrough_value)
)
_VALID_CREDENTIAL = _valid_table(
    {"upstream": url, "secret": st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,8}", fullmatch=True),
     "env": env_name},
    {"header": header_name, "base_url_env": env_name},
)  # fmt: skip
valid_manifests = _valid_table(
    {"project": _valid_table({"name": name}, {"harnesses": _few(harness)})},
    {
        "servers": _map(name, st.one_of(_VALID_STDIO, _VALID_REMOTE)),
        "skills": _map(name, st.one_of(
            _valid_table({"path": rel_path}, {}),
            _valid_table({"git": git_url, "rev": rev}, {"subdir": rel_path}))),
        "instructions": _valid_table({}, {"files": _few(rel_path)}),
        "hooks": _map(name, _VALID_HOOK),
        "plugins": _map(name, st.one_of(
            _valid_table({"harness": st.sampled_from(["claude-code", "codex", "gemini-cli"]),
                          "path": rel_path}, {"enable": _few(component.filter(
                              lambda c: c != "scripts"))}),
            _valid_table({"harness": st.just("claude-code"), "git": git_url, "rev": rev},
                         {"subdir": rel_path}))),
        "settings": _valid_table({}, {
            "permissions": _valid_table({}, {"allow": _few(plain_text), "ask": _few(plain_text)}),
            "passthrough": _VALID_PASSTHROUGH}),
        "sandbox": _valid_table({}, {
            "enabled": st.booleans(), "read_dirs": _few(plain_text), "env": _few(env_name),
            "network": _valid_table({}, {"block": st.booleans(), "allow_domains": _few(domain),
                                         "localhost_ports": _few(st.integers(1, 65535))}),
            "credentials": _map(name, _VALID_CREDENTIAL)}),
    },
).filter(_accepted)  # fmt: skip


# ============================================================================ the differential


def _toml_typed(value: Any) -> bool:
    """Only what TOML produces (and the emitter writes): bool, int, str without a lone
    surrogate, lists, tables with str keys."""
    if type(value) in (bool, int):
        return True
    if type(value) is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if type(value) is list:
        return all(_toml_typed(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and _toml_typed(k) and _toml_typed(v) for k, v in value.items())
    return False


def _exact(value: Any) -> str:
    """Order- and type-exact form (`true` is not `1`, key order counts)."""
    return json.dumps(value, ensure_ascii=False)


stats: dict[str, int] = {"fast": 0, "models only": 0, "rejected": 0}


def check_differential(raw: Any, seed: int, *, toml: bool = True) -> None:
    fast = manifestfast.validated(copy.deepcopy(raw))
    try:
        model = Manifest.model_validate(copy.deepcopy(raw))
        reference = ManifestView.from_model(model)
    except ValidationError:
        model = None
    except Exception:  # a crash of the models' path (not from TOML): the fast path must not accept
        assert fast is None
        return
    if model is None:
        assert fast is None, f"the fast path accepted what the models reject: {raw!r}"
        stats["rejected"] += 1
    else:
        if fast is None:
            stats["models only"] += 1
            assert not _toml_typed(raw), f"the fast path refused a valid TOML manifest: {raw!r}"
        else:
            stats["fast"] += 1
            view = ManifestView.from_data(fast)
            assert _exact(view.data) == _exact(reference.data)
            assert view.data == reference.data
            assert view.digest == reference.digest
    if not toml or not _toml_typed(raw):
        return
    # The same manifest as TOML bytes, through the path every command takes.
    data = emit(raw, random.Random(seed)).encode()
    if model is None:
        with pytest.raises(ManifestInvalid) as direct:
            parse_manifest(data)
        with pytest.raises(ManifestInvalid) as viewed:
            view_of_bytes(data, cache=False)
        assert viewed.value.problems == direct.value.problems  # the models' own messages
    else:
        assert view_of_bytes(data, cache=False) == ManifestView.from_model(parse_manifest(data))


PROFILE: dict[str, Any] = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                           HealthCheck.data_too_large],
)  # fmt: skip


@settings(max_examples=300, **PROFILE)
@given(raw=st.one_of(manifests, near_valid()), seed=st.integers(0, 2**32))
def test_fast_accepts_only_what_the_models_accept_identically(raw: Any, seed: int) -> None:
    check_differential(raw, seed)


@pytest.mark.slow
@settings(max_examples=4000, **PROFILE)
@given(raw=st.one_of(manifests, near_valid(), valid_manifests), seed=st.integers(0, 2**32))
def test_fast_accepts_only_what_the_models_accept_identically_many(raw: Any, seed: int) -> None:
    check_differential(raw, seed)


def _neighbours(raw: Any) -> list[Any]:
    """Every manifest one edit away from `raw`: each leaf replaced by each of its tweaks, each key
    removed, an unknown key in each table, each list item duplicated or wrapped."""
    out: list[Any] = []

    def walk(node: Any, replace: Any) -> None:
        for tweak in _tweaks(node):
            out.append(replace(tweak))
        if isinstance(node, dict):
            for key in list(node):
                out.append(replace({k: v for k, v in node.items() if k != key}))
                walk(node[key], lambda v, key=key: replace({**node, key: v}))
            out.append(replace({**node, "bogus": 1}))
            out.append(replace({**node, "command": "x"}))
        elif isinstance(node, list):
            for index, item in enumerate(node):
                out.append(replace([*node, item]))
                walk(item, lambda v, i=index: replace([*node[:i], v, *node[i + 1 :]]))

    walk(raw, lambda v: v)
    return out


def _check_neighbourhood(raw: Any) -> None:
    for index, neighbour in enumerate(_neighbours(raw)):
        try:
            check_differential(neighbour, index, toml=index % 25 == 0)
        except AssertionError as exc:
            raise AssertionError(f"on {neighbour!r}") from exc


@settings(max_examples=25, **PROFILE)
@given(raw=valid_manifests)
def test_every_neighbour_of_a_valid_manifest(raw: Any) -> None:
    _check_neighbourhood(raw)


@pytest.mark.slow
@settings(max_examples=250, **PROFILE)
@given(raw=valid_manifests)
def test_every_neighbour_of_a_valid_manifest_many(raw: Any) -> None:
    _check_neighbourhood(raw)


@pytest.mark.parametrize("name", ["minimal", "full"])
def test_every_neighbour_of_the_examples(name: str) -> None:
    data = (EXAMPLES / name / "agentstack.toml").read_bytes()
    _check_neighbourhood(tomllib.loads(data.decode()))


@pytest.mark.parametrize(
    "raw",
    [
        {"project": {"name": "p", "harnesses": ["codex", "codex"]}},
        {"project": {"name": "p\n"}},
        {"project": {"name": "p"}, "servers": {"s\n": {"command": "x"}}},
        {"project": {"name": "p"}, "hooks": {"h": {"event": "Stop", "command": ["x"],
                                                   "timeout": True}}},
        {"project": {"name": "p"}, "hooks": {"h": {"event": "Stop", "command": ["x"],
                                                   "timeout": 30.0}}},
        {"project": {"name": "p"}, "sandbox": {"enabled": 1}},
        {"project": {"name": "p"}, "sandbox": {"network": {"localhost_ports": [True]}}},
        {"project": {"name": "p"}, "sandbox": {"network": {"allow_domains": ["example.com\n"]}}},
        {"project": {"name": "p"}, "servers": {"s": {"command": "x", "env": {"A": "secret:a\n"}}}},
        {"project": {"name": "p"}, "servers": {"s": {"command": "x", "env": {"A\n": "v"}}}},
        {"project": {"name": "p"}, "skills": {"s": {"git": "git@h:o/r\n", "rev": "v1"}}},
        {"project": {"name": "p"}, "skills": {"s": {"git": "git@h:o/r", "rev": "0" * 40 + "\n"}}},
        {"project": {"name": "p"}, "hooks": {"h": {"event": "Stop", "command": ["x"],
                                                   "matcher": "a{99999999999}"}}},
        {"project": {"name": "p"}, "hooks": {"h": {"event": "Stop", "command": ["x"],
                                                   "matcher": "(" * 5000}}},
        {"project": {"name": "p"}, "settings": {"passthrough": {"codex": {"model": 1.5}}}},
        {"project": {"name": "p"}, "settings": {"passthrough": {"codex": {"Ünï": 1}}}},
        {"project": {"name": "p"}, "settings": {"passthrough": {"codex": {"a": {"PATH": 1}}}}},
        {"project": {"name": "p"}, "settings": {"passthrough": {"codex": {"a": ["${X}"]}}}},
        {"project": {"name": "p"}, "sandbox": {"credentials": {"c": {
            "upstream": "https://h", "secret": "S\n", "env": "E"}}}},
        {"project": {"name": "p"}, "extra": {}},
    ],
)  # fmt: skip
def test_adversarial_cases_are_left_to_the_models(raw: dict[str, Any]) -> None:
    assert manifestfast.validated(raw) is None
    with pytest.raises(ValidationError):
        Manifest.model_validate(raw)


def test_big_integers_and_unicode_in_passthrough_dump_as_the_models_do() -> None:
    raw = {
        "project": {"name": "p"},
        "settings": {"passthrough": {"codex": {"model": "ü🦀", "n": 2**80, "m": -(2**63),
                                               "t": {"z": True, "a": [1, "x"]}}}},
    }  # fmt: skip
    check_differential(raw, 0)
    assert manifestfast.validated(raw) is not None


@pytest.mark.parametrize("name", ["minimal", "full"])
def test_the_examples_take_the_fast_path(name: str) -> None:
    data = (EXAMPLES / name / "agentstack.toml").read_bytes()
    fast = manifestfast.validated_bytes(data)
    assert fast is not None
    reference = ManifestView.from_model(parse_manifest(data))
    assert _exact(fast) == _exact(reference.data)
    assert ManifestView.from_data(fast).digest == reference.digest


def test_the_fast_view_is_not_shared_with_the_parsed_toml() -> None:
    raw = tomllib.loads('[project]\nname = "p"\n[servers.s]\ncommand = "x"\nargs = ["a"]\n')
    fast = manifestfast.validated(raw)
    assert fast is not None
    fast["servers"]["s"]["args"].append("b")
    assert raw["servers"]["s"]["args"] == ["a"]
    again = manifestfast.validated(raw)
    assert again is not None and again["project"]["harnesses"] == ["claude-code", "codex"]
    again["project"]["harnesses"].append("x")  # a default is a fresh copy each time
    assert manifestfast.validated(raw)["project"]["harnesses"] == ["claude-code", "codex"]  # type: ignore[index]


# ======================================================================= the tables vs the models


def _strip(annotation: Any) -> tuple[Any, list[Any]]:
    """(the bare type, its metadata) of an annotation, through Annotated layers."""
    metadata: list[Any] = []
    while typing.get_origin(annotation) is typing.Annotated:
        args = typing.get_args(annotation)
        annotation, metadata = args[0], [*metadata, *args[1:]]
    return annotation, metadata


def _describe_annotation(annotation: Any, metadata: list[Any]) -> Any:
    """A structural description of a model field's type, in the fast tables' terms."""
    bare, more = _strip(annotation)
    metadata = [*more, *metadata]
    origin = typing.get_origin(bare)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(bare) if a is not type(None)]
        assert type(None) in typing.get_args(bare) and len(options) in (1, 2)
        if len(options) == 2:  # `bool | Model | None`
            return ("optional", ("oneof", tuple(_describe_annotation(o, []) for o in options)),
                    _validators(metadata))
        return ("optional", _describe_annotation(options[0], []), _validators(metadata))
    if origin is typing.Literal:
        return ("choice", typing.get_args(bare))
    if origin is list:
        return ("list", _describe_annotation(typing.get_args(bare)[0], []), _validators(metadata))
    if origin is dict:
        key, value = typing.get_args(bare)
        return ("dict", _describe_annotation(key, []), _describe_annotation(value, []),
                _validators(metadata))  # fmt: skip
    if isinstance(bare, type) and issubclass(bare, BaseModel):
        return ("table", bare.__name__)
    if bare is str:
        constraints: dict[str, Any] = {}
        for item in metadata:
            for attr in ("min_length", "max_length", "pattern"):
                if getattr(item, attr, None) is not None:
                    constraints[attr] = getattr(item, attr)
        return ("str", constraints, _validators(metadata))
    if bare is int:
        bounds = {}
        for item in metadata:
            for attr in ("ge", "le"):
                if getattr(item, attr, None) is not None:
                    bounds[attr] = getattr(item, attr)
            for sub in getattr(item, "metadata", []):  # Field(ge=..., le=...)
                for attr in ("ge", "le"):
                    if getattr(sub, attr, None) is not None:
                        bounds[attr] = getattr(sub, attr)
        return ("int", bounds)
    if bare is bool:
        return ("bool",)
    if bare is typing.Any:
        return ("any",)
    raise AssertionError(f"a type the fast validator does not model: {bare!r}")


def _validators(metadata: list[Any]) -> tuple[Any, ...]:
    return tuple(m.func for m in metadata if type(m).__name__ == "AfterValidator")


def _describe_node(node: manifestfast.Node) -> Any:
    if isinstance(node, manifestfast.Optional):
        return ("optional", _describe_node(node.inner), tuple(node.checks))
    if isinstance(node, manifestfast.OneOf):
        return ("oneof", tuple(_describe_node(o) for o in node.options))
    if isinstance(node, manifestfast.Choice):
        return ("choice", node.values)
    if isinstance(node, manifestfast.ListOf):
        return ("list", _describe_node(node.item), ())
    if isinstance(node, manifestfast.DictOf):
        return ("dict", _describe_node(node.key), _describe_node(node.value), ())
    if isinstance(node, manifestfast.Table):
        return ("table", node.name)
    if isinstance(node, manifestfast.Str):
        constraints = {
            attr: getattr(node, attr)
            for attr in ("min_length", "max_length", "pattern")
            if getattr(node, attr) is not None
        }
        return ("str", constraints, tuple(node.checks))
    if isinstance(node, manifestfast.Int):
        return ("int", {"ge": node.ge, "le": node.le})
    if isinstance(node, manifestfast.Bool):
        return ("bool",)
    if isinstance(node, manifestfast.Plain):
        return ("any",)
    raise AssertionError(node)


def _node_validators(node: manifestfast.Node) -> tuple[Any, ...]:
    """The validators a field's node runs on the whole field (a model's field validators)."""
    if isinstance(node, manifestfast.Optional):
        return tuple(node.checks)
    if isinstance(node, manifestfast.ListOf | manifestfast.DictOf):
        return tuple(node.checks)
    return ()


def _models() -> dict[str, type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {}

    def walk(model: type[BaseModel]) -> None:
        found[model.__name__] = model
        for field in model.model_fields.values():
            stack = [field.annotation]
            while stack:
                item = stack.pop()
                if isinstance(item, type) and issubclass(item, BaseModel):
                    if item.__name__ not in found:
                        walk(item)
                else:
                    stack.extend(typing.get_args(item))

    walk(Manifest)
    return found


def test_the_fast_tables_are_generated_from_the_models() -> None:
    import agentstack.manifest.gen as manifestgen

    text = manifestgen.TARGET.read_text(encoding="utf-8")
    assert manifestgen.rewrite(text, manifestgen.render_block()) == text, (
        "agentstack/manifest/fast.py's tables are stale: run 'python -m agentstack.manifest.gen'"
    )


def test_the_fast_tables_cover_every_model() -> None:
    assert set(manifestfast.TABLES) == set(_models())


@pytest.mark.parametrize("model_name", sorted(_models()))
def test_the_fast_table_follows_the_model(model_name: str) -> None:
    """A field added, removed, reordered, retyped, constrained, defaulted or validated differently
    in a model, and not in agentstack/manifest/fast.py, fails here: teach the fast validator (the
    differential test then checks the result)."""
    model = _models()[model_name]
    table = manifestfast.TABLES[model_name]
    assert [f.name for f in table.fields] == list(model.model_fields)
    assert model.model_config.get("strict") is True
    assert model.model_config.get("extra") == "forbid"
    assert not model.model_config.get("populate_by_name")
    decorators = model.__pydantic_decorators__
    field_validators: dict[str, list[Any]] = {}
    for decorator in decorators.field_validators.values():
        assert decorator.info.mode == "after"
        for field_name in decorator.info.fields:
            field_validators.setdefault(field_name, []).append(decorator.func)
    for fast_field in table.fields:
        info = model.model_fields[fast_field.name]
        assert info.alias is None and info.validation_alias is None
        expected = _describe_annotation(info.annotation, list(info.metadata))
        got = _describe_node(fast_field.node)
        # Field validators of the model are the checks the fast node runs on the whole field.
        declared = tuple(_unwrap(f) for f in field_validators.get(fast_field.name, []))
        if expected[0] in ("list", "dict"):
            expected = (*expected[:-1], declared)
            got = (*got[:-1], _node_validators(fast_field.node))
        elif expected[0] in ("optional", "str"):
            expected = (expected[0], expected[1], expected[2] + declared)
        else:
            assert not declared, f"{model_name}.{fast_field.name}: a validator the table lacks"
        assert got == expected, f"{model_name}.{fast_field.name}"
        # Defaults: required, a value, or a factory's value (a fresh copy each time).
        assert fast_field.required == info.is_required()
        if not info.is_required():
            default = info.get_default(call_default_factory=True)
            if isinstance(default, BaseModel):
                default = default.model_dump(mode="json")
            assert _exact(fast_field.missing()) == _exact(default)
            if info.default_factory is not None:
                assert fast_field.factory is not None
                assert fast_field.missing() is not fast_field.missing()
    model_validators = [_unwrap(d.func) for d in decorators.model_validators.values()]
    assert all(d.info.mode == "after" for d in decorators.model_validators.values())
    # Each model validator is one call of a manifestrules function: the same one the fast table runs.
    assert len(model_validators) == len(table.checks)
    for method, check in zip(model_validators, table.checks, strict=True):
        assert check.__name__ in method.__code__.co_names, (model_name, check.__name__)
    assert not decorators.validators and not decorators.root_validators
    assert not decorators.field_serializers and not decorators.model_serializers
    assert not decorators.computed_fields


def _unwrap(func: Any) -> Any:
    return getattr(func, "__func__", func)


# ======================================================================== the commands, end to end

_IMPORTS = textwrap.dedent(
    """
    import sys
    from agentstack import entry
    from agentstack.entry import main
    entry.end = sys.exit  # report below instead of the short exit
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("pydantic", "pydantic_core"))
    heavy += [m for m in ("agentstack.manifest.model",) if m in sys.modules]
    print("CODE", code, repr(heavy), file=sys.stderr)
    """
)


def _agentstack(root: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        AGENTSTACK_HOME=str(tmp_path / "home"),
        AGENTSTACK_CACHE=str(tmp_path / "cache"),
    )
    return subprocess.run(
        [sys.executable, "-c", f"import sys; sys.argv = {['agentstack', *args]!r}\n" + _IMPORTS],
        cwd=root, env=env, capture_output=True, text=True, timeout=scaled(120),
    )  # fmt: skip


def test_a_fresh_project_locks_and_digests_without_pydantic(tmp_path: Path) -> None:
    root = make_project(
        tmp_path / "p",
        '[project]\nname = "p"\n\n[servers.s]\ncommand = "node"\nargs = ["a.js"]\n'
        '\n[skills.s]\npath = "skills/s"\n\n[instructions]\nfiles = ["docs/a.md"]\n'
        '\n[hooks.h]\nevent = "PreToolUse"\nmatcher = "Bash"\ncommand = ["true"]\n'
        '\n[settings.passthrough.codex]\nmodel = "o3"\n'
        '\n[sandbox.network]\nallow_domains = ["example.com"]\nlocalhost_ports = [8080]\n',
        {"a.js": "1\n", "skills/s/SKILL.md": "hi\n", "docs/a.md": "be nice\n"},
    )
    for args in (("lock",), ("digest",)):
        done = _agentstack(root, tmp_path, *args)
        assert "CODE 0 []" in done.stderr, done.stderr
    assert not (tmp_path / "cache" / "manifests").exists()  # nothing needed caching


def test_an_invalid_manifest_still_gets_the_models_error_and_exit_code(tmp_path: Path) -> None:
    text = '[project]\nname = "p"\n[hooks.h]\nevent = "Stop"\ncommand = ["x"]\ntimeout = true\n'
    root = make_project(tmp_path / "p", text)
    with pytest.raises(ManifestInvalid) as direct:
        parse_manifest(text.encode())
    done = _agentstack(root, tmp_path, "lock")
    assert "CODE 2 " in done.stderr, done.stderr
    assert "'agentstack.manifest.model'" in done.stderr  # the models gave the error
    for problem in direct.value.problems:
        assert problem.path in done.stderr and problem.message in done.stderr


def test_view_of_bytes_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("validated with the models")

    monkeypatch.setattr("agentstack.manifest.model.parse_manifest", refuse)
    monkeypatch.setattr(load, "cache_key", refuse)
    data = (EXAMPLES / "full" / "agentstack.toml").read_bytes()
    assert view_of_bytes(data).project.name


@pytest.mark.parametrize("module", ["manifest.rules", "manifest.fast"])
def test_the_fast_path_modules_import_only_the_standard_library(module: str) -> None:
    import ast

    tree = ast.parse((REPO / "agentstack" / f"{module.replace('.', '/')}.py").read_text(encoding="utf-8"))
    allowed = {"agentstack", "agentstack.manifest.view", "agentstack.manifest.rules"}
    for node in ast.walk(tree):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        for name in names:
            top = name.split(".")[0]
            assert top in sys.stdlib_module_names or name in allowed, (module, name)
    done = subprocess.run(
        [sys.executable, "-c", f"import sys, agentstack.{module}; "
         "print(sorted(m for m in sys.modules if m.split('.')[0] in "
         "('pydantic', 'pydantic_core', 'blake3', 'typer', 'rich')))"],
        env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=scaled(60),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"

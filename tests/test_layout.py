"""One state layout, one project finder, one copy of what the guard and apply must agree on.

`agentstack.layout` names every path under $AGENTSTACK_HOME, the cache and a run's private
directory; no other module spells those names (an AST scan of the package's string constants).
It stays cheap for the guard (it imports `os` only) and computes exactly what the guard computes.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentstack
import agentstack.apply.engine as apply
import agentstack.apply.snapshot as snapshot
import agentstack.surface.scan as surface
from agentstack import _guard, fingerprints, layout, paths
from agentstack.errors import InvalidInput
from tests.conftest import REPO, make_project

PACKAGE = Path(agentstack.__file__).parent
ADAPTERS = REPO / "adapters"

# The one exception: the guard runs on every tool call at the cost of `python -I -c pass`, so it
# spells the few state names it reads itself (no extra module on its hot path). Each of them is
# held to layout's by the tests below that compare paths (`test_project_paths_are_the_guards`,
# `test_the_library_writes_where_the_guard_reads`, `test_the_guards_own_names_are_layouts`).
MIGRATED_AT_MERGE = frozenset({
    "_guard.py",  # guard.json, projects, trust.head, trust.jsonl, agentstack-run-, ro
})


def _not_paths(tree: ast.AST) -> set[int]:
    """Docstrings and dictionary keys (output fields such as "allowed_signers")."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            out.update(id(k) for k in node.keys if isinstance(k, ast.Constant))
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _path_like(text: str, name: str) -> bool:
    """`text` is `name`, or a path (no whitespace) whose last component is `name`."""
    if text == name:
        return True
    return not any(c.isspace() for c in text) and text.rstrip("/").endswith("/" + name)


def _path_components(tree: ast.AST) -> list[ast.Constant]:
    """String constants joined into a path: `x / "name"`, os.path.join(x, "name"), x.joinpath."""
    out: list[ast.Constant] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            out += [n for n in (node.left, node.right) if isinstance(n, ast.Constant)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
            node.func.attr in ("join", "joinpath")
        ):
            out += [n for n in node.args if isinstance(n, ast.Constant)]
    return out


def state_name_uses(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    skip = _not_paths(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            for name in layout.STATE_FILES:
                if _path_like(node.value, name) or (
                    name == layout.RUN_DIR_PREFIX and node.value.startswith(name)
                ):
                    found.append((node.lineno, node.value))
    for node in _path_components(tree):
        if isinstance(node.value, str) and node.value in layout.STATE_DIRS:
            found.append((node.lineno, node.value))
    return sorted(set(found))


def _modules() -> list[tuple[str, Path]]:
    """Every module of the package (relative names) and of the adapters ("adapters/...")."""
    ours = [(p.relative_to(PACKAGE).as_posix(), p) for p in PACKAGE.rglob("*.py")
            if p.name != "layout.py" or p.parent != PACKAGE]
    adapters = [("adapters/" + p.relative_to(ADAPTERS).as_posix(), p)
                for p in ADAPTERS.rglob("*.py")]
    return sorted(ours + adapters)


def test_no_module_but_layout_spells_a_state_name() -> None:
    offenders = {}
    for rel, path in _modules():
        if rel in MIGRATED_AT_MERGE:
            continue
        uses = state_name_uses(path.read_text(encoding="utf-8"))
        if uses:
            offenders[rel] = uses
    assert not offenders, f"name these through agentstack.layout: {offenders}"


def test_the_merge_list_names_only_modules_that_still_need_it() -> None:
    """An entry that no longer spells a state name must leave MIGRATED_AT_MERGE."""
    modules = dict(_modules())
    stale = sorted(
        rel for rel in MIGRATED_AT_MERGE
        if rel not in modules or not state_name_uses(modules[rel].read_text(encoding="utf-8"))
    )
    assert not stale, f"remove from MIGRATED_AT_MERGE: {stale}"


@pytest.mark.parametrize(
    ("source", "hits"),
    [
        ('p = home / "guard.json"', [(1, "guard.json")]),
        ('p = os.path.join(state, "trust.jsonl")', [(1, "trust.jsonl")]),
        ('p = f"{home}/projects/{pid}/apply.json"', [(1, "/apply.json")]),
        ('p = cache / "content"', [(1, "content")]),
        ('p = os.path.join(home, "secrets")', [(1, "secrets")]),
        ('d = tempfile.mkdtemp(prefix="agentstack-run-")', [(1, "agentstack-run-")]),
        # Prose, dictionary keys and CLI names are not paths.
        ('"""Written to $AGENTSTACK_HOME/projects/<id>/guard.json."""', []),
        ('help = "default: $AGENTSTACK_HOME/boundary.toml when it exists"', []),
        ('doc = {"keys": [], "secrets": 1, "allowed_signers": "/x"}', []),
        ('app.add_typer(x, name="quarantine")', []),
    ],
)
def test_the_scan_sees_paths_not_prose(source: str, hits: list[tuple[int, str]]) -> None:
    assert state_name_uses(source) == hits


# ------------------------------------------------------------------------- cheap and identical


def test_layout_imports_nothing_but_os() -> None:
    probe = (
        "import sys; before = set(sys.modules); import agentstack.layout; "
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True,
                         check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    loaded = set(out.stdout.split())
    assert loaded <= {"agentstack", "agentstack.layout", "_sha256", "_sha2"}, loaded


@pytest.mark.parametrize("variables", [
    {"AGENTSTACK_HOME": "~/state"},
    {"AGENTSTACK_HOME": "", "XDG_CONFIG_HOME": "/x/config"},
    {"AGENTSTACK_HOME": "", "XDG_CONFIG_HOME": ""},
])
def test_home_is_the_guards_home(variables: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in variables.items():
        monkeypatch.setenv(key, value)
    assert layout.home() == _guard.home()
    assert paths.agentstack_home() == Path(_guard.home())


def test_cache_rule(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTSTACK_CACHE", str(tmp_path / "c"))
    assert layout.cache() == str(tmp_path / "c")
    monkeypatch.setenv("AGENTSTACK_CACHE", "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert paths.agentstack_cache() == tmp_path / "x" / "agentstack"


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="\0", blacklist_categories=["Cs"]),
               min_size=1, max_size=40))
def test_project_paths_are_the_guards(name: str) -> None:
    root = "/" + name
    assert layout.project_id(root) == _guard.project_id(root)
    assert layout.guard_snapshot("/state", root) == _guard.snapshot_path("/state", root)


def test_the_library_writes_where_the_guard_reads(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    assert str(paths.guard_snapshot_path(root)) == _guard.snapshot_path(_guard.home(), str(root))
    assert paths.apply_ledger_path(root).parent == paths.project_state_dir(root)


# ------------------------------------------------------------------------- one project finder


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    outer = make_project(tmp_path / "outer", '[project]\nname = "outer"\n')
    inner = outer / "a" / "b"
    inner.mkdir(parents=True)
    return outer.resolve(), inner


def test_finder_walks_up_to_the_nearest_manifest(tmp_path: Path) -> None:
    outer, inner = _tree(tmp_path)
    assert layout.find_project(str(inner)) == str(outer)
    assert paths.find_project(inner) == outer
    nested = make_project(inner / "nested", '[project]\nname = "n"\n')
    assert paths.find_project(nested / ".") == nested.resolve()


def test_finder_takes_an_explicit_project_exactly(tmp_path: Path) -> None:
    outer, inner = _tree(tmp_path)
    assert paths.find_project(explicit=outer) == outer
    # --project is never widened: a directory without a manifest is an error, not its parent.
    with pytest.raises(InvalidInput, match=r"no agentstack\.toml there"):
        paths.find_project(explicit=inner)
    assert layout.find_project(str(outer), str(inner)) is None


def test_finder_resolves_links_first(tmp_path: Path) -> None:
    outer, inner = _tree(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "link").symlink_to(inner)
    assert paths.find_project(elsewhere / "link") == outer
    # A manifest that is a directory is not a manifest.
    (elsewhere / "agentstack.toml").mkdir()
    assert layout.find_project(str(elsewhere)) is None or layout.find_project(
        str(elsewhere)) != str(elsewhere)


def test_finder_without_a_project_says_what_to_do(tmp_path: Path) -> None:
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    with pytest.raises(InvalidInput, match="or any parent directory") as raised:
        paths.find_project(lonely)
    assert "agentstack init" in raised.value.hint


def test_one_project_finder() -> None:
    """The rule is `layout.find_project` (paths as strings, for the fast paths) and its face for
    commands is `paths.find_project` (Path, InvalidInput saying what to do); no other module
    defines a finder of its own (the guard's wider `enclosing_project` is a different rule: a
    directory with a snapshot encloses too)."""
    import ast

    finders = {"find_project", "project_root", "find_root", "locate_project"}
    found = sorted(
        f"{path.relative_to(PACKAGE).as_posix()}:{node.name}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and node.name in finders
    )
    assert found == ["layout.py:find_project", "paths.py:find_project"]


# ------------------------------------------------------------ what the guard and apply share


def test_guard_and_apply_share_one_copy_of_markers_and_key_views() -> None:
    """apply renders, snapshot records, surface compares and the guard checks with one object each."""
    same = [
        (apply, "BLOCK_BEGIN", "BLOCK_BEGIN", "BLOCK_BEGIN"),
        (apply, "BLOCK_END", "BLOCK_END", "BLOCK_END"),
        (surface, "BLOCK_BEGIN", "BLOCK_BEGIN", "BLOCK_BEGIN"),
        (surface, "BLOCK_END", "BLOCK_END", "BLOCK_END"),
        (apply, "_key_value", "key_value", "_key_value"),
        (snapshot, "fingerprint", "fingerprint", "fingerprint"),
        (snapshot, "keys_view", "keys_view", "keys_view"),
        (snapshot, "SNAPSHOT_VERSION", "SNAPSHOT_VERSION", "SNAPSHOT_VERSION"),
    ]
    for module, used, shared, guards in same:
        assert getattr(module, used) is getattr(fingerprints, shared) is getattr(_guard, guards), (
            module.__name__, used)
    assert fingerprints.drifted is _guard.drifted
    assert fingerprints.content_hash is _guard.content_hash


def test_no_other_module_spells_the_block_markers() -> None:
    """A second spelling of the markers would let the guard miss edits of the managed block."""
    marker = fingerprints.BLOCK_BEGIN.split(" (")[0]
    spelled = [
        rel for rel, path in _modules()
        if rel != "_guard.py" and any(
            isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith(marker)
            for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        )
    ]
    assert spelled == []


def test_the_architecture_document_lists_every_state_name() -> None:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [n for n in (*layout.STATE_FILES, *layout.STATE_DIRS) if n not in text]
    assert not missing, f"add to the state layout table in docs/architecture.md: {missing}"


def test_the_guards_own_names_are_layouts() -> None:
    """Every state name the guard spells is layout's name for the same thing."""
    source = (PACKAGE / "_guard.py").read_text(encoding="utf-8")
    spelled = {name for _, name in state_name_uses(source)}
    assert spelled <= {
        layout.GUARD_SNAPSHOT, layout.PROJECTS, layout.TRUST_HEAD, layout.TRUST_LOG,
        layout.RUN_DIR_PREFIX, layout.RUN_READONLY,
    }, spelled
    assert _guard.snapshot_path("/s", "/p") == layout.guard_snapshot("/s", "/p")

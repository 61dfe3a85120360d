"""The `agentstack` package is a library under a thin CLI, laid out as its data flow: its stages
import one way (a stage imports only the stages below it), with no import cycle but the guard's,
counting the imports inside functions too (that is when they run); and the CLI's parsing (on typer)
imports neither pydantic nor rich.

What the graph counts: for every module of `agentstack` and of the adapters (`agentstack_adapters`,
the `adapters/` directory), read with `ast` (never imported), each import statement anywhere in
it: at module level (inside a module-level `if`/`try`/`with` too) and inside functions and classes,
but not under `if TYPE_CHECKING:` (never executed). `import agentstack.a.b` and
`from agentstack.a import b` count as edges to `agentstack.a.b` when that is a module, else to
`agentstack.a`; relative imports are resolved the same way. `module_level=True` counts only the
statements executed when the module is imported.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.harness.deadline import scaled

PACKAGE = REPO / "agentstack"
ADAPTERS = REPO / "adapters"

# The stages, bottom to top: what the team declares, what the harnesses load from the project
# (scanned when locking), every byte pinned, the document a person reviews, the decision, the native
# files written while it holds, and bundles between people. A stage imports only stages below it.
STAGES = ("manifest", "surface", "lock", "consent", "trust", "apply", "share")

# Modules below every stage: they import no stage, no `sandbox` module and no command.
FOUNDATION = ("canonical", "columns", "didyoumean", "errors", "fsutil", "harnesses", "layout",
              "output", "paths", "patience", "progress", "protect", "sanitize", "storage")  # fmt: skip

# Imports that still go the wrong way, each with the work that removes it (this list only
# shrinks: a test fails when an entry is no longer in the graph).
KNOWN_BACK_EDGES: dict[tuple[str, str], str] = {}


def _module_name(path: Path) -> str:
    if path.is_relative_to(ADAPTERS):
        parts = ["agentstack_adapters", *path.relative_to(ADAPTERS).with_suffix("").parts]
    else:
        parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module, *, module_level: bool) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if module_level and isinstance(
            node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
        ):
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(*, module_level: bool = False) -> dict[str, set[str]]:
    paths = [*PACKAGE.rglob("*.py"), *ADAPTERS.rglob("*.py")]
    modules = {_module_name(p): p for p in paths if "__pycache__" not in p.parts}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in _imports(tree, module_level=module_level):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "agentstack" and len(parts) > 1 and parts[1] in STAGES else None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_package_has_no_import_cycle_at_module_level() -> None:
    graph = import_graph(module_level=True)
    assert len(graph) > 100 and graph["agentstack.cli._app"], "the graph was not read"
    assert cycles(graph) == []


def test_the_graph_counts_imports_inside_functions() -> None:
    """`_guard` imports `_guard_more` only inside a function (lazily, by design)."""
    assert "agentstack._guard_more" not in import_graph(module_level=True)["agentstack._guard"]
    assert "agentstack._guard_more" in import_graph()["agentstack._guard"]
    assert "agentstack.surface.scan" in import_graph()["agentstack.lock.resolve"]  # in a method
    assert "agentstack.surface.scan" not in import_graph(module_level=True)["agentstack.lock.resolve"]


def test_the_only_import_cycle_is_the_guards() -> None:
    """Counting the imports inside functions, the one cycle left is `_guard` <-> `_guard_more` (once
    the known wrong-way imports below are gone; each is named with the work that removes it)."""
    graph = import_graph()
    for source, target in KNOWN_BACK_EDGES:
        graph[source].discard(target)
    assert cycles(graph) == [["agentstack._guard", "agentstack._guard_more"]]


def test_every_known_back_edge_is_still_there() -> None:
    """KNOWN_BACK_EDGES only shrinks: an edge that is gone must leave the list."""
    graph = import_graph()
    assert [edge for edge in KNOWN_BACK_EDGES if edge[1] not in graph[edge[0]]] == []


def test_a_stage_imports_only_stages_below_it() -> None:
    graph = import_graph()
    wrong = sorted(
        (source, target)
        for source, targets in graph.items()
        for target in targets
        if stage_of(source) and stage_of(target)
        and STAGES.index(stage_of(target)) > STAGES.index(stage_of(source))  # type: ignore[arg-type]
        and (source, target) not in KNOWN_BACK_EDGES
    )
    assert wrong == []


def test_the_foundation_imports_no_stage() -> None:
    graph = import_graph()
    for name in FOUNDATION:
        above = sorted(t for t in graph[f"agentstack.{name}"]
                       if t.removeprefix("agentstack.") not in FOUNDATION
                       and t not in ("agentstack", "agentstack._guard", "agentstack._guard_more"))
        assert above == [], name


def test_every_stage_is_a_package_of_the_layout() -> None:
    """The stages are packages, each named in `pyproject.toml` (or setuptools would not ship it)."""
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    for stage in (*STAGES, "sandbox"):
        assert (PACKAGE / stage / "__init__.py").is_file(), stage
        assert f'"agentstack.{stage}"' in pyproject, stage


def test_the_cycle_check_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_cli_modules_import_no_other_command_module() -> None:
    """Each module of `agentstack.cli` declares its commands with `agentstack.cli._app` and
    `_common`; none imports another command module (`_app.load` imports the one named)."""
    graph = import_graph()
    shared = {"agentstack.cli._app", "agentstack.cli._common"}
    modules = [name for name in graph if name.startswith("agentstack.cli.")]
    assert len(modules) > 10, modules
    for name, targets in graph.items():
        if name.startswith("agentstack.cli"):
            commands = {t for t in targets if t.startswith("agentstack.cli") and t not in shared}
            assert commands == set(), (name, commands)


def test_help_and_parsing_import_no_framework(tmp_path: Path) -> None:
    """`--help`, a command's `--help` and a usage error load neither pydantic, rich nor GitPython
    (typer, the command table, yes: its help is the plain formatter, not rich panels)."""
    probe = (
        "import os, runpy, sys\n"
        "def report(*_):\n"
        "    heavy = sorted(m for m in ('pydantic', 'rich', 'click', 'git') if m in sys.modules)\n"
        "    print('IMPORTED:' + ','.join(heavy), file=sys.stderr)\n"
        "    sys.stderr.flush()\n"
        "os._exit = lambda code, real=os._exit: (report(), real(code))  # the short ending (entry.end)\n"
        "sys.argv = ['agentstack', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('agentstack', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "report()\n"
    )
    for args in (["--help"], ["status", "--help"], ["trust", "--help"], ["add", "server", "-h"],
                 ["digest", "--no-such-option"], ["run", "--help"]):
        result = subprocess.run([sys.executable, "-c", probe, *args], cwd=tmp_path,
                                capture_output=True, text=True, timeout=scaled(60),
                                env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO),
                                     "HOME": str(tmp_path)})
        assert result.stderr.rstrip().endswith("IMPORTED:"), (args, result.stderr)

"""The `agentstack` package is a library under a thin CLI: its modules import one another without
a cycle, and the CLI's parsing (on typer) imports neither pydantic nor rich.

What the graph counts: for every module of the `agentstack` package (its `.py` files, read with
`ast`, never imported), each import executed when the module is imported: statements at module
level, including those inside a module-level `if`/`try`/`with`, but not those under
`if TYPE_CHECKING:` and not imports inside functions or classes (those run only when called,
which is how commands load what they need). `import agentstack.a.b` and
`from agentstack.a import b` count as edges to `agentstack.a.b` when that is a module, else to
`agentstack.a`; relative imports are resolved the same way.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.harness.deadline import scaled

PACKAGE = REPO / "agentstack"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif isinstance(node, ast.If):
                if not _is_type_checking(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody):
                    visit(block)
                for handler in node.handlers:
                    visit(handler.body)
            elif isinstance(node, ast.With):
                visit(node.body)

    visit(tree.body)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _module_level_imports(ast.parse(path.read_text(encoding="utf-8"))):
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


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph()
    assert len(graph) > 40 and graph["agentstack.cli._app"], "the graph was not read"
    assert cycles(graph) == []


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

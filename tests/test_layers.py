"""The package's layers (docs/architecture.md): no import cycle between the gateway's modules,
no import hidden from readers and linters (``importlib``, ``__import__``), and the tools
package (demos, fault proxy, OpenAI stand-in) out of the runtime.

import-linter (``.importlinter``, run by ``scripts/test.sh`` and by the last test here)
enforces which layer may import which; it counts a package's imports as a whole, so it
neither sees a cycle between two modules of one layer nor an import made by ``importlib``.
This file reads every module's imports with :mod:`ast`: a function-level import counts (it
runs, only later), and so does one under ``if TYPE_CHECKING:`` (it never runs, but a reader
follows it, and a circle behind it is still a circle: issue 37 found the action registry
importing ``perform``'s types back that way). import-linter counts them too
(``exclude_type_checking_imports = False``)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

from support import ROOT

RUNTIME = ROOT / "gateway"
TOOLS = "gateway_tools"
# Modules whose use hides an import (importlib.resources, which reads package files, is fine).
HIDDEN_IMPORTERS = ("importlib", "importlib.util", "importlib.machinery")
# The one runtime module allowed to load the tools package, inside the demo command only.
TOOLS_LOADER = "gateway.cli"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_names(tree: ast.Module, package: str) -> list[tuple[str, int]]:
    """``[(dotted name, line)]`` of every import, wherever it stands (in a function, under
    ``if TYPE_CHECKING:``) (``from a import b`` gives ``a.b``: a module or a name in ``a``;
    relative imports resolved against ``package``)."""
    found = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found += [(alias.name, child.lineno) for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                found += [(f"{base}.{alias.name}", child.lineno) for alias in child.names]
            pending.append(child)
    return found


def import_graph(root: Path = RUNTIME) -> dict[str, set[str]]:
    """``{module: {gateway modules it imports}}`` for every module under ``root``."""
    modules = {module_name(p): p for p in sorted(root.rglob("*.py"))}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for dotted, _line in imported_names(ast.parse(path.read_text("utf-8")), package):
            while dotted and dotted not in modules:
                dotted = dotted.rpartition(".")[0]
            if dotted and dotted != name:
                targets.add(dotted)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for node in sorted(graph):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_the_cycle_finder_finds_a_cycle():
    """The check below can fail: a two-module and a three-module cycle are both found."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert cycles(graph) == [["a", "b"], ["c", "d", "e"]]


def test_an_import_under_type_checking_counts():
    """A circle behind ``if TYPE_CHECKING:`` is still found: the action registry's import of
    ``perform``'s types back (issue 37) made one of two modules that this test skipped."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "import typing\n"
        "if TYPE_CHECKING:\n"
        "    from gateway.operations.perform import Effect\n"
        "if typing.TYPE_CHECKING:\n"
        "    from . import target\n"
        "def later():\n"
        "    from gateway.ledger import db\n"
    )
    names = [name for name, _line in imported_names(ast.parse(source), "gateway.operations")]
    assert "gateway.operations.perform.Effect" in names
    assert "gateway.operations.target" in names
    assert "gateway.ledger.db" in names


def test_no_import_cycle_between_the_gateways_modules():
    graph = import_graph()
    assert len(graph) > 60  # every module was read
    assert cycles(graph) == []


def test_no_hidden_imports_in_the_runtime():
    """``importlib.import_module`` and ``__import__`` hide an edge from every reader and
    linter (the action registry once did, and so made one cycle of 18 modules)."""
    offenders = []
    for path in sorted(RUNTIME.rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Import):
                name = next((a.name for a in node.names if a.name in HIDDEN_IMPORTERS), None)
            elif isinstance(node, ast.ImportFrom) and node.module == "importlib":
                name = next((a.name for a in node.names if a.name != "resources"), None)
            elif isinstance(node, ast.ImportFrom) and node.module in HIDDEN_IMPORTERS:
                name = node.module
            elif isinstance(node, ast.Name) and node.id == "__import__":
                name = "__import__"
            if name:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert offenders == []


def test_no_runtime_module_imports_the_tools_package():
    """Demos, the fault proxy and the OpenAI stand-in live in ``gateway_tools``; only the
    ``gateway demo`` command loads it, inside the command (so a server never imports it)."""
    offenders = []
    for path in sorted(RUNTIME.rglob("*.py")):
        name = module_name(path)
        tree = ast.parse(path.read_text("utf-8"))
        top_level = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                targets = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any(t == TOOLS or t.startswith(TOOLS + ".") for t in targets):
                    if name != TOOLS_LOADER or id(node) in top_level:
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_a_server_process_never_loads_the_tools_package():
    """Importing the app and building it (as ``gateway serve`` does) loads no module of
    ``gateway_tools``."""
    code = (
        "import sys, gateway.app, gateway.cli, gateway.server; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'gateway_tools'))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_layer_contracts_hold():
    """import-linter's contracts (``.importlinter``): layers that only look down, and
    ``gateway.wordpress`` independent of the rest."""
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    out = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "broken" not in out.stdout.lower().replace("0 broken", "")

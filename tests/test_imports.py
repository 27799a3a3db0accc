"""The package's import graph has no circle, and the command line sits on top: no module of ``posgeom_utils``
imports ``posgeom_utils.repro.cli``.

Every module is parsed with ``ast``; every import counts, at module level or inside a function (a function-level
import is a circle deferred, not broken), relative imports resolved against the importing module's package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "posgeom_utils"
CLI = f"{PACKAGE}.repro.cli"


def module_files(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """``{dotted name: file}`` of every module of ``package`` (a package by its ``__init__.py``)."""
    files = {}
    for path in sorted((root / package).rglob("*.py")):
        name = ".".join(path.relative_to(root).with_suffix("").parts)
        files[name.removesuffix(".__init__")] = path
    return files


def ancestors(name: str) -> list[str]:
    """``a.b.c`` -> ``["a", "a.b"]``."""
    parts = name.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts))]


def imported(tree: ast.AST, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that executing ``tree`` (the module ``module``) may import, at any depth.

    ``from X import name`` imports ``X.name`` when that is a module, else ``X`` itself; importing a module also
    runs its packages' ``__init__``, except those of ``module``'s own packages (already running)."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # import a.b.c of a module a.b: the module a.b
                target = target.rpartition(".")[0]
            if not target:
                continue  # not a module of the package
            running = {module, *ancestors(module)}
            found |= {target} - {module}
            found |= {a for a in ancestors(target) if a in modules} - running
    return found


def import_graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    """``{module: the package modules it imports}`` for every module of ``package``."""
    files = module_files(root, package)
    names = set(files)
    return {
        name: imported(ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py", names)
        for name, path in files.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of ``graph`` as the chain ``[a, b, ..., a]``, or ``None`` (depth-first, three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def all_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle (a chain, as :func:`find_cycle`'s) per group of modules that import one another."""
    reach = {node: set() for node in graph}
    for node, imports in graph.items():  # what each module reaches, transitively (the package is small)
        todo = list(imports)
        while todo:
            if (nxt := todo.pop()) not in reach[node]:
                reach[node].add(nxt)
                todo += graph.get(nxt, ())
    groups = {frozenset(n for n in graph if n in reach[m] and m in reach[n]) for m in graph if m in reach[m]}
    return sorted(find_cycle({n: graph[n] & group for n in group}) for group in groups)


# --------------------------------------------------------------------------- the checks can fail


def test_find_cycle_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"d", "a"}, "d": set(), "e": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"x"}}) == ["x", "x"]
    graph["f"], graph["g"] = {"g"}, {"f", "a"}
    assert all_cycles(graph) == [["a", "b", "c", "a"], ["f", "g", "f"]]
    graph["c"] = {"d"}
    assert find_cycle(graph) == ["f", "g", "f"] and all_cycles(graph) == [["f", "g", "f"]]
    graph["g"] = {"a"}
    assert find_cycle(graph) is None and all_cycles(graph) == []


def test_imports_are_resolved_at_any_depth_and_relative(tmp_path):
    """A planted circle through a function-level relative import, and an import of the CLI, are seen."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .low import x\n__version__ = '1'\n")
    (pkg / "low.py").write_text("import os\nx = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "cli.py").write_text("from . import runner\nfrom ..low import x\n")
    (pkg / "sub" / "runner.py").write_text("def run():\n    from .cli import main\n    from .. import __version__\n")
    (pkg / "sub" / "leaf.py").write_text("import pkg.sub.runner\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg"] == {"pkg.low"} and graph["pkg.low"] == set()
    assert graph["pkg.sub.cli"] == {"pkg.sub.runner", "pkg.low"}
    assert graph["pkg.sub.runner"] == {"pkg.sub.cli", "pkg"}  # `from .. import __version__`: the package
    assert graph["pkg.sub.leaf"] == {"pkg.sub.runner"}
    assert find_cycle(graph) == ["pkg.sub.cli", "pkg.sub.runner", "pkg.sub.cli"]


# --------------------------------------------------------------------------- the package

GRAPH = import_graph()


def test_the_graph_covers_the_package():
    assert len(GRAPH) >= 30 and CLI in GRAPH
    assert f"{PACKAGE}.repro.runner" in GRAPH[CLI]  # the CLI's function-level imports are seen


def test_no_import_cycle():
    cycles = all_cycles(GRAPH)
    assert not cycles, "import cycle(s): " + "; ".join(" -> ".join(cycle) for cycle in cycles)


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_nothing_imports_the_cli(module):
    assert CLI not in GRAPH[module], f"{module} imports {CLI}: the command line is on top, nothing imports it"

"""What a chapter's numbers depend on: its code cells, the package code they import, the
pinned environment.

Chapter: *Reproduction ledger*. Code is compared as normalised source: parsed,
docstrings removed and printed back (``ast.unparse``), so comments, docstrings and
formatting cannot change a hash. A module counts by its top-level definitions, sorted,
without its imports and ``__all__``: moving a function between two modules the chapter
imports keeps the hash, and any change of behaviour (a constant, an operation) changes
it.

``python -m posgeom_utils.repro.sources`` prints :func:`package_hash`
(``scripts/build_book.sh`` clears the execution cache when it changes)."""

from __future__ import annotations

import ast
import hashlib
import json
import sys
from pathlib import Path

#: the package folder (``posgeom_utils/``)
PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: the folder holding it: the checkout (with ``notebooks/``, ``book/``, ``requirements.txt``) or site-packages
REPO_ROOT = PACKAGE_DIR.parent
PACKAGE = PACKAGE_DIR.name
#: machinery that cannot change a number (the runner, the ledger, the exercise checks): not followed. The
#: glue of :mod:`.results` records the numbers, so it counts.
MACHINERY = (f"{PACKAGE}.repro", f"{PACKAGE}.teaching")
COUNTED = (f"{PACKAGE}.repro.results",)


def _strip(tree: ast.AST) -> ast.AST:
    """``tree`` without docstrings (module, class and function bodies)."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(
                node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
            )
            and body
        ):
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(getattr(first, "value", None), ast.Constant)
                and isinstance(first.value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _code(source: str) -> ast.Module:
    """Python source (IPython magics and shell lines dropped) parsed, without
    docstrings."""
    lines = [
        line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))
    ]
    return _strip(ast.parse("\n".join(lines)))


def _is_definition(node: ast.stmt) -> bool:
    """A statement that defines behaviour: not an import, ``__all__``, a
    ``TYPE_CHECKING`` block or a string."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return False
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
        return False
    targets = (
        node.targets
        if isinstance(node, ast.Assign)
        else [getattr(node, "target", None)]
    )
    if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
        return False
    return not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))


def _module_file(name: str, root: Path) -> Path | None:
    """The file of the package module ``name`` (``posgeom_utils.x.y``) under ``root``,
    if there is one."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    base = Path(root, *parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports(tree: ast.AST, module: str, is_package: bool, root: Path) -> set[str]:
    """The package modules ``tree`` imports (absolutely or relatively), parents and
    submodules included."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")[
                    : len(module.split(".")) - node.level + is_package
                ]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            for k in range(1, len(parts) + 1):
                name = ".".join(parts[:k])
                machinery = name.startswith(MACHINERY) and name not in COUNTED
                if not machinery and _module_file(name, root) is not None:
                    found.add(name)
    return found


def imported_modules(trees: list[ast.AST], root: Path = REPO_ROOT) -> list[str]:
    """Every package module that code ``trees`` import, directly or through other
    package modules. Chapter: *Reproduction ledger*."""
    todo = (
        set().union(*(_imports(t, "__main__", False, root) for t in trees))
        if trees
        else set()
    )
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        seen.add(name)
        path = _module_file(name, root)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        todo |= _imports(tree, name, path.name == "__init__.py", root) - seen
    return sorted(seen)


def _definitions(names: list[str], root: Path) -> list[str]:
    """The normalised top-level definitions of the modules ``names``, sorted."""
    out = []
    for name in names:
        tree = _strip(ast.parse(_module_file(name, root).read_text(encoding="utf-8")))
        out += [ast.unparse(node) for node in tree.body if _is_definition(node)]
    return sorted(out)


def environment(root: Path = REPO_ROOT) -> list[str]:
    """The pinned requirements (``requirements.txt`` without comments, sorted; empty
    when installed). Chapter: *Reproduction ledger*."""
    path = Path(root) / "requirements.txt"
    lines = path.read_text().splitlines() if path.is_file() else []
    return sorted(
        line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()
    )


def _digest(payload: object) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def chapter_cells(source: Path) -> list[ast.Module]:
    """The code cells of a MyST chapter, parsed and normalised. Chapter: *Reproduction
    ledger*."""
    import jupytext

    notebook = jupytext.read(Path(source))
    return [_code(cell.source) for cell in notebook.cells if cell.cell_type == "code"]


def code_hash(source: Path, root: Path = REPO_ROOT) -> str:
    """sha256 of what can change the numbers of the chapter ``source``: its code cells,
    the definitions of the package modules they import and the pinned environment.
    Chapter: *Reproduction ledger*."""
    cells = chapter_cells(source)
    return _digest(
        {
            "cells": [ast.unparse(c) for c in cells],
            "definitions": _definitions(imported_modules(cells, root), Path(root)),
            "environment": environment(root),
        }
    )


def modules_hash(modules: list[str], root: Path = REPO_ROOT) -> str:
    """sha256 of the normalised definitions of the package ``modules``, everything they
    import, and the pinned environment: what a memoised result of them depends on.
    Chapter: *Reproduction ledger*."""
    trees = [ast.parse(f"import {name}") for name in modules]
    names = imported_modules(trees, root)
    return _digest(
        {
            "definitions": _definitions(names, Path(root)),
            "environment": environment(root),
        }
    )


def package_hash(root: Path = REPO_ROOT) -> str:
    """sha256 of the normalised definitions of every package module and the pinned
    environment. Chapter: *Reproduction ledger*."""
    modules = sorted(
        ".".join(p.relative_to(Path(root)).with_suffix("").parts).removesuffix(
            ".__init__"
        )
        for p in (Path(root) / PACKAGE).rglob("*.py")
    )
    modules = [m for m in modules if not m.startswith(MACHINERY) or m in COUNTED]
    return _digest(
        {
            "definitions": _definitions(modules, Path(root)),
            "environment": environment(root),
        }
    )


if __name__ == "__main__":
    print(package_hash(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO_ROOT))

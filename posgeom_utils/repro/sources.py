"""What a chapter's numbers depend on: its code cells, the package code they import, the
pinned environment. Chapter: *Reproduction ledger*. Code counts as its top-level
definitions without docstrings, signature type hints, comments or layout
(``ast.unparse``), sorted: a reformat or a move between imported modules keeps a hash, a
new constant changes it. ``python -m posgeom_utils.repro.sources`` prints
:func:`package_hash`."""

from __future__ import annotations

import ast
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

#: the checkout (``notebooks/``, ``book/``, ``requirements.txt``) or site-packages
REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(__file__).resolve().parents[1].name
#: machinery that cannot change a number, not followed; :mod:`.results` (glue) counts
MACHINERY = (f"{PACKAGE}.repro", f"{PACKAGE}.teaching")
COUNTED = (f"{PACKAGE}.repro.results",)
_BODIES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _strip(tree: ast.AST) -> ast.AST:
    """``tree`` without docstrings and signature hints (dataclass fields keep them)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            args = (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg)
            for arg in filter(None, args):
                arg.annotation = None
            node.returns = None
        if isinstance(node, _BODIES) and ast.get_docstring(node, False) is not None:
            node.body = node.body[1:] or [ast.Pass()]
    return tree


def parse_code(source: str) -> ast.Module:
    """Python ``source`` parsed without IPython magics, shell lines and docstrings.
    Chapter: *Reproduction ledger*."""
    lines = source.splitlines()
    keep = [line for line in lines if not line.lstrip().startswith(("%", "!"))]
    return _strip(ast.parse("\n".join(keep)))


def declared_parameters(nb: Any) -> dict[str, Any]:
    """The literal values of the ``parameters`` cell of the notebook ``nb`` (``...``
    where not literal). Chapter: *Reproduction ledger*."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    cells = [c for c in code if "parameters" in c.get("metadata", {}).get("tags", [])]
    declared: dict[str, Any] = {}
    for node in parse_code(cells[0].source).body if cells else []:
        for target in node.targets if isinstance(node, ast.Assign) else []:
            if isinstance(target, ast.Name):
                try:
                    declared[target.id] = ast.literal_eval(node.value)
                except (ValueError, SyntaxError, TypeError):
                    declared[target.id] = ...
    return declared


def _is_definition(node: ast.stmt) -> bool:
    """Not an import, ``__all__``, a ``TYPE_CHECKING`` block or a bare constant."""
    targets = (
        node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", 0)]
    )
    return not (
        isinstance(node, (ast.Import, ast.ImportFrom))
        or (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))
        or any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)
        or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
    )


def _counts(name: str) -> bool:
    """Whether the module ``name`` can change a number: not machinery."""
    return not name.startswith(MACHINERY) or name in COUNTED


def _module_file(name: str, root: Path) -> Path | None:
    """The file of the package module ``name`` under ``root``, if there is one."""
    parts = name.split(".")
    base = Path(root, *parts)
    found = [p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()]
    return found[0] if found and parts[0] == PACKAGE else None


def _imports(tree: ast.AST, module: str, is_package: bool, root: Path) -> set[str]:
    """The package modules ``tree`` imports, parents and submodules included."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package upwards
                keep = module.count(".") + 1 - node.level + is_package
                parts = module.split(".")[:keep]
                base = ".".join(parts + ([node.module] if node.module else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            prefixes = {".".join(parts[:k]) for k in range(1, len(parts) + 1)}
            found |= {p for p in prefixes if _counts(p) and _module_file(p, root)}
    return found


def _imported(trees: list[ast.AST], root: Path) -> list[str]:
    """Every package module that ``trees`` import, directly or through others."""
    todo = set().union(*(_imports(t, "__main__", False, root) for t in trees))
    seen: set[str] = set()
    while todo:
        seen.add(name := todo.pop())
        path = _module_file(name, root)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        todo |= _imports(tree, name, path.name == "__init__.py", root) - seen
    return sorted(seen)


def _hash(names: list[str], root: Path, **extra: object) -> str:
    """sha256 of ``extra``, the modules' normalised definitions and the pins."""
    definitions = []
    for name in names:
        tree = _strip(ast.parse(_module_file(name, root).read_text(encoding="utf-8")))
        definitions += [ast.unparse(n) for n in tree.body if _is_definition(n)]
    path = Path(root) / "requirements.txt"
    lines = path.read_text().splitlines() if path.is_file() else []
    pins = sorted(filter(None, (line.split("#", 1)[0].strip() for line in lines)))
    payload = {**extra, "definitions": sorted(definitions), "environment": pins}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def code_hash(source: Path, root: Path = REPO_ROOT) -> str:
    """sha256 of the code cells of the chapter ``source``, the package modules they
    import and the pins. Chapter: *Reproduction ledger*."""
    import jupytext

    notebook = jupytext.read(Path(source))
    cells = [parse_code(c.source) for c in notebook.cells if c.cell_type == "code"]
    return _hash(_imported(cells, root), root, cells=[ast.unparse(c) for c in cells])


def modules_hash(modules: list[str], root: Path = REPO_ROOT) -> str:
    """sha256 of the package ``modules``, what they import and the pins.
    Chapter: *Reproduction ledger*."""
    return _hash(_imported([ast.parse(f"import {m}") for m in modules], root), root)


def package_hash(root: Path = REPO_ROOT) -> str:
    """sha256 of every package module (but the machinery) and the pinned environment.
    Chapter: *Reproduction ledger*."""
    files = (Path(root) / PACKAGE).rglob("*.py")
    names = (".".join(p.relative_to(root).with_suffix("").parts) for p in files)
    modules = sorted(n.removesuffix(".__init__") for n in names)
    return _hash([m for m in modules if _counts(m)], root)


if __name__ == "__main__":
    print(package_hash(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO_ROOT))

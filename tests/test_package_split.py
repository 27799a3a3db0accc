"""The science package stands alone, and only what can change a number decides what is re-executed.

``posgeom_utils`` (the science) imports nothing from ``posgeom_utils.repro`` (the reproduction machinery). The
freshness of committed results and the build's execution cache are keyed by normalised code (the chapter's
code cells, the package modules they import, the pins): a docstring, a type hint, a reformat or a move of a function keeps
them; one new constant invalidates them (docs/building.md).
"""

from __future__ import annotations

import ast
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from posgeom_utils.repro import sources

ROOT = Path(__file__).resolve().parents[1]
SCIENCE = sorted((ROOT / "posgeom_utils").glob("*.py"))


def _imported_modules(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved against the package)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: posgeom_utils/<module>.py is at level 1 inside posgeom_utils
                base = "posgeom_utils" if node.level == 1 else "<outside>"
                module = f"{base}.{node.module}" if node.module else base
                names.add(module)
                names.update(f"{module}.{alias.name}" for alias in node.names)
            else:
                names.add(node.module or "")
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_science_modules_import_nothing_from_the_machinery(tmp_path):
    bad = tmp_path / "geometry.py"  # the check can fail: relative and absolute imports are both seen
    bad.write_text("from .repro.results import glue\nfrom posgeom_utils.repro import ledger\n")
    assert {"posgeom_utils.repro.results", "posgeom_utils.repro"} <= _imported_modules(bad)
    assert len(SCIENCE) >= 10, "the science package moved: update this test"
    offenders = {p.name: sorted(m for m in _imported_modules(p) if m.startswith("posgeom_utils.repro"))
                 for p in SCIENCE}
    assert not {k: v for k, v in offenders.items() if v}, offenders


# --------------------------------------------------------------------------- invalidation

CHAPTER = """---
jupytext: {text_representation: {extension: .md, format_name: myst}}
kernelspec: {name: python3, display_name: Python 3, language: python}
---
# A chapter

```{code-cell} ipython3
from posgeom_utils.geometry import stress
from posgeom_utils.encodings import sinusoidal
from posgeom_utils.repro.results import glue

glue("x", stress(sinusoidal(4, 2), sinusoidal(4, 2)))
```
"""


def _checkout(tmp_path: Path) -> Path:
    """A minimal copy of the checkout: the package, the environment files, the build script, a chapter."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "posgeom_utils", root / "posgeom_utils",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("requirements.txt", "pyproject.toml"):
        shutil.copy(ROOT / name, root / name)
    (root / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "build_book.sh", root / "scripts" / "build_book.sh")
    (root / "notebooks").mkdir()
    (root / "notebooks" / "chapter.md").write_text(CHAPTER)
    return root


def _fake_venv(tmp_path: Path) -> Path:
    """A venv stand-in: ``python`` runs this interpreter on the copied checkout; ``jupyter-book`` only writes
    a marker into the execution cache, as a real build would after executing a chapter."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="$PWD" exec "{sys.executable}" "$@"\n')
    book = bin_dir / "jupyter-book"
    book.write_text("#!/bin/sh\nmkdir -p _build/.jupyter_cache && touch _build/.jupyter_cache/executed\n")
    for f in (python, book):
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    return python


def _build(root: Path, python: Path) -> bool:
    """Run the build script; True when it cleared the execution cache."""
    done = subprocess.run(["bash", "scripts/build_book.sh"], cwd=root, capture_output=True, text=True,
                          env={**os.environ, "PY": str(python)})
    assert done.returncode == 0, done.stderr + done.stdout
    return "clearing the execution cache" in done.stdout


def _edit(path: Path, how: str) -> None:
    """Edit a module without changing what it does (docstring, comment, reformat, type hints) or with a change of behaviour
    (a new constant)."""
    text = path.read_text()
    tree = ast.parse(text)
    if how == "docstring":
        function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and ast.get_docstring(n))
        doc = function.body[0].value
        lines = text.splitlines(keepends=True)
        line = doc.lineno - 1
        lines[line] = lines[line].replace('"""', '"""Reworded. ', 1)
        text = "".join(lines) + "\n# a comment\n"
    elif how == "hints":  # every signature's type hints gone
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                node.returns = None
                for arg in node.args.args + node.args.kwonlyargs:
                    arg.annotation = None
        text = ast.unparse(tree)
    elif how == "reformat":
        text = ast.unparse(tree)  # another layout, the comments gone
    elif how == "behaviour":
        text += "\nTHRESHOLD = 0.5\n"
    path.write_text(text)


def _move_a_function(source: Path, target: Path) -> str:
    """Cut the last top-level function of ``source`` and append it to ``target``; return its name."""
    tree = ast.parse(source.read_text())
    function = [n for n in tree.body if isinstance(n, ast.FunctionDef)][-1]
    lines = source.read_text().splitlines(keepends=True)
    start = (function.decorator_list[0].lineno if function.decorator_list else function.lineno) - 1
    moved = "".join(lines[start:function.end_lineno])
    source.write_text("".join(lines[:start] + lines[function.end_lineno:]))
    target.write_text(target.read_text() + "\n\n" + moved)
    return function.name


@pytest.mark.parametrize("how", ["docstring", "reformat", "hints", "move"])
def test_an_edit_that_changes_no_behaviour_keeps_results_fresh(tmp_path, how):
    root = _checkout(tmp_path)
    chapter, science = root / "notebooks" / "chapter.md", root / "posgeom_utils"
    before = sources.code_hash(chapter, root)
    if how == "move":  # a function moved between two modules the chapter imports
        _move_a_function(science / "geometry.py", science / "encodings.py")
    else:
        _edit(science / "geometry.py", how)
    assert sources.code_hash(chapter, root) == before


def test_a_change_of_behaviour_makes_results_stale(tmp_path):
    root = _checkout(tmp_path)
    chapter = root / "notebooks" / "chapter.md"
    before = sources.code_hash(chapter, root)
    _edit(root / "posgeom_utils" / "geometry.py", "behaviour")
    assert sources.code_hash(chapter, root) != before
    also = sources.code_hash(chapter, root)
    chapter.write_text(CHAPTER.replace("sinusoidal(4, 2))", "sinusoidal(6, 2))", 1))
    assert sources.code_hash(chapter, root) != also
    pinned = sources.code_hash(chapter, root)
    pins = root / "requirements.txt"
    pins.write_text(pins.read_text().replace("numpy==", "numpy>="))
    assert sources.code_hash(chapter, root) != pinned


def test_what_cannot_change_a_number_does_not_count(tmp_path):
    root = _checkout(tmp_path)
    chapter = root / "notebooks" / "chapter.md"
    before = sources.code_hash(chapter, root)
    for machinery in ("repro/ledger.py", "repro/cli.py", "repro/runner.py"):
        _edit(root / "posgeom_utils" / machinery, "behaviour")
    _edit(root / "posgeom_utils" / "ntk.py", "behaviour")  # a module the chapter does not import
    chapter.write_text(CHAPTER.replace("# A chapter", "# A chapter\n\nMore prose."))
    (root / "requirements.txt").write_text((root / "requirements.txt").read_text() + "# a comment\n")
    assert sources.code_hash(chapter, root) == before
    _edit(root / "posgeom_utils" / "repro" / "results.py", "behaviour")  # the glue records the numbers
    assert sources.code_hash(chapter, root) != before


def test_build_cache_is_cleared_by_behaviour_only(tmp_path):
    root, python = _checkout(tmp_path), _fake_venv(tmp_path)
    assert not _build(root, python)
    _edit(root / "posgeom_utils" / "geometry.py", "docstring")
    _edit(root / "posgeom_utils" / "repro" / "cli.py", "behaviour")
    assert not _build(root, python)
    _edit(root / "posgeom_utils" / "encodings.py", "behaviour")
    assert _build(root, python)
    assert not (root / "_build" / ".jupyter_cache" / "sentinel").exists()
    pins = root / "requirements.txt"
    pins.write_text(pins.read_text().replace("numpy==", "numpy>="))
    assert _build(root, python)

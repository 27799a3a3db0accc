"""The science package stands alone, and what a chapter's numbers depend on decides what is re-executed.

``posgeom_utils`` (the science) imports nothing from ``posgeom_utils.repro`` (the reproduction machinery);
the build's execution cache and the freshness of committed results are keyed by the chapter source, the
science modules and the pinned environment, not by machinery files (README, *How this book is built*).
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


def test_science_modules_import_nothing_from_the_machinery():
    assert len(SCIENCE) >= 10, "the science package moved: update this test"
    offenders = {p.name: sorted(m for m in _imported_modules(p) if m.startswith("posgeom_utils.repro"))
                 for p in SCIENCE}
    assert not {k: v for k, v in offenders.items() if v}, offenders


def test_the_import_graph_check_can_fail(tmp_path):
    bad = tmp_path / "geometry.py"
    bad.write_text("from .repro.results import glue\nfrom posgeom_utils.repro import ledger\n")
    assert {"posgeom_utils.repro.results", "posgeom_utils.repro"} <= _imported_modules(bad)


def test_importing_the_science_package_loads_no_machinery():
    code = ("import sys, posgeom_utils, posgeom_utils.geometry, posgeom_utils.encodings, posgeom_utils.models, "
            "posgeom_utils.marginals, posgeom_utils.probes; "
            "print(sorted(m for m in sys.modules if m.startswith('posgeom_utils.repro')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- invalidation

def _checkout(tmp_path: Path) -> Path:
    """A minimal copy of the checkout: the package, the environment files and the build script."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "posgeom_utils", root / "posgeom_utils",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("requirements.txt", "pyproject.toml"):
        shutil.copy(ROOT / name, root / name)
    (root / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "build_book.sh", root / "scripts" / "build_book.sh")
    (root / "notebooks").mkdir()
    (root / "notebooks" / "chapter.md").write_text("---\njupytext: {}\n---\n# A chapter\n")
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


def _build(root: Path, python: Path) -> str:
    done = subprocess.run(["bash", "scripts/build_book.sh"], cwd=root, capture_output=True, text=True,
                          env={**os.environ, "PY": str(python)})
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


def _touch(path: Path) -> None:
    path.write_text(path.read_text() + "\n# edited\n")


def test_build_cache_survives_a_machinery_edit_and_not_a_science_edit(tmp_path):
    root, python = _checkout(tmp_path), _fake_venv(tmp_path)
    cached = root / "_build" / ".jupyter_cache" / "executed"
    _build(root, python)
    assert cached.exists()
    for machinery in ("repro/ledger.py", "repro/cli.py", "repro/results.py", "repro/claims.py"):
        _touch(root / "posgeom_utils" / machinery)
        out = _build(root, python)
        assert "clearing the execution cache" not in out, machinery
    for science in ("geometry.py", "encodings.py"):
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.touch()
        (cached.parent / "sentinel").touch()
        _touch(root / "posgeom_utils" / science)
        out = _build(root, python)
        assert "clearing the execution cache" in out, science
        assert not (cached.parent / "sentinel").exists(), science
    _touch(root / "requirements.txt")
    assert "clearing the execution cache" in _build(root, python)


def test_source_hash_ignores_machinery_and_follows_science(tmp_path):
    root = _checkout(tmp_path)
    chapter = root / "notebooks" / "chapter.md"
    before = sources.source_hash(chapter, root)
    _touch(root / "posgeom_utils" / "repro" / "ledger.py")
    _touch(root / "posgeom_utils" / "repro" / "runner.py")
    assert sources.source_hash(chapter, root) == before
    _touch(root / "posgeom_utils" / "marginals.py")
    after_science = sources.source_hash(chapter, root)
    assert after_science != before
    _touch(chapter)
    assert sources.source_hash(chapter, root) != after_science
    env_before = sources.science_hash(root)
    _touch(root / "pyproject.toml")
    assert sources.science_hash(root) != env_before


def test_science_files_are_the_top_level_modules_and_environment():
    names = [p.relative_to(ROOT).as_posix() for p in sources.science_files(ROOT)]
    assert "posgeom_utils/geometry.py" in names and "requirements.txt" in names
    assert not any("repro" in n for n in names)
    with pytest.raises(FileNotFoundError, match="root"):
        sources.science_files(ROOT / "book")

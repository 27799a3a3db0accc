#!/usr/bin/env python
"""Re-execute chapter notebooks with the ``smoke`` profile into ``tests/notebooks/`` (the nbval references).

Run after changing a chapter (``make references``); ``tests/test_notebooks.py`` fails when a reference
no longer matches its source. ``--from DIR`` takes the executed notebooks of an earlier
``posgeom run --profile smoke --out DIR`` instead of executing the chapters again. The chapter sources (``notebooks/*.md``) never hold outputs; only these
references do, and they live outside the book so that the build never sees two files for one chapter.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jupytext  # noqa: E402
import nbformat  # noqa: E402
import papermill  # noqa: E402

from posgeom_utils.repro.profiles import chapter_parameters  # noqa: E402

SOURCES = ROOT / "notebooks"
REFERENCES = ROOT / "tests" / "notebooks"


CHECKED = "nbval-check-output"


def strip_volatile(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Keep only the outputs nbval compares (cells tagged ``nbval-check-output``, stdout only).

    Timings, papermill bookkeeping, figures and stderr are dropped: nbval --nbval-lax ignores them, and
    the references stay small and reviewable.
    """
    nb.metadata.pop("papermill", None)
    for index, cell in enumerate(nb.cells):
        cell.id = f"cell-{index}"  # stable ids: regenerating a reference gives a reviewable diff
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            checked = CHECKED in cell.metadata.get("tags", [])
            cell.outputs = [o for o in cell.outputs if checked and o.get("name") != "stderr"]
    return nb


def make_reference(chapter: str, profile: str = "smoke", run: Path | None = None) -> Path:
    """Write the reference of ``chapter``: executed now, or taken from the run folder ``run``."""
    out = REFERENCES / f"{chapter}.ipynb"
    REFERENCES.mkdir(parents=True, exist_ok=True)
    if run is not None:
        executed = nbformat.read(run / chapter / f"{chapter}.ipynb", as_version=4)
        injected = next(c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", []))
        if f'profile = "{profile}"' not in injected.source:
            raise SystemExit(f"{run / chapter}: not a {profile} run; pass the output of posgeom run --profile {profile}")
    else:
        executed = papermill.execute_notebook(
            jupytext.read(SOURCES / f"{chapter}.md"), None, parameters=chapter_parameters(chapter, profile),
            kernel_name="python3", cwd=str(REFERENCES), progress_bar=False,
        )
    nbformat.write(strip_volatile(executed), out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("chapters", nargs="*", help="chapter names (default: every notebooks/*.md)")
    parser.add_argument("--from", dest="run", type=Path, help="a posgeom run --profile smoke output folder")
    args = parser.parse_args()
    os.environ.setdefault("POSGEOM_PROGRESS", "0")
    chapters = args.chapters or sorted(p.stem for p in SOURCES.glob("*.md"))
    for chapter in chapters:
        print("reference:", make_reference(chapter, run=args.run).relative_to(ROOT))


if __name__ == "__main__":
    main()

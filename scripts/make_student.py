#!/usr/bin/env python
"""Write the student edition: ``student/<chapter>.ipynb`` for every chapter (``make student``).

Chapter: *Teaching with this book*. From each chapter source (``notebooks/<chapter>.md``):

- every worked solution (a ``{solution}`` block of a markdown cell) is removed;
- the exercises stay, and their code cells (tagged ``exercise``) stay as stubs, ``answer = None`` followed
  by the call of the chapter's check (``posgeom_utils.teaching``), which says whether an answer is right
  without revealing it;
- a number the book glues into the prose (``{glue:text}`key```) becomes the name of the value, ``key``,
  which the chapter's cells compute;
- outputs are cleared, and the parameters cell is set to the ``smoke`` profile (small sizes: a chapter runs
  top to bottom in class in seconds to a minute), with a comment saying how to get the book's scale back.

The notebooks need the package and the data like the book does (``pip install -e .``, ``POSGEOM_DATA_DIR``).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jupytext  # noqa: E402
import nbformat  # noqa: E402

from posgeom_utils.repro.profiles import chapter_parameters  # noqa: E402

SOURCES = ROOT / "notebooks"
#: a ``{solution}`` directive in a markdown cell, fenced by 3+ backticks or colons, up to its closing fence
SOLUTION = re.compile(r"^(?P<fence>`{3,}|:{3,})\{solution\}.*?^(?P=fence)[ \t]*\n?", re.M | re.S)
#: a glued number in the prose (``{glue:text}`key:.3f```): shown by the book, not by Jupyter
GLUE = re.compile(r"\{glue(?::\w+)?\}`([^`:]+)(?::[^`]*)?`")
#: the comment on top of a student's parameters cell
NOTE = (
    "# Student edition: the smoke profile (small sizes, a run in class takes seconds). For the book's\n"
    '# scale set profile = "default" and restore the values of notebooks/<chapter>.md.\n'
)
#: cell tags that only shape the rendered book
BOOK_TAGS = set(
    "remove-cell remove-input remove-output hide-input hide-output hide-cell nbval-check-output "
    "nbval-ignore-output nbval-skip".split()
)


def smoke_parameters(source: str, overrides: dict) -> str:
    """The parameters cell ``source`` with each overridden name's value replaced (its comment kept).
    Chapter: *Teaching with this book*."""
    for name, value in overrides.items():
        pattern = re.compile(rf"^{re.escape(name)}\s*=\s*.*?(\s+#.*)?$", re.M)
        line = f"{name} = {value!r}"
        source, found = pattern.subn(lambda match: line + (match.group(1) or ""), source, count=1)
        if not found:
            raise ValueError(
                f"the parameters cell declares no {name!r}: profiles and chapter disagree"
            )
    return NOTE + source


def student_notebook(chapter: str, source_dir: Path = SOURCES) -> nbformat.NotebookNode:
    """The student edition of ``chapter`` (see the module docstring). Chapter: *Teaching with this book*."""
    nb = jupytext.read(source_dir / f"{chapter}.md")
    overrides = chapter_parameters(chapter, "smoke")
    cells = []
    for cell in nb.cells:
        tags = list(cell.metadata.get("tags", []))
        if cell.cell_type == "markdown":
            cell.source = GLUE.sub(r"`\1`", SOLUTION.sub("", cell.source))
            if not cell.source.strip():
                continue
        elif cell.cell_type == "code":
            if "parameters" in tags:
                cell.source = smoke_parameters(cell.source, overrides)
            cell.outputs, cell.execution_count = [], None
        kept = [t for t in tags if t not in BOOK_TAGS]
        if kept:
            cell.metadata["tags"] = kept
        else:
            cell.metadata.pop("tags", None)
        cells.append(cell)
    nb.cells = cells
    nb.metadata.pop("jupytext", None)
    nb.metadata["posgeom"] = {"edition": "student", "chapter": chapter, "profile": "smoke"}
    return nb


def main(argv: list[str] | None = None) -> int:
    """``make student``: write the student notebooks. Chapter: *Teaching with this book*."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("chapters", nargs="*", help="chapter names (default: every notebooks/*.md)")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "student", help="output folder (default: student/)"
    )
    args = parser.parse_args(argv)
    chapters = args.chapters or sorted(p.stem for p in SOURCES.glob("*.md"))
    args.out.mkdir(parents=True, exist_ok=True)
    for chapter in chapters:
        path = args.out / f"{chapter}.ipynb"
        nbformat.write(student_notebook(chapter), path)
        print(f"student edition: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

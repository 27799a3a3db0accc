"""The student edition (``make student``, ``scripts/make_student.py``): no solution reaches a student, and
every student notebook runs top to bottom with the smoke profile."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.md"))
spec = importlib.util.spec_from_file_location("make_student", ROOT / "scripts" / "make_student.py")
make_student = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_student)


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("student")
    assert make_student.main(["--out", str(out)]) == 0
    return out


def leaked_solutions(chapter: str, notebook: nbformat.NotebookNode) -> list[str]:
    """Lines of the chapter's worked solutions (25+ characters, so they are distinctive) found in ``notebook``."""
    source = jupytext.read(ROOT / "notebooks" / f"{chapter}.md")
    text = "\n".join(cell.source for cell in notebook.cells)
    lines = []
    for cell in source.cells:
        if cell.cell_type == "code" and "solution" in cell.metadata.get("tags", []):
            lines += cell.source.splitlines()
        elif cell.cell_type == "markdown":
            for body in make_student.solution_texts(cell.source):
                lines += body.splitlines()
    # a line the chapter itself prints outside its solutions (its code, its prose) is no leak
    outside = "\n".join(make_student.SOLUTION.sub("", cell.source) if cell.cell_type == "markdown"
                        else cell.source
                        for cell in source.cells if "solution" not in cell.metadata.get("tags", []))
    return [line for line in (s.strip() for s in lines)
            if len(line) >= 25 and line not in outside and line in text]


def test_every_chapter_has_checked_exercises_with_solutions() -> None:
    for chapter in CHAPTERS:
        text = (ROOT / "notebooks" / f"{chapter}.md").read_text()
        nb = jupytext.reads(text, fmt="md:myst")
        exercises = text.count("{exercise}")
        solutions = sum(len(make_student.solution_texts(c.source)) for c in nb.cells if c.cell_type == "markdown")
        stubs = [c for c in nb.cells if c.cell_type == "code" and "exercise" in c.metadata.get("tags", [])]
        assert exercises >= 3, f"{chapter}: {exercises} exercises (at least 3)"
        assert solutions >= exercises, f"{chapter}: {exercises} exercises but {solutions} worked solutions"
        assert stubs and all("answer = None" in c.source and "check_" in c.source for c in stubs), \
            f"{chapter}: a computational exercise needs a stub cell tagged `exercise` with `answer = None` and a check"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_solution_reaches_a_student(student_dir: Path, chapter: str) -> None:
    nb = nbformat.read(student_dir / f"{chapter}.ipynb", as_version=4)
    assert not leaked_solutions(chapter, nb), f"{chapter}: solution text in the student notebook"
    text = "\n".join(cell.source for cell in nb.cells)
    assert "{solution" not in text and "{exercise}" in text
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "outputs must be cleared"
    assert any("answer = None" in c.source for c in nb.cells if c.cell_type == "code")
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and "profile = 'smoke'" in params[0].source


def test_the_leak_check_can_fail() -> None:
    """The teacher's notebook (the source as it is) does leak: the check sees it."""
    chapter = CHAPTERS[0]
    assert leaked_solutions(chapter, jupytext.read(ROOT / "notebooks" / f"{chapter}.md"))


@pytest.mark.notebook
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_student_notebook_runs_top_to_bottom(student_dir: Path, chapter: str) -> None:
    if not os.environ.get("POSGEOM_DATA_DIR"):
        pytest.skip("POSGEOM_DATA_DIR is not set: the chapters read the real corpora")
    import papermill

    papermill.execute_notebook(str(student_dir / f"{chapter}.ipynb"), str(student_dir / f"{chapter}.run.ipynb"),
                               kernel_name="python3", cwd=str(student_dir), progress_bar=False)

"""The student edition (``make student``, ``scripts/make_student.py``) of *Teaching with this book*, checked
by structure, nothing executed: no worked solution reaches a student, every exercise and its cell stay, the
parameters are the smoke profile's, outputs are cleared and each notebook is valid nbformat."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import jupytext
import nbformat
import pytest

from posgeom_utils.repro.profiles import chapter_parameters

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.md"))
spec = importlib.util.spec_from_file_location("make_student", ROOT / "scripts" / "make_student.py")
make_student = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_student)


@pytest.fixture(scope="module")
def student(tmp_path_factory: pytest.TempPathFactory) -> dict[str, nbformat.NotebookNode]:
    out = tmp_path_factory.mktemp("student")
    assert make_student.main(["--out", str(out)]) == 0
    return {chapter: nbformat.read(out / f"{chapter}.ipynb", as_version=4) for chapter in CHAPTERS}


def solution_lines(chapter: str) -> dict[str, list[str]]:
    """Per worked solution of ``chapter`` with code (by label), the lines of its python blocks that the
    chapter prints nowhere outside its solutions."""
    text = (ROOT / "notebooks" / f"{chapter}.md").read_text()
    outside = make_student.SOLUTION.sub("", text)
    lines = {}
    for solution in make_student.SOLUTION.finditer(text):
        code = "\n".join(re.findall(r"```python\n(.*?)```", solution[0], re.S)).splitlines()
        label = solution[0].split("\n", 1)[0].split()[-1]
        if code:
            lines[label] = [s for s in map(str.strip, code) if s and s not in outside]
    return lines


def leaks(chapter: str, notebook: nbformat.NotebookNode) -> list[str]:
    text = "\n".join(cell.source for cell in notebook.cells)
    return [line for lines in solution_lines(chapter).values() for line in lines if line in text]


def tagged(notebook: nbformat.NotebookNode, tag: str) -> list[str]:
    return [c.source for c in notebook.cells if tag in c.metadata.get("tags", [])]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_solution_reaches_a_student(student: dict, chapter: str) -> None:
    notebook = student[chapter]
    assert not leaks(chapter, notebook), f"{chapter}: solution code in the student notebook"
    assert "{solution" not in "\n".join(cell.source for cell in notebook.cells)
    assert leaks(chapter, jupytext.read(ROOT / "notebooks" / f"{chapter}.md")), "the check can fail"
    assert all(solution_lines(chapter).values()), "a solution whose code the check cannot see"
    text = (ROOT / "notebooks" / f"{chapter}.md").read_text()
    for label in re.findall(r"^:label: (ex-\S+)", text, re.M):
        assert f"{{solution}} {label}" in text, f"{label} has no worked solution"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_exercises_stay_and_parameters_are_smoke(student: dict, chapter: str) -> None:
    notebook, source = student[chapter], jupytext.read(ROOT / "notebooks" / f"{chapter}.md")
    nbformat.validate(notebook)
    assert tagged(notebook, "exercise") == tagged(source, "exercise") != []
    markdown = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    exercises = (ROOT / "notebooks" / f"{chapter}.md").read_text().count("{exercise}")
    assert markdown.count("{exercise}") == exercises >= 3 and "{glue" not in markdown
    (parameters,) = tagged(notebook, "parameters")
    assert parameters.startswith(make_student.NOTE)
    for name, value in chapter_parameters(chapter, "smoke").items():
        assert re.search(rf"^{name} = {re.escape(repr(value))}(\s+#|$)", parameters, re.M), name
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    assert notebook.metadata["posgeom"] == {
        "edition": "student",
        "chapter": chapter,
        "profile": "smoke",
    }

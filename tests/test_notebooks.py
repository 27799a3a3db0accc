"""Chapter sources, their parameters cells and their nbval references stay consistent.

nbval itself executes ``tests/notebooks/*.ipynb`` (run pytest with ``--nbval-lax``, as ``make test`` does)
and compares the outputs of the cells tagged ``nbval-check-output``.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import jupytext
import nbformat
import pytest

from posgeom_utils.repro.profiles import PROFILES, chapter_parameters

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.md"))
SHARED_PARAMETERS = {"profile", "seed", "model_name", "sample_size"}  # n only where a corpus geometry is measured


def code_cells(nb: nbformat.NotebookNode) -> list[str]:
    return [
        c.source.strip()
        for c in nb.cells
        if c.cell_type == "code" and "injected-parameters" not in c.metadata.get("tags", [])
    ]


def parameters_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, "each chapter has exactly one cell tagged `parameters`"
    return cells[0]


def test_there_are_chapters() -> None:
    assert CHAPTERS, "notebooks/ holds no chapter"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_source_is_a_myst_notebook_without_outputs(chapter: str) -> None:
    text = (ROOT / "notebooks" / f"{chapter}.md").read_text()
    nb = jupytext.reads(text, fmt="md:myst")
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert nb.metadata["jupytext"]["text_representation"]["format_name"] == "myst"
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_parameters_cell_and_profiles(chapter: str) -> None:
    nb = jupytext.read(ROOT / "notebooks" / f"{chapter}.md")
    names = {
        t.id for node in ast.parse(parameters_cell(nb).source).body if isinstance(node, ast.Assign)
        for t in node.targets if isinstance(t, ast.Name)
    }
    assert SHARED_PARAMETERS <= names, f"missing shared parameters: {SHARED_PARAMETERS - names}"
    for profile in PROFILES:
        overrides = chapter_parameters(chapter, profile)
        assert set(overrides) <= names, f"profile {profile!r} sets unknown parameters {set(overrides) - names}"


def notation_parameters() -> set[str]:
    """The parameter names the notation page documents (its table under *Parameters of the chapters*)."""
    text = (ROOT / "book" / "notation.md").read_text()
    table = text.split("## Parameters of the chapters", 1)[1].split("\n## ", 1)[0]
    names = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            names.update(part.strip(" `") for part in line.split("|")[1].split(","))
    return names


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_parameter_has_one_documented_name(chapter: str) -> None:
    """One name per concept: a chapter may only declare parameters that the notation page defines."""
    nb = jupytext.read(ROOT / "notebooks" / f"{chapter}.md")
    names = {t.id for node in ast.parse(parameters_cell(nb).source).body if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name)}
    documented = notation_parameters()
    assert {"task_len", "synthetic_n", "n"} <= documented
    assert names <= documented, f"{chapter}: parameters missing from book/notation.md: {names - documented}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_reference_notebook_matches_its_source(chapter: str) -> None:
    reference = ROOT / "tests" / "notebooks" / f"{chapter}.ipynb"
    assert reference.is_file(), f"no nbval reference for {chapter}: run `make references`"
    ref = nbformat.read(reference, as_version=4)
    src = jupytext.read(ROOT / "notebooks" / f"{chapter}.md")
    assert code_cells(ref) == code_cells(src), (
        f"tests/notebooks/{chapter}.ipynb is stale: its code differs from notebooks/{chapter}.md; "
        "run `make references` and review the diff of the checked outputs"
    )
    injected = [c for c in ref.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and "profile = \"smoke\"" in injected[0].source
    checked = [c for c in ref.cells if "nbval-check-output" in c.metadata.get("tags", [])]
    assert checked and all(c.outputs for c in checked), "checked cells must carry reference outputs"


def test_smoke_profile_is_known() -> None:
    with pytest.raises(ValueError, match="profile"):
        chapter_parameters(CHAPTERS[0], "huge")
    with pytest.raises(ValueError, match="chapter"):
        chapter_parameters("no_such_chapter", "smoke")


# --------------------------------------------------------------------------- the page shows the code it explains

PAGE_WIDTH = 88  # characters of code that fit the book's text column (book/_static/code.css)
# Chapter cells and the package code chapters include with literalinclude both fit it: the package's
# formatter (ruff, pyproject.toml) wraps at the same width. Printed output may be wider: it wraps, and
# tests/test_browser.py checks that no code block scrolls sideways.
HIDDEN = {"remove-cell", "remove-input"}
INCLUDE = re.compile(r"```\{literalinclude\} \.\./((?:posgeom_utils|scripts)/[\w/]+\.py)\n((?::[\w-]+:.*\n)*)")


def included_objects(text: str) -> list[tuple[str, str]]:
    """(file, dotted object) of every ``literalinclude`` of the science package in a chapter source."""
    found = []
    for match in INCLUDE.finditer(text):
        obj = re.search(r":pyobject: (\S+)", match.group(2))
        assert obj, f"literalinclude of {match.group(1)} without :pyobject: shows a whole module"
        found.append((match.group(1), obj.group(1)))
    return found


def object_lines(path: Path, dotted: str) -> list[str]:
    """The source lines of ``dotted`` (``f``, ``Class.method``) in ``path``, dedented, as Sphinx shows them."""
    lines = path.read_text().splitlines()
    body = ast.parse("\n".join(lines)).body
    node = None
    for part in dotted.split("."):
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part), None)
        assert node is not None, f"{path.name} has no {dotted}: the chapter's literalinclude shows nothing"
        body = node.body
    start = min([d.lineno for d in node.decorator_list] + [node.lineno])
    chunk = lines[start - 1:node.end_lineno]
    indent = min(len(line) - len(line.lstrip()) for line in chunk if line.strip())
    return [line[indent:] for line in chunk]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_shows_the_package_code_it_relies_on(chapter: str) -> None:
    objects = included_objects((ROOT / "notebooks" / f"{chapter}.md").read_text())
    assert len(objects) >= 2, f"{chapter} shows no implementation from posgeom_utils (literalinclude :pyobject:)"
    for file, dotted in objects:
        wide = [line for line in object_lines(ROOT / file, dotted) if len(line) > PAGE_WIDTH]
        assert not wide, f"{chapter}: {file}:{dotted} has lines wider than {PAGE_WIDTH}: {wide[:2]}"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_hidden_cell_defines_a_function_and_visible_code_fits(chapter: str) -> None:
    nb = jupytext.read(ROOT / "notebooks" / f"{chapter}.md")
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tags = set(cell.metadata.get("tags", []))
        source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        if tags & HIDDEN:
            defs = [n.name for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
            assert not defs, f"{chapter}: a hidden cell defines {defs}; show it (hide-input at most)"
        else:
            wide = [line for line in cell.source.splitlines() if len(line) > PAGE_WIDTH]
            assert not wide, f"{chapter}: visible code wider than {PAGE_WIDTH}: {wide[:2]}"


def test_the_formatter_wraps_at_the_page_width() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["ruff"]["line-length"] == PAGE_WIDTH


def test_the_package_is_formatted_by_the_one_formatter() -> None:
    """One formatter for the whole package (ruff, pinned in requirements.txt)."""
    done = subprocess.run([sys.executable, "-m", "ruff", "format", "--check", "posgeom_utils"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"run `ruff format posgeom_utils`:\n{done.stdout}{done.stderr}"


def test_the_package_passes_the_linter() -> None:
    """``ruff check`` with the pinned ruff's rules, page width (E501) included: strings, comments and tables."""
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--extend-select", "E501", "posgeom_utils"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, (f"fix what ruff reports (`ruff check --fix posgeom_utils` fixes some); lines wider than "
                                  f"{PAGE_WIDTH}: split long strings (\"a \" \"b\"), re-wrap comments and docstrings, wrap "
                                  f"`# fmt: off` tables by hand:\n{done.stdout}{done.stderr}")


def test_the_code_checks_can_fail(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("class A:\n    def f(self):\n        return 1  " + "#" * 100 + "\n")
    assert max(map(len, object_lines(module, "A.f"))) > PAGE_WIDTH
    with pytest.raises(AssertionError, match="no A.g"):
        object_lines(module, "A.g")
    assert included_objects("```{literalinclude} ../posgeom_utils/geometry.py\n:language: python\n"
                            ":pyobject: stress\n```\n") == [("posgeom_utils/geometry.py", "stress")]


# --------------------------------------------------------------------------- papermill's -p names are checked


def _tiny_chapter() -> nbformat.NotebookNode:
    """A chapter's opening: an import cell, the parameters cell, the show_parameters cell (as every chapter)."""
    cells = [
        nbformat.v4.new_code_cell("import math"),
        nbformat.v4.new_code_cell('profile = "reference"  # the profile\nn_seeds = 3  # seeds', metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell('from posgeom_utils.repro.results import show_parameters\nshow_parameters("necessity", globals())'),
        nbformat.v4.new_code_cell("print(n_seeds)"),
    ]
    return nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})


def test_a_misspelt_papermill_parameter_stops_the_chapter(tmp_path: Path) -> None:
    """``-p n_seed 5`` (for n_seeds) fails at the parameters block, naming the known parameters; a right name runs."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    nb = tmp_path / "tiny.ipynb"
    nbformat.write(_tiny_chapter(), nb)
    with pytest.raises(PapermillExecutionError) as caught:
        papermill.execute_notebook(str(nb), str(tmp_path / "bad.ipynb"), parameters={"n_seed": 5}, progress_bar=False)
    message = str(caught.value.evalue)
    assert "papermill -p n_seed: not a parameter of necessity" in message
    assert "n_seeds" in message and "train_steps" in message  # the cell's names and the profiles' names
    assert caught.value.cell_index == 3  # the show_parameters cell, before any of the chapter's work
    out = papermill.execute_notebook(str(nb), str(tmp_path / "good.ipynb"), parameters={"n_seeds": 5}, progress_bar=False)
    assert out.cells[-1].outputs[0]["text"] == "5\n"

"""Chapter sources, their parameters cells and their nbval references stay consistent.

nbval itself executes ``tests/notebooks/*.ipynb`` (run pytest with ``--nbval-lax``, as ``make test`` does)
and compares the outputs of the cells tagged ``nbval-check-output``.
"""

from __future__ import annotations

import ast
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

"""The teaching pages without a build: the course plan (*Teaching with this book*), the preface's findings
table and its headline count, the ledger rows behind them, and the book's table style.

Cheap: no kernel, no chapter executed. The preface's cells run in this process, in ``book/`` as the build
runs them, and read the committed reference results.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from posgeom_utils import teaching
from posgeom_utils.repro import results as glued
from posgeom_utils.repro.ledger import (
    REPRODUCED,
    build_ledger,
    load_claims,
    verdict_counts,
)

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
NOTEBOOKS = ROOT / "notebooks"
CHAPTERS = sorted(p.stem for p in NOTEBOOKS.glob("*.md"))
WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
NUMBER_WORDS = {word: k for k, word in enumerate(WORDS, 1)}
CELL = re.compile(r"^```\{code-cell\} ipython3\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def page(name: str) -> str:
    return (BOOK / f"{name}.md").read_text(encoding="utf-8")


def code_cells(source: str) -> list[str]:
    """The code of every code cell of a MyST page, without its options (``:tags:`` lines, a YAML block)."""
    cells = []
    for body in CELL.findall(source):
        body = re.sub(r"\A---\n.*?\n---\n", "", body, flags=re.DOTALL)
        cells.append("\n".join(line for line in body.splitlines() if not line.startswith(":")))
    return cells


def run_cell(code: str, namespace: dict) -> object:
    """Execute a cell in ``namespace`` and return the value of its last expression (what the page shows)."""
    tree = ast.parse(code)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    with contextlib.redirect_stdout(io.StringIO()):  # outside IPython, myst_nb's glue prints
        exec(compile(tree, "<cell>", "exec"), namespace)  # noqa: S102 - the page's own cell
        return eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace) if last else None


@pytest.fixture(scope="module")
def reference_ledger():
    return build_ledger({"reference": BOOK / "results" / "reference"}, profiles=("reference",))


# ------------------------------------------------------------------------------------------- the course


@pytest.fixture(scope="module")
def plan():
    return teaching.course_plan(NOTEBOOKS, BOOK / "results")


def test_course_plan_has_the_sessions_the_page_names_each_within_the_limit(plan) -> None:
    source = page("course")
    heading = re.search(r"^## A (\w+)-session course$", source, re.MULTILINE)
    assert heading, "the course page names its number of sessions in a heading"
    assert NUMBER_WORDS[heading.group(1)] == len(plan), "the heading and course_plan disagree"
    assert "{glue:text}`course_sessions`" in source  # the prose quotes the computed count
    minutes = plan["in class (min)"]
    assert minutes.notna().all(), "a chapter of the plan has no measured class time"
    assert (minutes <= teaching.SESSION_LIMIT).all(), minutes.to_dict()
    assert teaching.SESSION_LIMIT <= 90
    assert sorted(c for chapters in plan["chapters"] for c in chapters) == CHAPTERS  # each chapter once


def test_central_chapter_has_its_own_session_and_a_control_to_rerun(plan) -> None:
    central = plan[[("learned_geometry" in c) for c in plan["chapters"]]]
    assert len(central) == 1 and central.iloc[0]["chapters"] == ("learned_geometry",)
    assert teaching.CONTROL_RUN in central.iloc[0]["activity"]
    source = page("course")
    block = re.search(r"^```bash\n(.*?)^```$", source, re.MULTILINE | re.DOTALL)
    assert block and teaching.CONTROL_RUN in block.group(1), "the page shows the activity's command"
    keys = re.findall(r'results\["(\w+)"\]', block.group(1))
    assert keys, "the activity reads numbers from results.json"
    for profile in ("class", "reference"):  # the page quotes both
        path = BOOK / "results" / profile / "learned_geometry" / "results.json"
        missing = set(keys) - set(json.loads(path.read_text())["results"])
        assert not missing, f"the {profile} results lack {missing}"


def test_markdown_table_escapes_pipes_and_keeps_one_line_per_row() -> None:
    import pandas as pd

    frame = pd.DataFrame({"a": ["x | y", "two\nlines"], "b": [1, 2]})
    table = teaching.markdown_table(frame, {"A": lambda r: r["a"], "B": lambda r: r["b"]})
    assert table.splitlines() == ["| A | B |", "| --- | --- |", "| x \\| y | 1 |", "| two lines | 2 |"]


# ------------------------------------------------------------------------------- the preface and the ledger


def test_every_ledger_row_has_evidence_and_every_qualitative_claim_a_headline(reference_ledger) -> None:
    empty = reference_ledger.index[reference_ledger["evidence (reference)"].str.strip() == ""].tolist()
    assert not empty, f"ledger rows with an empty evidence cell: {empty}"
    for claim in load_claims():
        if claim.text is not None:  # a theorem, proposition, conjecture or thesis: a finding
            assert claim.headline.strip(), f"{claim.id} has no headline for the preface's findings table"
        assert len(claim.headline) <= 90, f"{claim.id}: a headline is a few words"


@pytest.fixture(scope="module")
def preface():
    """The preface's findings cells run in book/, as the build runs them: (glued values, table shown)."""
    cells = code_cells(page("preface"))
    namespace: dict = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(BOOK)
        run_cell(cells[0], namespace)
        table = run_cell(cells[1], namespace)
    return glued.results(), table


def test_preface_headline_count_is_the_ledgers(preface, reference_ledger) -> None:
    values, _ = preface
    source = page("preface")
    counts = verdict_counts(reference_ledger, "reference")
    assert values["preface_reproduced"] == counts[REPRODUCED]
    assert values["preface_claims"] == len(reference_ledger)
    count = r"\*\*\{glue:text\}`(\w+)` of its\s+\{glue:text\}`(\w+)` claims reproduced\*\*"
    statement = re.search(count, source)
    assert statement and statement.groups() == ("preface_reproduced", "preface_claims"), "the count is glued"


def test_preface_findings_table_has_a_line_per_finding(preface, reference_ledger) -> None:
    _, table = preface
    rows = table.data.splitlines()[2:]  # IPython Markdown: header, rule, then one line per row
    findings = reference_ledger[reference_ledger["headline"] != ""]
    assert len(rows) == len(findings)
    for row, headline in zip(rows, findings["headline"]):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        assert cells[0] == headline and len(cells) == 4
        assert cells[2].strip(" .-"), f"{headline}: no 'what we found'"


# --------------------------------------------------------------------------------------- the table style


def css_rules(text: str) -> list[tuple[str, str]]:
    """(selector, declarations) of every innermost rule of a stylesheet, comments removed."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL)
    return [(sel.split("{")[-1].strip(), body) for sel, body in re.findall(r"([^{}]*)\{([^{}]*)\}", text)]


def test_no_table_cell_may_break_anywhere() -> None:
    """overflow-wrap: anywhere on a table cell splits its numbers across lines (the PDF did); print.css
    has none at all. Code blocks (code.css) may still break anywhere: a line of code has no table to fit."""
    sheets = sorted((BOOK / "_static").glob("*.css"))
    assert {p.name for p in sheets} >= {"code.css", "print.css"}
    for sheet in sheets:
        for selector, body in css_rules(sheet.read_text()):
            anywhere = re.search(r"overflow-wrap\s*:\s*anywhere", body)
            cell = re.search(r"\b(table|td|th|tr)\b", selector)
            assert not (anywhere and cell), f"{sheet.name}: {selector}"
            assert not (anywhere and sheet.name == "print.css"), f"print.css: {selector}"


def test_wide_output_tables_scroll_in_their_box_on_screen() -> None:
    rules = css_rules((BOOK / "_static" / "code.css").read_text())
    scrolling = [s for s, body in rules if re.search(r"overflow-x\s*:\s*auto", body)]
    assert any("div.cell_output div.output" in s for s in scrolling), scrolling

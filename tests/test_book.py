"""The built book (``_build/html``): every chapter's figures are there, and the machinery works.

``make test`` builds the book first and sets ``POSGEOM_REQUIRE_BOOK=1``, so a missing build fails;
run alone, these tests skip when there is no build.
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path

import pytest
from booktools import toc_files  # tests/ is on sys.path under pytest

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.md"))


def page(name: str) -> str:
    if not HTML.is_dir():
        if os.environ.get("POSGEOM_REQUIRE_BOOK") == "1":
            pytest.fail("no built book in _build/html: run `make book`")
        pytest.skip("no built book in _build/html (run `make book`)")
    path = HTML / f"{name}.html"
    assert path.is_file(), f"{path} was not built"
    return path.read_text(encoding="utf-8")


def test_toc_lists_only_existing_pages_and_every_chapter() -> None:
    files = toc_files()
    for f in files:
        assert (ROOT / f"{f}.md").is_file(), f"_toc.yml lists {f}, which does not exist"
    for chapter in CHAPTERS:
        assert f"notebooks/{chapter}" in files, f"notebooks/{chapter}.md is not in _toc.yml"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_figure_of_a_chapter_is_rendered(chapter: str) -> None:
    source = (ROOT / "notebooks" / f"{chapter}.md").read_text()
    figures = re.findall(r"^\s+name:\s*(fig-[\w-]+)", source, flags=re.M)
    assert figures, f"{chapter} declares no figure"
    html = page(f"notebooks/{chapter}")
    for fig in figures:
        match = re.search(rf'<figure[^>]*id="{fig}"(.*?)</figure>', html, flags=re.S)
        assert match, f"figure {fig} of {chapter} is missing from the built page"
        assert re.search(r'<img[^>]+src="[^"]*_images/[^"]+\.png"', match.group(1)), f"{fig} has no image"
        assert (HTML / "_images").is_dir()


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_prose_numbers_are_glued(chapter: str) -> None:
    html = page(f"notebooks/{chapter}")
    assert "{glue" not in html, "an unresolved glue role is left in the page"
    assert html.count('class="pasted-text"') >= 10, "the chapter quotes its numbers through glue"


def test_definition_cited_across_pages_solution_folded_and_citations() -> None:
    preface = page("book/preface")
    assert re.search(r'href="notation\.html#def-positional-marginal"', preface), "cross-page prf:ref"
    chapter = page("notebooks/positions_in_real_text")
    assert re.search(r'class="[^"]*solution[^"]*dropdown|class="[^"]*dropdown[^"]*solution', chapter)
    assert "Cirrincione, 2026" in chapter, "author-year citation rendered"
    bibliography = page("book/bibliography")
    for author in ("Cirrincione", "Vaswani", "Torgerson", "Maas", "Socher", "Press"):
        assert author in bibliography


NUMBER = r"(-?\d+(?:\.\d+)?)"
INTERVAL = re.compile(NUMBER + r"\s*(%?)\s*\[\s*" + NUMBER + r"\s*%?\s*,\s*" + NUMBER + r"\s*%?\s*\]")


def visible_text(html: str) -> str:
    """The text of a page with scripts, styles, code and tags removed, entities for minus resolved."""
    html = re.sub(r"<(script|style|pre|code)\b.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"<[^>]+>", "", html).replace("&#8722;", "-").replace("−", "-")


def excluded_estimates(text: str) -> list[str]:
    """Every "estimate [low, high]" whose interval excludes the estimate beyond its printed rounding."""
    found = []
    for match in INTERVAL.finditer(text):
        estimate, low, high = match.group(1), match.group(3), match.group(4)
        digits = max(len(s.partition(".")[2]) for s in (estimate, low, high))
        slack = 0.5 * 10 ** -digits
        if not float(low) - slack <= float(estimate) <= float(high) + slack:
            found.append(match.group(0))
    return found


def test_the_interval_scan_finds_an_excluded_estimate() -> None:
    assert excluded_estimates("a stress of 0.426 [0.443, 0.479] at the last layer") == ["0.426 [0.443, 0.479]"]
    assert excluded_estimates("0.43 [0.425, 0.479] and 12% [10%, 14%] and -0.2 [-0.3, 0.1]") == []


@pytest.mark.parametrize("name", toc_files())
def test_every_interval_contains_its_estimate(name: str) -> None:
    """An interval shown beside an estimate always contains it (issue 21: '0.426 [0.443, 0.479]')."""
    assert excluded_estimates(visible_text(page(name))) == []


GLUED = re.compile(r"\{glue:text\}`([A-Za-z0-9_]+):([^`]+)`")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_chapter_shows_its_committed_reference_results(chapter: str) -> None:
    """One set of numbers (issue 21): each number glued into a chapter's prose, formatted as the prose formats
    it, is the value committed in book/results/reference/<chapter>/results.json."""
    results = json.loads((ROOT / "book/results/reference" / chapter / "results.json").read_text())
    assert results["parameters"]["profile"] == "reference"
    glued, text = results["results"], visible_text(page(f"notebooks/{chapter}"))
    source = (ROOT / "notebooks" / f"{chapter}.md").read_text()
    checked = 0
    for key, fmt in sorted(set(GLUED.findall(source))):
        value = glued.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or fmt.endswith("e"):
            continue  # text, or rounding noise in scientific notation (its digits depend on the processor)
        shown = format(int(value) if fmt.endswith("d") else value, fmt)
        assert shown in text, f"{key} = {shown} is not on the page"
        checked += 1
    assert checked >= 10, f"only {checked} glued numbers of {chapter} were checked"


@pytest.mark.parametrize("name", toc_files())
def test_no_stray_object_repr_is_shown(name: str) -> None:
    """A cell whose last expression returns an object shows its repr (issue 21: 'Generator(PCG64) at 0x...')."""
    shown = re.sub(r"<[^>]+>", "", page(name))  # outputs included (visible_text drops <pre>)
    assert not re.findall(r"\bat 0x[0-9A-Fa-f]{6,}", shown)


INCLUDE = re.compile(r"```\{literalinclude\} (\S+)\n((?::[\w-]+:.*\n)*)")


def test_every_literalinclude_finds_its_object_and_marker() -> None:
    """A page that quotes package code by ``:pyobject:`` and ``:start-after:`` breaks the strict build when a
    refactor renames the object or drops the marker comment: caught here from the sources, without a build."""
    pages = [*(ROOT / "notebooks").glob("*.md"), *(ROOT / "book").glob("*.md")]
    problems, seen = [], 0
    for page_path in pages:
        for path, block in INCLUDE.findall(page_path.read_text(encoding="utf-8")):
            options = dict(re.findall(r":([\w-]+):\s*(.*)", block))
            source = (page_path.parent / path).read_text(encoding="utf-8")
            text = source
            if "pyobject" in options:
                name, node = options["pyobject"].strip(), ast.parse(source)
                for part in name.split("."):  # Class.method, or a class in a function
                    inner = (n for n in ast.walk(node) if n is not node)
                    node = next((n for n in inner if getattr(n, "name", 0) == part), None)
                    if node is None:
                        break
                if node is None:
                    problems.append(f"{page_path.name}: {path} has no {name}")
                    continue
                text = ast.get_source_segment(source, node) or ""
            marker = options.get("start-after", "").strip().strip('"')
            if marker and marker not in text:
                problems.append(f"{page_path.name}: {marker!r} not in {path} {options}")
            seen += 1
    assert seen > 10, "the pattern found almost no literalinclude: is it stale?"
    assert not problems, problems

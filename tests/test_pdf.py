"""The PDF edition (``_build/pdf/book.pdf``, written by ``scripts/make_pdf.py``), read back with poppler.

The PDF is made when it is missing or older than the HTML build or the book's sources; ``POSGEOM_BOOK_PDF``
names a PDF to check as it is. ``pdfinfo`` gives the page count, ``pdftotext`` the text layer, in which
every page title of the toc (the first ``# `` heading of its source), numbered figures (as many distinct
"Fig. N" as the chapters declare figures), the bibliography (every entry of ``book/references.bib``, by its first
author) and no raw TeX (``$$``, ``\\begin{``, ``\\frac``) must be found. Printed code may hold TeX legitimately
(matplotlib labels): a hit on a line that is part of a code cell of the sources is not counted.

Like ``test_book.py``: without a built book (``_build/html``) these tests skip, unless
``POSGEOM_REQUIRE_BOOK=1`` (``make test``), where that is a failure, as is a missing poppler or Chromium.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from booktools import toc_files, unavailable  # tests/ is on sys.path under pytest

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
PDF_ENV = "POSGEOM_BOOK_PDF"
PDF = Path(os.environ.get(PDF_ENV, ROOT / "_build" / "pdf" / "book.pdf"))
MAKE_PDF_TIMEOUT_S = 1200
PAGES_PER_TOC_PAGE = 4  # the default book prints ~15 pages per chapter; fewer means something was dropped




def sources() -> list[Path]:
    return [ROOT / f"{name}.md" for name in toc_files()]


def normalise(text: str) -> str:
    """NFKC (ligatures), one kind of quote and dash, single spaces."""
    text = unicodedata.normalize("NFKC", text)
    text = text.translate(str.maketrans({"’": "'", "‘": "'", "“": '"', "”": '"', "–": "-", "—": "-", "\u00ad": ""}))
    return re.sub(r"\s+", " ", text).strip()


def title_fragments(path: Path) -> list[str]:
    """The text of the page's first ``# `` heading, split around inline math and markup."""
    heading = next((line[2:] for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("# ")), None)
    assert heading, f"{path.relative_to(ROOT)} has no '# ' title"
    plain = re.sub(r"\{[\w:-]+\}`([^`]*)`", r"\1", heading)  # roles keep their text
    parts = re.split(r"\$[^$]*\$|[`*_]", plain)
    return [normalise(p) for p in parts if normalise(p)]


def code_text() -> str:
    """Every line of every code cell and code block of the sources (stripped), to excuse TeX in printed code."""
    lines: list[str] = []
    for path in sources():
        inside = None
        for line in path.read_text(encoding="utf-8").splitlines():
            fence = re.match(r"^\s*(`{3,})", line)
            if inside is None and fence and not re.match(r"^\s*`{3,}\s*\{(prf|exercise|solution|admonition|figure|"
                                                         r"note|tip|warning|important|math|bibliography)", line):
                inside = fence.group(1)
            elif inside is not None and fence and line.strip() == inside:
                inside = None
            elif inside is not None:
                lines.append(normalise(line))
    return "\n".join(lines)


def bib_first_authors() -> dict[str, str]:
    """key -> the first author's surname, from ``book/references.bib``."""
    bib = (ROOT / "book" / "references.bib").read_text(encoding="utf-8")
    authors = {}
    for key, body in re.findall(r"@\w+\{([^,]+),(.*?)\n\}", bib, flags=re.DOTALL):
        match = re.search(r"author\s*=\s*\{(.*?)\},?\s*\n", body, flags=re.DOTALL)
        if match:
            first = match.group(1).split(" and ")[0]
            surname = first.split(",")[0] if "," in first else first.split()[-1]
            authors[key] = re.sub(r"[{}]|\\.", "", surname).strip()
    return authors


def pdf_is_fresh(pdf: Path) -> bool:
    if not pdf.is_file():
        return False
    inputs = [HTML / "index.html", ROOT / "_config.yml", ROOT / "_toc.yml", ROOT / "book" / "references.bib",
              ROOT / "book" / "_static" / "print.css", ROOT / "scripts" / "make_pdf.py", *sources()]
    newest = max(p.stat().st_mtime for p in inputs if p.exists())
    return pdf.stat().st_mtime >= newest


@pytest.fixture(scope="module")
def pdf() -> Path:
    for tool in ("pdftotext", "pdfinfo"):
        if shutil.which(tool) is None:
            unavailable(f"poppler's {tool} is missing (apt-get install poppler-utils)")
    if PDF_ENV in os.environ:
        if not PDF.is_file():
            pytest.fail(f"{PDF_ENV}={PDF} does not exist")
        return PDF
    if not (HTML / "index.html").is_file():
        unavailable(f"no built book in {HTML} (run `make book`, then `make pdf`)")
    if not pdf_is_fresh(PDF):
        try:
            import playwright  # noqa: F401
        except ImportError:
            unavailable("Playwright is not installed (pip install -r requirements.txt)")
        run = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_pdf.py")], cwd=ROOT,
                             capture_output=True, text=True, timeout=MAKE_PDF_TIMEOUT_S, check=False)
        assert run.returncode == 0, f"scripts/make_pdf.py failed:\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    assert PDF.is_file()
    return PDF


@pytest.fixture(scope="module")
def text(pdf: Path) -> str:
    return subprocess.run(["pdftotext", "-enc", "UTF-8", str(pdf), "-"], capture_output=True, text=True,
                          check=True).stdout


def test_page_count(pdf: Path) -> None:
    info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
    pages = int(re.search(r"^Pages:\s+(\d+)", info, flags=re.MULTILINE).group(1))
    assert "A4" in info, "the PDF is not A4"
    minimum = PAGES_PER_TOC_PAGE * len(toc_files())
    assert pages >= minimum, f"{pages} pages, expected at least {minimum}"


def test_every_page_title_is_in_the_text(text: str) -> None:
    flat = normalise(text)
    missing = [f"{path.relative_to(ROOT)}: {fragment!r}" for path in sources()
               for fragment in title_fragments(path) if fragment not in flat]
    assert not missing, "titles missing from the PDF's text:\n  " + "\n  ".join(missing)


def test_no_raw_tex_outside_code(text: str) -> None:
    code = code_text()
    hits = []
    for line in text.splitlines():
        if re.search(r"\$\$|\\begin\{|\\frac", line) and normalise(line) not in code:
            hits.append(line.strip()[:160])
    assert not hits, "raw TeX in the PDF's text:\n  " + "\n  ".join(hits[:10])


def test_figures_are_numbered(text: str) -> None:
    declared = sum(len(re.findall(r"^\s+name:\s*fig-[\w-]+", p.read_text(encoding="utf-8"), flags=re.MULTILINE))
                   for p in sources())
    numbers = set(re.findall(r"\bFig(?:ure|\.)\s?(\d+(?:\.\d+)*)", text))
    assert len(numbers) >= declared, f"{len(numbers)} distinct figure numbers in the PDF, {declared} figures declared"


def test_bibliography_is_printed(text: str) -> None:
    flat = normalise(text)
    start = flat.rfind("Bibliography")
    assert start >= 0, "no Bibliography heading"
    bibliography = flat[start:]
    authors = bib_first_authors()
    assert authors, "no entries read from book/references.bib"
    missing = [f"{key} ({surname})" for key, surname in authors.items() if surname not in bibliography]
    assert not missing, f"bibliography entries missing from the PDF: {missing}"
    labels = re.findall(r"\[\d+\]", bibliography)
    assert len(labels) >= len(authors), f"{len(labels)} numbered entries printed, {len(authors)} in references.bib"

"""The built book in a real browser, offline: every page of the toc in headless Chromium (Playwright).

The pages are served from 127.0.0.1 and every request is routed: only 127.0.0.1/localhost goes through,
anything else is aborted and named in the failure (the book must read offline: MathJax, fonts, scripts and
figures all come from ``_build/html``). Per page: MathJax finished typesetting (``MathJax.startup.promise``)
and typeset every formula without a TeX error, no raw TeX is left in the text outside code, every image
loaded, no console error or uncaught exception, no local request failed. Where the page's source has them:
theorem/proof boxes (sphinx-proof), exercise and solution boxes (sphinx-exercise) and glued numbers
(myst-nb ``{glue:text}`` -> ``span.pasted-text``). A full-page screenshot of each chapter goes to
``_build/screenshots/<chapter>.png`` (a CI artefact).

The book folder is ``_build/html`` (``POSGEOM_BOOK_HTML`` overrides it). Like ``test_book.py``: without a
build these tests skip, unless ``POSGEOM_REQUIRE_BOOK=1`` (``make test``), where that is a failure; so is a
missing Playwright or Chromium then.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import textwrap
import time
from pathlib import Path

import pytest
from booktools import toc_files, unavailable  # tests/ is on sys.path under pytest

ROOT = Path(__file__).resolve().parents[1]
HTML = Path(os.environ.get("POSGEOM_BOOK_HTML", ROOT / "_build" / "html")).resolve()
SCREENSHOTS = Path(os.environ.get("POSGEOM_SCREENSHOTS", HTML.parent / "screenshots"))
PAGE_TIMEOUT_MS = 60_000

_spec = importlib.util.spec_from_file_location("posgeom_browser", ROOT / "scripts" / "browser.py")
browser_helpers = sys.modules.setdefault("posgeom_browser", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(browser_helpers)




# ---------------------------------------------------------------------------------------------- the source
_FENCE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,})\s*(\{[^}]*\}|[\w+-]*)")
_CODE_DIRECTIVES = {"{code-cell}", "{code-block}", "{code}", "{literalinclude}", "{sourcecode}", "{raw}"}


def prose(source: str) -> str:
    """The MyST source without front matter, code cells, code blocks and inline code: what is rendered as text."""
    lines = source.splitlines()
    if lines and lines[0].strip() == "---":
        end = next((i for i, line in enumerate(lines[1:], 1) if line.strip() == "---"), 0)
        lines = lines[end + 1:]
    kept: list[str] = []
    stack: list[tuple[str, int, bool]] = []  # open fences: (character, length, is code)
    for line in lines:
        match = _FENCE.match(line)
        if match:
            fence, info = match.group(1), match.group(2)
            rest = line[match.end():].strip()
            top = stack[-1] if stack else None
            if top and fence[0] == top[0] and len(fence) >= top[1] and not info and not rest:
                stack.pop()  # closes the innermost fence
                continue
            if not (top and top[2]):  # a fence opening outside code
                is_code = fence[0] != ":" and (info in _CODE_DIRECTIVES or not info.startswith("{"))
                stack.append((fence[0], len(fence), is_code))
                kept.append(line)  # directive lines keep their name ({prf:theorem} ...)
                continue
        if stack and stack[-1][2]:
            continue
        kept.append(line)
    text = "\n".join(kept)
    # inline code goes, roles ({glue:text}`name`) stay: the alternation consumes a role's backticks first
    return re.sub(r"(\{[\w:-]+\}`[^`\n]*`)|`[^`\n]+`", lambda m: m.group(1) or "", text)


def expected_features(source: str) -> dict[str, int]:
    text = prose(source)
    directive = r"^\s*(?:`{3,}|:{3,})\s*\{%s\}"
    return {
        "proof": len(re.findall(directive % r"prf:[a-z]+", text, flags=re.MULTILINE)),
        "exercise": len(re.findall(directive % r"exercise(?:-start)?", text, flags=re.MULTILINE)),
        "solution": len(re.findall(directive % r"solution(?:-start)?", text, flags=re.MULTILINE)),
        "glue": len(re.findall(r"\{glue(?::text)?\}`", text)) + len(re.findall(r"\{glue:\}`", text)),
        "math": int(bool(re.search(r"\$[^$\n]+\$|\\begin\{|\{math\}", text))),
    }


# ---------------------------------------------------------------------------------------------- the page
RAW_TEX = [
    (r"\$\$", "$$"),
    (r"\\begin\{", r"\begin{"),
    (r"\\end\{", r"\end{"),
    (r"\\frac\b", r"\frac"),
    (r"\\[()\[\]]", r"\( \) \[ \]"),
    (r"(?<![\w$])\$[^$\s][^$]{0,120}?\\[A-Za-z]+", r"$...\command"),  # dollar math MyST did not parse
    (r"\{glue", "{glue"),
]

_REPORT = """() => {
  const skip = "pre, code, script, style, textarea, noscript, mjx-container";
  const texts = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (el && !el.closest(skip)) texts.push(node.nodeValue);
  }
  const maths = Array.from(document.querySelectorAll("span.math, div.math"));
  const short = s => s.trim().replace(/\\s+/g, " ").slice(0, 80);
  return {
    text: texts.join(" "),
    math: maths.length,
    untypeset: maths.filter(e => !e.querySelector("mjx-container")).map(e => short(e.textContent)),
    mjx: document.querySelectorAll("mjx-container").length,
    math_errors: Array.from(document.querySelectorAll("mjx-merror"))
      .map(e => e.getAttribute("data-mjx-error") || short(e.textContent)),
    images: document.images.length,
    broken_images: Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0))
      .map(i => i.getAttribute("src")),
    proof: document.querySelectorAll("div.proof").length,
    exercise: document.querySelectorAll("div.exercise").length,
    solution: document.querySelectorAll("div.solution").length,
    glue: document.querySelectorAll("span.pasted-text").length,
    empty_glue: Array.from(document.querySelectorAll("span.pasted-text")).filter(e => !e.textContent.trim()).length,
    wide_code: Array.from(document.querySelectorAll("div.highlight pre"))
      .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
      .map(e => short(e.textContent.split("\\n").reduce((a, b) => (b.length > a.length ? b : a), ""))),
    broken_numbers: (() => {
      const out = [];
      for (const cell of document.querySelectorAll("div.cell_output table td, div.cell_output table th")) {
        if (cell.offsetParent === null) continue;
        const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
          // a number: not a digit run inside a name like SST-2; scientific notation is one number
          const re = /(?<![\\w.\\-])-?\\d+(?:[.,]\\d+)*(?:e[-+\u2212]?\\d+)?%?/g;
          let m;
          while ((m = re.exec(node.nodeValue)) !== null) {
            if (m[0].length < 2) continue;
            const range = document.createRange();
            range.setStart(node, m.index);
            range.setEnd(node, m.index + m[0].length);
            const tops = new Set(Array.from(range.getClientRects()).filter(r => r.width > 0)
              .map(r => Math.round(r.top)));
            if (tops.size > 1) out.push(short(m[0] + " in: " + cell.textContent));
          }
        }
      }
      return out.slice(0, 10);
    })(),
    wide_tables: (() => {
      const article = document.querySelector("article") || document.querySelector("main");
      if (!article) return [];
      const right = article.getBoundingClientRect().right;
      return Array.from(document.querySelectorAll("div.cell_output table"))
        .filter(t => t.offsetParent !== null && t.getBoundingClientRect().right > right + 1)
        .map(t => short(t.textContent));
    })(),
  };
}"""


def raw_tex(text: str) -> list[str]:
    found = []
    for pattern, name in RAW_TEX:
        for match in list(re.finditer(pattern, text))[:3]:
            snippet = text[max(0, match.start() - 40):match.end() + 40].replace("\n", " ")
            found.append(f"raw TeX {name!r} in the text: ...{snippet}...")
    return found


# known upstream problems behind an error, and their fix
HINTS = {
    "THEBE_JS_URL": "sphinx-thebe's inline script is listed twice by Sphinx 7.4 (None vs '' file name): "
                    "load the posgeom_sphinx_fixes extension (book/_ext) that drops the duplicate",
    "invalid theme mode": "pydata-sphinx-theme 0.17 has no default_mode: set html_context: {default_mode: auto}",
    "request left localhost": "a theme or extension loads a remote asset: ship it under book/_static or "
                              "switch the feature off in _config.yml",
}


def with_hint(problem: str) -> str:
    hints = [hint for key, hint in HINTS.items() if key in problem]
    return f"{problem}\n      -> {hints[0]}" if hints else problem


class Browser:
    """One Chromium, one offline context and one tab for the whole module; pages are visited in sequence."""

    def __init__(self, base: str, page, log) -> None:
        self.base, self.page, self.log = base, page, log

    def visit(self, name: str, screenshot: Path | None = None) -> tuple[dict, list[str], float]:
        """Open ``name`` (a path under the book), wait for MathJax and images; returns (report, problems, seconds)."""
        start = time.perf_counter()
        self.log.clear()
        self.page.goto(self.base + name, wait_until="load", timeout=PAGE_TIMEOUT_MS)
        has_mathjax = browser_helpers.settle(self.page, timeout_ms=PAGE_TIMEOUT_MS)
        self.page.wait_for_load_state("networkidle", timeout=PAGE_TIMEOUT_MS)  # late fonts, async scripts
        report = self.page.evaluate(_REPORT)
        report["has_mathjax"] = has_mathjax
        if screenshot is not None:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(screenshot), full_page=True)
        log = self.log
        problems = [f"request left localhost (aborted): {r}" for r in log.remote]
        problems += [f"console error: {e}" for e in log.console_errors]
        problems += [f"uncaught exception: {e}" for e in log.page_errors]
        problems += [f"local request failed: {e}" for e in log.failed]
        return report, problems, time.perf_counter() - start


@pytest.fixture(scope="module")
def book_browser():
    if not (HTML / "index.html").is_file():
        unavailable(f"no built book in {HTML} (run `make book`)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("Playwright is not installed (pip install -r requirements.txt)")
    executable = browser_helpers.chromium_executable()
    if executable is None or not Path(executable).exists():
        unavailable("no Chromium (apt-get install chromium, or set POSGEOM_CHROMIUM)")
    log = browser_helpers.PageLog()
    with browser_helpers.serve(HTML) as base, sync_playwright() as playwright:
        browser = browser_helpers.launch(playwright, executable)
        context = browser_helpers.offline_context(browser, log, viewport={"width": 1280, "height": 900})
        page = context.new_page()
        browser_helpers.watch(page, log)
        try:
            yield Browser(base, page, log)
        finally:
            context.close()
            browser.close()


@pytest.mark.parametrize("name", toc_files())
def test_page_renders_offline(book_browser: Browser, name: str) -> None:
    html_file = HTML / f"{name}.html"
    assert html_file.is_file(), f"{html_file} was not built"
    chapter = name.startswith("notebooks/")
    shot = SCREENSHOTS / f"{Path(name).stem}.png" if chapter else None
    report, problems, seconds = book_browser.visit(f"{name}.html", screenshot=shot)

    if report["math"]:
        if not report["has_mathjax"]:
            problems.append(f"{report['math']} formulas but the page loads no MathJax")
        if report["untypeset"]:
            problems.append(f"{len(report['untypeset'])} formulas not typeset, e.g. {report['untypeset'][:3]}")
        if report["mjx"] == 0:
            problems.append("no MathJax output (mjx-container) on a page with formulas")
    if report["math_errors"]:
        problems.append(f"MathJax errors: {report['math_errors'][:5]}")
    problems += raw_tex(report["text"])
    if report["broken_images"]:
        problems.append(f"images that did not load: {report['broken_images']}")

    expected = expected_features((ROOT / f"{name}.md").read_text(encoding="utf-8"))
    if expected["math"] and not report["mjx"]:
        problems.append("the source has formulas but the page shows no typeset math")
    for feature, what in [("proof", "theorem/proof boxes (div.proof)"),
                          ("exercise", "exercise boxes (div.exercise)"),
                          ("solution", "solution boxes (div.solution)"),
                          ("glue", "glued numbers (span.pasted-text)")]:
        if report[feature] < expected[feature]:
            problems.append(f"{what}: {report[feature]} on the page, the source has {expected[feature]}")
    if report["empty_glue"]:
        problems.append(f"{report['empty_glue']} glued numbers are empty")
    if report["broken_numbers"]:  # a number in a table is never split over two lines
        problems.append(f"{len(report['broken_numbers'])} numbers broken across lines in tables, e.g. "
                        f"{report['broken_numbers'][:3]}")
    if name == "book/ledger" and report["wide_tables"]:  # the ledger's tables fit the text column
        problems.append(f"{len(report['wide_tables'])} tables run past the text column, e.g. "
                        f"{report['wide_tables'][:1]}")
    if chapter and report["wide_code"]:  # code a reader should read fits the page (1280-pixel window)
        problems.append(f"{len(report['wide_code'])} code blocks scroll sideways, e.g. {report['wide_code'][:2]}")

    print(f"{name}: {seconds:.1f} s, {report['mjx']} formulas, {report['images']} images, "
          f"{report['proof']} proof boxes, {report['exercise']} exercises, {report['glue']} glued numbers")
    assert not problems, f"{name}.html:\n  " + "\n  ".join(with_hint(p) for p in problems)


def test_source_parser_sees_directives_and_skips_code() -> None:
    """The expected counts come from the prose, not from code cells or inline code."""
    source = textwrap.dedent("""\
        ---
        kernelspec: {}
        ---
        # T
        A {glue:text}`x` and $a$ and `{glue:text}` in code.
        ````{prf:theorem} T
        Body {glue:text}`y:.2f`.
        ````
        ```{prf:proof}
        Done.
        ```
        ```{code-cell} ipython3
        glue('x', 1)  # {glue:text}`no`
        ```{prf:lemma}
        ```
        :::{exercise}
        Try $\\frac{1}{2}$.
        :::
        ```{solution} ex
        ```
        ```python
        s = '$$'
        ```
        """)
    assert expected_features(source) == {"proof": 2, "exercise": 1, "solution": 1, "glue": 2, "math": 1}

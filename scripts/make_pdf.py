"""The whole book as one PDF, offline: ``_build/pdf/book.pdf``.

1. ``jupyter-book build . --builder singlehtml -W -n --keep-going`` (in this process, strict like ``make book``)
   writes the book as one HTML page to ``_build/singlehtml``. It shares the HTML build's doctrees and execution
   cache (``_build/.jupyter_cache``): after ``make book`` no chapter runs again (pages with
   ``execution_mode: force`` do, as in every build) and the single page is written in seconds. sphinx-proof's
   boxes are written by this builder thanks to the book's extension ``book/_ext/posgeom_sphinx_fixes.py``.
2. That page is served from 127.0.0.1 and printed by headless Chromium (Playwright, ``page.pdf``) once MathJax
   has typeset every formula and every figure has loaded: A4, backgrounds printed, one chapter per page
   break. The print style sheet ``book/_static/print.css`` hides the navigation bars and the code toggles and
   opens the folded solutions; it is added to the page here when the build did not link it already.
   No request may leave the machine (anything but 127.0.0.1 is aborted, and fails the run). The PDF has
   bookmarks (a tagged PDF, ~8 MB); ``--no-outline`` gives one without them, about a quarter of the size.

Usage:
  python scripts/make_pdf.py                       # build the single page, then print it
  python scripts/make_pdf.py --skip-build          # print the existing _build/singlehtml
  python scripts/make_pdf.py --config C --path-output P --no-strict   # a scratch build (C: a _config.yml copy)

Why Chromium and not the LaTeX builder: docs/building.md (the PDF edition).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PRINT_CSS = ROOT / "book" / "_static" / "print.css"
PAGE_TIMEOUT_MS = 180_000
#: how long to wait for the network to go quiet once MathJax has settled
NETWORK_IDLE_MS = 60_000
MARGIN_MM = {"top": 18, "bottom": 20, "left": 16, "right": 16}
PRINT_WIDTH_PX = round((210 - MARGIN_MM["left"] - MARGIN_MM["right"]) / 25.4 * 96)  # A4 at CSS 96 px/inch

_spec = importlib.util.spec_from_file_location("posgeom_browser", Path(__file__).with_name("browser.py"))
browser_helpers = sys.modules.setdefault("posgeom_browser", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(browser_helpers)


def root_doc() -> str:
    """The toc's root document (``book/preface``): singlehtml writes the whole book to ``<root>.html``."""
    return yaml.safe_load((ROOT / "_toc.yml").read_text())["root"]


def build_singlehtml(config: Path | None, path_output: Path, strict: bool) -> None:
    """``jupyter-book build . --builder singlehtml`` in this process; the book's own extension
    ``book/_ext/posgeom_sphinx_fixes.py`` gives that builder the ``html`` node handlers it lacks."""
    from jupyter_book.cli.main import main as jupyter_book

    args = ["build", str(ROOT), "--builder", "singlehtml", "--path-output", str(path_output)]
    if config is not None:
        args += ["--config", str(config)]
    if strict:
        args += ["-W", "-n", "--keep-going"]
    try:
        jupyter_book(args, standalone_mode=False)
    except SystemExit as exc:
        if exc.code:
            raise
    except RuntimeError as exc:  # jupyter-book reports a failed build this way
        raise SystemExit(f"make_pdf: the single-page build failed: {exc}") from None


def printable_page(singlehtml: Path) -> Path:
    """``<singlehtml>/book.html``: the book page at the folder's top, where its relative links resolve.

    Sphinx writes the single page to ``<root>.html`` (``book/preface.html``) but computes its links from the
    output folder's top (``_static/...``, ``book/preface.html#id``); a copy at the top makes assets resolve
    and turns the self-links into in-document anchors (internal links in the PDF).
    """
    root = root_doc()
    source = singlehtml / f"{root}.html"
    if not source.is_file():
        raise SystemExit(f"make_pdf: {source} is missing: build the single page first (drop --skip-build)")
    html = source.read_text(encoding="utf-8")
    html = re.sub(rf'href="{re.escape(root)}\.html#', 'href="#', html)
    html = re.sub(rf'href="{re.escape(root)}\.html"', 'href="#"', html)
    target = singlehtml / "book.html"
    target.write_text(html, encoding="utf-8")
    return target


def print_pdf(singlehtml: Path, out: Path, outline: bool = True) -> dict:
    """Print ``singlehtml/book.html`` with headless Chromium; returns what the page held."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
    from playwright.sync_api import sync_playwright

    page_file = printable_page(singlehtml)
    log = browser_helpers.PageLog()
    with browser_helpers.serve(singlehtml) as base, sync_playwright() as playwright:
        browser = browser_helpers.launch(playwright)
        try:
            # the layout width is the printable width, so what overflows it can be named (see ``overflow``)
            context = browser_helpers.offline_context(browser, log, viewport={"width": PRINT_WIDTH_PX, "height": 1000})
            page = context.new_page()
            browser_helpers.watch(page, log)
            page.goto(base + page_file.name, wait_until="load", timeout=PAGE_TIMEOUT_MS)
            page.emulate_media(media="print")
            if not page.evaluate("() => Array.from(document.styleSheets).some(s => /print\\.css/.test(s.href || ''))"):
                page.add_style_tag(content=PRINT_CSS.read_text(encoding="utf-8"))
            browser_helpers.settle(page, timeout_ms=PAGE_TIMEOUT_MS)
            try:  # a heuristic: the checks below (untypeset formulas, broken images) are what count
                page.wait_for_load_state("networkidle", timeout=NETWORK_IDLE_MS)
            except PlaywrightTimeoutError:
                print(f"make_pdf: the page did not reach network idle within {NETWORK_IDLE_MS // 1000} s; "
                      "printing anyway (formulas and images are checked next)", file=sys.stderr)
            stats = page.evaluate("""() => ({
              formulas: document.querySelectorAll("mjx-container").length,
              untypeset: Array.from(document.querySelectorAll("span.math, div.math"))
                .filter(e => !e.querySelector("mjx-container")).length,
              math_errors: document.querySelectorAll("mjx-merror").length,
              images: document.images.length,
              broken_images: Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0))
                .map(i => i.getAttribute("src")),
              figures: document.querySelectorAll("figure").length,
              proofs: document.querySelectorAll("div.proof").length,
              overflow: (() => {
                const width = document.documentElement.clientWidth, wide = [];
                for (const el of document.querySelectorAll(".bd-article *")) {
                  const right = el.getBoundingClientRect().right;
                  if (right > width + 1 && !wide.some(w => w.el.contains(el))) {
                    wide.push({el, text: `${el.tagName.toLowerCase()}.${el.className} (${Math.round(right)} px)`});
                  }
                }
                return wide.slice(0, 10).map(w => w.text);
              })(),
            })""")
            problems = [f"request left localhost (aborted): {r}" for r in log.remote]
            # the singlehtml builder writes no search index, but the theme's search box still asks for one
            problems += [f"local request failed: {e}" for e in log.failed if "/searchindex.js" not in e]
            if stats["untypeset"] or stats["math_errors"]:
                problems.append(f"{stats['untypeset']} formulas not typeset, {stats['math_errors']} MathJax errors")
            if stats["broken_images"]:
                problems.append(f"images that did not load: {stats['broken_images']}")
            if problems:
                raise SystemExit("make_pdf: the page is not ready to print:\n  " + "\n  ".join(problems))
            out.parent.mkdir(parents=True, exist_ok=True)
            page.pdf(
                path=str(out),
                format="A4",
                print_background=True,
                margin={side: f"{mm}mm" for side, mm in MARGIN_MM.items()},
                display_header_footer=True,
                header_template="<span></span>",
                footer_template=(
                    '<div style="width:100%;font-size:8px;color:#666;text-align:center;">'
                    '<span class="pageNumber"></span> / <span class="totalPages"></span></div>'
                ),
                # bookmarks from the headings; Chromium derives them from the tagged (accessible) PDF, whose
                # structure tree roughly quadruples the size (MathJax writes one element per glyph)
                outline=outline,
                tagged=outline,
            )
            # script errors do not stop the print (tests/test_browser.py is where the pages must be clean)
            stats["console_errors"] = [e for e in log.console_errors if "/searchindex.js" not in e]
            stats["console_errors"] += [f"uncaught exception: {e}" for e in log.page_errors]
            return stats
        finally:
            browser.close()


def pdf_pages(path: Path) -> int | None:
    try:
        info = subprocess.run(["pdfinfo", str(path)], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    match = re.search(r"^Pages:\s+(\d+)", info, flags=re.MULTILINE)
    return int(match.group(1)) if match else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, help="a _config.yml to build with (default: the book's)")
    parser.add_argument("--path-output", type=Path, default=ROOT,
                        help="where _build lies (default: the repository; its _build/.jupyter_cache is reused)")
    parser.add_argument("--skip-build", action="store_true", help="print the existing single page")
    parser.add_argument("--no-strict", dest="strict", action="store_false",
                        help="do not turn build warnings into errors (scratch builds without execution)")
    parser.add_argument("--no-outline", dest="outline", action="store_false",
                        help="no bookmarks and no tags: a PDF about a quarter of the size")
    parser.add_argument("--out", type=Path, help="the PDF (default: <path-output>/_build/pdf/book.pdf)")
    args = parser.parse_args(argv)

    build = args.path_output.resolve() / "_build"
    singlehtml = build / "singlehtml"
    out = (args.out or build / "pdf" / "book.pdf").resolve()
    start = time.perf_counter()
    if not args.skip_build:
        build_singlehtml(args.config, args.path_output.resolve(), args.strict)
    built = time.perf_counter()
    stats = print_pdf(singlehtml, out, outline=args.outline)
    done = time.perf_counter()
    pages = pdf_pages(out)
    print(f"make_pdf: {out} ({out.stat().st_size / 1e6:.1f} MB, {pages} pages, {stats['formulas']} formulas, "
          f"{stats['images']} images, {stats['figures']} figures, {stats['proofs']} theorem/proof boxes); "
          f"single page built in {built - start:.0f} s, printed in {done - built:.0f} s")
    if stats["overflow"]:
        print("make_pdf: wider than the page (Chromium shrinks every page to fit them): "
              + "; ".join(stats["overflow"]), file=sys.stderr)
    for error in stats["console_errors"]:
        print(f"make_pdf: console error while printing: {error}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

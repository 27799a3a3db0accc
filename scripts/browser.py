"""Headless Chromium on the built book, offline: shared by ``tests/test_browser.py`` and ``scripts/make_pdf.py``.

- ``serve(folder)`` serves a built HTML folder on 127.0.0.1 (a thread running ``http.server``).
- ``launch(playwright)`` starts the system Chromium (``/usr/bin/chromium``, or ``POSGEOM_CHROMIUM``): Playwright's
  own browser download needs the network, the Debian package does not.
- ``offline_context(browser)`` opens a browser context whose every request is routed: requests to
  127.0.0.1/localhost go through, anything else is aborted and recorded in ``log.remote``.
- ``watch(page)`` records console errors, uncaught exceptions, failed requests and HTTP errors of a page.
- ``settle(page)`` waits until MathJax has typeset the page (``MathJax.startup.promise``) and every image
  has loaded or failed.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

CHROMIUM_ENV = "POSGEOM_CHROMIUM"
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",  # containers have a small /dev/shm; long pages crash the renderer otherwise
]
LOCAL_HOSTS = {"127.0.0.1", "localhost"}


def chromium_executable() -> str | None:
    """The system Chromium to drive (``POSGEOM_CHROMIUM``, else ``chromium`` on PATH), or None."""
    explicit = os.environ.get(CHROMIUM_ENV)
    if explicit:
        return explicit
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-store")
        super().end_headers()


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """Serve ``folder`` on 127.0.0.1 (a free port) while the block runs; yields the base URL (ending in /)."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="book-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def launch(playwright, executable: str | None = None):
    """Headless Chromium with the network-quiet flags (system Chromium when there is one)."""
    executable = executable or chromium_executable()
    kwargs = {"executable_path": executable} if executable else {}
    return playwright.chromium.launch(headless=True, args=CHROMIUM_ARGS, **kwargs)


@dataclass
class PageLog:
    """What went wrong while a page loaded (reset with ``clear`` before the next page)."""

    remote: list[str] = field(default_factory=list)  # requests that would have left the machine (aborted)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # local requests that failed or answered >= 400

    def clear(self) -> None:
        for item in (self.remote, self.console_errors, self.page_errors, self.failed):
            item.clear()


def offline_context(browser, log: PageLog, **options):
    """A browser context that lets only 127.0.0.1/localhost through; other requests are aborted into ``log.remote``."""
    context = browser.new_context(service_workers="block", **options)

    def route(route) -> None:
        url = route.request.url
        if urlsplit(url).hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            log.remote.append(f"{route.request.resource_type} {url}")
            route.abort("blockedbyclient")

    context.route("**/*", route)
    return context


def watch(page, log: PageLog) -> None:
    """Record the page's console errors, uncaught exceptions and failed local requests in ``log``."""
    page.on("console", lambda msg: log.console_errors.append(f"{msg.text} ({msg.location.get('url', '')})")
            if msg.type == "error" else None)
    page.on("pageerror", lambda exc: log.page_errors.append(str(exc)))

    def failed(request) -> None:
        if urlsplit(request.url).hostname in LOCAL_HOSTS:
            log.failed.append(f"{request.url}: {request.failure}")

    def response(resp) -> None:
        if resp.status >= 400:
            log.failed.append(f"{resp.url}: HTTP {resp.status}")

    page.on("requestfailed", failed)
    page.on("response", response)


_WAIT_FOR_IMAGES = """async () => {
  const images = Array.from(document.images);
  for (const img of images) { img.loading = "eager"; }
  await Promise.all(images.map(img => img.complete ? null : new Promise(done => {
    img.addEventListener("load", done, {once: true});
    img.addEventListener("error", done, {once: true});
  })));
  return images.length;
}"""

_HAS_MATHJAX = "() => Array.from(document.scripts).some(s => /mathjax/i.test(s.src))"
_MATHJAX_STARTED = "() => !!(window.MathJax && window.MathJax.startup && window.MathJax.startup.promise)"
_MATHJAX_DONE = "async () => { await MathJax.startup.promise; return true; }"


def settle(page, timeout_ms: float = 60_000) -> bool:
    """Wait for MathJax's first typesetting (when the page loads MathJax) and for every image.

    Returns whether the page loads MathJax.
    """
    has_mathjax = page.evaluate(_HAS_MATHJAX)
    if has_mathjax:
        page.wait_for_function(_MATHJAX_STARTED, timeout=timeout_ms)
        page.evaluate(_MATHJAX_DONE)
    page.evaluate(_WAIT_FOR_IMAGES)
    return has_mathjax

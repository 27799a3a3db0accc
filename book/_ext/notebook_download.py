"""Offer each chapter as a Jupyter notebook (.ipynb) in the page's download menu.

Chapter: README, *Editions*. The chapters are MyST markdown; a downloaded ``.md`` is not what a student opens
in Jupyter or Colab. sphinx-book-theme lists ``.ipynb`` in its download menu only when the page context has
``ipynb_source``, which it sets itself only when a launch service (Binder, Colab, JupyterHub) is configured,
and this book has no public repository to launch from. This extension copies the notebook that MyST-NB
executed for the page (``<build>/jupyter_execute/<page>.ipynb``) into ``_sources/`` and sets that context
entry, before the theme builds its buttons.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx


def add_notebook_download(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    """Copy the executed notebook of ``pagename`` next to its source and point the download menu at it."""
    executed = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    if doctree is None or not executed.is_file():
        return
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(executed, target)
    context["ipynb_source"] = f"{pagename}.ipynb"


def setup(app: Sphinx) -> dict[str, Any]:
    # the theme's add_header_buttons runs at priority 501: run just before it
    app.connect("html-page-context", add_notebook_download, priority=500)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

"""Shared by the tests of the built book (test_book, test_browser, test_pdf): its pages and how a missing
build is reported (skipped, or a failure when ``POSGEOM_REQUIRE_BOOK=1``, as ``make test`` sets)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
REQUIRE = os.environ.get("POSGEOM_REQUIRE_BOOK") == "1"


def toc_files() -> list[str]:
    """Every page of ``_toc.yml``, in order (paths without suffix, e.g. ``notebooks/necessity``)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part["chapters"]]
    files += [c["file"] for c in toc.get("chapters", [])]
    return files


def unavailable(reason: str) -> None:
    """Skip for ``reason``, or fail when the build is required (``POSGEOM_REQUIRE_BOOK=1``)."""
    if REQUIRE:
        pytest.fail(f"{reason} (POSGEOM_REQUIRE_BOOK=1)")
    pytest.skip(reason)


def solution_code(chapter: Path, label: str, block: int = 0) -> str:
    """The ``block``-th fenced python block of the worked solution of exercise ``label`` in ``chapter`` (a
    chapter source): the tests of ``posgeom_utils.teaching`` run the code the book prints."""
    text = Path(chapter).read_text()
    match = re.search(r"````\{solution\} " + re.escape(label) + r"\n(.*?)\n````", text, re.S)
    assert match, f"no solution {label} in {Path(chapter).name}"
    blocks = re.findall(r"```python\n(.*?)```", match.group(1), re.S)
    assert len(blocks) > block, f"the solution {label} has no python block {block}"
    return blocks[block]

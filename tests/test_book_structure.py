"""The book's structure, from its sources (no build): numbered chapters with figures numbered per chapter,
the lazy-regime lemmas of the monotonicity chapter in their appendix, the optimal-encoding chapter's
listings cut to its algorithm, and the central chapter's exercise that reruns a control.

Cheap: ``_toc.yml``, ``_config.yml`` and the MyST sources are read as text; nothing is executed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from booktools import toc_files  # tests/ is on sys.path under pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
APPENDIX = "book/appendix_lazy"
#: the listings of *The optimal encoding* that carry its algorithm (the rest are named in a sentence)
MDS_LISTINGS = ("double_centred_gram", "classical_mds", "fisher_rao_distances", "smacof",
                "stress_of_distances", "sinusoidal", "rope", "alibi")
#: the lemmas (and the proposition on the first step) that moved from the chapter to the appendix
LAZY_LABELS = ("lem-lazy", "lem-sufficiency", "prop-first-lazy-step", "lem-linear", "lem-feature",
               "lem-margin")
LITERALINCLUDE = re.compile(r"^`{3,}\{literalinclude\}", re.MULTILINE)
#: ``{exercise} Title (stars)``, its ``:label:`` and its body up to the closing fence
EXERCISE = re.compile(r"^(`{3,})\{exercise\}\s*(.*?)\n:label:\s*(\S+)\n(.*?)^\1$", re.MULTILINE | re.DOTALL)


def source(name: str) -> str:
    return (ROOT / f"{name}.md").read_text(encoding="utf-8")


def parts_of(page: str) -> list[dict]:
    return [part for part in TOC["parts"] if any(c["file"] == page for c in part["chapters"])]


def labels(text: str) -> set[str]:
    return set(re.findall(r"^:label:\s*(\S+)", text, flags=re.MULTILINE))


# ------------------------------------------------------------------------------ numbering


def test_every_chapter_is_numbered_and_the_back_matter_is_not() -> None:
    chapters = [f"notebooks/{p.stem}" for p in NOTEBOOKS.glob("*.md")] + ["book/scale_out"]
    for page in chapters:
        if page == "notebooks/stress_forensics":  # the appendix of the optimal-encoding chapter
            continue
        (part,) = parts_of(page)
        assert part.get("numbered") is True, f"{page} is in a part without `numbered: true`"
    for page in ("book/notation", "book/ledger", "notebooks/stress_forensics", APPENDIX,
                 "book/property_tests", "book/bibliography"):
        (part,) = parts_of(page)
        assert not part.get("numbered"), f"{page} should carry no chapter number"


def test_chapter_numbers_continue_across_parts_and_figures_count_per_chapter() -> None:
    assert CONFIG["html"]["use_multitoc_numbering"] is True  # else every part restarts at 1
    sphinx = CONFIG["sphinx"]["config"]
    assert sphinx["numfig"] is True and sphinx["numfig_secnum_depth"] == 1


# ------------------------------------------------------------------------------ the lazy-regime appendix


def test_the_appendix_is_in_the_back_matter_beside_the_other_appendices() -> None:
    files = toc_files()
    assert APPENDIX in files and (ROOT / f"{APPENDIX}.md").is_file()
    (part,) = parts_of(APPENDIX)
    assert part.get("caption") == "Back matter"
    assert files.index("notebooks/stress_forensics") < files.index(APPENDIX) < files.index("book/property_tests")


def test_the_lemmas_moved_to_the_appendix_and_the_chapter_links_it() -> None:
    chapter, appendix = source("notebooks/monotonicity"), source(APPENDIX)
    assert "{prf:lemma}" not in chapter, "a lemma box is still in the monotonicity chapter"
    assert appendix.count("{prf:lemma}") == 5, "the five lemmas of the NTK argument"
    assert set(LAZY_LABELS) <= labels(appendix) and not set(LAZY_LABELS) & labels(chapter)
    assert "conj-monotonicity" in labels(chapter), "the conjecture stays with its chapter"
    assert "{doc}`../book/appendix_lazy`" in chapter
    assert "reconstruction" in chapter and "not available to us" in chapter  # the argument's scope
    # every reference elsewhere in the book still finds its box: each label is defined exactly once
    pages = [*NOTEBOOKS.glob("*.md"), *(ROOT / "book").glob("*.md")]
    defined = [label for page in pages for label in labels(page.read_text(encoding="utf-8"))]
    for label in LAZY_LABELS:
        assert defined.count(label) == 1, label


def test_the_appendix_quotes_no_glued_number() -> None:
    """A glued number lives in its chapter's scope: the appendix page has none to paste."""
    assert "{glue" not in source(APPENDIX)


def test_every_reference_target_of_the_move_exists() -> None:
    chapter, appendix = source("notebooks/monotonicity"), source(APPENDIX)
    for target in ("sec-mono-lazy", "sec-mono-which-geometry", "sec-mono-contrast"):
        assert f"({target})=" in chapter and f"{{ref}}`{target}`" in appendix, target
    assert "(app-lazy-derivation)=" in appendix and "{ref}`app-lazy-derivation`" in chapter


# ------------------------------------------------------------------------------ listings and exercises


def test_the_optimal_encoding_lists_only_its_algorithm() -> None:
    text = source("notebooks/mds_optimality")
    assert len(LITERALINCLUDE.findall(text)) <= len(MDS_LISTINGS)
    shown = re.findall(r"^:pyobject:\s*(\S+)", text, flags=re.MULTILINE)
    assert sorted(shown) == sorted(MDS_LISTINGS), shown
    for helper in ("standard_encodings", "stress_table", "bootstrap_numbers"):  # named, not listed
        assert f"`{helper}`" in text, helper


def test_the_central_chapter_has_an_exercise_that_reruns_a_control() -> None:
    exercises = EXERCISE.findall(source("notebooks/learned_geometry"))
    assert exercises, "the pattern found no exercise: is it stale?"
    runs = [(title, label, body) for _, title, label, body in exercises if "posgeom run" in body]
    assert len(runs) == 1, [e[2] for e in exercises]
    title, label, body = runs[0]
    assert title.endswith("(★★)") and label.startswith("ex-learned-")
    assert "--profile smoke" in body and "--chapters learned_geometry" in body
    text = source("notebooks/learned_geometry")
    assert re.search(r"^`{3,}\{solution\} " + re.escape(label) + r"\n:class: dropdown$", text, re.MULTILINE)
    # the keys the exercise reads are in a smoke run's results, and the reference value is glued
    smoke = json.loads((ROOT / "book/results/smoke/learned_geometry/results.json").read_text())["results"]
    for key in ("final_row", "final_row_low", "final_row_high"):
        assert key in smoke and f"`{key}`" in body, key
        assert f"{{glue:text}}`{key}:" in text, key

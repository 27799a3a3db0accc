"""The ``class`` profile (posgeom_utils.repro.profiles): what students run in class.

At ``smoke`` the central chapter, *Does a trained Transformer learn its corpus's geometry?*, shows none of its
effects (20 steps: the table has not moved). The ``class`` profile runs every chapter within 10 minutes on a
2-core CPU and is sized so that the headline effect is visible: the table trained on the real corpus writes the
corpus's corrected Hellinger geometry above the band of random tables early in training, and the table trained
on the row-shuffled control does not; necessity's order task is learned with positions and at chance without.
The class results are committed (``book/results/class/``, computed by ``posgeom run --profile class``):
tests/test_runner.py::test_committed_results_are_fresh fails when a chapter's code changed since they were
computed, so the directions asserted here are those the current code produces, without an 8-minute run in
every test session.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import jupytext
import pytest

from posgeom_utils.repro.profiles import PROFILES, chapter_parameters
from posgeom_utils.repro.reference import read_run, stale_results

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.md"))
CLASS = ROOT / "book" / "results" / "class"


def declared(chapter: str) -> set[str]:
    """The names the chapter's ``parameters`` cell assigns."""
    nb = jupytext.read(ROOT / "notebooks" / f"{chapter}.md")
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{chapter}: one cell tagged `parameters`"
    return {t.id for node in ast.parse(cells[0].source).body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name)}


def test_class_profile_covers_every_chapter_with_declared_parameters() -> None:
    assert "class" in PROFILES
    assert sorted(PROFILES["class"]) == CHAPTERS, "the class profile has one entry per chapter"
    for chapter in CHAPTERS:
        params = chapter_parameters(chapter, "class")
        assert params["profile"] == "class"
        unknown = set(params) - declared(chapter)
        assert not unknown, f"class sets {chapter} parameters its parameters cell lacks: {unknown}"
    # smoke's sizes under another name would meet the chapters' `profile != "smoke"` checks
    for chapter in CHAPTERS:
        assert PROFILES["class"][chapter] != PROFILES["smoke"][chapter], chapter
    # the two chapters smoke leaves without their effects are sized beyond smoke
    learned, smoke = PROFILES["class"]["learned_geometry"], PROFILES["smoke"]["learned_geometry"]
    assert learned["train_steps"] > smoke["train_steps"] and learned["n_seeds"] >= 3
    assert learned["train_steps"] // learned["eval_every"] >= 5  # a peak to find
    assert PROFILES["class"]["necessity"]["train_steps"] > PROFILES["smoke"]["necessity"]["train_steps"]


def test_every_chapter_runs_in_class_within_ten_minutes() -> None:
    """The committed class run of every chapter, fresh, each within 600 s on the machine that ran it."""
    assert not stale_results(CLASS), stale_results(CLASS)
    for chapter in CHAPTERS:
        payload = read_run(CLASS, chapter)
        assert payload is not None, f"no committed class run of {chapter}: posgeom run --profile class"
        prov = payload["provenance"]
        assert payload["parameters"]["profile"] == "class" and prov["dirty"] is False, chapter
        assert 0 < prov["wall_seconds"] <= 600, (chapter, prov["wall_seconds"])


def test_class_profile_shows_the_learned_geometry() -> None:
    """At ``class``, the central chapter's early geometry is above the band of random tables on the real corpus,
    and its row-shuffled control is inside the band."""
    assert "learned_geometry" not in stale_results(CLASS, chapter="learned_geometry")
    r = read_run(CLASS, "learned_geometry")["results"]
    band = r["band"]  # 95% of random N(0, 1) tables' |within-lag correlation|
    assert 0 < band < 0.35, band
    # the geometry is written early: the peak (mean over seeds, and its interval's lower end) is far above the
    # band, and far above the row-shuffled control's peak
    assert r["peak_real"] > band + 0.3, (r["peak_real"], band)
    assert r["peak_real_low"] > band, (r["peak_real_low"], band)
    assert r["peak_real"] > r["peak_row"] + 0.3, (r["peak_real"], r["peak_row"])
    # the row-shuffled control is at chance: it ends inside the band, its interval holding 0 (prediction 4)
    assert abs(r["final_row"]) < band, (r["final_row"], band)
    assert r["prediction4"] == "holds"
    # where position acts only through mu_i, the table follows the geometry to the end (prediction 3)
    assert r["final_column"] > band + 0.3, (r["final_column"], band)
    assert r["prediction3"] == "holds"


def test_class_profile_shows_that_order_needs_positions() -> None:
    """At ``class``, necessity's "a before b" task is learned with positions and at chance without."""
    assert "necessity" not in stale_results(CLASS, chapter="necessity")
    r = read_run(CLASS, "necessity")["results"]
    # with a learned table the order is learned: the seeds' interval is above chance
    assert r["acc_syn_learned_low"] > 0.5 and r["acc_syn_learned"] > 0.8, r["acc_syn_learned"]
    assert r["acc_syn_learned_verdict"] == "above 0.5"
    # without positions (and with ALiBi's symmetric bias) the task is at chance: 0.5 inside the interval
    for arm in ("none", "alibi"):
        assert r[f"acc_syn_{arm}_low"] < 0.5 < r[f"acc_syn_{arm}_high"], (arm, r[f"acc_syn_{arm}"])
        assert r[f"acc_syn_{arm}_verdict"] == "not distinguishable from 0.5", arm

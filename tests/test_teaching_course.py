"""The course page's inputs: measured chapter times from results files, and the exercise list."""

from __future__ import annotations

import json
import math
from pathlib import Path

from posgeom_utils.teaching.course import chapter_times, exercises

ROOT = Path(__file__).resolve().parents[1]


def test_chapter_times_read_wall_seconds(tmp_path: Path) -> None:
    for profile, chapter, seconds in [("smoke", "a", 1.5), ("default", "a", 30.0), ("default", "b", 12.0)]:
        folder = tmp_path / profile / chapter
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps({"provenance": {"wall_seconds": seconds}}))
    times = chapter_times(tmp_path)
    assert times.loc["a", "smoke"] == 1.5 and times.loc["a", "default"] == 30.0
    assert times.loc["b", "default"] == 12.0 and math.isnan(times.loc["b", "smoke"])


def test_exercises_are_parsed_with_difficulty_and_kind(tmp_path: Path) -> None:
    (tmp_path / "ch.md").write_text(
        "````{exercise} Easy one (★)\n:label: ex-ch-easy\n\nText\n````\n\n"
        "````{exercise} Hard one (★★★)\n:label: ex-ch-hard\n\nText\n````\n\n"
        "```{code-cell} ipython3\n:tags: [exercise]\n\nanswer = None\n```\n")
    table = exercises(tmp_path)
    assert list(table["label"]) == ["ex-ch-easy", "ex-ch-hard"]
    assert list(table["difficulty"]) == [1, 3] and list(table["computational"]) == [False, True]
    assert list(table["title"]) == ["Easy one", "Hard one"]


def test_the_book_has_graded_exercises() -> None:
    table = exercises(ROOT / "notebooks")
    per_chapter = table.groupby("chapter")
    assert (per_chapter.size() >= 3).all(), per_chapter.size()
    assert (per_chapter["difficulty"].nunique() >= 2).all(), "each chapter grades its exercises"
    assert per_chapter["computational"].any().all(), "each chapter has a checked computational exercise"

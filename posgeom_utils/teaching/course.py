"""What the course page shows: the measured time of each chapter per profile, and the book's exercises.

Chapter: *Teaching with this book* (``book/course.md``). Times come from the provenance of committed
``posgeom run`` results (``book/results/<profile>/<chapter>/results.json``, ``wall_seconds``), never typed;
the exercise list is read from the chapter sources, so it follows the book as exercises are added.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

#: ``{exercise} Title (★★)`` followed by its ``:label:``
EXERCISE = re.compile(r"^(`{3,}|:{3,})\{exercise\}\s*(?P<title>.*?)\s*\n:label:\s*(?P<label>\S+)", re.M)
DIFFICULTY = re.compile(r"\((?P<stars>★+)\)\s*$")


def chapter_times(results_root: Path, profiles: tuple[str, ...] = ("smoke", "default")) -> pd.DataFrame:
    """Wall seconds of each chapter (rows) under each profile (columns) from committed results; a chapter
    without results for a profile gets NaN. Chapter: *Teaching with this book*."""
    times: dict[str, dict[str, float]] = {}
    for profile in profiles:
        for path in sorted((Path(results_root) / profile).glob("*/results.json")):
            provenance = json.loads(path.read_text()).get("provenance", {})
            seconds = provenance.get("wall_seconds")
            if isinstance(seconds, (int, float)):
                times.setdefault(path.parent.name, {})[profile] = float(seconds)
    frame = pd.DataFrame.from_dict(times, orient="index").reindex(columns=list(profiles))
    frame.index.name = "chapter"
    return frame


def exercises(source_dir: Path) -> pd.DataFrame:
    """Every exercise of the chapters in ``source_dir``: chapter, label, title, difficulty (number of stars)
    and whether it is computational (followed by a stub cell tagged ``exercise``). Chapter: *Teaching with
    this book*."""
    rows = []
    for path in sorted(Path(source_dir).glob("*.md")):
        text = path.read_text()
        matches = list(EXERCISE.finditer(text))
        for k, match in enumerate(matches):
            end = matches[k + 1].start() if k + 1 < len(matches) else len(text)
            title = match.group("title")
            stars = DIFFICULTY.search(title)
            rows.append({
                "chapter": path.stem,
                "label": match.group("label"),
                "title": DIFFICULTY.sub("", title).strip(),
                "difficulty": len(stars.group("stars")) if stars else 0,
                "computational": ":tags: [exercise]" in text[match.end():end],
            })
    return pd.DataFrame(rows, columns=["chapter", "label", "title", "difficulty", "computational"])

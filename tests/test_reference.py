"""posgeom_utils.repro.reference: the committed reference results, their provenance line and the verdict rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posgeom_utils.repro.reference import REPO_ROOT, interval_verdict, provenance_line
from posgeom_utils.repro.sources import code_hash


@pytest.mark.parametrize("low, high, expected", [(0.6, 0.7, "above 0.5"), (0.3, 0.4, "below 0.5"),
                                                  (0.45, 0.55, "not distinguishable from 0.5"),
                                                  (None, 0.55, "no interval")])
def test_interval_verdict(low, high, expected):
    assert interval_verdict(low, high, 0.5) == expected


def write(root: Path, chapter: str, source_hash_value: str, dirty: bool = False) -> None:
    folder = root / "reference" / chapter
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({
        "chapter": chapter, "parameters": {"profile": "reference"}, "results": {"acc": 0.7},
        "provenance": {"profile": "reference", "commit": "abcdef1234567", "dirty": dirty, "wall_seconds": 120.0,
                       "finished": "2026-11-30T12:00:00", "device_name": "cpu", "code_hash": source_hash_value,
                       "package_version": "0.1.0", "requested_parameters": {"profile": "reference"}}}))


def test_the_provenance_line_names_commit_tree_device_time_and_freshness(tmp_path):
    assert provenance_line("necessity", root=tmp_path).startswith(
        "no committed reference results: run `posgeom run --profile reference --chapters necessity")
    write(tmp_path, "necessity", code_hash(Path(REPO_ROOT) / "notebooks" / "necessity.md"))
    line = provenance_line("necessity", root=tmp_path)
    assert line == ("computed by this chapter's code at the sizes of its parameters cell "
                    "(commit abcdef1, clean tree, 2026-11-30, cpu, 2.0 min)")
    write(tmp_path, "separation", "0" * 64, dirty=True)  # not the current code's hash, from a dirty tree
    line = provenance_line("separation", root=tmp_path)
    assert "dirty tree" in line and "stale" in line and "older code" in line and "by this chapter's code" not in line

"""posgeom_utils.repro.reference: committed results of a larger profile shown beside the build's numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posgeom_utils.repro import reference
from posgeom_utils.repro import results as report
from posgeom_utils.repro.reference import Row, committed, interval_verdict, scale_table
from posgeom_utils.repro.sources import code_hash


@pytest.mark.parametrize("low, high, expected", [(0.6, 0.7, "above 0.5"), (0.3, 0.4, "below 0.5"),
                                                  (0.45, 0.55, "not distinguishable from 0.5"),
                                                  (None, 0.55, "no interval")])
def test_interval_verdict(low, high, expected):
    assert interval_verdict(low, high, 0.5) == expected


def write(root: Path, chapter: str, values: dict, source_hash_value: str | None = None) -> None:
    folder = root / "reference" / chapter
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({
        "results": values, "provenance": {"profile": "reference", "commit": "abcdef1234567", "wall_seconds": 120.0,
                                          "finished": "2026-11-30T12:00:00", "device_name": "cpu",
                                          "code_hash": source_hash_value}}))


def test_scale_table_shows_build_and_reference_values(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "_RESULTS", {"acc": 0.62, "acc_ci": 0.2, "gap": 0.1, "gap_low": 0.05,
                                             "gap_high": 0.15, "r": 8})
    write(tmp_path, "necessity", {"acc": 0.81, "acc_ci": 0.03, "gap": 0.3, "gap_low": 0.2, "gap_high": 0.4})
    rows = [Row("acc", "accuracy", ci="acc_ci", null=0.5), Row("gap", "gap", low="gap_low", high="gap_high", null=0),
            Row("r", "rank", fmt="d")]
    table = scale_table("necessity", rows, root=tmp_path)
    assert table.loc["accuracy", "this build"] == "0.620 ± 0.200"
    assert table.loc["accuracy", "this build: verdict"] == "not distinguishable from 0.5"
    assert table.loc["accuracy", "reference"] == "0.810 ± 0.030"
    assert table.loc["accuracy", "reference: verdict"] == "above 0.5"
    assert table.loc["gap", "reference"] == "0.300 [0.200, 0.400]"
    assert table.loc["rank", "this build"] == "8" and table.loc["rank", "reference"] == "not computed"


def test_missing_and_stale_reference_results_say_so(tmp_path, monkeypatch):
    glued = {}
    monkeypatch.setattr(reference, "_glue_text", lambda key, text: glued.__setitem__(key, text))
    monkeypatch.setattr(report, "_RESULTS", {"acc": 0.6})
    table = scale_table("necessity", [Row("acc", "accuracy")], root=tmp_path)
    assert table.loc["accuracy", "reference"] == "no committed run"
    assert glued["ref_status"].startswith("missing: run `posgeom run --profile reference --chapters necessity")
    assert committed("necessity", root=tmp_path) is None
    write(tmp_path, "necessity", {"acc": 0.7}, source_hash_value="0" * 64)  # not the current code's hash
    scale_table("necessity", [Row("acc", "accuracy")], root=tmp_path)
    assert glued["ref_status"].startswith("stale") and glued["ref_acc"] == "0.700"
    assert "commit abcdef1234" in glued["ref_provenance"] and "2.0 min" in glued["ref_provenance"]


def test_fresh_reference_results_are_called_fresh(tmp_path, monkeypatch):
    glued = {}
    monkeypatch.setattr(reference, "_glue_text", lambda key, text: glued.__setitem__(key, text))
    chapter = Path(reference.REPO_ROOT) / "notebooks" / "necessity.md"
    write(tmp_path, "necessity", {"acc": 0.7}, source_hash_value=code_hash(chapter))
    scale_table("necessity", [Row("acc", "accuracy")], root=tmp_path)
    assert glued["ref_status"] == "fresh"

"""The reproduction ledger (book/ledger.yaml, posgeom_utils.repro.ledger): verdicts computed from the values,
pending and capped runs labelled, and every row tied to keys its chapter really glues."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from posgeom_utils.repro.claims import ClaimError, glued_key_patterns
from posgeom_utils.repro.ledger import (DIFFERENT_DEFINITION, DIFFERS, MISSING, NOT_CHECKABLE, PENDING, REPRODUCED,
                                  VERDICTS, build_ledger, load_rows, provenance_table, render, validate_rows,
                                  verdict_counts)
from posgeom_utils.repro.paper import REPORTED, reported

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"


def write_run(folder: Path, chapter: str, results: dict, profile: str = "default", cap: int | None = None,
              parameters: dict | None = None) -> None:
    """A results.json laid out as ``posgeom run`` writes it."""
    (folder / chapter).mkdir(parents=True, exist_ok=True)
    payload = {"chapter": chapter, "parameters": {"profile": profile, **(parameters or {})}, "results": results,
               "provenance": {"profile": profile, "cap": cap, "commit": "0123456789abcdef", "dirty": False,
                              "device_name": "cpu", "started": "2026-01-02T03:04:05+00:00",
                              "finished": "2026-01-02T03:05:05+00:00", "wall_seconds": 60.0,
                              "libraries": {"python": "3.11.7", "torch": "2.13.0"}}}
    (folder / chapter / "results.json").write_text(json.dumps(payload))


@pytest.fixture(scope="module")
def rows():
    return load_rows()


def row_dict(**change) -> dict:
    base = {"id": "sin", "claim": "Stress of the sinusoidal encoding", "paper": "sst2_sinusoidal_stress",
            "chapter": "mds_optimality", "quantity": "raw stress at d = {d}", "ours": "{sst2_sin_raw:.0f}",
            "rule": {"kind": "tolerance", "key": "sst2_sin_raw", "rtol": 0.1,
                     "alternatives": [{"key": "sst2_sin_fit", "definition": "fitted"}]}}
    return {**base, **change}


# --------------------------------------------------------------------------- verdicts from values

def test_numeric_verdict_is_computed_and_flips_with_the_value(tmp_path: Path) -> None:
    [row] = validate_rows({"rows": [row_dict()]})
    paper = reported("sst2_sinusoidal_stress")
    default = tmp_path / "default"
    write_run(default, "mds_optimality", {"sst2_sin_raw": paper * 1.05, "sst2_sin_fit": 0.05, "d": 384})
    ledger = build_ledger({"default": default, "paper": tmp_path / "nothing"}, rows=[row])
    assert ledger.loc["sin", "verdict (default)"] == REPRODUCED
    assert ledger.loc["sin", "ours (default)"] == f"{paper * 1.05:.0f}"
    assert ledger.loc["sin", "quantity"] == "raw stress at d = 384"
    write_run(default, "mds_optimality", {"sst2_sin_raw": paper * 1.5, "sst2_sin_fit": 0.05, "d": 384})
    ledger = build_ledger({"default": default}, rows=[row])
    assert ledger.loc["sin", "verdict (default)"] == DIFFERS
    assert "sst2_sin_raw" in ledger.loc["sin", "evidence (default)"]
    # an alternative definition within the tolerance
    write_run(default, "mds_optimality", {"sst2_sin_raw": paper * 1.5, "sst2_sin_fit": paper * 0.95, "d": 384})
    ledger = build_ledger({"default": default}, rows=[row])
    assert ledger.loc["sin", "verdict (default)"] == DIFFERENT_DEFINITION
    assert "fitted" in ledger.loc["sin", "evidence (default)"]
    # a key gone from the results is flagged, not judged
    write_run(default, "mds_optimality", {"d": 384})
    assert build_ledger({"default": default}, rows=[row]).loc["sin", "verdict (default)"] == MISSING


def test_real_rows_judge_fake_results(tmp_path: Path, rows) -> None:
    """The book's own rows: the chance row and a qualitative row flip with the values."""
    default = tmp_path / "default"
    write_run(default, "monotonicity", {"random_mean": 0.51, "random_tables": 20, "lazy_delta_lo": 0.2,
                                        "lazy_delta_hi": 0.1, "lazy_delta_drop": 0.1, "lazy_delta_seed_range": 0.02})
    ledger = build_ledger({"default": default, "paper": tmp_path / "paper"}, rows=rows)
    assert ledger.loc["chance-violation-rate", "verdict (default)"] == REPRODUCED
    assert ledger.loc["conj5-monotonicity", "verdict (default)"] == DIFFERENT_DEFINITION
    write_run(default, "monotonicity", {"random_mean": 0.6, "random_tables": 20, "lazy_delta_lo": 0.1,
                                        "lazy_delta_hi": 0.2, "lazy_delta_drop": -0.1, "lazy_delta_seed_range": 0.02})
    ledger = build_ledger({"default": default, "paper": tmp_path / "paper"}, rows=rows)
    assert ledger.loc["chance-violation-rate", "verdict (default)"] == DIFFERS
    assert ledger.loc["conj5-monotonicity", "verdict (default)"] == DIFFERS
    # chapters without results are pending, rows that cannot be checked say so whatever the results
    assert ledger.loc["thm1-necessity", "verdict (default)"] == PENDING["default"]
    assert ledger.loc["layer3-stress-peak", "verdict (default)"] == PENDING["default"]
    assert ledger.loc["synthetic-mds-stress", "verdict (default)"] == NOT_CHECKABLE


def test_missing_or_empty_paper_dir_is_pending_a_gpu_run(tmp_path: Path, rows) -> None:
    default = tmp_path / "default"
    write_run(default, "necessity", {"dev_none": 0.0, "dev_pre-trained_positions_removed": 0.0,
                                     "acc_syn_none": 0.5, "acc_real_none": 0.5})
    (tmp_path / "empty").mkdir()
    for paper in (tmp_path / "absent", tmp_path / "empty", None):
        ledger = build_ledger({"default": default, "paper": paper}, rows=rows)
        assert ledger.loc["thm1-necessity", "verdict (default)"] == REPRODUCED
        judged = ledger[ledger["verdict (paper)"] != NOT_CHECKABLE]
        assert (judged["verdict (paper)"] == "pending a GPU run").all()
        assert (judged["scale (paper)"] == "pending a GPU run").all()
        counts = verdict_counts(ledger, "paper")
        assert counts["pending a GPU run"] == len(judged)
    table = provenance_table({"default": default, "paper": tmp_path / "absent"})
    assert table.loc[("paper", "(all)"), "scale"] == "pending a GPU run"
    assert table.loc[("default", "necessity"), "commit"] == "0123456789"


def test_capped_paper_run_is_labelled_not_paper_scale(tmp_path: Path, rows) -> None:
    paper = tmp_path / "paper"
    write_run(paper, "monotonicity", {"random_mean": 0.5, "random_tables": 100}, profile="paper", cap=2000)
    ledger = build_ledger({"default": tmp_path / "default", "paper": paper}, rows=rows)
    scale = ledger.loc["chance-violation-rate", "scale (paper)"]
    assert scale.startswith("capped CPU run (cap 2000)") and "not paper scale" in scale
    assert ledger.loc["chance-violation-rate", "verdict (paper)"] == REPRODUCED
    assert ledger.loc["chance-violation-rate", "verdict (default)"] == PENDING["default"]
    write_run(paper, "monotonicity", {"random_mean": 0.5, "random_tables": 100}, profile="paper")
    ledger = build_ledger({"paper": paper}, rows=rows)
    assert ledger.loc["chance-violation-rate", "scale (paper)"] == "paper profile"
    table = provenance_table({"paper": paper}, profiles=("paper",))
    assert table.loc[("paper", "monotonicity"), "scale"] == "paper profile"


def test_a_stand_in_profile_is_labelled(tmp_path: Path, rows) -> None:
    folder = tmp_path / "smoke"
    write_run(folder, "monotonicity", {"random_mean": 0.5, "random_tables": 5}, profile="smoke")
    ledger = build_ledger({"default": folder}, rows=rows)
    assert ledger.loc["chance-violation-rate", "scale (default)"] == "smoke profile results standing in for default"


def test_provenance_columns(tmp_path: Path, rows) -> None:
    default = tmp_path / "default"
    write_run(default, "monotonicity", {"random_mean": 0.5, "random_tables": 5, "model": "m (packaged)"},
              parameters={"dataset": "sst2", "other_dataset": "imdb", "split": "train", "sample_size": None,
                          "n": 48, "model_name": None})
    row = build_ledger({"default": default}, rows=rows).loc["chance-violation-rate"]
    assert row["model (default)"] == "m (packaged)"
    assert row["data (default)"] == "sst2/imdb train, all texts, n=48"
    assert row["device (default)"] == "cpu" and row["commit (default)"] == "0123456789"
    assert row["date (default)"] == "2026-01-02"


# --------------------------------------------------------------------------- the rows themselves

def test_rows_cover_every_reported_number_and_the_theorems(rows) -> None:
    used = {key for row in rows for key in row.paper_keys()}
    assert used == set(REPORTED), f"REPORTED keys without a ledger row: {set(REPORTED) - used}"
    ids = {row.id for row in rows}
    for theorem in ("thm1-necessity", "thm4-separation", "obs8-minimal-parametrisation", "conj5-monotonicity",
                    "layer3-stress-peak", "separation-positive", "sinusoidal-vs-rope"):
        assert theorem in ids
    assert any(row.id.startswith("prop5") for row in rows)


def test_every_row_names_keys_its_chapter_glues(rows) -> None:
    missing = []
    for row in rows:
        source = NOTEBOOKS / f"{row.chapter}.md"
        if not source.is_file():
            assert row.rule["kind"] == "not_checkable" and not row.keys(), \
                f"{row.id}: chapter {row.chapter} does not exist, so the row can only be not checkable"
            continue
        patterns = [p for p in glued_key_patterns(source) if len(p.pattern.replace(".+", "").replace("\\", "")) >= 2]
        quoted = set(re.findall(r"\{glue(?::\w+)?\}`([^`:]+)", source.read_text(encoding="utf-8")))
        missing += [f"{row.id}: {row.chapter} does not glue {key!r}" for key in row.keys()
                    if key not in quoted and not any(p.fullmatch(key) for p in patterns)]
    assert not missing, "\n".join(missing)


def test_verdict_rules_are_not_typed(rows) -> None:
    """Numeric claims get a tolerance or a check; only rows that cannot be judged from numbers are asserted or
    not checkable, and those say why."""
    for row in rows:
        kind = row.rule["kind"]
        if kind == "not_checkable":
            assert len(row.rule["why"]) > 40, row.id
        elif kind == "asserted":
            assert row.rule["assertion"], row.id
        assert row.rule.get("pass", REPRODUCED) in VERDICTS


@pytest.mark.parametrize("change, fragment", [
    ({"paper": "no_such_number"}, "not in posgeom_utils.repro.paper.REPORTED"),
    ({"rule": {"kind": "guess"}}, "rule.kind"),
    ({"rule": {"kind": "tolerance", "key": "x"}}, "rtol"),
    ({"rule": {"kind": "tolerance", "key": "x", "rtol": 0.1, "pass": "close enough"}}, "rule.pass"),
    ({"rule": {"kind": "tolerance", "key": "x", "rtol": 0.1, "pass": DIFFERENT_DEFINITION}}, "must say which"),
    ({"rule": {"kind": "check", "check": {"key": "x", "op": "about", "value": 1}}}, "unknown op"),
    ({"rule": {"kind": "not_checkable"}}, "say why"),
    ({"rule": {"kind": "not_checkable", "why": "w", "key": "x"}}, "do not apply"),
    ({"colour": "red"}, "unknown field"),
    ({"paper_text": "about 0"}, "exactly one of 'paper'"),
])
def test_bad_rows_are_rejected(change: dict, fragment: str) -> None:
    with pytest.raises(ClaimError, match=re.escape(fragment)):
        validate_rows({"rows": [row_dict(**change)]})


def test_render_leaves_a_mark_for_missing_keys() -> None:
    assert render("{a:.2f} and {b}", {"a": 0.123}) == ("0.12 and ?", ["b"])
    assert render("{dev_pre-trained_intact:.1f}", {"dev_pre-trained_intact": 6.12}) == ("6.1", [])
    assert render("{s:.2f}", {"s": "none"}) == ("none", [])


# --------------------------------------------------------------------------- the page

def _execute_page() -> list[dict]:
    import jupytext
    from nbclient import NotebookClient

    nb = jupytext.read(ROOT / "book" / "ledger.md")
    client = NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(ROOT / "book")}})
    client.execute()
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


@pytest.mark.notebook
def test_ledger_page_fails_loudly_without_default_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSGEOM_LEDGER_RESULTS", str(tmp_path / "nothing"))
    errors = [o for o in _execute_page() if o.get("output_type") == "error"]
    assert errors and errors[0]["ename"] == "FileNotFoundError"
    assert "posgeom run --profile default --out book/results/default" in errors[0]["evalue"]


@pytest.mark.notebook
def test_ledger_page_executes_on_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_run(tmp_path / "default", "monotonicity", {"random_mean": 0.5, "random_tables": 5})
    monkeypatch.setenv("POSGEOM_LEDGER_RESULTS", str(tmp_path / "default"))
    monkeypatch.setenv("POSGEOM_LEDGER_PAPER_RESULTS", str(tmp_path / "paper"))
    outputs = _execute_page()
    assert not [o for o in outputs if o.get("output_type") == "error"]
    glued = {o["metadata"]["scrapbook"]["name"] for o in outputs if "scrapbook" in o.get("metadata", {})}
    assert {"n_reproduced", "paper_status", "claims_passed", "default_commits"} <= glued

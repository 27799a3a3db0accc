"""The reproduction ledger (the claims of book/claims.yaml with a ``paper`` block, posgeom_utils.repro.ledger):
verdicts computed from the values by the one checker, pending and capped runs labelled, and every reported
number of the paper covered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posgeom_utils.repro.claims import (BY_CONSTRUCTION, DIFFERENT_DEFINITION, DIFFERS, NOT_CHECKABLE, REPRODUCED, Claim,
                                        load_claims, validate_claims)
from posgeom_utils.repro.ledger import (MISSING, PENDING, build_ledger, paper_claims, provenance_table, rule_text,
                                        verdict_counts)
from posgeom_utils.repro.paper import REPORTED, reported

ROOT = Path(__file__).resolve().parents[1]


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
def rows() -> list[Claim]:
    return load_claims()


def sinusoidal_claim(**change) -> Claim:
    """A paper claim on the sinusoidal stress, with an alternative definition (``change`` replaces fields)."""
    near = {"op": "==", "paper": "sst2_sinusoidal_stress", "rtol": 0.1}
    base = {"id": "sin", "chapter": "mds_optimality", "statement": "Stress of the sinusoidal encoding",
            "check": {"key": "sst2_sin_raw", **near}, "profiles": [],
            "paper": {"value": "sst2_sinusoidal_stress", "quantity": "raw stress at d = {d}",
                      "ours": "{sst2_sin_raw:.0f}",
                      "alternatives": [{"check": {"key": "sst2_sin_fit", **near}, "definition": "fitted"}]}}
    return validate_claims({"claims": [{**base, **change}]})[0]


# --------------------------------------------------------------------------- verdicts from values

def test_numeric_verdict_is_computed_and_flips_with_the_value(tmp_path: Path) -> None:
    claim = sinusoidal_claim()
    paper = reported("sst2_sinusoidal_stress")
    default = tmp_path / "default"
    write_run(default, "mds_optimality", {"sst2_sin_raw": paper * 1.05, "sst2_sin_fit": 0.05, "d": 384})
    ledger = build_ledger({"default": default, "paper": tmp_path / "nothing"}, claims=[claim])
    assert ledger.loc["sin", "verdict (default)"] == REPRODUCED
    assert ledger.loc["sin", "ours (default)"] == f"{paper * 1.05:.0f}"
    assert ledger.loc["sin", "quantity"] == "raw stress at d = 384"
    assert ledger.loc["sin", "paper"] == "272"
    assert ledger.loc["sin", "rule"] == "|ours - paper| <= 10% of the paper's value"
    write_run(default, "mds_optimality", {"sst2_sin_raw": paper * 1.5, "sst2_sin_fit": 0.05, "d": 384})
    ledger = build_ledger({"default": default}, claims=[claim])
    assert ledger.loc["sin", "verdict (default)"] == DIFFERS
    assert "sst2_sin_raw = 408" in ledger.loc["sin", "evidence (default)"]
    assert "sst2_sin_fit = 0.05" in ledger.loc["sin", "evidence (default)"]
    # an alternative definition within the tolerance
    write_run(default, "mds_optimality", {"sst2_sin_raw": paper * 1.5, "sst2_sin_fit": paper * 0.95, "d": 384})
    ledger = build_ledger({"default": default}, claims=[claim])
    assert ledger.loc["sin", "verdict (default)"] == DIFFERENT_DEFINITION
    assert "(fitted)" in ledger.loc["sin", "evidence (default)"]
    # a key gone from the results is flagged, not judged
    write_run(default, "mds_optimality", {"d": 384})
    assert build_ledger({"default": default}, claims=[claim]).loc["sin", "verdict (default)"] == MISSING


def test_the_claims_verdict_and_definition_apply_when_its_check_holds(tmp_path: Path) -> None:
    claim = sinusoidal_claim(paper={"value": "sst2_sinusoidal_stress", "ours": "{sst2_sin_raw:.0f}",
                                    "verdict": DIFFERENT_DEFINITION, "definition": "at d = {d}",
                                    "evidence": "n = {n}"})
    write_run(tmp_path, "mds_optimality", {"sst2_sin_raw": reported("sst2_sinusoidal_stress"), "d": 384, "n": 48})
    row = build_ledger({"default": tmp_path}, claims=[claim]).loc["sin"]
    assert row["verdict (default)"] == DIFFERENT_DEFINITION
    assert row["evidence (default)"].startswith("At d = 384; sst2_sin_raw = 272 == paper")
    assert row["evidence (default)"].endswith(". N = 48.")


def test_asserted_and_not_checkable_claims(tmp_path: Path) -> None:
    asserted = sinusoidal_claim(id="asserted", check={"asserted": "rank == 1"},
                                paper={"text": "proposition", "ours": "1 (asserted)"})
    unchecked = validate_claims({"claims": [{
        "id": "unchecked", "chapter": "mds_optimality", "statement": "s", "profiles": [],
        "paper": {"value": "synthetic_mds_stress", "ours": "{x:.1f}", "not_checkable": "no corpus"}}]})[0]
    plain = validate_claims({"claims": [{"id": "plain", "chapter": "mds_optimality", "statement": "s",
                                         "check": {"key": "x", "op": ">", "value": 0}, "profiles": ["default"]}]})[0]
    ledger = build_ledger({"default": tmp_path / "default"}, claims=[asserted, unchecked, plain])
    assert list(ledger.index) == ["asserted", "unchecked"]
    assert ledger.loc["asserted", "verdict (default)"] == PENDING["default"]
    assert ledger.loc["unchecked", "verdict (default)"] == NOT_CHECKABLE
    assert ledger.loc["unchecked", "ours (default)"] == ""
    write_run(tmp_path / "default", "mds_optimality", {"x": 2.0})
    ledger = build_ledger({"default": tmp_path / "default"}, claims=[asserted, unchecked])
    assert ledger.loc["asserted", "verdict (default)"] == REPRODUCED
    assert "its assertion held: rank == 1" in ledger.loc["asserted", "evidence (default)"]
    assert ledger.loc["asserted", "rule"] == "asserted by the chapter: rank == 1"
    assert ledger.loc["asserted", "paper"] == "proposition"
    assert ledger.loc["unchecked", "ours (default)"] == "2.0"
    assert ledger.loc["unchecked", "evidence (default)"] == "no corpus"
    assert ledger.loc["unchecked", "rule"] == "-"


def test_real_rows_judge_fake_results(tmp_path: Path, rows) -> None:
    """The book's own rows: the chance row and a qualitative row flip with the values."""
    default = tmp_path / "default"
    # the tables follow the L2 order, not the Hellinger one: the conjecture holds with another geometry
    write_run(default, "monotonicity", {"random_mean": 0.51, "random_tables": 20, "ntk_gap_wide_low": 0.1,
                                        "ntk_gap_wide_high": 0.3})
    ledger = build_ledger({"default": default, "paper": tmp_path / "paper"}, claims=rows)
    # the chance rate is a property of the null model: when it holds it is a check of the code, not a finding
    assert ledger.loc["chance-violation-rate", "verdict (default)"] == BY_CONSTRUCTION
    assert ledger.loc["conj5-monotonicity", "verdict (default)"] == DIFFERENT_DEFINITION
    write_run(default, "monotonicity", {"random_mean": 0.6, "random_tables": 20, "ntk_gap_wide_low": -0.1,
                                        "ntk_gap_wide_high": 0.2})
    ledger = build_ledger({"default": default, "paper": tmp_path / "paper"}, claims=rows)
    assert ledger.loc["chance-violation-rate", "verdict (default)"] == DIFFERS
    assert ledger.loc["conj5-monotonicity", "verdict (default)"] == DIFFERS
    write_run(default, "monotonicity", {"random_mean": 0.5, "random_tables": 20, "ntk_gap_wide_low": -0.3,
                                        "ntk_gap_wide_high": -0.1})  # the Hellinger order wins: the paper's claim
    ledger = build_ledger({"default": default, "paper": tmp_path / "paper"}, claims=rows)
    assert ledger.loc["conj5-monotonicity", "verdict (default)"] == REPRODUCED
    # chapters without results are pending, rows that cannot be checked say so whatever the results
    assert ledger.loc["thm1-necessity", "verdict (default)"] == PENDING["default"]
    assert ledger.loc["synthetic-mds-stress", "verdict (default)"] == NOT_CHECKABLE
    assert ledger.loc["layer3-stress-peak", "verdict (default)"] == NOT_CHECKABLE  # 6 layers, not BERT's 12


def test_missing_or_empty_paper_dir_is_pending_a_gpu_run(tmp_path: Path, rows) -> None:
    default = tmp_path / "default"
    write_run(default, "necessity", {"dev_none": 0.0, "dev_pre-trained_positions_removed": 0.0,
                                     "acc_syn_none": 0.5, "probe_zeroed_low": 0.48, "probe_zeroed_high": 0.53})
    (tmp_path / "empty").mkdir()
    for paper in (tmp_path / "absent", tmp_path / "empty", None):
        ledger = build_ledger({"default": default, "paper": paper}, claims=rows)
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
    ledger = build_ledger({"default": tmp_path / "default", "paper": paper}, claims=rows)
    scale = ledger.loc["chance-violation-rate", "scale (paper)"]
    assert scale.startswith("capped CPU run (cap 2000)") and "not paper scale" in scale
    assert ledger.loc["chance-violation-rate", "verdict (paper)"] == BY_CONSTRUCTION
    assert ledger.loc["chance-violation-rate", "verdict (default)"] == PENDING["default"]
    write_run(paper, "monotonicity", {"random_mean": 0.5, "random_tables": 100}, profile="paper")
    ledger = build_ledger({"paper": paper}, claims=rows)
    assert ledger.loc["chance-violation-rate", "scale (paper)"] == "paper profile"
    table = provenance_table({"paper": paper}, profiles=("paper",))
    assert table.loc[("paper", "monotonicity"), "scale"] == "paper profile"


def test_a_stand_in_profile_is_labelled(tmp_path: Path, rows) -> None:
    folder = tmp_path / "smoke"
    write_run(folder, "monotonicity", {"random_mean": 0.5, "random_tables": 5}, profile="smoke")
    ledger = build_ledger({"default": folder}, claims=rows)
    assert ledger.loc["chance-violation-rate", "scale (default)"] == "smoke profile results standing in for default"


def test_provenance_columns(tmp_path: Path, rows) -> None:
    default = tmp_path / "default"
    write_run(default, "monotonicity", {"random_mean": 0.5, "random_tables": 5, "model": "m (packaged)"},
              parameters={"dataset": "sst2", "other_dataset": "imdb", "split": "train", "sample_size": None,
                          "n": 48, "model_name": None})
    row = build_ledger({"default": default}, claims=rows).loc["chance-violation-rate"]
    assert row["model (default)"] == "m (packaged)"
    assert row["data (default)"] == "sst2/imdb train, all texts, n=48"
    assert row["device (default)"] == "cpu" and row["commit (default)"] == "0123456789"
    assert row["date (default)"] == "2026-01-02"


# --------------------------------------------------------------------------- the rows themselves

def test_rows_cover_every_reported_number_and_the_theorems(rows) -> None:
    ledger_rows = paper_claims(rows)
    used = {key for claim in ledger_rows for key in claim.paper.reported_keys()}
    assert used == set(REPORTED), f"REPORTED keys without a ledger row: {set(REPORTED) - used}"
    ids = {claim.id for claim in ledger_rows}
    for theorem in ("thm1-necessity", "thm4-separation", "obs8-minimal-parametrisation", "conj5-monotonicity",
                    "layer3-stress-peak", "separation-positive", "sinusoidal-vs-rope"):
        assert theorem in ids
    assert any(claim.id.startswith("prop5") for claim in ledger_rows)


def test_rule_text_says_how_each_row_is_judged(rows) -> None:
    by_id = {claim.id: claim for claim in paper_claims(rows)}
    assert rule_text(by_id["sst2-sinusoidal-stress"]) == "|ours - paper| <= 10% of the paper's value"
    assert rule_text(by_id["mds-violation-rate"]) == "|ours - paper| <= 0.03"
    assert rule_text(by_id["lowrank-rank"]) == "|ours - paper| <= 0"
    assert rule_text(by_id["prop5-alibi-rank1"]).startswith("asserted by the chapter: classical_mds(")
    assert rule_text(by_id["thm4-separation"]) == (
        "qualitative check on our keys: sep_gap_drift, sep_gap_drift_hw, real_gap, real_gap_hw")
    assert rule_text(by_id["synthetic-mds-stress"]) == "-"


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

"""The reproduction ledger (book/paper_claims.yaml, posgeom_utils.repro.ledger): the check language, verdicts
computed from the values (a changed value flips a verdict), every row able to fail, pending and capped runs
labelled, and every number the paper reports covered by a row."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from posgeom_utils.repro.ledger import (BY_CONSTRUCTION, DIFFERENT_DEFINITION, NOT_IDENTIFIABLE, DIFFERS, MISSING,
                                        NOT_CHECKABLE, PENDING, REPRODUCED, ClaimError, as_number,
                                        build_ledger, check_keys, evaluate_check, load_claims,
                                        provenance_table, read_claim_run, render, rule_text,
                                        verdict_counts)
from posgeom_utils.repro.paper import REPORTED, reported

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "book" / "results" / "reference"


def write_run(folder: Path, chapter: str, results: dict, profile: str = "reference", cap: int | None = None) -> None:
    """A results.json laid out as ``posgeom run`` writes it."""
    (folder / chapter).mkdir(parents=True, exist_ok=True)
    payload = {"chapter": chapter, "parameters": {"profile": profile}, "results": results,
               "provenance": {"profile": profile, "cap": cap, "commit": "0123456789abcdef", "dirty": False,
                              "device_name": "cpu", "started": "2026-01-02T03:04:05+00:00",
                              "finished": "2026-01-02T03:05:05+00:00", "wall_seconds": 60.0,
                              "libraries": {"python": "3.11.7", "torch": "2.13.0"}}}
    (folder / chapter / "results.json").write_text(json.dumps(payload))


def rows_from(tmp_path: Path, *rows: dict):
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({"claims": list(rows)}))
    return load_claims(path)


NEAR = "abs({} - paper.sst2_sinusoidal_stress) <= 0.1 * paper.sst2_sinusoidal_stress"
SIN = {"id": "sin", "chapter": "mds_optimality", "statement": "Stress of the sinusoidal encoding",
       "check": NEAR.format("sst2_sin_raw"), "value": "sst2_sinusoidal_stress",
       "quantity": "raw stress at d = {d}", "ours": "{sst2_sin_raw:.0f}",
       "alternatives": [{"check": NEAR.format("sst2_sin_fit"), "definition": "fitted"}]}


@pytest.fixture(scope="module")
def rows():
    return load_claims()


# --------------------------------------------------------------------------- the check language

RESULTS = {"a": 0.5, "b": 0.3, "count": 16, "r": 12, "sin": 290.0, "ratio": 279 / 272, "none": "none",
           "nan": math.nan, "share": "66%", "pre-trained": 2e-6}


@pytest.mark.parametrize("check", [
    "a > 0.4",
    "a <= 0.5",
    "a > b",
    "abs(count - 17) <= 1",
    "count == r + 4",
    "b < 0.7 * a",
    "0.4 <= a <= 0.6",
    "abs(a - 0.6) > 0.05",
    "share > 0.6",
    "a > 0 and b > 0",
    "none <= 0 or a > 0",  # a part that reads a non-number fails, the other can hold
    "abs(sin - paper.sst2_sinusoidal_stress) <= 0.1 * paper.sst2_sinusoidal_stress",
    "sin < 3 * paper.sst2_sinusoidal_stress",
    "abs(ratio - paper.sst2_rope_stress / paper.sst2_sinusoidal_stress) <= 1e-12",
    'results["pre-trained"] < 1e-4',  # a key that is not a Python name
    "a / b > 1.5 and -a < 0 and (a + b) * 2 > 1.5",
])
def test_passing_checks(check: str) -> None:
    passed, message = evaluate_check(check, RESULTS)
    assert passed, message
    assert message.startswith(f"{check} with ") and message.endswith(": holds")


@pytest.mark.parametrize("check, fragment", [
    ("a < 0.5", "a < 0.5 with a = 0.5: fails"),
    ("a < 1.5 * b", "with a = 0.5, b = 0.3: fails"),
    ("0.6 <= a <= 0.7", "fails"),
    ("abs(a - 0.6) <= 0.05", "fails"),
    ("none > 0", "none = 'none' is not a number: fails"),
    ("nan < 1", "nan = nan is not a number"),
    ("a / (b - b) > 0", "fails"),  # a division by zero fails every comparison
    ("none <= 0 and a > 0", "fails at none <= 0"),
    ("a > 0 and b > 1 and a < 0", "fails at b > 1; a < 0"),
    ("a < 0 or b > 1", "fails"),
    ("abs(sin - paper.sst2_sinusoidal_stress) <= 0.05 * paper.sst2_sinusoidal_stress",
     "with sin = 290, paper.sst2_sinusoidal_stress = 272: fails"),
])
def test_failing_checks(check: str, fragment: str) -> None:
    passed, message = evaluate_check(check, RESULTS)
    assert not passed and fragment in message, message


@pytest.mark.parametrize("check", ["absent < 1", "a < absent", 'results["absent"] < 1'])
def test_a_check_on_a_key_the_results_lack_is_an_error_naming_it(check: str) -> None:
    with pytest.raises(ClaimError, match="reads 'absent', which the results lack"):
        evaluate_check(check, RESULTS)


def test_check_keys_are_the_glued_keys_in_order() -> None:
    check = 'x < paper.sst2_mds_stress and results["a-b"] > abs(y - x) + 1'
    assert check_keys(check) == ["x", "a-b", "y"] and check_keys(None) == []


FORM = "write < <= > >= == of keys"


@pytest.mark.parametrize("change, field, fragment", [
    ({"check": "a ~= 1"}, "check", FORM),
    ({"check": "a >"}, "check", FORM),
    ({"check": "__import__('os').system('true') == 0"}, "check", FORM),  # no calls but abs
    ({"check": "a.real > 1"}, "check", FORM),  # no attributes but paper.KEY
    ({"check": "a > 1 and 3"}, "check", FORM),  # and/or join comparisons
    ({"check": "a > paper.no_such_number"}, "check", "a key of posgeom_utils.repro.paper"),
    ({"alternatives": [{"check": "> 1", "definition": "d"}]}, "alternatives", FORM),
    ({"check": "a + 1"}, "check", FORM),  # a check is a comparison
    ({"check": {"key": "a", "op": ">", "value": 1}}, "check", FORM),  # the old mapping form
    ({"check": "a != 1"}, "check", FORM),
    ({"check": "not a > 1"}, "check", FORM),  # would make a non-number pass
    ({"check": "a > '1'"}, "check", FORM),
    ({"check": "a ** 2 > 1"}, "check", FORM),
    ({"check": "a > True"}, "check", FORM),  # numbers only
    ({"check": "paper > 1"}, "check", FORM),  # paper, results and abs are not keys
    ({"value": "sst2_rope_stress / nothing"}, "value", "a key of posgeom_utils.repro.paper"),
    ({"colour": "red"}, "colour", "not a field"),
    ({"ours": None}, "ours", "every row needs"),
    ({"text": "theorem"}, "value/text", "give one"),
    ({"verdict": "close enough"}, "verdict", "use one of: reproduced"),
    ({"check": None, "not_checkable": ""}, "check", "not_checkable with the reason"),
    ({"asserted": "rank == 1"}, "check", "give one: a check, asserted"),  # not both
    ({"also": "stress_forensics"}, "also", "list the other chapters"),
    ({"also": ["mds_optimality"]}, "also", "list the other chapters"),
])
def test_bad_rows_are_rejected_naming_the_row_the_field_and_the_fix(tmp_path: Path, change: dict, field: str,
                                                                   fragment: str) -> None:
    row = {k: v for k, v in {**SIN, **change}.items() if v is not None}
    with pytest.raises(ClaimError, match=f"row 1 \\('sin'\\), field {field}: ") as caught:
        rows_from(tmp_path, row)
    assert fragment in str(caught.value)


def test_duplicate_ids_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ClaimError, match="ids \\['sin'\\] are used twice"):
        rows_from(tmp_path, SIN, SIN)


def test_render_and_numbers() -> None:
    assert render("{a:.2f} and {gone}", {"a": 0.123}) == ("0.12 and ?", ["gone"])
    assert [as_number(v) for v in (3, "16", "66%", True, "film", [1])] == [3.0, 16.0, 0.66, None, None, None]


# --------------------------------------------------------------------------- verdicts from values

def test_numeric_verdict_is_computed_and_flips_with_the_value(tmp_path: Path) -> None:
    claims = rows_from(tmp_path, SIN)
    paper = reported("sst2_sinusoidal_stress")
    default = tmp_path / "reference"
    write_run(default, "mds_optimality", {"sst2_sin_raw": paper * 1.05, "sst2_sin_fit": 0.05, "d": 384})
    ledger = build_ledger({"reference": default, "paper": tmp_path / "nothing"}, claims=claims)
    assert ledger.loc["sin", "verdict (reference)"] == REPRODUCED
    assert ledger.loc["sin", "ours (reference)"] == f"{paper * 1.05:.0f}"
    assert ledger.loc["sin", "quantity"] == "raw stress at d = 384" and ledger.loc["sin", "paper"] == "272"
    write_run(default, "mds_optimality", {"sst2_sin_raw": paper * 1.5, "sst2_sin_fit": 0.05, "d": 384})
    ledger = build_ledger({"reference": default}, claims=claims)
    assert ledger.loc["sin", "verdict (reference)"] == DIFFERS
    assert "sst2_sin_raw = 408" in ledger.loc["sin", "check (reference)"]
    write_run(default, "mds_optimality", {"sst2_sin_raw": paper * 1.5, "sst2_sin_fit": paper * 0.95, "d": 3})
    ledger = build_ledger({"reference": default}, claims=claims)
    assert ledger.loc["sin", "verdict (reference)"] == DIFFERENT_DEFINITION  # an alternative holds
    assert "It holds fitted" in ledger.loc["sin", "evidence (reference)"]
    write_run(default, "mds_optimality", {"d": 384})  # a key gone from the results is flagged, not judged
    assert build_ledger({"reference": default}, claims=claims).loc["sin", "verdict (reference)"] == MISSING


def test_every_key_of_every_check_is_looked_up_before_judging(tmp_path: Path) -> None:
    """A key gone from the results is named, also when only an alternative reads it; nothing is judged."""
    claims = rows_from(tmp_path, SIN)
    write_run(tmp_path, "mds_optimality", {"sst2_sin_raw": reported("sst2_sinusoidal_stress"), "d": 384})
    row = build_ledger({"reference": tmp_path}, claims=claims).loc["sin"]
    assert row["verdict (reference)"] == MISSING
    assert row["check (reference)"] == "missing key(s) ['sst2_sin_fit'] in results.json"


def test_a_search_match_that_many_settings_share_is_not_identifiable(tmp_path: Path) -> None:
    """Issue 22: a definition found by a search identifies nothing when chance explains the match."""
    searched = {**SIN, "alternatives": [{"check": NEAR.format("sst2_sin_fit"), "definition": "best setting",
                                         "matches": ["settings", "fraction"]}]}
    claims = rows_from(tmp_path, searched)
    paper = reported("sst2_sinusoidal_stress")
    for settings, fraction, verdict in ((24960, 0.0115, NOT_IDENTIFIABLE), (100, 0.01, DIFFERENT_DEFINITION)):
        write_run(tmp_path, "mds_optimality", {"sst2_sin_raw": paper * 1.5, "sst2_sin_fit": paper, "d": 384,
                                               "settings": settings, "fraction": fraction})
        row = build_ledger({"reference": tmp_path}, claims=claims).loc["sin"]
        assert row["verdict (reference)"] == verdict
        shared = "about 287 settings of the search match as well" in row["evidence (reference)"]
        assert shared == (verdict == NOT_IDENTIFIABLE)


def test_the_rows_verdict_and_definition_apply_when_its_check_holds(tmp_path: Path) -> None:
    claims = rows_from(tmp_path, {**SIN, "verdict": DIFFERENT_DEFINITION, "definition": "at d = {d}",
                                  "evidence": "n = {n}", "alternatives": []})
    write_run(tmp_path, "mds_optimality", {"sst2_sin_raw": reported("sst2_sinusoidal_stress"), "d": 384, "n": 48})
    row = build_ledger({"reference": tmp_path}, claims=claims).loc["sin"]
    assert row["verdict (reference)"] == DIFFERENT_DEFINITION
    assert row["evidence (reference)"] == "At d = 384. N = 48."  # sentences: the definition, the evidence
    assert row["check (reference)"] == (
        NEAR.format("sst2_sin_raw") + " with sst2_sin_raw = 272, paper.sst2_sinusoidal_stress = 272: holds")


def test_a_row_reads_the_keys_of_the_chapters_it_names_and_refuses_a_clash(tmp_path: Path) -> None:
    """``also``: a row judged on one chapter may quote another's keys (the appendix's search);
    pending until both ran, and a key glued by both with different values is an error."""
    claims = rows_from(tmp_path, {**SIN, "also": ["stress_forensics"], "ours": "{sst2_sin_raw:.0f}; {fx_best:.0f}",
                                  "alternatives": []})
    write_run(tmp_path, "mds_optimality", {"sst2_sin_raw": reported("sst2_sinusoidal_stress"), "d": 384,
                                           "replicates": 150})
    assert build_ledger({"reference": tmp_path}, claims=claims).loc["sin", "verdict (reference)"] == PENDING[
        "reference"]
    write_run(tmp_path, "stress_forensics", {"fx_best": 281.0, "d": 384})
    row = build_ledger({"reference": tmp_path}, claims=claims).loc["sin"]
    assert row["verdict (reference)"] == REPRODUCED and row["ours (reference)"] == "272; 281"
    assert row["keys"].startswith("mds_optimality + stress_forensics: ")
    write_run(tmp_path, "stress_forensics", {"fx_best": 281.0, "replicates": 10})  # a key the row does not read
    assert build_ledger({"reference": tmp_path}, claims=claims).loc["sin", "ours (reference)"] == "272; 281"
    write_run(tmp_path, "stress_forensics", {"fx_best": 281.0, "d": 768})  # one it reads
    with pytest.raises(ClaimError, match="'d' with different values"):
        build_ledger({"reference": tmp_path}, claims=claims)


def test_asserted_and_not_checkable_rows(tmp_path: Path) -> None:
    asserted = {"id": "asserted", "chapter": "mds_optimality", "statement": "s", "text": "proposition",
                "ours": "1 (asserted)", "asserted": "rank == 1"}
    unchecked = {"id": "unchecked", "chapter": "mds_optimality", "statement": "s",
                 "value": "synthetic_mds_stress", "ours": "{x:.1f}", "not_checkable": "no corpus"}
    claims = rows_from(tmp_path, asserted, unchecked)
    ledger = build_ledger({"reference": tmp_path / "reference"}, claims=claims)
    assert ledger.loc["asserted", "verdict (reference)"] == PENDING["reference"]
    assert ledger.loc["unchecked", "verdict (reference)"] == NOT_CHECKABLE
    write_run(tmp_path / "reference", "mds_optimality", {"x": 2.0})
    ledger = build_ledger({"reference": tmp_path / "reference"}, claims=claims)
    assert ledger.loc["asserted", "verdict (reference)"] == REPRODUCED
    assert ledger.loc["asserted", "rule"] == "asserted by the chapter: rank == 1"
    assert ledger.loc["asserted", "check (reference)"] == (
        "the chapter ran to completion, so its assertion held: rank == 1")
    assert ledger.loc["unchecked", "ours (reference)"] == "2.0" and ledger.loc["unchecked", "rule"] == "-"


def test_real_rows_judge_fake_results(tmp_path: Path, rows) -> None:
    """The book's own rows flip with the values."""
    default = tmp_path / "reference"
    write_run(default, "monotonicity", {"random_mean": 0.51, "random_tables": 20})
    ledger = build_ledger({"reference": default, "paper": tmp_path / "paper"}, claims=rows)
    # the chance rate is a property of the null model: a check of the code, not a finding
    assert ledger.loc["chance-violation-rate", "verdict (reference)"] == BY_CONSTRUCTION
    write_run(default, "monotonicity", {"random_mean": 0.6, "random_tables": 20})
    ledger = build_ledger({"reference": default, "paper": tmp_path / "paper"}, claims=rows)
    assert ledger.loc["chance-violation-rate", "verdict (reference)"] == DIFFERS
    assert ledger.loc["thm1-necessity", "verdict (reference)"] == PENDING["reference"]
    assert ledger.loc["synthetic-mds-stress", "verdict (reference)"] == NOT_CHECKABLE


def test_pending_capped_and_stand_in_runs_are_labelled(tmp_path: Path, rows) -> None:
    paper = tmp_path / "paper"
    for folder in (tmp_path / "absent", None):
        ledger = build_ledger({"reference": tmp_path / "reference", "paper": folder}, claims=rows)
        judged = ledger[ledger["verdict (paper)"] != NOT_CHECKABLE]
        assert (judged["verdict (paper)"] == "pending a GPU run").all()
        assert verdict_counts(ledger, "paper")["pending a GPU run"] == len(judged)
    write_run(paper, "monotonicity", {"random_mean": 0.5, "random_tables": 100}, profile="paper", cap=2000)
    ledger = build_ledger({"paper": paper}, claims=rows)
    scale = ledger.loc["chance-violation-rate", "scale (paper)"]
    assert scale.startswith("capped CPU run (cap 2000)") and "not paper scale" in scale
    write_run(tmp_path / "smoke", "monotonicity", {"random_mean": 0.5, "random_tables": 5}, profile="smoke")
    row = build_ledger({"reference": tmp_path / "smoke"}, claims=rows).loc["chance-violation-rate"]
    assert row["scale (reference)"] == "smoke profile results standing in for reference"
    assert row["date (reference)"] == "2026-01-02" and row["commit (reference)"] == "0123456"
    table = provenance_table({"reference": tmp_path / "smoke", "paper": tmp_path / "absent"})
    assert table.loc[("paper", "(all)"), "scale"] == "pending a GPU run"
    assert table.loc[("reference", "monotonicity"), "commit"] == "0123456"


# --------------------------------------------------------------------------- the rows themselves

def test_rows_cover_every_reported_number_and_the_theorems(rows) -> None:
    used = {part.strip() for claim in rows if claim.value for part in claim.value.split("/")}
    assert used == set(REPORTED), f"REPORTED keys without a ledger row: {set(REPORTED) - used}"
    ids = {claim.id for claim in rows}
    assert {"thm1-necessity", "thm4-separation", "obs8-minimal-parametrisation", "conj5-monotonicity",
            "layer3-stress-peak", "sinusoidal-vs-rope"} <= ids
    assert rule_text(next(c for c in rows if c.id == "sst2-sinusoidal-stress")) == NEAR.format("sst2_sin_raw")


def _candidates(x: float) -> list[float]:
    """Plausible other values of a number: scaled, shifted, and for numbers in [0, 1] the unit grid."""
    out = [x * f for f in (0.5, 0.8, 0.9, 1.1, 1.25, 2.0)] + [x - 0.1 * max(abs(x), 1e-3), x + 0.1 * max(abs(x), 1e-3)]
    out += [0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0] if 0.0 <= x <= 1.0 else []
    return [v for v in out if math.isfinite(v) and v != x]


def flips(check: dict, results: dict) -> bool:
    """Whether some plausible change of one value the check reads, or of all of them together, changes its
    outcome."""
    baseline, _ = evaluate_check(check, results)
    keys = [k for k in check_keys(check) if as_number(results.get(k)) is not None]
    for key in keys:
        if any(evaluate_check(check, {**results, key: v})[0] != baseline for v in _candidates(results[key])):
            return True
    return any(evaluate_check(check, {**results, **{k: results[k] * f for k in keys}})[0] != baseline
               for f in (0.5, 0.8, 1.25, 2.0))


def test_every_row_that_holds_has_a_value_that_breaks_it(rows) -> None:
    """A row that no plausible value could break is a property of the code: it must say "holds by
    construction" or be an assertion, never count as reproduced."""
    if not any(REFERENCE.glob("*/results.json")):
        pytest.skip("no committed reference results")
    unbreakable = []
    for claim in rows:  # an asserted row has no check
        run = read_claim_run(REFERENCE, claim)  # with the keys of the chapters in `also`
        results = run["results"] if run is not None else {}
        if claim.check is None or run is None or not evaluate_check(claim.check, results)[0]:
            continue
        if not flips(claim.check, results) and claim.verdict != BY_CONSTRUCTION:
            unbreakable.append(claim.id)
    assert not unbreakable, f"rows that cannot fail: {unbreakable}"


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
def test_ledger_page_executes_on_results_and_fails_loudly_without(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSGEOM_LEDGER_RESULTS", str(tmp_path / "nothing"))
    errors = [o for o in _execute_page() if o.get("output_type") == "error"]
    assert errors and errors[0]["ename"] == "FileNotFoundError"
    assert "posgeom run --profile reference" in errors[0]["evalue"]
    write_run(tmp_path / "reference", "monotonicity", {"random_mean": 0.5, "random_tables": 5}, "reference")
    monkeypatch.setenv("POSGEOM_LEDGER_RESULTS", str(tmp_path / "reference"))
    outputs = _execute_page()
    assert not [o for o in outputs if o.get("output_type") == "error"]
    glued = {o["metadata"]["scrapbook"]["name"] for o in outputs if "scrapbook" in o.get("metadata", {})}
    assert {"n_reproduced", "paper_status", "rows"} <= glued

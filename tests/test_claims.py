"""The book's claims (book/claims.yaml, posgeom_utils.repro.claims): one schema for the prose's claims and the
paper comparisons, naming real glued keys; the check language on hand-made results; and every claim of the
prose holding on the runs that it describes (the paper comparisons are judged in tests/test_ledger.py).

- the smoke-profile claims are checked on the session fixture ``smoke_run`` (every chapter run by ``posgeom
  run --profile smoke``), or on the folder named by ``POSGEOM_CLAIMS_SMOKE_RESULTS`` when that is set (a
  previous ``posgeom run --profile smoke --out DIR``: no chapter is re-run);
- the default-profile claims are checked on ``book/results/default`` (or ``POSGEOM_CLAIMS_DEFAULT_RESULTS``)
  when it holds results, and skipped otherwise.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from posgeom_utils.repro.claims import (DIFFERENT_DEFINITION, OPS, PROFILES, Claim, ClaimError, as_number,
                                        check_claims, check_paper_refs, evaluate_check, glued_key_patterns,
                                        load_claims, paper_value, read_results, render, validate_check,
                                        validate_claims)
from posgeom_utils.repro.paper import REPORTED, reported
from posgeom_utils.repro.runner import available_chapters

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
CLAIMS = ROOT / "book" / "claims.yaml"
SMOKE_ENV = "POSGEOM_CLAIMS_SMOKE_RESULTS"
DEFAULT_ENV = "POSGEOM_CLAIMS_DEFAULT_RESULTS"


def prose_keys(source: Path) -> set[str]:
    """Keys the chapter's prose quotes with ``{glue:text}`key:fmt``` (or ``{glue}`key```)."""
    return set(re.findall(r"\{glue(?::\w+)?\}`([^`:]+)", source.read_text(encoding="utf-8")))


def glued_in(chapter: str) -> "callable":
    """A predicate: is this key glued by ``chapter``? A key counts when a ``glue("...")`` call names it
    exactly, or an f-string / concatenation pattern with at least two literal characters matches it, or
    the prose quotes it (which the book build checks against the glued outputs)."""
    source = NOTEBOOKS / f"{chapter}.md"
    patterns = [p for p in glued_key_patterns(source) if len(p.pattern.replace(".+", "").replace("\\", "")) >= 2]
    quoted = prose_keys(source)
    return lambda key: key in quoted or any(p.fullmatch(key) for p in patterns)


@pytest.fixture(scope="module")
def claims() -> list[Claim]:
    return load_claims(CLAIMS, chapters=available_chapters(NOTEBOOKS))


# --------------------------------------------------------------------------- (a) the schema

def test_claims_file_is_valid_and_covers_every_chapter(claims: list[Claim]) -> None:
    prose = [c for c in claims if c.profiles]
    assert 30 <= len(prose) <= 100, f"{len(prose)} claims of the prose"  # a few per finding, not one per number
    assert 15 <= len(claims) - len(prose) <= 40, f"{len(claims) - len(prose)} paper comparisons"
    assert all(c.paper is not None for c in claims if not c.profiles)
    chapters = {c.chapter for c in prose}
    for chapter in ("positions_in_real_text", "necessity", "separation", "mds_optimality", "low_rank",
                    "monotonicity"):
        assert chapter in chapters, f"no claim for {chapter}"
    assert all(set(c.profiles) <= set(PROFILES) for c in claims)
    assert any("smoke" in c.profiles for c in claims) and any("default" in c.profiles for c in claims)


def test_every_claim_names_keys_its_chapter_glues(claims: list[Claim]) -> None:
    """Checks, alternatives and the paper blocks' templates read only keys their chapter glues."""
    missing = []
    for claim in claims:
        is_glued = glued_in(claim.chapter)
        missing += [f"{claim.id}: {claim.chapter} does not glue {key!r}" for key in claim.keys() if not is_glued(key)]
    assert not missing, "\n".join(missing)


def test_every_claim_uses_known_ops(claims: list[Claim]) -> None:
    def ops(check):
        for combinator in ("all", "any"):
            if combinator in check:
                return [op for sub in check[combinator] for op in ops(sub)]
        return [] if "asserted" in check else [check["op"]]

    checks = [c.check for c in claims if c.check is not None]
    checks += [alt.check for c in claims if c.paper is not None for alt in c.paper.alternatives]
    assert checks
    for check in checks:
        assert set(ops(check)) <= set(OPS), check


def test_default_claims_include_every_smoke_claim_or_say_why(claims: list[Claim]) -> None:
    """A claim checked at smoke but not at default would be odd: the prose describes the default run."""
    for claim in claims:
        if "smoke" in claim.profiles:
            assert "default" in claim.profiles, claim.id
        if "default" in claim.profiles and "smoke" not in claim.profiles:
            assert claim.note, f"{claim.id}: say in a note why it is not asserted at smoke"


def test_glued_key_patterns_read_literals_fstrings_and_concatenations(tmp_path: Path) -> None:
    source = tmp_path / "fake.md"
    source.write_text(
        "---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
        "    format_version: 0.13\nkernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n"
        "---\n\n```{code-cell} ipython3\n%matplotlib inline\nglue(\"plain\", 1)\nfor name in 'ab':\n"
        "    glue(f\"{name}_rank\", 2)\n    glue(\"dev_\" + name, 3)\n    report.glue(key, 4)\n```\n")
    patterns = glued_key_patterns(source)
    assert {p.pattern for p in patterns} == {"plain", ".+_rank", "dev_.+"}


# --------------------------------------------------------------------------- (d) the check language

RESULTS = {"a": 0.5, "b": 0.25, "zero": 0.0, "count": 16, "saving": "66%", "r": "12", "none": "none",
           "word": "the", "nan": float("nan"), "sin": 290.0, "ratio": 1.0}


def claim(check: dict, profiles=("smoke",), chapter: str = "ch", id: str = "c") -> Claim:
    return validate_claims({"claims": [{"id": id, "chapter": chapter, "statement": "s", "check": check,
                                        "profiles": list(profiles)}]})[0]


@pytest.mark.parametrize("check", [
    {"key": "a", "op": ">", "value": 0.4},
    {"key": "a", "op": "<=", "value": 0.5},
    {"key": "a", "op": ">", "other": "b"},
    {"key": "a", "op": "==", "other": "b", "factor": 2},
    {"key": "count", "op": "==", "value": 17, "tol": 1},
    {"key": "b", "op": "==", "other": "a", "factor": 0.5, "offset": 0},
    {"key": "count", "op": "==", "other": "r", "offset": 4},
    {"key": "a", "op": "between", "low": 0.4, "high": 0.6},
    {"key": "a", "op": "!=", "value": 0.6, "tol": 0.05},
    {"key": "saving", "op": ">", "value": 0.6},
    {"key": "none", "op": "==", "value": "none"},
    {"key": "word", "op": "in", "values": ["a", "the"]},
    {"key": "count", "op": "in", "values": [15, 16]},
    {"all": [{"key": "a", "op": ">", "value": 0}, {"key": "zero", "op": "==", "value": 0}]},
    {"any": [{"key": "none", "op": "<=", "value": 0}, {"key": "none", "op": "==", "value": "none"}]},
    {"key": "sin", "op": "==", "paper": "sst2_sinusoidal_stress", "rtol": 0.1},
    {"key": "sin", "op": "==", "paper": "sst2_sinusoidal_stress", "tol": 20},
    {"key": "sin", "op": "<", "paper": "sst2_sinusoidal_stress", "factor": 3},
    {"key": "ratio", "op": "==", "paper": "sst2_rope_stress / sst2_sinusoidal_stress", "rtol": 0.1},
    {"asserted": "the chapter asserts it"},
])
def test_passing_checks(check: dict) -> None:
    [result] = check_claims({"ch": RESULTS}, "smoke", [claim(check)])
    assert result.passed, result.message


@pytest.mark.parametrize("check, fragment", [
    ({"key": "a", "op": "<", "value": 0.5}, "fails"),
    ({"key": "a", "op": "<", "other": "b", "factor": 2}, "fails"),
    ({"key": "a", "op": "between", "low": 0.6, "high": 0.7}, "outside"),
    ({"key": "a", "op": "==", "value": 0.6, "tol": 0.05}, "fails"),
    ({"key": "none", "op": ">", "value": 0}, "not a number"),
    ({"key": "nan", "op": "<", "value": 1}, "NaN"),
    ({"key": "word", "op": "in", "values": ["a", "an"]}, "not in"),
    ({"all": [{"key": "a", "op": ">", "value": 0}, {"key": "b", "op": ">", "value": 1}]}, "fails"),
    ({"any": [{"key": "a", "op": "<", "value": 0}, {"key": "b", "op": ">", "value": 1}]}, "fails"),
    ({"key": "sin", "op": "==", "paper": "sst2_sinusoidal_stress", "rtol": 0.05}, "|diff| 18 > tol 13.6"),
    ({"key": "sin", "op": "!=", "paper": "sst2_sinusoidal_stress", "rtol": 0.1}, "paper sst2_sinusoidal_stress = 272"),
    ({"key": "absent", "op": "==", "paper": "sst2_sinusoidal_stress", "rtol": 0.1}, "missing key 'absent'"),
])
def test_failing_checks(check: dict, fragment: str) -> None:
    [result] = check_claims({"ch": RESULTS}, "smoke", [claim(check)])
    assert not result.passed
    assert fragment in result.message


def test_missing_key_and_missing_chapter_fail_naming_them() -> None:
    [result] = check_claims({"ch": RESULTS}, "smoke", [claim({"key": "absent", "op": ">", "value": 0})])
    assert not result.passed and "absent" in result.message and result.value is None
    [result] = check_claims({"ch": RESULTS}, "smoke", [claim({"key": "a", "op": ">", "other": "gone"})])
    assert not result.passed and "gone" in result.message
    [result] = check_claims({}, "smoke", [claim({"key": "a", "op": ">", "value": 0})])
    assert not result.passed and "no results for chapter 'ch'" in result.message


def test_claims_are_filtered_by_profile_and_accept_whole_payloads() -> None:
    claims = [claim({"key": "a", "op": ">", "value": 0}, profiles=("default",), id="d"),
              claim({"key": "a", "op": ">", "value": 0}, profiles=("smoke", "default"), id="s")]
    assert [r.claim.id for r in check_claims({"ch": RESULTS}, "smoke", claims)] == ["s"]
    payload = {"chapter": "ch", "parameters": {}, "results": RESULTS}
    assert all(r.passed for r in check_claims({"ch": payload}, "default", claims))
    with pytest.raises(ClaimError, match="unknown profile"):
        check_claims({"ch": RESULTS}, "huge", claims)


@pytest.mark.parametrize("check, fragment", [
    ({"key": "a", "op": "~=", "value": 1}, "unknown op"),
    ({"key": "a", "op": ">", "value": 1, "tolerance": 2}, "unknown field"),
    ({"key": "a", "op": ">"}, "exactly one of 'value'"),
    ({"key": "a", "op": ">", "value": 1, "other": "b"}, "exactly one of 'value'"),
    ({"key": "a", "op": "between", "low": 1}, "'low' and 'high'"),
    ({"key": "a", "op": "between", "low": 2, "high": 1}, "above high"),
    ({"key": "a", "op": "in", "values": []}, "non-empty list"),
    ({"key": "a", "op": ">", "value": "big"}, "string 'value'"),
    ({"key": "a", "op": ">", "value": 1, "tol": 0.1}, "'tol' applies"),
    ({"key": "a", "op": ">", "paper": "sst2_alibi_stress", "rtol": 0.1}, "'rtol' applies"),
    ({"key": "a", "op": "==", "paper": "sst2_alibi_stress", "rtol": -0.1}, "'rtol' must be >= 0"),
    ({"key": "a", "op": ">", "value": 1, "paper": "sst2_alibi_stress"}, "exactly one of 'value'"),
    ({"key": "a", "op": ">", "paper": "no_such_number"}, "not in posgeom_utils.repro.paper.REPORTED"),
    ({"key": "a", "op": ">", "paper": "sst2_rope_stress / nothing"}, "'nothing' is not in"),
    ({"key": "a", "op": "between", "low": 0, "high": 1, "paper": "sst2_alibi_stress"}, "do not apply"),
    ({"asserted": "it holds", "key": "a"}, "{asserted: TEXT}"),
    ({"asserted": ""}, "{asserted: TEXT}"),
    ({"op": ">", "value": 1}, "'key'"),
    ({"all": []}, "non-empty list"),
    ({"all": [{"key": "a", "op": ">", "value": 1}], "key": "b"}, "only field"),
    ("a > 1", "must be a mapping"),
])
def test_bad_checks_are_rejected_with_a_clear_message(check, fragment: str) -> None:
    with pytest.raises(ClaimError, match=re.escape(fragment)):
        validate_check(check)


def test_bad_claims_are_rejected(tmp_path: Path) -> None:
    good = {"id": "x", "chapter": "necessity", "statement": "s", "check": {"key": "a", "op": ">", "value": 0},
            "profiles": ["smoke"]}
    for change, fragment in (({"color": "red"}, "unknown field"), ({"profiles": ["huge"]}, "profiles"),
                             ({"chapter": "nowhere"}, "unknown chapter"), ({"id": "Bad Id"}, "'id'")):
        with pytest.raises(ClaimError, match=re.escape(fragment)):
            validate_claims({"claims": [{**good, **change}]}, chapters=["necessity"])
    with pytest.raises(ClaimError, match="missing field"):
        validate_claims({"claims": [{k: v for k, v in good.items() if k != "check"}]})
    with pytest.raises(ClaimError, match="duplicate id"):
        validate_claims({"claims": [good, good]})
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({"claims": [{**good, "check": {"key": "a", "op": "=>", "value": 0}}]}))
    with pytest.raises(ClaimError, match=f"{re.escape(str(path))}.*unknown op"):
        load_claims(path)


def paper_claim(check: dict | None = None, **paper) -> dict:
    """A claim comparing with the paper's sinusoidal stress, as written in claims.yaml (``paper`` fields changed)."""
    block = {"value": "sst2_sinusoidal_stress", "ours": "{sst2_sin_raw:.0f}", **paper}
    near = {"key": "sst2_sin_raw", "op": "==", "paper": "sst2_sinusoidal_stress", "rtol": 0.1}
    return {"id": "sin", "chapter": "mds_optimality", "statement": "s", "profiles": [], "paper": block,
            "check": near if check is None else check}


NOT_CHECKABLE_BLOCK = {"not_checkable": "the paper's corpus is not described"}


@pytest.mark.parametrize("claim, fragment", [
    (paper_claim(value="no_such_number"), "not in posgeom_utils.repro.paper.REPORTED"),
    (paper_claim(text="about 272"), "exactly one of 'value'"),
    (paper_claim(colour="red"), "unknown field(s) ['colour']"),
    (paper_claim(ours=""), "'ours'"),
    (paper_claim(verdict="close enough"), "'verdict' must be"),
    (paper_claim(verdict=DIFFERENT_DEFINITION), "must say which"),
    (paper_claim(alternatives=[{"key": "sst2_sin_fit", "definition": "fitted"}]), "{check, definition}"),
    (paper_claim(alternatives=[{"check": {"key": "x", "op": "about", "value": 1}, "definition": "d"}]),
     "unknown op"),
    (paper_claim(check={"key": "sst2_sin_raw", "op": "==", "paper": "sst2_rope_stress", "rtol": 0.1}),
     "compare with paper value(s) ['sst2_rope_stress']"),
    (paper_claim(**NOT_CHECKABLE_BLOCK), "has no 'check'"),
    ({**paper_claim(**NOT_CHECKABLE_BLOCK, evidence="e"), "check": None}, "do not apply to a not-checkable"),
    ({**paper_claim(**NOT_CHECKABLE_BLOCK), "check": None, "profiles": ["default"]}, "has no 'check'"),
    ({**paper_claim(not_checkable=" "), "check": None}, "must say why"),
    ({**paper_claim(), "check": None}, "missing field(s) ['check']"),
    ({**paper_claim(), "paper": None, "profiles": []}, "asserted at some profile"),
])
def test_bad_paper_claims_are_rejected(claim: dict, fragment: str) -> None:
    claim = {k: v for k, v in claim.items() if v is not None}
    with pytest.raises(ClaimError, match=re.escape(fragment)):
        validate_claims({"claims": [claim]})


def test_a_paper_claim_reads_its_block() -> None:
    [claim] = validate_claims({"claims": [paper_claim(
        quantity="raw stress at d = {d}", evidence="grows with d",
        alternatives=[{"check": {"key": "sst2_sin_fit", "op": "==", "paper": "sst2_sinusoidal_stress", "rtol": 0.1},
                       "definition": "fitted at {d}"}])]})
    assert claim.paper.number() == reported("sst2_sinusoidal_stress")
    assert claim.paper.reported_keys() == ["sst2_sinusoidal_stress"]
    assert claim.keys() == ["sst2_sin_raw", "sst2_sin_fit", "d"]
    unchecked = {k: v for k, v in paper_claim(**NOT_CHECKABLE_BLOCK).items() if k != "check"}
    [not_checkable] = validate_claims({"claims": [unchecked]})
    assert not_checkable.check is None and not_checkable.keys() == ["sst2_sin_raw"]


def test_paper_claims_not_asserted_by_the_prose_are_not_checked() -> None:
    claims = validate_claims({"claims": [paper_claim(), {**paper_claim(), "id": "asserted", "profiles": ["smoke"]}]})
    results = check_claims({"mds_optimality": {"sst2_sin_raw": 280.0}}, "smoke", claims)
    assert [(r.claim.id, r.passed) for r in results] == [("asserted", True)]


def test_paper_values_by_name() -> None:
    assert paper_value("sst2_alibi_stress") == REPORTED["sst2_alibi_stress"][0]
    assert paper_value(" sst2_rope_stress / sst2_sinusoidal_stress ") == pytest.approx(279 / 272)
    assert evaluate_check({"key": "k", "op": "==", "paper": "synthetic_lowrank_r"}, {"k": 3}) == (
        True, "k = 3 == paper synthetic_lowrank_r = 3: holds")


def test_paper_comparisons_quote_the_paper_by_name(claims: list[Claim]) -> None:
    """A paper claim with a number either cannot be checked (and says why at length) or its check compares
    with that number by name: no paper number is typed into a check."""
    for claim in claims:
        if claim.paper is None or claim.paper.value is None:
            continue
        if claim.paper.not_checkable:
            assert len(claim.paper.not_checkable) > 40, claim.id
        else:
            assert check_paper_refs(claim.check) == [claim.paper.value], claim.id


def test_render_leaves_a_mark_for_missing_keys() -> None:
    assert render("{a:.2f} and {b}", {"a": 0.123}) == ("0.12 and ?", ["b"])
    assert render("{dev_pre-trained_intact:.1f}", {"dev_pre-trained_intact": 6.12}) == ("6.1", [])
    assert render("{s:.2f}", {"s": "none"}) == ("none", [])
    assert render("{a}", None) == ("?", ["a"])


def test_as_number() -> None:
    assert as_number(3) == 3.0 and as_number("16") == 16.0 and as_number("66%") == pytest.approx(0.66)
    assert as_number("-1%") == pytest.approx(-0.01) and as_number("1e-3") == 1e-3
    assert as_number("none") is None and as_number(True) is None and as_number([1]) is None
    assert as_number("more than 48 (not reached)") is None


# --------------------------------------------------------------------------- (b), (c) on real runs

def _failures(results: dict, profile: str, claims: list[Claim]) -> list[str]:
    return [str(r) for r in check_claims(results, profile, claims) if not r.passed]


@pytest.fixture(scope="module")
def smoke_results(request: pytest.FixtureRequest) -> dict:
    """``{chapter: results}`` of a smoke-profile run: ``$POSGEOM_CLAIMS_SMOKE_RESULTS`` or the session run."""
    folder = os.environ.get(SMOKE_ENV)
    if folder:
        if not any(Path(folder).glob("*/results.json")):
            pytest.fail(f"{SMOKE_ENV}={folder!r} holds no <chapter>/results.json")
    else:
        folder = request.getfixturevalue("smoke_run").out
    for path in Path(folder).glob("*/results.json"):
        profile = json.loads(path.read_text()).get("provenance", {}).get("profile")
        assert profile == "smoke", f"{path} was made with profile {profile!r}, not smoke"
    return read_results(folder)


@pytest.mark.notebook
@pytest.mark.data
def test_smoke_claims_hold_on_the_smoke_run(smoke_results: dict, claims: list[Claim]) -> None:
    failures = _failures(smoke_results, "smoke", claims)
    assert not failures, "claims the prose makes that the smoke run does not satisfy:\n" + "\n".join(failures)


def _committed_claims_hold(claims: list[Claim], profile: str, folder: Path) -> None:
    """Every claim marked for ``profile`` holds on the committed, uncapped ``profile`` results in ``folder``."""
    paths = sorted(folder.glob("*/results.json"))
    if not paths:
        pytest.skip(f"no {profile} results in {folder}: run `posgeom run --profile {profile} --out {folder}`")
    for path in paths:
        provenance = json.loads(path.read_text()).get("provenance", {})
        assert provenance.get("profile") == profile and provenance.get("cap") is None, \
            f"{path} is not an uncapped {profile}-profile run: {provenance.get('profile')!r}, cap {provenance.get('cap')}"
    results = read_results(folder)
    asserted = [c for c in claims if profile in c.profiles and c.chapter in results]
    missing = sorted({c.chapter for c in claims if profile in c.profiles} - set(results))
    failures = _failures(results, profile, asserted)
    assert not failures, f"claims the prose makes that the {profile} run does not satisfy:\n" + "\n".join(failures)
    assert not missing, f"no {profile} results for chapter(s) {missing} in {folder}"


def test_default_claims_hold_on_the_default_results(claims: list[Claim]) -> None:
    _committed_claims_hold(claims, "default", Path(os.environ.get(DEFAULT_ENV) or ROOT / "book" / "results" / "default"))


def test_reference_claims_hold_on_the_reference_results(claims: list[Claim]) -> None:
    """What the prose interprets is asserted at the reference profile and must hold on its committed results."""
    _committed_claims_hold(claims, "reference", ROOT / "book" / "results" / "reference")

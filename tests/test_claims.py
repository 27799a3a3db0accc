"""The chapters' claims (book/claims.yaml, posgeom_utils.repro.claims): a valid schema naming real glued keys, the
check language on hand-made results, and every claim holding on the runs that the prose describes.

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

from posgeom_utils.repro.claims import (OPS, PROFILES, Claim, ClaimError, as_number, check_claims, glued_key_patterns,
                                  load_claims, read_results, validate_check, validate_claims)
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
    assert 30 <= len(claims) <= 80, f"{len(claims)} claims"
    chapters = {c.chapter for c in claims}
    for chapter in ("positions_in_real_text", "necessity", "separation", "mds_optimality", "low_rank",
                    "monotonicity"):
        assert chapter in chapters, f"no claim for {chapter}"
    assert all(set(c.profiles) <= set(PROFILES) for c in claims)
    assert any("smoke" in c.profiles for c in claims) and any("default" in c.profiles for c in claims)


def test_every_claim_names_keys_its_chapter_glues(claims: list[Claim]) -> None:
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
        return [check["op"]]

    for claim in claims:
        assert set(ops(claim.check)) <= set(OPS), claim.id


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
           "word": "the", "nan": float("nan")}


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


def test_default_claims_hold_on_the_default_results(claims: list[Claim]) -> None:
    folder = Path(os.environ.get(DEFAULT_ENV) or ROOT / "book" / "results" / "default")
    paths = sorted(folder.glob("*/results.json"))
    if not paths:
        pytest.skip(f"no default results in {folder}: run `posgeom run --profile default --out book/results/default`")
    for path in paths:
        provenance = json.loads(path.read_text()).get("provenance", {})
        assert provenance.get("profile") == "default" and provenance.get("cap") is None, \
            f"{path} is not an uncapped default-profile run: {provenance.get('profile')!r}, cap {provenance.get('cap')}"
    results = read_results(folder)
    asserted = [c for c in claims if "default" in c.profiles and c.chapter in results]
    missing = sorted({c.chapter for c in claims if "default" in c.profiles} - set(results))
    failures = _failures(results, "default", asserted)
    assert not failures, "claims the prose makes that the default run does not satisfy:\n" + "\n".join(failures)
    assert not missing, f"no default results for chapter(s) {missing} in {folder}"

"""Every claim about a computed number can fail: a negative control per claim.

Chapter: *Reproduction ledger*. A claim that no plausible value of the numbers it rests on could break is
a property of the code, not a finding (issue 11). For every claim with a comparison check, this test takes
the committed results it is judged on (the ``default`` profile), perturbs the values the check reads, one
key at a time and all together, within a plausible range (scaled by one half to two, shifted by ten per cent of their
size, moved to the ends and middle of [0, 1], or to the value of another number of the same check), and
(for a threshold) to the threshold itself, and requires that some perturbation changes the claim's
outcome. A claim that does not hold (a comparison with the paper that differs) is skipped: the control
is about claims that hold. Claims whose checks are only ``asserted`` (the chapter's own ``assert`` statements) are tested by
the chapter's execution; they are counted here so that they stay few.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from posgeom_utils.repro.claims import (
    as_number,
    check_keys,
    evaluate_check,
    load_claims,
    read_results,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "book" / "results" / "default"
REFERENCE = ROOT / "book" / "results" / "reference"
FACTORS = (0.5, 0.8, 0.9, 1.1, 1.25, 2.0)
UNIT = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)


def _leaves(check):
    for mode in ("all", "any"):
        if mode in check:
            return [leaf for sub in check[mode] for leaf in _leaves(sub)]
    return [check]


def candidates(x: float) -> list[float]:
    """Plausible other values of a number: scaled, shifted, and (for numbers in [0, 1]) the unit grid."""
    out = [x * f for f in FACTORS]
    step = 0.1 * max(abs(x), 1e-3)
    out += [x - step, x + step]
    if 0.0 <= x <= 1.0:
        out += list(UNIT)
    return [v for v in out if math.isfinite(v) and v != x]


#: what a word-valued result (e.g. the most frequent first word) could have been instead
OTHER_WORD = "film"


def flips(check, results) -> tuple[bool, str]:
    """Whether some plausible perturbation of the values ``check`` reads changes its outcome."""
    baseline, _ = evaluate_check(check, results)
    for key in check_keys(check):
        if isinstance(results.get(key), str) and as_number(results[key]) is None:
            outcome, message = evaluate_check(check, {**results, key: OTHER_WORD})
            if outcome != baseline:
                return True, f"{key} -> {OTHER_WORD!r}: {message}"
    keys = [k for k in check_keys(check) if as_number(results.get(k)) is not None]
    others = [as_number(results[k]) for k in keys]
    # a threshold (not a band's bounds: a band wide enough to hold every plausible value is no claim)
    others += [leaf["value"] for leaf in _leaves(check)
               if isinstance(leaf.get("value"), (int, float)) and leaf.get("op") != "between"]
    for key in keys:  # one key at a time, to a nearby value or to another key's value
        x = as_number(results[key])
        for value in candidates(x) + [v * f for v in others if v != x for f in (0.9, 1.0, 1.1)]:
            outcome, message = evaluate_check(check, {**results, key: value})
            if outcome != baseline:
                return True, f"{key} -> {value:.4g}: {message}"
    for f in FACTORS:  # all keys together (a ratio of two keys survives this, but not the loop above)
        moved = {**results, **{k: as_number(results[k]) * f for k in keys}}
        outcome, message = evaluate_check(check, moved)
        if outcome != baseline:
            return True, f"all keys x {f}: {message}"
    return False, f"no perturbation of {keys} changes the outcome ({'holds' if baseline else 'fails'})"


CLAIMS = load_claims()
CHECKED = [c for c in CLAIMS if c.check is not None
           and any("asserted" not in leaf for leaf in _leaves(c.check))]
ASSERTED_ONLY = [c.id for c in CLAIMS if c.check is not None
                 and all("asserted" in leaf for leaf in _leaves(c.check))]


@pytest.fixture(scope="module")
def default_results():
    found = read_results(RESULTS)
    if not found:
        pytest.skip("no committed default results")
    return found


@pytest.fixture(scope="module")
def reference_results():
    return read_results(REFERENCE) if any(REFERENCE.glob("*/results.json")) else {}


@pytest.mark.parametrize("claim", CHECKED, ids=[c.id for c in CHECKED])
def test_every_claim_has_a_value_that_breaks_it(claim, default_results, reference_results):
    # a claim the prose makes at the reference scale only is judged on the reference results
    profile = "reference" if "reference" in claim.profiles and "default" not in claim.profiles else "default"
    found = reference_results if profile == "reference" else default_results
    if profile == "reference" and not found:
        pytest.skip("no committed reference results")
    results = found.get(claim.chapter, {})
    missing = [k for k in check_keys(claim.check) if k not in results]
    assert not missing, f"{claim.id}: the {profile} results lack {missing}: rerun the chapter"
    holds, _ = evaluate_check(claim.check, results)
    if not holds:
        pytest.skip(f"{claim.id} does not hold on the {profile} results (a 'differs' verdict): the control "
                    "is for claims that hold")
    changed, how = flips(claim.check, results)
    assert changed, f"{claim.id} cannot fail: {how}. Restate it as a property test of the code."


def test_few_claims_rest_on_assertions_only():
    """Assertions in a chapter are checked when it runs; they are not findings with a control."""
    assert len(ASSERTED_ONLY) <= 5, ASSERTED_ONLY


def test_the_control_can_tell_a_tautology():
    """Negative control of the control: a check that every plausible value passes is reported."""
    tautology = {"any": [{"key": "x", "op": ">=", "value": -1e9}, {"key": "x", "op": "<", "value": -1e9}]}
    assert flips(tautology, {"x": 0.4}) == (False, flips(tautology, {"x": 0.4})[1])
    assert flips({"key": "x", "op": "<", "value": 0.5}, {"x": 0.4})[0]
    assert flips({"key": "a", "op": "<=", "other": "b"}, {"a": 0.2, "b": 0.3})[0]
    # a band wide enough to accept everything plausible is no claim
    assert not flips({"key": "x", "op": "between", "low": -100, "high": 100}, {"x": 3.0})[0]

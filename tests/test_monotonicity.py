"""monotonicity_violation_rate: hand-checked cases, monotone constructions, the random baseline, sampling."""

from __future__ import annotations

import numpy as np
import pytest

from posgeom_utils.encodings import alibi, sinusoidal
from posgeom_utils.geometry import monotonicity_violation_rate, pairwise_distances


def three_points(d02: float) -> np.ndarray:
    return np.array([[0.0, 1.0, d02], [1.0, 0.0, 1.0], [d02, 1.0, 0.0]])


def test_hand_checked_three_positions() -> None:
    """Anchors 0 and 2 each compare their neighbour (offset 1) with the far end (offset 2)."""
    ok = monotonicity_violation_rate(three_points(2.0))
    assert (ok.rate, ok.comparisons, ok.exact) == (0.0, 2, True)
    bad = monotonicity_violation_rate(three_points(0.5))
    assert bad.rate == 1.0
    tie = monotonicity_violation_rate(three_points(1.0))
    assert tie.rate == 0.5  # ties count one half


@pytest.mark.parametrize("kind", ["triplets", "pairs"])
def test_monotone_constructions_score_zero(kind: str) -> None:
    """A geometry that grows with |i - j| never violates: points on a line, or D = f(|i - j|) increasing."""
    assert monotonicity_violation_rate(alibi(40, 0.3), kind=kind).rate == 0.0
    i = np.arange(30)
    D = np.sqrt(np.abs(i[:, None] - i[None, :]))
    assert monotonicity_violation_rate(D, kind=kind, input_kind="distances").rate == 0.0


def test_random_tables_score_one_half() -> None:
    """Random Gaussian tables have no positional order: about 1/2 (fixed seeds, a statistical check)."""
    rates = [monotonicity_violation_rate(np.random.default_rng(s).normal(size=(80, 32))).rate for s in range(5)]
    assert abs(np.mean(rates) - 0.5) < 0.02
    constant = np.ones((10, 10)) - np.eye(10)
    assert monotonicity_violation_rate(constant).rate == 0.5


@pytest.mark.parametrize("kind", ["triplets", "pairs"])
def test_sampled_estimate_covers_exact(kind: str) -> None:
    X = sinusoidal(48, 16)
    exact = monotonicity_violation_rate(X, kind=kind)
    est = monotonicity_violation_rate(X, kind=kind, sample=200_000, seed=3)
    assert not est.exact and est.comparisons == 200_000
    assert est.ci_low - 0.005 <= exact.rate <= est.ci_high + 0.005
    assert est == monotonicity_violation_rate(X, kind=kind, sample=200_000, seed=3)  # seeded


def test_encoding_and_distance_inputs_agree() -> None:
    X = np.random.default_rng(0).normal(size=(25, 8))
    assert monotonicity_violation_rate(X).rate == monotonicity_violation_rate(pairwise_distances(X)).rate


@pytest.mark.parametrize("kwargs, message", [
    ({"sample": 0}, "sample"), ({"sample": -5}, "sample"), ({"kind": "quads"}, "kind"),
    ({"input_kind": "matrix"}, "input_kind"),
])
def test_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        monotonicity_violation_rate(sinusoidal(10, 4), **kwargs)


def test_too_few_positions_and_large_exact_pairs() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        monotonicity_violation_rate(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="sample"):
        monotonicity_violation_rate(sinusoidal(80, 4), kind="pairs")

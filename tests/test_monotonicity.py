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


def brute_force_rate(D: np.ndarray, kind: str) -> tuple[float, int]:
    """The violation rate by explicit loops over every comparison (ties count 1/2), and the number of them."""
    n = D.shape[0]
    score, total = 0.0, 0

    def compare(near: float, far: float) -> float:
        return 1.0 if near > far else 0.5 if near == far else 0.0

    if kind == "triplets":  # anchor i, j and k != i with |i - j| < |i - k|
        for i in range(n):
            for j in range(n):
                for k in range(n):
                    if j != i and k != i and abs(i - j) < abs(i - k):
                        score += compare(D[i, j], D[i, k])
                        total += 1
    else:  # unordered pairs (i, j), (k, l) with |i - j| < |k - l|
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
        for i, j in pairs:
            for k, l in pairs:
                if j - i < l - k:
                    score += compare(D[i, j], D[k, l])
                    total += 1
    return score / total, total


@pytest.mark.parametrize("kind", ["triplets", "pairs"])
def test_exact_rate_against_brute_force(kind: str) -> None:
    """Exact rates against the loops above: on small integer-valued distance matrices (many exact ties),
    and on encodings (their distances computed by scipy)."""
    from scipy.spatial.distance import cdist

    rng = np.random.default_rng(0)
    for n in (3, 4, 5, 7, 9, 9):
        D = np.triu(rng.integers(1, 4, size=(n, n)).astype(float), 1)
        D = D + D.T
        rate, total = brute_force_rate(D, kind)
        result = monotonicity_violation_rate(D, kind=kind, input_kind="distances")
        assert result.exact and result.comparisons == total
        assert result.rate == pytest.approx(rate, abs=1e-12)
        X = rng.normal(size=(n + 3, 4))
        rate, total = brute_force_rate(cdist(X, X), kind)
        result = monotonicity_violation_rate(X, kind=kind)  # an encoding: distances computed inside
        assert result.comparisons == total and result.rate == pytest.approx(rate, abs=1e-12)


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


def test_rate_sees_only_the_order_of_distances() -> None:
    """Proposition 'what the rate does not see': increasing maps of D, and encodings with D's distances,
    give the same rate (Hellinger vs Fisher-Rao; an encoding vs its full-rank MDS; scaled, rotated, shifted)."""
    from posgeom_utils.encodings import mds_encoding
    from posgeom_utils.geometry import fisher_rao_distances, hellinger_distances

    for seed in range(5):
        rng = np.random.default_rng(seed)
        mu = rng.dirichlet(np.full(40, 0.3), size=25)
        D = hellinger_distances(mu)
        base = monotonicity_violation_rate(D).rate
        assert monotonicity_violation_rate(fisher_rao_distances(mu), input_kind="distances").rate == pytest.approx(base)
        assert monotonicity_violation_rate(D ** 3, input_kind="distances").rate == pytest.approx(base)
        P = mds_encoding(D, 30)
        assert monotonicity_violation_rate(P).rate == pytest.approx(base)
        Q = np.linalg.qr(rng.normal(size=(30, 30)))[0]
        assert monotonicity_violation_rate(2.5 * P @ Q + rng.normal(size=30)).rate == pytest.approx(base)


def test_margin_transfer_through_a_linear_map() -> None:
    """Lemma 'margin transfer': a triplet of P = X A^T violated although X is not must have a distance
    ratio d(i, j) / d(i, k) in [1/kappa, 1], kappa the condition number of A."""
    checked = 0
    for seed in range(10):
        rng = np.random.default_rng(seed)
        X = np.cumsum(rng.normal(size=(20, 6)), axis=0)  # a random walk: mostly monotone in |i - j|
        A = rng.normal(size=(12, 6))
        s = np.linalg.svd(A, compute_uv=False)
        kappa = s.max() / s.min()
        DX, DP = pairwise_distances(X), pairwise_distances(X @ A.T)
        n = len(X)
        for i in range(n):
            for j in range(n):
                for k in range(n):
                    if 0 < abs(i - j) < abs(i - k) and DX[i, j] < DX[i, k] and DP[i, j] > DP[i, k]:
                        assert DX[i, j] / DX[i, k] >= 1 / kappa - 1e-12
                        checked += 1
    assert checked > 0  # the statement was exercised, not vacuous


def test_float_noise_is_a_tie() -> None:
    """Distances equal up to rounding count as ties (tie_tol), so D and a re-embedding of D agree."""
    D = three_points(1.0)
    noisy = D + np.array([[0, 0, 1e-15], [0, 0, 0], [1e-15, 0, 0]])
    assert monotonicity_violation_rate(noisy, input_kind="distances").rate == 0.5
    assert monotonicity_violation_rate(noisy, input_kind="distances", tie_tol=0.0).rate != 0.5
    with pytest.raises(ValueError, match="tie_tol"):
        monotonicity_violation_rate(D, tie_tol=-1.0)


def test_sqrt_features_carry_the_hellinger_order() -> None:
    """Lemma 'feature geometry': with phi(mu) = sqrt(mu) the feature distances are sqrt(2) d_H, so the
    premise's order (and violation rate) transfers to the features exactly."""
    from posgeom_utils.geometry import hellinger_distances

    for seed in range(5):
        mu = np.random.default_rng(seed).dirichlet(np.full(50, 0.4), size=20)
        D = hellinger_distances(mu)
        features = np.sqrt(mu)
        assert np.allclose(pairwise_distances(features), np.sqrt(2) * D, atol=1e-12)
        assert monotonicity_violation_rate(features).rate == pytest.approx(monotonicity_violation_rate(D).rate)

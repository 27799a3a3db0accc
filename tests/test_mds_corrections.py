"""Property tests of the corrected derivations of *The optimal encoding: classical MDS on Hellinger geometry*.

- four distributions on three tokens whose Fisher-Rao B has a negative eigenvalue, while the Hellinger
  B of the same points is positive semi-definite (Proposition "What prevents an exact embedding");
- classical MDS is exact from r = rank B on, and below rank B SMACOF can be lower; "SMACOF is not above
  classical MDS" is a property of our code (it keeps its start), tested as such;
- a stationary geometry on a line (Toeplitz D) has reversal-symmetric MDS coordinates (proved) with
  k sign changes and DCT-II-like shape (observed): the horseshoe;
- rank 1 needs the linear geometry c |i - j|, which Hellinger never is;
- the small helpers (``toeplitz_distances``, ``dct_cosine``, ``cosine_correlation``, ``sign_changes``,
  ``leading_mass``, ``stress_by_rank``).
"""

from __future__ import annotations

import numpy as np
import pytest

from posgeom_utils.encodings import alibi
from posgeom_utils.geometry import (
    classical_mds,
    cosine_correlation,
    dct_cosine,
    double_centred_gram,
    fisher_rao_distances,
    hellinger_distances,
    is_circulant,
    leading_mass,
    pairwise_distances,
    sign_changes,
    smacof,
    stress,
    stress_by_rank,
    toeplitz_distances,
)

#: increasing lag profiles f(t), f(0) = 0, with a shape parameter s (those of the chapter's check)
FAMILIES = {
    "power": lambda t, s: t**s,
    "saturating exponential": lambda t, s: 1 - np.exp(-t / s),
    "its square root": lambda t, s: np.sqrt(1 - np.exp(-t / s)),
    "Gaussian-bump Hellinger": lambda t, s: np.sqrt(1 - np.exp(-((t / s) ** 2))),
    "rational": lambda t, s: t / (t + s),
}


def smallest_over_largest(D: np.ndarray) -> float:
    lam = classical_mds(D).eigenvalues
    return float(lam.min() / lam.max())


def random_profile(rng: np.random.Generator, family: str, n: int) -> np.ndarray:
    """A lag profile of the family on n positions, shape drawn as in the chapter."""
    s = rng.uniform(0.1, 1.0) if family == "power" else rng.uniform(n / 10, 2 * n)
    return FAMILIES[family](np.arange(n, dtype=float), s)


# --------------------------------------------------------------------------- curvature (Fisher-Rao)

def test_fisher_rao_counterexample_on_three_tokens():
    """delta_1, (delta_1 + delta_2)/2, delta_2, delta_3: Fisher-Rao distances pi/2, pi/2, pi and pi from
    delta_3, which no Euclidean configuration has (the midpoint would be at sqrt(3)/2 pi from delta_3);
    so B_FR has a negative eigenvalue. The Hellinger B of the same points is PSD. Mixing with the uniform
    distribution (full support) keeps the negative eigenvalue."""
    corners = np.array([[1, 0, 0], [0.5, 0.5, 0], [0, 1, 0], [0, 0, 1]], dtype=float)
    D = fisher_rao_distances(corners)
    half, full = np.pi / 2, np.pi
    expected = np.array([[0, half, full, full], [half, 0, half, full], [full, half, 0, full],
                         [full, full, full, 0]])
    np.testing.assert_allclose(D, expected, atol=1e-12)
    # the Euclidean midpoint of A, B would be at the median length from C
    assert np.sqrt((2 * full**2 + 2 * full**2 - full**2) / 4) == pytest.approx(np.sqrt(3) / 2 * np.pi)
    for points in (corners, 0.9 * corners + 0.1 / 3, 0.5 * corners + 0.5 / 3):
        assert smallest_over_largest(fisher_rao_distances(points)) < -1e-3
        assert smallest_over_largest(hellinger_distances(points)) >= -1e-12
        # the Hellinger chords of the same points are Euclidean: full-rank MDS reproduces them
        DH = hellinger_distances(points)
        assert stress(classical_mds(DH).P, DH) < 1e-20


def test_random_distributions_on_few_tokens_break_fisher_rao_not_hellinger():
    rng = np.random.default_rng(0)
    sets = [rng.dirichlet(np.ones(3), size=5) for _ in range(50)]
    fr = np.array([smallest_over_largest(fisher_rao_distances(m)) for m in sets])
    h = np.array([smallest_over_largest(hellinger_distances(m)) for m in sets])
    assert np.mean(fr < -1e-9) > 0.5
    assert h.min() >= -1e-12


# --------------------------------------------------------------------------- classical MDS vs SMACOF

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_classical_mds_is_exact_from_rank_b_on(seed):
    """A Euclidean D of rank k: classical MDS has stress 0 at r >= k and not below; SMACOF is lower than
    classical MDS at some r < k (it is not a no-op)."""
    rng = np.random.default_rng(seed)
    k, n = 5, 14
    D = pairwise_distances(rng.normal(size=(n, k)) * rng.uniform(0.2, 2.0, size=k))
    assert classical_mds(D).effective_rank == k
    table = stress_by_rank(D, list(range(1, n + 1)))
    assert list(table.index) == list(range(1, n + 1))
    assert list(table["r vs rank B"]) == ["<"] * (k - 1) + ["="] + [">"] * (n - k)
    at_or_above = table.loc[k:]
    assert (at_or_above["classical MDS"] < 1e-20).all() and (at_or_above["SMACOF"] < 1e-12).all()
    below = table.loc[: k - 1]
    assert (below["classical MDS"] > 1e-6).all()
    assert (below["SMACOF"] < below["classical MDS"] - 1e-9).any()


def test_smacof_guard_returns_the_start_when_the_solver_ends_higher(monkeypatch):
    """'SMACOF is not above classical MDS' in the book's tables is a property of ``smacof``: when the
    solver returns a worse point, the wrapper returns its start (classical MDS) unchanged; when it
    returns a better one, the wrapper returns that."""
    import sklearn.manifold

    rng = np.random.default_rng(0)
    D = rng.exponential(size=(10, 10))
    D = np.triu(D, 1) + np.triu(D, 1).T  # not Euclidean: SMACOF improves on classical MDS
    start = classical_mds(D, 2).P
    better = smacof(D, 2)  # the real solver
    worse = start * 3.0 + 1.0
    assert stress(better, D) < stress(start, D) < stress(worse, D)

    monkeypatch.setattr(sklearn.manifold, "smacof", lambda D, **kw: (worse, 0.0))
    np.testing.assert_array_equal(smacof(D, 2), start)
    monkeypatch.setattr(sklearn.manifold, "smacof", lambda D, **kw: (better, 0.0))
    assert smacof(D, 2) is better


# --------------------------------------------------------------------------- a line: the horseshoe

@pytest.mark.parametrize("seed", [0, 1])
def test_toeplitz_gram_commutes_with_reversal(seed):
    """Part 1 of the horseshoe proposition, for any lag profile (not even monotone): R B R = B, and every
    eigenvector of a simple eigenvalue is even or odd."""
    rng = np.random.default_rng(seed)
    n = 23
    f = np.concatenate([[0.0], rng.uniform(0.1, 2.0, size=n - 1)])  # arbitrary, not monotone
    B = double_centred_gram(toeplitz_distances(f))
    R = np.eye(n)[::-1]
    np.testing.assert_allclose(R @ B @ R, B, atol=1e-12)
    lam, U = np.linalg.eigh(B)
    gaps = np.diff(lam)
    for j in range(n):
        neighbours = [gaps[j - 1]] if j > 0 else []
        neighbours += [gaps[j]] if j < n - 1 else []
        if min(neighbours) < 1e-6 * np.abs(lam).max():
            continue  # (nearly) degenerate: any mixture is an eigenvector
        u = U[:, j]
        assert np.allclose(u[::-1], u, atol=1e-8) or np.allclose(u[::-1], -u, atol=1e-8)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_stationary_geometry_on_a_line_is_a_horseshoe(family):
    """Part 2 (observed): the k-th MDS coordinate, k = 1, 2, 3, is odd, even, odd, changes sign k times
    and correlates with the DCT-II cosine of mode k (above 0.8), on seeded random instances."""
    rng = np.random.default_rng(12345)
    for _ in range(25):
        n = int(rng.integers(8, 129))
        P = classical_mds(toeplitz_distances(random_profile(rng, family, n)), r=3).P
        for k, parity in zip((1, 2, 3), (-1, 1, -1)):
            u = P[:, k - 1]
            assert sign_changes(u) == k, (family, n, k)
            np.testing.assert_allclose(u[::-1], parity * u, atol=1e-8 * np.abs(u).max())
            assert cosine_correlation(u, k) > 0.8, (family, n, k)


def test_first_coordinate_of_the_horseshoe_need_not_be_monotone():
    """The ends curl in: for a strongly saturating profile the first coordinate turns back near the ends,
    so 'monotone' would be a false statement (it has one sign change all the same)."""
    n = 60
    f = np.sqrt(1 - np.exp(-((np.arange(n) / 12.0) ** 2)))
    u = classical_mds(toeplitz_distances(f), r=1).P[:, 0]
    u = u * np.sign(u[-1] - u[0])
    assert sign_changes(u) == 1
    assert np.diff(u).min() < -1e-3 * np.ptp(u)


def test_circle_and_line_differ():
    """The same lag profile wrapped on a circle is circulant with exact Fourier coordinates; on a line it
    is Toeplitz and its coordinates are only close to cosines."""
    n = 40
    t = np.arange(n)
    f = 1 - np.exp(-t / 8.0)
    line = toeplitz_distances(f)
    circle = f[np.minimum(t, n - t)][(t[None, :] - t[:, None]) % n]
    assert is_circulant(circle) and not is_circulant(line)
    u = classical_mds(line, r=1).P[:, 0]
    assert 0.9 < cosine_correlation(u, 1) < 1 - 1e-6


# --------------------------------------------------------------------------- rank 1

@pytest.mark.parametrize("n", [3, 8, 33])
def test_rank_one_needs_a_linear_geometry(n):
    """Linear profiles (ALiBi's geometry) give rank 1 and the coordinates +-c (i - mean); profiles that
    are shift-equivariant but not linear do not."""
    rng = np.random.default_rng(n)
    t = np.arange(n, dtype=float)
    c = rng.uniform(0.01, 1.0)
    result = classical_mds(toeplitz_distances(c * t))
    assert result.effective_rank == 1
    p = result.P[:, 0]
    np.testing.assert_allclose(np.abs(p), np.abs(c * (t - t.mean())), atol=1e-9)
    assert classical_mds(pairwise_distances(alibi(n, c))).effective_rank == 1
    bent = c * t.copy()
    bent[2:] -= c * 0.05  # one kink: f(2) < 2 f(1), still increasing
    assert classical_mds(toeplitz_distances(bent)).effective_rank > 1
    for family in FAMILIES:
        f = random_profile(rng, family, n)
        if np.allclose(f, f[1] * t, rtol=1e-6):
            continue  # the power family with s ~ 1 is linear
        B = double_centred_gram(toeplitz_distances(f))
        assert np.sum(np.abs(np.linalg.eigvalsh(B)) > 1e-9 * np.abs(B).max()) > 1, family


@pytest.mark.parametrize("seed", range(5))
def test_hellinger_is_never_additive_on_three_distinct_distributions(seed):
    """d_H(mu_0, mu_2) < d_H(mu_0, mu_1) + d_H(mu_1, mu_2) strictly: a Hellinger lag profile is never
    exactly linear, so a Hellinger geometry is never exactly rank 1 (for n >= 3 distinct positions)."""
    rng = np.random.default_rng(seed)
    for _ in range(50):
        V = int(rng.integers(2, 20))
        mu = rng.dirichlet(np.full(V, rng.choice([0.1, 1.0, 10.0])), size=3)
        D = hellinger_distances(mu)
        if min(D[0, 1], D[1, 2]) < 1e-6:
            continue
        assert D[0, 2] < D[0, 1] + D[1, 2] - 1e-12
    # Gaussian bumps moving along a token line: stationary (Toeplitz), and not rank 1
    centres, tokens = 100 + 4 * np.arange(30), np.arange(300)
    mu = np.exp(-0.5 * ((tokens[None, :] - centres[:, None]) / 12.0) ** 2)
    mu /= mu.sum(axis=1, keepdims=True)
    D = hellinger_distances(mu)
    np.testing.assert_allclose(D, toeplitz_distances(D[0]), atol=1e-12)
    result = classical_mds(D)
    assert result.effective_rank > 1
    assert leading_mass(result.eigenvalues, 1) < 0.9


# --------------------------------------------------------------------------- helpers

@pytest.mark.parametrize("n", [1, 2, 7, 64])
def test_dct_cosines(n):
    for k in range(n):
        c = dct_cosine(n, k)
        assert c.shape == (n,) and np.linalg.norm(c) == pytest.approx(1.0)
        if k >= 1:
            assert abs(c.sum()) < 1e-10 and sign_changes(c) == k
            assert cosine_correlation(3.0 * c - 2.0, k) == pytest.approx(1.0)
    if n > 2:
        assert cosine_correlation(dct_cosine(n, 2), 1) == pytest.approx(0.0, abs=1e-10)
    for bad in ((0, 0), (n, n), (n, -1), (n, 1.5), (True, 0)):
        with pytest.raises(ValueError):
            dct_cosine(*bad)


def test_helpers_edge_cases_and_bad_input():
    assert [sign_changes(np.array(v)) for v in ([1.0, 2.0], [1.0, -1.0, 1.0, -1.0], [1.0, 0.0, -1.0],
                                                [1.0, 1e-17, -1.0, 1e-17, 1.0], [0.0, 0.0])] == [0, 3, 1, 2, 0]
    lam = np.array([-0.5, 0.0, 1.0, 3.0, 4.0])
    assert [leading_mass(lam, k) for k in (1, 2, 3, 10)] == pytest.approx([0.5, 7 / 8, 1.0, 1.0])
    result = classical_mds(hellinger_distances(np.random.default_rng(0).dirichlet(np.ones(6), size=12)))
    masses = [leading_mass(result.eigenvalues, k) for k in range(1, 13)]
    assert np.all(np.diff(masses) >= -1e-12) and masses[result.effective_rank - 1] == pytest.approx(1.0)
    np.testing.assert_array_equal(toeplitz_distances(np.array([0.0, 1.0, 3.0])), [[0, 1, 3], [1, 0, 1], [3, 1, 0]])
    bad_calls = [lambda: sign_changes(np.ones((2, 2))), lambda: sign_changes(np.array([1.0, np.nan])),
                 lambda: cosine_correlation(np.arange(5.0), 0), lambda: leading_mass(lam, 0),
                 lambda: leading_mass(lam, 1.0), lambda: leading_mass(lam, True)]
    bad_calls += [lambda f=f: toeplitz_distances(f) for f in (np.array([1.0, 2.0]), np.array([0.0, -1.0]),
                                                              np.array([0.0, np.inf]), np.zeros((2, 2)), np.array([]))]
    for call in bad_calls:
        with pytest.raises(ValueError):
            call()
    with pytest.raises(ValueError, match="constant"):
        cosine_correlation(np.ones(5), 1)
    with pytest.raises(ValueError, match="no positive"):
        leading_mass(np.zeros(3), 1)

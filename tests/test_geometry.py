"""posgeom_utils.geometry: the statements of *The optimal encoding: classical MDS on Hellinger geometry*
(the book links to these function names), the Hellinger and Fisher-Rao definitions, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import cdist

import scipy.sparse as sp

from posgeom_utils import checks
from posgeom_utils.corpus import synthetic_mu
from posgeom_utils.geometry import (
    best_scale,
    bhattacharyya,
    classical_mds,
    double_centred_gram,
    effective_rank,
    fisher_rao_distances,
    hellinger_distances,
    is_circulant,
    linear_cka,
    pairwise_distances,
    smacof,
    stress,
    stress_of_distances,
)

PROPERTY = settings(max_examples=30, deadline=None)

#: d_H = sqrt(1 - BC) cannot resolve distances below ~sqrt(machine eps) = 1.5e-8 (1 - BC cancels), so a
#: true distance of 1e-9 between two almost identical rows comes out as 0: the triangle inequality holds
#: to that precision, not to 1e-9 (hypothesis finds such rows: Dirichlet(0.05) over V = 2 tokens)
TRIANGLE_SLACK = 1e-9 + 2 * np.sqrt(np.finfo(np.float64).eps)


# --------------------------------------------------------------------------- helpers

def dirichlet_mu(seed: int, n: int, V: int, alpha: float = 1.0, sparsity: float = 0.0) -> np.ndarray:
    """n random probability rows over V tokens; ``sparsity`` zeroes that fraction of the entries."""
    rng = np.random.default_rng(seed)
    mu = rng.dirichlet(np.full(V, alpha), size=n)
    if sparsity > 0:
        mu[rng.random(mu.shape) < sparsity] = 0.0
        mu[np.arange(n), rng.integers(0, V, n)] += 1e-3  # every row keeps some mass
        mu /= mu.sum(axis=1, keepdims=True)
    return mu


@st.composite
def random_mu(draw, min_n: int = 2, max_n: int = 12):
    """Random (n, V) probability rows: Dirichlet with a drawn concentration, sometimes with exact zeros."""
    n = draw(st.integers(min_n, max_n))
    V = draw(st.integers(2, 40))
    alpha = draw(st.sampled_from([0.05, 0.3, 1.0, 5.0]))
    sparsity = draw(st.sampled_from([0.0, 0.0, 0.5, 0.8]))
    seed = draw(st.integers(0, 2**32 - 1))
    return dirichlet_mu(seed, n, V, alpha, sparsity)


def random_orthogonal(rng: np.random.Generator, d: int) -> np.ndarray:
    Q, R = np.linalg.qr(rng.normal(size=(d, d)))
    return Q * np.sign(np.diag(R))  # Haar-distributed


def random_dissimilarity(seed: int, n: int) -> np.ndarray:
    """A symmetric non-negative matrix with zero diagonal and nothing else (not metric, not Euclidean)."""
    rng = np.random.default_rng(seed)
    D = rng.exponential(size=(n, n))
    D = np.triu(D, 1)
    return D + D.T


def wheel_graph_distances() -> np.ndarray:
    """Shortest paths on a 4-cycle plus a centre joined to every cycle vertex (not Euclidean-embeddable)."""
    D = np.array([[0, 1, 2, 1], [1, 0, 1, 2], [2, 1, 0, 1], [1, 2, 1, 0]], dtype=float)
    return np.block([[D, np.ones((4, 1))], [np.ones((1, 4)), np.zeros((1, 1))]])


def fourier_residual(v: np.ndarray, k: int) -> float:
    """Relative distance of v (length n) from span{cos(2 pi k i / n), sin(2 pi k i / n)}."""
    n = v.shape[0]
    angle = 2 * np.pi * k * np.arange(n) / n
    basis = np.column_stack([np.cos(angle), np.sin(angle)])
    Q, R = np.linalg.qr(basis)
    Q = Q[:, np.abs(np.diag(R)) > 1e-8]  # k = 0 and k = n/2 have no sine
    return float(np.linalg.norm(v - Q @ (Q.T @ v)) / np.linalg.norm(v))


def check_fourier_columns(columns: np.ndarray, column_eigenvalues: np.ndarray, B: np.ndarray,
                          rel_gap: float = 1e-6, tol: float = 1e-8) -> int:
    """Every column whose eigenvalue belongs to a single, well-separated Fourier mode k lies in mode k.

    ``B`` is the circulant Gram matrix: its mode-k eigenvalue is the DFT of its first row at k. Returns
    the number of columns checked.
    """
    n = B.shape[0]
    dft = np.fft.fft(B[0])
    assert np.abs(dft.imag).max() <= 1e-10 * max(1.0, np.abs(dft).max())
    mode_eigenvalues = dft.real[: n // 2 + 1]  # mode k and mode n - k share an eigenvalue
    scale = np.abs(mode_eigenvalues).max()
    checked = 0
    for col, lam in zip(columns.T, column_eigenvalues):
        if np.linalg.norm(col) == 0:
            continue
        k = int(np.argmin(np.abs(mode_eigenvalues - lam)))
        others = np.delete(mode_eigenvalues, k)
        gap = np.abs(others - mode_eigenvalues[k]).min() if others.size else np.inf
        if gap <= rel_gap * scale or abs(lam - mode_eigenvalues[k]) > 1e-9 * scale:
            continue  # (accidentally) degenerate with another mode: any mixture is an eigenvector
        assert fourier_residual(col, k) < tol, f"column with eigenvalue {lam:.6g} is not Fourier mode {k}"
        checked += 1
    return checked


# --------------------------------------------------------------------------- Hellinger geometry

@PROPERTY
@given(random_mu(min_n=1))
def test_hellinger_is_a_metric_in_unit_interval(mu):
    """d_H is a metric with values in [0, 1]: symmetric, zero diagonal, triangle inequality."""
    D = hellinger_distances(mu)
    n = mu.shape[0]
    assert D.shape == (n, n)
    assert np.array_equal(D, D.T)
    assert np.all(np.diag(D) == 0.0)
    assert np.all((D >= 0.0) & (D <= 1.0))
    for k in range(n):  # d(i, j) <= d(i, k) + d(k, j) for every k at once
        assert np.all(D <= D[:, [k]] + D[[k], :] + TRIANGLE_SLACK)
    # away from that cancellation the slack is 1e-9: check the rows whose distances are all resolved
    off = ~np.eye(n, dtype=bool)
    if n > 1 and D[off].min() > 1e-4:
        for k in range(n):
            assert np.all(D <= D[:, [k]] + D[[k], :] + 1e-9)


@PROPERTY
@given(random_mu())
def test_hellinger_gram_is_psd(mu):
    """Hellinger is Euclidean (d_H = ||sqrt p - sqrt q|| / sqrt 2), so B = -1/2 J D_H^2 J is PSD."""
    D = hellinger_distances(mu)
    n = D.shape[0]
    J = np.eye(n) - np.ones((n, n)) / n
    B = -0.5 * J @ D**2 @ J
    lam = np.linalg.eigvalsh(B)
    assert lam.max() >= 0
    assert lam.min() >= -1e-10 * max(lam.max(), 1e-300)


@PROPERTY
@given(random_mu())
def test_full_rank_mds_has_zero_stress(mu):
    """Classical MDS at the effective rank (or at r = n) reproduces a Euclidean D exactly: stress 0."""
    D = hellinger_distances(mu)
    n = D.shape[0]
    if not D.any():
        return  # every row identical: stress is undefined (covered by the bad-input tests)
    result = classical_mds(D)
    assert result.P.shape == (n, max(result.effective_rank, 1))
    assert stress(result.P, D) < 1e-10
    assert stress(result.P, D, "fitted") < 1e-10
    full = classical_mds(D, r=n)
    assert full.P.shape == (n, n)
    assert stress(full.P, D) < 1e-10
    # squared distances: exact at r = n; at the effective rank off by the dropped eigenvalues (< tol * top)
    np.testing.assert_allclose(cdist(full.P, full.P) ** 2, D**2, rtol=0, atol=1e-12)
    top = result.eigenvalues[0]
    np.testing.assert_allclose(cdist(result.P, result.P) ** 2, D**2, rtol=0, atol=4 * n * result.tol * top + 1e-12)


# --------------------------------------------------------------------------- stress

@PROPERTY
@given(random_mu(min_n=3), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_stress_invariant_under_rotation_and_translation(mu, d, seed):
    """stress(P Q + t, D) = stress(P, D) for every orthogonal Q and translation t (raw and fitted)."""
    rng = np.random.default_rng(seed)
    D = hellinger_distances(mu)
    if not D.any():
        return
    n = D.shape[0]
    P = rng.normal(scale=rng.choice([0.01, 0.3, 3.0]), size=(n, d))
    Q = random_orthogonal(rng, d)
    t = rng.normal(scale=10.0, size=(1, d))
    for scale in ("raw", "fitted"):
        before, after = stress(P, D, scale), stress(P @ Q + t, D, scale)
        assert after == pytest.approx(before, rel=1e-10, abs=1e-14)


@PROPERTY
@given(random_mu(min_n=3), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_fitted_stress_at_most_raw(mu, d, seed):
    """Fitting the single scale s* can only lower the stress, and makes it scale-invariant (raw is not)."""
    rng = np.random.default_rng(seed)
    D = hellinger_distances(mu)
    if not D.any():
        return
    n = D.shape[0]
    P = rng.normal(size=(n, d))
    if not pairwise_distances(P).any():
        return
    factors = [1e-3, 0.1, 0.5, 1.0, 2.0, 30.0]
    fitted = stress(P, D, "fitted")
    raw = [stress(c * P, D, "raw") for c in factors]
    for c, raw_c in zip(factors, raw):
        fitted_c = stress(c * P, D, "fitted")
        assert fitted_c <= raw_c + 1e-12
        assert fitted_c == pytest.approx(fitted, rel=1e-9, abs=1e-14)  # scale-invariant
        assert fitted <= raw_c + 1e-12  # fitted stress is the minimum over all scales
    # raw stress is a quadratic a c^2 - 2 b c + 1 in c with a > 0: it takes each value at most twice
    assert max(raw) - min(raw) > 1e-6


def test_stress_and_best_scale_against_brute_force():
    """Raw stress by a double loop over i < j; the fitted stress and the best scale s* by minimising
    sum_{i<j} (s E_ij - D_ij)^2 numerically (scipy), not by the closed form the package uses."""
    from scipy.optimize import minimize_scalar

    for seed, spread in enumerate((0.05, 0.3, 3.0, 1.0)):
        rng = np.random.default_rng(seed)
        n = 7
        D = hellinger_distances(dirichlet_mu(seed, n, 10))
        P = rng.normal(scale=spread, size=(n, 1 + seed % 3))
        E = cdist(P, P)
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
        denominator = sum(D[i, j] ** 2 for i, j in pairs)

        def stress_at(s: float) -> float:
            return sum((s * E[i, j] - D[i, j]) ** 2 for i, j in pairs) / denominator

        optimum = minimize_scalar(stress_at, bracket=(0.0, 1.0), tol=1e-12)
        assert stress(P, D) == pytest.approx(stress_at(1.0), rel=1e-10)
        assert stress_of_distances(E, D) == pytest.approx(stress_at(1.0), rel=1e-10)
        assert best_scale(E, D) == pytest.approx(optimum.x, rel=1e-6)
        assert stress(P, D, "fitted") == pytest.approx(optimum.fun, rel=1e-8, abs=1e-14)
        assert stress_of_distances(E, D, "fitted") == pytest.approx(optimum.fun, rel=1e-8, abs=1e-14)


def test_pairwise_distances_and_gram_against_references():
    """pairwise_distances equals scipy's; B = -1/2 J D^2 J of points' distances is their centred Gram matrix
    X_c X_c^T (hand-derived), also far from the origin where a naive Gram formula loses digits."""
    rng = np.random.default_rng(0)
    for offset in (0.0, 1e3):
        P = rng.normal(size=(15, 4)) + offset
        E = pairwise_distances(P)
        np.testing.assert_allclose(E, cdist(P, P), rtol=0, atol=1e-9 * max(1.0, offset))
        assert np.all(np.diag(E) == 0.0) and np.array_equal(E, E.T)
        Xc = P - P.mean(axis=0)
        np.testing.assert_allclose(double_centred_gram(cdist(P, P)), Xc @ Xc.T, rtol=0, atol=1e-9)


# --------------------------------------------------------------------------- SMACOF vs classical MDS

@PROPERTY
@given(random_mu(min_n=4, max_n=10), st.integers(0, 2**32 - 1))
def test_smacof_never_worse_than_classical(mu, seed):
    """SMACOF started from classical MDS never ends with a larger stress, Euclidean D or not."""
    n = mu.shape[0]
    matrices = {
        "hellinger": hellinger_distances(mu),
        "fisher-rao": fisher_rao_distances(mu),  # a metric, but not Euclidean
        "arbitrary": random_dissimilarity(seed, n),  # symmetric, zero diagonal, nothing else
    }
    for name, D in matrices.items():
        if not D.any():
            continue
        for r in (1, 2, 3):
            P = smacof(D, r)
            assert P.shape == (n, r)
            classical = stress(classical_mds(D, r).P, D)
            assert stress(P, D) <= classical + 1e-12, (name, r)


# --------------------------------------------------------------------------- circulant geometries

@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n", [12, 17])
def test_mds_of_circulant_matrix_has_fourier_eigenvectors(seed, n):
    """A shift-invariant D (D_ij = f((i - j) mod n)) has a circulant B: its eigenvalues are the DFT of
    B's first row and its eigenvectors (hence MDS coordinates) are Fourier modes cos/sin(2 pi k i / n).
    """
    rng = np.random.default_rng(seed)
    offsets = (np.arange(n)[None, :] - np.arange(n)[:, None]) % n
    m = np.arange(n)

    # (a) chord distances of a curve with a few random harmonics: Euclidean, low rank
    harmonics = rng.choice(np.arange(1, n // 2), size=3, replace=False)
    amplitude = rng.uniform(0.3, 2.0, size=3)
    phase = rng.uniform(0, 2 * np.pi, size=3)
    curve = np.hstack([a * np.column_stack([np.cos(2 * np.pi * h * m / n + p), np.sin(2 * np.pi * h * m / n + p)])
                       for h, a, p in zip(harmonics, amplitude, phase)])
    euclidean = pairwise_distances(curve)
    # (b) f(k) = |sin(pi k / n)| plus random cosine bumps: generic, full rank, not Euclidean
    f = np.abs(np.sin(np.pi * m / n)) + sum(rng.uniform(0, 0.5) * (1 - np.cos(2 * np.pi * h * m / n))
                                             for h in range(1, 4))
    generic = f[offsets]

    for D, expected_rank in ((euclidean, 6), (generic, None)):
        D = (D + D.T) / 2
        np.fill_diagonal(D, 0.0)
        assert is_circulant(D)
        B = double_centred_gram(D)
        assert is_circulant(B)
        lam, U = np.linalg.eigh(B)
        dft = np.fft.fft(B[0])
        np.testing.assert_allclose(np.sort(lam), np.sort(dft.real), rtol=0, atol=1e-10 * np.abs(lam).max())
        checked = check_fourier_columns(U, lam, B)
        result = classical_mds(D)
        if expected_rank is not None:
            assert result.effective_rank == expected_rank
            assert checked >= expected_rank
        else:
            assert checked >= n // 2  # the generic spectrum separates most modes
        assert check_fourier_columns(result.P, result.eigenvalues[: result.r], B) >= min(result.r, 4)

    # the 'shift' synthetic corpus: von Mises bumps moving round a token circle (n divides V)
    D = hellinger_distances(synthetic_mu("shift", n=16, V=64))
    assert is_circulant(D)
    B = double_centred_gram(D)
    result = classical_mds(D)
    assert result.effective_rank >= 4
    assert check_fourier_columns(result.P, result.eigenvalues[: result.r], B) >= 6
    np.testing.assert_allclose(np.sort(result.eigenvalues), np.sort(np.fft.fft(B[0]).real), rtol=0,
                               atol=1e-10 * result.eigenvalues.max())


# --------------------------------------------------------------------------- agreement, ranks, Fisher-Rao

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_classical_mds_matches_sklearn(seed):
    """classical_mds agrees with scikit-learn's ClassicalMDS (distances of the r-dimensional embedding)."""
    from sklearn.manifold import ClassicalMDS

    D = hellinger_distances(dirichlet_mu(seed, 14, 30, alpha=0.5))
    for r in (1, 2, 3, 5, 8):
        ours = classical_mds(D, r).P
        theirs = ClassicalMDS(n_components=r, metric="precomputed").fit_transform(D)
        assert theirs.shape == ours.shape
        np.testing.assert_allclose(pairwise_distances(ours), pairwise_distances(theirs), rtol=0, atol=1e-8)
        # the coordinates themselves agree up to the sign of each column
        np.testing.assert_allclose(np.abs(ours), np.abs(theirs), rtol=0, atol=1e-8)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_effective_rank_and_negative_eigenvalues(k):
    """A D realised in R^k has effective rank k and no negative eigenvalue; a non-Euclidean D has one."""
    rng = np.random.default_rng(k)
    P0 = rng.normal(size=(20, k))
    result = classical_mds(pairwise_distances(P0))
    assert result.effective_rank == k
    assert result.P.shape == (20, k)
    assert result.negative_mass < 1e-12
    assert np.all(np.diff(result.eigenvalues) <= 0)  # decreasing

    wheel = classical_mds(wheel_graph_distances())
    assert wheel.eigenvalues.min() < -1e-3
    assert wheel.negative_mass > 1e-3

    D = 1.0 + rng.random((30, 30))  # entries in [1, 2]: a metric, but not Euclidean
    D = np.triu(D, 1)
    D = D + D.T
    random_metric = classical_mds(D)
    assert random_metric.eigenvalues.min() < 0
    assert random_metric.negative_mass > 1e-3
    assert effective_rank(np.zeros(5)) == 0
    assert effective_rank(np.array([3.0, 1.0, 2e-9, 1e-12, -2.0])) == 2  # hand count: above 1e-9 * 3


def test_fisher_rao_vs_hellinger():
    """FR = 2 arccos(1 - d_H^2) = 4 arcsin(d_H / sqrt 2) >= 2 sqrt 2 d_H (arc vs chord), equal as d_H -> 0."""
    for seed in range(4):
        mu = dirichlet_mu(seed, 10, 25, alpha=0.3, sparsity=0.3 * (seed % 2))
        H, F = hellinger_distances(mu), fisher_rao_distances(mu)
        # by hand: the chord ||sqrt p - sqrt q|| (scipy) and the arc angle arccos(sum sqrt(p q))
        root = np.sqrt(mu)
        chord = cdist(root, root)
        angle = np.arccos(np.clip([[np.sum(np.sqrt(p * q)) for q in mu] for p in mu], -1.0, 1.0))
        np.fill_diagonal(angle, 0.0)
        np.testing.assert_allclose(H, chord / np.sqrt(2), rtol=0, atol=1e-10)
        np.testing.assert_allclose(F, 2 * angle, rtol=0, atol=1e-8)
        np.testing.assert_allclose(F, 4 * np.arcsin(chord / 2), rtol=0, atol=1e-8)  # arc from chord
        assert np.all(F >= 2 * np.sqrt(2) * H - 1e-12)
    # the ratio FR / (2 sqrt 2 d_H) = theta / (2 sin(theta / 2)) decreases to 1 like 1 + d_H^2 / 3
    p, q = dirichlet_mu(7, 2, 25)
    ratios, hellinger = [], []
    for t in (0.5, 1e-1, 1e-2, 1e-3):
        mu = np.stack([p, (1 - t) * p + t * q])
        h, f = hellinger_distances(mu)[0, 1], fisher_rao_distances(mu)[0, 1]
        ratios.append(f / (2 * np.sqrt(2) * h))
        hellinger.append(h)
    ratios, hellinger = np.array(ratios), np.array(hellinger)
    assert np.all(np.diff(hellinger) < 0)
    assert np.all(ratios >= 1 - 1e-9)
    assert np.all(np.diff(ratios) < 1e-9)
    assert np.all(ratios - 1 <= hellinger**2 / 3 * 1.01 + 1e-9)
    assert ratios[-1] - 1 < 1e-6


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_lowrank_planted_synthetic_corpus(k):
    """The 'lowrank' corpus mixes k disjoint-support distributions, so rank(B) <= k for its Hellinger D."""
    D = hellinger_distances(synthetic_mu("lowrank", n=40, V=200, rank=k))
    result = classical_mds(D, tol=1e-9)
    assert result.effective_rank <= k, (
        f"rank={k} corpus: effective rank {result.effective_rank}, max D = {D.max():.3g}, "
        f"top eigenvalues {result.eigenvalues[:k + 2]}")
    # the negative control: a drifting corpus of the same size is not low rank (the test can fail)
    assert classical_mds(hellinger_distances(synthetic_mu("drift", n=40, V=200)), tol=1e-9).effective_rank > 5


# --------------------------------------------------------------------------- definitions


def by_definition(mu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """BC_ij = sum_v sqrt(p_v q_v) and d_H = ||sqrt p - sqrt q|| / sqrt 2, pair by pair (the reference)."""
    n = mu.shape[0]
    bc = np.array([[np.sum(np.sqrt(mu[i] * mu[j])) for j in range(n)] for i in range(n)])
    dh = np.array([[np.linalg.norm(np.sqrt(mu[i]) - np.sqrt(mu[j])) / np.sqrt(2) for j in range(n)]
                   for i in range(n)])
    return bc, dh


@PROPERTY
@given(random_mu(min_n=1, max_n=7))
def test_bhattacharyya_and_hellinger_against_definitions(mu):
    """BC and d_H against their definitions, and d_H^2 = 1 - BC between the two independent references
    (d_H itself only to ~1e-8 where two rows almost coincide: 1 - BC cancels)."""
    bc_ref, dh_ref = by_definition(mu)
    np.testing.assert_allclose(dh_ref**2, 1 - bc_ref, rtol=0, atol=1e-12)
    bc = bhattacharyya(mu)
    assert np.all((bc >= 0) & (bc <= 1)) and np.all(np.diag(bc) == 1.0)
    np.testing.assert_allclose(bc, bc_ref, rtol=0, atol=1e-12)
    np.testing.assert_allclose(hellinger_distances(mu) ** 2, dh_ref**2, rtol=0, atol=1e-12)
    np.testing.assert_allclose(hellinger_distances(mu), dh_ref, rtol=0, atol=1e-7)


def test_edge_cases_identical_and_disjoint_rows():
    p = np.array([0.5, 0.25, 0.125, 0.125])  # dyadic: sqrt(p) . sqrt(p) is exactly 1
    assert np.all(hellinger_distances(np.stack([p, p, p])) == 0.0)
    mu = np.array([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.3, 0.7], [0.0, 0.0, 0.0, 1.0]])
    D = hellinger_distances(mu)
    assert D[0, 1] == 1.0 and D[0, 2] == 1.0
    np.testing.assert_allclose(D[1, 2], np.sqrt(1 - np.sqrt(0.7)), atol=1e-12)
    np.testing.assert_allclose(fisher_rao_distances(mu)[0, 1:], [np.pi, np.pi], atol=1e-15)


@pytest.mark.parametrize("fmt", [sp.csr_array, sp.csr_matrix, sp.coo_array])
def test_sparse_equals_dense(fmt):
    mu = dirichlet_mu(4, 8, 40, alpha=0.2, sparsity=0.6)
    sparse = fmt(mu)
    np.testing.assert_allclose(hellinger_distances(sparse), hellinger_distances(mu), rtol=0, atol=1e-12)
    np.testing.assert_allclose(fisher_rao_distances(sparse), fisher_rao_distances(mu), rtol=0, atol=1e-10)
    np.testing.assert_array_equal(sparse.toarray(), mu)  # the input was not modified in place


def test_linear_cka_invariances_and_range():
    """Linear CKA is 1 under orthogonal maps, translation and scaling, symmetric, in [0, 1], and low for
    independent random representations."""
    for seed in range(5):
        rng = np.random.default_rng(seed)
        X = rng.normal(size=(30, 12))
        Q = np.linalg.qr(rng.normal(size=(12, 12)))[0]
        assert linear_cka(X, 3.0 * X @ Q + rng.normal(size=12)) == pytest.approx(1.0)
        Y = rng.normal(size=(30, 20))
        value = linear_cka(X, Y)
        assert value == pytest.approx(linear_cka(Y, X))
        assert 0.0 <= value <= 1.0 and value < 0.6
        Xc, Yc = X - X.mean(0), Y - Y.mean(0)  # the definition, written in feature space
        expected = np.linalg.norm(Yc.T @ Xc) ** 2 / (np.linalg.norm(Xc.T @ Xc) * np.linalg.norm(Yc.T @ Yc))
        assert value == pytest.approx(expected)


# --------------------------------------------------------------------------- bad input

NAN = float("nan")


@pytest.mark.parametrize(("mu", "match"), [
    (np.array([0.5, 0.5]), "2-D"),
    (np.zeros((0, 3)), "2-D"),
    (np.array([[0.5, np.nan], [0.5, 0.5]]), "NaN or inf"),
    (np.array([[1.5, -0.5], [0.5, 0.5]]), "negative"),
    (np.array([[0.5, 0.4], [0.5, 0.5]]), "row 0 sums to"),
    (sp.csr_array(np.array([[0.5, 0.5], [0.5, 0.6]])), "row 1 sums to"),
])
def test_bad_distributions(mu, match):
    for func in (hellinger_distances, fisher_rao_distances, bhattacharyya):
        with pytest.raises(ValueError, match=f"^mu .*{match}"):
            func(mu)
    with pytest.raises(ValueError, match="^weights "):
        checks.probability_rows(mu, name="weights")


BAD_D = [
    (np.zeros((3, 4)), "D must be a square"),
    (np.zeros(3), "D must be a square"),
    (np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 1.0], [2.5, 1.0, 0.0]]), "D is not symmetric"),
    (np.array([[0.0, 1.0, NAN], [1.0, 0.0, 1.0], [NAN, 1.0, 0.0]]), "D contains NaN or inf"),
    (np.array([[0.0, 1.0, np.inf], [1.0, 0.0, 1.0], [np.inf, 1.0, 0.0]]), "D contains NaN or inf"),
    (np.array([[0.0, -1.0, 2.0], [-1.0, 0.0, 1.0], [2.0, 1.0, 0.0]]), "D has negative entries"),
    (np.array([[0.0, 1.0, 2.0], [1.0, 0.1, 1.0], [2.0, 1.0, 0.0]]), "D has a non-zero diagonal"),
]


@pytest.mark.parametrize(("D", "match"), BAD_D)
def test_every_entry_point_rejects_a_bad_distance_matrix(D, match):
    for call in (double_centred_gram, classical_mds, lambda D: smacof(D, 1),
                 lambda D: stress(np.zeros((np.shape(D)[0], 2)), D)):
        with pytest.raises(ValueError, match=match):
            call(D)


@pytest.mark.parametrize("r", [0, -1, 6, 2.0, np.float64(2.0), "2", True, [2]])
def test_rank_must_be_an_integer_from_one_to_n(r):
    D = hellinger_distances(dirichlet_mu(0, 5, 8))
    assert classical_mds(D, np.int64(5)).P.shape == (5, 5)  # numpy integers, and r = n, are fine
    for call in (lambda: classical_mds(D, r), lambda: smacof(D, r),
                 lambda: smacof(D, r, init=np.zeros((5, 2)))):
        with pytest.raises(ValueError, match=r"r must be an integer in \[1, 5\]"):
            call()


def test_stress_and_smacof_bad_arguments():
    D = hellinger_distances(dirichlet_mu(0, 5, 8))
    P = np.random.default_rng(0).normal(size=(5, 2))
    for bad_P in (np.zeros((4, 2)), np.zeros(5), np.zeros((5, 2, 1))):
        with pytest.raises(ValueError, match=r"P must be \(n, d\), one row per position of D \(5\), got P="):
            stress(bad_P, D)
    for bad in ("bogus", "Fitted", None):
        with pytest.raises(ValueError, match="scale must be one of 'raw', 'fitted'"):
            stress(P, D, bad)
        with pytest.raises(ValueError, match="scale must be one of 'raw', 'fitted'"):
            stress_of_distances(pairwise_distances(P), D, bad)
    for init in (np.zeros((5, 3)), np.zeros((4, 2))):
        with pytest.raises(ValueError, match=r"init must have shape \(5, 2\)"):
            smacof(D, 2, init=init)
    for scale in ("raw", "fitted"):
        with pytest.raises(ValueError, match="D is all zeros"):
            stress(P[:4], np.zeros((4, 4)), scale)
    bad = D.copy()
    bad[0, 1] = bad[1, 0] = NAN
    with pytest.raises(ValueError, match="E contains NaN or inf"):
        stress_of_distances(bad, D)
    with pytest.raises(ValueError, match="E and D must have the same shape"):
        stress_of_distances(D[:4, :4], D)
    with pytest.raises(ValueError, match="E must be a square"):
        stress_of_distances(D[:, :4], D)


@pytest.mark.parametrize("tol", [-1, NAN, 1.0, np.inf, True])
def test_eigenvalue_threshold_must_be_in_the_unit_interval(tol):
    with pytest.raises(ValueError, match=r"tol must be a finite number >= 0 and < 1, got tol="):
        effective_rank(np.array([2.0, 1.0]), tol=tol)
    with pytest.raises(ValueError, match=r"tol must be a finite number"):
        classical_mds(hellinger_distances(dirichlet_mu(0, 5, 8)), tol=tol)
    with pytest.raises(ValueError, match="eigenvalues contains NaN or inf"):
        effective_rank(np.array([NAN, 1.0]))


def test_linear_cka_never_returns_nan():
    X = np.random.default_rng(1).normal(size=(5, 4))
    bad = X.copy()
    bad[2, 1] = NAN
    with pytest.raises(ValueError, match="X contains NaN or inf"):
        linear_cka(bad, X)
    with pytest.raises(ValueError, match="Y contains NaN or inf"):
        linear_cka(X, np.where(X > 0, np.inf, X))
    with pytest.raises(ValueError, match="same n"):
        linear_cka(X, X[:4])
    for constant in (np.zeros((5, 3)), np.full((5, 3), 0.1), np.tile([[1e8, -3.7, 0.3]], (5, 1))):
        for args in ((X, constant), (constant, X)):
            with pytest.raises(ValueError, match="zero variance"):
                linear_cka(*args)
    with pytest.raises(ValueError, match=r"CKA is not finite.*rescale"):
        linear_cka(X, 1e-200 * X)

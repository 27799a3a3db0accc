"""posgeom_utils.geometry: Hellinger and Fisher-Rao distances between probability rows."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.spatial.distance import euclidean as scipy_euclidean
from hypothesis import given, settings
from hypothesis import strategies as st

from posgeom_utils.geometry import (
    bhattacharyya,
    check_distributions,
    fisher_rao_distances,
    hellinger_distances,
)

#: sqrt(1 - BC) turns a rounding error of ~1e-16 in BC into ~1e-8 in d_H when two rows (almost) coincide;
#: comparisons of d_H itself near zero use this tolerance, comparisons of d_H^2 use 1e-12
SQRT_EPS_TOL = 1e-7


def direct_hellinger(mu: np.ndarray) -> np.ndarray:
    root = np.sqrt(mu)
    n = mu.shape[0]
    D = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            D[i, j] = np.sqrt(0.5 * np.sum((root[i] - root[j]) ** 2))
    return D


def dirichlet_rows(seed: int, n: int, V: int, alpha: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.full(V, alpha), size=n)


@st.composite
def distributions(draw):
    """Random (n, V) probability matrices: Dirichlet rows, some with exact zeros, some repeated."""
    n = draw(st.integers(1, 7))
    V = draw(st.integers(1, 12))
    seed = draw(st.integers(0, 2**32 - 1))
    alpha = draw(st.sampled_from([0.05, 0.5, 1.0, 5.0]))
    rng = np.random.default_rng(seed)
    mu = rng.dirichlet(np.full(V, alpha), size=n)
    if draw(st.booleans()) and V > 1:  # exact zeros
        mu[rng.random(mu.shape) < 0.3] = 0.0
        mu[np.arange(n), rng.integers(0, V, n)] += 1e-3
        mu /= mu.sum(axis=1, keepdims=True)
    if draw(st.booleans()) and n > 1:  # a duplicated row
        mu[-1] = mu[0]
    return mu


def check_hellinger_properties(mu: np.ndarray) -> None:
    D = hellinger_distances(mu)
    n = mu.shape[0]
    assert D.shape == (n, n)
    assert np.array_equal(D, D.T)  # exactly symmetric
    assert np.all(np.diag(D) == 0.0)
    assert np.all((D >= 0) & (D <= 1))
    direct = direct_hellinger(mu)
    np.testing.assert_allclose(D**2, direct**2, rtol=0, atol=1e-12)
    np.testing.assert_allclose(D, direct, rtol=0, atol=SQRT_EPS_TOL)
    for k in range(n):  # triangle inequality d(i, j) <= d(i, k) + d(k, j)
        assert np.all(D <= D[:, [k]] + D[[k], :] + SQRT_EPS_TOL)


@pytest.mark.parametrize(("seed", "n", "V", "alpha"), [(0, 10, 30, 1.0), (1, 5, 3, 0.3), (2, 20, 200, 0.1), (3, 1, 4, 1.0)])
def test_hellinger_dirichlet_rows(seed, n, V, alpha):
    mu = dirichlet_rows(seed, n, V, alpha)
    check_hellinger_properties(mu)
    # well separated rows: d_H itself matches the direct formula to 1e-12
    D = hellinger_distances(mu)
    off = ~np.eye(n, dtype=bool)
    if off.any():
        assert D[off].min() > 1e-3
    np.testing.assert_allclose(D, direct_hellinger(mu), rtol=0, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(distributions())
def test_hellinger_property(mu):
    check_hellinger_properties(mu)


def test_identical_rows_are_zero():
    p = np.array([0.5, 0.25, 0.125, 0.125])  # dyadic: sqrt(p) . sqrt(p) is exactly 1
    assert np.all(hellinger_distances(np.stack([p, p, p])) == 0.0)
    q = dirichlet_rows(5, 1, 50)[0]
    D = hellinger_distances(np.stack([q, q, dirichlet_rows(6, 1, 50)[0]]))
    assert D[0, 1] <= SQRT_EPS_TOL and D[0, 2] > 0.1


def test_disjoint_supports_are_one():
    mu = np.array([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.3, 0.7], [0.0, 0.0, 0.0, 1.0]])
    D = hellinger_distances(mu)
    assert D[0, 1] == 1.0 and D[0, 2] == 1.0
    assert 0 < D[1, 2] < 1
    np.testing.assert_allclose(D[1, 2], np.sqrt(1 - np.sqrt(0.7)), atol=1e-12)


@pytest.mark.parametrize("fmt", [sp.csr_array, sp.csr_matrix, sp.coo_array])
def test_sparse_equals_dense(fmt):
    rng = np.random.default_rng(4)
    mu = dirichlet_rows(4, 8, 40, alpha=0.2)
    mu[rng.random(mu.shape) < 0.6] = 0.0
    mu[:, 0] += 0.01
    mu /= mu.sum(axis=1, keepdims=True)
    sparse = fmt(mu)
    np.testing.assert_allclose(hellinger_distances(sparse), hellinger_distances(mu), rtol=0, atol=1e-12)
    np.testing.assert_allclose(bhattacharyya(sparse), bhattacharyya(mu), rtol=0, atol=1e-12)
    np.testing.assert_allclose(fisher_rao_distances(sparse), fisher_rao_distances(mu), rtol=0, atol=1e-10)
    assert sparse.nnz == np.count_nonzero(mu)  # the input was not modified in place
    np.testing.assert_array_equal(sparse.toarray(), mu)


def by_definition(mu: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BC_ij = sum_v sqrt(p_v q_v), d_H = ||sqrt p - sqrt q|| / sqrt 2 (scipy) and the Fisher-Rao arc
    2 arccos(BC), pair by pair: the reference, with no use of the package's BC."""
    n = mu.shape[0]
    bc, dh, fr = np.zeros((n, n)), np.zeros((n, n)), np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            bc[i, j] = sum(np.sqrt(mu[i, v] * mu[j, v]) for v in range(mu.shape[1]))
            dh[i, j] = scipy_euclidean(np.sqrt(mu[i]), np.sqrt(mu[j])) / np.sqrt(2)
            fr[i, j] = 2 * np.arccos(min(bc[i, j], 1.0)) if i != j else 0.0  # arccos(1 - 1e-16) = 3e-8
    return bc, dh, fr


def test_bhattacharyya_and_hellinger_against_definitions():
    """BC and d_H from their definitions (independently: a sum of sqrt(p q), a scipy chord), and the
    identity d_H^2 = 1 - BC between those two independent computations."""
    mu = dirichlet_rows(7, 6, 9)
    mu[0, :4] = 0.0  # exact zeros
    mu[0] /= mu[0].sum()
    bc_ref, dh_ref, _ = by_definition(mu)
    np.testing.assert_allclose(dh_ref**2, 1 - bc_ref, rtol=0, atol=1e-12)
    bc = bhattacharyya(mu)
    assert np.all((bc >= 0) & (bc <= 1)) and np.all(np.diag(bc) == 1.0)
    np.testing.assert_allclose(bc, bc_ref, rtol=0, atol=1e-12)
    np.testing.assert_allclose(hellinger_distances(mu), dh_ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fisher_rao(seed):
    """FR = 2 arccos(sum_v sqrt(p_v q_v)) from its definition; in [0, pi], pi for disjoint supports."""
    mu = dirichlet_rows(seed, 8, 15)
    F = fisher_rao_distances(mu)
    _, dh_ref, fr_ref = by_definition(mu)
    np.testing.assert_allclose(F, fr_ref, rtol=0, atol=1e-10)
    assert np.all((F >= 0) & (F <= np.pi))
    assert np.all(np.diag(F) == 0) and np.array_equal(F, F.T)
    # the arc on the unit sphere of sqrt(p) is longer than its chord ||sqrt p - sqrt q|| = sqrt 2 d_H
    assert np.all(F >= 2 * np.sqrt(2) * dh_ref - 1e-12)
    disjoint = np.array([[1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(fisher_rao_distances(disjoint), [[0, np.pi], [np.pi, 0]], atol=1e-15)


@pytest.mark.parametrize(
    ("mu", "match"),
    [
        (np.array([0.5, 0.5]), "2-D"),
        (np.zeros((0, 3)), "2-D"),
        (np.array([[0.5, np.nan], [0.5, 0.5]]), "NaN"),
        (np.array([[0.5, np.inf], [0.5, 0.5]]), "NaN or inf"),
        (np.array([[1.5, -0.5], [0.5, 0.5]]), "negative"),
        (np.array([[0.5, 0.4], [0.5, 0.5]]), "row 0 sums to"),
        (np.array([[0.5, 0.5], [1.0, 1.0]]), "row 1 sums to"),
        (sp.csr_array(np.array([[0.5, 0.6], [0.5, 0.5]])), "row 0 sums to"),
    ],
)
@pytest.mark.parametrize("func", [hellinger_distances, fisher_rao_distances, bhattacharyya])
def test_bad_input(func, mu, match):
    with pytest.raises(ValueError, match=match) as info:
        func(mu)
    assert str(info.value).startswith("mu ")


def test_check_distributions_names_argument():
    with pytest.raises(ValueError, match="^weights row 0"):
        check_distributions(np.array([[0.2, 0.2]]), name="weights")
    check_distributions(np.array([[0.2, 0.8]]))  # fine: no exception

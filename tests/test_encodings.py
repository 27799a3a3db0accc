"""Property tests of posgeom_utils.encodings: the encodings compared in *The optimal encoding: classical MDS
on Hellinger geometry* and *How many numbers does a positional encoding need?*.

Each test checks one statement of a theorem box (the book links to these function names): sinusoidal and
RoPE geometries depend only on the offset i - j, one RoPE head is the sinusoidal encoding, ALiBi is a
rank-1 geometry with the standard slopes, the MDS encoding reproduces its target, and the low-rank module
has r (n + d) parameters and trains (learned tables are read in tests/test_models.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import cdist

from posgeom_utils.encodings import (
    alibi,
    alibi_slopes,
    frequencies,
    lowrank_parameter_count,
    mds_encoding,
    random_encoding,
    rope,
    sinusoidal,
)
from posgeom_utils.geometry import classical_mds, hellinger_distances, pairwise_distances, stress

torch = pytest.importorskip("torch")

PROPERTY = settings(max_examples=30, deadline=None)


def dirichlet_mu(seed: int, n: int, V: int, alpha: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.full(V, alpha), size=n)


def hand_frequencies(d: int, base: float = 10000.0) -> np.ndarray:
    """w_k = base^(-2k/d) for k = 0..d/2-1, written out here (the reference, not encodings.frequencies)."""
    return np.array([base ** (-2.0 * k / d) for k in range(d // 2)])


def rotation(i: int, d: int, base: float = 10000.0) -> np.ndarray:
    """RoPE's block-diagonal rotation R_i, built by hand: plane k rotated by the angle i w_k."""
    R = np.zeros((d, d))
    for k, w in enumerate(hand_frequencies(d, base)):
        c, s = np.cos(i * w), np.sin(i * w)
        R[2 * k : 2 * k + 2, 2 * k : 2 * k + 2] = [[c, -s], [s, c]]
    return R


def euclidean(P: np.ndarray) -> np.ndarray:
    """Pairwise distances of the rows of P by scipy (the reference, not geometry.pairwise_distances)."""
    return cdist(P, P)


# --------------------------------------------------------------------------- sinusoidal and RoPE

@pytest.mark.parametrize(("n", "d", "base"), [(1, 2, 10000.0), (10, 8, 10000.0), (33, 16, 10000.0), (7, 6, 100.0)])
def test_sinusoidal_shape_and_values(n, d, base):
    """P[i, 2k] = sin(i / base^(2k/d)), P[i, 2k+1] = cos(i / base^(2k/d)); row 0 is (0, 1, 0, 1, ...)."""
    P = sinusoidal(n, d, base)
    assert P.shape == (n, d)
    np.testing.assert_array_equal(P[0], np.tile([0.0, 1.0], d // 2))
    for i in range(n):
        for k in range(d // 2):
            angle = i / base ** (2 * k / d)
            assert P[i, 2 * k] == pytest.approx(np.sin(angle), abs=1e-12)
            assert P[i, 2 * k + 1] == pytest.approx(np.cos(angle), abs=1e-12)
    np.testing.assert_allclose(frequencies(d, base), hand_frequencies(d, base), rtol=1e-12)
    for bad_d in (3, 7):
        with pytest.raises(ValueError, match="d must be even"):
            sinusoidal(n, bad_d)
    for bad_n in (0, -2, 2.5):
        with pytest.raises(ValueError, match="n must be an integer >= 1"):
            sinusoidal(bad_n, d)
    with pytest.raises(ValueError, match="d must be an integer >= 1"):
        sinusoidal(n, 0)


@PROPERTY
@given(st.integers(2, 60), st.integers(1, 16), st.sampled_from([10.0, 100.0, 10000.0]))
def test_sinusoidal_distances_depend_only_on_offset(n, half_d, base):
    """||p_i - p_j||^2 = sum_k 2 (1 - cos((i - j) w_k)): the sinusoidal distance matrix is Toeplitz."""
    d = 2 * half_d
    D = euclidean(sinusoidal(n, d, base))
    lag = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    expected = np.sqrt(2 * (1 - np.cos(lag[..., None] * hand_frequencies(d, base))).sum(axis=-1))
    np.testing.assert_allclose(D, expected, rtol=0, atol=1e-9)


@pytest.mark.parametrize(("n", "d_head", "n_heads"), [(20, 8, 4), (50, 16, 2), (9, 2, 3)])
def test_rope_equals_sinusoidal_per_head(n, d_head, n_heads):
    """RoPE's positional geometry is the orbit R_i x of a vector x with unit norm in every plane. Built here
    from explicit 2 x 2 rotations (any such x, one per head), the orbit has the sinusoidal distances
    ||R_i x - R_j x||^2 = sum_k 2 (1 - cos((i - j) w_k)), H heads scale them by sqrt(H), and rope(...)
    reproduces them; (R_i q) . (R_j k) depends on i - j only (the relative-position property of RoPE).
    """
    rng = np.random.default_rng(n)
    lag = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    closed_form = np.sqrt(2 * (1 - np.cos(lag[..., None] * hand_frequencies(d_head))).sum(axis=-1))
    heads = []
    for _ in range(n_heads):
        phase = rng.uniform(0, 2 * np.pi, size=d_head // 2)  # x: a random unit vector in every plane
        x = np.column_stack([np.cos(phase), np.sin(phase)]).ravel()
        heads.append(np.stack([rotation(i, d_head) @ x for i in range(n)]))
    orbit = np.hstack(heads)
    np.testing.assert_allclose(euclidean(heads[0]), closed_form, rtol=0, atol=1e-9)
    np.testing.assert_allclose(euclidean(orbit), np.sqrt(n_heads) * closed_form, rtol=0, atol=1e-9)
    # the package: one head is the sinusoidal geometry, H heads pooled are the orbit of H heads
    R = rope(n, d_head, n_heads)
    assert R.shape == (n, d_head * n_heads)
    np.testing.assert_allclose(euclidean(rope(n, d_head, 1)), closed_form, rtol=0, atol=1e-9)
    np.testing.assert_allclose(euclidean(sinusoidal(n, d_head)), closed_form, rtol=0, atol=1e-9)
    np.testing.assert_allclose(euclidean(R), euclidean(orbit), rtol=0, atol=1e-9)
    # relative positions: q^T R_i^T R_j k = q^T R_{j - i} k
    q, k = rng.normal(size=d_head), rng.normal(size=d_head)
    for shift in (0, 1, 3, 7):
        scores = [(rotation(i, d_head) @ q) @ (rotation(i + shift, d_head) @ k) for i in range(0, n, 2)]
        np.testing.assert_allclose(scores, scores[0], rtol=0, atol=1e-9)
        assert scores[0] == pytest.approx(q @ rotation(shift, d_head) @ k, abs=1e-9)
    with pytest.raises(ValueError, match="n_heads must be an integer >= 1"):
        rope(n, d_head, 0)


# --------------------------------------------------------------------------- ALiBi

def test_alibi_slopes_standard_schedule():
    """Press et al.: for H = 2^a heads the slopes are 2^(-8h/H); otherwise take the closest power of two
    2^a and add every other slope of the 2^(a+1) schedule."""
    np.testing.assert_allclose(alibi_slopes(8), 2.0 ** -np.arange(1, 9), rtol=1e-12)
    np.testing.assert_allclose(alibi_slopes(16), 2.0 ** (-0.5 * np.arange(1, 17)), rtol=1e-12)
    np.testing.assert_allclose(alibi_slopes(1), [2.0**-8], rtol=1e-12)
    twelve = alibi_slopes(12)
    assert twelve.shape == (12,)
    assert np.all(twelve > 0) and np.unique(twelve).size == 12
    # 12 heads: the 8-head schedule 2^-1..2^-8, then slopes 1, 3, 5, 7 of the 16-head one (2^(-h/2))
    np.testing.assert_allclose(twelve, np.r_[2.0 ** -np.arange(1, 9), 2.0 ** (-0.5 * np.array([1, 3, 5, 7]))],
                               rtol=1e-12)
    for bad in (0, -4, 2.0):
        with pytest.raises(ValueError, match="n_heads must be an integer >= 1"):
            alibi_slopes(bad)


@pytest.mark.parametrize("n", [2, 10, 64])
def test_alibi_is_rank_one_and_shift_equivariant(n):
    """ALiBi's geometry is m |i - j| (pooled heads: |i - j| sqrt(sum m^2)): rank 1, depending on offsets only."""
    offsets = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :]).astype(float)
    for m in (0.5, 2.0**-8, 3.0):
        P = alibi(n, m)
        assert P.shape == (n, 1)
        np.testing.assert_allclose(pairwise_distances(P), m * offsets, rtol=1e-9, atol=1e-9)
    slopes = alibi_slopes(12)
    D = pairwise_distances(alibi(n, slopes))
    np.testing.assert_allclose(D, offsets * np.sqrt(np.sum(slopes**2)), rtol=1e-9, atol=1e-9)
    result = classical_mds(D)
    assert result.effective_rank == 1
    assert stress(result.P, D) < 1e-12
    for bad in (0.0, -1.0, np.array([0.5, -0.5]), np.array([0.5, np.nan])):
        with pytest.raises(ValueError, match="slope must be a positive number"):
            alibi(n, bad)


# --------------------------------------------------------------------------- the MDS encoding

def sklearn_mds_distances(D: np.ndarray, r: int) -> np.ndarray:
    """Distances of scikit-learn's rank-r classical MDS of D (the reference for our MDS encodings)."""
    from sklearn.manifold import ClassicalMDS

    return euclidean(ClassicalMDS(n_components=r, metric="precomputed").fit_transform(D))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mds_encoding_reproduces_hellinger(seed):
    """The paper's optimal encoding: classical MDS padded to width d reproduces a Euclidean D exactly; with
    fewer columns it is scikit-learn's best r-dimensional classical MDS fit."""
    n = 12
    D = hellinger_distances(dirichlet_mu(seed, n, 40, alpha=0.5))
    P = mds_encoding(D, d=n + 3)
    assert P.shape == (n, n + 3)
    np.testing.assert_allclose(euclidean(P), D, rtol=0, atol=1e-7)
    narrow = mds_encoding(D, d=4)  # fewer columns than the rank: the best 4-dimensional fit
    assert narrow.shape == (n, 4)
    np.testing.assert_allclose(euclidean(narrow), sklearn_mds_distances(D, 4), rtol=0, atol=1e-8)
    two = mds_encoding(D, d=n + 3, r=2)
    assert two.shape == (n, n + 3)
    assert np.count_nonzero(np.any(two != 0, axis=0)) == 2
    np.testing.assert_allclose(euclidean(two), sklearn_mds_distances(D, 2), rtol=0, atol=1e-8)
    with pytest.raises(ValueError, match=r"r must be an integer in \[1, 3\], got r=5: a rank is at most the width d=3"):
        mds_encoding(D, d=3, r=5)
    with pytest.raises(ValueError, match="d must be an integer >= 1"):
        mds_encoding(D, d=0)


# --------------------------------------------------------------------------- the low-rank module

def test_lowrank_module_parameters_and_init():
    """P = A B^T stores r (n + d) numbers, starts at the rank-r MDS geometry, adds to x, and trains."""
    from posgeom_utils.encodings import LowRankPositionalEncoding

    torch.manual_seed(0)
    for n, d, r in ((10, 8, 3), (40, 16, 1), (5, 32, 5)):
        module = LowRankPositionalEncoding(n, d, r)
        count = sum(p.numel() for p in module.parameters() if p.requires_grad)
        assert count == lowrank_parameter_count(n, d, r) == module.num_parameters == r * (n + d)
        assert tuple(module.table().shape) == (n, d)

    n, d, r = 16, 12, 3
    D = hellinger_distances(dirichlet_mu(3, n, 30, alpha=0.5))
    module = LowRankPositionalEncoding.from_mds(D, d, r)
    table = module.table().detach().numpy().astype(np.float64)
    assert table.shape == (n, d) and np.linalg.matrix_rank(table, tol=1e-6) == r
    B = module.B.detach().numpy().astype(np.float64)
    np.testing.assert_allclose(B.T @ B, np.eye(r), atol=1e-6)  # orthonormal: P = A B^T keeps A's distances
    np.testing.assert_allclose(euclidean(table), sklearn_mds_distances(D, r), atol=1e-5)

    x = torch.randn(2, 10, d)
    A = module.A.detach().numpy()
    np.testing.assert_allclose(module(x).detach().numpy(), x.numpy() + (A @ B.T)[:10], atol=1e-6)
    assert tuple(module(torch.randn(2, n, d)).shape) == (2, n, d)
    with pytest.raises(ValueError, match=f"sequence length {n + 1} exceeds the encoding's n={n}"):
        module(torch.randn(2, n + 1, d))
    with pytest.raises(ValueError, match=r"got r=9: a rank is at most min\(n, d\) = 8"):
        LowRankPositionalEncoding(10, 8, 9)
    with pytest.raises(ValueError, match=r"got r=3: a rank is at most min\(n, d\) = 2"):
        LowRankPositionalEncoding.from_mds(D, d=2, r=3)
    with pytest.raises(ValueError, match=r"r must be an integer in \[1, 8\], got r=0"):
        LowRankPositionalEncoding(10, 8, 0)

    target = torch.randn(n, d)
    optimiser = torch.optim.Adam(module.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        optimiser.zero_grad()
        loss = ((module.table() - target) ** 2).sum()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


def test_random_encoding_seeded():
    """random_encoding is reproducible: the same seed gives the same table, another seed another one."""
    a, b = random_encoding(20, 8, seed=3), random_encoding(20, 8, seed=3)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, random_encoding(20, 8, seed=4))
    assert a.shape == (20, 8)
    assert 0.01 < a.std() < 0.03  # BERT's init scale 0.02 by default
    assert random_encoding(20, 8, seed=3, scale=1.0).std() > 0.5
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        random_encoding(0, 8)


def test_standard_encodings_bad_width_or_heads():
    from posgeom_utils.encodings import standard_encodings

    D = hellinger_distances(dirichlet_mu(0, 8, 20))
    for d, n_heads, match in ((8, 0, "n_heads must be an integer >= 1"), (8, -2, "n_heads"),
                              (0, 2, "d must be an integer >= 1"), (8, 3, "divisible by n_heads=3")):
        with pytest.raises(ValueError, match=match):
            standard_encodings(D, d=d, n_heads=n_heads)

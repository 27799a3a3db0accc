"""posgeom_utils.ntk: the first lazy step is linear in the distributions, the
triplet discordance of two geometries, the split-geometry corpus and the NTK model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from posgeom_utils.corpus import synthetic_mu
from posgeom_utils.geometry import (
    fisher_rao_distances,
    hellinger_distances,
    monotonicity_violation_rate,
)
from posgeom_utils.ntk import (
    NTKMaskedModel,
    as_distances,
    first_step_prediction,
    kernel_mean_distances,
    l2_distances,
    log_ratio_distances,
    sample_ids,
    split_geometry_mu,
    token_kernel,
    triplet_discordance,
)
from posgeom_utils.tasks import masked_task


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    width=st.sampled_from([3, 8, 32]),
    n=st.integers(3, 12),
    V=st.integers(8, 40),
    batch=st.integers(2, 24),
    lr=st.floats(0.01, 5.0),
)
def test_first_lazy_step_is_linear_in_the_distributions(seed, width, n, V, batch, lr) -> None:
    """Proposition 'the first lazy step is linear in the distributions': one gradient
    step from a zero table equals lr (k_i / N) J0^T (mu_hat_i - sigma0), to float
    precision (double), for random models, corpora, masks and step sizes."""
    torch.manual_seed(seed)
    mu = np.random.default_rng(seed).dirichlet(np.full(V, 0.5), size=n)
    task = masked_task(sample_ids(mu, batch + 8, seed=seed), V, mask_rate=0.3, seed=seed)
    model = NTKMaskedModel(task.vocab_size, n, width).double()
    observed, predicted = first_step_prediction(model, task.X_train, task.y_train, lr=lr)
    assert observed.shape == predicted.shape == (n, width)
    assert np.abs(observed).max() > 0  # the step moved the table
    assert np.allclose(observed, predicted, rtol=1e-10, atol=1e-13 * np.abs(observed).max())


def test_first_step_distances_are_kernel_mean_distances() -> None:
    """With equal counts per position, distances between first-step displacements are
    (lr k / N) times the kernel-mean distances of the empirical mu_hat_i, K = J0 J0^T."""
    torch.manual_seed(0)
    n, V, width, lr = 5, 12, 16, 0.7
    model = NTKMaskedModel(V + 2, n, width).double()
    rng = np.random.default_rng(0)
    targets = rng.integers(2, V + 2, size=(6, n))  # every position masked in 6 rows
    X = torch.ones((6, n), dtype=torch.long)
    y = torch.as_tensor(targets)
    observed, _ = first_step_prediction(model, X, y, lr=lr)
    counts = np.zeros((n, V + 2))
    for i in range(n):
        np.add.at(counts[i], targets[:, i], 1.0)
    mu_hat = counts / 6
    K = token_kernel(model)
    expected = lr * 6 / (6 * n) * kernel_mean_distances(mu_hat, K)
    assert np.allclose(as_distances(observed), expected, rtol=1e-9, atol=1e-12)


def test_first_step_needs_a_zero_table_and_masked_inputs() -> None:
    model = NTKMaskedModel(10, 4, 8, table_std=0.1)
    X = torch.ones((2, 4), dtype=torch.long)
    y = torch.full((2, 4), 3)
    with pytest.raises(ValueError, match="zero table"):
        first_step_prediction(model, X, y, lr=1.0)
    model = NTKMaskedModel(10, 4, 8)
    with pytest.raises(ValueError, match="mask_id"):
        first_step_prediction(model, X + 1, y, lr=1.0)


def test_discordance_small_cases() -> None:
    """Hand-checked three-point cases: same order 0, reversed order 1, a tie one half."""
    R = np.array([[0, 1, 2], [1, 0, 1.5], [2, 1.5, 0]], dtype=float)
    assert triplet_discordance(R, R) == 0.0
    reversed_ = np.array([[0, 2, 1], [2, 0, 1.5], [1, 1.5, 0]], dtype=float)
    # anchor 0: R puts 1 closer than 2, E the reverse; anchor 1: R puts 0 closer than 2,
    # E the reverse; anchor 2: R puts 1 closer than 0, E the reverse: all 3 discordant
    assert triplet_discordance(reversed_, R) == 1.0
    half = np.array([[0, 1, 2], [1, 0, 3], [2, 3, 0]], dtype=float)
    # anchors 0 and 2 agree with R, anchor 1 (0 at 1 vs 2 at 3 in E) agrees too; make
    # anchor 1 disagree only: E_10 > E_12
    half[1, 0] = half[0, 1] = 1.8
    half[1, 2] = half[2, 1] = 1.6
    # anchor 0: E_01 = 1.8 < E_02 = 2 (agree); anchor 1: R_10 = 1 < R_12 = 1.5 but
    # E_10 = 1.8 > E_12 = 1.6 (discordant); anchor 2: R_21 = 1.5 < R_20 = 2, E_21 = 1.6
    # < E_20 = 2 (agree)
    assert triplet_discordance(half, R) == pytest.approx(1 / 3)
    tied = np.array([[0, 1, 1], [1, 0, 1], [1, 1, 0]], dtype=float)
    assert triplet_discordance(tied, R) == 0.5


def test_discordance_with_offsets_is_the_violation_rate() -> None:
    """Against R_ij = |i - j| the discordance is the triplet monotonicity violation rate."""
    for seed in range(5):
        X = np.random.default_rng(seed).normal(size=(15, 4))
        offsets = np.abs(np.subtract.outer(np.arange(15), np.arange(15))).astype(float)
        assert triplet_discordance(as_distances(X), offsets) == pytest.approx(
            monotonicity_violation_rate(X).rate, abs=1e-12
        )


def test_l2_and_hellinger_disagree_on_the_split_corpus() -> None:
    """The split-geometry corpus: L2 follows the position, Hellinger a permutation, and
    their orders disagree on many triplets (seeded instances)."""
    for seed in range(3):
        mu = split_geometry_mu(24, 128, seed=seed)
        assert np.allclose(mu.sum(1), 1) and np.all(mu > 0)
        DL, DH = l2_distances(mu), hellinger_distances(mu)
        assert triplet_discordance(DL, DH) > 0.3
        offsets = np.abs(np.subtract.outer(np.arange(24), np.arange(24))).astype(float)
        assert triplet_discordance(DL, offsets) < 0.15


def test_negative_controls_where_the_orders_agree() -> None:
    """Where the geometries agree the measure says so: a circulant corpus (both
    distances increase with the circular offset) and Hellinger against Fisher-Rao (a
    strictly increasing map) give 0."""
    mu = synthetic_mu("shift", 16, 64)
    assert triplet_discordance(l2_distances(mu), hellinger_distances(mu)) == pytest.approx(
        0.0, abs=1e-12
    )
    mu = np.random.default_rng(1).dirichlet(np.full(30, 0.5), size=12)
    assert triplet_discordance(fisher_rao_distances(mu), hellinger_distances(mu)) == 0.0


def test_kernel_mean_with_identity_is_l2_and_log_ratio_is_aitchison() -> None:
    mu = np.random.default_rng(2).dirichlet(np.full(20, 1.0), size=7)
    assert np.allclose(kernel_mean_distances(mu, np.eye(20)), l2_distances(mu))
    clr = np.log(mu) - np.log(mu).mean(1, keepdims=True)
    assert np.isclose(log_ratio_distances(mu)[1, 4], np.linalg.norm(clr[1] - clr[4]))
    with pytest.raises(ValueError, match="V x V"):
        kernel_mean_distances(mu, np.eye(3))
    with pytest.raises(ValueError, match="K must be symmetric"):
        kernel_mean_distances(mu, np.triu(np.ones((20, 20))))
    with pytest.raises(ValueError, match="mu must be strictly positive"):
        log_ratio_distances(np.eye(3))


def test_token_kernel_approaches_a_multiple_of_the_identity() -> None:
    """NTK parametrisation: the off-diagonal of K = J0 J0^T shrinks relative to its
    diagonal as the width grows."""
    ratios = []
    for width in (8, 512):
        torch.manual_seed(0)
        K = token_kernel(NTKMaskedModel(40, 4, width))[2:, 2:]
        ratios.append(np.abs(K - np.diag(np.diag(K))).mean() / np.diag(K).mean())
    assert ratios[1] < ratios[0] / 3


def test_sample_ids_draws_each_position_from_its_mu() -> None:
    mu = split_geometry_mu(6, 16, seed=0)
    ids = sample_ids(mu, 20000, seed=1)
    freq = np.stack([np.bincount(ids[:, i], minlength=16) / 20000 for i in range(6)])
    assert np.abs(freq - mu).max() < 0.02
    with pytest.raises(ValueError, match="n must be an integer >= 3, got n=2: need n >= 3 and V >= 8"):
        split_geometry_mu(2, 16)
    with pytest.raises(ValueError, match="V must be an integer >= 8, got V=7: need n >= 3 and V >= 8"):
        split_geometry_mu(6, 7)

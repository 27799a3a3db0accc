"""The lazy (neural tangent kernel) regime of a learned positional table: which
geometry of the positional distributions the linearised dynamics write into the table.

Chapter: *Monotonicity* ("Are nearby positions encoded nearby?",
``notebooks/monotonicity.md``).

With a zero-initialised table and a network that sees positions only through the
table, the network is permutation-equivariant at initialisation, so the expected
gradient with respect to ``p_i`` is ``sum_t mu_i(t) a(t)``: *linear* in ``mu_i``. For
masked-language modelling with a per-token network the first gradient step is exactly

    Delta p_i = lr * (k_i / N) * J0^T (mu_hat_i - sigma0),

with ``J0`` the Jacobian of the logits with respect to the input at the ``[MASK]``
embedding, ``sigma0`` the initial prediction, ``k_i`` the masked tokens at position
``i`` among the ``N`` scored ones and ``mu_hat_i`` their empirical distribution
(:func:`first_step_prediction`). Distances between displacements are kernel-mean
(MMD) distances ``sqrt((mu_i - mu_j)^T K (mu_i - mu_j))`` with ``K = J0 J0^T``
(:func:`kernel_mean_distances`), which at large width approach a multiple of the
Euclidean (L2) distance between the ``mu_i``: not their Hellinger distance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from scipy import stats
from torch import nn

from .geometry import check_distance_matrix, check_distributions, pairwise_distances

__all__ = [
    "NTKMaskedModel",
    "as_distances",
    "first_step_prediction",
    "kernel_mean_distances",
    "l2_distances",
    "sample_ids",
    "log_ratio_distances",
    "split_geometry_mu",
    "t_interval",
    "token_kernel",
    "triplet_discordance",
]


def l2_distances(mu: np.ndarray) -> np.ndarray:
    """Euclidean distances ``||mu_i - mu_j||_2`` between the rows of ``mu`` (n x V
    distributions): the geometry of the lazy regime's first-order displacement at
    large width. Chapter: *Monotonicity*"""
    mu = np.asarray(mu, dtype=np.float64)
    check_distributions(mu)
    return pairwise_distances(mu, "mu")


def kernel_mean_distances(mu: np.ndarray, K: np.ndarray) -> np.ndarray:
    """Kernel-mean (MMD) distances ``sqrt((mu_i - mu_j)^T K (mu_i - mu_j))`` for a
    positive semi-definite V x V token kernel ``K`` (e.g. :func:`token_kernel`).

    ``K = I`` gives :func:`l2_distances`. Chapter: *Monotonicity*"""
    mu = np.asarray(mu, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    if mu.ndim != 2 or K.shape != (mu.shape[1], mu.shape[1]):
        raise ValueError(
            f"K must be V x V for mu of shape (n, V), got mu {mu.shape} and K {K.shape}"
        )
    if not np.allclose(K, K.T, atol=1e-10 * max(1.0, float(np.abs(K).max()))):
        raise ValueError("K must be symmetric (a token kernel)")
    G = mu @ K @ mu.T  # Gram matrix of the kernel mean embeddings
    sq = np.diag(G)[:, None] + np.diag(G)[None, :] - 2 * G
    D = np.sqrt(np.clip(sq, 0.0, None))
    np.fill_diagonal(D, 0.0)
    return (D + D.T) / 2


def log_ratio_distances(mu: np.ndarray) -> np.ndarray:
    """Euclidean distances between centred log-probabilities (Aitchison geometry):
    the geometry of the linearised model's *fixed point* under cross-entropy when the
    width exceeds the vocabulary. Needs ``mu > 0``. Chapter: *Monotonicity*"""
    mu = np.asarray(mu, dtype=np.float64)
    check_distributions(mu)
    if np.any(mu <= 0):
        raise ValueError("log_ratio_distances needs strictly positive distributions")
    logs = np.log(mu)
    return pairwise_distances(logs - logs.mean(1, keepdims=True), "log mu")


def triplet_discordance(E: np.ndarray, R: np.ndarray, tie_tol: float = 1e-9) -> float:
    """How often the distance matrix ``E`` orders triplets against the reference
    distance matrix ``R``.

    Over anchors ``i`` and ordered pairs ``j, k != i`` with ``R_ij < R_ik`` (strictly,
    beyond ``tie_tol`` times the largest entry of ``R``), a triplet scores 1 when
    ``E_ij > E_ik``, one half when they are tied (within ``tie_tol`` times the
    largest entry of ``E``) and 0 otherwise; the result is the mean score. With
    ``R_ij = |i - j|`` it is the triplet monotonicity violation rate; with ``R`` and
    ``E`` two geometries of the same distributions it measures how far their
    orderings disagree (0 when ``E`` is a strictly increasing function of ``R``, 1
    when decreasing, about one half when unrelated). Chapter: *Monotonicity*"""
    E = check_distance_matrix(np.asarray(E, dtype=np.float64), "E")
    R = check_distance_matrix(np.asarray(R, dtype=np.float64), "R")
    if E.shape != R.shape:
        raise ValueError(f"E and R must have the same shape, got {E.shape} and {R.shape}")
    if not math.isfinite(tie_tol) or tie_tol < 0:
        raise ValueError(f"tie_tol must be a finite number >= 0, got {tie_tol!r}")
    n = E.shape[0]
    if n < 3:
        raise ValueError(f"need at least 3 positions, got n={n}")
    eps_r = tie_tol * float(R.max(initial=0.0))
    eps_e = tie_tol * float(E.max(initial=0.0))
    off = ~np.eye(n, dtype=bool)
    score, total = 0.0, 0
    for i in range(n):
        r, e = R[i], E[i]
        valid = off[i][:, None] & off[i][None, :]
        closer = (r[None, :] - r[:, None] > eps_r) & valid  # [j, k]: R_ij < R_ik
        diff = e[:, None] - e[None, :]  # E_ij - E_ik
        score += np.sum(closer & (diff > eps_e)) + 0.5 * np.sum(
            closer & (np.abs(diff) <= eps_e)
        )
        total += int(closer.sum())
    if total == 0:
        raise ValueError("R orders no triplet strictly: it is constant on every row")
    return float(score / total)


def as_distances(X: np.ndarray) -> np.ndarray:
    """Euclidean distances between the rows of an encoding (n x d).

    Chapter: *Monotonicity*"""
    return pairwise_distances(np.asarray(X, dtype=np.float64), "X")


def split_geometry_mu(
    n: int,
    V: int,
    seed: int = 0,
    head_mass: float = 0.5,
    head_slope: float = 0.8,
    concentration: float = 3.0,
) -> np.ndarray:
    """Positional distributions whose L2 and Hellinger geometries order positions
    differently.

    Two *head* tokens carry ``head_mass`` in proportions that drift linearly with the
    position (``1/2 +- head_slope (i / (n - 1) - 1/2) / 2``): few, frequent tokens,
    which dominate the L2 distance, so the L2 geometry follows ``|i - j|``. The other
    ``V - 2`` *tail* tokens carry the rest as a wide von Mises bump on a circle of
    tokens, centred at a seeded random permutation of the positions: many rare tokens,
    which dominate the Hellinger distance (relative changes) but barely move the L2
    one. Chapter: *Monotonicity*"""
    if n < 3 or V < 8:
        raise ValueError(f"need n >= 3 and V >= 8, got n={n}, V={V}")
    if not 0 < head_mass < 1 or not 0 <= head_slope < 1 or concentration <= 0:
        raise ValueError(
            "need 0 < head_mass < 1, 0 <= head_slope < 1 and concentration > 0, got "
            f"{head_mass}, {head_slope}, {concentration}"
        )
    rng = np.random.default_rng(seed)
    s = np.arange(n) / (n - 1) - 0.5
    q = 0.5 + head_slope * s / 2  # share of head token 0
    T = V - 2
    centre = 2 * np.pi * rng.permutation(n) / n  # tail bump of position i
    angle = 2 * np.pi * np.arange(T) / T
    tail = np.exp(concentration * np.cos(angle[None, :] - centre[:, None]))
    tail /= tail.sum(1, keepdims=True)
    mu = np.empty((n, V))
    mu[:, 0] = head_mass * q
    mu[:, 1] = head_mass * (1 - q)
    mu[:, 2:] = (1 - head_mass) * tail
    return mu


def sample_ids(mu: np.ndarray, num_sequences: int, seed: int = 0) -> np.ndarray:
    """``num_sequences`` sequences whose position ``i`` is drawn from ``mu[i]``,
    independently (seeded inverse-CDF draws): a corpus with exactly these positional
    distributions. Chapter: *Monotonicity*"""
    mu = np.asarray(mu, dtype=np.float64)
    check_distributions(mu)
    if num_sequences < 1:
        raise ValueError(f"num_sequences must be >= 1, got {num_sequences}")
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(mu, axis=1)
    cdf[:, -1] = 1.0
    u = rng.random((num_sequences, mu.shape[0]))
    ids = np.empty(u.shape, dtype=np.int64)
    for i in range(mu.shape[0]):
        ids[:, i] = np.searchsorted(cdf[i], u[:, i], side="right")
    return ids


class NTKMaskedModel(nn.Module):
    """A per-token masked-language model in the NTK parametrisation, with a
    positional table that starts at zero.

    ``logits(x)_i = W2^T phi(W1^T (e(x_i) + p_i) / sqrt(width)) / sqrt(hidden)``:
    every weight is drawn N(0, 1) and the forward pass divides by the square root of
    the fan-in, so plain gradient descent with a width-independent step is lazy
    (hidden weights move O(1 / sqrt(width)) relative to their initial values) while
    the function moves O(1). Positions are independent in the chapter's synthetic
    corpora, so the context carries no information about a masked token; the model
    keeps only the per-token path, on which the linearisation is exact
    (:func:`first_step_prediction`). ``table_std > 0`` starts the table at
    N(0, table_std^2) instead. Chapter: *Monotonicity*"""

    def __init__(
        self,
        vocab_size: int,
        n: int,
        width: int,
        hidden: int | None = None,
        table_std: float = 0.0,
    ):
        super().__init__()
        if vocab_size < 3 or n < 1 or width < 1:
            raise ValueError(
                f"need vocab_size >= 3, n >= 1, width >= 1, got {vocab_size}, {n}, "
                f"{width}"
            )
        if table_std < 0:
            raise ValueError(f"table_std must be >= 0, got {table_std}")
        hidden = width if hidden is None else hidden
        self.width, self.hidden = width, hidden
        self.embed = nn.Parameter(torch.randn(vocab_size, width))
        self.pos_table = nn.Parameter(torch.randn(n, width) * table_std)
        self.W1 = nn.Parameter(torch.randn(width, hidden))
        self.W2 = nn.Parameter(torch.randn(hidden, vocab_size))

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Logits from inputs ``h`` (..., width). Chapter: *Monotonicity*"""
        z = h @ self.W1 / math.sqrt(self.width)
        return F.gelu(z) @ self.W2 / math.sqrt(self.hidden)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits (batch, L, vocab_size) for token ids (batch, L).

        Chapter: *Monotonicity*"""
        L = ids.shape[1]
        return self.head(self.embed[ids] + self.pos_table[:L])


def _mask_jacobian(model: NTKMaskedModel, mask_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """J0 (V x width) = d logits / d h at h = e(mask) and sigma0 = softmax of the logits
    there (zero table)."""
    h0 = model.embed[mask_id].detach().clone()
    J0 = torch.autograd.functional.jacobian(model.head, h0)
    sigma0 = torch.softmax(model.head(h0), -1).detach()
    return J0.detach(), sigma0


def token_kernel(model: NTKMaskedModel, mask_id: int = 1) -> np.ndarray:
    """The V x V token kernel ``K = J0 J0^T`` of a model at a zero table: the
    distances between first-step displacements are kernel-mean distances with this
    ``K``. Chapter: *Monotonicity*"""
    J0, _ = _mask_jacobian(model, mask_id)
    J = J0.double().cpu().numpy()
    return J @ J.T


def first_step_prediction(
    model: NTKMaskedModel,
    X: torch.Tensor,
    y: torch.Tensor,
    lr: float,
    mask_id: int = 1,
    ignore: int = -100,
) -> tuple[np.ndarray, np.ndarray]:
    """One plain gradient step on the batch (X, y) from a zero table, and its
    prediction ``lr (k_i / N) J0^T (mu_hat_i - sigma0)``: (observed, predicted)
    displacements of the table, both n x width. The model is not changed.

    ``X`` holds ``mask_id`` at every scored position (``y != ignore``), as
    :func:`~posgeom_utils.tasks.masked_task` makes it. Chapter: *Monotonicity*"""
    if torch.any(model.pos_table != 0):
        raise ValueError("first_step_prediction needs a zero table (table_std=0)")
    scored = y != ignore
    if not torch.all(X[scored] == mask_id):
        raise ValueError("every scored position of X must hold mask_id")
    N = int(scored.sum())
    if N == 0:
        raise ValueError("the batch has no scored token")
    model.zero_grad(set_to_none=True)
    logits = model(X)
    loss = F.cross_entropy(logits.transpose(1, 2), y, ignore_index=ignore)
    (grad,) = torch.autograd.grad(loss, model.pos_table)
    observed = (-lr * grad).detach()
    J0, sigma0 = _mask_jacobian(model, mask_id)
    V, L = logits.shape[-1], X.shape[1]
    counts = torch.zeros(model.pos_table.shape[0], V, dtype=J0.dtype, device=J0.device)
    pos = torch.arange(L, device=X.device).expand_as(X)[scored]
    counts.index_put_((pos, y[scored]), torch.ones(N, dtype=J0.dtype), accumulate=True)
    k = counts.sum(1, keepdim=True)  # masked tokens at each position
    # lr (k_i / N) J0^T (mu_hat_i - sigma0) = (lr / N) (counts_i - k_i sigma0) J0
    predicted = lr / N * (counts - k * sigma0[None, :]) @ J0
    return observed.cpu().numpy(), predicted.cpu().numpy()


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t ``level`` interval (low, high) over seeds (NaN bounds for
    one value). Chapter: *Monotonicity*"""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0 or not np.all(np.isfinite(v)):
        raise ValueError("values must be a non-empty 1-D array of finite numbers")
    mean = float(v.mean())
    if v.size < 2:
        return mean, float("nan"), float("nan")
    half = float(stats.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return mean, mean - half, mean + half

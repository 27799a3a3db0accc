"""The lazy (NTK) regime: which geometry the linearised dynamics write into a positional
table. Chapter: *Are nearby positions encoded nearby?*."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import checks
from .corpus import draw_positions
from .geometry import _triplet_score, pairwise_distances


def l2_distances(mu: np.ndarray) -> np.ndarray:
    """``||mu_i - mu_j||_2`` between rows of ``mu`` (n x V): the lazy regime's geometry
    at large width. Chapter: *Are nearby positions encoded nearby?*."""
    mu = np.asarray(mu, dtype=np.float64)
    checks.probability_rows(mu)
    return pairwise_distances(mu, "mu")


def kernel_mean_distances(mu: np.ndarray, K: np.ndarray) -> np.ndarray:
    """Kernel-mean distances ``sqrt((mu_i - mu_j)^T K (mu_i - mu_j))`` for a V x V token
    kernel. Chapter: *Are nearby positions encoded nearby?*."""
    mu = np.asarray(mu, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    ok = mu.ndim == 2 and K.shape == (mu.shape[1], mu.shape[1])
    checks.require(ok, "K", f"V x V for mu of shape (n, V) {mu.shape}", K.shape)
    ok = np.allclose(K, K.T, atol=1e-10 * max(1.0, float(np.abs(K).max())))
    checks.require(ok, "K", "symmetric (a token kernel)", "an asymmetric matrix")
    G = mu @ K @ mu.T  # Gram matrix of the kernel mean embeddings
    sq = np.diag(G)[:, None] + np.diag(G)[None, :] - 2 * G
    D = np.sqrt(np.clip(sq, 0.0, None))
    np.fill_diagonal(D, 0.0)
    return (D + D.T) / 2


def log_ratio_distances(mu: np.ndarray) -> np.ndarray:
    """Euclidean distances between centred log-probabilities (Aitchison geometry); needs
    ``mu > 0``. Chapter: *Are nearby positions encoded nearby?*."""
    mu = np.asarray(mu, dtype=np.float64)
    checks.probability_rows(mu)
    checks.require(np.all(mu > 0), "mu", "strictly positive", "a zero entry")
    logs = np.log(mu)
    return pairwise_distances(logs - logs.mean(1, keepdims=True), "log mu")


def triplet_discordance(E: np.ndarray, R: np.ndarray, tie_tol: float = 1e-9) -> float:
    """Share of anchored triplets with R_ij < R_ik but E_ij > E_ik (ties one half).
    Chapter: *Are nearby positions encoded nearby?*."""
    E, R = checks.distance_matrix(E, "E"), checks.distance_matrix(R, "R")
    checks.same_shape(E, R, "E and R")
    tie_tol = checks.number(tie_tol, "tie_tol", 0)
    checks.integer(len(E), "n", 3, fix="pass at least 3 positions")
    eps_e, eps_r = (tie_tol * float(M.max(initial=0.0)) for M in (E, R))
    score, total = _triplet_score(E, R, eps_e, eps_r)
    if total == 0:
        raise ValueError("R orders no triplet strictly: it is constant on every row")
    return float(score / total)


def as_distances(X: np.ndarray) -> np.ndarray:
    """Row distances of ``X``. Chapter: *Are nearby positions encoded nearby?*."""
    return pairwise_distances(np.asarray(X, dtype=np.float64), "X")


def split_geometry_mu(
    n: int,
    V: int,
    seed: int = 0,
    head_mass: float = 0.5,
    head_slope: float = 0.8,
    concentration: float = 3.0,
) -> np.ndarray:
    """Distributions whose L2 geometry follows the position, their Hellinger one a
    permutation. Chapter: *Are nearby positions encoded nearby?*."""
    checks.integer(n, "n", 3, fix="need n >= 3 and V >= 8")
    checks.integer(V, "V", 8, fix="need n >= 3 and V >= 8")
    checks.fraction(head_mass, "head_mass")
    checks.number(head_slope, "head_slope", 0, 1, high_open=True)
    checks.number(concentration, "concentration", 0, low_open=True)
    rng = np.random.default_rng(seed)
    s = np.arange(n) / (n - 1) - 0.5
    q = 0.5 + head_slope * s / 2  # share of head token 0
    T = V - 2
    centre = 2 * np.pi * rng.permutation(n) / n  # tail bump of position i
    angle = 2 * np.pi * np.arange(T) / T
    tail = np.exp(concentration * np.cos(angle[None, :] - centre[:, None]))
    tail /= tail.sum(1, keepdims=True)
    return np.column_stack([head_mass * q, head_mass * (1 - q), (1 - head_mass) * tail])


def sample_ids(mu: np.ndarray, num_sequences: int, seed: int = 0) -> np.ndarray:
    """``num_sequences`` sequences, position ``i`` drawn independently from ``mu[i]``
    (seeded). Chapter: *Are nearby positions encoded nearby?*."""
    mu = np.asarray(mu, dtype=np.float64)
    checks.probability_rows(mu)
    num_sequences = checks.integer(num_sequences, "num_sequences")
    return draw_positions(
        mu, np.random.default_rng(seed).random((num_sequences, mu.shape[0]))
    )


class NTKMaskedModel(nn.Module):
    """A per-token masked-language model in the NTK parametrisation, its table starting
    at zero. Chapter: *Are nearby positions encoded nearby?*."""

    def __init__(
        self,
        vocab_size: int,
        n: int,
        width: int,
        hidden: int | None = None,
        table_std: float = 0.0,
    ):
        super().__init__()
        checks.integer(vocab_size, "vocab_size", 3)
        n, width = checks.integer(n, "n"), checks.integer(width, "width")
        table_std = checks.number(table_std, "table_std", 0)
        self.width, self.hidden = width, width if hidden is None else hidden
        self.embed = nn.Parameter(torch.randn(vocab_size, width))
        self.pos_table = nn.Parameter(torch.randn(n, width) * table_std)
        self.W1 = nn.Parameter(torch.randn(width, self.hidden))
        self.W2 = nn.Parameter(torch.randn(self.hidden, vocab_size))

    def head(self, h: Tensor) -> Tensor:
        """Logits of ``h``. Chapter: *Are nearby positions encoded nearby?*."""
        z = h @ self.W1 / math.sqrt(self.width)
        return F.gelu(z) @ self.W2 / math.sqrt(self.hidden)

    def forward(self, ids: Tensor) -> Tensor:
        """Logits of token ids. Chapter: *Are nearby positions encoded nearby?*."""
        L = ids.shape[1]
        return self.head(self.embed[ids] + self.pos_table[:L])


def _mask_jacobian(model: NTKMaskedModel, mask_id: int) -> tuple[Tensor, Tensor]:
    """J0 = d logits / d h at h = e(mask), and sigma0 = the softmax there."""
    h0 = model.embed[mask_id].detach().clone()
    J0 = torch.autograd.functional.jacobian(model.head, h0)
    sigma0 = torch.softmax(model.head(h0), -1).detach()
    return J0.detach(), sigma0


def token_kernel(model: NTKMaskedModel, mask_id: int = 1) -> np.ndarray:
    """Token kernel K = J0 J0^T. Chapter: *Are nearby positions encoded nearby?*."""
    J = _mask_jacobian(model, mask_id)[0].double().cpu().numpy()
    return J @ J.T


def first_step_prediction(
    model: NTKMaskedModel,
    X: Tensor,
    y: Tensor,
    lr: float,
    mask_id: int = 1,
    ignore: int = -100,
) -> tuple[np.ndarray, np.ndarray]:
    """One gradient step from a zero table, and its prediction: (observed, predicted)
    displacements. Chapter: *Are nearby positions encoded nearby?*."""
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

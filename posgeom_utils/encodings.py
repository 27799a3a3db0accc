"""Positional encodings as matrices (or, where they are not additive vectors, as
distance matrices).

Chapter: *MDS optimality* (each construction is derived there) and *Low rank*.

- ``sinusoidal(n, d)``: Vaswani et al. (2017), rows p_i with p_i[2k] = sin(i w_k),
  p_i[2k+1] = cos(i w_k), w_k = base^(-2k/d).
- ``rope(n, d_head, n_heads)``: RoPE rotates each 2-D plane k of a query/key by the
  angle i w_k. Its positional geometry is the orbit R_i x of a vector x; for x with unit
  norm in every plane (the isotropic average gives the same squared distances)
  ||R_i x - R_j x||^2 = sum_k 2 (1 - cos((i - j) w_k)): the sinusoidal geometry with
  the head's frequencies w_k = base^(-2k/d_head). Every head shares them, so pooling
  heads multiplies distances by sqrt(n_heads).
- ``alibi_slopes(n_heads)`` / ``alibi(n, slope)``: ALiBi adds -m_h |i - j| to the
  attention logits; as a geometry that is the distance m_h |i - j|, realised exactly by
  the rank-1 encoding p_i = m_h i.
- learned absolute tables of pre-trained models are read by
  :func:`posgeom_utils.models.learned_position_embeddings`.
- ``mds_encoding(D, d)`` and ``LowRankPositionalEncoding``: the paper's optimal encoding
  and its r(n + d)-parameter factorisation P = A B^T.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Any, Iterable

import numpy as np

from .geometry import check_distance_matrix, classical_mds, smacof


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def frequencies(d: int, base: float = 10000.0) -> np.ndarray:
    """The d/2 angular frequencies w_k = base^(-2k/d) shared by sinusoidal encodings and
    RoPE.

    Chapter: *MDS optimality*.
    """
    d = _positive_int(d, "d")
    if d % 2:
        raise ValueError(
            f"d must be even (sin/cos pairs, or RoPE rotation planes), got d={d}"
        )
    return base ** (-np.arange(0, d, 2, dtype=np.float64) / d)


def sinusoidal(n: int, d: int, base: float = 10000.0) -> np.ndarray:
    """The n x d sinusoidal encoding (interleaved sin, cos).
    Chapter: *MDS optimality*."""
    n = _positive_int(n, "n")
    angles = np.arange(n, dtype=np.float64)[:, None] * frequencies(d, base)[None, :]
    P = np.empty((n, d))
    P[:, 0::2], P[:, 1::2] = np.sin(angles), np.cos(angles)
    return P


def rope(n: int, d_head: int, n_heads: int = 1, base: float = 10000.0) -> np.ndarray:
    """RoPE's positional geometry as an n x (d_head n_heads) matrix: the orbit R_i x, x
    of unit norm per plane.

    Distances depend on i - j only; one head equals ``sinusoidal(n, d_head, base)``.
    Chapter: *MDS optimality*.
    """
    n_heads = _positive_int(n_heads, "n_heads")
    return np.tile(sinusoidal(n, d_head, base), (1, n_heads))


def alibi_slopes(n_heads: int) -> np.ndarray:
    """The standard ALiBi head slopes (Press et al., 2022), including their rule for
    non-powers of 2.

    Chapter: *MDS optimality*.
    """
    n_heads = _positive_int(n_heads, "n_heads")

    def power_of_two(h: int) -> list[float]:
        start = 2.0 ** (-8.0 / h)
        return [start ** (k + 1) for k in range(h)]

    if n_heads & (n_heads - 1) == 0:
        return np.array(power_of_two(n_heads))
    closest = 2 ** int(np.floor(np.log2(n_heads)))
    extra = power_of_two(2 * closest)[0::2][: n_heads - closest]
    return np.array(power_of_two(closest) + extra)


def alibi(n: int, slope: float | np.ndarray = 1.0) -> np.ndarray:
    """ALiBi as an encoding: p_i = slope * i (one column per slope). Distances:
    |i - j| sqrt(sum slope^2).

    A scalar slope gives one head; an array of slopes pools heads (still rank 1).
    Chapter: *MDS optimality*.
    """
    n = _positive_int(n, "n")
    slopes = np.atleast_1d(np.asarray(slope, dtype=np.float64))
    if not np.all(np.isfinite(slopes)) or np.any(slopes <= 0):
        raise ValueError(f"ALiBi slopes must be positive, got {slopes}")
    return np.arange(n, dtype=np.float64)[:, None] * slopes[None, :]


__all__ = [
    "frequencies",
    "sinusoidal",
    "rope",
    "alibi_slopes",
    "alibi",
    "mds_encoding",
    "random_encoding",
    "lowrank_parameter_count",
    "saving_configurations",
    "rank_r_table",
    "LowRankPositionalEncoding",
]


def mds_encoding(D: np.ndarray, d: int, r: int | None = None) -> np.ndarray:
    """The paper's optimal encoding: classical MDS of D in rank ``r`` (default: all it
    needs, at most d), padded with zero columns to width d. Chapter: *MDS optimality*.
    """
    D = check_distance_matrix(D)
    d = _positive_int(d, "d")
    result = classical_mds(
        D, D.shape[0]
    )  # one eigendecomposition; every rank is a slice of it
    k = (
        min(result.effective_rank or 1, d, D.shape[0])
        if r is None
        else _positive_int(r, "r")
    )
    if k > d:
        raise ValueError(f"r={k} exceeds the width d={d}")
    if k > D.shape[0]:
        raise ValueError(f"r must be an integer in [1, n={D.shape[0]}], got {k}")
    P = result.P[:, :k]
    return np.hstack([P, np.zeros((P.shape[0], d - k))])


def random_encoding(
    n: int, d: int, seed: int = 0, scale: float | None = None
) -> np.ndarray:
    """A Gaussian n x d table (the baseline of an untrained learned encoding; BERT
    initialises with std 0.02).

    Chapter: *MDS optimality*.
    """
    rng = np.random.default_rng(seed)
    return rng.normal(
        scale=0.02 if scale is None else scale,
        size=(_positive_int(n, "n"), _positive_int(d, "d")),
    )


def lowrank_parameter_count(n: int, d: int, r: int) -> int:
    """Numbers stored by P = A B^T with A (n x r), B (d x r): r (n + d).
    Chapter: *Low rank*."""
    return r * (n + d)


def saving_configurations(
    low: float | Fraction | str,
    high: float | Fraction | str,
    n_values: Iterable[int],
    d_values: Iterable[int],
    ranks: Iterable[int],
) -> "pd.DataFrame":
    """Every (n, d, r) of the given grids whose parameter saving of the factorisation
    P = A B^T against a free n x d table, ``1 - r (n + d) / (n d)``, lies in
    ``[low, high)``: the configurations a reported (rounded) saving is consistent with.

    ``low`` and ``high`` are read as exact decimals (``0.885`` is 885/1000, not the
    nearest double), and the comparison is in exact integer arithmetic, so a saving
    on a bound is classified exactly. Returns a DataFrame with columns n, d, r and
    saving, sorted by r, n, d. Used in *The paper's synthetic claim*. Chapter: *Low rank*.
    """
    import pandas as pd

    lo, hi = (Fraction(str(x)) if not isinstance(x, Fraction) else x for x in (low, high))
    if not lo < hi:
        raise ValueError(f"need low < high, got {low!r} and {high!r}")
    n = np.unique(np.asarray(list(n_values), dtype=np.int64))
    d = np.unique(np.asarray(list(d_values), dtype=np.int64))
    ranks = sorted({int(r) for r in ranks})
    if n.size == 0 or d.size == 0 or not ranks or n.min() < 1 or d.min() < 1 or ranks[0] < 1:
        raise ValueError("n_values, d_values and ranks must be non-empty positive integers")
    if n.max() * d.max() * max(lo.denominator, hi.denominator) > 2**62 // 4:
        raise ValueError("grid too large for exact int64 arithmetic")
    N, Dm = np.meshgrid(n, d, indexing="ij")
    N, Dm = N.ravel(), Dm.ravel()
    nd = N * Dm
    rows = []
    for r in ranks:
        kept = nd - r * (N + Dm)  # saving = kept / nd
        ok = (kept * lo.denominator >= lo.numerator * nd) & (
            kept * hi.denominator < hi.numerator * nd)
        for i in np.flatnonzero(ok):
            rows.append({"n": int(N[i]), "d": int(Dm[i]), "r": r,
                         "saving": float(kept[i] / nd[i])})
    columns = ["n", "d", "r", "saving"]
    table = pd.DataFrame(rows, columns=columns).astype(
        {"n": np.int64, "d": np.int64, "r": np.int64, "saving": np.float64})
    return table.sort_values(["r", "n", "d"]).reset_index(drop=True)


def rank_r_table(P: np.ndarray, r: int) -> np.ndarray:
    """The closest table to ``P`` (Frobenius norm) whose rows differ from their mean by a
    rank-``r`` matrix: the mean row plus the rank-``r`` truncated SVD of the centred
    table (Eckart-Young). ``r = 0`` gives every position the mean row, a table that
    carries no positional information; ``r >= rank`` returns ``P``. Chapter: *Low rank*."""
    P = np.asarray(P, dtype=np.float64)
    if P.ndim != 2 or min(P.shape) < 1 or not np.isfinite(P).all():
        raise ValueError(f"P must be a finite (n, d) table, got shape {P.shape}")
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 0:
        raise ValueError(f"r must be an integer >= 0, got {r!r}")
    mean = P.mean(axis=0, keepdims=True)
    U, s, Vt = np.linalg.svd(P - mean, full_matrices=False)
    r = min(int(r), len(s))
    return mean + (U[:, :r] * s[:r]) @ Vt[:r]


@lru_cache(maxsize=1)
def _torch_module():
    import torch
    from torch import nn

    class LowRankPositionalEncoding(nn.Module):
        """A trainable positional table P = A B^T with r (n + d) parameters.
        Chapter: *Low rank*.

        ``forward(x)`` adds P[:L] to a batch of token embeddings x of shape
        (batch, L, d).
        """

        def __init__(self, n: int, d: int, r: int, init_std: float = 0.02):
            super().__init__()
            n, d, r = (
                _positive_int(n, "n"),
                _positive_int(d, "d"),
                _positive_int(r, "r"),
            )
            if r > min(n, d):
                raise ValueError(f"r={r} must be at most min(n, d) = {min(n, d)}")
            self.n, self.d, self.r = n, d, r
            self.A = nn.Parameter(torch.randn(n, r) * init_std)
            self.B = nn.Parameter(torch.linalg.qr(torch.randn(d, r))[0])

        @classmethod
        def from_mds(
            cls, D: np.ndarray, d: int, r: int, scale: float = 1.0, seed: int = 0
        ) -> "LowRankPositionalEncoding":
            """Initialise from the rank-r classical MDS of D:
            A = scale U_r Lambda_r^(1/2), B orthonormal.

            Chapter: *Low rank*.
            """
            coords = classical_mds(D, r).P * scale
            module = cls(coords.shape[0], d, r)
            gen = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                module.A.copy_(torch.as_tensor(coords, dtype=module.A.dtype))
                module.B.copy_(torch.linalg.qr(torch.randn(d, r, generator=gen))[0])
            return module

        def table(self) -> "torch.Tensor":
            """The n x d matrix P = A B^T. Chapter: *Low rank*."""
            return self.A @ self.B.T

        def forward(self, x: "torch.Tensor") -> "torch.Tensor":
            """``x + P[:L]`` for token embeddings x of shape (batch, L, d).
            Chapter: *Low rank*."""
            L = x.shape[-2]
            if L > self.n:
                raise ValueError(
                    f"sequence length {L} exceeds the encoding's n={self.n} positions"
                )
            return x + self.table()[:L]

        @property
        def num_parameters(self) -> int:
            """r (n + d), the numbers this encoding trains. Chapter: *Low rank*."""
            return lowrank_parameter_count(self.n, self.d, self.r)

    return LowRankPositionalEncoding


def __getattr__(name: str) -> Any:  # torch is imported only when the module is used
    if name == "LowRankPositionalEncoding":
        return _torch_module()
    raise AttributeError(name)


def standard_encodings(
    D: np.ndarray,
    d: int,
    n_heads: int,
    learned: np.ndarray | None = None,
    ranks: tuple[int, ...] = (1, 2, 3, 8, 32),
    smacof_ranks: tuple[int, ...] = (2, 8),
    base: float = 10000.0,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Every encoding the book compares, for n = len(D) positions and width d
    (``n_heads`` heads).

    MDS at full rank and at each r in ``ranks`` (< n), SMACOF at ``smacof_ranks``,
    sinusoidal (d), RoPE (one head and pooled), ALiBi (steepest and shallowest head,
    pooled), the learned table if given, and a random N(0, 0.02^2) table.
    Chapter: *MDS optimality*.
    """
    D = check_distance_matrix(D)
    n = D.shape[0]
    d, n_heads = _positive_int(d, "d"), _positive_int(n_heads, "n_heads")
    if d % n_heads:
        raise ValueError(
            f"d={d} must be divisible by n_heads={n_heads}: pick n_heads dividing the "
            "width"
        )
    d_head = d // n_heads
    mds = classical_mds(D, n)  # one eigendecomposition; every rank is a slice of it
    out: dict[str, np.ndarray] = {
        "MDS, full rank": mds.P[:, : max(mds.effective_rank, 1)]
    }
    for r in ranks:
        if r < n:
            out[f"MDS, r = {r}"] = mds.P[:, :r]
    for r in smacof_ranks:
        if r < n:
            out[f"SMACOF, r = {r}"] = smacof(D, r, init=mds.P[:, :r])
    out[f"sinusoidal, d = {d}"] = sinusoidal(n, d, base)
    out[f"RoPE, one head (d_head = {d_head})"] = rope(n, d_head, 1, base)
    out[f"RoPE, {n_heads} heads pooled"] = rope(n, d_head, n_heads, base)
    slopes = alibi_slopes(n_heads)
    out[f"ALiBi, steepest head (m = {slopes.max():.3g})"] = alibi(n, slopes.max())
    out[f"ALiBi, shallowest head (m = {slopes.min():.3g})"] = alibi(n, slopes.min())
    out[f"ALiBi, {n_heads} heads pooled"] = alibi(n, slopes)
    if learned is not None:
        if learned.shape[0] < n:
            raise ValueError(f"learned table has {learned.shape[0]} rows, need n={n}")
        out["learned (pre-trained)"] = np.asarray(learned[:n])
    out["random N(0, 0.02²)"] = random_encoding(n, d, seed=seed)
    return out

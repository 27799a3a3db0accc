"""Positional encodings as n x d matrices, and the trainable low-rank P = A B^T.
Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from . import checks
from .geometry import classical_mds, smacof

if TYPE_CHECKING:
    import pandas as pd


def frequencies(d: int, base: float = 10000.0) -> np.ndarray:
    """The d/2 frequencies w_k = base^(-2k/d) of sinusoidal encodings and RoPE.
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    d = checks.integer(d, "d")
    base = checks.number(base, "base", 0, low_open=True, fix="the usual base is 10000")
    checks.multiple(d, "d", 2, "even", "sin/cos pairs and RoPE planes take d = 2k")
    return base ** (-np.arange(0, d, 2, dtype=np.float64) / d)


def sinusoidal(n: int, d: int, base: float = 10000.0) -> np.ndarray:
    """Sinusoidal, n x d. Chapter: *The optimal encoding: classical MDS on Hellinger
    geometry*."""
    n = checks.integer(n, "n")
    # the computation
    angles = np.arange(n, dtype=np.float64)[:, None] * frequencies(d, base)[None, :]
    P = np.empty((n, d))
    P[:, 0::2], P[:, 1::2] = np.sin(angles), np.cos(angles)
    return P


def rope(n: int, d_head: int, n_heads: int = 1, base: float = 10000.0) -> np.ndarray:
    """RoPE's geometry, the orbit R_i x (x of unit norm per plane), one block per head.
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    n_heads = checks.integer(n_heads, "n_heads")
    # the computation
    return np.tile(sinusoidal(n, d_head, base), (1, n_heads))


def alibi_slopes(n_heads: int) -> np.ndarray:
    """ALiBi's head slopes. Chapter: *The optimal encoding: classical MDS on Hellinger
    geometry*."""
    n_heads = checks.integer(n_heads, "n_heads")

    def power_of_two(h: int) -> list[float]:
        start = 2.0 ** (-8.0 / h)
        return [start ** (k + 1) for k in range(h)]

    if n_heads & (n_heads - 1) == 0:
        return np.array(power_of_two(n_heads))
    closest = 2 ** int(np.floor(np.log2(n_heads)))
    extra = power_of_two(2 * closest)[0::2][: n_heads - closest]
    return np.array(power_of_two(closest) + extra)


def alibi(n: int, slope: float | np.ndarray = 1.0) -> np.ndarray:
    """ALiBi as an encoding, p_i = slope * i (one column per slope).
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    n = checks.integer(n, "n")
    slopes = np.atleast_1d(np.asarray(slope, dtype=np.float64))
    ok = slopes.ndim == 1 and slopes.size and np.all(np.isfinite(slopes) & (slopes > 0))
    what = "a positive number or a 1-D array of them"
    checks.require(ok, "slope", what, slope, "pass e.g. slope=alibi_slopes(n_heads)")
    # the computation
    return np.arange(n, dtype=np.float64)[:, None] * slopes[None, :]


def mds_encoding(D: np.ndarray, d: int, r: int | None = None) -> np.ndarray:
    """Classical MDS of D in rank ``r`` (default: its rank, at most d), zero-padded to
    width d. Chapter: *How many numbers does a positional encoding need?*."""
    D = checks.distance_matrix(D)
    d = checks.integer(d, "d")
    fix = f"a rank is at most the width d={d} and n={D.shape[0]}"
    r = checks.rank(r, D.shape[0], d, fix=fix, optional=True)
    # the computation
    # one eigendecomposition; every rank is a slice of it
    result = classical_mds(D, D.shape[0])
    k = min(result.effective_rank or 1, d, D.shape[0]) if r is None else r
    P = result.P[:, :k]
    return np.hstack([P, np.zeros((P.shape[0], d - k))])


def random_encoding(
    n: int, d: int, seed: int = 0, scale: float | None = None
) -> np.ndarray:
    """A Gaussian n x d table, std 0.02 by default (BERT's initialisation).
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    size = (checks.integer(n, "n"), checks.integer(d, "d"))
    scale = 0.02 if scale is None else checks.number(scale, "scale", 0, low_open=True)
    return np.random.default_rng(seed).normal(scale=scale, size=size)


def lowrank_parameter_count(n: int, d: int, r: int) -> int:
    """Numbers stored by P = A B^T with A (n x r), B (d x r): r (n + d); r = 0 is the
    constant table. Chapter: *How many numbers does a positional encoding need?*."""
    n, d = checks.integer(n, "n"), checks.integer(d, "d")
    return checks.rank(r, n, d, minimum=0) * (n + d)


def saving_configurations(
    low: float | Fraction | str,
    high: float | Fraction | str,
    n_values: Iterable[int],
    d_values: Iterable[int],
    ranks: Iterable[int],
) -> pd.DataFrame:
    """Every grid (n, d, r) whose saving 1 - r (n + d) / (n d) is in [low, high) (exact
    arithmetic). Chapter: *How many numbers does a positional encoding need?*."""
    import pandas as pd

    lo, hi = (x if isinstance(x, Fraction) else Fraction(str(x)) for x in (low, high))
    checks.require(lo < hi, "high", f"greater than low={low!r}", high, "swap them")
    n = np.unique(np.asarray(list(n_values), dtype=np.int64))
    d = np.unique(np.asarray(list(d_values), dtype=np.int64))
    ranks = sorted({int(r) for r in ranks})
    if not (n.size and d.size and ranks) or min(n.min(), d.min(), ranks[0]) < 1:
        raise ValueError(
            "n_values, d_values and ranks must be non-empty positive integers, got "
            f"{n.tolist()}, {d.tolist()}, {ranks}: drop the values below 1"
        )
    if n.max() * d.max() * max(lo.denominator, hi.denominator) > 2**62 // 4:
        raise ValueError("grid too large for exact int64 arithmetic: use smaller n, d")
    N, Dm = (a.ravel() for a in np.meshgrid(n, d, indexing="ij"))
    nd = N * Dm
    rows = []
    for r in ranks:
        kept = nd - r * (N + Dm)  # saving = kept / nd
        ok = (kept * lo.denominator >= lo.numerator * nd) & (
            kept * hi.denominator < hi.numerator * nd
        )
        rows += [
            {"n": int(N[i]), "d": int(Dm[i]), "r": r, "saving": float(kept[i] / nd[i])}
            for i in np.flatnonzero(ok)
        ]
    dtypes = {"n": np.int64, "d": np.int64, "r": np.int64, "saving": np.float64}
    table = pd.DataFrame(rows, columns=list(dtypes)).astype(dtypes)
    return table.sort_values(["r", "n", "d"]).reset_index(drop=True)


def rank_r_table(P: np.ndarray, r: int) -> np.ndarray:
    """The closest table to ``P`` whose rows differ from their mean by rank ``r``
    (Eckart-Young). Chapter: *How many numbers does a positional encoding need?*."""
    P = checks.finite_array(P, "P")
    r = checks.integer(r, "r", 0)
    mean = P.mean(axis=0, keepdims=True)
    U, s, Vt = np.linalg.svd(P - mean, full_matrices=False)
    r = min(r, len(s))
    return mean + (U[:, :r] * s[:r]) @ Vt[:r]


@lru_cache(maxsize=1)
def _torch_module():
    import torch
    from torch import nn

    class LowRankPositionalEncoding(nn.Module):
        """A trainable positional table P = A B^T with r (n + d) parameters.
        Chapter: *How many numbers does a positional encoding need?*."""

        def __init__(self, n: int, d: int, r: int, init_std: float = 0.02):
            super().__init__()
            n, d = checks.integer(n, "n"), checks.integer(d, "d")
            r = checks.rank(r, n, d)
            self.n, self.d, self.r = n, d, r
            self.A = nn.Parameter(torch.randn(n, r) * init_std)
            self.B = nn.Parameter(torch.linalg.qr(torch.randn(d, r))[0])

        @classmethod
        def from_mds(
            cls, D: np.ndarray, d: int, r: int, scale: float = 1.0, seed: int = 0
        ) -> LowRankPositionalEncoding:
            """A = scale U_r Lambda_r^(1/2), rank-r classical MDS of D; B orthonormal.
            Chapter: *How many numbers does a positional encoding need?*."""
            coords = classical_mds(D, r).P * scale
            module = cls(coords.shape[0], d, r)
            gen = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                module.A.copy_(torch.as_tensor(coords, dtype=module.A.dtype))
                module.B.copy_(torch.linalg.qr(torch.randn(d, r, generator=gen))[0])
            return module

        def table(self) -> torch.Tensor:
            """P = A B^T. Chapter: *How many numbers does a positional encoding
            need?*."""
            return self.A @ self.B.T

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            """``x + P[:L]``. Chapter: *How many numbers does a positional encoding
            need?*."""
            L = x.shape[-2]
            if L > self.n:
                raise ValueError(
                    f"sequence length {L} exceeds the encoding's n={self.n} positions"
                )
            return x + self.table()[:L]

        @property
        def num_parameters(self) -> int:
            """r (n + d). Chapter: *How many numbers does a positional encoding
            need?*."""
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
    """Every encoding the book compares for n = len(D) positions and width d.
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    D = checks.distance_matrix(D)
    n = D.shape[0]
    d, n_heads = checks.integer(d, "d"), checks.integer(n_heads, "n_heads")
    checks.multiple(d, "d", n_heads, f"divisible by {n_heads=}", "change n_heads")
    # the computation
    d_head = d // n_heads
    mds = classical_mds(D, n)  # one eigendecomposition; every rank is a slice of it
    out = {"MDS, full rank": mds.P[:, : max(mds.effective_rank, 1)]}
    out.update({f"MDS, r = {r}": mds.P[:, :r] for r in ranks if r < n})
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

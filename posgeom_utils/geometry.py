"""The Hellinger geometry of positions, classical and metric MDS, stress, and order
statistics. Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from . import checks
from .settings import blas_threads

if TYPE_CHECKING:
    import pandas as pd


def _sqrt_rows(mu: Any) -> Any:
    """The entrywise square root of ``mu`` as float64, sparse when ``mu`` is."""
    if sp.issparse(mu):
        root = sp.csr_array(mu, dtype=np.float64, copy=True)
        root.data = np.sqrt(root.data)
        return root
    return np.sqrt(np.asarray(mu, dtype=np.float64))


def _dense(x: Any) -> np.ndarray:
    return x.toarray() if sp.issparse(x) else np.asarray(x)


def bhattacharyya(mu: Any, validate: bool = True) -> np.ndarray:
    """BC_ij = sum_v sqrt(mu_iv mu_jv), in [0, 1]. Chapter: *Positions in real text*."""
    if validate:
        checks.probability_rows(mu)
    # the computation
    root = _sqrt_rows(mu)
    bc = _dense(root @ root.T)
    norms = np.sqrt(np.clip(np.diag(bc), np.finfo(float).tiny, None))
    # rows summing to 1 +- rounding: identical rows give exactly 1
    bc = bc / np.outer(norms, norms)
    bc = np.clip((bc + bc.T) / 2, 0.0, 1.0)
    np.fill_diagonal(bc, 1.0)
    return bc


def hellinger_distances(mu: Any, validate: bool = True) -> np.ndarray:
    """The n x n Hellinger matrix D_H of the rows of ``mu`` (values in [0, 1], exact
    zero diagonal). Chapter: *Positions in real text*."""
    D = np.sqrt(np.clip(1.0 - bhattacharyya(mu, validate), 0.0, 1.0))
    np.fill_diagonal(D, 0.0)
    return D


def fisher_rao_distances(mu: Any, validate: bool = True) -> np.ndarray:
    """The Fisher-Rao geodesic distances 2 arccos(BC_ij), in [0, pi].
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    D = 2.0 * np.arccos(bhattacharyya(mu, validate))
    np.fill_diagonal(D, 0.0)
    return D


def pairwise_distances(P: np.ndarray, name: str = "P") -> np.ndarray:
    """Euclidean distances between the rows of ``P`` (n x d), via its centred Gram.
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    X = checks.finite_array(P, name)
    X = X - X.mean(axis=0)
    sq = np.einsum("ij,ij->i", X, X)
    D2 = sq[:, None] + sq[None, :] - 2.0 * (X @ X.T)
    D = np.sqrt(np.clip((D2 + D2.T) / 2, 0.0, None))
    np.fill_diagonal(D, 0.0)
    return D


def paired_distances(
    E: Any, D: Any, triangle: str = "upper"
) -> tuple[np.ndarray, np.ndarray]:
    """(e, t) entries of E and D (n x n) over pairs i < j (``upper``) or all (``full``).
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    E, D = checks.distance_matrix(E, "E"), checks.distance_matrix(D, "D")
    checks.same_shape(E, D, "E and D")
    if checks.choice(triangle, "triangle", ("upper", "full")) == "full":
        return E.ravel(), D.ravel()
    iu = np.triu_indices(D.shape[0], 1)
    return E[iu], D[iu]


def double_centred_gram(D: np.ndarray) -> np.ndarray:
    """B = -1/2 J D^2 J with J = I - 11^T / n ({prf:ref}`def-gram`).
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    D = checks.distance_matrix(D)
    # the computation
    D2 = D * D
    B = -0.5 * (D2 - D2.mean(axis=0)[None, :] - D2.mean(axis=1)[:, None] + D2.mean())
    return (B + B.T) / 2


def effective_rank(eigenvalues: np.ndarray, tol: float = 1e-9) -> int:
    """Count of eigenvalues above ``tol`` x the largest; 0 if that is rounding error.
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    lam = checks.finite_array(eigenvalues, "eigenvalues", ndim=1)
    tol = checks.number(tol, "tol", 0, 1, high_open=True)
    top = lam.max(initial=0.0)
    return int(np.sum(lam > tol * top)) if top > 1e-12 else 0  # distances are O(1)


@dataclass
class MDSResult:
    """Classical MDS of a distance matrix: coordinates and the full spectrum of B.
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""

    P: np.ndarray  # (n, r) coordinates, columns in decreasing eigenvalue order
    eigenvalues: np.ndarray  # all n eigenvalues of B, decreasing (negatives included)
    effective_rank: int  # eigenvalues above tol * largest
    tol: float

    @property
    def r(self) -> int:
        """Kept columns. Chapter: *The optimal encoding: classical MDS on Hellinger
        geometry*."""
        return self.P.shape[1]

    @property
    def negative_mass(self) -> float:
        """Sum |negative eigenvalues| / sum |eigenvalues|: 0 when D is Euclidean.
        Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
        lam = self.eigenvalues
        total = np.abs(lam).sum()
        return float(np.abs(lam[lam < 0]).sum() / total) if total > 0 else 0.0


def classical_mds(D: np.ndarray, r: int | None = None, tol: float = 1e-9) -> MDSResult:
    """Algorithm 1: top-``r`` coordinates of B = -1/2 J D^2 J (None: effective rank).
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    tol = checks.number(tol, "tol", 0, 1, high_open=True)
    # the computation
    B = double_centred_gram(D)
    r = checks.integer(r, "r", 1, B.shape[0], optional=True)
    # the thread count is configuration: POSGEOM_BLAS_THREADS (settings)
    with blas_threads():
        lam, U = np.linalg.eigh(B)
    lam, U = lam[::-1], U[:, ::-1]
    rank = effective_rank(lam, tol)
    k = max(rank, 1) if r is None else r
    P = U[:, :k] * np.sqrt(np.clip(lam[:k], 0.0, None))
    return MDSResult(P, lam, rank, tol)


def stress(P: np.ndarray, D: np.ndarray, scale: str = "raw") -> float:
    """Stress ({prf:ref}`def-stress`) of encoding ``P`` vs ``D``, ``fitted``: at the
    best scale. Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    D = checks.distance_matrix(D)
    P = np.asarray(P)
    ok = P.ndim == 2 and P.shape[0] == D.shape[0]
    checks.require(ok, "P", f"(n, d), one row per position of D ({len(D)})", P.shape)
    return stress_of_distances(
        pairwise_distances(P), D, checks.choice(scale, "scale", ("raw", "fitted"))
    )


def stress_of_distances(E: np.ndarray, D: np.ndarray, scale: str = "raw") -> float:
    """Normalised stress of a distance matrix ``E`` against ``D`` (their upper
    triangles). Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    checks.choice(scale, "scale", ("raw", "fitted"))
    # the computation
    e, t = paired_distances(E, D)
    denom = float(t @ t)
    if denom == 0:
        raise ValueError("D is all zeros: stress is undefined (all positions alike)")
    if scale == "fitted":
        ee = float(e @ e)
        e = e * (float(e @ t) / ee) if ee > 0 else e
    return float(np.sum((e - t) ** 2) / denom)


def best_scale(E: np.ndarray, D: np.ndarray) -> float:
    """The best scale s*. Chapter: *The optimal encoding: classical MDS on Hellinger
    geometry*."""
    e, t = paired_distances(E, D)
    if not np.any(e):
        raise ValueError("E is all zeros (every position at one point): no scale fits")
    return float(e @ t / (e @ e))


def smacof(
    D: np.ndarray,
    r: int,
    init: np.ndarray | None = None,
    max_iter: int = 300,
    eps: float = 1e-6,
) -> np.ndarray:
    """SMACOF in rank ``r`` from classical MDS (or ``init``), never above its start.
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    from sklearn.manifold import smacof as _smacof

    D = checks.distance_matrix(D)
    r = checks.integer(r, "r", 1, D.shape[0])
    # the computation
    start = classical_mds(D, r).P if init is None else np.asarray(init, float)
    if start.shape != (D.shape[0], r):
        raise ValueError(f"init must have shape ({D.shape[0]}, {r}), got {start.shape}")
    fixed = {"metric": True, "n_init": 1, "normalized_stress": False}
    P, _ = _smacof(D, n_components=r, init=start, max_iter=max_iter, eps=eps, **fixed)
    return P if stress(P, D) <= stress(start, D) else start


def is_circulant(D: np.ndarray, atol: float = 1e-10) -> bool:
    """Circulant D? Chapter: *The optimal encoding: classical MDS on Hellinger
    geometry*."""
    D = np.asarray(D)
    n = D.shape[0]
    idx = (np.arange(n)[None, :] - np.arange(n)[:, None]) % n
    return bool(np.allclose(D, D[0][idx], atol=atol))


def toeplitz_distances(f: np.ndarray) -> np.ndarray:
    """The stationary geometry of a line, D_ij = f[|i - j|], f(0) = 0.
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    f = checks.finite_array(f, "f", ndim=1)
    if f[0] != 0 or np.any(f < 0):
        raise ValueError("f must have f(0) = 0 and no negative value: it is a distance")
    # the computation
    i = np.arange(f.size)
    return f[np.abs(i[:, None] - i[None, :])]


def dct_cosine(n: int, k: int) -> np.ndarray:
    """The unit-norm DCT-II cosine cos(pi k (i + 1/2) / n), i < n.
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    n = checks.integer(n, "n")
    k = checks.integer(k, "k", 0, n - 1)
    c = np.cos(np.pi * k * (np.arange(n) + 0.5) / n)
    return c / np.linalg.norm(c)


def cosine_correlation(v: np.ndarray, k: int) -> float:
    """|Pearson correlation| of ``v`` with the DCT-II cosine of mode ``k`` >= 1.
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    v = checks.finite_array(v, "v", ndim=1)
    k = checks.integer(k, "k", fix="mode 0 is the constant")
    # the computation
    centred = v - v.mean()
    norm = np.linalg.norm(centred)
    if norm == 0:
        raise ValueError("v is constant: its correlation with a cosine is undefined")
    return float(abs(centred @ dct_cosine(v.size, k)) / norm)


def sign_changes(v: np.ndarray, tol: float = 1e-9) -> int:
    """How often ``v`` changes sign; entries within ``tol`` times max |v| of 0 are
    skipped. Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    v = checks.finite_array(v, "v", ndim=1)
    tol = checks.number(tol, "tol", 0, 1, high_open=True)
    kept = v[np.abs(v) > tol * np.abs(v).max(initial=0.0)]
    return int(np.sum(np.sign(kept[1:]) != np.sign(kept[:-1])))


def leading_mass(eigenvalues: np.ndarray, k: int) -> float:
    """Share of the positive eigenvalue mass of B in its ``k`` largest eigenvalues.
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    lam = np.sort(checks.finite_array(eigenvalues, "eigenvalues", ndim=1))[::-1]
    k = checks.integer(k, "k")
    positive = lam[lam > 0]
    if positive.size == 0:
        raise ValueError("B has no positive eigenvalue: every distance is 0")
    return float(positive[:k].sum() / positive.sum())


def stress_by_rank(D: np.ndarray, ranks: list[int]) -> pd.DataFrame:
    """Raw stress of classical MDS and of SMACOF at each ``r``, against the rank of B.
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    import pandas as pd

    D = checks.distance_matrix(D)
    # the computation
    rank = classical_mds(D).effective_rank
    rows = []
    for r in ranks:
        relation = "<" if r < rank else ("=" if r == rank else ">")
        classical, metric = stress(classical_mds(D, r).P, D), stress(smacof(D, r), D)
        rows.append((int(r), relation, classical, metric))
    columns = ["r", "r vs rank B", "classical MDS", "SMACOF"]
    return pd.DataFrame(rows, columns=columns).set_index("r")


@dataclass
class ViolationRate:
    """Result of :func:`monotonicity_violation_rate`: how often distances disagree with
    sequence distance. Chapter: *Are nearby positions encoded nearby?*."""

    rate: float
    comparisons: int  # comparisons counted (exact) or sampled
    exact: bool
    ci_low: float  # 95% interval (equal to rate when exact)
    ci_high: float
    kind: str


def _as_distances(X: np.ndarray, input_kind: str, near: float = 1e-3) -> np.ndarray:
    """``X`` as distances: itself, its rows' or (``auto``) whichever it plainly is; an
    error when it is within ``near`` (relative) of a distance matrix but is not one."""
    X = np.asarray(X, dtype=np.float64)
    checks.choice(input_kind, "input_kind", ("auto", "encoding", "distances"))
    # the computation
    if input_kind == "distances":
        return checks.distance_matrix(X, "D")
    if input_kind == "encoding" or X.ndim != 2 or X.shape[0] != X.shape[1]:
        return pairwise_distances(X)
    try:
        return checks.distance_matrix(X, "X")
    except ValueError as exc:
        tol = near * max(float(np.max(np.abs(X), initial=0.0)), 1e-300)
        off = (np.abs(X - X.T).max(), np.abs(np.diag(X)).max(), -X.min())
        if np.all(np.isfinite(X)) and max(off) <= tol:
            raise ValueError(
                f"X is within {near:g} (relative) of a distance matrix but not one "
                f"({exc}): pass input_kind='distances' once it is one (e.g. (X + X.T) "
                "/ 2, clipped at 0, zero diagonal) or input_kind='encoding' for rows"
            ) from None
    return pairwise_distances(X)


def _triplet_score(
    E: np.ndarray, R: np.ndarray, eps_e: float, eps_r: float
) -> tuple[float, int]:
    """Triplets (i; j, k) with R_ij < R_ik but E_ij > E_ik (ties one half), and their
    number."""
    off = ~np.eye(E.shape[0], dtype=bool)
    score, total = 0.0, 0
    for i in range(E.shape[0]):
        closer = (
            (R[i][None, :] - R[i][:, None] > eps_r) & off[i][:, None] & off[i][None, :]
        )
        diff = E[i][:, None] - E[i][None, :]  # [j, k]: E_ij - E_ik
        score += np.sum(closer & (diff > eps_e)) + 0.5 * np.sum(
            closer & (np.abs(diff) <= eps_e)
        )
        total += int(closer.sum())
    return score, total


def _pair_counts(D: np.ndarray, eps: float) -> tuple[float, int]:
    """Violations (ties one half) and comparisons over every pair of pairs (n <= 64)."""
    n = checks.integer(len(D), "n", None, 64, fix="exact 'pairs' or pass sample=...")
    i, j = np.triu_indices(n, 1)
    o, e = j - i, D[i, j]
    closer = o[:, None] < o[None, :]
    diff = e[:, None] - e[None, :]
    ties = closer & (np.abs(diff) <= eps)
    return np.sum(closer & (diff > eps)) + 0.5 * np.sum(ties), int(closer.sum())


def _sampled_distances(
    D: np.ndarray, kind: str, sample: int, seed: int
) -> tuple[np.ndarray, ...]:
    """Distances of the nearer and the farther pair in ``sample`` seeded comparisons."""
    triplets = kind == "triplets"
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(D), (3 if triplets else 4, 4 * sample))
    i1, j1, i2, j2 = draws[[0, 1, 0, 2]] if triplets else draws  # triplets: i1 = i2
    o1, o2 = np.abs(i1 - j1), np.abs(i2 - j2)
    keep = (o1 > 0) & (o2 > 0) & (o1 != o2)
    i1, j1, i2, j2, o1, o2 = (x[keep][:sample] for x in (i1, j1, i2, j2, o1, o2))
    near = o1 < o2
    return np.where(near, D[i1, j1], D[i2, j2]), np.where(near, D[i2, j2], D[i1, j1])


def monotonicity_violation_rate(
    X: np.ndarray,
    kind: str = "triplets",
    input_kind: str = "auto",
    sample: int | None = None,
    seed: int = 0,
    tie_tol: float = 1e-9,
) -> ViolationRate:
    """Share of comparisons (``triplets`` or ``pairs``, exact or ``sample``d) in which a
    farther position is closer in ``X``; ties count one half. Chapter: *Are nearby
    positions encoded nearby?*."""
    checks.choice(kind, "kind", ("triplets", "pairs"))
    sample = checks.integer(sample, "sample", optional=True)
    tie_tol = checks.number(tie_tol, "tie_tol", 0)
    # the computation
    D = _as_distances(X, input_kind)
    eps = tie_tol * float(np.max(D, initial=0.0))
    checks.integer(D.shape[0], "n", 3, fix="pass at least 3 positions to compare")
    if sample is None:
        lags = np.abs(np.subtract.outer(np.arange(len(D)), np.arange(len(D))))
        triplets = kind == "triplets"
        violations, total = (
            _triplet_score(D, lags, eps, 0) if triplets else _pair_counts(D, eps)
        )
        rate = float(violations / total)
        return ViolationRate(rate, total, True, rate, rate, kind)
    near_d, far_d = _sampled_distances(D, kind, sample, seed)
    score = (near_d - far_d > eps) + 0.5 * (np.abs(near_d - far_d) <= eps)
    m, rate = score.size, float(score.mean())
    half = 1.96 * float(score.std(ddof=1)) / np.sqrt(m) if m > 1 else float("nan")
    return ViolationRate(rate, m, False, float(rate - half), float(rate + half), kind)


def _centred(M: np.ndarray, name: str) -> np.ndarray:
    """``M``, columns centred; ``ValueError`` if its rows are equal up to rounding."""
    Mc = M - M.mean(0)
    if np.abs(Mc).max() <= 1e-12 * np.abs(M).max():
        raise ValueError(f"CKA is undefined: {name} has equal rows (zero variance)")
    return Mc


def linear_cka(X: np.ndarray, Y: np.ndarray) -> float:
    """Linear CKA ``||Yc^T Xc||_F^2 / (||Xc^T Xc||_F ||Yc^T Yc||_F)`` of two
    representations of the same n points (rows), never NaN: bad input raises.
    Chapter: *Positions layer by layer*."""
    X, Y = checks.finite_array(X, "X"), checks.finite_array(Y, "Y")
    if X.shape[0] != Y.shape[0] or X.shape[0] < 2:
        raise ValueError(
            f"X and Y must have the same n >= 2 rows, got {X.shape} and {Y.shape}"
        )
    # the computation
    Xc, Yc = _centred(X, "X"), _centred(Y, "Y")
    # Gram-matrix form (n x n): cheaper than d x d' when n < d, as for positions
    Kx, Ky = Xc @ Xc.T, Yc @ Yc.T
    denom = np.linalg.norm(Kx) * np.linalg.norm(Ky)
    value = float(np.sum(Kx * Ky) / denom) if denom > 0 else float("nan")
    if not np.isfinite(value):  # the Gram matrices under- or overflow
        norms = f"{np.linalg.norm(Xc):.3g} and {np.linalg.norm(Yc):.3g}"
        raise ValueError(f"CKA is not finite for X and Y (norms {norms}): rescale them")
    return value


def tie_robust(x: np.ndarray, digits: int = 9) -> np.ndarray:
    """``x`` rounded to ``digits`` significant digits, so that exact ties survive BLAS
    rounding. Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    x = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise ValueError("x contains NaN or inf: check the distances it came from")
    top = float(np.abs(x).max()) if x.size else 0.0
    if top == 0.0:
        return x.copy()
    exponent = digits - int(np.floor(np.log10(top))) - 1
    return np.round(x, exponent)


def stress_table(D: np.ndarray, encodings: dict[str, np.ndarray]) -> pd.DataFrame:
    """Per encoding: rank, raw and fitted stress vs ``D``, best scale, Spearman rho of
    distances. Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    import pandas as pd
    from scipy.stats import spearmanr

    D = checks.distance_matrix(D)
    # the computation
    iu = np.triu_indices(D.shape[0], 1)
    rows = []
    for name, P in encodings.items():
        E = pairwise_distances(P, name=name)
        centred = np.asarray(P) - np.mean(P, axis=0)
        rank = int(np.linalg.matrix_rank(centred, tol=1e-9 * max(1.0, np.abs(P).max())))
        e, t = tie_robust(E[iu]), tie_robust(D[iu])
        rho = spearmanr(e, t).statistic if np.ptp(E[iu]) > 0 else np.nan
        raw, fitted = (stress_of_distances(E, D, scale) for scale in ("raw", "fitted"))
        rows.append((name, rank, raw, fitted, best_scale(E, D), float(rho)))
    columns = [
        "encoding",
        "rank",
        "raw stress",
        "fitted stress",
        "best scale",
        "Spearman rho",
    ]
    return pd.DataFrame(rows, columns=columns).set_index("encoding")


def _position_gram(P: np.ndarray) -> np.ndarray:
    P = checks.finite_array(P, "P")
    checks.require(len(P) >= 3, "P", "an (n, d) table of n >= 3 positions", P.shape)
    return P @ P.T


def dot_monotonicity(P: np.ndarray) -> float:
    """Wang et al.'s (2021) monotonicity: share of triples (j, k on one side of i,
    |i - j| < |i - k|) with p_i . p_j > p_i . p_k, ties 1/2. Chapter: *Related work*."""
    G = _position_gram(P)
    n = len(G)
    i, j, k = np.meshgrid(np.arange(n), np.arange(n), np.arange(n), indexing="ij")
    near, far = np.abs(i - j), np.abs(i - k)
    keep = (np.sign(j - i) * np.sign(k - i) > 0) & (near < far)
    diff = G[i[keep], j[keep]] - G[i[keep], k[keep]]
    return float(((diff > 0) + 0.5 * (diff == 0)).mean())


def translation_invariance(P: np.ndarray) -> float:
    """Wang et al.'s (2021) translation invariance: share of the variance of p_i . p_j
    (i != j) explained by the offset j - i. Chapter: *Related work*."""
    G = _position_gram(P)
    n = len(G)
    offsets = np.subtract.outer(np.arange(n), np.arange(n))
    off = offsets != 0
    values, groups = G[off], offsets[off] + n
    total = values.var()
    if total == 0:
        return 1.0
    sums = np.bincount(groups, weights=values, minlength=2 * n)
    counts = np.bincount(groups, minlength=2 * n)
    means = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    within = ((values - means[groups]) ** 2).mean()
    return float(1.0 - within / total)

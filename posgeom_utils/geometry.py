"""The Hellinger geometry of positions, classical and metric MDS, and the stress of an
encoding.

Chapter: *Positions in real text* (affinities between neighbouring positions) and
*MDS optimality*.

With the 1/sqrt(2) convention, d_H(p, q) = ||sqrt(p) - sqrt(q)|| / sqrt(2) =
sqrt(1 - BC(p, q)), where BC(p, q) = sum_v sqrt(p_v q_v) is the Bhattacharyya
coefficient, so values lie in [0, 1]. All n^2 coefficients come from one matrix product
sqrt(mu) sqrt(mu)^T (sparse when mu is sparse).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .settings import blas_threads

ArrayLike = np.ndarray | sp.sparray | sp.spmatrix


def check_distributions(mu: ArrayLike, name: str = "mu", atol: float = 1e-8) -> None:
    """Raise ``ValueError`` unless ``mu`` is a 2-D array of finite, non-negative rows
    summing to 1.

    Chapter: *Positions in real text*.
    """
    shape = getattr(mu, "shape", None)
    if shape is None or len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
        raise ValueError(
            f"{name} must be a 2-D (n, V) array of probability rows, got shape {shape}"
        )
    values = mu.data if sp.issparse(mu) else np.asarray(mu)
    if not np.all(np.isfinite(values)):
        raise ValueError(
            f"{name} contains NaN or inf: every row must be a probability vector"
        )
    if np.any(values < 0):
        raise ValueError(
            f"{name} has negative entries: every row must be a probability vector"
        )
    sums = np.asarray(mu.sum(axis=1)).ravel()
    bad = np.flatnonzero(np.abs(sums - 1) > atol * max(1, shape[1]) ** 0.5)
    if bad.size:
        raise ValueError(
            f"{name} row {bad[0]} sums to {sums[bad[0]]:.6g}, not 1: normalise the "
            "rows (PositionalMarginals.mu() does) before computing distances"
        )


def bhattacharyya(mu: ArrayLike, validate: bool = True) -> np.ndarray:
    """The n x n Bhattacharyya coefficients BC_ij = sum_v sqrt(mu_iv mu_jv), in [0, 1].

    Chapter: *Positions in real text*.
    """
    if validate:
        check_distributions(mu)
    if sp.issparse(mu):
        root = sp.csr_array(mu, dtype=np.float64, copy=True)
        root.data = np.sqrt(root.data)
        bc = (root @ root.T).toarray()
    else:
        root = np.sqrt(np.asarray(mu, dtype=np.float64))
        bc = root @ root.T
    norms = np.sqrt(np.clip(np.diag(bc), np.finfo(float).tiny, None))
    bc = bc / np.outer(
        norms, norms
    )  # rows summing to 1 +- rounding: identical rows give exactly 1
    bc = np.clip((bc + bc.T) / 2, 0.0, 1.0)
    np.fill_diagonal(bc, 1.0)
    return bc


def hellinger_distances(mu: ArrayLike, validate: bool = True) -> np.ndarray:
    """The n x n Hellinger matrix D_H of the rows of ``mu`` (values in [0, 1], exact
    zero diagonal).

    Chapter: *MDS optimality*.
    """
    D = np.sqrt(np.clip(1.0 - bhattacharyya(mu, validate), 0.0, 1.0))
    np.fill_diagonal(D, 0.0)
    return D


def fisher_rao_distances(mu: ArrayLike, validate: bool = True) -> np.ndarray:
    """The Fisher-Rao geodesic distances 2 arccos(BC_ij) on the probability simplex
    (values in [0, pi]).

    Chapter: *MDS optimality*.
    """
    D = 2.0 * np.arccos(bhattacharyya(mu, validate))
    np.fill_diagonal(D, 0.0)
    return D


# -------------------------------------------------------------------- distance matrices


def check_distance_matrix(
    D: np.ndarray, name: str = "D", atol: float = 1e-9
) -> np.ndarray:
    """Validate a square, symmetric, finite, non-negative matrix with zero diagonal;
    return it as float64.

    Chapter: *MDS optimality*.
    """
    D = np.asarray(D, dtype=np.float64)
    if D.ndim != 2 or D.shape[0] != D.shape[1] or D.shape[0] < 1:
        raise ValueError(
            f"{name} must be a square (n, n) distance matrix, got shape {D.shape}"
        )
    if not np.all(np.isfinite(D)):
        raise ValueError(f"{name} contains NaN or inf")
    if np.any(D < 0):
        raise ValueError(f"{name} has negative entries: distances are non-negative")
    scale = max(1.0, float(np.abs(D).max()))
    if not np.allclose(D, D.T, atol=atol * scale, rtol=0):
        raise ValueError(
            f"{name} is not symmetric (max |D - D^T| = {np.abs(D - D.T).max():.3g})"
        )
    if np.any(np.abs(np.diag(D)) > atol * scale):
        raise ValueError(
            f"{name} has a non-zero diagonal: the distance of a position to itself is 0"
        )
    return D


def pairwise_distances(P: np.ndarray, name: str = "P") -> np.ndarray:
    """Euclidean distances between the rows of an encoding ``P`` (n x d), exact zero
    diagonal.

    Computed from centred coordinates through the Gram matrix (one matrix product).
    Chapter: *MDS optimality* (also *Positions layer by layer*,
    *Do distinct positions get distinct vectors?*).
    """
    P = np.asarray(P, dtype=np.float64)
    if P.ndim != 2 or P.shape[0] < 1:
        raise ValueError(f"{name} must be a 2-D (n, d) encoding, got shape {P.shape}")
    if not np.all(np.isfinite(P)):
        raise ValueError(f"{name} contains NaN or inf")
    X = P - P.mean(axis=0)
    sq = np.einsum("ij,ij->i", X, X)
    D2 = sq[:, None] + sq[None, :] - 2.0 * (X @ X.T)
    D = np.sqrt(np.clip((D2 + D2.T) / 2, 0.0, None))
    np.fill_diagonal(D, 0.0)
    return D


def double_centred_gram(D: np.ndarray) -> np.ndarray:
    """B = -1/2 J D^2 J with J = I - 11^T / n ({prf:ref}`def-gram`).
    Chapter: *MDS optimality*."""
    D = check_distance_matrix(D)
    D2 = D * D
    B = -0.5 * (D2 - D2.mean(axis=0)[None, :] - D2.mean(axis=1)[:, None] + D2.mean())
    return (B + B.T) / 2


#: a spectrum whose largest eigenvalue is below this is rounding error: rank 0
#: (distances are O(1))
ABSOLUTE_EIGENVALUE_FLOOR = 1e-12


def check_tol(tol: object, name: str = "tol") -> float:
    """Validate a relative eigenvalue threshold 0 <= tol < 1; return it as a float.
    Chapter: *MDS optimality*."""
    if (
        isinstance(tol, (bool, np.bool_))
        or not isinstance(tol, (int, float, np.integer, np.floating))
        or not np.isfinite(tol)
        or not 0 <= tol < 1
    ):
        raise ValueError(
            f"{name} must be a finite number in [0, 1) (a fraction of the largest "
            f"eigenvalue), got {name}={tol!r}: pass e.g. {name}=1e-9"
        )
    return float(tol)


def effective_rank(eigenvalues: np.ndarray, tol: float = 1e-9) -> int:
    """Number of eigenvalues above ``tol`` times the largest one; 0 when the largest is
    rounding error.

    Chapter: *MDS optimality*.
    """
    lam = np.asarray(eigenvalues, dtype=np.float64)
    if not np.all(np.isfinite(lam)):
        raise ValueError(
            "eigenvalues contain NaN or inf: the matrix they came from was not finite; "
            "check the distances (check_distance_matrix) before decomposing"
        )
    tol = check_tol(tol)
    top = lam.max(initial=0.0)
    return int(np.sum(lam > tol * top)) if top > ABSOLUTE_EIGENVALUE_FLOOR else 0


def check_rank(r: object, n: int, name: str = "r") -> int:
    """Validate an embedding dimension 1 <= r <= n. Chapter: *MDS optimality*."""
    if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or not 1 <= r <= n:
        raise ValueError(f"{name} must be an integer in [1, n={n}], got {r!r}")
    return int(r)


@dataclass
class MDSResult:
    """Classical MDS of a distance matrix: coordinates and the full spectrum of B.
    Chapter: *MDS optimality*."""

    P: np.ndarray  # (n, r) coordinates, columns in decreasing eigenvalue order
    eigenvalues: (
        np.ndarray
    )  # all n eigenvalues of B, decreasing (negative ones included)
    effective_rank: int  # eigenvalues above tol * largest
    tol: float

    @property
    def r(self) -> int:
        """The number of coordinates kept (columns of ``P``). Chapter: *Low rank*."""
        return self.P.shape[1]

    @property
    def negative_mass(self) -> float:
        """Sum of |negative eigenvalues| over sum of |eigenvalues|: 0 when D is
        Euclidean.

        Chapter: *MDS optimality*.
        """
        lam = self.eigenvalues
        total = np.abs(lam).sum()
        return float(np.abs(lam[lam < 0]).sum() / total) if total > 0 else 0.0


def classical_mds(D: np.ndarray, r: int | None = None, tol: float = 1e-9) -> MDSResult:
    """Algorithm 1 (Torgerson-Gower): the top-``r`` coordinates of B = -1/2 J D^2 J.

    ``r=None`` keeps every eigenvalue above ``tol`` times the largest
    (the effective rank). Directions with non-positive eigenvalues get zero coordinates.
    Chapter: *MDS optimality*.
    """
    tol = check_tol(tol)
    B = double_centred_gram(D)
    n = B.shape[0]
    if r is not None:
        check_rank(r, n)
    with (
        blas_threads()
    ):  # the thread count is configuration: POSGEOM_BLAS_THREADS (settings)
        lam, U = np.linalg.eigh(B)
    lam, U = lam[::-1], U[:, ::-1]
    rank = effective_rank(lam, tol)
    k = max(rank, 1) if r is None else int(r)
    P = U[:, :k] * np.sqrt(np.clip(lam[:k], 0.0, None))
    return MDSResult(P, lam, rank, tol)


def stress(P: np.ndarray, D: np.ndarray, scale: str = "raw") -> float:
    """The paper's normalised stress of encoding ``P`` against ``D``
    ({prf:ref}`def-stress`).

    ``scale="raw"`` compares distances as they are; ``scale="fitted"`` first multiplies
    ``P`` by the single best factor s* = sum(E D) / sum(E^2) (E: the encoding's
    distances), so fitted <= raw always. Chapter: *MDS optimality*.
    """
    D = check_distance_matrix(D)
    P = np.asarray(P)
    if P.ndim != 2 or P.shape[0] != D.shape[0]:
        raise ValueError(
            f"P must have one row per position: D is {D.shape[0]} x {D.shape[0]}, "
            f"P has shape {P.shape}"
        )
    if scale not in ("raw", "fitted"):
        raise ValueError(f"scale must be 'raw' or 'fitted', got {scale!r}")
    return stress_of_distances(pairwise_distances(P), D, scale)


def stress_of_distances(E: np.ndarray, D: np.ndarray, scale: str = "raw") -> float:
    """Normalised stress of a distance matrix ``E`` against ``D`` (for encodings given
    as distances).

    Both must be square matrices of the same shape; only their upper triangles are read.
    Chapter: *MDS optimality*.
    """
    E, D = np.asarray(E, dtype=np.float64), np.asarray(D, dtype=np.float64)
    for name, M in (("E", E), ("D", D)):
        if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] < 1:
            raise ValueError(
                f"{name} must be a square (n, n) distance matrix, got shape {M.shape}: "
                "pass pairwise distances, e.g. pairwise_distances(P) for an encoding P"
            )
    if E.shape != D.shape:
        raise ValueError(
            "E and D must have the same shape (one row and column per position), got "
            f"{E.shape} and {D.shape}: compare distances over the same n positions"
        )
    iu = np.triu_indices(D.shape[0], 1)
    e, t = E[iu], D[iu]
    if not (np.all(np.isfinite(e)) and np.all(np.isfinite(t))):
        raise ValueError(
            f"{'E' if not np.all(np.isfinite(e)) else 'D'} contains NaN or inf: "
            f"stress needs finite distances"
        )
    denom = float(t @ t)
    if denom == 0:
        raise ValueError(
            "D is all zeros: stress is undefined (every position has the same "
            "distribution)"
        )
    if scale == "fitted":
        ee = float(e @ e)
        e = e * (float(e @ t) / ee) if ee > 0 else e
    elif scale != "raw":
        raise ValueError(f"scale must be 'raw' or 'fitted', got {scale!r}")
    return float(np.sum((e - t) ** 2) / denom)


def best_scale(E: np.ndarray, D: np.ndarray) -> float:
    """The factor s* minimising sum_{i<j} (s E_ij - D_ij)^2.
    Chapter: *MDS optimality*."""
    iu = np.triu_indices(np.asarray(D).shape[0], 1)
    e, t = np.asarray(E)[iu], np.asarray(D)[iu]
    return float(e @ t / (e @ e)) if float(e @ e) > 0 else 0.0


def smacof(
    D: np.ndarray,
    r: int,
    init: np.ndarray | None = None,
    max_iter: int = 300,
    eps: float = 1e-6,
) -> np.ndarray:
    """Metric MDS (SMACOF, scikit-learn) at dimension ``r``, started from classical MDS
    by default.

    Classical MDS minimises strain, not stress; SMACOF lowers the stress monotonically
    from its start, and the last line returns the start if the solver ever ends
    higher: "never above the start" holds by construction, not as a finding.
    Chapter: *MDS optimality*.
    """
    from sklearn.manifold import smacof as _smacof

    D = check_distance_matrix(D)
    r = check_rank(r, D.shape[0])
    start = (
        classical_mds(D, r).P if init is None else np.asarray(init, dtype=np.float64)
    )
    if start.shape != (D.shape[0], r):
        raise ValueError(f"init must have shape ({D.shape[0]}, {r}), got {start.shape}")
    P, _ = _smacof(
        D,
        metric=True,
        n_components=r,
        init=start,
        n_init=1,
        max_iter=max_iter,
        eps=eps,
        normalized_stress=False,
    )
    # the majorisation never increases stress; guard against a solver that stops early
    # on a worse point
    return P if stress(P, D) <= stress(start, D) else start


def is_circulant(D: np.ndarray, atol: float = 1e-10) -> bool:
    """True when D_ij depends only on (j - i) mod n. Chapter: *MDS optimality*."""
    D = np.asarray(D)
    n = D.shape[0]
    idx = (np.arange(n)[None, :] - np.arange(n)[:, None]) % n
    return bool(np.allclose(D, D[0][idx], atol=atol))


# ------------------------------------------------------------- positions on a line


def toeplitz_distances(f: np.ndarray) -> np.ndarray:
    """The stationary geometry of a line: D_ij = f[|i - j|], from the lag profile
    ``f`` = (f(0), ..., f(n - 1)) with f(0) = 0.

    Compare :func:`is_circulant`, the stationary geometry of a circle, on which lag
    n - 1 is also lag 1. Chapter: *MDS optimality*.
    """
    f = np.asarray(f, dtype=np.float64)
    if f.ndim != 1 or f.size < 1 or not np.all(np.isfinite(f)):
        raise ValueError(
            "f must be a finite 1-D lag profile (f(0), ..., f(n - 1)), got shape "
            f"{f.shape}"
        )
    if f[0] != 0 or np.any(f < 0):
        raise ValueError("f must have f(0) = 0 and no negative value: it is a distance")
    i = np.arange(f.size)
    return f[np.abs(i[:, None] - i[None, :])]


def dct_cosine(n: int, k: int) -> np.ndarray:
    """The DCT-II cosine cos(pi k (i + 1/2) / n), i = 0, ..., n - 1, of unit norm.

    For 1 <= k < n it sums to 0 and changes sign exactly k times along the positions.
    Chapter: *MDS optimality*.
    """
    for name, value in (("n", n), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{name} must be an integer, got {value!r}")
    if n < 1 or not 0 <= k < n:
        raise ValueError(f"need n >= 1 and 0 <= k < n, got n={n}, k={k}")
    c = np.cos(np.pi * k * (np.arange(n) + 0.5) / n)
    return c / np.linalg.norm(c)


def cosine_correlation(v: np.ndarray, k: int) -> float:
    """|Pearson correlation| of ``v`` with the DCT-II cosine of mode ``k`` >= 1 (see
    :func:`dct_cosine`): 1 when ``v`` is that cosine up to scale and offset.

    The sign is dropped because an eigenvector's sign is arbitrary.
    Chapter: *MDS optimality*.
    """
    v = np.asarray(v, dtype=np.float64)
    if v.ndim != 1 or not np.all(np.isfinite(v)):
        raise ValueError(f"v must be a finite 1-D vector, got shape {v.shape}")
    if k < 1:
        raise ValueError(f"k must be >= 1 (mode 0 is the constant), got {k!r}")
    centred = v - v.mean()
    norm = np.linalg.norm(centred)
    if norm == 0:
        raise ValueError("v is constant: its correlation with a cosine is undefined")
    return float(abs(centred @ dct_cosine(v.size, k)) / norm)


def sign_changes(v: np.ndarray, tol: float = 1e-9) -> int:
    """How many times ``v`` changes sign along its entries; entries of magnitude at
    most ``tol`` times max |v| count as zeros (rounding) and are skipped.

    Chapter: *MDS optimality*.
    """
    v = np.asarray(v, dtype=np.float64)
    if v.ndim != 1 or not np.all(np.isfinite(v)):
        raise ValueError(f"v must be a finite 1-D vector, got shape {v.shape}")
    tol = check_tol(tol)
    kept = v[np.abs(v) > tol * np.abs(v).max(initial=0.0)]
    return int(np.sum(np.sign(kept[1:]) != np.sign(kept[:-1])))


def leading_mass(eigenvalues: np.ndarray, k: int) -> float:
    """Share of the positive eigenvalue mass of B carried by its ``k`` largest
    eigenvalues: (sum of the top k positive ones) / (sum of all positive ones).

    1 for every k >= rank B when B is positive semi-definite; for k = 1 it says how
    much of the geometry a one-dimensional (ALiBi-like) encoding can hold.
    Chapter: *MDS optimality*.
    """
    lam = np.sort(np.asarray(eigenvalues, dtype=np.float64))[::-1]
    if not np.all(np.isfinite(lam)):
        raise ValueError("eigenvalues contain NaN or inf")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    positive = lam[lam > 0]
    if positive.size == 0:
        raise ValueError("B has no positive eigenvalue: every distance is 0")
    return float(positive[:k].sum() / positive.sum())


def stress_by_rank(D: np.ndarray, ranks: list[int]) -> "pd.DataFrame":
    """Raw stress of classical MDS and of SMACOF (started from it) at each ``r`` in
    ``ranks``, with the rank of B, one row per r.

    Chapter: *MDS optimality*.
    """
    import pandas as pd

    D = check_distance_matrix(D)
    rank = classical_mds(D).effective_rank
    rows = []
    for r in ranks:
        classical = stress(classical_mds(D, r).P, D)
        rows.append(
            {
                "r": int(r),
                "r vs rank B": "<" if r < rank else ("=" if r == rank else ">"),
                "classical MDS": classical,
                "SMACOF": stress(smacof(D, r), D),
            }
        )
    return pd.DataFrame(rows).set_index("r")


# -------------------------------------------------------------------- monotonicity


@dataclass
class ViolationRate:
    """How often distances disagree with sequence distance (see
    :func:`monotonicity_violation_rate`).

    Chapter: *Monotonicity*.
    """

    rate: float
    comparisons: int  # comparisons counted (exact) or sampled
    exact: bool
    ci_low: float  # 95% interval (equal to rate when exact)
    ci_high: float
    kind: str


def _as_distances(X: np.ndarray, input_kind: str) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if input_kind not in ("auto", "encoding", "distances"):
        raise ValueError(
            f"input_kind must be 'auto', 'encoding' or 'distances', got {input_kind!r}"
        )
    looks_like_D = (
        X.ndim == 2
        and X.shape[0] == X.shape[1]
        and np.allclose(X, X.T)
        and np.allclose(np.diag(X), 0)
        and np.all(X >= 0)
    )
    if input_kind == "distances" or (input_kind == "auto" and looks_like_D):
        return check_distance_matrix(X, "D")
    return pairwise_distances(X)


def monotonicity_violation_rate(
    X: np.ndarray,
    kind: str = "triplets",
    input_kind: str = "auto",
    sample: int | None = None,
    seed: int = 0,
    tie_tol: float = 1e-9,
) -> ViolationRate:
    """Fraction of comparisons in which a farther position (in sequence distance) is
    closer in ``X``.

    ``X`` is an encoding (n x d) or a distance matrix (n x n; detected when square,
    symmetric, non-negative with zero diagonal, or forced with ``input_kind``).
    ``kind="triplets"``: anchors i and pairs j, k != i with |i - j| < |i - k|; a
    violation is d(i, j) > d(i, k). ``kind="pairs"``: pairs of pairs (i, j), (k, l) with
    |i - j| < |k - l|; a violation is d(i, j) > d(k, l). Ties in distance count one
    half, so a constant or a random geometry scores 0.5 and a geometry monotone in
    |i - j| scores 0. Two distances are tied when they differ by at most ``tie_tol``
    times the largest distance, so rounding noise (an encoding that reproduces ``D`` to
    1e-15) does not decide a comparison. Exact (vectorised, chunked) by default for
    triplets; ``sample`` draws that many random comparisons (seeded) and returns a 95%
    interval. Chapter: *Monotonicity*.
    """
    if kind not in ("triplets", "pairs"):
        raise ValueError(f"kind must be 'triplets' or 'pairs', got {kind!r}")
    if sample is not None and (
        isinstance(sample, bool)
        or not isinstance(sample, (int, np.integer))
        or sample < 1
    ):
        raise ValueError(f"sample must be a positive integer or None, got {sample!r}")
    if not np.isfinite(tie_tol) or tie_tol < 0:
        raise ValueError(f"tie_tol must be a finite number >= 0, got {tie_tol!r}")
    D = _as_distances(X, input_kind)
    eps = float(tie_tol) * float(np.max(D, initial=0.0))
    n = D.shape[0]
    if n < 3:
        raise ValueError(f"need at least 3 positions to compare distances, got n={n}")
    idx = np.arange(n)
    if sample is None and kind == "triplets":
        violations, total = 0.0, 0
        offsets = np.abs(idx[None, :] - idx[:, None])  # |i - j|
        for start in range(
            0, n, 32
        ):  # chunks of anchors bound the memory to 32 n^2 booleans
            anchors = idx[start : start + 32]
            o, e = offsets[anchors], D[anchors]  # (a, n)
            valid = o > 0
            closer = (
                (o[:, :, None] < o[:, None, :]) & valid[:, :, None] & valid[:, None, :]
            )
            diff = e[:, :, None] - e[:, None, :]
            violations += np.sum(closer & (diff > eps)) + 0.5 * np.sum(
                closer & (np.abs(diff) <= eps)
            )
            total += int(np.sum(closer))
        rate = violations / total
        return ViolationRate(float(rate), total, True, float(rate), float(rate), kind)
    if sample is None:  # exact pairs of pairs, for small n only
        if n > 64:
            raise ValueError(
                f"the exact 'pairs' variant is limited to n <= 64 (got n={n}): pass "
                "sample=..."
            )
        i, j = np.triu_indices(n, 1)
        o, e = j - i, D[i, j]
        closer = o[:, None] < o[None, :]
        diff = e[:, None] - e[None, :]
        total = int(closer.sum())
        rate = (
            np.sum(closer & (diff > eps)) + 0.5 * np.sum(closer & (np.abs(diff) <= eps))
        ) / total
        return ViolationRate(float(rate), total, True, float(rate), float(rate), kind)
    rng = np.random.default_rng(seed)
    if kind == "triplets":
        a, b, c = rng.integers(0, n, (3, 4 * sample))
        ob, oc = np.abs(a - b), np.abs(a - c)
        keep = (ob > 0) & (oc > 0) & (ob != oc)
        a, b, c, ob, oc = (
            a[keep][:sample],
            b[keep][:sample],
            c[keep][:sample],
            ob[keep][:sample],
            oc[keep][:sample],
        )
        near_d = np.where(ob < oc, D[a, b], D[a, c])
        far_d = np.where(ob < oc, D[a, c], D[a, b])
    else:
        i1, j1, i2, j2 = rng.integers(0, n, (4, 4 * sample))
        o1, o2 = np.abs(i1 - j1), np.abs(i2 - j2)
        keep = (o1 > 0) & (o2 > 0) & (o1 != o2)
        i1, j1, i2, j2, o1, o2 = (x[keep][:sample] for x in (i1, j1, i2, j2, o1, o2))
        near_d = np.where(o1 < o2, D[i1, j1], D[i2, j2])
        far_d = np.where(o1 < o2, D[i2, j2], D[i1, j1])
    score = (near_d - far_d > eps) + 0.5 * (np.abs(near_d - far_d) <= eps)
    m = score.size
    rate = float(score.mean())
    half = 1.96 * float(score.std(ddof=1)) / np.sqrt(m) if m > 1 else float("nan")
    return ViolationRate(
        rate, int(m), False, float(rate - half), float(rate + half), kind
    )


def linear_cka(X: np.ndarray, Y: np.ndarray) -> float:
    """Linear centred kernel alignment of two representations of the same n points
    (rows).

    ``CKA = ||Yc^T Xc||_F^2 / (||Xc^T Xc||_F ||Yc^T Yc||_F)`` with column-centred
    ``Xc``, ``Yc``: 1 for representations equal up to an orthogonal map, a translation
    and a global scale, 0 for orthogonal (unrelated) Gram matrices. The widths may
    differ. Never NaN: a non-finite input or a representation whose rows are all equal
    (zero variance, up to rounding) raises ``ValueError``.
    Chapter: *Positions layer by layer*.
    """
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    if X.ndim != 2 or Y.ndim != 2 or X.shape[0] != Y.shape[0] or X.shape[0] < 2:
        raise ValueError(
            f"X and Y must be (n, d) and (n, d') with the same n >= 2, got {X.shape} "
            f"and {Y.shape}"
        )
    for name, M in (("X", X), ("Y", Y)):
        if not np.all(np.isfinite(M)):
            raise ValueError(
                f"{name} contains NaN or inf: linear_cka needs finite representations "
                f"(check the hidden states or means it came from)"
            )
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    for name, M, Mc in (("X", X, Xc), ("Y", Y, Yc)):
        # all rows equal: centring leaves only rounding noise (~eps max|M|), and CKA
        # would be 0/0 or noise
        if np.abs(Mc).max() <= _ZERO_VARIANCE * np.abs(M).max():
            raise ValueError(
                "CKA is undefined for a representation with all rows equal (zero "
                f"variance): {name} has the same row at every one of its {M.shape[0]} "
                "points"
            )
    # Gram-matrix form (n x n): cheaper than d x d' when n < d, as for positions
    Kx, Ky = Xc @ Xc.T, Yc @ Yc.T
    denom = np.linalg.norm(Kx) * np.linalg.norm(Ky)
    value = float(np.sum(Kx * Ky) / denom) if denom > 0 else float("nan")
    if not np.isfinite(
        value
    ):  # underflow or overflow of the Gram matrices: rescale the inputs
        raise ValueError(
            "CKA is not finite for X and Y (their Gram matrices under- or overflow, "
            f"norms {np.linalg.norm(Xc):.3g} and {np.linalg.norm(Yc):.3g}): rescale X "
            "and Y"
        )
    return value


#: max |centred| / max |M| at or below this: the rows are equal up to rounding
#: (CKA undefined)
_ZERO_VARIANCE = 1e-12


def tie_robust(x: np.ndarray, digits: int = 9) -> np.ndarray:
    """``x`` rounded to ``digits`` significant digits relative to its largest magnitude,
    so that values equal in exact arithmetic (e.g. sinusoidal distances at equal lags)
    stay tied whatever the BLAS rounding.

    Rank statistics (Spearman's rho, violation rates) are computed on these values:
    rounding noise at the 1e-16 level would otherwise break exact ties differently on
    different CPUs. Chapter: *MDS optimality*.
    """
    x = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise ValueError(
            "x must be finite (found NaN or inf): check the distances it came from"
        )
    top = float(np.abs(x).max()) if x.size else 0.0
    if top == 0.0:
        return x.copy()
    exponent = digits - int(np.floor(np.log10(top))) - 1
    return np.round(x, exponent)


def stress_table(D: np.ndarray, encodings: dict[str, np.ndarray]) -> "pd.DataFrame":
    """One row per encoding: rank, raw and scale-fitted stress against ``D``, the fitted
    scale, and the Spearman correlation of its pairwise distances with D's.
    Chapter: *MDS optimality*.
    """
    import pandas as pd
    from scipy.stats import spearmanr

    D = check_distance_matrix(D)
    iu = np.triu_indices(D.shape[0], 1)
    rows = []
    for name, P in encodings.items():
        E = pairwise_distances(P, name=name)
        rows.append(
            {
                "encoding": name,
                "rank": int(
                    np.linalg.matrix_rank(
                        np.asarray(P) - np.mean(P, axis=0),
                        tol=1e-9 * max(1.0, np.abs(P).max()),
                    )
                ),
                "raw stress": stress_of_distances(E, D, "raw"),
                "fitted stress": stress_of_distances(E, D, "fitted"),
                "best scale": best_scale(E, D),
                "Spearman rho": (
                    float(spearmanr(tie_robust(E[iu]), tie_robust(D[iu])).statistic)
                    if np.ptp(E[iu]) > 0
                    else float("nan")
                ),
            }
        )
    return pd.DataFrame(rows).set_index("encoding")


def _position_gram(P: np.ndarray) -> np.ndarray:
    P = np.asarray(P, dtype=np.float64)
    if P.ndim != 2 or P.shape[0] < 3 or not np.isfinite(P).all():
        raise ValueError(f"P must be a finite (n, d) table with n >= 3 positions, got shape {P.shape}")
    return P @ P.T


def dot_monotonicity(P: np.ndarray) -> float:
    """Monotonicity of a position table in the sense of Wang et al. (2021): over every triple of positions
    ``i``, ``j``, ``k`` with ``j`` and ``k`` on the same side of ``i`` and ``|i - j| < |i - k|``, the
    fraction in which the nearer position has the larger dot product, ``p_i . p_j > p_i . p_k`` (ties
    count one half). 1 for a table whose similarity falls with distance in every direction, about 0.5 for a
    random one. Chapter: *Related work* (and *Monotonicity* for the distance version)."""
    G = _position_gram(P)
    n = len(G)
    i, j, k = np.meshgrid(np.arange(n), np.arange(n), np.arange(n), indexing="ij")
    near, far = np.abs(i - j), np.abs(i - k)
    same_side = np.sign(j - i) * np.sign(k - i) > 0
    keep = same_side & (near < far)
    diff = G[i[keep], j[keep]] - G[i[keep], k[keep]]
    return float(((diff > 0) + 0.5 * (diff == 0)).mean())


def translation_invariance(P: np.ndarray) -> float:
    """Translation invariance of a position table in the sense of Wang et al. (2021): the share of the
    variance of the off-diagonal dot products ``p_i . p_j`` explained by the offset ``j - i`` alone (1 when
    every dot product depends only on the offset, as for sinusoids; near 0 for a random table).
    Chapter: *Related work*."""
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

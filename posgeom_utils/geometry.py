"""The Hellinger geometry of positions: distances between the rows mu_i of an n x V matrix.

Chapter: *Positions in real text* (affinities between neighbouring positions) and *MDS optimality*.

With the 1/sqrt(2) convention, d_H(p, q) = ||sqrt(p) - sqrt(q)|| / sqrt(2) = sqrt(1 - BC(p, q)), where
BC(p, q) = sum_v sqrt(p_v q_v) is the Bhattacharyya coefficient, so values lie in [0, 1]. All n^2
coefficients come from one matrix product sqrt(mu) sqrt(mu)^T (sparse when mu is sparse).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

ArrayLike = np.ndarray | sp.sparray | sp.spmatrix


def check_distributions(mu: ArrayLike, name: str = "mu", atol: float = 1e-8) -> None:
    """Raise ``ValueError`` unless ``mu`` is a 2-D array of finite, non-negative rows summing to 1."""
    shape = getattr(mu, "shape", None)
    if shape is None or len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
        raise ValueError(f"{name} must be a 2-D (n, V) array of probability rows, got shape {shape}")
    values = mu.data if sp.issparse(mu) else np.asarray(mu)
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{name} contains NaN or inf: every row must be a probability vector")
    if np.any(values < 0):
        raise ValueError(f"{name} has negative entries: every row must be a probability vector")
    sums = np.asarray(mu.sum(axis=1)).ravel()
    bad = np.flatnonzero(np.abs(sums - 1) > atol * max(1, shape[1]) ** 0.5)
    if bad.size:
        raise ValueError(f"{name} row {bad[0]} sums to {sums[bad[0]]:.6g}, not 1: normalise the rows "
                         f"(PositionalMarginals.mu() does) before computing distances")


def bhattacharyya(mu: ArrayLike, validate: bool = True) -> np.ndarray:
    """The n x n Bhattacharyya coefficients BC_ij = sum_v sqrt(mu_iv mu_jv), in [0, 1]."""
    if validate:
        check_distributions(mu)
    if sp.issparse(mu):
        root = sp.csr_array(mu, dtype=np.float64, copy=True)
        root.data = np.sqrt(root.data)
        bc = (root @ root.T).toarray()
    else:
        root = np.sqrt(np.asarray(mu, dtype=np.float64))
        bc = root @ root.T
    bc = np.clip((bc + bc.T) / 2, 0.0, 1.0)
    np.fill_diagonal(bc, 1.0)
    return bc


def hellinger_distances(mu: ArrayLike, validate: bool = True) -> np.ndarray:
    """The n x n Hellinger matrix D_H of the rows of ``mu`` (values in [0, 1], exact zero diagonal).

    Chapter: *MDS optimality*.
    """
    D = np.sqrt(np.clip(1.0 - bhattacharyya(mu, validate), 0.0, 1.0))
    np.fill_diagonal(D, 0.0)
    return D


def fisher_rao_distances(mu: ArrayLike, validate: bool = True) -> np.ndarray:
    """The Fisher-Rao geodesic distances 2 arccos(BC_ij) on the probability simplex (values in [0, pi]).

    Chapter: *MDS optimality*.
    """
    D = 2.0 * np.arccos(bhattacharyya(mu, validate))
    np.fill_diagonal(D, 0.0)
    return D

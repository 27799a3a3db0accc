"""The lazy regime run to convergence: the positional table alone trained in the masked
model linearised at a zero table, on the population gradient. Chapter: *Are nearby
positions encoded nearby?*. With logits ``z_i = z_0 + J p_i`` (linearised at the mask
embedding) and independent positions, each row follows
``p_i <- p_i - lr J^T (softmax(z_0 + J p_i) - mu_i)``: the first step is linear in
``mu_i`` (the L2, kernel-mean geometry), the fixed point matches ``log mu_i`` up to a
constant where ``J`` reaches every logit vector (the log-ratio geometry)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .checks import integer, number, probability_rows, require


@dataclass(frozen=True)
class LazyFlow:
    """``tables[k]`` (n x d) at ``steps[k]``, ``loss_gap[k]``: mean cross-entropy minus
    the mean entropy of ``mu``. Chapter: *Are nearby positions encoded nearby?*."""

    steps: np.ndarray
    tables: np.ndarray
    loss_gap: np.ndarray


def linearised_table_flow(
    mu: np.ndarray,
    J: np.ndarray,
    z0: np.ndarray,
    lr: float,
    steps: int,
    records: int = 40,
) -> LazyFlow:
    """Gradient descent from a zero table on the population cross-entropy of the
    linearised model (``J``: V x d logit Jacobian at the mask embedding, ``z0``: its
    logits), recorded at ``records`` log-spaced steps. Chapter: *Are nearby positions
    encoded nearby?*."""
    mu = np.asarray(mu, dtype=np.float64)
    probability_rows(mu, "mu")
    J, z0 = np.asarray(J, dtype=np.float64), np.asarray(z0, dtype=np.float64)
    ok = J.shape[0] == mu.shape[1] and z0.shape == (mu.shape[1],)
    shapes = f"V x d and z0 of length V = {mu.shape[1]} (the columns of mu)"
    require(ok, "J", shapes, (J.shape, z0.shape))
    lr, steps = number(lr, "lr", 0, low_open=True), integer(steps, "steps")
    keep = np.unique(np.geomspace(1, steps, integer(records, "records", 2)).astype(int))
    floor = -np.sum(mu * np.log(np.where(mu > 0, mu, 1.0)), axis=1).mean()
    P = np.zeros((mu.shape[0], J.shape[1]))
    tables, gaps = [], []
    for step in range(1, steps + 1):
        Z = z0 + P @ J.T
        Z -= Z.max(axis=1, keepdims=True)
        S = np.exp(Z)
        S /= S.sum(axis=1, keepdims=True)
        P = P - lr * (S - mu) @ J
        if step in keep:
            Z = z0 + P @ J.T
            log_S = Z - Z.max(axis=1, keepdims=True)
            log_S -= np.log(np.exp(log_S).sum(axis=1, keepdims=True))
            gaps.append(float(-(mu * log_S).sum(axis=1).mean() - floor))
            tables.append(P.copy())
    return LazyFlow(keep, np.stack(tables), np.array(gaps))

"""Checks for the exercises of *Do distinct positions get distinct vectors?*.

Chapter: *Do distinct positions get distinct vectors?*. The checks recompute the relative
separation (smallest pairwise distance over the RMS row norm) and the closest pair of a table with
:func:`posgeom_utils.geometry.pairwise_distances`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posgeom_utils.geometry import pairwise_distances
from posgeom_utils.teaching import Verdict, close, verdict

__all__ = ["check_circle_separation", "check_closest_pair"]


def _relative_separation(table: np.ndarray) -> float:
    """Smallest distance between two rows of ``table`` over the RMS row norm."""
    table = np.asarray(table, dtype=np.float64)
    D = pairwise_distances(table)
    rms = np.sqrt((table ** 2).sum(1).mean())
    return float(D[np.triu_indices(len(table), 1)].min() / rms)


def _circle(n: int) -> np.ndarray:
    """``n`` equally spaced points on the unit circle of R^2, one per row."""
    angle = 2 * np.pi * np.arange(n) / n
    return np.stack([np.cos(angle), np.sin(angle)], axis=1)


def _table(net: Any) -> np.ndarray:
    """The learned position table of a ``PositionalTransformer`` (or an array) as float64."""
    table = net.positional_table() if hasattr(net, "positional_table") else net
    if hasattr(table, "detach"):
        table = table.detach().cpu().numpy()
    table = np.asarray(table, dtype=np.float64)
    if table.ndim != 2 or table.shape[0] < 2:
        raise ValueError(f"need a table with at least two rows, got shape {table.shape}")
    return table


def _closest_pair(table: np.ndarray) -> tuple[int, int]:
    """The two rows of ``table`` at the smallest distance, as (i, j) with i < j."""
    E = pairwise_distances(table)
    iu = np.triu_indices(len(table), 1)
    k = int(np.argmin(E[iu]))
    return int(iu[0][k]), int(iu[1][k])


def check_circle_separation(answer: Any, synthetic_n: int) -> Verdict:
    """Exercise *Positions on a circle*: ``answer`` is the relative separation of
    ``synthetic_n`` equally spaced positions on a circle centred at the origin.
    Chapter: *Do distinct positions get distinct vectors?*."""
    label = "ex-separation-circle"
    if answer is None:
        return verdict(label, None)
    try:
        expected = _relative_separation(_circle(int(synthetic_n)))
    except (TypeError, ValueError) as err:
        return verdict(label, False, f"The check could not run on these arguments: {err}")
    number = not isinstance(answer, (str, bytes, bool, np.bool_)) and np.ndim(answer) == 0
    ok = close(answer, expected, rtol=1e-6) if number else False
    return verdict(label, ok,
                   "One number, independent of the radius: the smallest distance is between "
                   "neighbours on the circle (a chord), and every row has the same norm.")


def check_closest_pair(answer: Any, net: Any) -> Verdict:
    """Exercise *The closest positions*: ``answer`` is the pair (i, j) of positions whose
    vectors in the learned table of ``net`` are closest. Chapter: *Do distinct positions get
    distinct vectors?*."""
    label = "ex-separation-closest"
    if answer is None:
        return verdict(label, None)
    if isinstance(answer, (str, bytes, dict)) or np.ndim(answer) != 1 or len(answer) != 2:
        return verdict(label, False, "Give two positions, e.g. (i, j).")
    values = np.asarray(answer)
    if values.dtype.kind not in "iu":
        return verdict(label, False, "Give the two positions as integers (0-based), e.g. (i, j).")
    try:
        expected = _closest_pair(_table(net))
    except (AttributeError, TypeError, ValueError) as err:
        return verdict(label, False, f"The check could not run on these arguments: {err}")
    pair = tuple(sorted(int(v) for v in values))
    return verdict(label, pair == expected,
                   "Compute all pairwise distances of the table (e.g. with "
                   "`pairwise_distances`), ignore the diagonal, and take the smallest; "
                   "positions are 0-based.")

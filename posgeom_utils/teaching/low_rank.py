"""Checks for the exercises of *How many numbers does a positional encoding need?*.

Chapter: *Low rank*. The checks recompute the break-even rank of the factorisation P = A B^T
with :func:`posgeom_utils.encodings.lowrank_parameter_count`, and the share of the spectrum of B
held by its top eigenvalues with :func:`posgeom_utils.geometry.classical_mds`.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from posgeom_utils.encodings import lowrank_parameter_count
from posgeom_utils.geometry import classical_mds
from posgeom_utils.teaching import Verdict, verdict

__all__ = ["check_breakeven", "check_energy_rank", "ENERGY_SHARE"]

#: the share of the (positive) spectrum of B asked for in the exercise *Rank for 90% of the trace*
ENERGY_SHARE = 0.9


def _as_int(answer: Any) -> int | None:
    """``answer`` as an int when it is an integer number (1, 1.0, np.int64(1)); else None."""
    if isinstance(answer, (bool, np.bool_, str, bytes)) or np.ndim(answer) != 0:
        return None
    try:
        value = float(answer)
    except (TypeError, ValueError):
        return None
    return int(value) if np.isfinite(value) and value == int(value) else None


def _breakeven(n: int, d: int) -> int:
    """The largest r with r (n + d) < n d (0 when none)."""
    r = (n * d - 1) // (n + d)
    assert lowrank_parameter_count(n, d, r) < n * d <= lowrank_parameter_count(n, d, r + 1)
    return int(r)


def _energy_rank(D: np.ndarray, share: float = ENERGY_SHARE) -> int:
    """The smallest r whose top r eigenvalues of B hold ``share`` of the positive spectrum."""
    lam = np.clip(classical_mds(D).eigenvalues, 0.0, None)
    cumulative = np.cumsum(lam) / lam.sum()
    return int(np.argmax(cumulative >= share)) + 1


def check_breakeven(answer: Any, n: int, d: int) -> Verdict:
    """Exercise *Break-even rank*: ``answer`` is the largest rank r for which P = A B^T, with
    A (n x r) and B (d x r), stores fewer numbers than a free n x d table. Chapter: *Low rank*."""
    label = "ex-lowrank-breakeven"
    if answer is None:
        return verdict(label, None)
    r = _as_int(answer)
    if r is None:
        return verdict(label, False, "Give one whole number r.")
    try:
        n, d = int(n), int(d)
        if n < 1 or d < 1:
            raise ValueError(f"n and d must be positive, got n={n}, d={d}")
        expected = _breakeven(n, d)
    except (TypeError, ValueError) as err:
        return verdict(label, False, f"The check could not run on these arguments: {err}")
    return verdict(label, r == expected,
                   "Solve r (n + d) < n d for the largest whole r: the inequality is strict, "
                   "so at r = n d / (n + d) the two counts are equal and nothing is saved.")


def check_energy_rank(answer: Any, D_H: Mapping[str, np.ndarray], name: str) -> Verdict:
    """Exercise *Rank for 90% of the trace*: ``answer`` is the smallest r whose top r
    eigenvalues of B = -1/2 J D^2 J, for D = ``D_H[name]``, hold at least 90% of the sum of its
    positive eigenvalues. Chapter: *Low rank*."""
    label = "ex-lowrank-energy"
    if answer is None:
        return verdict(label, None)
    r = _as_int(answer)
    if r is None:
        return verdict(label, False, "Give one whole number r.")
    try:
        expected = _energy_rank(D_H[name])
    except (KeyError, TypeError, ValueError, IndexError) as err:
        return verdict(label, False, f"The check could not run on these arguments: {err!r}")
    return verdict(label, r == expected,
                   "Clip the negative eigenvalues to zero, divide the cumulative sum by the total, "
                   "and count how many eigenvalues it takes to reach nine tenths (ranks "
                   "start at one, Python indices at zero).")



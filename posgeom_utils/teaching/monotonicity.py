"""Checks for the exercises of *Are nearby positions encoded nearby?*.

Chapter: *Are nearby positions encoded nearby?*. Each check recomputes the expected violation rate
with :func:`posgeom_utils.geometry.monotonicity_violation_rate` from the chapter's own variables and
compares the student's number with it; the hints describe the method, never the value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posgeom_utils.geometry import monotonicity_violation_rate
from posgeom_utils.teaching import Verdict, close, verdict

__all__ = ["BRUTE_FORCE_POSITIONS", "check_brute_force", "check_random_walk", "random_walk_table"]

#: the brute-force exercise counts the triplets of the first this many positions of D
BRUTE_FORCE_POSITIONS = 10


def _is_number(answer: Any) -> bool:
    """Whether ``answer`` is one real number (a Python or NumPy scalar, not a bool)."""
    if isinstance(answer, np.ndarray) and answer.ndim == 0:  # a 0-d array, e.g. np.mean(...)
        return answer.dtype.kind in "iuf"
    return isinstance(answer, (int, float, np.integer, np.floating)) and not isinstance(
        answer, (bool, np.bool_))


def random_walk_table(n: int, d: int, seed: int) -> np.ndarray:
    """The random-walk table of the exercise *A random table that is not chance*: row i is the sum
    of the first i + 1 rows of an (n, d) standard normal matrix drawn by
    ``np.random.default_rng(seed)``. Chapter: *Are nearby positions encoded nearby?*."""
    steps = np.random.default_rng(int(seed)).standard_normal((int(n), int(d)))
    return np.cumsum(steps, axis=0)


def check_brute_force(answer: Any, D: Any) -> Verdict:
    """Exercise *Counting triplets by hand*: ``answer`` is the triplet violation rate of the
    distance matrix ``D[:10, :10]`` (the first ten positions of the chapter's Hellinger geometry,
    all of them when there are fewer), counted with loops. Chapter: *Are nearby positions encoded
    nearby?*."""
    label = "ex-mono-brute"
    if answer is None:
        return verdict(label, None)
    if not _is_number(answer):
        return verdict(label, False, "Give one number, the fraction of violated triplets "
                                     "(a float between 0 and 1), not an array or an object.")
    try:
        m = BRUTE_FORCE_POSITIONS
        expected = monotonicity_violation_rate(np.asarray(D, dtype=np.float64)[:m, :m],
                                               input_kind="distances").rate
    except (TypeError, ValueError, IndexError) as err:
        return verdict(label, False, f"The check could not run on these arguments: {err}")
    return verdict(label, close(answer, expected, rtol=1e-9, atol=1e-12),
                   "Loop over anchors i and ordered pairs (j, k), both different from i, with "
                   "|i - j| < |i - k| (strictly); count a violation when E[i, j] > E[i, k] and one "
                   "half when the two differ by at most 1e-9 times the largest entry; divide by "
                   "the number of triplets. Use only the first 10 positions.")


def check_random_walk(answer: Any, n: Any, d: Any, seed: Any) -> Verdict:
    """Exercise *A random table that is not chance*: ``answer`` is the triplet violation rate of
    the random-walk table ``np.cumsum(np.random.default_rng(seed).standard_normal((n, d)),
    axis=0)`` (:func:`random_walk_table`). Chapter: *Are nearby positions encoded nearby?*."""
    label = "ex-mono-random-walk"
    if answer is None:
        return verdict(label, None)
    if not _is_number(answer):
        return verdict(label, False, "Give one number, the fraction of violated triplets "
                                     "(a float between 0 and 1), not an array or an object.")
    try:
        expected = monotonicity_violation_rate(random_walk_table(n, d, seed)).rate
    except (TypeError, ValueError, OverflowError) as err:
        return verdict(label, False, f"The check could not run on these arguments: {err}")
    return verdict(label, close(answer, expected, rtol=1e-9, atol=1e-12),
                   "Draw the steps with np.random.default_rng(seed).standard_normal((n, d)) "
                   "(a fresh generator, exactly this call), take the cumulative sum down the "
                   "positions (axis=0), and score that table by triplets.")

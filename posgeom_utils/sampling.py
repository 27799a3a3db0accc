"""Sampling noise: the split-half corrected Hellinger estimate, bootstrap and Student-t
intervals. Chapter: *Positions in real text*."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from . import checks
from .geometry import _dense, _sqrt_rows, hellinger_distances
from .marginals import PositionalMarginals, TextCounts, _check_ids, _incidence

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class SplitHalfHellinger:
    """The corrected squared Hellinger matrix ``H2`` of two halves, the noise ``floor``
    per position and the pooled ``plug_in_H2``. Chapter: *Positions in real text*."""

    H2: np.ndarray
    floor: np.ndarray
    plug_in_H2: np.ndarray

    @property
    def D(self) -> np.ndarray:
        """``sqrt(max(H2, 0))``. Chapter: *Positions in real text*."""
        D = np.sqrt(np.clip(self.H2, 0.0, None))
        np.fill_diagonal(D, 0.0)
        return D


def split_half_hellinger(
    mu_a: np.ndarray, mu_b: np.ndarray, weight_a: float = 0.5
) -> SplitHalfHellinger:
    """Noise-corrected squared Hellinger distances from two disjoint halves ``mu_a``,
    ``mu_b``. Chapter: *Positions in real text*."""
    checks.probability_rows(mu_a, "mu_a")
    checks.probability_rows(mu_b, "mu_b")
    checks.same_shape(mu_a, mu_b, "mu_a and mu_b")
    weight_a = checks.fraction(weight_a, "weight_a")
    # the computation
    a, b = _sqrt_rows(mu_a), _sqrt_rows(mu_b)
    cross = 1.0 - _dense(a @ b.T)  # ||a_i - b_j||^2 / 2, rows of unit norm
    cross = (cross + cross.T) / 2
    floor = np.diag(cross).copy()
    H2 = cross - (floor[:, None] + floor[None, :]) / 2
    np.fill_diagonal(H2, 0.0)
    pooled = _sqrt_rows(weight_a * _dense(mu_a) + (1 - weight_a) * _dense(mu_b))
    plug_in = np.clip(1.0 - pooled @ pooled.T, 0.0, 1.0)
    np.fill_diagonal(plug_in, 0.0)
    return SplitHalfHellinger(H2, floor, plug_in)


def _reached(m: PositionalMarginals) -> PositionalMarginals:
    if np.any(m.support == 0):
        raise ValueError(
            "a position is reached by no text in this sample: count fewer positions"
        )
    return m


def split_texts(num_texts: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """0/1 weights of two seeded halves. Chapter: *Positions in real text*."""
    num_texts = checks.integer(num_texts, "num_texts", 2, fix="split at least 2 texts")
    order = np.random.default_rng(seed).permutation(num_texts)
    a = np.zeros(num_texts, dtype=np.int64)
    a[order[: num_texts // 2]] = 1
    return a, 1 - a


def corrected_hellinger(
    counts: TextCounts, seed: int = 0, weights: np.ndarray | None = None
) -> SplitHalfHellinger:
    """:func:`split_half_hellinger` on a seeded random split of ``counts``' texts
    (optionally resampled by integer ``weights``). Chapter: *Positions in real text*."""
    w = np.ones(counts.num_texts, dtype=np.int64) if weights is None else weights
    half_a, half_b = split_texts(counts.num_texts, seed)
    ma, mb = (_reached(counts.marginals(w * half)) for half in (half_a, half_b))
    mu_a, mu_b = (
        sp.csr_array(sp.diags_array(1.0 / m.support) @ m.counts) for m in (ma, mb)
    )
    return split_half_hellinger(mu_a, mu_b, float((w * half_a).sum() / max(w.sum(), 1)))


def bootstrap_weights(
    num_texts: int, replicates: int = 200, seed: int = 0
) -> Iterator[np.ndarray]:
    """Yield ``replicates`` seeded resamples of ``num_texts`` texts as integer weights
    (with replacement, summing to ``num_texts``). Chapter: *Positions in real text*."""
    replicates = checks.integer(replicates, "replicates", 2)
    num_texts = checks.integer(num_texts, "num_texts")
    rng = np.random.default_rng(seed)
    p = np.full(num_texts, 1.0 / num_texts)
    for _ in range(replicates):
        yield rng.multinomial(num_texts, p)


def bootstrap(
    counts: TextCounts,
    statistic: Callable[[PositionalMarginals], float | np.ndarray],
    replicates: int = 200,
    seed: int = 0,
) -> np.ndarray:
    """``statistic`` of ``replicates`` seeded resamples of the texts (the independent
    units). Chapter: *Positions in real text*."""
    weights = bootstrap_weights(counts.num_texts, replicates, seed)
    return np.asarray([statistic(counts.marginals(w)) for w in weights], float)


def _replicates(values: np.ndarray, level: float) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    if values.shape[0] < 2 or not np.all(np.isfinite(values)):
        raise ValueError("values must hold at least 2 finite bootstrap replicates")
    checks.fraction(level, "level")
    return values


def percentile_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The percentile interval of ``values``. Chapter: *Positions in real text*."""
    tail = 100 * (1 - level) / 2
    return tuple(np.percentile(_replicates(values, level), [tail, 100 - tail], axis=0))


def basic_interval(
    values: np.ndarray, estimate: float | np.ndarray, level: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Basic bootstrap interval ``2 estimate - q_high, 2 estimate - q_low``, moving
    against the replicates' shift. Chapter: *Positions in real text*."""
    low, high = percentile_interval(values, level)
    estimate = np.asarray(estimate, dtype=np.float64)
    return 2 * estimate - high, 2 * estimate - low


def normal_interval(
    values: np.ndarray, estimate: float | np.ndarray, level: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """The normal bootstrap interval ``estimate -+ z sd(values)``, centred on the
    estimate. Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    from scipy.stats import norm

    values = _replicates(values, level)
    half = float(norm.ppf(0.5 + level / 2)) * values.std(axis=0, ddof=1)
    estimate = np.asarray(estimate, dtype=np.float64)
    return estimate - half, estimate + half


def t_interval(
    values: Sequence[float], level: float = 0.95, bounds: bool = False
) -> tuple[float, ...]:
    """Mean and Student-t half-width of ``values`` over seeds (``bounds``: mean, low,
    high). Chapter: *Why a Transformer needs positions*."""
    from scipy import stats

    checks.fraction(level, "level")
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        raise ValueError("values is empty: pass at least one number")
    mean, half = float(values.mean()), float("nan")
    if values.size > 1:
        t = stats.t.ppf(0.5 + level / 2, values.size - 1)
        half = float(t * values.std(ddof=1) / np.sqrt(values.size))
    return (mean, mean - half, mean + half) if bounds else (mean, half)


def text_counts_from_ids(ids: np.ndarray, V: int) -> TextCounts:
    """The per-text counts of equal-length token-id sequences (an N x n array).
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    ids = _check_ids(ids, V)
    N, n = ids.shape
    flat = (np.arange(n, dtype=np.int64)[None, :] * V + ids.astype(np.int64)).ravel()
    lengths = np.full(N, n, dtype=np.int64)
    params = {"n": n, "V": V, "source": "ids"}
    return _incidence(flat, np.repeat(np.arange(N), n), lengths, lengths, n, V, params)


def plug_in_hellinger(m: PositionalMarginals) -> np.ndarray:
    """``hellinger_distances(m.mu())`` over the tokens seen only, fast enough for a
    bootstrap. Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    counts = sp.csr_array(_reached(m).counts, dtype=np.float64)
    used = np.unique(counts.indices)  # the tokens seen at some position
    return hellinger_distances(
        counts[:, used].toarray() / m.support[:, None], validate=False
    )


@dataclass
class BootstrapNumbers:
    """The ``table`` (estimate, low, high, sd, shift) and ``replicates`` of named
    numbers. Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""

    table: pd.DataFrame
    replicates: pd.DataFrame


def bootstrap_numbers(
    counts: TextCounts,
    numbers: Callable[[PositionalMarginals], dict[str, float]],
    replicates: int = 50,
    seed: int = 0,
    level: float = 0.95,
) -> BootstrapNumbers:
    """Named numbers of a corpus (``numbers``: counts -> dict) with normal bootstrap
    intervals. Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    import pandas as pd

    point = numbers(counts.marginals())
    keys = list(point)

    def ordered(m: PositionalMarginals) -> list[float]:
        row = numbers(m)
        return [row[k] for k in keys]

    values = bootstrap(counts, ordered, replicates, seed)
    estimate = np.array([point[k] for k in keys], dtype=np.float64)
    low, high = normal_interval(values, estimate, level)
    sd, shift = values.std(axis=0, ddof=1), values.mean(axis=0) - estimate
    columns = {"estimate": estimate, "low": low, "high": high, "sd": sd, "shift": shift}
    table = pd.DataFrame(columns, index=pd.Index(keys, name="number"))
    return BootstrapNumbers(table, pd.DataFrame(values, columns=keys))


def difference_interval(
    boot: BootstrapNumbers, a: str, b: str, level: float = 0.95, ratio: bool = False
) -> tuple[float, float, float]:
    """Estimate and paired normal interval of bootstrapped ``a - b`` (or ``a / b``).
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    op = operator.truediv if ratio else operator.sub
    values = op(boot.replicates[a], boot.replicates[b]).to_numpy()
    estimate = op(boot.table.loc[a, "estimate"], boot.table.loc[b, "estimate"])
    low, high = normal_interval(values, estimate, level)
    return float(estimate), float(low), float(high)

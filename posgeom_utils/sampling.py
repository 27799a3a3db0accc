"""Sampling noise in a corpus's positional geometry: a noise-corrected Hellinger
estimate from two halves of the texts, and bootstrap intervals over texts.

Chapter: *Positions in real text*.

The plug-in distance ``d_H(mu_hat_i, mu_hat_j)`` between two sparsely observed
distributions is biased upward: two samples of the *same* distribution are at a
positive distance, close to 1 when the vocabulary is much larger than the sample. Write
``a_i = sqrt(mu_hat_i^A)`` and ``b_j = sqrt(mu_hat_j^B)`` for the square-root
frequency vectors of positions ``i`` and ``j`` counted on two disjoint random halves
``A`` and ``B`` of the texts. The halves are independent, so

    E ||a_i - b_j||^2 = ||E a_i - E b_j||^2 + tr Var a_i + tr Var b_j,

and the same identity with ``j = i`` says that ``f_i = ||a_i - b_i||^2``, the distance
between the two halves' estimates of *one* position, estimates ``tr Var a_i + tr Var
b_i``: the noise floor of position ``i``. Subtracting the mean of the two floors from
the cross-fitted squared distance removes the variance terms,

    H2_ij = (||a_i - b_j||^2 + ||a_j - b_i||^2) / 4 - (f_i + f_j) / 4,

an estimate of ``1 - BC`` (``d_H^2``) whose remaining error is the Jensen shrinkage of
``E sqrt(mu_hat)`` towards 0 on rare tokens. Under the null (two positions with the same
distribution) it is centred at 0 while the plug-in is not; as the counts grow it
converges to the truth, like the plug-in, but from much closer (tested against
synthetic corpora with known ``mu`` in ``tests/test_sampling.py``). No estimator is
unbiased for ``d_H`` itself: ``sqrt(p)`` has no unbiased estimator from multinomial
counts, and far below one sample per token type no method recovers the rare part of
the distance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .geometry import check_distributions
from .marginals import PositionalMarginals, TextCounts


@dataclass
class SplitHalfHellinger:
    """The noise-corrected squared Hellinger matrix of two halves and the noise floor.

    ``H2`` is the n x n corrected estimate of ``d_H^2`` (symmetric, zero diagonal; may
    be slightly negative where the true distance is below the noise); ``floor[i]`` is
    ``d_H^2`` between the two halves' estimates of position ``i`` (what two samples of
    one distribution of that size look like); ``plug_in_H2`` is the plug-in ``d_H^2`` of
    the two halves together. Chapter: *Positions in real text*.
    """

    H2: np.ndarray
    floor: np.ndarray
    plug_in_H2: np.ndarray

    @property
    def D(self) -> np.ndarray:
        """The corrected distances ``sqrt(max(H2, 0))`` (zero diagonal).

        Chapter: *Positions in real text*.
        """
        D = np.sqrt(np.clip(self.H2, 0.0, None))
        np.fill_diagonal(D, 0.0)
        return D


def _sqrt_rows(mu) -> np.ndarray | sp.csr_array:
    if sp.issparse(mu):
        root = sp.csr_array(mu, dtype=np.float64, copy=True)
        root.data = np.sqrt(root.data)
        return root
    return np.sqrt(np.asarray(mu, dtype=np.float64))


def _dense(x) -> np.ndarray:
    return x.toarray() if sp.issparse(x) else np.asarray(x)


def split_half_hellinger(mu_a, mu_b, weight_a: float = 0.5) -> SplitHalfHellinger:
    """The noise-corrected squared Hellinger distances from the positional
    distributions ``mu_a`` and ``mu_b`` (n x V, dense or sparse) of two disjoint
    random halves of the texts (module docstring: the estimator and its derivation).

    ``weight_a`` is the share of the texts in half ``a`` (for the plug-in of the
    pooled halves only). Chapter: *Positions in real text*.
    """
    for mu, name in ((mu_a, "mu_a"), (mu_b, "mu_b")):
        check_distributions(mu, name)
    if mu_a.shape != mu_b.shape:
        raise ValueError(
            f"mu_a and mu_b must have the same shape (n, V), got {mu_a.shape} and "
            f"{mu_b.shape}: count both halves with the same n and tokenizer"
        )
    if not 0 < weight_a < 1:
        raise ValueError(f"weight_a must be in (0, 1), got {weight_a!r}")
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


def _mu(m: PositionalMarginals) -> sp.csr_array:
    if np.any(m.support == 0):
        raise ValueError(
            "a position is reached by no text in this sample: count fewer positions "
            "(n) or raise min_count"
        )
    return sp.csr_array(sp.diags_array(1.0 / m.support) @ m.counts)


def split_texts(num_texts: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """0/1 weights of two disjoint random halves of ``num_texts`` texts (seeded).

    Chapter: *Positions in real text*.
    """
    if num_texts < 2:
        raise ValueError(f"need at least 2 texts to split, got {num_texts}")
    order = np.random.default_rng(seed).permutation(num_texts)
    a = np.zeros(num_texts, dtype=np.int64)
    a[order[: num_texts // 2]] = 1
    return a, 1 - a


def corrected_hellinger(
    counts: TextCounts, seed: int = 0, weights: np.ndarray | None = None
) -> SplitHalfHellinger:
    """:func:`split_half_hellinger` on a seeded random split of the texts of
    ``counts`` (optionally of a resample given by integer ``weights``).

    Chapter: *Positions in real text*.
    """
    w = np.ones(counts.num_texts, dtype=np.int64) if weights is None else weights
    half_a, half_b = split_texts(counts.num_texts, seed)
    ma, mb = counts.marginals(w * half_a), counts.marginals(w * half_b)
    share = float((w * half_a).sum() / max(w.sum(), 1))
    return split_half_hellinger(_mu(ma), _mu(mb), share)


def bootstrap_weights(num_texts: int, replicates: int = 200, seed: int = 0):
    """Yield ``replicates`` seeded resamples of ``num_texts`` texts as integer weights
    (how often each text is drawn, with replacement; they sum to ``num_texts``).

    Chapter: *Positions in real text*.
    """
    if (
        isinstance(replicates, bool)
        or not isinstance(replicates, int)
        or replicates < 2
    ):
        raise ValueError(f"replicates must be an integer >= 2, got {replicates!r}")
    if num_texts < 1:
        raise ValueError(f"num_texts must be >= 1, got {num_texts}")
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
    """``statistic`` of ``replicates`` resamples of the texts (drawn with
    replacement, as many as there are; seeded): shape ``(replicates, ...)``.

    The texts are the independent units, so the bootstrap resamples texts, not
    tokens: every position of a drawn text comes with it. A resample has fewer
    distinct texts than the corpus, so a statistic inflated by sampling noise (a
    plug-in distance) is inflated more in the resamples: use :func:`basic_interval`,
    which corrects that shift, or a noise-corrected statistic.
    Chapter: *Positions in real text*.
    """
    out = [
        statistic(counts.marginals(w))
        for w in bootstrap_weights(counts.num_texts, replicates, seed)
    ]
    return np.asarray(out, dtype=np.float64)


def basic_interval(
    values: np.ndarray, estimate: float | np.ndarray, level: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """The basic (reverse-percentile) bootstrap interval ``2 estimate - q_high,
    2 estimate - q_low``: it moves against the replicates' shift from the estimate,
    which is the first-order bias of the estimate.

    Chapter: *Positions in real text*.
    """
    low, high = percentile_interval(values, level)
    estimate = np.asarray(estimate, dtype=np.float64)
    return 2 * estimate - high, 2 * estimate - low


def percentile_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The equal-tailed percentile interval of bootstrap ``values`` (first axis).

    Chapter: *Positions in real text*.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.shape[0] < 2 or not np.all(np.isfinite(values)):
        raise ValueError("values must hold at least 2 finite bootstrap replicates")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(values, [tail, 100 - tail], axis=0)
    return low, high


def normal_interval(
    values: np.ndarray, estimate: float | np.ndarray, level: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """The normal bootstrap interval ``estimate -+ z sd(values)`` (``z`` = 1.96 at 95%):
    the bootstrap measures the *spread* only, centred on the estimate itself, so a
    resample shift (duplicated texts inflate a plug-in distance) does not move it.

    Needs fewer replicates than :func:`percentile_interval` (a standard deviation
    settles before a 2.5% quantile does). Chapter: *MDS optimality*.
    """
    from scipy.stats import norm

    values = np.asarray(values, dtype=np.float64)
    if values.shape[0] < 2 or not np.all(np.isfinite(values)):
        raise ValueError("values must hold at least 2 finite bootstrap replicates")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    half = float(norm.ppf(0.5 + level / 2)) * values.std(axis=0, ddof=1)
    estimate = np.asarray(estimate, dtype=np.float64)
    return estimate - half, estimate + half


def text_counts_from_ids(ids: np.ndarray, V: int) -> TextCounts:
    """The per-text counts (:class:`~posgeom_utils.marginals.TextCounts`) of
    equal-length token-id sequences (an N x n array, e.g. a synthetic corpus), so that
    the bootstrap over texts runs on a corpus whose true ``mu`` is known.

    ``text_counts_from_ids(ids, V).marginals()`` has the counts of
    ``marginals_from_ids(ids, V)``. Chapter: *MDS optimality*.
    """
    ids = np.asarray(ids)
    if ids.ndim != 2 or ids.size == 0:
        raise ValueError(
            f"ids must be a non-empty 2-D array (texts x positions), got {ids.shape}"
        )
    if not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0 or ids.max() >= V:
        raise ValueError(f"ids must be integers in [0, V={V})")
    N, n = ids.shape
    flat = (np.arange(n, dtype=np.int64)[None, :] * V + ids.astype(np.int64)).ravel()
    keys, column = np.unique(flat, return_inverse=True)
    incidence = sp.csr_array(
        (np.ones(flat.size, dtype=np.int8), (np.repeat(np.arange(N), n), column)),
        shape=(N, keys.size),
    )
    lengths = np.full(N, n, dtype=np.int64)
    return TextCounts(incidence, keys.astype(np.int64), lengths, lengths, n, V,
                      {"n": n, "V": V, "source": "ids"})


def plug_in_hellinger(m: PositionalMarginals) -> np.ndarray:
    """The plug-in Hellinger matrix ``D_H`` of the counts ``m`` (sparse, without forming
    the dense n x V distributions): what the chapters compute with
    ``hellinger_distances(m.mu())``, fast enough to repeat in a bootstrap.

    Chapter: *MDS optimality*.
    """
    if np.any(m.support == 0):
        raise ValueError(
            "a position is reached by no text in this sample: count fewer positions "
            "(n) or raise min_count"
        )
    counts = sp.csr_array(m.counts, dtype=np.float64)
    used = np.unique(counts.indices)  # the tokens seen at some position
    root = np.sqrt(counts[:, used].toarray() / m.support[:, None])
    bc = root @ root.T
    norms = np.sqrt(np.clip(np.diag(bc), np.finfo(float).tiny, None))
    bc = np.clip((bc / np.outer(norms, norms) + (bc / np.outer(norms, norms)).T) / 2,
                 0.0, 1.0)
    D = np.sqrt(np.clip(1.0 - bc, 0.0, 1.0))
    np.fill_diagonal(D, 0.0)
    return D


@dataclass
class BootstrapNumbers:
    """Named numbers of a corpus with bootstrap intervals (:func:`bootstrap_numbers`).

    ``table`` has one row per number: the estimate, the normal interval ``low``,
    ``high`` (:func:`normal_interval`), the bootstrap standard deviation ``sd`` and
    the resample ``shift`` (mean of the replicates minus the estimate, which the
    interval leaves out); ``replicates`` holds the numbers of every resample
    (replicates x numbers), for intervals of differences on the same resamples.
    Chapter: *MDS optimality*.
    """

    table: "pd.DataFrame"
    replicates: "pd.DataFrame"


def bootstrap_numbers(
    counts: TextCounts,
    numbers: Callable[[PositionalMarginals], dict[str, float]],
    replicates: int = 50,
    seed: int = 0,
    level: float = 0.95,
) -> BootstrapNumbers:
    """Named numbers of a corpus with normal bootstrap intervals over its texts.

    ``numbers`` maps the counts of a corpus to a dict of floats with the same keys on
    every resample; it is applied to the corpus itself (the estimates) and to
    ``replicates`` seeded resamples of its texts (:func:`bootstrap`).
    Chapter: *MDS optimality*.
    """
    import pandas as pd

    point = numbers(counts.marginals())
    keys = list(point)

    def ordered(m: PositionalMarginals) -> list[float]:
        row = numbers(m)
        return [row[k] for k in keys]

    values = bootstrap(counts, ordered, replicates, seed)
    estimate = np.array([point[k] for k in keys], dtype=np.float64)
    low, high = normal_interval(values, estimate, level)
    table = pd.DataFrame(
        {
            "estimate": estimate,
            "low": low,
            "high": high,
            "sd": values.std(axis=0, ddof=1),
            "shift": values.mean(axis=0) - estimate,
        },
        index=pd.Index(keys, name="number"),
    )
    return BootstrapNumbers(table, pd.DataFrame(values, columns=keys))


def difference_interval(
    boot: BootstrapNumbers, a: str, b: str, level: float = 0.95, ratio: bool = False
) -> tuple[float, float, float]:
    """The estimate and normal interval of ``a - b`` (or ``a / b``) for two numbers of
    one :func:`bootstrap_numbers` result, from the same resamples (paired): the
    difference is distinguishable from sampling noise when its interval excludes 0
    (the ratio: 1). Chapter: *MDS optimality*.
    """
    reps, table = boot.replicates, boot.table
    if ratio:
        values = (reps[a] / reps[b]).to_numpy()
        estimate = table.loc[a, "estimate"] / table.loc[b, "estimate"]
    else:
        values = (reps[a] - reps[b]).to_numpy()
        estimate = table.loc[a, "estimate"] - table.loc[b, "estimate"]
    low, high = normal_interval(values, estimate, level)
    return float(estimate), float(low), float(high)

"""Split-half corrected Hellinger distances for positions reached by unequal numbers of
texts. Chapter: *Positions in real text*."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import astuple
from typing import TypeVar

import numpy as np
import scipy.sparse as sp

from . import checks
from .marginals import TextCounts, _check_weights, _support
from .sampling import (
    SplitHalfHellinger,
    bootstrap_weights,
    corrected_hellinger,
    split_texts,
)

T = TypeVar("T")

ESTIMATORS = ("split-half", "stratified", "thinned")


def _halves(
    counts: TextCounts, seed: int, weights: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """The weights of the halves of :func:`split_texts` (``seed``) in ``weights``, and
    ``reach[h, j]``: drawn texts of half h reaching j (``reach[:, n]`` = 0); each text
    fills its positions 0..L-1, each position has >= 2 drawn texts per half."""
    seed = checks.integer(seed, "seed", 0)
    w = np.ones(counts.num_texts, dtype=np.int64) if weights is None else weights
    w = _check_weights(w, counts.num_texts)  # int64: one integer >= 0 per text
    halves = np.stack(split_texts(counts.num_texts, seed)) * w
    L, inc = counts.model_lengths, counts.incidence
    per_text = np.diff(inc.indptr)
    if np.any(per_text != L) or np.any(
        counts.keys[inc.indices] // counts.V >= np.repeat(L, per_text)
    ):
        raise ValueError(
            "counts must give each text one token at each of its positions "
            "0..model_lengths-1: build it with text_counts or text_counts_from_ids"
        )
    reach = np.zeros((2, counts.n + 1), dtype=np.int64)
    reach[:, :-1] = [_support(L, half, counts.n) for half in halves]
    if reach[:, :-1].min() < 2:
        h, j = np.unravel_index(np.argmax(reach[:, :-1] < 2), reach[:, :-1].shape)
        raise ValueError(
            f"counts: position {j} is reached by {reach[h, j]} texts in half "
            f"{'ab'[h]} of seed={seed}, need >= 2 in each half: count fewer "
            f"positions (counts.truncate({j})) or raise min_count"
        )
    return halves, reach


def _layout(counts: TextCounts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each pair's position and token (a column index as scipy keeps it), and where
    each position's pairs start (``indptr``, n + 1 entries)."""
    n, V, keys = counts.n, counts.V, counts.keys
    pos = keys // V
    index = np.int32 if max(keys.size, V) < 2**31 else np.int64
    cols = (keys - pos * V).astype(index)
    indptr = np.searchsorted(keys, np.arange(n + 1) * V).astype(index)
    return pos, cols, indptr


def _add(
    tally: np.ndarray, root: np.ndarray, rows: sp.csr_array, w: np.ndarray
) -> None:
    """Add the texts ``rows`` (weights ``w``: half a, half b) to the running pair
    counts ``tally`` (a, b) and update their square roots ``root`` (a, b, pooled)."""
    touched, where = np.unique(rows.indices, return_inverse=True)
    per_pair = np.repeat(w, np.diff(rows.indptr), axis=1) * rows.data
    for h in range(2):
        tally[h, touched] += np.bincount(where, per_pair[h], minlength=touched.size)
    root[:2, touched] = np.sqrt(tally[:, touched])
    root[2, touched] = np.sqrt(tally[0, touched] + tally[1, touched])


def _column(
    root: np.ndarray,
    size: np.ndarray,
    pos: np.ndarray,
    cols: np.ndarray,
    indptr: np.ndarray,
    V: int,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Corrected and plug-in squared distances of positions i < j to j, and the floor
    of j, in the stratum held by ``root`` (j = len(indptr) - 2)."""
    j, hi = len(indptr) - 2, int(indptr[-1])
    # the computation
    a, b, p = (
        sp.csr_array((r[:hi], cols[:hi], indptr), shape=(j + 1, V)) for r in root
    )
    at_j = np.zeros((3, V))  # the roots at position j, dense over tokens
    at_j[:, cols[indptr[j] : hi]] = root[:, indptr[j] : hi]
    scale = np.sqrt(size[0] * size[1])
    cross = 1 - (a @ at_j[1] + b @ at_j[0]) / (2 * scale)
    same = np.bincount(pos[:hi], root[0, :hi] * root[1, :hi], minlength=j + 1)
    floors = 1 - same / scale
    H2 = cross - (floors + floors[j]) / 2
    plug_in = np.clip(1 - (p @ at_j[2]) / (size[0] + size[1]), 0.0, 1.0)
    return H2[:j], plug_in[:j], floors[j]


def stratified_hellinger(
    counts: TextCounts, seed: int = 0, weights: np.ndarray | None = None
) -> SplitHalfHellinger:
    """Split-half corrected squared Hellinger distances, each pair i < j on the texts
    reaching j (so centred at 0 for equal distributions); ``floor[i]`` on the texts
    reaching i. Halves, ``seed`` and bootstrap ``weights`` as in
    :func:`~posgeom_utils.sampling.corrected_hellinger`.
    Chapter: *Positions in real text*."""
    halves, _ = _halves(counts, seed, weights)
    n, V, keys = counts.n, counts.V, counts.keys
    # the computation
    pos, cols, indptr = _layout(counts)
    order = np.argsort(-counts.model_lengths, kind="stable")  # longest texts first
    by_length, halves = sp.csr_array(counts.incidence[order]), halves[:, order]
    # texts [first[m + 1], first[m]) have length m
    first = np.searchsorted(-counts.model_lengths[order], -np.arange(n + 2), "right")
    tally, root, size = np.zeros((2, keys.size)), np.zeros((3, keys.size)), np.zeros(2)
    H2, plug_in, floor = np.zeros((n, n)), np.zeros((n, n)), np.zeros(n)
    for j in range(n - 1, -1, -1):  # stratum j: the texts with L > j
        group = slice(first[j + 2], first[j + 1])  # add the texts with L = j + 1
        _add(tally, root, by_length[group], halves[:, group])
        size += halves[:, group].sum(1)
        H2[:j, j], plug_in[:j, j], floor[j] = _column(
            root, size, pos, cols, indptr[: j + 2], V
        )
    return SplitHalfHellinger(H2 + H2.T, floor, plug_in + plug_in.T)


def _order(num_texts: int, seed: int) -> np.ndarray:
    """The texts in the seeded random order pi (a stream apart from the halves')."""
    return np.random.default_rng([seed, 1]).permutation(num_texts)


def _before(
    counts: TextCounts, halves: np.ndarray, seed: int
) -> tuple[np.ndarray, ...]:
    """Per entry (text t, pair k at position i) of the incidence, drawn texts only, by
    position and half: k, t's half, t's weight w and the weight of the texts of t's half
    that reach i and precede t in pi (``before``). Thinned to c texts, t counts
    clip(c - before, 0, w) times at i."""
    pi = _order(counts.num_texts, seed)
    inc, w, half = counts.incidence[pi], halves.sum(0)[pi], (halves[1] > 0)[pi]
    key, indptr = inc.indices, inc.indptr
    if w.min() == 0:  # keep the drawn texts only
        drawn = np.repeat(w > 0, np.diff(indptr))
        key, indptr = key[drawn], np.r_[0, np.cumsum(np.diff(indptr)[w > 0])]
        w, half = w[w > 0], half[w > 0]
    group = (counts.keys // counts.V * 2)[key] + np.repeat(half, np.diff(indptr))
    # by (position, half), pi-order within each: a linear-time transpose
    by_group = sp.csr_array((key, group, indptr), (w.size, 2 * counts.n)).tocsc()
    key, text, size = by_group.data, by_group.indices, np.diff(by_group.indptr)
    w, half = w[text], np.repeat(np.arange(2 * counts.n) % 2, size)
    before = np.cumsum(w) - w
    before -= np.repeat(before[by_group.indptr[:-1].clip(max=before.size - 1)], size)
    return key, half, w, before


def _events(
    counts: TextCounts, halves: np.ndarray, reach: np.ndarray, seed: int
) -> tuple[np.ndarray, ...]:
    """What the sweep adds at each column j (n - 1 down to 0) as the thinned counts
    c_j = ``reach[:, j]`` grow: per column, from ``bounds[n - 1 - j]`` on, the flat
    index ``slot`` (half * K + pair index) and the increment ``delta`` of its count."""
    key, half, w, before = _before(counts, halves, seed)
    n, K, top = counts.n, counts.keys.size, int(reach[:, 0].max()) + 1
    # last[h * top + v]: the last column j with c_j > v in half h
    last = np.stack([np.searchsorted(-r[:n], -np.arange(top), "left") for r in reach])
    last = (last - 1).ravel()
    first = last[half * top + before]  # t starts to count at i from column first on,
    full = last[half * top + before + w - 1]  # and counts w times from column full on
    delta = w.astype(np.float64)
    if np.any(first > full):  # bootstrap weights: a text may enter over columns
        span = first - full + 1
        entry = np.repeat(np.arange(key.size), span)
        offset = np.arange(entry.size) - np.repeat(np.cumsum(span) - span, span)
        key, half, w, before = key[entry], half[entry], w[entry], before[entry]
        first = first[entry] - offset
        c, c_next = reach[half, first], reach[half, first + 1]
        delta = np.clip(c - before, 0, w) - np.clip(c_next - before, 0, w)
    step = (n - 1 - first).astype(np.int16 if n < 2**15 else np.int32)
    order = np.argsort(step, kind="stable")  # a radix sort
    bounds = np.r_[0, np.cumsum(np.bincount(step, minlength=n))]
    return bounds, (half * K + key)[order], delta[order].astype(np.float64)


def thinned_hellinger(
    counts: TextCounts, seed: int = 0, weights: np.ndarray | None = None
) -> SplitHalfHellinger:
    """Split-half corrected squared Hellinger distances, each pair i < j with i on the
    first c_j (the half's texts reaching j) of each half's texts reaching i in a seeded
    random order: centred at 0 for equal distributions, attenuated where c_j is small.
    Halves as in :func:`~posgeom_utils.sampling.corrected_hellinger`; a text drawn w
    times by bootstrap ``weights`` counts w times. Chapter: *Positions in real text*."""
    halves, reach = _halves(counts, seed, weights)  # reach[:, j]: c_j; c_n = 0
    n, V, keys = counts.n, counts.V, counts.keys
    # the computation
    bounds, slot, delta = _events(counts, halves, reach, seed)
    pos, cols, indptr = _layout(counts)
    tally, root = np.zeros(2 * keys.size), np.zeros((3, keys.size))
    H2, plug_in, floor = np.zeros((n, n)), np.zeros((n, n)), np.zeros(n)
    for j in range(n - 1, -1, -1):
        now = slice(bounds[n - 1 - j], bounds[n - j])
        np.add.at(tally, slot[now], delta[now])
        touched = slot[now] % keys.size
        a, b = tally[touched], tally[touched + keys.size]
        root[:, touched] = np.sqrt([a, b, a + b])
        H2[:j, j], plug_in[:j, j], floor[j] = _column(
            root, reach[:, j].astype(np.float64), pos, cols, indptr[: j + 2], V
        )
    return SplitHalfHellinger(H2 + H2.T, floor, plug_in + plug_in.T)


def corrected_geometry(
    counts: TextCounts,
    seed: int = 0,
    splits: int = 3,
    estimator: str = "split-half",
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """sqrt(max(H2, 0)) of the mean corrected H2 over ``splits`` splits (seeds ``seed``,
    ``seed + 1``, ...) of ``estimator``: "split-half" (the book's,
    :func:`~posgeom_utils.sampling.corrected_hellinger`), "stratified" or "thinned";
    optionally on bootstrap resample ``weights``. Chapter: *Positions in real text*."""
    checks.choice(
        estimator, "estimator", ESTIMATORS, "split-half, stratified or thinned"
    )
    splits, seed = checks.integer(splits, "splits", 1), checks.integer(seed, "seed", 0)
    f = (corrected_hellinger, stratified_hellinger, thinned_hellinger)
    f = f[ESTIMATORS.index(estimator)]
    # the computation
    runs = [astuple(f(counts, seed + s, weights)) for s in range(splits)]
    return SplitHalfHellinger(*(np.mean(x, axis=0) for x in zip(*runs))).D


def bootstrap_corrected(
    counts: TextCounts,
    statistic: Callable[[np.ndarray], T],
    replicates: int = 200,
    seed: int = 0,
    splits: int = 3,
) -> list[T]:
    """``statistic`` of the corrected geometry (``splits`` splits from ``seed``, as the
    estimate) of each of ``replicates`` seeded bootstrap resamples of the texts: the
    sampling spread of a result. Chapter: *Positions in real text*."""
    weights = bootstrap_weights(counts.num_texts, replicates, seed)
    return [
        statistic(corrected_geometry(counts, seed, splits, weights=w)) for w in weights
    ]

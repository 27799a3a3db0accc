"""posgeom_utils.sampling: the split-half noise correction against synthetic corpora whose true mu is
known, per-text counts, and the bootstrap over texts. Chapter: *Positions in real text*."""

from __future__ import annotations

import numpy as np
import pytest

from posgeom_utils.corpus import synthetic_mu
from posgeom_utils.geometry import hellinger_distances
from posgeom_utils.marginals import positional_marginals, text_counts
from posgeom_utils.sampling import (
    basic_interval,
    bootstrap,
    corrected_hellinger,
    percentile_interval,
    split_half_hellinger,
    split_texts,
    t_interval,
)

N_POS, V = 12, 3000
IU = np.triu_indices(N_POS, 1)


def _true_mu(kind: str) -> np.ndarray:
    """Synthetic positional distributions with a heavy tail (many rare tokens, as in text)."""
    mu = synthetic_mu(kind, N_POS, V, seed=1, strength=1.0) ** 1.5
    return mu / mu.sum(1, keepdims=True)


def _halves(mu: np.ndarray, s: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Two independent samples of s/2 tokens per position (two halves of a corpus)."""
    h = s // 2
    draw = lambda: np.stack([rng.multinomial(h, m) for m in mu]) / h  # noqa: E731
    return draw(), draw()


def _biases(kind: str, s: int, reps: int = 4, seed: int = 0) -> tuple[float, float]:
    """Mean error (over pairs and repetitions) of the plug-in and of the corrected d_H^2."""
    mu = _true_mu(kind)
    truth = hellinger_distances(mu)[IU] ** 2
    rng = np.random.default_rng(seed)
    plug, corr = [], []
    for _ in range(reps):
        a, b = _halves(mu, s, rng)
        est = split_half_hellinger(a, b)
        plug.append(np.mean(est.plug_in_H2[IU] - truth))
        corr.append(np.mean(est.H2[IU] - truth))
    return float(np.mean(plug)), float(np.mean(corr))


@pytest.mark.parametrize("s", [100, 1000, 10000])
def test_under_the_null_the_correction_is_centred_and_the_plug_in_is_not(s):
    """Identical distributions at every position: true distances are all 0."""
    plug, corr = _biases("stationary", s)
    assert plug > 0.05  # the plug-in manufactures distance out of sampling noise
    assert abs(corr) < 0.1 * plug and abs(corr) < 0.01


def test_with_unequal_counts_the_correction_is_biased_upwards_and_equal_counts_remove_it():
    """The condition of the split-half proposition: equal distributions at positions i and j give a corrected
    d_H^2 centred at 0 only when the two positions have equal numbers of samples. With unequal counts the
    rarer position's square-root estimate shrinks more, and the difference of the shrinkages is a positive
    bias (issue 22: on SST-2 the counts fall steeply with position)."""
    mu = _true_mu("stationary")[:2]  # two positions with the same distribution
    rng = np.random.default_rng(5)

    def mean_corrected(counts: tuple[int, int], reps: int = 40) -> tuple[float, float]:
        values = []
        for _ in range(reps):
            halves = [np.stack([rng.multinomial(c // 2, m) / (c // 2) for c, m in zip(counts, mu)])
                      for _ in range(2)]
            values.append(split_half_hellinger(*halves).H2[0, 1])
        return float(np.mean(values)), float(np.std(values, ddof=1) / np.sqrt(reps))

    equal, equal_se = mean_corrected((4000, 4000))
    unequal, unequal_se = mean_corrected((40000, 400))
    assert abs(equal) < 3 * equal_se + 1e-3  # equal counts: centred at 0
    assert unequal > 10 * unequal_se and unequal > 0.05  # unequal counts: biased upwards, far beyond noise
    thinned, thinned_se = mean_corrected((400, 400))  # the same pair thinned to the rarer position's count
    assert abs(thinned) < 3 * thinned_se + 1e-3


def test_the_correction_converges_to_the_truth_and_beats_the_plug_in():
    sizes = [100, 1000, 10000, 200000]
    errors = [_biases("drift", s) for s in sizes]
    plug = [abs(p) for p, _ in errors]
    corr = [abs(c) for _, c in errors]
    assert all(c < p for p, c in zip(plug, corr)), errors
    assert plug[0] > 0.3  # at small counts the plug-in is mostly noise ...
    assert corr[-1] < 0.01 and plug[-1] < 0.02  # ... and both converge with enough data
    assert corr[-1] < corr[0]


def test_the_floor_measures_two_samples_of_one_distribution():
    mu = _true_mu("drift")
    a, b = _halves(mu, 400, np.random.default_rng(3))
    est = split_half_hellinger(a, b)
    same = np.array([hellinger_distances(np.stack([a[i], b[i]]))[0, 1] ** 2 for i in range(N_POS)])
    np.testing.assert_allclose(est.floor, same, atol=1e-12)
    assert np.all(est.floor > 0.1)  # 200 tokens per half against 3000 types: a large floor
    np.testing.assert_allclose(est.H2, est.H2.T, atol=0)
    assert np.all(np.diag(est.H2) == 0) and np.all(np.diag(est.D) == 0)


def test_a_planted_error_is_detected():
    """Negative control: swapping in a wrong floor (zero) brings back the plug-in's bias."""
    mu = _true_mu("stationary")
    a, b = _halves(mu, 1000, np.random.default_rng(4))
    est = split_half_hellinger(a, b)
    uncorrected = est.H2 + (est.floor[:, None] + est.floor[None, :]) / 2
    assert np.mean(uncorrected[IU]) > 0.05 > abs(np.mean(est.H2[IU]))


def test_bad_input():
    a = np.full((3, 4), 0.25)
    with pytest.raises(ValueError, match="same shape"):
        split_half_hellinger(a, np.full((3, 5), 0.2))
    with pytest.raises(ValueError, match="mu_b"):
        split_half_hellinger(a, np.ones((3, 4)))
    with pytest.raises(ValueError, match="at least 2 texts"):
        split_texts(1)
    with pytest.raises(ValueError, match="replicates"):
        percentile_interval(np.ones(1))


def test_t_interval():
    """Mean and Student-t half-width over seeds: t_{0.975, 2} = 4.3027 for three values of sd 1."""
    mean, half = t_interval([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.302652729911275 / np.sqrt(3))
    assert t_interval([1.0, 2.0, 3.0], bounds=True) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    assert np.isnan(t_interval([0.5])[1]) and np.isnan(t_interval([0.5], bounds=True)[1])
    with pytest.raises(ValueError, match="values is empty"):
        t_interval([])
    for level in (0, 1, 1.5, -0.1, float("nan"), "0.95", True):
        with pytest.raises(ValueError, match=r"level must be a finite number > 0 and < 1"):
            t_interval([1.0, 2.0, 3.0], level=level)
    assert t_interval([1.0, 2.0, 3.0], level=np.float64(0.95)) == (mean, half)


# ----------------------------------------------------------------- per-text counts and the bootstrap

@pytest.fixture(scope="module")
def corpus_texts() -> list[str]:
    rng = np.random.default_rng(5)
    words = "the a film movie good bad not very story plot was is and but funny dull".split()
    return [" ".join(rng.choice(words, size=int(rng.integers(1, 25)))) for _ in range(300)]


@pytest.mark.parametrize("view", ["model", "corpus"])
@pytest.mark.parametrize("align", ["start", "end"])
def test_text_counts_sum_to_the_corpus_counts(corpus_texts, tokenizer, align, view):
    counts = text_counts(corpus_texts, tokenizer, n=20, align=align, batch_size=64, view=view)
    direct = positional_marginals(corpus_texts, tokenizer, n=20, align=align, cache=False, view=view)
    summed = counts.marginals()
    assert (summed.counts != direct.counts).nnz == 0
    np.testing.assert_array_equal(summed.support, direct.support)
    np.testing.assert_array_equal(summed.length_hist, direct.length_hist)
    # weights: a text drawn twice counts twice; a subset is the count of the subset
    w = np.zeros(len(corpus_texts), dtype=np.int64)
    w[:50] = 2
    sub = positional_marginals(corpus_texts[:50], tokenizer, n=20, align=align, cache=False, view=view)
    twice = counts.marginals(w)
    np.testing.assert_array_equal(twice.counts.toarray(), 2 * sub.counts.toarray())
    np.testing.assert_array_equal(twice.support, 2 * sub.support)


def test_bootstrap_is_seeded_and_covers_an_unbiased_statistic(corpus_texts, tokenizer):
    counts = text_counts(corpus_texts, tokenizer, n=8)

    def mean_length(m):
        return float(np.average(np.arange(m.length_hist.size), weights=m.length_hist))

    values = bootstrap(counts, mean_length, replicates=100, seed=1)
    np.testing.assert_array_equal(values, bootstrap(counts, mean_length, replicates=100, seed=1))
    assert not np.array_equal(values, bootstrap(counts, mean_length, replicates=100, seed=2))
    assert values.std() > 0  # resampling texts moves the statistic
    point = mean_length(counts.marginals())
    low, high = percentile_interval(values)
    assert low < point < high
    b_low, b_high = basic_interval(values, point)
    assert b_low < point < b_high
    with pytest.raises(ValueError, match="weights"):
        counts.marginals(np.ones(3, dtype=np.int64))


def test_resamples_inflate_a_plug_in_distance_and_the_basic_interval_corrects_it(corpus_texts, tokenizer):
    """A plug-in distance is inflated by noise, and more so in a resample (fewer distinct texts): its
    percentile interval can miss the estimate altogether; the basic interval moves the other way."""
    counts = text_counts(corpus_texts, tokenizer, n=8)

    def mean_neighbour_distance(m):
        return float(np.mean(np.diag(hellinger_distances(m.mu()), 1)))

    values = bootstrap(counts, mean_neighbour_distance, replicates=50, seed=1)
    point = mean_neighbour_distance(counts.marginals())
    assert values.mean() > point  # the shift
    low, high = basic_interval(values, point)
    assert high < percentile_interval(values)[1] and low < point


def test_corrected_hellinger_on_a_real_tokenizer_count(tokenizer):
    """Texts longer than n, words drawn i.i.d.: every content position has the same distribution, so
    the true distances between them are 0; the corrected ones are near 0, the plug-in ones are not."""
    rng = np.random.default_rng(6)
    words = "the a film movie good bad not very story plot was is and but funny dull".split()
    texts = [" ".join(rng.choice(words, size=30)) for _ in range(300)]
    counts = text_counts(texts, tokenizer, n=8)
    splits = [corrected_hellinger(counts, seed=k) for k in range(6)]
    est = splits[0]
    assert est.H2.shape == (8, 8) and np.all(est.floor >= 0)
    pairs = tuple(np.array(ix) + 1 for ix in np.triu_indices(6, 1))  # not [CLS] at 0, [SEP] at 7
    plug_in = np.mean([e.plug_in_H2[pairs].mean() for e in splits])
    corrected = np.mean([e.H2[pairs].mean() for e in splits])
    assert plug_in > 0.01
    assert abs(corrected) < 0.25 * plug_in
    # [CLS] at position 0 is far from every content position, in both estimates
    assert np.all(est.H2[0, 1:7] > 0.9)

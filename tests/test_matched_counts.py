"""posgeom_utils.matched_counts: split-half corrected Hellinger estimates with matched
counts, stratified (pair i < j on the texts that reach j) and thinned (i on as many of
its own texts as reach j), against synthetic corpora whose true mu is known and whose
counts fall steeply with position. Chapter: *Positions in real text*."""

from __future__ import annotations

import numpy as np
import pytest

from posgeom_utils.corpus import synthetic_mu
from posgeom_utils.geometry import hellinger_distances
from posgeom_utils.marginals import TextCounts, _incidence
from posgeom_utils.matched_counts import (
    _order,
    bootstrap_corrected,
    corrected_geometry,
    stratified_hellinger,
    thinned_hellinger,
)
from posgeom_utils.sampling import (
    bootstrap_weights,
    corrected_hellinger,
    split_half_hellinger,
    split_texts,
    text_counts_from_ids,
)

N_POS = 6
IU = np.triu_indices(N_POS, 1)


def _corpus(mu: np.ndarray, lengths: np.ndarray, rng: np.random.Generator):
    """Texts of the given ``lengths`` whose token at position i is drawn from
    ``mu[i]``, independently."""
    V = mu.shape[1]
    ids = np.stack([rng.choice(V, size=lengths.size, p=m) for m in mu], axis=1)
    return _from_ids(ids, lengths, V)


def _from_ids(ids: np.ndarray, lengths: np.ndarray, V: int) -> TextCounts:
    """The counts of texts ``ids`` (N x n) of which text t fills positions
    0..lengths[t]-1."""
    n = ids.shape[1]
    position = np.arange(n)[None, :]
    kept = position < lengths[:, None]  # a text of length L fills positions 0..L-1
    texts = np.broadcast_to(np.arange(lengths.size)[:, None], ids.shape)
    flat = (position * V + ids)[kept]
    return _incidence(flat, texts[kept], lengths, lengths, n, V, {"n": n, "V": V})


def _steep(top: int = 40000, bottom: int = 400) -> np.ndarray:
    """Text lengths such that ``top`` texts reach position 0 and ``bottom`` the last,
    falling geometrically in between (as in real text)."""
    reach = np.round(top * (bottom / top) ** (np.arange(N_POS) / (N_POS - 1)))
    reach = reach.astype(np.int64)
    return np.repeat(np.arange(1, N_POS + 1), reach - np.append(reach[1:], 0))


def _heavy_stationary() -> np.ndarray:
    """The same heavy-tailed distribution (many rare tokens) at every position."""
    mu = synthetic_mu("stationary", N_POS, 3000, seed=1, strength=1.0) ** 1.5
    return mu / mu.sum(1, keepdims=True)


def _two_blocks() -> np.ndarray:
    """Positions 0-2 and 3-5 differ in 20 frequent tokens (half the mass) and share a
    Zipf tail of 3000 rare tokens."""
    tail = 1.0 / np.arange(1, 3001)
    heads = np.random.default_rng(1).dirichlet(np.ones(20), size=2)
    rows = [np.concatenate([heads[b], tail / tail.sum()]) / 2 for b in (0, 1)]
    return np.stack([rows[0]] * 3 + [rows[1]] * 3)


def _per_pair(counts: TextCounts, seed: int, w: np.ndarray) -> tuple[np.ndarray, ...]:
    """The definition, one pair at a time: split_half_hellinger on the marginals of the
    texts that reach j, pooled plug-in weighted by the halves' sizes."""
    halves = split_texts(counts.num_texts, seed)
    H2, plug_in = np.zeros((counts.n,) * 2), np.zeros((counts.n,) * 2)
    for j in range(counts.n):
        reach = (counts.model_lengths > j).astype(np.int64)
        ma, mb = (counts.marginals(w * h * reach) for h in halves)
        for i in range(j):
            mu_a, mu_b = (m.counts[[i, j]].toarray() / m.support[j] for m in (ma, mb))
            weight_a = ma.support[j] / (ma.support[j] + mb.support[j])
            est = split_half_hellinger(mu_a, mu_b, weight_a)
            H2[i, j] = H2[j, i] = est.H2[0, 1]
            plug_in[i, j] = plug_in[j, i] = est.plug_in_H2[0, 1]
    return H2, plug_in


@pytest.mark.parametrize("resampled", [False, True])
@pytest.mark.parametrize("name", ["stratified", "thinned"])
def test_the_sweep_computes_the_per_pair_definition(name, resampled):
    """The vectorised sweep equals the estimate computed pair by pair, for the corpus
    and for a bootstrap resample (a text drawn w times counts w times); the floors are
    those of the split-half estimate, and the estimate is not the split-half one."""
    estimator, reference, size, seed = {
        "stratified": (stratified_hellinger, _per_pair, 3000, 2),
        "thinned": (thinned_hellinger, _thinned_per_pair, 600, 7)}[name]
    rng = np.random.default_rng(seed)
    mu = synthetic_mu("drift", N_POS, 300, seed=1, strength=1.0)
    counts = _corpus(mu, rng.integers(1, N_POS + 1, size=size), rng)
    w = next(bootstrap_weights(size, 2, seed=3)) if resampled else np.ones(size, int)
    est = estimator(counts, seed=4, weights=w if resampled else None)
    H2, plug_in = reference(counts, 4, w)
    np.testing.assert_allclose(est.H2, H2, rtol=0, atol=1e-12)
    np.testing.assert_allclose(est.plug_in_H2, plug_in, rtol=0, atol=1e-12)
    floor = corrected_hellinger(counts, seed=4, weights=w).floor
    np.testing.assert_allclose(est.floor, floor, rtol=0, atol=1e-12)
    assert np.abs(est.H2 - corrected_hellinger(counts, 4, w).H2).max() > 1e-3


MATCHED = [stratified_hellinger, thinned_hellinger]


@pytest.mark.parametrize("matched", MATCHED)
def test_the_matched_correction_is_centred_where_the_split_half_one_is_not(matched):
    """Equal distributions everywhere, 40,000 texts reach position 0 and 400 the last:
    the split-half correction is biased upwards (unequal counts), the stratified and
    thinned ones are centred at 0 within their noise."""
    mu, lengths, rng = _heavy_stationary(), _steep(), np.random.default_rng(0)
    ours, split_half = [], []
    for r in range(6):
        counts = _corpus(mu, lengths, rng)
        ours.append(matched(counts, seed=r).H2[IU].mean())
        split_half.append(corrected_hellinger(counts, seed=r).H2[IU].mean())
    mean, se = np.mean(ours), np.std(ours, ddof=1) / np.sqrt(6)
    biased, biased_se = np.mean(split_half), np.std(split_half, ddof=1) / np.sqrt(6)
    assert abs(mean) < 3 * se + 2e-3, (mean, se)
    assert biased > 0.03 and biased > 10 * biased_se, (biased, biased_se)
    assert abs(mean) < 0.2 * biased


@pytest.mark.parametrize("matched", MATCHED)
def test_with_unequal_counts_it_is_close_to_the_true_distance(matched):
    """Two blocks of positions with known different distributions, steep counts: the
    stratified and thinned estimates are near the true d_H^2 (0 within a block, about
    0.12 across), nearer than the split-half estimate."""
    mu, lengths, rng = _two_blocks(), _steep(), np.random.default_rng(1)
    truth = hellinger_distances(mu)[IU] ** 2
    assert truth.max() > 0.1 and truth.min() == 0
    ours, split_half = [], []
    for r in range(6):
        counts = _corpus(mu, lengths, rng)
        ours.append(matched(counts, seed=r).H2[IU] - truth)
        split_half.append(corrected_hellinger(counts, seed=r).H2[IU] - truth)
    error, biased = np.mean(ours, axis=0), np.mean(split_half, axis=0)
    assert np.abs(error).mean() < 0.015 and np.abs(error).max() < 0.05, error
    assert np.abs(error).mean() < 0.6 * np.abs(biased).mean(), (error, biased)
    assert np.abs(biased).mean() > 0.015


def _ending(reach: np.ndarray, rng: np.random.Generator) -> tuple[TextCounts, ...]:
    """Texts whose tokens are drawn from one heavy-tailed mu, except that a text of
    length L <= N_POS puts an end token (id V) at L - 1; ``reach[i]`` texts are longer
    than i. Returns the counts and the true d_H^2 of the pairs: with f_i the share of
    the texts reaching i that end there, mu_i = (1 - f_i) mu + f_i [end]."""
    mu = _heavy_stationary()[0]
    L = np.repeat(np.arange(1, reach.size + 1), reach - np.append(reach[1:], 0))
    ids = rng.choice(mu.size, size=(L.size, N_POS), p=mu)
    ends = np.flatnonzero(L <= N_POS)
    ids[ends, L[ends] - 1] = mu.size
    f = (reach[:N_POS] - reach[1 : N_POS + 1]) / reach[:N_POS]
    truth = 1 - np.sqrt(np.outer(1 - f, 1 - f)) - np.sqrt(np.outer(f, f))
    return _from_ids(ids, np.minimum(L, N_POS), mu.size + 1), truth[IU]


def test_thinning_keeps_each_position_its_own_distribution():
    """Texts end (an end token) at every position, a share f_i of those reaching i: the
    thinned estimate is near the true d_H^2 of mu_i = (1 - f_i) mu + f_i [end]; the
    stratified one measures the texts reaching j, in which i < j never ends, and is
    far off (about 1 - sqrt(1 - f_j))."""
    f = np.array([0.3, 0.5, 0.6, 0.4, 0.5, 0.3, 0.5])
    reach = np.round(40000 * np.cumprod(np.r_[1, 1 - f])).astype(np.int64)
    thinned, stratified, rng = [], [], np.random.default_rng(6)
    for r in range(4):
        counts, truth = _ending(reach, rng)
        thinned.append(thinned_hellinger(counts, seed=r).H2[IU] - truth)
        stratified.append(stratified_hellinger(counts, seed=r).H2[IU] - truth)
    assert truth.max() > 0.04 and np.ptp(truth) > 0.04, truth
    error, off = np.mean(thinned, axis=0), np.mean(stratified, axis=0)
    assert np.abs(error).mean() < 0.005 and np.abs(error).max() < 0.015, error
    assert off.mean() > 0.15, off


def _thinned_per_pair(
    counts: TextCounts, seed: int, w: np.ndarray
) -> tuple[np.ndarray, ...]:
    """The definition, one pair at a time: in each half, the texts reaching i taken in
    the order pi until as many (weighted) as reach j are drawn, the last one possibly
    in part; split_half_hellinger of i on them and j on all its texts."""
    N, L = counts.num_texts, counts.model_lengths
    halves, pi = [w * h for h in split_texts(N, seed)], _order(N, seed)
    H2, plug_in = np.zeros((counts.n,) * 2), np.zeros((counts.n,) * 2)
    for j in range(counts.n):
        c = [int(h[L > j].sum()) for h in halves]
        full = [counts.marginals(h * (L > j)).counts[[j]].toarray() for h in halves]
        for i in range(j):
            mu = []
            for h, c_h, at_j in zip(halves, c, full):
                take, left = np.zeros(N, dtype=np.int64), c_h
                for t in pi:
                    if L[t] > i and left > 0:
                        take[t] = min(h[t], left)
                        left -= take[t]
                at_i = counts.marginals(take).counts[[i]].toarray()
                mu.append(np.concatenate([at_i, at_j]) / c_h)
            est = split_half_hellinger(mu[0], mu[1], c[0] / (c[0] + c[1]))
            H2[i, j] = H2[j, i] = est.H2[0, 1]
            plug_in[i, j] = plug_in[j, i] = est.plug_in_H2[0, 1]
    return H2, plug_in




@pytest.mark.parametrize("matched", MATCHED)
def test_with_equal_counts_it_is_the_split_half_estimate(matched):
    """All texts of one length: every stratum is the whole corpus and every prefix all
    the texts, so the estimate is corrected_hellinger's (same split), up to rounding."""
    rng = np.random.default_rng(3)
    mu = synthetic_mu("drift", N_POS, 300, seed=2, strength=1.0)
    ids = np.stack([rng.choice(300, size=500, p=m) for m in mu], axis=1)
    counts = text_counts_from_ids(ids, 300)
    w = next(bootstrap_weights(500, 2, seed=1))
    for seed, weights in ((0, None), (7, None), (2, w)):
        ours, theirs = (
            matched(counts, seed, weights),
            corrected_hellinger(counts, seed, weights),
        )
        for name in ("H2", "floor", "plug_in_H2"):
            np.testing.assert_allclose(
                getattr(ours, name), getattr(theirs, name), rtol=0, atol=1e-12
            )
    assert not np.allclose(matched(counts, 1).H2, matched(counts, 7).H2)
    # any integer dtype is a weight, as for TextCounts.marginals (uint64 once was not)
    unsigned = matched(counts, 2, w.astype(np.uint64))
    np.testing.assert_array_equal(unsigned.H2, matched(counts, 2, w).H2)


@pytest.mark.parametrize("matched", MATCHED)
def test_shapes_symmetry_and_diagonal(matched):
    rng = np.random.default_rng(4)
    counts = _corpus(_two_blocks(), _steep(4000, 40), rng)
    est = matched(counts, seed=1)
    assert est.H2.shape == est.plug_in_H2.shape == (N_POS, N_POS)
    assert est.floor.shape == (N_POS,) and np.all(est.floor > 0)
    for M in (est.H2, est.plug_in_H2, est.D):
        np.testing.assert_array_equal(M, M.T)
        assert np.all(np.diag(M) == 0) and np.all(np.isfinite(M))
    assert np.all((est.plug_in_H2 >= 0) & (est.plug_in_H2 <= 1))


@pytest.mark.parametrize("matched", MATCHED)
def test_bad_input(matched):
    rng = np.random.default_rng(5)
    lengths = np.r_[np.full(200, 3), np.full(2, N_POS)]  # 2 texts reach positions 3-5
    counts = _corpus(_two_blocks(), lengths, rng)
    with pytest.raises(ValueError, match=r"counts: position 3 .*truncate\(3\)"):
        matched(counts)
    assert matched(counts.truncate(3)).H2.shape == (3, 3)
    short = counts.truncate(3)
    with pytest.raises(ValueError, match="weights must be 202 integers"):
        matched(short, weights=np.ones(5, dtype=np.int64))
    with pytest.raises(ValueError, match="weights"):
        matched(short, weights=np.ones(202))
    with pytest.raises(ValueError, match="weights"):
        matched(short, weights=-np.ones(202, dtype=np.int64))
    with pytest.raises(ValueError, match="seed"):
        matched(short, seed=-1)
    wrong = TextCounts(
        short.incidence,
        short.keys,
        short.model_lengths + 1,
        short.full_lengths,
        4,
        3020,
    )
    with pytest.raises(ValueError, match="counts must give each text one token"):
        matched(wrong)


def test_corrected_geometry_averages_splits():
    """D = sqrt(max(mean H2, 0)) over the splits seed, seed + 1, ... of the chosen
    estimator; bad estimator, splits or seed are refused by name."""
    rng = np.random.default_rng(8)
    counts = _corpus(_two_blocks(), _steep(4000, 40), rng)
    functions = {
        "split-half": corrected_hellinger,
        "stratified": stratified_hellinger,
        "thinned": thinned_hellinger,
    }
    negative, Ds = [], {}  # the clipping at 0 is exercised
    for name, f in functions.items():
        H2 = (f(counts, 5).H2 + f(counts, 6).H2) / 2
        negative.append(np.any(H2 < 0))
        D = Ds[name] = corrected_geometry(counts, seed=5, splits=2, estimator=name)
        np.testing.assert_allclose(D, np.sqrt(np.clip(H2, 0, None)), atol=1e-12)
        assert np.all(np.diag(D) == 0)
        one = corrected_geometry(counts, seed=5, splits=1, estimator=name)
        np.testing.assert_allclose(one, f(counts, 5).D, atol=1e-12)
        assert not np.allclose(one, D)
    assert any(negative)
    # the default is the split-half estimate, the book's corrected geometry
    np.testing.assert_array_equal(corrected_geometry(counts, seed=5, splits=2), Ds["split-half"])
    w = np.random.default_rng(9).multinomial(counts.num_texts, np.full(counts.num_texts, 1 / counts.num_texts))
    resampled = (corrected_hellinger(counts, 5, w).H2 + corrected_hellinger(counts, 6, w).H2) / 2
    np.testing.assert_allclose(corrected_geometry(counts, seed=5, splits=2, weights=w),
                               np.sqrt(np.clip(resampled, 0, None)), atol=1e-12)
    for bad in ("plug-in", "Thinned", None):
        with pytest.raises(ValueError, match="estimator must be one of"):
            corrected_geometry(counts, estimator=bad)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="splits must be"):
            corrected_geometry(counts, splits=bad)
    with pytest.raises(ValueError, match="seed must be"):
        corrected_geometry(counts, seed=-1)


def test_bootstrap_corrected_is_the_statistic_of_each_resample() -> None:
    """One seeded resample per replicate (those of ``bootstrap_weights``), the corrected
    geometry of each on the same splits as the estimate: the statistic of each, in
    order; a different seed draws different resamples."""
    counts = _corpus(_two_blocks(), _steep(400, 40), np.random.default_rng(8))
    top = lambda D: float(D[0, -1])  # noqa: E731
    got = bootstrap_corrected(counts, top, replicates=4, seed=3, splits=2)
    H2 = [(corrected_hellinger(counts, 3, w).H2 + corrected_hellinger(counts, 4, w).H2) / 2
          for w in bootstrap_weights(counts.num_texts, 4, seed=3)]
    want = [float(np.sqrt(max(h[0, -1], 0.0))) for h in H2]
    assert got == pytest.approx(want, abs=1e-12) and len(set(got)) == 4
    assert bootstrap_corrected(counts, top, 4, seed=3) == [
        top(corrected_geometry(counts, 3, weights=w))
        for w in bootstrap_weights(counts.num_texts, 4, seed=3)]
    assert bootstrap_corrected(counts, top, replicates=4, seed=4) != got
    with pytest.raises(ValueError, match="replicates must be"):
        bootstrap_corrected(counts, top, replicates=1)

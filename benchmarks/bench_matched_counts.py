"""Time ``thinned_hellinger`` and ``stratified_hellinger`` against
``corrected_hellinger`` on real counts, and compare the geometry the plug-in, split-half,
stratified and thinned corrected estimates give.

For each corpus (SST-2 train; IMDB train unless ``--no-imdb``): per-text counts of the
default tokenizer at n = 512 with the special tokens, truncated to the k leading
positions reached by at least ``--min-texts`` texts. Timing: one warm-up call each, then
``--repeats`` calls of the three functions interleaved; best and median, and the ratio
of each to split-half (same run). The machine is shared, so compare ratios.

Geometry, for the plug-in (``plug_in_hellinger`` of all texts) and the corrected
D = ``corrected_geometry(counts, 0, splits, estimator)`` (mean H2 over ``--splits``
splits, clipped at 0): the mean squared distance D^2 between adjacent positions i, i + 1
for i = 10..39, the mean D^2 over all pairs and over the pairs with c_i >= 4 c_j (c_i:
texts reaching i), the monotonicity violation rate (exact triplets; 200,000 sampled
triplets, the same for every D, for k > 128) and the top-1 / top-3 share of the
positive classical-MDS eigenvalues; the plug-ins of the stratified and thinned subsets
(one split) for reference. Seed to seed: the violation rate and the mean adjacent H2 of
one split for ``--seeds`` seeds, and the paired difference thinned - split-half.

Known answer on real tokens (``--known M``; 0 skips): the true mu_i are the corpus's
positional distributions at positions 0..M-1 (tokens seen fewer than ``--known-min``
times there dropped), synthetic texts draw their tokens independently from them, and
their lengths follow the corpus's count profile over all k positions compressed onto M
(as many texts reach position 0 and M - 1 as reach 0 and k - 1). The same table for the
true D, then per estimator its mean over ``--known-reps`` corpora and its mean error
on D^2 (all pairs; c_i >= 4 c_j).

    .venv/bin/python benchmarks/bench_matched_counts.py [--no-imdb] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from posgeom_utils import geometry, load_corpus, load_tokenizer
from posgeom_utils.marginals import _incidence, text_counts
from posgeom_utils.matched_counts import (
    corrected_geometry,
    stratified_hellinger,
    thinned_hellinger,
)
from posgeom_utils.sampling import corrected_hellinger, plug_in_hellinger

FUNCTIONS = {
    "split-half": corrected_hellinger,
    "stratified": stratified_hellinger,
    "thinned": thinned_hellinger,
}


def load(name: str, min_texts: int):
    start = time.perf_counter()
    counts = text_counts(
        load_corpus(name, "train"), load_tokenizer(None), n=512, special_tokens="keep"
    )
    support = counts.marginals().support
    k = int(np.argmax(support < min_texts)) if np.any(support < min_texts) else 512
    counts = counts.truncate(k)
    print(
        f"\n== {name}: {counts.num_texts} texts, k = {k} positions (reached by "
        f"{support[0]} .. {support[k - 1]} texts), {counts.keys.size} pairs, "
        f"{counts.incidence.nnz} entries; counted in {time.perf_counter() - start:.1f} s"
    )
    return counts


def timings(counts, repeats: int) -> None:
    times = {name: [] for name in FUNCTIONS}
    for f in FUNCTIONS.values():
        f(counts)  # warm-up
    for _ in range(repeats):
        for name, f in FUNCTIONS.items():
            start = time.perf_counter()
            f(counts)
            times[name].append(time.perf_counter() - start)
    best = {name: min(t) for name, t in times.items()}
    median = {name: statistics.median(t) for name, t in times.items()}
    for name in FUNCTIONS:
        ratio = (best[name] / best["split-half"], median[name] / median["split-half"])
        print(
            f"{name:>11}: best {best[name]:.3f} s, median {median[name]:.3f} s; "
            f"/ split-half: best {ratio[0]:.2f}, median {ratio[1]:.2f}"
        )


def describe(D: np.ndarray, unequal: np.ndarray, sample: int | None) -> list[float]:
    """Adjacent D^2 (i = 10..39), mean D^2 (all pairs, unequal pairs), violation
    rate, top-1 and top-3 MDS shares."""
    adjacent = np.arange(10, min(40, len(D) - 1))
    upper = np.triu(np.ones_like(D, dtype=bool), 1)
    rate = geometry.monotonicity_violation_rate(D, sample=sample).rate
    lam = geometry.classical_mds(D).eigenvalues
    return [
        float(np.mean(D[adjacent, adjacent + 1] ** 2)),
        float(np.mean(D[upper] ** 2)),
        float(np.mean(D[unequal] ** 2)),
        rate,
        geometry.leading_mass(lam, 1),
        geometry.leading_mass(lam, 3),
    ]


def geometry_table(counts, splits: int) -> None:
    sample = None if counts.n <= 128 else 200_000
    reach = counts.marginals().support
    unequal = np.triu(reach[:, None] >= 4 * reach[None, :], 1)
    D = {"plug-in": plug_in_hellinger(counts.marginals())}
    for name in FUNCTIONS:
        D[name] = corrected_geometry(counts, 0, splits, name)
    for name in ("stratified", "thinned"):
        D[f"{name} plug-in (1 split)"] = np.sqrt(FUNCTIONS[name](counts).plug_in_H2)
    print(
        f"{'estimate':>26}  adjacent D^2  mean D^2  c_i>=4c_j ({unequal.sum()} pairs)"
        "  violation rate  top-1  top-3"
    )
    for name, d in D.items():
        adj, mean, uneq, rate, top1, top3 = describe(d, unequal, sample)
        print(
            f"{name:>26}  {adj:12.4f}  {mean:8.4f}  {uneq:24.4f}  {rate:14.4f}  "
            f"{top1:.3f}  {top3:.3f}"
        )
    L, j = counts.model_lengths, np.arange(11, min(41, counts.n))
    share = np.array([np.mean(L[L > m] == m + 1) for m in j])
    print(
        f"share of stratum j ending at j (j = {j[0]}..{j[-1]}): {share.mean():.3f}, "
        f"its d_H^2 shift 1 - sqrt(1 - f): {np.mean(1 - np.sqrt(1 - share)):.4f}"
    )


def seed_spread(counts, seeds: int) -> None:
    sample = None if counts.n <= 128 else 200_000
    adjacent = np.arange(10, min(40, counts.n - 1))
    rates, adj = {n: [] for n in FUNCTIONS}, {n: [] for n in FUNCTIONS}
    for seed in range(seeds):
        for name, f in FUNCTIONS.items():
            est = f(counts, seed)
            rates[name].append(
                geometry.monotonicity_violation_rate(est.D, sample=sample).rate
            )
            adj[name].append(est.H2[adjacent, adjacent + 1].mean())
    print(f"one split, seeds 0..{seeds - 1}: mean (std) over seeds")
    for name in FUNCTIONS:
        r, a = np.array(rates[name]), np.array(adj[name])
        print(
            f"{name:>11}: violation rate {r.mean():.4f} ({r.std(ddof=1):.4f}), "
            f"adjacent H2 {a.mean():.4f} ({a.std(ddof=1):.4f})"
        )
    dr = np.array(rates["thinned"]) - np.array(rates["split-half"])
    da = np.array(adj["thinned"]) - np.array(adj["split-half"])
    print(
        f"thinned - split-half, paired: violation rate {dr.mean():+.4f} "
        f"({dr.std(ddof=1):.4f}), adjacent H2 {da.mean():+.4f} ({da.std(ddof=1):.4f})"
    )


def simulated(mu: np.ndarray, reach: np.ndarray, rng: np.random.Generator):
    """Texts of the count profile ``reach`` whose token at i is drawn from mu[i]."""
    m, V = mu.shape
    L = np.repeat(np.arange(1, m + 1), reach - np.append(reach[1:], 0))
    cdf = np.cumsum(mu, axis=1)
    ids = np.stack([np.searchsorted(c, rng.random(L.size) * c[-1]) for c in cdf], 1)
    ids, position = np.minimum(ids, V - 1), np.arange(m)[None, :]
    kept = position < L[:, None]
    texts = np.broadcast_to(np.arange(L.size)[:, None], ids.shape)
    flat = (position * V + ids)[kept]
    return _incidence(flat, texts[kept], L, L, m, V, {"n": m, "V": V})


def known_answer(counts, m: int, min_count: int, splits: int, reps: int) -> None:
    tally = counts.truncate(m).marginals().counts.toarray().astype(np.float64)
    tally[tally < min_count] = 0
    used = np.flatnonzero(tally.sum(0))
    mu = tally[:, used] / tally[:, used].sum(1, keepdims=True)
    support = counts.marginals().support
    reach = support[np.round(np.linspace(0, counts.n - 1, m)).astype(int)]
    unequal = np.triu(reach[:, None] >= 4 * reach[None, :], 1)
    truth = geometry.hellinger_distances(mu)
    print(
        f"known answer: true mu of positions 0..{m - 1} ({used.size} tokens seen >= "
        f"{min_count} times), {reach[0]} .. {reach[-1]} texts, {reps} corpora"
    )
    print(
        f"{'estimate':>11}  adjacent D^2  mean D^2  c_i>=4c_j  violation rate  "
        "top-1  top-3  error: all  c_i>=4c_j"
    )
    rows = {"truth": [describe(truth, unequal, None) + [0.0, 0.0]]}
    rng, upper = np.random.default_rng(0), np.triu(np.ones((m, m), dtype=bool), 1)
    for r in range(reps):
        sim = simulated(mu, reach, rng)
        D = {"plug-in": plug_in_hellinger(sim.marginals())}
        D.update({k: corrected_geometry(sim, splits * r, splits, k) for k in FUNCTIONS})
        for name, d in D.items():
            error = d**2 - truth**2
            row = describe(d, unequal, None) + [
                error[upper].mean(),
                error[unequal].mean(),
            ]
            rows.setdefault(name, []).append(row)
    for name, values in rows.items():
        adj, mean, uneq, rate, top1, top3, e_all, e_uneq = np.mean(values, axis=0)
        print(
            f"{name:>11}  {adj:12.4f}  {mean:8.4f}  {uneq:9.4f}  {rate:14.4f}  "
            f"{top1:.3f}  {top3:.3f}  {e_all:+10.4f}  {e_uneq:+9.4f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--min-texts", type=int, default=100)
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--no-imdb", action="store_true")
    parser.add_argument(
        "--known", type=int, nargs=2, default=[40, 100], metavar="M"
    )  # sst2, imdb
    parser.add_argument("--known-min", type=int, default=3)
    parser.add_argument("--known-reps", type=int, default=2)
    args = parser.parse_args()
    for name, m in zip(["sst2"] + ([] if args.no_imdb else ["imdb"]), args.known):
        counts = load(name, args.min_texts)
        timings(counts, args.repeats)
        geometry_table(counts, args.splits)
        seed_spread(counts, args.seeds)
        if m:
            known_answer(counts, m, args.known_min, args.splits, args.known_reps)


if __name__ == "__main__":
    main()

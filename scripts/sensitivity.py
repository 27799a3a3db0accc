"""Sensitivity of the headline numbers of *Appendix: which stress did the paper report?* to n and min_count, with bootstrap intervals.

For each corpus (SST-2, IMDB; train split, packaged all-MiniLM-L6-v2 tokenizer, special tokens kept) and
each n in N_VALUES, counts the texts once per text (``text_counts``), then for each min_count in
MIN_COUNTS keeps the leading positions reached by at least min_count texts and computes the chapter's
headline numbers (:func:`headline_numbers`) with normal 95% bootstrap intervals over texts
(:func:`posgeom_utils.sampling.bootstrap_numbers`). Writes book/results/sensitivity/sensitivity.json
atomically, with provenance (commit, date, parameters, versions).
Usage: ``python scripts/sensitivity.py [--replicates R] [--out DIR]``. Chapter: *Appendix: which stress did the paper report?*.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata as md
import json
import subprocess
import time
from pathlib import Path

import numpy as np

from posgeom_utils import load_corpus, load_model, load_tokenizer
from posgeom_utils.cache import atomic_write
from posgeom_utils.encodings import random_encoding, sinusoidal
from posgeom_utils.geometry import (
    classical_mds,
    leading_mass,
    monotonicity_violation_rate,
    smacof,
    stress,
)
from posgeom_utils.marginals import text_counts
from posgeom_utils.models import learned_position_embeddings
from posgeom_utils.sampling import bootstrap_numbers, plug_in_hellinger

ROOT = Path(__file__).resolve().parents[1]
CORPORA = ("sst2", "imdb")
N_VALUES = (64, 128, 256, 512)
MIN_COUNTS = (20, 50, 100, 200)


def headline_numbers(D: np.ndarray, d: int, learned: np.ndarray | None = None, seed: int = 0) -> dict:
    """The chapter's headline numbers of one plug-in Hellinger geometry ``D`` (n x n) at width ``d``:
    raw and fitted stress of the sinusoidal table, fitted stress of the random and (if given) learned
    tables, raw stress of classical MDS and SMACOF at r = 2, the top eigenvalue's share, the relative
    rank of B and the violation rate of D. Chapter: *Appendix: which stress did the paper report?*."""
    k = D.shape[0]
    res = classical_mds(D)
    sin = sinusoidal(k, d)
    out = {
        "n kept": float(k),
        "rank B / (n - 1)": res.effective_rank / (k - 1),
        "top-1 mass": leading_mass(res.eigenvalues, 1),
        "sinusoidal raw": stress(sin, D),
        "sinusoidal fitted": stress(sin, D, "fitted"),
        "random fitted": stress(random_encoding(k, d, seed=seed), D, "fitted"),
        "MDS r=2 raw": stress(res.P[:, :2], D),
        "SMACOF r=2 raw": stress(smacof(D, 2, init=res.P[:, :2]), D),
        "violation rate": monotonicity_violation_rate(D).rate,
        "mean d_H": float(D[np.triu_indices(k, 1)].mean()),
    }
    if learned is not None:
        out["learned fitted"] = stress(learned[:k], D, "fitted")
    return out


def sensitivity(counts_by_n: dict, min_counts, d: int, learned, replicates: int, seed: int = 0) -> list:
    """One row per (n, min_count): the headline numbers with intervals, on the positions reached by at
    least min_count texts (a configuration that keeps fewer than 3 positions is skipped).
    Chapter: *Appendix: which stress did the paper report?*."""
    rows, done = [], {}
    for n, counts in counts_by_n.items():
        support = counts.marginals().support  # non-increasing: texts reaching each position
        for min_count in min_counts:
            k = int(np.sum(support >= min_count))  # the leading positions kept
            if k < 3:
                continue
            if (n, k) not in done:  # the same positions: the same numbers
                done[n, k] = bootstrap_numbers(
                    counts.truncate(k),
                    lambda m: headline_numbers(plug_in_hellinger(m), d, learned, seed),
                    replicates, seed=seed).table
            for number, row in done[n, k].iterrows():
                rows.append({"n": int(n), "min_count": int(min_count), "positions": k,
                             "number": number, "estimate": float(row["estimate"]),
                             "low": float(row["low"]), "high": float(row["high"]),
                             "shift": float(row["shift"])})
    return rows


def versions() -> dict:
    out = {}
    for pkg in ("numpy", "scipy", "scikit-learn", "tokenizers", "transformers"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "book" / "results" / "sensitivity")
    args = parser.parse_args()
    t0 = time.time()
    tokenizer = load_tokenizer(None)
    model = load_model(None, device="cpu")
    d = model.config.hidden_size
    learned = learned_position_embeddings(model)
    results = {}
    for name in CORPORA:
        corpus = load_corpus(name, "train")
        # counted at each n: a text longer than n has its [SEP] at n - 1 (the model's view)
        counts_by_n = {n: text_counts(corpus, tokenizer, n=n) for n in N_VALUES}
        results[name] = sensitivity(counts_by_n, MIN_COUNTS, d, learned, args.replicates, args.seed)
        print(name, f"{time.time() - t0:.0f} s", flush=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            check=False, text=True).stdout.strip()
    payload = {
        "what": "headline numbers of MDS optimality against n and min_count (scripts/sensitivity.py)",
        "provenance": {
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
            "commit": commit,
            "versions": versions(),
            "corpora": [f"{c} train (full split)" for c in CORPORA],
            "tokenizer": "all-MiniLM-L6-v2 (packaged), special tokens kept, model view",
            "wall_s": None,
        },
        "parameters": {"n_values": list(N_VALUES), "min_counts": list(MIN_COUNTS), "width": d,
                       "replicates": args.replicates, "seed": args.seed,
                       "interval": "normal 95% bootstrap over texts, plug-in distances"},
        "rows": results,
    }
    payload["provenance"]["wall_s"] = round(time.time() - t0, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(payload, indent=1) + "\n"
    atomic_write(args.out / "sensitivity.json", lambda tmp: tmp.write_text(text))
    print(f"wrote {args.out / 'sensitivity.json'} in {payload['provenance']['wall_s']} s")


if __name__ == "__main__":
    main()

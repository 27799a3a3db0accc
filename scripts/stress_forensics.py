"""Stress-definition forensics on SST-2: which single setting reproduces the paper's numbers?

Runs the grid of scripts/forensics.py on the full SST-2 train split (packaged
all-MiniLM-L6-v2 WordPiece tokenizer), scores every setting against the paper's SST-2
sinusoidal, RoPE and ALiBi stresses and the MDS violation rate, and writes
book/results/forensics/forensics.json (and forensics.csv, the whole scored grid) atomically,
with provenance. Usage: ``python scripts/stress_forensics.py [--out DIR]``.
Chapter: *Appendix: which stress did the paper report?*.
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

from posgeom_utils import hellinger_distances, load_corpus, load_tokenizer, positional_marginals
from posgeom_utils.cache import atomic_write
from forensics import (  # scripts/forensics.py, beside this script
    ALIBI_FORMS,
    DEFINITIONS,
    QUANTITIES,
    ROPE_LAYOUTS,
    SLOPES,
    TOLERANCES,
    best_joint,
    best_per_quantity,
    forensic_grid,
    free_choices,
    padded_mu,
    score_grid,
)
from posgeom_utils.repro.paper import reported

ROOT = Path(__file__).resolve().parents[1]
N_VALUES = (16, 32, 48, 64, 512)  # 512: every position some text reaches
SHORT = ("min_count 100", "min_count 1", "pad")
SPECIAL = ("keep", "drop")
WIDTHS = (384, 768)


def geometries(corpus, tokenizer) -> dict:
    """(n requested, policy, short-text handling) -> D_H, distinct geometries only."""
    out, seen = {}, set()
    for special in SPECIAL:
        m = positional_marginals(corpus, tokenizer, n=512, special_tokens=special, min_count=1)
        counts = m.counts.toarray()
        for n_req, short in ((n, s) for n in N_VALUES for s in SHORT):
            k = min(n_req, m.n)
            if short == "min_count 100":
                k = min(k, int(np.sum(m.support >= 100)))
            if short == "pad":
                mu = padded_mu(counts[:k], m.num_sequences)
            else:
                mu = counts[:k] / m.support[:k, None]
            if (k, special, short) in seen:
                continue
            seen.add((k, special, short))
            out[n_req, special, short] = hellinger_distances(mu)
    return out


def by_geometry(scored, best) -> list[dict]:
    """The four quantities on every geometry, with the best joint setting's method
    (definition, triangle, width, RoPE layout, ALiBi slope and form)."""
    method = ["definition", "triangle", "width", "rope", "slope", "form"]
    rows = scored[(scored[method] == best[method]).all(axis=1)]
    keep = [
        "n_requested",
        "n",
        "special",
        "short",
        "sinusoidal",
        "rope_stress",
        "alibi",
        "violation",
        "matches",
    ]
    return [{k: _plain(r[k]) for k in keep} for _, r in rows.iterrows()]


def at_max(scored, dims) -> list[dict]:
    """The settings with the most matches, grouped by which numbers they match: how
    many, their fewest free choices and the options they take in each dimension."""
    top = scored[scored["matches"] == scored["matches"].max()]
    out = []
    for matched, g in top.groupby("matched"):
        out.append(
            {
                "matched": matched,
                "count": len(g),
                "free_choices": int(g["free_choices"].min()),
                "options": {d: sorted({_plain(x) for x in g[d]}, key=str) for d in dims},
            }
        )
    return out


def by_width(scored, best) -> dict:
    """Sinusoidal and RoPE (heads of 64 pooled) at each width, on the best joint
    setting's geometry and definition."""
    same = ["definition", "triangle", "n", "special", "short"]
    rows = scored[(scored[same] == best[same]).all(axis=1)]
    rows = rows[rows["rope"] == best["rope"]]
    return {
        str(w): {
            "sinusoidal": float(g["sinusoidal"].iloc[0]),
            "rope_stress": float(g["rope_stress"].iloc[0]),
        }
        for w, g in rows.groupby("width")
    }


def versions() -> dict:
    return {
        p: md.version(p)
        for p in ("numpy", "pandas", "scipy", "tokenizers", "transformers")
        if _has(p)
    }


def _has(p: str) -> bool:
    try:
        md.version(p)
        return True
    except md.PackageNotFoundError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "book/results/forensics")
    parser.add_argument("--csv", action="store_true", help="also write the whole grid")
    args = parser.parse_args()
    t0 = time.time()
    tokenizer = load_tokenizer(None)
    corpus = load_corpus("sst2", "train")
    geo = geometries(corpus, tokenizer)
    grid = forensic_grid(geo, widths=WIDTHS)
    options = {
        "definition": list(DEFINITIONS),
        "triangle": ["upper", "full"],
        "width": list(WIDTHS),
        "rope": list(ROPE_LAYOUTS),
        "slope": list(SLOPES),
        "form": list(ALIBI_FORMS),
        "n": list(N_VALUES),
        "special": list(SPECIAL),
        "short": list(SHORT),
    }
    paper = {q: reported(key) for q, key in QUANTITIES.items()}
    scored = score_grid(grid, paper, options)
    top = best_joint(scored, top=15)
    per = best_per_quantity(scored, paper)
    best = top.iloc[0]
    dims = [
        "definition",
        "triangle",
        "width",
        "rope",
        "slope",
        "form",
        "n_requested",
        "n",
        "special",
        "short",
    ]
    qcols = ["sinusoidal", "rope_stress", "alibi", "violation"]
    max_matches = int(scored["matches"].max())
    n_at_max = int((scored["matches"] == max_matches).sum())
    per_free = sum(  # each number's own choices, as if tuned separately
        free_choices([q], str(s["setting"].get("definition", "")), options) for q, s in per.items()
    )
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        check=False,
        text=True,
    ).stdout.strip()
    payload = {
        "what": "joint search over stress definitions and settings for the paper's SST-2 "
        "numbers (scripts/stress_forensics.py)",
        "provenance": {
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d"),
            "commit": commit,
            "versions": versions(),
            "corpus": "sst2 train (full split)",
            "tokenizer": "all-MiniLM-L6-v2 (packaged)",
            "wall_s": None,
        },
        "grid": options | {"n_values_note": "512 = every position some text reaches"},
        "settings": len(scored),
        "geometries": len(geo),
        "paper": paper,
        "tolerances": {q: list(t) for q, t in TOLERANCES.items()},
        "max_joint_matches": max_matches,
        "settings_at_max": n_at_max,
        "best_joint": {
            **{d: _plain(best[d]) for d in dims},
            **{c: float(best[c]) for c in qcols},
            "matches": int(best["matches"]),
            "matched": best["matched"],
            "free_choices": int(best["free_choices"]),
        },
        "top_joint": [
            {
                **{d: _plain(r[d]) for d in dims},
                **{c: float(r[c]) for c in qcols},
                "matches": int(r["matches"]),
                "matched": r["matched"],
                "free_choices": int(r["free_choices"]),
            }
            for _, r in top.iterrows()
        ],
        "by_geometry": by_geometry(scored, best),
        "at_max": at_max(scored, dims),
        "best_geometry_by_width": by_width(scored, best),
        "per_quantity": per,
        "per_quantity_free_choices": per_free,
        "per_quantity_matches": int(sum(v["matches"] for v in per.values())),
        "match_counts": {
            int(k): int(v) for k, v in scored["matches"].value_counts().sort_index().items()
        },
    }
    payload["provenance"]["wall_s"] = round(time.time() - t0, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(payload, indent=1, default=_plain) + "\n"
    atomic_write(args.out / "forensics.json", lambda tmp: tmp.write_text(text))
    if args.csv:  # the whole scored grid (a few MB: not committed)
        cols = dims + qcols + ["matches", "matched", "free_choices"]
        csv = scored[cols].to_csv(index=False, float_format="%.6g")
        atomic_write(args.out / "forensics.csv", lambda tmp: tmp.write_text(csv))
    print(
        json.dumps(
            {
                k: payload[k]
                for k in (
                    "max_joint_matches",
                    "settings_at_max",
                    "best_joint",
                    "per_quantity_free_choices",
                    "match_counts",
                )
            },
            indent=1,
            default=_plain,
        )
    )
    print(f"{len(scored)} settings in {payload['provenance']['wall_s']} s")


def _plain(x):
    return x.item() if isinstance(x, np.generic) else x


if __name__ == "__main__":
    main()

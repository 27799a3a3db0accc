"""Stress-definition forensics: which single setting reproduces the paper's SST-2
numbers?

Chapter: *MDS optimality* (section "Which definition did the paper use? A joint
search").

The paper reports the SST-2 stresses of sinusoidal, RoPE and ALiBi and the monotonicity
violation rate of the MDS encoding without the definitions that produced them. This
module searches a grid of definitions and settings jointly instead of tuning one choice
per number:

- stress definitions (:data:`DEFINITIONS`): the book's normalised stress, the sum of
  squared residuals and its square root, the square root of the normalised stress and
  Kruskal's stress-1 (normalised by the encoding's own distances), over the upper
  triangle or the full matrix (the full matrix doubles every sum, which changes only the
  unnormalised ones);
- the geometry: ``n``, the special-token policy and how short texts are handled
  (positions cut where fewer than ``min_count`` texts reach, or every text padded with
  ``[PAD]`` to ``n``);
- the encodings: sinusoidal at width 384 or 768, RoPE in several head layouts, ALiBi
  with several slope conventions, as the linear distance ``m |i - j|`` or as the kernel
  distance ``sqrt(2 - 2 exp(-m |i - j|))``.

A setting's *free choices* are the grid dimensions (with more than one option) that the
quantities it matches depend on, counted once: a joint match shares ``n`` and the
definition between numbers, a per-number best buys its own.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .encodings import alibi_slopes, frequencies
from .geometry import (
    hellinger_distances,
    monotonicity_violation_rate,
    stress_of_distances,
)

if TYPE_CHECKING:
    import pandas as pd

#: the paper's numbers the search scores: name -> key of repro.paper.REPORTED
QUANTITIES: dict[str, str] = {
    "sinusoidal": "sst2_sinusoidal_stress",
    "rope": "sst2_rope_stress",
    "alibi": "sst2_alibi_stress",
    "violation": "mds_violation_rate",
}
#: tolerances of a match, the same as the ledger rows: ("rel", x) relative, ("abs", x)
TOLERANCES: dict[str, tuple[str, float]] = {
    "sinusoidal": ("rel", 0.10),
    "rope": ("rel", 0.10),
    "alibi": ("rel", 0.10),
    "violation": ("abs", 0.03),
}
#: the grid dimensions each quantity depends on
DEPENDS: dict[str, tuple[str, ...]] = {
    "sinusoidal": ("definition", "triangle", "width", "n", "special", "short"),
    "rope": ("definition", "triangle", "width", "rope", "n", "special", "short"),
    "alibi": ("definition", "triangle", "slope", "form", "n", "special", "short"),
    "violation": ("n", "special", "short"),
}
#: definitions whose value changes between the upper triangle and the full matrix
TRIANGLE_SENSITIVE = ("sse", "root sse")


def _pairs(
    E: np.ndarray, D: np.ndarray, triangle: str
) -> tuple[np.ndarray, np.ndarray]:
    E, D = np.asarray(E, dtype=np.float64), np.asarray(D, dtype=np.float64)
    if E.shape != D.shape or E.ndim != 2 or E.shape[0] != E.shape[1]:
        raise ValueError(f"E and D must be square and alike, got {E.shape}, {D.shape}")
    if triangle == "upper":
        iu = np.triu_indices(D.shape[0], 1)
        return E[iu], D[iu]
    if triangle == "full":
        return E.ravel(), D.ravel()
    raise ValueError(f"triangle must be 'upper' or 'full', got {triangle!r}")


def normalised_stress(E: np.ndarray, D: np.ndarray, triangle: str = "upper") -> float:
    """The book's raw stress sum (E - D)^2 / sum D^2 (the triangle does not matter).

    Chapter: *MDS optimality*.
    """
    _pairs(E, D, triangle)  # validates
    return stress_of_distances(E, D)


def sse(E: np.ndarray, D: np.ndarray, triangle: str = "upper") -> float:
    """Unnormalised sum of squared residuals sum (E - D)^2 over the triangle's pairs.

    Chapter: *MDS optimality*.
    """
    e, t = _pairs(E, D, triangle)
    return float(np.sum((e - t) ** 2))


def root_sse(E: np.ndarray, D: np.ndarray, triangle: str = "upper") -> float:
    """The square root of :func:`sse`. Chapter: *MDS optimality*."""
    return float(np.sqrt(sse(E, D, triangle)))


def root_normalised_stress(
    E: np.ndarray, D: np.ndarray, triangle: str = "upper"
) -> float:
    """sqrt(sum (E - D)^2 / sum D^2): stress-1 normalised by the target distances.

    Chapter: *MDS optimality*.
    """
    return float(np.sqrt(normalised_stress(E, D, triangle)))


def kruskal_stress1(E: np.ndarray, D: np.ndarray, triangle: str = "upper") -> float:
    """Kruskal's stress-1, sqrt(sum (E - D)^2 / sum E^2), normalised by the distances
    ``E`` of the configuration (the encoding), as Kruskal (1964) defines it.

    Chapter: *MDS optimality*.
    """
    e, t = _pairs(E, D, triangle)
    ee = float(e @ e)
    if ee == 0:
        raise ValueError("E is all zeros: stress-1 is undefined")
    return float(np.sqrt(np.sum((e - t) ** 2) / ee))


#: name -> function (E, D, triangle) -> float
DEFINITIONS: dict[str, Callable[[np.ndarray, np.ndarray, str], float]] = {
    "normalised": normalised_stress,
    "root normalised": root_normalised_stress,
    "kruskal stress-1": kruskal_stress1,
    "sse": sse,
    "root sse": root_sse,
}


def lag_distances(n: int, profile: np.ndarray) -> np.ndarray:
    """The n x n Toeplitz matrix E[i, j] = profile[|i - j|] (profile[0] should be 0).

    Chapter: *MDS optimality*.
    """
    lags = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])
    return np.asarray(profile, dtype=np.float64)[lags]


def sinusoid_profile(n: int, d: int, heads: int = 1) -> np.ndarray:
    """Distance at lag k of ``heads`` pooled sinusoidal blocks of width ``d`` each:
    sqrt(heads * sum_w 2 (1 - cos(k w))) (RoPE's orbit; ``heads=1`` is sinusoidal).

    Chapter: *MDS optimality*.
    """
    k = np.arange(n, dtype=np.float64)[:, None]
    sq = np.sum(2.0 * (1.0 - np.cos(k * frequencies(d)[None, :])), axis=1)
    return np.sqrt(np.clip(heads * sq, 0.0, None))


#: RoPE layouts: name -> (d -> (head width, heads pooled))
ROPE_LAYOUTS: dict[str, Callable[[int], tuple[int, int]]] = {
    "one head of width d": lambda d: (d, 1),
    "heads of 64 pooled": lambda d: (64, d // 64),
    "one head of 64": lambda d: (64, 1),
    "12 heads of d/12 pooled": lambda d: (d // 12, 12),
}
#: ALiBi slope conventions (12 heads, the standard schedule): name -> (n -> slopes,
#: pool)
#: ``pool``: "mean" averages the per-head stresses, "pooled" sums squared distances
SLOPES: dict[str, Callable[[int], tuple[np.ndarray, str]]] = {
    "per-head mean (12 heads)": lambda n: (alibi_slopes(12), "mean"),
    "first head (12 heads)": lambda n: (alibi_slopes(12)[:1], "mean"),
    "last head (12 heads)": lambda n: (alibi_slopes(12)[-1:], "mean"),
    "12 heads pooled": lambda n: (alibi_slopes(12), "pooled"),
    "slope 1": lambda n: (np.array([1.0]), "mean"),
    "slope 1/(n-1)": lambda n: (np.array([1.0 / max(n - 1, 1)]), "mean"),
}
ALIBI_FORMS = ("linear", "kernel")


def alibi_profiles(n: int, slopes: np.ndarray, form: str) -> np.ndarray:
    """Per-head ALiBi distance at each lag (heads x n): m |k| (``linear``) or the
    kernel distance sqrt(2 - 2 exp(-m |k|)) of the attention bias exp(-m |k|).

    Chapter: *MDS optimality*.
    """
    k = np.arange(n, dtype=np.float64)[None, :]
    m = np.asarray(slopes, dtype=np.float64)[:, None]
    if form == "linear":
        return m * k
    if form == "kernel":
        return np.sqrt(np.clip(2.0 - 2.0 * np.exp(-m * k), 0.0, None))
    raise ValueError(f"form must be one of {ALIBI_FORMS}, got {form!r}")


def padded_mu(counts: np.ndarray, num_sequences: int) -> np.ndarray:
    """Distributions when every text is padded to the length n with a ``[PAD]`` token:
    one extra column holds the texts that do not reach position i.

    Chapter: *MDS optimality*.
    """
    counts = np.asarray(counts, dtype=np.float64)
    pad = num_sequences - counts.sum(axis=1, keepdims=True)
    if np.any(pad < -1e-9):
        raise ValueError("a position has more tokens than sequences")
    return np.hstack([counts, np.clip(pad, 0.0, None)]) / float(num_sequences)


def _score(values: Mapping[str, float], paper: Mapping[str, float]) -> dict[str, bool]:
    out = {}
    for q, p in paper.items():
        x = values.get(q, np.nan)
        kind, tol = TOLERANCES[q]
        err = abs(x - p) / abs(p) if kind == "rel" else abs(x - p)
        out[q] = bool(np.isfinite(x) and err <= tol)
    return out


def match_error(q: str, value: float | np.ndarray, paper: float) -> Any:
    """Error of ``value`` against the paper's ``paper`` in units of the tolerance of
    quantity ``q`` (<= 1 is a match). Chapter: *MDS optimality*.
    """
    kind, tol = TOLERANCES[q]
    value = np.asarray(value, dtype=np.float64)
    err = np.abs(value - paper) / abs(paper) if kind == "rel" else np.abs(value - paper)
    return err / tol


def forensic_grid(
    geometries: Mapping[tuple[int, str, str], np.ndarray],
    widths: Sequence[int] = (384, 768),
    definitions: Sequence[str] = tuple(DEFINITIONS),
    triangles: Sequence[str] = ("upper", "full"),
    rope_layouts: Sequence[str] = tuple(ROPE_LAYOUTS),
    slopes: Sequence[str] = tuple(SLOPES),
    forms: Sequence[str] = ALIBI_FORMS,
    violation: bool = True,
) -> pd.DataFrame:
    """Every setting of the grid scored on every geometry.

    ``geometries`` maps (n, special-token policy, short-text handling) to a Hellinger
    distance matrix D_H. Returns one row per setting with columns ``definition``,
    ``triangle``, ``width``, ``rope``, ``slope``, ``form``, ``n`` (the positions
    actually used), ``n_requested``, ``special``, ``short`` and the quantities
    ``sinusoidal``, ``rope_stress`` (NaN for a layout the width cannot hold),
    ``alibi`` and ``violation`` (the triplet violation rate of full-rank MDS, which
    equals D_H's own). Chapter: *MDS optimality*.
    """
    import pandas as pd

    for name, options in (
        ("definition", (definitions, DEFINITIONS)),
        ("rope", (rope_layouts, ROPE_LAYOUTS)),
        ("slope", (slopes, SLOPES)),
        ("form", (forms, ALIBI_FORMS)),
    ):
        unknown = [x for x in options[0] if x not in options[1]]
        if unknown:
            raise ValueError(
                f"unknown {name} options {unknown}: known {list(options[1])}"
            )
    rows = []
    for (n_req, special, short), D in geometries.items():
        D = np.asarray(D, dtype=np.float64)
        n = D.shape[0]
        rate = monotonicity_violation_rate(D, input_kind="distances").rate
        rate = rate if violation else np.nan
        sin_E = {w: lag_distances(n, sinusoid_profile(n, w)) for w in widths}
        rope_E = {}
        for w, lay in itertools.product(widths, rope_layouts):
            dh, h = ROPE_LAYOUTS[lay](w)
            valid = h >= 1 and 2 <= dh <= w and dh % 2 == 0
            rope_E[w, lay] = (
                lag_distances(n, sinusoid_profile(n, dh, h)) if valid else None
            )
        alibi_E = {}
        for sl, form in itertools.product(slopes, forms):
            m, pool = SLOPES[sl](n)
            prof = alibi_profiles(n, m, form)
            if pool == "pooled":
                prof = np.sqrt(np.sum(prof**2, axis=0, keepdims=True))
            alibi_E[sl, form] = [lag_distances(n, p) for p in prof]
        for defn, tri in itertools.product(definitions, triangles):
            f = DEFINITIONS[defn]
            sin_v = {w: f(E, D, tri) for w, E in sin_E.items()}
            rope_v = {
                key: np.nan if E is None else f(E, D, tri) for key, E in rope_E.items()
            }
            alibi_v = {
                key: float(np.mean([f(E, D, tri) for E in Es]))
                for key, Es in alibi_E.items()
            }
            for w, lay, sl, form in itertools.product(
                widths, rope_layouts, slopes, forms
            ):
                rows.append(
                    {
                        "definition": defn,
                        "triangle": tri,
                        "width": w,
                        "rope": lay,
                        "slope": sl,
                        "form": form,
                        "n_requested": n_req,
                        "n": n,
                        "special": special,
                        "short": short,
                        "sinusoidal": sin_v[w],
                        "rope_stress": rope_v[w, lay],
                        "alibi": alibi_v[sl, form],
                        "violation": rate,
                    }
                )
    return pd.DataFrame(rows)


#: grid column of each quantity
COLUMNS = {
    "sinusoidal": "sinusoidal",
    "rope": "rope_stress",
    "alibi": "alibi",
    "violation": "violation",
}


def free_choices(
    matched: Sequence[str], definition: str, options: Mapping[str, Sequence[Any]]
) -> int:
    """Grid dimensions with more than one option that the ``matched`` quantities depend
    on, each counted once (``triangle`` only for definitions it changes).

    Chapter: *MDS optimality*.
    """
    dims = {d for q in matched for d in DEPENDS[q]}
    if definition not in TRIANGLE_SENSITIVE:
        dims.discard("triangle")
    return sum(1 for d in dims if len(options.get(d, ())) > 1)


def score_grid(
    grid: pd.DataFrame,
    paper: Mapping[str, float],
    options: Mapping[str, Sequence[Any]],
) -> pd.DataFrame:
    """Add to each row of :func:`forensic_grid` whether it matches each paper number
    (``match_<q>``), its error in tolerance units (``err_<q>``), ``matches`` (how many)
    and ``free_choices`` (see :func:`free_choices`). Chapter: *MDS optimality*.
    """
    out = grid.copy()
    qs = [q for q in QUANTITIES if q in paper]
    for q in qs:
        err = match_error(q, out[COLUMNS[q]].to_numpy(), paper[q])
        out[f"err_{q}"] = err
        out[f"match_{q}"] = np.nan_to_num(err, nan=np.inf) <= 1.0
    out["matches"] = out[[f"match_{q}" for q in qs]].sum(axis=1).astype(int)
    out["matched"] = [
        ",".join(q for q in qs if row[f"match_{q}"])
        for _, row in out[[f"match_{q}" for q in qs]].iterrows()
    ]
    out["free_choices"] = [
        free_choices([q for q in m.split(",") if q], defn, options)
        for m, defn in zip(out["matched"], out["definition"])
    ]
    out["total_error"] = out[[f"err_{q}" for q in qs]].clip(upper=1e6).sum(axis=1)
    return out


def best_joint(scored: pd.DataFrame, top: int = 10) -> pd.DataFrame:
    """The settings with the most joint matches, then the fewest free choices, then the
    smallest summed error; of settings that give the same four values (a choice that
    changes nothing, e.g. the triangle of a normalised stress), the first only.
    Chapter: *MDS optimality*.
    """
    ranked = scored.sort_values(
        ["matches", "free_choices", "total_error"], ascending=[False, True, True]
    )
    values = [c for c in COLUMNS.values() if c in ranked.columns]
    return ranked.round({c: 9 for c in values}).drop_duplicates(values).head(top)


def best_per_quantity(scored: pd.DataFrame, paper: Mapping[str, float]) -> dict:
    """For each paper number separately, the setting closest to it, and how many grid
    settings match it at all (a number many settings hit is weak evidence).

    Chapter: *MDS optimality*.
    """
    out = {}
    for q in paper:
        i = scored[f"err_{q}"].idxmin()
        row = scored.loc[i]
        out[q] = {
            "value": float(row[COLUMNS[q]]),
            "paper": float(paper[q]),
            "matches": bool(row[f"match_{q}"]),
            "fraction_of_grid_matching": float(scored[f"match_{q}"].mean()),
            "setting": {d: _plain(row[d]) for d in DEPENDS[q]},
        }
    return out


def _plain(x: Any) -> Any:
    return x.item() if isinstance(x, np.generic) else x


def hellinger_geometry(mu: np.ndarray) -> np.ndarray:
    """D_H of distributions ``mu`` (thin wrapper of geometry.hellinger_distances).

    Chapter: *MDS optimality*.
    """
    return hellinger_distances(mu)

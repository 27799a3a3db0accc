"""Stress-definition forensics: which single setting reproduces the paper's SST-2
numbers? The appendix's own code, kept beside the script that runs its grid
(``scripts/stress_forensics.py``), not in the package. Chapter: *Appendix: which
stress did the paper report?*."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from posgeom_utils import checks
from posgeom_utils.encodings import alibi_slopes, frequencies
from posgeom_utils.geometry import (
    monotonicity_violation_rate,
    paired_distances,
    stress_of_distances,
    toeplitz_distances,
)

if TYPE_CHECKING:
    import pandas as pd

#: the paper's numbers the search scores: name -> key of repro.paper.REPORTED
QUANTITIES: dict[str, str] = dict(
    sinusoidal="sst2_sinusoidal_stress", rope="sst2_rope_stress"
)
QUANTITIES.update(alibi="sst2_alibi_stress", violation="mds_violation_rate")
#: tolerances of a match, the same as the ledger rows: ("rel", x) relative, ("abs", x)
TOLERANCES = {q: ("rel", 0.10) for q in ("sinusoidal", "rope", "alibi")} | {
    "violation": ("abs", 0.03)
}
#: the grid dimensions each quantity depends on
_GEOMETRY = ("n", "special", "short")
DEPENDS: dict[str, tuple[str, ...]] = {
    "sinusoidal": ("definition", "triangle", "width") + _GEOMETRY,
    "rope": ("definition", "triangle", "width", "rope") + _GEOMETRY,
    "alibi": ("definition", "triangle", "slope", "form") + _GEOMETRY,
    "violation": _GEOMETRY,
}
#: definitions whose value changes between the upper triangle and the full matrix
TRIANGLE_SENSITIVE = ("sse", "root sse")
#: grid column of each quantity
COLUMNS = {q: "rope_stress" if q == "rope" else q for q in QUANTITIES}


def normalised_stress(E: np.ndarray, D: np.ndarray, triangle: str = "upper") -> float:
    """The book's raw stress sum (E - D)^2 / sum D^2 (the triangle does not matter).
    Chapter: *Appendix: which stress did the paper report?*."""
    paired_distances(E, D, triangle)  # validates
    return stress_of_distances(E, D)


def sse(E: np.ndarray, D: np.ndarray, triangle: str = "upper") -> float:
    """The unnormalised sum of squared residuals sum (E - D)^2 over the triangle's
    pairs. Chapter: *Appendix: which stress did the paper report?*."""
    e, t = paired_distances(E, D, triangle)
    return float(np.sum((e - t) ** 2))


def kruskal_stress1(E: np.ndarray, D: np.ndarray, triangle: str = "upper") -> float:
    """Kruskal's (1964) stress-1, sqrt(sum (E - D)^2 / sum E^2), normalised by the
    encoding's distances. Chapter: *Appendix: which stress did the paper report?*."""
    e, t = paired_distances(E, D, triangle)
    ee = float(e @ e)
    if ee == 0:
        raise ValueError("E is all zeros: stress-1 is undefined")
    return float(np.sqrt(np.sum((e - t) ** 2) / ee))


def _root(f: Callable) -> Callable:
    return lambda E, D, triangle="upper": float(np.sqrt(f(E, D, triangle)))


#: name -> function (E, D, triangle) -> float
DEFINITIONS: dict[str, Callable[[np.ndarray, np.ndarray, str], float]] = {
    "normalised": normalised_stress,
    "root normalised": _root(normalised_stress),
    "kruskal stress-1": kruskal_stress1,
    "sse": sse,
    "root sse": _root(sse),
}
#: RoPE layouts: name -> (d -> (head width, heads pooled))
ROPE_LAYOUTS: dict[str, Callable[[int], tuple[int, int]]] = {
    "one head of width d": lambda d: (d, 1),
    "heads of 64 pooled": lambda d: (64, d // 64),
    "one head of 64": lambda d: (64, 1),
    "12 heads of d/12 pooled": lambda d: (d // 12, 12),
}
#: ALiBi slope conventions (12 heads, standard schedule): name -> (n -> slopes, pool);
#: "mean" averages the per-head stresses, "pooled" sums squared distances
SLOPES: dict[str, Callable[[int], tuple[np.ndarray, str]]] = {
    "per-head mean (12 heads)": lambda n: (alibi_slopes(12), "mean"),
    "first head (12 heads)": lambda n: (alibi_slopes(12)[:1], "mean"),
    "last head (12 heads)": lambda n: (alibi_slopes(12)[-1:], "mean"),
    "12 heads pooled": lambda n: (alibi_slopes(12), "pooled"),
    "slope 1": lambda n: (np.array([1.0]), "mean"),
    "slope 1/(n-1)": lambda n: (np.array([1.0 / max(n - 1, 1)]), "mean"),
}
ALIBI_FORMS = ("linear", "kernel")


def sinusoid_profile(n: int, d: int, heads: int = 1) -> np.ndarray:
    """Distance at each lag of ``heads`` pooled sinusoidal blocks of width ``d`` (RoPE's
    orbit). Chapter: *Appendix: which stress did the paper report?*."""
    k = np.arange(n, dtype=np.float64)[:, None]
    sq = np.sum(2.0 * (1.0 - np.cos(k * frequencies(d)[None, :])), axis=1)
    return np.sqrt(np.clip(heads * sq, 0.0, None))


def alibi_profiles(n: int, slopes: np.ndarray, form: str) -> np.ndarray:
    """ALiBi distance per head and lag (heads x n): m |k| (linear) or sqrt(2 - 2 exp(-m
    |k|)) (kernel). Chapter: *Appendix: which stress did the paper report?*."""
    k = np.arange(n, dtype=np.float64)[None, :]
    m = np.asarray(slopes, dtype=np.float64)[:, None]
    if checks.choice(form, "form", ALIBI_FORMS) == "linear":
        return m * k
    return np.sqrt(np.clip(2.0 - 2.0 * np.exp(-m * k), 0.0, None))


def padded_mu(counts: np.ndarray, num_sequences: int) -> np.ndarray:
    """Distributions when every text is padded to length n (an extra ``[PAD]`` column).
    Chapter: *Appendix: which stress did the paper report?*."""
    counts = np.asarray(counts, dtype=np.float64)
    pad = num_sequences - counts.sum(axis=1, keepdims=True)
    if np.any(pad < -1e-9):
        raise ValueError("a position has more tokens than sequences")
    return np.hstack([counts, np.clip(pad, 0.0, None)]) / float(num_sequences)


def match_error(q: str, value: float | np.ndarray, paper: float) -> Any:
    """Error of ``value`` against the paper's number, in tolerances of quantity ``q``
    (<= 1: a match). Chapter: *Appendix: which stress did the paper report?*."""
    kind, tol = TOLERANCES[q]
    value = np.asarray(value, dtype=np.float64)
    err = np.abs(value - paper) / abs(paper) if kind == "rel" else np.abs(value - paper)
    return err / tol


def _encoding_distances(
    n, widths, rope_layouts, slopes, forms
) -> tuple[dict, dict, dict]:
    """The distance matrices of the grid's sinusoidal, RoPE (None: a layout the width
    cannot hold) and ALiBi (one per pooled head) encodings on n positions."""
    sin_E = {w: toeplitz_distances(sinusoid_profile(n, w)) for w in widths}
    rope_E = {}
    for w, lay in itertools.product(widths, rope_layouts):
        dh, h = ROPE_LAYOUTS[lay](w)
        valid = h >= 1 and 2 <= dh <= w and dh % 2 == 0
        rope_E[w, lay] = (
            toeplitz_distances(sinusoid_profile(n, dh, h)) if valid else None
        )
    alibi_E = {}
    for sl, form in itertools.product(slopes, forms):
        m, pool = SLOPES[sl](n)
        prof = alibi_profiles(n, m, form)
        if pool == "pooled":
            prof = np.sqrt(np.sum(prof**2, axis=0, keepdims=True))
        alibi_E[sl, form] = [toeplitz_distances(p) for p in prof]
    return sin_E, rope_E, alibi_E


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
    """Every setting of the grid scored on every geometry ((n, special, short) -> D_H),
    one row per setting. Chapter: *Appendix: which stress did the paper report?*."""
    import pandas as pd

    options = dict(
        definition=(definitions, DEFINITIONS), rope=(rope_layouts, ROPE_LAYOUTS)
    )
    options |= dict(slope=(slopes, SLOPES), form=(forms, ALIBI_FORMS))
    for name, (chosen, known) in options.items():
        for x in chosen:
            checks.choice(x, name, known)
    rows = []
    for (n_req, special, short), D in geometries.items():
        D = np.asarray(D, dtype=np.float64)
        n = D.shape[0]
        rate = monotonicity_violation_rate(D, input_kind="distances").rate
        rate = rate if violation else np.nan
        sin_E, rope_E, alibi_E = _encoding_distances(
            n, widths, rope_layouts, slopes, forms
        )
        setting = dict(n_requested=n_req, n=n, special=special, short=short)
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
                row = dict(
                    definition=defn,
                    triangle=tri,
                    width=w,
                    rope=lay,
                    slope=sl,
                    form=form,
                )
                values = dict(
                    sinusoidal=sin_v[w],
                    rope_stress=rope_v[w, lay],
                    alibi=alibi_v[sl, form],
                )
                rows.append({**row, **setting, **values, "violation": rate})
    return pd.DataFrame(rows)


def free_choices(
    matched: Sequence[str], definition: str, options: Mapping[str, Sequence[Any]]
) -> int:
    """The grid dimensions (with options) that the ``matched`` quantities depend on,
    counted once. Chapter: *Appendix: which stress did the paper report?*."""
    dims = {d for q in matched for d in DEPENDS[q]}
    if definition not in TRIANGLE_SENSITIVE:
        dims.discard("triangle")
    return sum(1 for d in dims if len(options.get(d, ())) > 1)


def score_grid(
    grid: pd.DataFrame, paper: Mapping[str, float], options: Mapping[str, Sequence[Any]]
) -> pd.DataFrame:
    """:func:`forensic_grid` with each row's errors, matches and free choices.
    Chapter: *Appendix: which stress did the paper report?*."""
    out = grid.copy()
    qs = [q for q in QUANTITIES if q in paper]
    for q in qs:
        err = match_error(q, out[COLUMNS[q]].to_numpy(), paper[q])
        out[f"err_{q}"] = err
        out[f"match_{q}"] = np.nan_to_num(err, nan=np.inf) <= 1.0
    match_columns = [f"match_{q}" for q in qs]
    out["matches"] = out[match_columns].sum(axis=1).astype(int)
    out["matched"] = [
        ",".join(q for q in qs if row[f"match_{q}"])
        for _, row in out[match_columns].iterrows()
    ]
    out["free_choices"] = [
        free_choices([q for q in m.split(",") if q], defn, options)
        for m, defn in zip(out["matched"], out["definition"])
    ]
    out["total_error"] = out[[f"err_{q}" for q in qs]].clip(upper=1e6).sum(axis=1)
    return out


def best_joint(scored: pd.DataFrame, top: int = 10) -> pd.DataFrame:
    """The settings with the most joint matches, fewest free choices, smallest error
    (distinct values). Chapter: *Appendix: which stress did the paper report?*."""
    ranked = scored.sort_values(
        ["matches", "free_choices", "total_error"], ascending=[False, True, True]
    )
    values = [c for c in COLUMNS.values() if c in ranked.columns]
    return ranked.round({c: 9 for c in values}).drop_duplicates(values).head(top)


def best_per_quantity(scored: pd.DataFrame, paper: Mapping[str, float]) -> dict:
    """Per paper number: the closest setting and the share of the grid that matches it.
    Chapter: *Appendix: which stress did the paper report?*."""
    out = {}
    for q in paper:
        row = scored.loc[scored[f"err_{q}"].idxmin()]
        setting = {
            d: row[d].item() if isinstance(row[d], np.generic) else row[d]
            for d in DEPENDS[q]
        }
        out[q] = dict(
            value=float(row[COLUMNS[q]]),
            paper=float(paper[q]),
            matches=bool(row[f"match_{q}"]),
        )
        out[q].update(
            fraction_of_grid_matching=float(scored[f"match_{q}"].mean()),
            setting=setting,
        )
    return out

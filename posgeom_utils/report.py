"""Numbers that the prose quotes: glued into the page (MyST-NB) and kept for ``results.json``.

Chapter: every chapter (the prose quotes values through ``{glue:text}`` roles, never typed numbers).
"""

from __future__ import annotations

from typing import Any

import numpy as np

_RESULTS: dict[str, Any] = {}


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def glue(key: str, value: Any) -> None:
    """Glue ``value`` under ``key`` for the page (no display) and record it.

    NumPy scalars become Python numbers, so ``{glue:text}`key:.3f``` formats them.
    """
    value = _plain(value)
    _RESULTS[key] = value
    try:
        from myst_nb import glue as _glue
    except ImportError:  # pragma: no cover - myst-nb is in requirements.txt
        return
    _glue(key, value, display=False)


def results() -> dict[str, Any]:
    """Everything glued so far in this kernel (a copy)."""
    return dict(_RESULTS)


def stress_table(D: np.ndarray, encodings: dict[str, np.ndarray]) -> "pd.DataFrame":
    """One row per encoding: rank, raw and scale-fitted stress against ``D``, the fitted scale, and the
    Spearman correlation of its pairwise distances with D's. Chapter: *MDS optimality*.
    """
    import pandas as pd
    from scipy.stats import spearmanr

    from .geometry import best_scale, check_distance_matrix, pairwise_distances, stress_of_distances

    D = check_distance_matrix(D)
    iu = np.triu_indices(D.shape[0], 1)
    rows = []
    for name, P in encodings.items():
        E = pairwise_distances(P, name=name)
        rows.append({
            "encoding": name,
            "rank": int(np.linalg.matrix_rank(np.asarray(P) - np.mean(P, axis=0), tol=1e-9 * max(1.0, np.abs(P).max()))),
            "raw stress": stress_of_distances(E, D, "raw"),
            "fitted stress": stress_of_distances(E, D, "fitted"),
            "best scale": best_scale(E, D),
            "Spearman rho": float(spearmanr(E[iu], D[iu]).statistic) if np.ptp(E[iu]) > 0 else float("nan"),
        })
    return pd.DataFrame(rows).set_index("encoding")

"""Numbers that the prose quotes: glued into the page (MyST-NB) and kept for ``results.json``.

Chapter: every chapter (the prose quotes values through ``{glue:text}`` roles, never typed numbers).
"""

from __future__ import annotations

import os
import types
from pathlib import Path
from typing import Any, Mapping

import numpy as np

#: set by ``posgeom run``: the file a chapter's last cell writes its parameters and glued numbers to
RESULTS_ENV = "POSGEOM_RESULTS_FILE"
#: set by ``posgeom run``: the folder under which training runs keep resumable checkpoints
CHECKPOINT_ENV = "POSGEOM_CHECKPOINT_DIR"

_RESULTS: dict[str, Any] = {}
_RUN: dict[str, Any] = {"chapter": None, "parameters": {}, "names_before": None}


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


def start_parameters(namespace: Mapping[str, Any]) -> None:
    """Remember which names exist before a chapter's ``parameters`` cell (see :func:`show_parameters`)."""
    _RUN["names_before"] = set(namespace)


def _parameter_value(value: Any) -> Any:
    value = _plain(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_parameter_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _parameter_value(v) for k, v in value.items()}
    return str(value)


def show_parameters(chapter: str, namespace: Mapping[str, Any]) -> "pd.DataFrame":
    """The "Parameters used" table of ``chapter``: every name its ``parameters`` cell (and papermill's
    injected cell) defined since :func:`start_parameters`, plus the device actually used.

    The values are recorded for :func:`save_results`. Chapter: every chapter (top of the page).
    """
    import pandas as pd

    before = _RUN["names_before"]
    if before is None:
        raise RuntimeError("call start_parameters(globals()) in a cell before the parameters cell")
    params = {k: _parameter_value(v) for k, v in namespace.items()
              if k not in before and not k.startswith("_") and not isinstance(v, types.ModuleType)
              and not callable(v)}
    if "device" in params:
        params["device_name"] = device_name(str(params["device"]))
    _RUN["chapter"] = chapter
    _RUN["parameters"] = params
    shown = {k: ("None" if v is None else str(v)) for k, v in params.items()}
    return pd.DataFrame({"value": list(shown.values())}, index=pd.Index(list(shown), name="parameter"))


def device_name(device: str = "auto") -> str:
    """What ``device`` resolves to, in words (e.g. ``cpu`` or ``cuda: NVIDIA H200``)."""
    try:
        import torch

        from .models import select_device

        dev = select_device(device)
    except Exception as exc:  # noqa: BLE001 - a bad device is reported by the chapter itself
        return f"unavailable ({exc})"
    if dev.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(dev)}"
    return "cpu"


def checkpoint_dir(name: str) -> str | None:
    """Where the training run ``name`` keeps its checkpoints during ``posgeom run`` (``None`` otherwise,
    so the book build never writes checkpoints). Chapter: *How this book is built* (README).
    """
    root = os.environ.get(CHECKPOINT_ENV)
    return str(Path(root) / name) if root else None


def save_results(path: str | os.PathLike | None = None) -> Path | None:
    """Write the chapter's parameters and every glued number as JSON to ``path`` (default: the file named
    by ``$POSGEOM_RESULTS_FILE``; nothing is written when neither is set). ``posgeom run`` adds the
    provenance. Chapter: *Reproduction ledger*.
    """
    from .cache import write_json

    target = path or os.environ.get(RESULTS_ENV)
    if not target:
        return None
    payload = {"chapter": _RUN["chapter"], "parameters": _RUN["parameters"],
               "results": {k: _parameter_value(v) for k, v in _RESULTS.items()}}
    return write_json(Path(target), payload)


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

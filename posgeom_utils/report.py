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

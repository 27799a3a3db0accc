"""Numbers that the prose quotes: glued into the page (MyST-NB) and kept for ``results.json``.

Chapter: every chapter (the prose quotes values through ``{glue:text}`` roles, never typed numbers).
"""

from __future__ import annotations

import os
import types
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..models import device_name

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


def parameter_comments(source: str) -> dict[str, str]:
    """``{name: comment}`` for every line ``name = value  # comment`` of a cell's ``source`` (the meaning a
    chapter's ``parameters`` cell gives each parameter). Chapter: every chapter (top of the page).
    """
    comments: dict[str, str] = {}
    for line in source.splitlines():
        head, sep, comment = line.partition("#")
        name, eq, _ = head.partition("=")
        name = name.strip()
        if sep and eq and name.isidentifier() and comment.strip():
            comments.setdefault(name, comment.strip())
    return comments


class ParametersTable:
    """The parameters a chapter ran with, shown as one collapsed block (HTML ``<details>``) in the book and as
    plain text elsewhere. ``frame`` holds the table (parameter, value, meaning)."""

    def __init__(self, chapter: str, frame: "pd.DataFrame") -> None:
        self.chapter = chapter
        self.frame = frame

    def _repr_html_(self) -> str:
        profile = self.frame["value"].get("profile", "default")
        return (f'<details class="posgeom-parameters"><summary>Parameters of this run (profile '
                f'<code>{profile}</code>): click to show</summary>{self.frame.to_html()}</details>')

    def __repr__(self) -> str:
        return self.frame.to_string()


def show_parameters(chapter: str, namespace: Mapping[str, Any]) -> ParametersTable:
    """The "Parameters of this run" block of ``chapter``: every name its ``parameters`` cell (and
    papermill's injected cell) defined since :func:`start_parameters`, its value, the device actually
    used, and the meaning the ``parameters`` cell's comments give it (read from IPython's input history).

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
    comments: dict[str, str] = {}
    history = namespace.get("In")
    for source in history if isinstance(history, list) else []:
        for name, comment in parameter_comments(str(source)).items():
            comments.setdefault(name, comment)
    if "device_name" in params:
        comments.setdefault("device_name", "the device the chapter actually used")
    frame = pd.DataFrame({"value": [("None" if v is None else str(v)) for v in params.values()],
                          "meaning": [comments.get(k, "") for k in params]},
                         index=pd.Index(list(params), name="parameter"))
    return ParametersTable(chapter, frame)


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
    from ..cache import write_json

    target = path or os.environ.get(RESULTS_ENV)
    if not target:
        return None
    payload = {"chapter": _RUN["chapter"], "parameters": _RUN["parameters"],
               "results": {k: _parameter_value(v) for k, v in _RESULTS.items()}}
    return write_json(Path(target), payload)

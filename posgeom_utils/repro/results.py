"""Numbers that the prose quotes: glued into the page (MyST-NB) and recorded for
``results.json``.

Chapter: *Reproduction ledger*. A chapter makes one call, :func:`show_parameters`, in
the cell after its ``parameters`` cell: it shows the parameters the chapter runs with
and, under ``posgeom run``, saves the parameters and every glued number to
``$POSGEOM_RESULTS_FILE`` after each cell (atomically), so no closing cell is needed."""

from __future__ import annotations

import ast
import os
import types
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import numpy as np

from ..cache import write_json
from ..models import device_name

#: set by ``posgeom run``: the file a chapter's parameters and glued numbers are
#: saved to
RESULTS_ENV = "POSGEOM_RESULTS_FILE"
#: set by ``posgeom run``: the folder under which training runs keep resumable
#: checkpoints
CHECKPOINT_ENV = "POSGEOM_CHECKPOINT_DIR"

_RESULTS: dict[str, Any] = {}
_RUN: dict[str, Any] = {"chapter": None, "parameters": {}, "saving": False}


def _plain(value: Any) -> Any:
    """``value`` as JSON-ready Python: NumPy scalars and arrays become numbers and
    lists."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return (
        value
        if isinstance(value, (str, int, float, bool)) or value is None
        else str(value)
    )


def glue(key: str, value: Any) -> None:
    """Glue ``value`` under ``key`` for the page (no display) and record it for
    ``results.json``. NumPy scalars become Python numbers, so ``{glue:text}`key:.3f```
    formats them. Chapter: *Reproduction ledger*."""
    value = value.item() if isinstance(value, np.generic) else value
    value = value.tolist() if isinstance(value, np.ndarray) else value
    _RESULTS[key] = value
    from myst_nb import glue as _glue

    _glue(key, value, display=False)


def glue_interval(key: str, mean: float, half_width: float) -> None:
    """Glue an estimate and its interval: ``key`` (the estimate), ``key_hw`` (the
    half-width) and ``key_low``/``key_high`` (the ends). Chapter: *Reproduction
    ledger*."""
    glue(key, mean)
    glue(f"{key}_hw", half_width)
    glue(f"{key}_low", mean - half_width)
    glue(f"{key}_high", mean + half_width)


def results() -> dict[str, Any]:
    """Everything glued so far in this kernel (a copy). Chapter: *Reproduction
    ledger*."""
    return dict(_RESULTS)


def _assignments(source: str) -> dict[str, str]:
    """``{name: comment}`` for the top-level assignments of a cell (comment: the ``#
    ...`` after it)."""
    lines = source.splitlines()
    try:
        body = ast.parse(
            "\n".join(l for l in lines if not l.lstrip().startswith(("%", "!")))
        ).body
    except SyntaxError:
        return {}
    found = {}
    for node in body:
        for target in node.targets if isinstance(node, ast.Assign) else []:
            if isinstance(target, ast.Name):
                found[target.id] = lines[node.lineno - 1].partition("#")[2].strip()
    return found


class ParametersTable:
    """The parameters a chapter ran with: one collapsed block (HTML ``<details>``) in
    the book, plain text elsewhere. ``frame`` holds the table (parameter, value,
    meaning). Chapter: *Reproduction ledger*."""

    def __init__(self, chapter: str, frame: Any) -> None:
        self.chapter, self.frame = chapter, frame

    def _repr_html_(self) -> str:
        profile = self.frame["value"].get("profile", "default")
        return (
            '<details class="posgeom-parameters"><summary>Parameters of this run '
            "(profile "
            f"<code>{profile}</code>): click to "
            f"show</summary>{self.frame.to_html()}</details>"
        )

    def __repr__(self) -> str:
        return self.frame.to_string()


def show_parameters(
    chapter: str, namespace: MutableMapping[str, Any]
) -> ParametersTable:
    """The "Parameters of this run" block of ``chapter``: every name assigned in the
    cells run before this one (the ``parameters`` cell and papermill's injected cell),
    its value, the device actually used and the meaning the ``parameters`` cell's
    comments give it. Under ``posgeom run`` it also starts saving the results after
    every cell. Chapter: *Reproduction ledger*."""
    import pandas as pd

    comments: dict[str, str] = {}
    cells = [_assignments(str(c)) for c in list(namespace.get("In", []))[:-1]]
    for name, comment in (item for cell in cells for item in cell.items()):
        comments[name] = comment or comments.get(name, "")
    _apply_profile(chapter, namespace, cells)
    params = {
        k: _plain(namespace[k])
        for k in comments
        if k in namespace
        and not k.startswith("_")
        and not isinstance(namespace[k], types.ModuleType)
        and not callable(namespace[k])
    }
    if "device" in params:
        params["device_name"] = device_name(str(params["device"]))
        comments["device_name"] = "the device the chapter actually used"
    _RUN.update(chapter=chapter, parameters=params)
    _start_saving()
    frame = pd.DataFrame(
        {
            "value": ["None" if v is None else str(v) for v in params.values()],
            "meaning": [comments.get(k, "") for k in params],
        },
        index=pd.Index(list(params), name="parameter"),
    )
    return ParametersTable(chapter, frame)


def _apply_profile(
    chapter: str, namespace: MutableMapping[str, Any], cells: list[dict]
) -> None:
    """Give the parameters that ``profile`` sets and no cell after the ``parameters``
    cell assigned (papermill's ``-p``) the profile's values: ``-p profile smoke`` alone
    runs at smoke sizes, not the default ones under a smoke label."""
    from .profiles import PROFILES, chapter_parameters

    profile = namespace.get("profile", "default")
    first = next((i for i, cell in enumerate(cells) if cell), len(cells))
    passed = {name for cell in cells[first + 1 :] for name in cell}
    if chapter not in PROFILES["default"]:
        return  # a chapter of one's own (posgeom run --source-dir): no profile sizes
    for name, value in chapter_parameters(chapter, profile).items():
        if name not in passed:
            namespace[name] = value


def _start_saving() -> None:
    """Under ``posgeom run``: save the results after every cell from now on (once per
    kernel)."""
    if _RUN["saving"] or not os.environ.get(RESULTS_ENV):
        return
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        shell.events.register("post_run_cell", lambda *_: save_results())
        _RUN["saving"] = True
    save_results()


def checkpoint_dir(name: str) -> str | None:
    """Where the training run ``name`` keeps its checkpoints during ``posgeom run``
    (``None`` otherwise, so the book build never writes checkpoints).
    Chapter: *Reproduction ledger*."""
    root = os.environ.get(CHECKPOINT_ENV)
    return str(Path(root) / name) if root else None


def save_results(path: str | os.PathLike | None = None) -> Path | None:
    """Write the chapter's parameters and every glued number as JSON to ``path``
    (default: ``$POSGEOM_RESULTS_FILE``; nothing when neither is set).
    Chapter: *Reproduction ledger*."""
    target = path or os.environ.get(RESULTS_ENV)
    if not target:
        return None
    payload = {
        "chapter": _RUN["chapter"],
        "parameters": _RUN["parameters"],
        "results": {k: _plain(v) for k, v in _RESULTS.items()},
    }
    return write_json(Path(target), payload)

"""Checks for the exercises of *Positions layer by layer*.

Chapter: *Positions layer by layer*. Each check recomputes the expected values with
:func:`posgeom_utils.geometry.linear_cka` from the chapter's probed positional matrices and compares
the student's answer with them; the hints describe the method, never the values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from posgeom_utils.geometry import linear_cka
from posgeom_utils.teaching import Verdict, close, verdict

__all__ = ["check_cka_change", "check_cka_with_input", "cka_change_layers", "cka_with_input"]


def cka_with_input(M: Any, P_in: Any) -> np.ndarray:
    """Linear CKA of every layer's positional matrix ``M[l]`` (``M``: layers, k, d) with the first k
    rows of the input table ``P_in``, layer 0 first. Chapter: *Positions layer by layer*."""
    M = np.asarray(M, dtype=np.float64)
    if M.ndim != 3:
        raise ValueError(f"M must be (layers, k, d), got shape {M.shape}")
    P = np.asarray(P_in, dtype=np.float64)[: M.shape[1]]
    return np.array([linear_cka(X, P) for X in M])


def cka_change_layers(halves: Sequence[Any]) -> list[int]:
    """For each positional stack in ``halves`` (each: layers, k, d), the layer l >= 1 whose linear
    CKA with layer l - 1 is lowest. Chapter: *Positions layer by layer*."""
    layers = []
    for M in halves:
        M = np.asarray(M, dtype=np.float64)
        if M.ndim != 3 or M.shape[0] < 2:
            raise ValueError(f"each half must be (layers >= 2, k, d), got shape {M.shape}")
        cka = [linear_cka(M[l - 1], M[l]) for l in range(1, M.shape[0])]
        layers.append(1 + int(np.argmin(cka)))
    return layers


def _shape(answer: Any) -> tuple[int, ...] | None:
    """The array shape of ``answer``; None when it has none (ragged lists, odd objects)."""
    try:
        return np.shape(answer)
    except (TypeError, ValueError):
        return None


def _as_layers(answer: Any, count: int) -> list[int] | None:
    """``answer`` as a list of ``count`` integer layers; None when it is not one."""
    if isinstance(answer, (str, bytes, dict, set)) or _shape(answer) != (count,):
        return None
    try:
        values = np.asarray(answer)
    except (TypeError, ValueError):
        return None
    if values.shape != (count,) or values.dtype.kind not in "iuf":
        return None
    if values.dtype.kind == "f" and not np.all(np.isfinite(values) & (values == np.round(values))):
        return None
    return [int(v) for v in values]


def check_cka_with_input(answer: Any, M: Any, P_in: Any) -> Verdict:
    """Exercise *CKA with the input table*: ``answer`` holds, for every layer l (0 = the embedding
    output), the linear CKA of the positional matrix ``M[l]`` with the first k rows of the input
    table ``P_in`` (k = ``M.shape[1]``). Chapter: *Positions layer by layer*."""
    label = "ex-layer-cka-input"
    if answer is None:
        return verdict(label, None)
    try:
        expected = cka_with_input(M, P_in)
    except (TypeError, ValueError) as err:
        return verdict(label, False, f"The check could not run on these arguments: {err}")
    if _shape(answer) != expected.shape:
        return verdict(label, False, "Give one number per layer, the embedding output (layer 0) "
                                     "first: an array as long as M (num_layers + 1 values).")
    return verdict(label, close(answer, expected, rtol=1e-6, atol=1e-9),
                   "Compare each layer with the input table on the same positions, P_in[:k] with "
                   "k = M.shape[1]; centre the columns of both matrices before forming the Gram "
                   "matrices, and divide by the product of their Frobenius norms.")


def check_cka_change(answer: Any, halves: Sequence[Any]) -> Verdict:
    """Exercise *The largest change, by CKA*: ``answer`` lists, for each half of the probed texts
    (``halves``, each of shape (layers, k, d)), the layer l >= 1 whose positional matrix has the
    lowest linear CKA with that of layer l - 1. Chapter: *Positions layer by layer*."""
    label = "ex-layer-cka-change"
    if answer is None:
        return verdict(label, None)
    try:
        expected = cka_change_layers(halves)
    except (TypeError, ValueError) as err:
        return verdict(label, False, f"The check could not run on these arguments: {err}")
    layers = _as_layers(answer, len(expected))
    if layers is None:
        return verdict(label, False, "Give a list of integer layers, one per half, in the order "
                                     "of `halves[dataset]`.")
    return verdict(label, layers == expected,
                   "For each half h, compare layer l with layer l - 1 for l = 1, ..., num_layers "
                   "(layer 0 is the embedding output, not a candidate) and keep the l whose CKA "
                   "is lowest, i.e. whose change 1 - CKA is largest.")

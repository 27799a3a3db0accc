"""Checks for the computational exercises of the chapter *The optimal encoding: classical MDS on
Hellinger geometry*.

Chapter: *MDS optimality*. Each check recomputes its
expected value from the chapter's Hellinger matrix with the science package and returns a
:class:`~posgeom_utils.teaching.Verdict` that never contains that value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..encodings import sinusoidal
from ..geometry import best_scale, classical_mds, pairwise_distances, stress
from . import Verdict, as_floats, close, verdict

__all__ = ["check_rank", "check_best_scale"]



def check_rank(answer: Any, D: np.ndarray) -> Verdict:
    """Exercise *The rank of B*: ``answer`` is the number of eigenvalues of
    B = -1/2 J D^2 J above 1e-9 times the largest one.

    The expected value is ``classical_mds(D).effective_rank``. Chapter: *MDS optimality*.
    """
    label = "ex-mds-rank"
    if answer is None:
        return verdict(label, None)
    expected = classical_mds(D).effective_rank
    value = as_floats(answer)
    if value is None or value.shape != ():
        return verdict(label, False, f"Expected a single integer (a rank); got "
                                     f"{type(answer).__name__}.")
    ok = close(value, expected, rtol=0.0, atol=1e-9)
    return verdict(label, ok, "Build J = I - 11^T / n, B = -J (D * D) J / 2 (elementwise square), "
                              "take np.linalg.eigvalsh(B) and count the eigenvalues greater than "
                              "1e-9 times the largest one. Remember what B does to the vector 1.")


def check_best_scale(answer: Any, D: np.ndarray, d: int) -> Verdict:
    """Exercise *The best scale*: ``answer`` is the pair (s*, fitted stress) of the sinusoidal
    encoding of width ``d`` on the positions of ``D``, computed from the closed forms.

    The expected values are ``best_scale`` and ``stress(..., "fitted")`` of the science package.
    Chapter: *MDS optimality*.
    """
    label = "ex-mds-scale"
    if answer is None:
        return verdict(label, None)
    P = sinusoidal(np.asarray(D).shape[0], d)
    s_star = best_scale(pairwise_distances(P), D)
    fitted = stress(P, D, "fitted")
    values = as_floats(answer)
    if values is None or values.shape != (2,):
        return verdict(label, False, "Expected a pair (s_star, fitted_stress) of two numbers; got "
                                     f"{type(answer).__name__}.")
    scale_ok = close(values[0], s_star, rtol=1e-6, atol=1e-12)
    stress_ok = close(values[1], fitted, rtol=1e-6, atol=1e-12)
    if scale_ok and stress_ok:
        return verdict(label, True)
    if scale_ok:
        hint = ("s* is right; the fitted stress is not. It is 1 - rho0^2 with rho0 = sum(E D) / "
                "sqrt(sum(E^2) sum(D^2)), every sum over the pairs i < j only.")
    elif stress_ok:
        hint = ("The fitted stress is right; s* is not. It is sum(E D) / sum(E^2) over the pairs "
                "i < j, with E the encoding's distances (pairwise_distances) and D the Hellinger ones.")
    else:
        hint = ("Take E = pairwise_distances(sinusoidal(n, d)) and the Hellinger D, keep the pairs "
                "i < j (np.triu_indices(n, 1)), then apply eq-best-scale and 1 - rho0^2.")
    return verdict(label, False, hint)

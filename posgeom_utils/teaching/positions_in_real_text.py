"""Checks for the computational exercises of *Positions in real text*.

Chapter: *Positions in real text*. Each check recomputes its expected value from the chapter's counts (a
:class:`~posgeom_utils.marginals.PositionalMarginals`) with the science package and returns a
:class:`~posgeom_utils.teaching.Verdict` that never contains that value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..marginals import PositionalMarginals
from . import Verdict, as_floats, close, verdict

__all__ = ["check_support", "check_perplexity", "check_end_hazard"]



def _shape_hint(answer: Any, n: int, what: str) -> str | None:
    """A hint when ``answer`` is not a 1-D array of ``n`` numbers (None when it is)."""
    try:
        shape = np.shape(answer)
    except Exception:  # a ragged or exotic object: say what is expected
        shape = None
    if shape != (n,):
        return (f"Expected a 1-D array with {what} (as many entries as `marginals[...].n`); "
                f"got {type(answer).__name__} of shape {shape}.")
    return None


def check_support(answer: Any, marginals: PositionalMarginals) -> Verdict:
    """Exercise *How many sequences reach position i?*: ``answer`` is the number of sequences that
    reach each kept position, computed from ``marginals.length_hist`` alone.

    The expected value is ``marginals.support``. Chapter: *Positions in real text*.
    """
    label = "ex-positions-support"
    if answer is None:
        return verdict(label, None)
    expected = np.asarray(marginals.support, dtype=np.float64)
    hint = _shape_hint(answer, expected.size, "one count per kept position")
    if hint:
        return verdict(label, False, hint)
    ok = as_floats(answer) is not None and close(answer, expected, rtol=0.0, atol=1e-6)
    return verdict(label, ok, "A sequence of length L (special tokens included) occupies positions "
                              "0, ..., L - 1: it reaches i exactly when L > i. Count, for every i, "
                              "the sequences longer than i.")


def check_perplexity(answer: Any, marginals: PositionalMarginals) -> Verdict:
    """Exercise *How many tokens compete for a position?*: ``answer`` is the perplexity
    2^H(mu_i) of every kept position, H in bits.

    The expected value is ``2 ** marginals.entropy()``. Chapter: *Positions in real text*.
    """
    label = "ex-positions-perplexity"
    if answer is None:
        return verdict(label, None)
    expected = 2.0 ** np.asarray(marginals.entropy(), dtype=np.float64)
    hint = _shape_hint(answer, expected.size, "one perplexity per kept position")
    if hint:
        return verdict(label, False, hint)
    values = as_floats(answer)
    ok = values is not None and close(values, expected, rtol=1e-6, atol=1e-9)
    if not ok and values is not None and np.all(values > 0) and close(
            np.log2(values), np.log(expected), rtol=1e-6, atol=1e-9):
        return verdict(label, False, "Your entropy seems to be in nats: use log base 2 (bits), or "
                                     "raise e, not 2, to the power of a natural-log entropy.")
    if not ok and values is not None and close(values, np.log2(expected), rtol=1e-6, atol=1e-9):
        return verdict(label, False, "That is the entropy in bits; the perplexity is 2 to that power.")
    return verdict(label, ok, "Use the distribution mu_i = counts[i] / support[i], skip the tokens "
                              "with probability 0 (0 log 0 = 0), take H = -sum p log2 p, then 2**H.")


def check_end_hazard(answer: Any, marginals: PositionalMarginals) -> Verdict:
    """Exercise *Where does [SEP] stand?*: ``answer`` is, for every kept position but the last, the
    fraction of the sequences reaching i that end at i, (s_i - s_{i+1}) / s_i with s the support.

    The expected value comes from ``marginals.support``. Chapter: *Positions in real text*.
    """
    label = "ex-positions-sep"
    if answer is None:
        return verdict(label, None)
    s = np.asarray(marginals.support, dtype=np.float64)
    expected = (s[:-1] - s[1:]) / s[:-1]
    try:
        shape = np.shape(answer)
    except Exception:
        shape = None
    if shape != expected.shape:
        return verdict(label, False, "Expected a 1-D array with one share per kept position except the "
                                     f"last (one entry fewer than `marginals[...].n`); got shape {shape}.")
    ok = as_floats(answer) is not None and close(answer, expected, rtol=1e-9, atol=1e-12)
    return verdict(label, ok, "A sequence ends at i when its [SEP] stands at i, i.e. it reaches i but "
                              "not i + 1. Divide that number of sequences by the number reaching i.")

"""Checks for the book's computational exercises: a student runs one and learns whether an answer is right,
never what the right answer is.

Chapter: every chapter's *Exercises* section, and the README's *Editions*. Each chapter has its own module
``posgeom_utils.teaching.<chapter>`` with one ``check_<exercise>(answer, ...)`` per computational exercise;
it recomputes the expected value with the science package and returns a :class:`Verdict`. A check never
raises for a wrong or missing answer (the book and the student notebooks run top to bottom), and its message
never contains the expected value. Like the reproduction machinery, this subpackage is not part of the hash
that invalidates executed chapters (``posgeom_utils.repro.sources``): a check cannot change a number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Verdict", "verdict", "close", "as_floats"]


@dataclass(frozen=True)
class Verdict:
    """The outcome of a check: ``ok`` is True (right), False (not yet) or None (no answer given yet).
    Chapter: every chapter's *Exercises*."""

    exercise: str
    ok: bool | None
    message: str

    def __bool__(self) -> bool:
        return bool(self.ok)

    def __repr__(self) -> str:
        mark = {True: "correct", False: "not yet", None: "no answer yet"}[self.ok]
        return f"{self.exercise}: {mark}. {self.message}".rstrip()

    def _repr_html_(self) -> str:
        colour = {True: "#1b7f3b", False: "#b3261e", None: "#666666"}[self.ok]
        return f'<p style="color:{colour}"><b>{repr(self).split(".")[0]}.</b> {self.message}</p>'


def verdict(exercise: str, ok: bool | None, hint: str = "") -> Verdict:
    """A :class:`Verdict` for ``exercise``; ``hint`` is shown when the answer is wrong, and a reminder to
    replace the stub when there is no answer. Chapter: every chapter's *Exercises*."""
    if ok is None:
        return Verdict(exercise, None, "Replace `answer = None` by your computation and run the cell again.")
    return Verdict(exercise, bool(ok), "" if ok else hint)


def close(answer: Any, expected: Any, rtol: float = 1e-6, atol: float = 1e-9) -> bool | None:
    """Whether ``answer`` equals ``expected`` within tolerance (arrays: same shape, every entry); ``None``
    when ``answer`` is None; False (never an error) when it cannot be compared. Chapter: every chapter's
    *Exercises*."""
    if answer is None:
        return None
    try:
        a = np.asarray(answer, dtype=np.float64)
        e = np.asarray(expected, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    if a.shape != e.shape or not np.all(np.isfinite(a)):
        return False
    return bool(np.allclose(a, e, rtol=rtol, atol=atol))


def as_floats(answer: Any) -> np.ndarray | None:
    """``answer`` as a float64 array when it holds (integer or real) numbers; None otherwise (text,
    booleans, ragged lists, other objects). Chapter: every chapter's *Exercises*."""
    try:
        values = np.asarray(answer)
    except Exception:  # noqa: BLE001 - ragged or exotic answers are simply not numbers
        return None
    return values.astype(np.float64) if values.dtype.kind in "iuf" else None

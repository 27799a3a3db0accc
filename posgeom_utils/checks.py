"""Argument checks written once: each returns the value or raises ``ValueError`` naming
the parameter, what was given and the fix. Chapter: *Positions in real text*."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import scipy.sparse as sp


def fail(name: str, expected: str, value: Any, fix: str = "") -> ValueError:
    """``name must be <expected>, got <value>: <fix>``. Chapter: *Positions in real
    text*."""
    return ValueError(
        f"{name} must be {expected}, got {name}={value!r}" + (fix and f": {fix}")
    )


def require(ok: Any, name: str, expected: str, value: Any, fix: str = "") -> None:
    """Raise :func:`fail` unless ``ok``. Chapter: *Positions in real text*."""
    if not ok:
        raise fail(name, expected, value, fix)


def same_shape(a: Any, b: Any, names: str) -> None:
    """Raise unless ``a`` and ``b`` (``names``, e.g. ``"E and D"``) share one shape.
    Chapter: *Positions in real text*."""
    if np.shape(a) != np.shape(b):
        raise ValueError(
            f"{names} must have the same shape, got {np.shape(a)} and {np.shape(b)}"
        )


def integer(
    value: Any,
    name: str,
    minimum: int | None = 1,
    maximum: int | None = None,
    fix: str = "",
    optional: bool = False,
) -> int | None:
    """``value`` as an int in [minimum, maximum] (None kept where ``optional``).
    Chapter: *Positions in real text*."""
    if optional and value is None:
        return None
    ok = isinstance(value, (int, np.integer)) and not isinstance(
        value, (bool, np.bool_)
    )
    ok = (
        ok
        and (minimum is None or value >= minimum)
        and (maximum is None or value <= maximum)
    )
    if not ok:
        low, high = (
            [f" >= {minimum}"] * (minimum is not None),
            [f" <= {maximum}"] * (maximum is not None),
        )
        span = f" in [{minimum}, {maximum}]" if low and high else "".join(low + high)
        fix = fix or f"pass e.g. {name}={max(minimum or 0, 1)}"
        raise fail(name, f"an integer{span}", value, fix)
    return int(value)


def number(
    value: Any,
    name: str,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    fix: str = "",
) -> float:
    """``value`` as a finite float from ``low`` to ``high`` (open ends where asked; NaN,
    infinities and booleans refused). Chapter: *Positions in real text*."""
    real = isinstance(value, (int, float, np.integer, np.floating))
    ok = (
        real and not isinstance(value, (bool, np.bool_)) and math.isfinite(float(value))
    )
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        parts = [f"{'>' if low_open else '>='} {low:g}"] if low is not None else []
        parts += [f"{'<' if high_open else '<='} {high:g}"] if high is not None else []
        raise fail(
            name,
            " ".join(["a finite number", " and ".join(parts)]).rstrip(),
            value,
            fix,
        )
    return float(value)


def fraction(value: Any, name: str, fix: str = "") -> float:
    """``value`` as a float strictly between 0 and 1 (a level, a share).
    Chapter: *Positions in real text*."""
    return number(value, name, 0, 1, low_open=True, high_open=True, fix=fix)


def choice(value: Any, name: str, choices: Iterable[Any], fix: str = "") -> Any:
    """``value`` if it is one of ``choices``. Chapter: *Positions in real text*."""
    choices = tuple(choices)
    if not any(value == c and type(value) is type(c) for c in choices):
        raise fail(name, f"one of {', '.join(map(repr, choices))}", value, fix)
    return value


def finite_array(X: Any, name: str, ndim: int = 2) -> np.ndarray:
    """``X`` as a float64 array with ``ndim`` dimensions, none of them empty, and finite
    entries. Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != ndim or 0 in X.shape:
        raise ValueError(
            f"{name} must be a non-empty {ndim}-D array, got shape {X.shape}"
        )
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} contains NaN or inf")
    return X


def probability_rows(mu: Any, name: str = "mu", atol: float = 1e-8) -> None:
    """Raise unless ``mu`` (dense or sparse) is an (n, V) array of finite, non-negative
    rows summing to 1. Chapter: *Positions in real text*."""
    shape = getattr(mu, "shape", None)
    if shape is None or len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
        raise ValueError(
            f"{name} must be a 2-D (n, V) array of probability rows, got {shape}"
        )
    values = mu.data if sp.issparse(mu) else np.asarray(mu)
    if not np.all(np.isfinite(values)):
        raise ValueError(
            f"{name} contains NaN or inf: every row must be a probability vector"
        )
    if np.any(values < 0):
        raise ValueError(
            f"{name} has negative entries: every row must be a probability vector"
        )
    sums = np.asarray(mu.sum(axis=1)).ravel()
    bad = np.flatnonzero(np.abs(sums - 1) > atol * max(1, shape[1]) ** 0.5)
    if bad.size:
        raise ValueError(
            f"{name} row {bad[0]} sums to {sums[bad[0]]:.6g}, not 1: normalise the "
            "rows (PositionalMarginals.mu() does) before computing distances"
        )


def distance_matrix(D: Any, name: str = "D", atol: float = 1e-9) -> np.ndarray:
    """``D`` as a float64 square, symmetric, finite, non-negative matrix with zero
    diagonal. Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    D = np.asarray(D, dtype=np.float64)
    if D.ndim != 2 or D.shape[0] != D.shape[1] or D.shape[0] < 1:
        raise ValueError(
            f"{name} must be a square (n, n) distance matrix, got shape {D.shape}"
        )
    if not np.all(np.isfinite(D)):
        raise ValueError(f"{name} contains NaN or inf")
    if np.any(D < 0):
        raise ValueError(f"{name} has negative entries: distances are non-negative")
    scale = max(1.0, float(np.abs(D).max()))
    if not np.allclose(D, D.T, atol=atol * scale, rtol=0):
        raise ValueError(
            f"{name} is not symmetric (max |D - D^T| = {np.abs(D - D.T).max():.3g})"
        )
    if np.any(np.abs(np.diag(D)) > atol * scale):
        raise ValueError(
            f"{name} has a non-zero diagonal: a position is at distance 0 of itself"
        )
    return D


def multiple(value: int, name: str, factor: int, expected: str, fix: str = "") -> int:
    """``value`` if it is a multiple of ``factor`` (``expected`` says so in words:
    "even", "divisible by n_heads=4"). Chapter: *Why a Transformer needs positions*."""
    if value % factor:
        raise fail(name, expected, value, fix)
    return value


def rank(
    r: Any, n: int, d: int, minimum: int = 1, fix: str = "", optional: bool = False
) -> int | None:
    """``r`` as the rank of an n x d table, an integer in [minimum, min(n, d)].
    Chapter: *How many numbers does a positional encoding need?*."""
    fix = fix or f"a rank is at most min(n, d) = {min(n, d)}"
    return integer(r, "r", minimum, min(n, d), fix=fix, optional=optional)

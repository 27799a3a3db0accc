"""geometry.dot_monotonicity and geometry.translation_invariance (the properties of Wang et al. 2021,
measured on the book's tables in *Related work*): known cases, a brute-force reference and a random table as
negative control."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posgeom_utils.encodings import random_encoding, sinusoidal
from posgeom_utils.geometry import dot_monotonicity, translation_invariance


def brute_monotonicity(P: np.ndarray) -> float:
    G = P @ P.T
    wins = []
    for i, j, k in itertools.product(range(len(P)), repeat=3):
        if (j - i) * (k - i) > 0 and abs(i - j) < abs(i - k):
            wins.append(1.0 if G[i, j] > G[i, k] else 0.5 if G[i, j] == G[i, k] else 0.0)
    return float(np.mean(wins))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(3, 9), d=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_monotonicity_matches_brute_force(n, d, seed):
    P = np.random.default_rng(seed).normal(size=(n, d))
    assert dot_monotonicity(P) == pytest.approx(brute_monotonicity(P), abs=1e-12)


def test_sinusoids_are_translation_invariant_and_random_tables_are_not():
    # p_i . p_j = sum_k cos((i - j) w_k): a function of the offset alone
    assert translation_invariance(sinusoidal(40, 64)) == pytest.approx(1.0, abs=1e-10)
    shares = [translation_invariance(random_encoding(40, 64, seed=s, scale=1.0)) for s in range(5)]
    assert max(shares) < 0.2  # the negative control


def test_a_smooth_decaying_table_is_monotone_and_a_random_one_is_not():
    n = 30
    # rows of a Gaussian kernel's square root: p_i . p_j = exp(-(i - j)^2 / 50), strictly decreasing in |i - j|
    G = np.exp(-np.subtract.outer(np.arange(n), np.arange(n)) ** 2 / 50.0)
    w, V = np.linalg.eigh(G)
    P = V * np.sqrt(np.clip(w, 0, None))
    assert dot_monotonicity(P) > 0.999
    assert translation_invariance(P) > 0.999
    rates = [dot_monotonicity(random_encoding(n, 64, seed=s, scale=1.0)) for s in range(5)]
    assert all(abs(r - 0.5) < 0.05 for r in rates)  # the negative control


def test_bad_tables_are_refused():
    for bad in (np.ones(5), np.ones((2, 3)), np.full((4, 2), np.nan)):
        with pytest.raises(ValueError, match="P must|P contains"):
            dot_monotonicity(bad)
        with pytest.raises(ValueError, match="P must|P contains"):
            translation_invariance(bad)

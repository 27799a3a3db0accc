"""The checks of the exercises of *Are nearby positions encoded nearby?*
(``posgeom_utils.teaching.monotonicity``): the worked solutions, run as printed in the chapter on a small
synthetic geometry, are judged correct; wrong answers are not (and never raise); a missing answer is "no
answer yet"; and no message gives the expected value away."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest

import booktools  # tests/ is on sys.path under pytest

from posgeom_utils.corpus import synthetic_mu
from posgeom_utils.geometry import hellinger_distances, monotonicity_violation_rate
from posgeom_utils.teaching.monotonicity import (
    check_brute_force,
    check_random_walk,
    random_walk_table,
)

CHAPTER = Path(__file__).resolve().parents[1] / "notebooks" / "monotonicity.md"
N, WIDTH, SEED = 12, 3, 0


def solution_code(label: str, block: int = 0) -> str:
    """The ``block``-th python block of the worked solution ``label`` in this chapter."""
    return booktools.solution_code(CHAPTER, label, block)


def run_solution(label: str, **chapter_variables) -> object:
    """Run the solution's code with the chapter's names it uses; return its ``answer``."""
    namespace = {"np": np, "rate": lambda X, **kw: monotonicity_violation_rate(X, **kw).rate,
                 **chapter_variables}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(solution_code(label), namespace)  # noqa: S102 (the chapter's own code)
    return namespace["answer"]


def formats(value: float) -> list[str]:
    return [str(value), repr(value), f"{value:.2f}", f"{value:.3f}", f"{value:.4f}",
            f"{value:.1%}", f"{value:.0%}", f"{value:.3g}"]


@pytest.fixture(scope="module")
def D() -> np.ndarray:
    """A small Hellinger geometry (synthetic drifting corpus), with ties in one row like [CLS]'s."""
    mu = synthetic_mu("drift", 16, 64, seed=0)
    mu = np.vstack([np.eye(1, 65, 64), np.hstack([mu, np.zeros((16, 1))])])  # position 0: a point mass
    return hellinger_distances(mu)


def test_chapter_calls_the_checks_with_its_labels() -> None:
    text = CHAPTER.read_text()
    for label, call in (("ex-mono-brute", "check_brute_force(answer, D)"),
                        ("ex-mono-random-walk", "check_random_walk(answer, n, d, seed)")):
        assert f":label: {label}" in text and call in text


def test_brute_force_solution_is_correct(D: np.ndarray) -> None:
    assert np.allclose(D[0, 1:], 1.0)  # the row of ties the solution text explains
    answer = run_solution("ex-mono-brute", D=D)
    result = check_brute_force(answer, D)
    assert result.ok is True and result.exercise == "ex-mono-brute"
    assert check_brute_force(np.float64(answer), D).ok is True
    assert check_brute_force(np.asarray(answer), D).ok is True
    # the solution text: 340 triplets on ten positions
    assert monotonicity_violation_rate(D[:10, :10]).comparisons == 340


@pytest.mark.parametrize("wrong", ["perturbed", "full", [0.1, 0.2], "0.1", {"rate": 0.1}, True, np.nan,
                                   "object", np.zeros((2, 2)), [[0.1], [0.2, 0.3]]])
def test_brute_force_wrong_answers(D: np.ndarray, wrong) -> None:
    expected = monotonicity_violation_rate(D[:10, :10]).rate
    if isinstance(wrong, str) and wrong == "perturbed":
        wrong = expected + 0.01
    elif isinstance(wrong, str) and wrong == "full":  # all positions instead of the first ten
        wrong = monotonicity_violation_rate(D).rate
        assert not np.isclose(wrong, expected)
    elif isinstance(wrong, str) and wrong == "object":  # the package's result object, not its rate
        wrong = monotonicity_violation_rate(D[:10, :10])
    result = check_brute_force(wrong, D)
    assert result.ok is False and result.message


def test_brute_force_bad_arguments_do_not_raise() -> None:
    assert check_brute_force(0.5, "not a matrix").ok is False
    assert check_brute_force(0.5, np.ones((2, 2))).ok is False


def test_brute_force_none_and_secrecy(D: np.ndarray) -> None:
    assert check_brute_force(None, D).ok is None
    expected = monotonicity_violation_rate(D[:10, :10]).rate
    for wrong in (expected + 0.01, "x", [expected]):
        message = repr(check_brute_force(wrong, D))
        assert not any(text in message for text in formats(expected)), message


def test_random_walk_solution_is_correct() -> None:
    answer = run_solution("ex-mono-random-walk", n=N, d=WIDTH, seed=SEED)
    assert check_random_walk(answer, N, WIDTH, SEED).ok is True
    expected = monotonicity_violation_rate(random_walk_table(N, WIDTH, SEED)).rate
    assert 0 < expected < 0.5  # random, but far from chance


def test_random_walk_falls_with_width() -> None:
    """The solution's claim (d): the rate tends to 0 as the width grows (mean over a few seeds)."""
    def mean_rate(width: int) -> float:
        return float(np.mean([monotonicity_violation_rate(random_walk_table(24, width, s)).rate
                              for s in range(4)]))
    assert mean_rate(1) > mean_rate(16) > mean_rate(256)
    assert mean_rate(256) < 0.02


def test_random_walk_opposite_sides_formula() -> None:
    """The solution's claim (c), d = 1, by Monte Carlo."""
    rng = np.random.default_rng(0)
    for a, b in ((1, 2), (2, 5)):
        z = rng.standard_normal((2, 400_000))
        opposite = np.mean(np.abs(np.sqrt(a) * z[0]) > np.abs(np.sqrt(b) * z[1]))
        same = np.mean(np.abs(np.sqrt(a) * z[0]) > np.abs(np.sqrt(a) * z[0] + np.sqrt(b - a) * z[1]))
        assert abs(opposite - 2 / np.pi * np.arctan(np.sqrt(a / b))) < 0.005
        assert abs(same - np.arctan(2 * np.sqrt(a / (b - a))) / np.pi) < 0.005
        assert same < opposite < 0.5


@pytest.mark.parametrize("wrong", ["perturbed", "iid", "other seed", [0.1], "0.2", object(), np.inf])
def test_random_walk_wrong_answers(wrong) -> None:
    expected = monotonicity_violation_rate(random_walk_table(N, WIDTH, SEED)).rate
    if isinstance(wrong, str) and wrong == "perturbed":
        wrong = expected * 1.05
    elif isinstance(wrong, str) and wrong == "iid":  # the steps themselves, not their sums
        wrong = monotonicity_violation_rate(
            np.random.default_rng(SEED).standard_normal((N, WIDTH))).rate
    elif isinstance(wrong, str) and wrong == "other seed":
        wrong = monotonicity_violation_rate(random_walk_table(N, WIDTH, SEED + 1)).rate
    result = check_random_walk(wrong, N, WIDTH, SEED)
    assert result.ok is False and result.message


def test_random_walk_bad_arguments_do_not_raise() -> None:
    assert check_random_walk(0.1, "n", WIDTH, SEED).ok is False
    assert check_random_walk(0.1, 2, WIDTH, SEED).ok is False  # fewer than 3 positions
    assert check_random_walk(0.1, N, -1, SEED).ok is False


def test_random_walk_none_and_secrecy() -> None:
    assert check_random_walk(None, N, WIDTH, SEED).ok is None
    expected = monotonicity_violation_rate(random_walk_table(N, WIDTH, SEED)).rate
    for wrong in (expected + 0.01, "x"):
        message = repr(check_random_walk(wrong, N, WIDTH, SEED))
        assert not any(text in message for text in formats(expected)), message

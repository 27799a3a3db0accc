"""The checks of the exercises of *MDS optimality* (posgeom_utils.teaching.mds_optimality), and the
statements of its worked solutions.

Each worked solution is run as the chapter prints it (its code is read from the chapter's ``{solution}``
block) on a small synthetic corpus, and must be judged correct; wrong, ill-typed and missing answers are
judged without raising, and no verdict shows the expected value.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest

import booktools  # tests/ is on sys.path under pytest

from posgeom_utils.corpus import synthetic_corpus, synthetic_mu
from posgeom_utils.encodings import alibi, sinusoidal
from posgeom_utils.geometry import (
    best_scale, classical_mds, fisher_rao_distances, hellinger_distances, pairwise_distances, stress,
)
from posgeom_utils.marginals import marginals_from_ids
from posgeom_utils.teaching import Verdict
from posgeom_utils.teaching.mds_optimality import check_best_scale, check_rank

CHAPTER = Path(__file__).resolve().parents[1] / "notebooks" / "mds_optimality.md"
D_WIDTH = 32  # the encoding width d of the small instance


def solution_code(label: str, block: int = 0) -> str:
    """The ``block``-th python block of the worked solution ``label`` in this chapter."""
    return booktools.solution_code(CHAPTER, label, block)


@pytest.fixture(scope="module")
def mu() -> dict[str, np.ndarray]:
    """A sampled synthetic corpus (full rank) and one with a point-mass first position, like [CLS]."""
    corpus = synthetic_corpus("drift", n=16, V=128, num_sequences=400, seed=3)
    sampled = marginals_from_ids(corpus.ids, corpus.V).mu()
    with_cls = np.zeros((12, 129))
    with_cls[0, 128] = 1.0  # position 0: a token no other position has
    with_cls[1:, :128] = synthetic_mu("drift", n=11, V=128, seed=4)
    return {"sst2": sampled, "cls": with_cls}


@pytest.fixture(scope="module")
def namespace(mu) -> dict:
    """The chapter's variables that the solutions read."""
    return {"np": np, "dataset": "sst2", "d": D_WIDTH, "names": list(mu),
            "D_H": {name: hellinger_distances(x) for name, x in mu.items()},
            "D_FR": {name: fisher_rao_distances(x) for name, x in mu.items()},
            "sinusoidal": sinusoidal, "pairwise_distances": pairwise_distances, "alibi": alibi,
            "classical_mds": classical_mds, "fisher_rao_distances": fisher_rao_distances,
            "hellinger_distances": hellinger_distances}


def run_solution(label: str, namespace: dict) -> tuple[object, str]:
    """The ``answer`` the solution's code leaves, and what it prints."""
    scope, out = dict(namespace), io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(solution_code(label), scope)
    return scope.get("answer"), out.getvalue()


def formatted(value: float) -> list[str]:
    return [str(value), repr(value), f"{value:.3f}", f"{value:.2f}", f"{value:.4g}", f"{value:.6g}",
            f"{value:g}", f"{value:.1e}"]


def assert_hides(verdict: Verdict, *expected: float) -> None:
    for value in expected:
        for text in formatted(float(value)):
            assert text not in verdict.message, (text, verdict.message)


# ------------------------------------------------------------------------------------- check_rank

def test_rank_solution_is_correct(namespace) -> None:
    D = namespace["D_H"]["sst2"]
    answer, _ = run_solution("ex-mds-rank", namespace)
    assert answer == D.shape[0] - 1  # sampled distributions: full rank n - 1
    verdict = check_rank(answer, D)
    assert verdict.ok is True and verdict.exercise == "ex-mds-rank", verdict


def test_rank_below_full_is_checked_too() -> None:
    """On a low-rank family (rank(B) <= 3) the check expects the low rank, not n - 1."""
    D = hellinger_distances(synthetic_mu("lowrank", n=20, V=60, seed=1, rank=3))
    expected = classical_mds(D).effective_rank
    assert expected <= 3
    assert check_rank(expected, D).ok is True
    assert check_rank(D.shape[0] - 1, D).ok is False


def test_rank_wrong_answers(namespace) -> None:
    D = namespace["D_H"]["sst2"]
    n = D.shape[0]
    for answer in (n, n - 2, float(n - 1) + 0.5, True, "15", [n - 1], np.array([n - 1, n - 1]),
                   {"rank": n - 1}, [[1], [1, 2]], np.nan, object()):
        verdict = check_rank(answer, D)
        assert verdict.ok is False, (answer, verdict)
        assert verdict.message
    assert check_rank(np.int64(n - 1), D).ok is True and check_rank(float(n - 1), D).ok is True


def test_rank_none_and_messages_hide_the_value(namespace) -> None:
    D = namespace["D_H"]["sst2"]
    expected = D.shape[0] - 1
    none = check_rank(None, D)
    assert none.ok is None and "answer = None" in none.message
    for verdict in (none, check_rank(expected, D), check_rank(expected + 1, D)):
        assert str(expected) not in verdict.message


# ------------------------------------------------------------------------------- check_best_scale

def expected_scale_and_stress(D: np.ndarray) -> tuple[float, float]:
    P = sinusoidal(D.shape[0], D_WIDTH)
    return best_scale(pairwise_distances(P), D), stress(P, D, "fitted")


def test_best_scale_solution_is_correct(namespace) -> None:
    D = namespace["D_H"]["sst2"]
    answer, _ = run_solution("ex-mds-scale", namespace)
    verdict = check_best_scale(answer, D, D_WIDTH)
    assert verdict.ok is True and verdict.exercise == "ex-mds-scale", verdict
    np.testing.assert_allclose(answer, expected_scale_and_stress(D), rtol=1e-9)


def test_best_scale_wrong_answers(namespace) -> None:
    D = namespace["D_H"]["sst2"]
    s_star, fitted = expected_scale_and_stress(D)
    raw = stress(sinusoidal(D.shape[0], D_WIDTH), D)
    cases = {
        (s_star, raw): "s* is right",
        (1 / s_star, fitted): "fitted stress is right",
        (s_star * 1.01, fitted * 1.01): "Take E",
        (fitted, s_star): "Take E",
    }
    for answer, hint in cases.items():
        verdict = check_best_scale(answer, D, D_WIDTH)
        assert verdict.ok is False and hint in verdict.message, (answer, verdict)
        assert_hides(verdict, s_star, fitted)
    for answer in (s_star, [s_star], (s_star, fitted, 0.0), "s", {"s": s_star}, [[1.0], [1.0, 2.0]],
                   (np.nan, fitted), ("a", "b")):
        verdict = check_best_scale(answer, D, D_WIDTH)
        assert verdict.ok is False, (answer, verdict)
        assert_hides(verdict, s_star, fitted)


def test_best_scale_none_and_right_hide_the_value(namespace) -> None:
    D = namespace["D_H"]["sst2"]
    s_star, fitted = expected_scale_and_stress(D)
    none = check_best_scale(None, D, D_WIDTH)
    assert none.ok is None and "answer = None" in none.message
    assert_hides(none, s_star, fitted)
    right = check_best_scale([s_star, fitted], D, D_WIDTH)
    assert right.ok is True
    assert_hides(right, s_star, fitted)


def test_fitted_stress_is_one_minus_rho0_squared(namespace) -> None:
    """The identity of the exercise, for an encoding other than the sinusoidal one."""
    D = namespace["D_H"]["sst2"]
    P = np.random.default_rng(0).normal(size=(D.shape[0], 5))
    iu = np.triu_indices(D.shape[0], 1)
    e, t = pairwise_distances(P)[iu], D[iu]
    rho0 = e @ t / np.sqrt((e @ e) * (t @ t))
    assert stress(P, D, "fitted") == pytest.approx(1 - rho0**2, rel=1e-10)
    assert best_scale(pairwise_distances(P), D) == pytest.approx(e @ t / (e @ e), rel=1e-12)


# ------------------------------------------------------- statements of the non-computational solutions

def test_arc_and_chord_bounds(namespace, mu) -> None:
    """2 sqrt(2) d_H <= d_FR <= pi d_H; the upper bound exactly for disjoint supports."""
    _, printed = run_solution("ex-mds-arc", namespace)
    assert "sst2" in printed and "cls" in printed
    for name in namespace["names"]:
        DH, DF = namespace["D_H"][name], namespace["D_FR"][name]
        iu = np.triu_indices(DH.shape[0], 1)
        ratio = DF[iu] / DH[iu]
        assert ratio.min() >= 2 * np.sqrt(2) - 1e-12 and ratio.max() <= np.pi + 1e-12
    DH, DF = namespace["D_H"]["cls"], namespace["D_FR"]["cls"]
    np.testing.assert_allclose(DF[0, 1:] / DH[0, 1:], np.pi)
    # arc between 2 sqrt(mu_i) on the sphere of radius 2, and its chord
    root = 2 * np.sqrt(mu["sst2"])
    angle = np.arccos(np.clip(root @ root.T / 4, -1, 1))
    np.testing.assert_allclose(2 * angle, namespace["D_FR"]["sst2"], atol=1e-6)
    np.testing.assert_allclose(pairwise_distances(root), 2 * np.sqrt(2) * namespace["D_H"]["sst2"],
                               atol=1e-9)


def test_alibi_family(namespace) -> None:
    """The two-component family: Fisher-Rao rank 1 (ALiBi with slope 2 theta), Hellinger rank 2."""
    _, printed = run_solution("ex-mds-alibi", namespace)
    assert printed.split() == ["1", "2", "True"]


def test_no_three_collinear_hellinger_points(mu) -> None:
    """Part (a) of the ALiBi exercise: the triangle inequality of d_H is strict for distinct mu_i."""
    D = hellinger_distances(mu["sst2"])
    n = D.shape[0]
    i, j, k = np.meshgrid(np.arange(n), np.arange(n), np.arange(n), indexing="ij")
    distinct = (i != j) & (j != k) & (i != k)
    assert np.all((D[i, j] + D[j, k] - D[i, k])[distinct] > 1e-6)

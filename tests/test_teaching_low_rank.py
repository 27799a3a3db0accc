"""The checks of the exercises of *Low rank* (``posgeom_utils.teaching.low_rank``): the worked solutions are
judged correct, wrong answers are not (and never raise), a missing answer is "no answer yet", and no message
gives the expected value away."""

from __future__ import annotations

import numpy as np
import pytest

from posgeom_utils.corpus import synthetic_mu
from posgeom_utils.encodings import lowrank_parameter_count
from posgeom_utils.geometry import classical_mds, hellinger_distances, pairwise_distances
from posgeom_utils.teaching.low_rank import (_breakeven, _energy_rank, check_breakeven,
                                             check_energy_rank)


def solution_breakeven(D_H: dict, dataset: str, d: int) -> int:
    """The worked solution of ex-lowrank-breakeven, as printed in the chapter."""
    n_pos = D_H[dataset].shape[0]
    answer = (n_pos * d - 1) // (n_pos + d)  # the largest whole r with r (n + d) < n d
    assert lowrank_parameter_count(n_pos, d, answer) < n_pos * d
    assert lowrank_parameter_count(n_pos, d, answer + 1) >= n_pos * d
    return answer


def solution_energy(mds: dict, dataset: str) -> int:
    """The worked solution of ex-lowrank-energy, as printed in the chapter."""
    lam = np.clip(mds[dataset].eigenvalues, 0, None)
    share = np.cumsum(lam) / lam.sum()
    return int(np.argmax(share >= 0.9)) + 1  # the first r (from 1) with share >= 0.9


@pytest.fixture(scope="module")
def D_H() -> dict[str, np.ndarray]:
    return {kind: hellinger_distances(synthetic_mu(kind, n=24, V=60, seed=1))
            for kind in ("drift", "lowrank", "shift")}


@pytest.mark.parametrize("n, d, expected", [(512, 768, 307), (50, 50, 24), (54, 384, 47), (1, 1, 0),
                                            (64, 384, 54), (10, 1000, 9)])
def test_breakeven_solution_is_correct(n: int, d: int, expected: int) -> None:
    answer = solution_breakeven({"x": np.zeros((n, n))}, "x", d)
    assert answer == expected == _breakeven(n, d)
    assert check_breakeven(answer, n, d).ok is True
    assert check_breakeven(np.int64(answer), n, d).ok is True
    assert check_breakeven(float(answer), n, d).ok is True  # 47.0 is the whole number 47


@pytest.mark.parametrize("wrong", [lambda r: r + 1, lambda r: r - 1, lambda r: r + 0.5, lambda r: str(r),
                                   lambda r: [r], lambda r: np.array([r]), lambda r: True,
                                   lambda r: float("nan"), lambda r: {"r": r}])
def test_breakeven_wrong_answers(wrong) -> None:
    result = check_breakeven(wrong(307), 512, 768)
    assert result.ok is False and result.message


def test_breakeven_bad_arguments_do_not_raise() -> None:
    assert check_breakeven(3, "n", 768).ok is False
    assert check_breakeven(3, 0, 768).ok is False
    assert check_breakeven(3, None, 768).ok is False


def test_breakeven_none_and_secrecy() -> None:
    assert check_breakeven(None, 512, 768).ok is None
    for n, d in ((512, 768), (54, 384), (50, 50)):
        expected = _breakeven(n, d)
        for wrong in (expected + 1, "x", expected - 1):
            message = repr(check_breakeven(wrong, n, d))
            assert str(expected) not in message and f"{n * d / (n + d):.1f}" not in message


@pytest.mark.parametrize("dataset", ["drift", "lowrank", "shift"])
def test_energy_solution_is_correct(D_H: dict, dataset: str) -> None:
    mds = {name: classical_mds(D) for name, D in D_H.items()}  # as the chapter computes them
    answer = solution_energy(mds, dataset)
    assert answer == _energy_rank(D_H[dataset])
    assert check_energy_rank(answer, D_H, dataset).ok is True
    assert check_energy_rank(float(answer), D_H, dataset).ok is True


def test_energy_share_is_the_kept_squared_distance(D_H: dict) -> None:
    """The identity of the solution: the share of the positive spectrum is sum E^2 / sum D^2."""
    D = D_H["drift"]
    lam = np.clip(classical_mds(D).eigenvalues, 0, None)
    share = np.cumsum(lam) / lam.sum()
    for r in (1, 3, 7):
        E = pairwise_distances(classical_mds(D, r).P)
        assert share[r - 1] == pytest.approx((E ** 2).sum() / (D ** 2).sum(), rel=1e-8)


def test_energy_wrong_answers(D_H: dict) -> None:
    r = _energy_rank(D_H["drift"])
    for wrong in (r + 1, r - 1, r + 0.5, str(r), [r], True, -1, {"r": r}):
        result = check_energy_rank(wrong, D_H, "drift")
        assert result.ok is False and result.message


def test_energy_bad_arguments_do_not_raise(D_H: dict) -> None:
    assert check_energy_rank(3, D_H, "imdb").ok is False  # no such corpus
    assert check_energy_rank(3, {"x": np.ones((3, 4))}, "x").ok is False  # not a distance matrix
    assert check_energy_rank(3, None, "x").ok is False


def test_energy_none_and_secrecy(D_H: dict) -> None:
    assert check_energy_rank(None, D_H, "drift").ok is None
    for dataset in D_H:
        expected = _energy_rank(D_H[dataset])
        for wrong in (expected + 1, "x"):
            message = repr(check_energy_rank(wrong, D_H, dataset))
            assert str(expected) not in message

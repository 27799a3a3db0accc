"""The checks of the exercises of *Do distinct positions get distinct vectors?*
(``posgeom_utils.teaching.separation``): the worked solutions are judged correct, wrong answers are not (and
never raise), a missing answer is "no answer yet", and no message gives the expected value away."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posgeom_utils.geometry import pairwise_distances
from posgeom_utils.teaching.separation import (_closest_pair, _table, check_circle_separation,
                                               check_closest_pair)
from posgeom_utils.transformer import PositionalTransformer


def separation(table: np.ndarray) -> float:
    """The chapter's ``separation``, as printed there."""
    table = np.asarray(table, dtype=np.float64)
    D = pairwise_distances(table)
    rms = np.sqrt((table ** 2).sum(1).mean())
    return float(D[np.triu_indices(len(table), 1)].min() / rms)


def solution_circle(synthetic_n: int) -> float:
    """The worked solution of ex-separation-circle."""
    angle = 2 * np.pi * np.arange(synthetic_n) / synthetic_n
    circle = np.stack([np.cos(angle), np.sin(angle)], axis=1)
    return separation(circle)  # equals 2 * np.sin(np.pi / synthetic_n)


def solution_closest(net: PositionalTransformer) -> tuple[int, int]:
    """The worked solution of ex-separation-closest."""
    table = net.pos_table.detach().cpu().numpy().astype(np.float64)
    E = pairwise_distances(table)
    np.fill_diagonal(E, np.inf)  # a position is not its own neighbour
    i, j = np.unravel_index(np.argmin(E), E.shape)
    return (int(min(i, j)), int(max(i, j)))


@pytest.fixture(scope="module")
def net() -> PositionalTransformer:
    torch.manual_seed(0)
    return PositionalTransformer(30, d=8, n_heads=2, n_layers=1, max_len=12, positional="learned")


def number_formats(x: float) -> list[str]:
    return [str(x), f"{x:.2f}", f"{x:.3f}", f"{x:.4f}", f"{x:.6f}", f"{x:.3g}", f"{x:.2e}"]


@pytest.mark.parametrize("n", [2, 3, 16, 64])
def test_circle_solution_is_correct(n: int) -> None:
    answer = solution_circle(n)
    assert answer == pytest.approx(2 * np.sin(np.pi / n))  # the closed form of the solution
    assert check_circle_separation(answer, n).ok is True
    assert check_circle_separation(2 * np.sin(np.pi / n), n).ok is True
    assert check_circle_separation(np.float32(answer), n).ok is True
    assert check_circle_separation(torch.tensor(answer), n).ok is True  # a 0-d tensor is a number


def test_circle_is_scale_free_but_not_translation_free() -> None:
    """The solution's remarks: radius does not matter, a shift of the centre lowers the separation."""
    angle = 2 * np.pi * np.arange(16) / 16
    circle = np.stack([np.cos(angle), np.sin(angle)], axis=1)
    assert separation(5 * circle) == pytest.approx(separation(circle))
    c = 3.0
    shifted = separation(circle + np.array([c, 0.0]))
    assert shifted == pytest.approx(2 * np.sin(np.pi / 16) / np.sqrt(1 + c ** 2))


@pytest.mark.parametrize("wrong", [lambda x: 1.01 * x, lambda x: x / 2, lambda x: str(x),
                                   lambda x: [x, x], lambda x: np.array([x]), lambda x: np.nan,
                                   lambda x: True, lambda x: {"answer": x}])
def test_circle_wrong_answers(wrong) -> None:
    result = check_circle_separation(wrong(solution_circle(16)), 16)
    assert result.ok is False and result.message


def test_circle_bad_arguments_do_not_raise() -> None:
    assert check_circle_separation(0.5, "sixteen").ok is False
    assert check_circle_separation(0.5, 1).ok is False


def test_circle_none_and_secrecy() -> None:
    assert check_circle_separation(None, 16).ok is None
    expected = solution_circle(16)
    for wrong in (0.1, "x", [1.0, 2.0]):
        message = repr(check_circle_separation(wrong, 16))
        assert not any(text in message for text in number_formats(expected))


def test_closest_solution_is_correct(net: PositionalTransformer) -> None:
    answer = solution_closest(net)
    assert check_closest_pair(answer, net).ok is True
    assert check_closest_pair(answer[::-1], net).ok is True  # the order of the pair does not matter
    assert check_closest_pair(list(answer), net).ok is True
    assert check_closest_pair(np.array(answer), net).ok is True


def test_closest_reads_the_table_of_the_model(net: PositionalTransformer) -> None:
    table = _table(net)
    assert table.dtype == np.float64 and table.shape == (12, 8)
    assert _closest_pair(table) == solution_closest(net)


def test_closest_wrong_answers(net: PositionalTransformer) -> None:
    i, j = solution_closest(net)
    other = next((a, b) for a in range(12) for b in range(a + 1, 12) if (a, b) != (i, j))
    for wrong in (other, (i, i), (i, j, 0), (float(i), float(j)), f"{i}, {j}", i, {i: j},
                  [[i, j]], (str(i), str(j))):
        result = check_closest_pair(wrong, net)
        assert result.ok is False and result.message


def test_closest_bad_arguments_do_not_raise() -> None:
    assert check_closest_pair((0, 1), "net").ok is False
    assert check_closest_pair((0, 1), np.ones((1, 3))).ok is False
    no_table = PositionalTransformer(30, d=8, n_heads=2, n_layers=1, max_len=12, positional="rope")
    assert check_closest_pair((0, 1), no_table).ok is False


def test_closest_none_and_secrecy(net: PositionalTransformer) -> None:
    assert check_closest_pair(None, net).ok is None
    i, j = solution_closest(net)
    for wrong in ((0, 0), "x", (0, 1, 2)):
        message = repr(check_closest_pair(wrong, net))
        assert not any(text in message for text in (str((i, j)), str([i, j]), f"{i}, {j}",
                                                     f"{i} and {j}"))

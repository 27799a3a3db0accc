"""The checks of the exercises of *Why a Transformer needs positions* (``posgeom_utils.teaching.necessity``):
the worked solutions are judged correct, wrong answers are not (and never raise), a missing answer is
"no answer yet", and no message gives the expected value away."""

from __future__ import annotations

import pytest
import torch

from posgeom_utils.teaching.necessity import (_causal_matching_rows, _reversal_invariant,
                                              check_causal_rows, check_reversal_invariant)
from posgeom_utils.transformer import PositionalTransformer

POSITIONALS = ["none", "learned", "sinusoidal", "rope", "alibi"]
L = 8


@pytest.fixture(scope="module")
def ids() -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randint(1, 100, (4, L), generator=generator)


def solution_reversal(ids: torch.Tensor, positionals: list[str]) -> list[str]:
    """The worked solution of ex-necessity-reversal-invariant, as printed in the chapter."""
    blind = []
    for positional in positionals:
        model = PositionalTransformer(100, d=32, n_heads=4, n_layers=2, max_len=L,
                                      positional=positional).eval()
        with torch.no_grad():
            gap = (model(ids.flip(1)) - model(ids)).abs().max().item()
        if gap < 1e-4:  # float32 rounding is about 1e-7 here
            blind.append(positional)
    return blind


def solution_causal(ids: torch.Tensor, n_layers: int = 2) -> list[int]:
    """The worked solution of ex-necessity-causal, as printed in the chapter."""
    swap = torch.arange(L)
    swap[[2, 5]] = swap[[5, 2]]
    causal = PositionalTransformer(100, d=32, n_heads=4, n_layers=n_layers, max_len=L,
                                   positional="none", task="mlm", causal=True).eval()
    with torch.no_grad():
        gap = (causal.hidden_states(ids[:, swap])
               - causal.hidden_states(ids)[:, swap]).abs().amax(dim=(0, 2))
    return [i for i in range(L) if gap[i] < 1e-4]  # rounding is about 1e-6


def formats(values) -> list[str]:
    values = sorted(values, key=str)
    return [str(values), str(set(values)), str(tuple(values)), ", ".join(map(str, values))]


def test_reversal_solution_is_correct(ids: torch.Tensor) -> None:
    torch.manual_seed(1)  # a different model from the check's: the answer does not depend on it
    answer = solution_reversal(ids, POSITIONALS)
    assert set(answer) == {"none", "alibi"}  # the chapter's solution text
    assert check_reversal_invariant(answer, ids, POSITIONALS).ok is True
    assert check_reversal_invariant(tuple(reversed(answer)), ids, POSITIONALS).ok is True


@pytest.mark.parametrize("wrong", [["none"], ["none", "alibi", "rope"], [], "none alibi", "none",
                                   ["none", "ALiBi"], [0, 1], {"none": True}, 3.0, ["none", None]])
def test_reversal_wrong_answers(ids: torch.Tensor, wrong) -> None:
    result = check_reversal_invariant(wrong, ids, POSITIONALS)
    assert result.ok is False and result.message


def test_reversal_bad_arguments_do_not_raise() -> None:
    result = check_reversal_invariant(["none"], "not ids", POSITIONALS)
    assert result.ok is False
    assert check_reversal_invariant(["none"], torch.ones(3), POSITIONALS).ok is False


def test_reversal_none_and_secrecy(ids: torch.Tensor) -> None:
    assert check_reversal_invariant(None, ids, POSITIONALS).ok is None
    expected = _reversal_invariant(ids, POSITIONALS)
    for wrong in (["learned"], "x", [1]):
        message = repr(check_reversal_invariant(wrong, ids, POSITIONALS))
        assert not any(text in message for text in formats(expected))
        assert "alibi" not in message.lower()


def test_causal_solution_is_correct(ids: torch.Tensor) -> None:
    torch.manual_seed(1)
    answer = solution_causal(ids)
    assert answer == [0, 1]  # the chapter's solution text: only the rows before the first swap
    assert check_causal_rows(answer, ids).ok is True
    assert check_causal_rows(torch.tensor(answer), ids).ok is True


def test_causal_one_layer_rule(ids: torch.Tensor) -> None:
    """The one-layer prediction of the solution: rows 0, 1 and 6 onwards."""
    expected = [0, 1, *range(6, L)]
    assert sorted(_causal_matching_rows(ids, n_layers=1)) == expected
    assert solution_causal(ids, n_layers=1) == expected
    assert check_causal_rows(expected, ids).ok is False  # the two-layer answer differs


@pytest.mark.parametrize("wrong", [[0], [0, 1, 2], [], [0.0, 1.0], "0, 1", [[0, 1]], 1, {"a": 0},
                                   [0, 1, 6, 7], torch.tensor([True, True])])
def test_causal_wrong_answers(ids: torch.Tensor, wrong) -> None:
    result = check_causal_rows(wrong, ids)
    assert result.ok is False and result.message


def test_causal_bad_arguments_do_not_raise() -> None:
    assert check_causal_rows([0, 1], torch.ones(5)).ok is False
    assert check_causal_rows([0, 1], "ids").ok is False


def test_causal_none_and_secrecy(ids: torch.Tensor) -> None:
    assert check_causal_rows(None, ids).ok is None
    expected = _causal_matching_rows(ids)
    for wrong in ([0], "x", [0, 1, 2]):
        message = repr(check_causal_rows(wrong, ids))
        assert not any(text in message for text in formats(expected))


def test_checks_leave_the_random_state_alone(ids: torch.Tensor) -> None:
    torch.manual_seed(123)
    state = torch.get_rng_state()
    check_causal_rows([0], ids)
    check_reversal_invariant(["none"], ids, POSITIONALS)
    assert torch.equal(torch.get_rng_state(), state)

"""The checks of the exercises of *Positions in real text* (posgeom_utils.teaching.positions_in_real_text).

Each worked solution is run as the chapter prints it (its code is read from the chapter's ``{solution}``
block) on small random texts, and must be judged correct; wrong, ill-typed and missing answers are judged
without raising, and no verdict shows the expected value.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

import booktools  # tests/ is on sys.path under pytest

from posgeom_utils.marginals import PositionalMarginals, positional_marginals
from posgeom_utils.teaching import Verdict
from posgeom_utils.teaching.positions_in_real_text import (
    check_end_hazard, check_perplexity, check_support,
)

CHAPTER = Path(__file__).resolve().parents[1] / "notebooks" / "positions_in_real_text.md"
WORDS = ["the", "a", "film", "movie", "is", "was", "not", "good", "bad", "great", "plot", ",", ".",
         "!", "actors", "unbelievably", "cinematography", "it's", "don't", "naïve"]


def solution_code(label: str, block: int = 0) -> str:
    """The ``block``-th python block of the worked solution ``label`` in this chapter."""
    return booktools.solution_code(CHAPTER, label, block)


@pytest.fixture(scope="module")
def marginals(tokenizer) -> PositionalMarginals:
    """Counts of random texts of 0 to 30 words, some truncated at n = 24, special tokens kept."""
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 30))) for _ in range(300)]
    return positional_marginals(texts, tokenizer, n=24, special_tokens="keep", min_count=5,
                                cache=False)


def run_solution(label: str, namespace: dict, block: int = 0) -> object:
    exec(solution_code(label, block), namespace)
    return namespace["answer"]


def namespace_for(marginals: PositionalMarginals, tokenizer) -> dict:
    """The chapter's variables that the solutions read."""
    return {"np": np, "marginals": {"sst2": marginals}, "dataset": "sst2",
            "sep_share": marginals.mu()[:, tokenizer.sep_token_id]}


def formatted(value: float) -> list[str]:
    return [str(value), repr(value), f"{value:.3f}", f"{value:.2f}", f"{value:.4g}", f"{value:.6g}",
            f"{value:g}", str(int(round(value)))]


def assert_hides(verdict: Verdict, expected: np.ndarray) -> None:
    """No entry of ``expected`` shows in the verdict's message (as a number of 3+ characters: shorter
    ones, such as a digit, can appear by coincidence, e.g. in an answer's shape)."""
    values = np.atleast_1d(np.asarray(expected, dtype=float))
    assert str(values) not in verdict.message
    for value in values:
        for text in formatted(float(value)):
            if len(text) >= 3:
                assert text not in verdict.message, (text, verdict.message)


CASES = [  # (check, exercise label, the expected value from the science package)
    (check_support, "ex-positions-support", lambda m: m.support),
    (check_perplexity, "ex-positions-perplexity", lambda m: 2 ** m.entropy()),
    (check_end_hazard, "ex-positions-sep",
     lambda m: (m.support[:-1] - m.support[1:]) / m.support[:-1]),
]


def test_the_instance_is_not_trivial(marginals: PositionalMarginals) -> None:
    assert marginals.n == 24  # some texts are truncated: the last position is n - 1
    assert np.all(np.diff(marginals.support) <= 0) and marginals.support[0] > marginals.support[-1]


@pytest.mark.parametrize("check, label, expected", CASES)
def test_worked_solution_is_correct(marginals, tokenizer, check, label, expected) -> None:
    answer = run_solution(label, namespace_for(marginals, tokenizer))
    verdict = check(answer, marginals)
    assert verdict.ok is True, verdict
    assert verdict.exercise == label


def test_end_hazard_is_the_share_of_sep(marginals, tokenizer) -> None:
    """The identity the exercise asks to prove, and the last position of truncated texts."""
    sep = marginals.mu()[:, tokenizer.sep_token_id]
    np.testing.assert_allclose(run_solution("ex-positions-sep", namespace_for(marginals, tokenizer)),
                               sep[:-1], rtol=0, atol=1e-12)
    assert sep[-1] == 1.0  # position n - 1: every sequence reaching it ends there


def test_perplexity_is_at_most_the_number_of_distinct_tokens(marginals) -> None:
    perplexity = 2 ** marginals.entropy()
    distinct = np.diff(marginals.counts.indptr)
    assert np.all(perplexity <= distinct * (1 + 1e-12)) and perplexity[0] == pytest.approx(1.0)


@pytest.mark.parametrize("check, label, expected", CASES)
def test_wrong_answers_are_not_correct(marginals, check, label, expected) -> None:
    value = np.asarray(expected(marginals), dtype=float)
    wrong = [value * 1.01 + 0.5, value[:-1], np.append(value, 1.0), value[None, :], "a string",
             {"answer": 1}, float(value[0]), [[1.0], [1.0, 2.0]], np.full(value.shape, "x"), value.astype(str),
             np.full(value.shape, np.nan), -value]
    for answer in wrong:
        verdict = check(answer, marginals)
        assert verdict.ok is False, (answer, verdict)
        assert verdict.message, "a wrong answer gets a hint"
        assert_hides(verdict, value)


def test_perplexity_hints_at_nats_and_entropy(marginals) -> None:
    nats = np.exp(marginals.entropy(base=np.e))  # = the right perplexity: e ** H_nats
    assert check_perplexity(nats, marginals).ok is True
    two_to_nats = 2 ** marginals.entropy(base=np.e)
    assert "nats" in check_perplexity(two_to_nats, marginals).message
    assert "entropy in bits" in check_perplexity(marginals.entropy(), marginals).message


@pytest.mark.parametrize("check, label, expected", CASES)
def test_no_answer_yet(marginals, check, label, expected) -> None:
    verdict = check(None, marginals)
    assert verdict.ok is None and not bool(verdict)
    assert "answer = None" in verdict.message
    assert_hides(verdict, expected(marginals))


@pytest.mark.parametrize("check, label, expected", CASES)
def test_right_answer_message_hides_the_value(marginals, check, label, expected) -> None:
    verdict = check(expected(marginals), marginals)
    assert verdict.ok is True
    assert_hides(verdict, expected(marginals))

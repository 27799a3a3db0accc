"""The exercise checks (``posgeom_utils.teaching``) and the course page's inputs.

For every computational exercise, the python block of its ``{solution}`` in the chapter source runs on
small synthetic inputs, bound to the names its exercise cell passes, and the check that cell calls judges
that answer correct; wrong answers are judged not correct without raising, None is "no answer yet", and
no message shows the expected value. No chapter is executed.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import math
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import booktools  # tests/ is on sys.path under pytest
import posgeom_utils.teaching as teaching
from posgeom_utils import encodings, geometry, transformer
from posgeom_utils.corpus import synthetic_corpus, synthetic_mu
from posgeom_utils.geometry import classical_mds, hellinger_distances, linear_cka
from posgeom_utils.marginals import positional_marginals
from posgeom_utils.mlm import reference_geometries, within_lag_correlation

#: the science functions the chapters import, by name
SCIENCE = {k: v for m in (encodings, geometry, transformer) for k, v in vars(m).items()}
NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
TABLE = teaching.exercises(NOTEBOOKS)
COMPUTATIONAL = [tuple(row) for row in TABLE[TABLE["computational"]][["chapter", "label"]].values]
WORDS = "the a film movie is was not good bad great plot , . ! actors unbelievably naïve".split()


def chapter_cell(chapter: str, start: str) -> str:
    """The code cell of ``chapter`` that starts with ``start`` (a function the solutions call)."""
    text = (NOTEBOOKS / f"{chapter}.md").read_text()
    cell = re.search(r"```\{code-cell\} ipython3\n(" + re.escape(start) + r".*?)\n```", text, re.S)
    return cell[1]


def check_call(chapter: str, label: str) -> str:
    """The ``check_...(answer, ...)`` line of the exercise cell just before the solution ``label``."""
    text = (NOTEBOOKS / f"{chapter}.md").read_text()
    stub = text[: text.index("{solution} " + label)].rsplit(":tags: [exercise]", 1)[1]
    assert "{solution}" not in stub, f"{label}: no exercise cell of its own"
    return next(line for line in stub.splitlines() if line.startswith("check_"))


@pytest.fixture(scope="module")
def names(tokenizer) -> dict:
    """Every chapter variable an exercise cell or a solution reads, on tiny synthetic inputs."""
    rng, draw = random.Random(0), np.random.default_rng(0)
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(0, 30))) for _ in range(300)]
    marginals = positional_marginals(
        texts, tokenizer, n=24, special_tokens="keep", min_count=5, cache=False
    )  # some texts truncated: the support falls
    mu = np.zeros((24, 41))
    mu[0, 40], mu[1:, :40] = 1.0, synthetic_mu("drift", 23, 40, seed=0)  # row 0 like [CLS]: ties
    D = hellinger_distances(mu)
    ns = dict(SCIENCE, np=np, torch=torch, dataset="sst2", d=32, n=24, seed=0, L=8, synthetic_n=16)
    ns.update(marginals={"sst2": marginals}, sep_share=marginals.mu()[:, tokenizer.sep_token_id])
    ns.update(D=D, D_H={"sst2": D}, mds={"sst2": classical_mds(D)})
    ns.update(ids=torch.randint(1, 100, (4, 8), generator=torch.Generator().manual_seed(0)))
    ns.update(positionals=["none", "learned", "sinusoidal", "rope", "alibi"])
    ns.update(real_table=draw.standard_normal((12, 8)), P_in=draw.standard_normal((14, 8)))
    ns.update(probes={"sst2": draw.standard_normal((5, 10, 8))})
    ns.update(halves={"sst2": [draw.standard_normal((5, 10, 8)) for _ in range(2)]})
    ns.update(references=reference_geometries(synthetic_corpus("drift", n=8, V=12, num_sequences=400).ids, 12))
    ns.update(within_lag_correlation=within_lag_correlation)
    exec(chapter_cell("separation", "def separation("), ns)  # noqa: S102 - the chapters' own code
    exec(chapter_cell("monotonicity", "def rate("), ns)  # noqa: S102
    return ns


def solve(names: dict, chapter: str, label: str) -> object:
    """The ``answer`` the worked solution of ``label`` computes, as the chapter prints it."""
    scope = dict(names)
    with contextlib.redirect_stdout(io.StringIO()):
        exec(booktools.solution_code(NOTEBOOKS / f"{chapter}.md", label), scope)  # noqa: S102
    return scope["answer"]


def judge(names: dict, chapter: str, label: str, answer: object) -> teaching.Verdict:
    """The verdict of the exercise cell's own check call on ``answer``."""
    return eval(check_call(chapter, label), {**names, **vars(teaching), "answer": answer})  # noqa: S307


def shown(value: object) -> list[str]:
    """Ways a message could show ``value``: the whole, and each number in common formats."""
    items = value if isinstance(value, (list, tuple, set)) else np.ravel(np.asarray(value)).tolist()
    texts = [str(value), str(items), ", ".join(map(str, items)), str(sorted(items, key=str))]
    for x in (x for x in items if not isinstance(x, str)):
        texts += [repr(x), f"{x:.2f}", f"{x:.3f}", f"{x:.4g}", f"{x:.1%}", str(round(x))]
    return [t for t in texts if len(t) >= 2]  # a single digit can appear in any hint


def near_misses(answer: object) -> list[object]:
    """Wrong answers close to ``answer``: one item fewer, repeated or changed, or numbers a bit off."""
    if isinstance(answer, (list, tuple)):
        last = answer[-1] * 2 if isinstance(answer[-1], str) else answer[-1] + 1
        return [list(answer)[:-1], [*answer, answer[-1]], [*answer[:-1], last]]
    a = np.asarray(answer)
    off = a + 1 if a.dtype.kind in "iu" else a * 1.01 + 0.01
    return [off, a[:-1]] if a.ndim else [off.item(), [a.item()]]


#: common mistakes, one per exercise where the near misses would not show one
MISTAKES = {
    "ex-positions-perplexity": lambda ns: ns["marginals"]["sst2"].entropy(),  # H, not 2**H
    "ex-mono-brute": lambda ns: ns["rate"](ns["D"]),  # every position, not the first ten
    "ex-necessity-causal": lambda ns: [0, 1, *range(6, ns["L"])],  # the one-layer rule
    "ex-layer-cka-change": lambda ns: [  # the index into the list of changes, not the layer
        int(np.argmin([linear_cka(h[l - 1], h[l]) for l in range(1, len(h))]))
        for h in ns["halves"]["sst2"]
    ],
}
#: what a solution's text says its answer is
STATED = {
    "ex-positions-sep": lambda ns, a: np.allclose(a, ns["sep_share"][:-1], rtol=0, atol=1e-12),
    "ex-necessity-reversal-invariant": lambda ns, a: set(a) == {"none", "alibi"},
    "ex-necessity-causal": lambda ns, a: a == [0, 1],
}
#: the exercises whose answer is a collection in any order
UNORDERED = {"ex-necessity-reversal-invariant", "ex-necessity-causal", "ex-separation-closest"}
JUNK = ["a string", {"answer": 1}, [[1.0], [1.0, 2.0]], object(), True, float("nan")]


@pytest.mark.parametrize("chapter, label", COMPUTATIONAL, ids=[c[1] for c in COMPUTATIONAL])
def test_worked_solution_is_judged_correct(names: dict, chapter: str, label: str) -> None:
    answer = solve(names, chapter, label)
    verdict = judge(names, chapter, label, answer)
    assert (verdict.exercise, verdict.ok, verdict.message) == (label, True, ""), verdict
    assert STATED.get(label, lambda ns, a: True)(names, answer), (label, answer)
    if label in UNORDERED:
        assert judge(names, chapter, label, answer[::-1]).ok is True


@pytest.mark.parametrize("chapter, label", COMPUTATIONAL, ids=[c[1] for c in COMPUTATIONAL])
def test_wrong_and_missing_answers(names: dict, chapter: str, label: str) -> None:
    right = solve(names, chapter, label)
    wrong = near_misses(right) + JUNK + ([MISTAKES[label](names)] if label in MISTAKES else [])
    for answer in wrong:
        verdict = judge(names, chapter, label, answer)
        assert verdict.ok is False and verdict.message, (answer, verdict)
        assert not [t for t in shown(right) if t in verdict.message], (answer, verdict)
    none = judge(names, chapter, label, None)
    assert none.ok is None and "answer = None" in none.message and "no answer yet" in repr(none)


@pytest.mark.parametrize("chapter, label", COMPUTATIONAL, ids=[c[1] for c in COMPUTATIONAL])
def test_unusable_arguments_are_reported_not_raised(chapter: str, label: str) -> None:
    call = check_call(chapter, label)
    check, count = getattr(teaching, call.split("(")[0]), len(call.split(","))
    assert list(inspect.signature(check).parameters)[0] == "answer", "the signature shown by help()"
    verdict = check(0.5, *["x"] * (count - 1))
    assert verdict.ok is False and "could not run" in verdict.message, verdict


def test_checks_leave_the_random_state_alone(names: dict) -> None:
    torch.manual_seed(123)
    state = torch.get_rng_state()
    teaching.check_causal_rows([0], names["ids"])
    teaching.check_reversal_invariant(["none"], names["ids"], names["positionals"])
    assert torch.equal(torch.get_rng_state(), state)


def test_solution_statements(names: dict) -> None:
    """The ALiBi family of ex-mds-alibi (Fisher-Rao rank 1, Hellinger rank 2, ALiBi with slope
    2 theta), and the random walk of ex-mono-random-walk, whose rate falls with the width."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(booktools.solution_code(NOTEBOOKS / "mds_optimality.md", "ex-mds-alibi"), dict(names))
    assert printed.getvalue().split() == ["1", "2", "True"]

    def walk(width: int, seed: int) -> np.ndarray:
        return np.cumsum(np.random.default_rng(seed).standard_normal((24, width)), axis=0)

    rates = [np.mean([names["rate"](walk(w, s)) for s in range(4)]) for w in (1, 16, 256)]
    assert rates[0] > rates[1] > rates[2] and rates[2] < 0.02


def test_course_inputs(tmp_path: Path) -> None:
    """*Teaching with this book*: times from results files; exercises with their difficulty."""
    for profile, chapter, seconds in [
        ("class", "a", 1.5),
        ("default", "a", 30.0),
        ("default", "b", 12),
    ]:
        (tmp_path / profile / chapter).mkdir(parents=True)
        (tmp_path / profile / chapter / "results.json").write_text(
            json.dumps({"provenance": {"wall_seconds": seconds}})
        )
    times = teaching.chapter_times(tmp_path, ("class", "default"))
    assert times.loc["a"].tolist() == [1.5, 30.0] and times.loc["b", "default"] == 12.0
    assert teaching.chapter_times(tmp_path).columns.tolist() == ["class"]  # what the course page shows
    assert math.isnan(times.loc["b", "class"])
    (tmp_path / "ch.md").write_text(
        "````{exercise} Easy one (★)\n:label: ex-ch-easy\n\nText\n````\n\n"
        "````{exercise} Hard one (★★★)\n:label: ex-ch-hard\n\nText\n````\n\n"
        "```{code-cell} ipython3\n:tags: [exercise]\n\nanswer = None\n```\n"
    )
    table = teaching.exercises(tmp_path)
    assert table.values.tolist() == [
        ["ch", "ex-ch-easy", "Easy one", 1, False],
        ["ch", "ex-ch-hard", "Hard one", 3, True],
    ]


def test_every_chapter_has_graded_and_checked_exercises() -> None:
    per_chapter = TABLE.groupby("chapter")
    assert (per_chapter.size() >= 3).all() and (per_chapter["difficulty"].nunique() >= 2).all()
    assert per_chapter["computational"].any().all(), "each chapter has a checked exercise"

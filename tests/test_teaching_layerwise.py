"""The checks of the exercises of *Positions layer by layer* (``posgeom_utils.teaching.layerwise``): the
worked solutions, run as printed in the chapter on small synthetic stacks of positional matrices, are
judged correct; wrong answers are not (and never raise); a missing answer is "no answer yet"; and no
message gives the expected values away."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest

import booktools  # tests/ is on sys.path under pytest

from posgeom_utils.corpus import synthetic_mu
from posgeom_utils.geometry import linear_cka
from posgeom_utils.teaching.layerwise import (
    check_cka_change,
    check_cka_with_input,
    cka_change_layers,
    cka_with_input,
)

CHAPTER = Path(__file__).resolve().parents[1] / "notebooks" / "layerwise.md"
LAYERS, K, WIDTH, POSITIONS = 5, 10, 8, 14


def solution_code(label: str, block: int = 0) -> str:
    """The ``block``-th python block of the worked solution ``label`` in this chapter."""
    return booktools.solution_code(CHAPTER, label, block)


def run_solution(label: str, **chapter_variables) -> object:
    """Run the solution's code with the chapter's names it uses; return its ``answer``."""
    namespace = {"np": np, "linear_cka": linear_cka, **chapter_variables}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(solution_code(label), namespace)  # noqa: S102 (the chapter's own code)
    return namespace["answer"]


def stack(seed: int) -> np.ndarray:
    """A synthetic (layers, k, d) stack: a slowly drifting sqrt(mu) geometry, one abrupt layer."""
    rng = np.random.default_rng(seed)
    base = np.sqrt(synthetic_mu("drift", K, WIDTH, seed=seed))
    layers = [base]
    for layer in range(1, LAYERS):
        step = 0.8 if layer == 3 else 0.05  # layer 3 reorganises the positions
        layers.append(layers[-1] @ (np.eye(WIDTH) + step * rng.standard_normal((WIDTH, WIDTH))))
    return np.stack(layers) + rng.standard_normal(WIDTH)  # an uncentred offset, as in the halves


@pytest.fixture(scope="module")
def chapter() -> dict:
    """The chapter's names the two stubs use, on synthetic inputs."""
    rng = np.random.default_rng(0)
    P_in = rng.standard_normal((POSITIONS, WIDTH))  # longer than k, as the model's table is
    return {"dataset": "sst2", "probes": {"sst2": stack(0)}, "P_in": P_in,
            "halves": {"sst2": [stack(1), stack(2)]}}


def uncentred_cka(X: np.ndarray, Y: np.ndarray) -> float:
    """A common mistake: the Gram matrices of the raw rows, not of the centred ones."""
    Kx, Ky = X @ X.T, Y @ Y.T
    return float(np.sum(Kx * Ky) / (np.linalg.norm(Kx) * np.linalg.norm(Ky)))


def formats(values) -> list[str]:
    values = [float(v) for v in np.ravel(values)]
    texts = [str(values), str(np.round(values, 3)), str(np.asarray(values))]
    for v in values:
        texts += [repr(v), f"{v:.3f}", f"{v:.4f}", f"{v:.6f}"]
    return texts


def test_chapter_calls_the_checks_with_its_labels() -> None:
    text = CHAPTER.read_text()
    for label, call in (("ex-layer-cka-input", "check_cka_with_input(answer, probes[dataset], P_in)"),
                        ("ex-layer-cka-change", "check_cka_change(answer, halves[dataset])")):
        assert f":label: {label}" in text and call in text


def test_cka_input_solution_is_correct(chapter: dict) -> None:
    answer = run_solution("ex-layer-cka-input", **chapter)
    M, P_in = chapter["probes"]["sst2"], chapter["P_in"]
    result = check_cka_with_input(answer, M, P_in)
    assert result.ok is True and result.exercise == "ex-layer-cka-input"
    assert check_cka_with_input(list(answer), M, P_in).ok is True


@pytest.mark.parametrize("wrong", ["perturbed", "uncentred", "no layer 0", "scalar", "2-D", "text",
                                   "ragged", "nan", "dict"])
def test_cka_input_wrong_answers(chapter: dict, wrong: str) -> None:
    M, P_in = chapter["probes"]["sst2"], chapter["P_in"]
    expected = cka_with_input(M, P_in)
    answer = {
        "perturbed": expected + 0.01,
        "uncentred": np.array([uncentred_cka(X, P_in[:K]) for X in M]),
        "no layer 0": expected[1:],
        "scalar": float(expected.mean()),
        "2-D": expected[None, :],
        "text": "0.5, 0.6",
        "ragged": [[0.1, 0.2], [0.3]],
        "nan": np.full_like(expected, np.nan),
        "dict": dict(enumerate(expected)),
    }[wrong]
    result = check_cka_with_input(answer, M, P_in)
    assert result.ok is False and result.message


def test_cka_input_bad_arguments_do_not_raise(chapter: dict) -> None:
    assert check_cka_with_input([0.5], "M", chapter["P_in"]).ok is False
    assert check_cka_with_input([0.5], np.zeros((2, 3)), chapter["P_in"]).ok is False
    assert check_cka_with_input([0.5], chapter["probes"]["sst2"], np.zeros((3, 2, 2))).ok is False


def test_cka_input_none_and_secrecy(chapter: dict) -> None:
    M, P_in = chapter["probes"]["sst2"], chapter["P_in"]
    assert check_cka_with_input(None, M, P_in).ok is None
    expected = cka_with_input(M, P_in)
    for wrong in (expected + 0.01, expected[1:], "x"):
        message = repr(check_cka_with_input(wrong, M, P_in))
        assert not any(text in message for text in formats(expected)), message


def test_cka_change_solution_is_correct(chapter: dict) -> None:
    answer = run_solution("ex-layer-cka-change", **chapter)
    halves = chapter["halves"]["sst2"]
    assert answer == cka_change_layers(halves) == [3, 3]  # the synthetic abrupt layer
    result = check_cka_change(answer, halves)
    assert result.ok is True and result.exercise == "ex-layer-cka-change"
    assert check_cka_change(tuple(answer), halves).ok is True
    assert check_cka_change(np.array(answer), halves).ok is True
    assert check_cka_change([float(a) for a in answer], halves).ok is True


@pytest.mark.parametrize("wrong", [[2, 3], [3], [3, 3, 3], [0, 0], 3, "3, 3", [3.5, 3], [[3], [3]],
                                   {3}, [True, True], [None, None], [np.nan, 3]])
def test_cka_change_wrong_answers(chapter: dict, wrong) -> None:
    result = check_cka_change(wrong, chapter["halves"]["sst2"])
    assert result.ok is False and result.message


def test_cka_change_counts_from_layer_one(chapter: dict) -> None:
    """Forgetting the + 1 (an index into the list of changes) is a wrong answer."""
    halves = chapter["halves"]["sst2"]
    off_by_one = [int(np.argmin([linear_cka(h[l - 1], h[l]) for l in range(1, len(h))]))
                  for h in halves]
    assert check_cka_change(off_by_one, halves).ok is False


def test_cka_change_bad_arguments_do_not_raise() -> None:
    assert check_cka_change([1, 1], "halves").ok is False
    assert check_cka_change([1, 1], [np.zeros((1, 4, 3)), np.zeros((1, 4, 3))]).ok is False


def test_cka_change_none_and_secrecy(chapter: dict) -> None:
    halves = chapter["halves"]["sst2"]
    assert check_cka_change(None, halves).ok is None
    expected = cka_change_layers(halves)
    for wrong in ([1, 1], "x", [1]):
        message = repr(check_cka_change(wrong, halves))
        texts = [str(expected), str(tuple(expected)), " and ".join(map(str, expected))]
        texts += [f"layer {layer}" for layer in expected]
        assert not any(text in message for text in texts), message


def test_cka_invariances_of_the_solution() -> None:
    """The claims of ex-layer-cka-invariance, numerically."""
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((12, 5)), rng.standard_normal((12, 7))
    Q = np.linalg.qr(rng.standard_normal((9, 9)))[0][:5]  # 5 x 9, orthonormal rows
    assert np.isclose(linear_cka(-3.0 * X @ Q + 2.0, Y), linear_cka(X, Y))
    assert np.isclose(linear_cka(X, X @ Q), 1.0)
    X4 = np.array([[1.0, 0], [-1, 0], [0, 1], [0, -1]])
    for a in (2.0, 10.0):
        value = linear_cka(X4, X4 @ np.diag([1.0, a]))
        assert np.isclose(value, (1 + a**2) / np.sqrt(2 * (1 + a**4))) and value < 1

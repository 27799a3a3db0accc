"""The checks of the book's computational exercises, and the inputs of the course page.

Chapter: *Teaching with this book*. ``check_<exercise>(answer, ...)`` recomputes the
right value with the science package and returns a :class:`Verdict` that never shows it;
it never raises for a wrong or missing answer. Outside the science hash
(``posgeom_utils.repro.sources``): no number depends on it."""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from posgeom_utils.checks import integer
from posgeom_utils.encodings import lowrank_parameter_count, sinusoidal
from posgeom_utils.geometry import (
    best_scale,
    classical_mds,
    linear_cka,
    pairwise_distances,
    stress,
)
from posgeom_utils.geometry import monotonicity_violation_rate
from posgeom_utils.marginals import PositionalMarginals


@dataclass(frozen=True)
class Verdict:
    """A check's outcome, ``ok``: True, False (a hint) or None (no answer yet).
    Chapter: *Teaching with this book*."""

    exercise: str
    ok: bool | None
    message: str

    def __repr__(self) -> str:
        mark = {True: "correct", False: "not yet", None: "no answer yet"}[self.ok]
        return f"{self.exercise}: {mark}. {self.message}".rstrip()

    def _repr_html_(self) -> str:
        colour = {True: "#1b7f3b", False: "#b3261e", None: "#666666"}[self.ok]
        return f'<p style="color:{colour}"><b>{repr(self).split(".")[0]}.</b> {self.message}</p>'


def _agrees(answer: Any, expected: Any) -> bool:
    """Whether ``answer`` is ``expected`` (a frozenset: in any order), in the same
    shape: names and integers exactly, other numbers within rtol 1e-6 and atol 1e-9;
    text or booleans never."""
    unordered = isinstance(expected, frozenset)
    if unordered and all(isinstance(e, str) for e in expected):
        names = isinstance(answer, (list, tuple, set)) and all(
            isinstance(a, str) for a in answer
        )
        return names and sorted(answer) == sorted(expected)
    try:
        values = np.asarray(answer)
    except Exception:  # noqa: BLE001 - a ragged or exotic answer is simply not numbers
        return False
    target = np.asarray(sorted(expected) if unordered else expected)
    # text, booleans, objects
    if values.dtype.kind not in "iuf" or values.shape != target.shape:
        return False
    tol = 0.0 if target.dtype.kind in "iu" else 1e-6
    values = np.sort(values) if unordered else values
    return bool(
        np.all(np.isfinite(values)) and np.allclose(values, target, tol, tol / 1000)
    )


def _exercise(
    label: str, hint: str
) -> Callable[[Callable[..., Any]], Callable[..., Verdict]]:
    """Make ``expected(*args)``, the right value by the science package, the check
    ``check(answer, *args)`` of exercise ``label``; a wrong answer is shown ``hint``,
    never the value."""

    def decorate(expected: Callable[..., Any]) -> Callable[..., Verdict]:
        @functools.wraps(expected)
        def check(answer: Any, *args: Any, **kwargs: Any) -> Verdict:
            if answer is None:
                return Verdict(
                    label, None, "Replace `answer = None` by your code, run it again."
                )
            try:
                value = expected(*args, **kwargs)
            # noqa: BLE001 - a check reports bad arguments, never raises
            except Exception as err:
                return Verdict(
                    label, False, f"The check could not run on these arguments: {err!r}"
                )
            ok = _agrees(answer, value)
            return Verdict(label, ok, "" if ok else hint)

        signature = inspect.signature(expected)
        first = inspect.Parameter("answer", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        parameters = [first, *signature.parameters.values()]
        check.__signature__ = signature.replace(
            parameters=parameters, return_annotation="Verdict"
        )
        return check

    return decorate


@_exercise(
    "ex-learned-alike",
    "One number: within_lag_correlation of the two distance matrices.",
)
def check_within_lag(references: dict) -> float:
    """Exercise *How alike are the corpus geometries?*. Chapter: *Does a trained
    Transformer learn its corpus's geometry?*."""
    from ..mlm import within_lag_correlation

    return within_lag_correlation(references["l2"], references["hellinger"])


@_exercise(
    "ex-positions-support", "One count per kept position: L tokens reach i when L > i."
)
def check_support(marginals: PositionalMarginals) -> np.ndarray:
    """Exercise *How many sequences reach position i?*. Chapter: *Positions in real
    text*."""
    return marginals.support


@_exercise(
    "ex-positions-perplexity",
    "One 2**H per kept position: H = -sum p log2 p over p > 0.",
)
def check_perplexity(marginals: PositionalMarginals) -> np.ndarray:
    """Exercise *How many tokens compete for a position?*. Chapter: *Positions in real
    text*."""
    return 2.0 ** marginals.entropy()


@_exercise(
    "ex-positions-sep", "One share per position but the last: ending at i / reaching i."
)
def check_end_hazard(marginals: PositionalMarginals) -> np.ndarray:
    """Exercise *Where does [SEP] stand?*. Chapter: *Positions in real text*."""
    s = marginals.support.astype(np.float64)
    return (s[:-1] - s[1:]) / s[:-1]


@_exercise(
    "ex-mds-rank", "One whole number: eigenvalues of B above 1e-9 times the largest."
)
def check_rank(D: np.ndarray) -> int:
    """Exercise *The rank of B*.
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    return classical_mds(D).effective_rank


@_exercise(
    "ex-mds-scale",
    "A pair (s*, fitted stress), sums over i < j: s* = sum(E D) / sum(E E).",
)
def check_best_scale(D: np.ndarray, d: int) -> np.ndarray:
    """Exercise *The best scale*.
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    P = sinusoidal(np.asarray(D).shape[0], d)
    return np.array([best_scale(pairwise_distances(P), D), stress(P, D, "fitted")])


@_exercise(
    "ex-lowrank-breakeven", "One whole number: the largest r with r (n + d) < n d."
)
def check_breakeven(n: int, d: int) -> int:
    """Exercise *Break-even rank*. Chapter: *How many numbers does a positional encoding
    need?*."""
    n, d = integer(n, "n"), integer(d, "d")
    return max(
        r for r in range(min(n, d) + 1) if lowrank_parameter_count(n, d, r) < n * d
    )


@_exercise(
    "ex-lowrank-energy",
    "One whole number: clip negative eigenvalues to 0; ranks from one.",
)
def check_energy_rank(D_H: Mapping[str, np.ndarray], name: str) -> int:
    """Exercise *Rank for 90% of the trace*.
    Chapter: *How many numbers does a positional encoding need?*."""
    lam = np.clip(classical_mds(D_H[name]).eigenvalues, 0.0, None)
    return int(np.argmax(np.cumsum(lam) / lam.sum() >= 0.9)) + 1


@_exercise(
    "ex-mono-brute",
    "One number: first ten positions, |i - j| < |i - k|, ties count half.",
)
def check_brute_force(D: np.ndarray) -> float:
    """Exercise *Counting triplets by hand*. Chapter: *Are nearby positions encoded
    nearby?*."""
    E = np.asarray(D, dtype=np.float64)[:10, :10]
    return monotonicity_violation_rate(E, input_kind="distances").rate


@_exercise(
    "ex-mono-random-walk", "One number: the rate of the cumsum (axis=0) of those steps."
)
def check_random_walk(n: int, d: int, seed: int) -> float:
    """Exercise *A random table that is not chance*.
    Chapter: *Are nearby positions encoded nearby?*."""
    steps = np.random.default_rng(seed).standard_normal((n, d))
    return monotonicity_violation_rate(np.cumsum(steps, axis=0)).rate


def _untrained(ids: Any, positional: str, **options: Any) -> tuple[Any, Any]:
    """A seeded untrained model of the chapter's size (width 32, 4 heads, 2 layers),
    without gradients, and ``ids`` as a CPU tensor; the caller's random state stays as
    it was."""
    import torch

    from posgeom_utils.transformer import PositionalTransformer

    x = torch.as_tensor(ids).detach().cpu().long()
    size = dict(d=32, n_heads=4, n_layers=2, max_len=x.shape[1], positional=positional)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = PositionalTransformer(int(x.max()) + 1, **size, **options)
    return net.eval().requires_grad_(False), x


@_exercise(
    "ex-necessity-reversal-invariant",
    "Mechanisms of `positionals`: same logits reversed.",
)
def check_reversal_invariant(ids: Any, positionals: Iterable[str]) -> frozenset[str]:
    """Exercise *Which mechanisms cannot see a reversal?*.
    Chapter: *Why a Transformer needs positions*."""
    nets = {p: _untrained(ids, p, task="classify") for p in map(str, positionals)}
    return frozenset(
        p
        for p, (net, x) in nets.items()
        if (net(x.flip(1)) - net(x)).abs().max() < 1e-4
    )


@_exercise(
    "ex-necessity-causal",
    "0-based positions, 2 layers: rows of f(swap x) and swap f(x).",
)
def check_causal_rows(ids: Any) -> frozenset[int]:
    """Exercise *Causal rows* (positions 2 and 5 swapped). Chapter: *Why a Transformer
    needs positions*."""
    net, x = _untrained(ids, "none", task="mlm", causal=True)
    swap = list(range(x.shape[1]))
    swap[2], swap[5] = 5, 2
    gap = (
        (net.hidden_states(x[:, swap]) - net.hidden_states(x)[:, swap])
        .abs()
        .amax(dim=(0, 2))
    )
    return frozenset(i for i, g in enumerate(gap.tolist()) if g < 1e-4)


@_exercise(
    "ex-separation-circle",
    "One number, independent of the radius: neighbours are nearest.",
)
def check_circle_separation(synthetic_n: int) -> float:
    """Exercise *Positions on a circle*. Chapter: *Do distinct positions get distinct
    vectors?*."""
    angle = 2 * np.pi * np.arange(integer(synthetic_n, "synthetic_n", 2)) / synthetic_n
    circle = np.stack([np.cos(angle), np.sin(angle)], axis=1)
    nearest = pairwise_distances(circle)[np.triu_indices(len(circle), 1)].min()
    return nearest / np.sqrt((circle**2).sum(1).mean())


@_exercise(
    "ex-separation-closest",
    "Two 0-based positions (i, j): the smallest distance, i != j.",
)
def check_closest_pair(table: np.ndarray) -> frozenset[int]:
    """Exercise *The closest positions*. Chapter: *Do distinct positions get distinct
    vectors?*."""
    E = pairwise_distances(np.asarray(table, dtype=np.float64))
    i, j = np.triu_indices(len(E), 1)
    k = int(np.argmin(E[i, j]))
    return frozenset((int(i[k]), int(j[k])))


@_exercise(
    "ex-layer-cka-input",
    "One CKA per layer, layer 0 first, with P_in[:k], k = M.shape[1].",
)
def check_cka_with_input(M: np.ndarray, P_in: np.ndarray) -> np.ndarray:
    """Exercise *CKA with the input table*. Chapter: *Positions layer by layer*."""
    M = np.asarray(M, dtype=np.float64)
    return np.array([linear_cka(X, np.asarray(P_in)[: M.shape[1]]) for X in M])


@_exercise(
    "ex-layer-cka-change",
    "One layer l >= 1 per half: lowest CKA of layers l - 1 and l.",
)
def check_cka_change(halves: Sequence[np.ndarray]) -> np.ndarray:
    """Exercise *The largest change, by CKA*. Chapter: *Positions layer by layer*."""
    cka = [
        [linear_cka(h[l - 1], h[l]) for l in range(1, len(h))]
        for h in map(np.asarray, halves)
    ]
    return 1 + np.array([int(np.argmin(c)) for c in cka])


#: ``{exercise} Title (stars)`` and the ``:label:`` line under it
EXERCISE = re.compile(
    r"^(`{3,}|:{3,})\{exercise\}\s*(?P<title>.*?)\s*\n:label:\s*(?P<label>\S+)", re.M
)


def chapter_times(results: Path, profiles: Sequence[str] = ("smoke",)) -> pd.DataFrame:
    """Wall seconds of each chapter (rows) per profile (columns) from the committed
    results under ``results``; NaN where a profile has none. Chapter: *Teaching with
    this book*."""
    times: dict[str, dict[str, float]] = {}
    for profile in profiles:
        for path in sorted((Path(results) / profile).glob("*/results.json")):
            seconds = (
                json.loads(path.read_text()).get("provenance", {}).get("wall_seconds")
            )
            if isinstance(seconds, (int, float)):
                times.setdefault(path.parent.name, {})[profile] = float(seconds)
    frame = pd.DataFrame.from_dict(times, orient="index").reindex(
        columns=list(profiles)
    )
    return frame.rename_axis("chapter")


def exercises(source_dir: Path) -> pd.DataFrame:
    """Every exercise of the chapters in ``source_dir``: chapter, label, title,
    difficulty (stars), computational (a cell tagged ``exercise`` follows).
    Chapter: *Teaching with this book*."""
    rows = []
    for path in sorted(Path(source_dir).glob("*.md")):
        text = path.read_text()
        found = list(EXERCISE.finditer(text))
        for match, end in zip(found, [m.start() for m in found[1:]] + [len(text)]):
            title, stars = re.fullmatch(
                r"(.*?)\s*(?:\((★+)\))?", match["title"]
            ).groups()
            computational = ":tags: [exercise]" in text[match.end() : end]
            rows.append(
                (path.stem, match["label"], title, len(stars or ""), computational)
            )
    return pd.DataFrame(
        rows, columns=["chapter", "label", "title", "difficulty", "computational"]
    )


def prose_words(source: Path) -> int:
    """Words of prose in a MyST chapter before its exercises (code cells, front matter,
    roles and directives' options left out): what a reader reads. Chapter: *Teaching
    with this book*."""
    text = Path(source).read_text(encoding="utf-8")
    text = re.sub(r"^---\n.*?\n---\n", "", text, count=1, flags=re.S)
    text = re.sub(r"```\{code-cell\}.*?\n```", "", text, flags=re.S)
    text = text.split("\n## Exercises")[0]
    text = re.sub(r"\{[a-z:-]+\}`[^`]*`", "X", text)
    text = re.sub(r"^:[a-z-]+:.*$", "", text, flags=re.M)
    return len(re.findall(r"[A-Za-z][A-Za-z'-]*", text))

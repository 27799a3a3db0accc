"""The checks of the book's computational exercises, and the inputs of the course page.
``check_<exercise>(answer, ...)`` returns a :class:`Verdict` that never shows the right
value nor raises. Chapter: *Teaching with this book*."""

from __future__ import annotations

import functools
import inspect
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from posgeom_utils import geometry
from posgeom_utils.checks import integer
from posgeom_utils.encodings import lowrank_parameter_count, sinusoidal
from posgeom_utils.marginals import PositionalMarginals

_MARKS = {True: "correct", False: "not yet", None: "no answer yet"}


@dataclass(frozen=True)
class Verdict:
    """A check's outcome, ``ok``: True, False (a hint) or None (no answer yet).
    Chapter: *Teaching with this book*."""

    exercise: str
    ok: bool | None
    message: str

    def __repr__(self) -> str:
        return f"{self.exercise}: {_MARKS[self.ok]}. {self.message}".rstrip()

    def _repr_html_(self) -> str:
        colour = {True: "#1b7f3b", False: "#b3261e", None: "#666666"}[self.ok]
        mark = _MARKS[self.ok].capitalize()  # the exercise is just above: no label
        return f'<p style="color:{colour}"><b>{mark}.</b> {self.message}</p>'


def _agrees(answer: Any, expected: Any) -> bool:
    """Whether ``answer`` is ``expected`` (a frozenset: in any order): names and
    integers exactly, other numbers within rtol 1e-6, atol 1e-9; never text."""
    unordered = isinstance(expected, frozenset)
    if unordered and all(isinstance(e, str) for e in expected):
        listed = isinstance(answer, (list, tuple, set))
        names = listed and all(isinstance(a, str) for a in answer)
        return names and sorted(answer) == sorted(expected)
    try:
        values = np.asarray(answer)
    except Exception:  # noqa: BLE001 - a ragged or exotic answer is not numbers
        return False
    target = np.asarray(sorted(expected) if unordered else expected)
    if values.dtype.kind not in "iuf" or values.shape != target.shape:
        return False
    values = np.sort(values) if unordered else values
    tol = 0.0 if target.dtype.kind in "iu" else 1e-6
    close = np.allclose(values, target, rtol=tol, atol=tol / 1000)
    return bool(close and np.isfinite(values).all())


def _exercise(label: str) -> Callable[[Callable[..., Any]], Callable[..., Verdict]]:
    """Make ``expected(*args)``, the right value, the check ``check(answer, *args)`` of
    ``label``: a wrong answer is shown its docstring up to ``Chapter:``."""

    def decorate(expected: Callable[..., Any]) -> Callable[..., Verdict]:
        hint = expected.__doc__.split("Chapter:")[0].strip()

        @functools.wraps(expected)
        def check(answer: Any, *args: Any, **kwargs: Any) -> Verdict:
            if answer is None:
                message = "Replace `answer = None` by your code, run it again."
                return Verdict(label, None, message)
            try:
                value = expected(*args, **kwargs)
            except Exception as err:  # noqa: BLE001 - a check reports, never raises
                message = f"The check could not run on these arguments: {err!r}"
                return Verdict(label, False, message)
            ok = _agrees(answer, value)
            return Verdict(label, ok, "" if ok else hint)

        sig = inspect.signature(expected)  # help() shows (answer, <its arguments>)
        answer = inspect.Parameter("answer", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        args = [answer, *sig.parameters.values()]
        check.__signature__ = sig.replace(parameters=args, return_annotation="Verdict")
        return check

    return decorate


@_exercise("ex-learned-alike")
def check_within_lag(references: dict) -> float:
    """One number: within_lag_correlation of the two distance matrices.
    Chapter: *Does a trained Transformer learn its corpus's geometry?*."""
    from posgeom_utils.mlm import within_lag_correlation

    return within_lag_correlation(references["l2"], references["hellinger"])


@_exercise("ex-positions-support")
def check_support(marginals: PositionalMarginals) -> np.ndarray:
    """One count per kept position: L tokens reach i when L > i.
    Chapter: *Positions in real text*."""
    return marginals.support


@_exercise("ex-positions-perplexity")
def check_perplexity(marginals: PositionalMarginals) -> np.ndarray:
    """One 2**H per kept position: H = -sum p log2 p over p > 0.
    Chapter: *Positions in real text*."""
    return 2.0 ** marginals.entropy()


@_exercise("ex-positions-sep")
def check_end_hazard(marginals: PositionalMarginals) -> np.ndarray:
    """One share per position but the last: ending at i / reaching i.
    Chapter: *Positions in real text*."""
    s = marginals.support.astype(np.float64)
    return -np.diff(s) / s[:-1]


@_exercise("ex-mds-rank")
def check_rank(D: np.ndarray) -> int:
    """One whole number: eigenvalues of B above 1e-9 times the largest.
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    return geometry.classical_mds(D).effective_rank


@_exercise("ex-mds-scale")
def check_best_scale(D: np.ndarray, d: int) -> np.ndarray:
    """A pair (s*, fitted stress), sums over i < j: s* = sum(E D) / sum(E E).
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    P = sinusoidal(np.asarray(D).shape[0], d)
    scale = geometry.best_scale(geometry.pairwise_distances(P), D)
    return np.array([scale, geometry.stress(P, D, "fitted")])


@_exercise("ex-lowrank-breakeven")
def check_breakeven(n: int, d: int) -> int:
    """One whole number: the largest r with r (n + d) < n d.
    Chapter: *How many numbers does a positional encoding need?*."""
    ranks = range(min(n, d) + 1)
    return max(r for r in ranks if lowrank_parameter_count(n, d, r) < n * d)


@_exercise("ex-lowrank-energy")
def check_energy_rank(D_H: Mapping[str, np.ndarray], name: str) -> int:
    """One whole number: clip negative eigenvalues to 0; ranks from one.
    Chapter: *How many numbers does a positional encoding need?*."""
    lam = np.clip(geometry.classical_mds(D_H[name]).eigenvalues, 0.0, None)
    return int(np.argmax(np.cumsum(lam) / lam.sum() >= 0.9)) + 1


@_exercise("ex-mono-brute")
def check_brute_force(D: np.ndarray) -> float:
    """One number: first ten positions, |i - j| < |i - k|, ties count half.
    Chapter: *Are nearby positions encoded nearby?*."""
    E = np.asarray(D, dtype=np.float64)[:10, :10]
    return geometry.monotonicity_violation_rate(E, input_kind="distances").rate


@_exercise("ex-mono-random-walk")
def check_random_walk(n: int, d: int, seed: int) -> float:
    """One number: the rate of the cumsum (axis=0) of those steps.
    Chapter: *Are nearby positions encoded nearby?*."""
    steps = np.random.default_rng(seed).standard_normal((n, d))
    return geometry.monotonicity_violation_rate(np.cumsum(steps, axis=0)).rate


def _untrained(ids: Any, **options: Any) -> tuple[Any, Any]:
    """A seeded untrained model (width 32, 4 heads, 2 layers) without gradients, and
    ``ids`` as a CPU tensor; the caller's random state stays as it was."""
    import torch

    from posgeom_utils.transformer import PositionalTransformer

    x = torch.as_tensor(ids).detach().cpu().long()
    size = {"d": 32, "n_heads": 4, "n_layers": 2, "max_len": x.shape[1]}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = PositionalTransformer(int(x.max()) + 1, **size, **options)
    return net.eval().requires_grad_(False), x


@_exercise("ex-necessity-reversal-invariant")
def check_reversal_invariant(ids: Any, positionals: Iterable[str]) -> frozenset[str]:
    """Mechanisms of `positionals`: same logits reversed.
    Chapter: *Why a Transformer needs positions*."""
    nets = {p: _untrained(ids, positional=p, task="classify") for p in positionals}
    gaps = {p: (net(x.flip(1)) - net(x)).abs().max() for p, (net, x) in nets.items()}
    return frozenset(p for p, gap in gaps.items() if gap < 1e-4)


@_exercise("ex-necessity-causal")
def check_causal_rows(ids: Any) -> frozenset[int]:
    """0-based positions, 2 layers: rows of f(swap x) and swap f(x).
    Chapter: *Why a Transformer needs positions* (positions 2 and 5 swapped)."""
    net, x = _untrained(ids, positional="none", task="mlm", causal=True)
    swap = list(range(x.shape[1]))
    swap[2], swap[5] = 5, 2
    gap = (net.hidden_states(x[:, swap]) - net.hidden_states(x)[:, swap]).abs()
    return frozenset(i for i, g in enumerate(gap.amax(dim=(0, 2)).tolist()) if g < 1e-4)


@_exercise("ex-separation-circle")
def check_circle_separation(synthetic_n: int) -> float:
    """One number, independent of the radius: neighbours are nearest.
    Chapter: *Do distinct positions get distinct vectors?*."""
    n = integer(synthetic_n, "synthetic_n", 2)
    return 2 * np.sin(np.pi / n)  # the chord between neighbours over the radius


@_exercise("ex-separation-closest")
def check_closest_pair(table: np.ndarray) -> frozenset[int]:
    """Two 0-based positions (i, j): the smallest distance, i != j.
    Chapter: *Do distinct positions get distinct vectors?*."""
    E = geometry.pairwise_distances(np.asarray(table, dtype=np.float64))
    np.fill_diagonal(E, np.inf)
    return frozenset(map(int, np.unravel_index(np.argmin(E), E.shape)))


@_exercise("ex-layer-cka-input")
def check_cka_with_input(M: np.ndarray, P_in: np.ndarray) -> np.ndarray:
    """One CKA per layer, layer 0 first, with P_in[:k], k = M.shape[1].
    Chapter: *Positions layer by layer*."""
    M = np.asarray(M, dtype=np.float64)
    return np.array([geometry.linear_cka(X, np.asarray(P_in)[: M.shape[1]]) for X in M])


@_exercise("ex-layer-cka-change")
def check_cka_change(halves: Sequence[np.ndarray]) -> np.ndarray:
    """One layer l >= 1 per half: lowest CKA of layers l - 1 and l.
    Chapter: *Positions layer by layer*."""
    cka = geometry.linear_cka
    changes = [[cka(a, b) for a, b in pairwise(h)] for h in map(np.asarray, halves)]
    return 1 + np.array([int(np.argmin(c)) for c in changes])


def chapter_times(results: Path, profiles: Sequence[str] = ("class",)) -> pd.DataFrame:
    """Wall seconds of each chapter (rows) per profile (columns) in the committed
    results; NaN where a profile has none. Chapter: *Teaching with this book*."""
    times: dict[str, dict[str, float]] = {}
    for profile in profiles:
        for path in sorted((Path(results) / profile).glob("*/results.json")):
            run = json.loads(path.read_text()).get("provenance", {})
            if isinstance(seconds := run.get("wall_seconds"), (int, float)):
                times.setdefault(path.parent.name, {})[profile] = float(seconds)
    frame = pd.DataFrame.from_dict(times, orient="index")
    return frame.reindex(columns=list(profiles)).rename_axis("chapter")


def stored_run_seconds(store: Path) -> pd.DataFrame:
    """Per chapter (rows) of a store laid out as ``<chapter>/<name>/<run>.json``: its
    ``stored runs``, the ``timed runs`` among them (a run records its training seconds
    as ``result["seconds"]``, cumulative, training steps only, evaluations excluded) and
    ``stored training (s)``, the sum of their last entries: the compute the stored runs
    took, summed over runs whatever ran them in parallel; NaN where none is timed.
    Chapter: *Teaching with this book*."""
    rows: dict[str, dict[str, float]] = {}
    for path in sorted(Path(store).glob("*/*/*.json")):
        chapter = path.parent.parent.name
        row = rows.setdefault(chapter, {"stored runs": 0, "timed runs": 0})
        row["stored runs"] += 1
        try:
            seconds = json.loads(path.read_text()).get("result", {}).get("seconds")
        except (ValueError, AttributeError):  # unreadable, or a result not a mapping
            seconds = None
        last = seconds[-1] if isinstance(seconds, list) and seconds else None
        if isinstance(last, (int, float)) and math.isfinite(last):
            row["timed runs"] += 1
            trained = row.get("stored training (s)", 0.0)
            row["stored training (s)"] = trained + float(last)
    columns = ["stored runs", "timed runs", "stored training (s)"]
    frame = pd.DataFrame.from_dict(rows, orient="index").reindex(columns=columns)
    frame[columns[:2]] = frame[columns[:2]].fillna(0).astype(int)
    return frame.rename_axis("chapter")


def reference_times(results: Path, store: Path | None = None) -> pd.DataFrame:
    """Per chapter (rows) at the ``reference`` profile, two times that differ by what
    the store saves: ``reference run (s)``, the wall seconds of the committed run (which
    reads the chapter's memoised runs from the store, where it has any), and ``stored
    training (s)``, the compute those stored runs took (:func:`stored_run_seconds` of
    ``store``, default ``results/store``), with the counts of ``stored runs`` and
    ``timed runs``. Chapter: *Teaching with this book*."""
    store = Path(results) / "store" if store is None else Path(store)
    reading = chapter_times(Path(results), ("reference",))["reference"]
    frame = reading.rename("reference run (s)").to_frame()
    frame = frame.join(stored_run_seconds(store), how="left")
    counts = ["stored runs", "timed runs"]
    frame[counts] = frame[counts].fillna(0).astype(int)
    return frame.rename_axis("chapter")


#: ``{exercise} Title (stars)`` and the ``:label:`` line under it
_EXERCISE = re.compile(
    r"^(?:`{3,}|:{3,})\{exercise\}\s*(.*?)\s*\n:label:\s*(\S+)", re.MULTILINE
)


def exercises(source_dir: Path) -> pd.DataFrame:
    """Every exercise in ``source_dir``: chapter, label, title, stars, computational (a
    cell tagged ``exercise`` follows). Chapter: *Teaching with this book*."""
    rows = []
    for path in sorted(Path(source_dir).glob("*.md")):
        parts = _EXERCISE.split(path.read_text())  # text, then title, label, text ...
        for heading, label, text in zip(parts[1::3], parts[2::3], parts[3::3]):
            title, stars = re.fullmatch(r"(.*?)\s*(?:\((★+)\))?", heading).groups()
            computational = ":tags: [exercise]" in text
            rows.append((path.stem, label, title, len(stars or ""), computational))
    columns = ["chapter", "label", "title", "difficulty", "computational"]
    return pd.DataFrame(rows, columns=columns)


def prose_words(source: Path) -> int:
    """Words of prose in a MyST chapter before its exercises, without code, front
    matter, roles, options: what a reader reads. Chapter: *Teaching with this book*."""
    text = Path(source).read_text(encoding="utf-8")
    text = re.sub(r"^---\n.*?\n---\n", "", text, count=1, flags=re.DOTALL)
    text = re.sub(r"```\{code-cell\}.*?\n```", "", text, flags=re.DOTALL)
    text = text.split("\n## Exercises")[0]
    text = re.sub(r"\{[a-z:-]+\}`[^`]*`", "X", text)
    text = re.sub(r"^:[a-z-]+:.*$", "", text, flags=re.MULTILINE)
    return len(re.findall(r"[A-Za-z][A-Za-z'-]*", text))


@dataclass(frozen=True)
class Session:
    """One class of the course: the chapters read before it, what it teaches (MyST
    Markdown, math allowed), an extra in-class activity, its minutes and the chapters it
    reruns at ``class``. Chapter: *Teaching with this book*."""

    chapters: tuple[str, ...]
    teaches: str
    activity: str = ""
    activity_minutes: int = 0
    activity_runs: tuple[str, ...] = ()


#: minutes of a class: the theorem and its proof, each chapter's student notebook run at
#: ``class`` and discussed (plus its measured run), each ★ exercise; reading speed
LECTURE_MINUTES, NOTEBOOK_MINUTES, STAR_MINUTES, WORDS_PER_MINUTE = 30, 10, 10, 200
#: the longest class the plan allows, in minutes
SESSION_LIMIT = 90
#: the command that reruns the central chapter and its controls at ``class``, and where
#: it writes (the chapter's exercise *Rerun the control and read its number*)
CONTROL_RUN = "posgeom run --profile class --chapters learned_geometry --out runs/class"

#: the course: every chapter once, in the order of the book (the appendix on the paper's
#: stresses with the chapter it is the appendix of)
SESSIONS = (
    Session(
        ("positions_in_real_text",),
        "the positional marginals $\\mu_i$, their support, the Hellinger distance "
        "$d_{\\mathrm{H}}(\\mu_i, \\mu_j)$, sampling noise and its correction",
    ),
    Session(
        ("necessity", "separation"),
        "permutation equivariance (Theorem 1), its proof and check; order tasks and a "
        "probe of a frozen model; distinct vectors for distinct positions (Theorem 4, "
        "a proof sketch), conditions (a) and (b), controls of matched difficulty",
    ),
    Session(
        ("mds_optimality", "stress_forensics"),
        "the Hellinger geometry is Euclidean; classical MDS, strain and stress; "
        "sinusoids, RoPE and ALiBi scored against the corpus; which definitions the "
        "paper's stresses need",
    ),
    Session(
        ("low_rank", "monotonicity"),
        "the spectrum of $B = -\\tfrac12 J D_{\\mathrm{H}}^2 J$, low-rank tables "
        "$P = AB^\\top$ with $r(n + d)$ numbers; triplet violation rates, the premise "
        "on real text, the NTK argument (our reconstruction)",
    ),
    Session(
        ("layerwise",),
        "the positional geometry of every layer of a pre-trained model, against "
        "chance and the sinusoids; CKA between layers",
    ),
    Session(
        ("learned_geometry",),
        "the central experiment: a table trained from scratch against the corpus's "
        "geometry, the predictions written before the runs, the controls; the ledger",
        activity="run the chapter and its controls from the command line "
        f"(`{CONTROL_RUN}`, the notebook's run), read the row-shuffled control against "
        "the band of random tables and judge prediction 4",
        activity_minutes=15,
    ),
)


def _title(path: Path) -> str:
    return next(
        line[2:] for line in path.read_text().splitlines() if line.startswith("# ")
    )


def course_plan(
    notebooks: Path,
    results: Path,
    sessions: Sequence[Session] = SESSIONS,
    store: Path | None = None,
) -> pd.DataFrame:
    """One row per session (from 1): its chapters, reading minutes before class, ★
    exercises, the measured ``class`` seconds of its runs (notebooks and activity), the
    minutes in class, and, for its chapters at the ``reference`` profile, the seconds of
    the committed runs (which read the store) and of the stored runs' training (what
    computing the store took; :func:`reference_times`), with the counts of stored and
    timed runs. Chapter: *Teaching with this book*."""
    measured = chapter_times(Path(results))["class"]
    reference = reference_times(Path(results), store)
    stars = (
        exercises(Path(notebooks)).query("difficulty == 1")["chapter"].value_counts()
    )
    rows = []
    for k, s in enumerate(sessions, 1):
        words = sum(prose_words(Path(notebooks) / f"{c}.md") for c in s.chapters)
        runs = [measured.get(c, math.nan) for c in (*s.chapters, *s.activity_runs)]
        n_stars = int(sum(stars.get(c, 0) for c in s.chapters))
        minutes = LECTURE_MINUTES + NOTEBOOK_MINUTES * len(s.chapters)
        minutes += STAR_MINUTES * n_stars + s.activity_minutes + sum(runs) / 60
        ref = reference.reindex(list(s.chapters))
        timed = ref["stored training (s)"].dropna()
        rows.append(
            {
                "session": k,
                "chapters": s.chapters,
                "titles": [_title(Path(notebooks) / f"{c}.md") for c in s.chapters],
                "reading (min)": words / WORDS_PER_MINUTE,
                "stars": n_stars,
                "runs (s)": sum(runs),
                "in class (min)": minutes,
                "reference run (s)": ref["reference run (s)"].sum(min_count=len(ref)),
                "stored training (s)": timed.sum() if len(timed) else math.nan,
                "stored runs": int(ref["stored runs"].fillna(0).sum()),
                "timed runs": int(ref["timed runs"].fillna(0).sum()),
                "teaches": s.teaches,
                "activity": s.activity,
            }
        )
    return pd.DataFrame(rows).set_index("session")


def markdown_table(
    frame: pd.DataFrame, columns: Mapping[str, Callable[[Any], str]]
) -> str:
    """A Markdown table (MyST renders its math and roles) of ``frame``'s rows: a column
    per ``{header: cell(row)}``, ``|`` escaped. Chapter: *Teaching with this book*."""

    def cell(text: Any) -> str:
        return " ".join(str(text).split()).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(cell(f(row)) for f in columns.values()) + " |")
    return "\n".join(lines)

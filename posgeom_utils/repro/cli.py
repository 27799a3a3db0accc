"""The ``posgeom`` command line. Chapter: *The optimal encoding: classical MDS on
Hellinger geometry* and *Are nearby positions encoded nearby?* (``stress``),
*Reproduction ledger* (``run``), *Beyond one machine* (``count``)."""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import integer
from ..settings import CACHE_ENV, PROGRESS_ENV, cache_dir
from .profiles import PROFILES, SIZE_PARAMETERS

PROG = "posgeom"
SCORES = ("raw_stress", "fitted_stress", "violation_rate")

STRESS_SUMMARY = (
    "stress and monotonicity of a model's positional encoding, the MDS optimum and "
    "sinusoidal against D_H, the Hellinger distances of a corpus's positional tokens"
)
STRESS_EPILOG = """\
examples:
  posgeom stress --model bert-base-uncased --corpus sst2 --n 64
  posgeom stress --model ./my-checkpoint --corpus texts.txt --n 32 --min-count 5 \\
      --plot stress.png

Each row scores an encoding P against D_H: raw stress, stress after the best rescaling
of P and the fraction of triplets |i-j| < |i-k| where P puts j farther from i than k
(0 monotone, 0.5 random).
"""

RUN_SUMMARY = (
    "re-execute chapters under a profile: OUT/<chapter>/ gets the notebook, "
    "results.json with provenance and checkpoints/, a failing chapter its failed.json"
)
RUN_EPILOG = """\
examples:
  posgeom run --profile smoke
  posgeom run --profile default --chapters necessity low_rank --out runs/mine
  posgeom run --profile paper --device cuda
  posgeom run --profile paper --cap 2000 --model sentence-transformers/all-MiniLM-L6-v2
  posgeom run --profile default --executor dask --workers 2

A chapter is skipped when its results.json has the same profile, requested parameters,
package version and code hash (its code cells, the package code they import, the pinned
environment). The git commit and where training ran (--executor, --workers, --scheduler)
are recorded, not compared.
An interrupted training run resumes from its checkpoints/.
Exit status: 0 when every chapter ran or was skipped, 1 when a chapter failed,
2 on bad usage.
"""

#: the options of a command, one per row: (flag, help, keywords of ``add_argument``)
# fmt: off
TOKEN_OPTIONS = (
    ("--policy", ("special tokens: keep what the model sees ([CLS] ... [SEP]) "
                  "or drop them"),
     {"choices": ("keep", "drop"), "default": "keep"}),
    ("--view", ("texts longer than n: what the model sees ([SEP] at n - 1) "
                "or the text's first n tokens"),
     {"choices": ("model", "corpus"), "default": "model"}),
)
STRESS_OPTIONS = (
    ("--model", ("a Hugging Face id or local folder "
                 "(offline: sentence-transformers/all-MiniLM-L6-v2)"),
     {"required": True, "metavar": "ID_OR_PATH"}),
    ("--corpus", "sst2, imdb, or a UTF-8 text file with one text per line",
     {"required": True, "metavar": "sst2|imdb|FILE"}),
    ("--split", "split of sst2 or imdb (default: train)", {"default": "train"}),
    ("--n", "positions 0..n-1 (default: 128)", {"type": int, "default": 128}),
    *TOKEN_OPTIONS,
    ("--min-count", "keep the positions that K texts reach (default: 20)",
     {"type": int, "default": 20, "metavar": "K"}),
    ("--sample-size", "a seeded sample of N texts", {"type": int, "metavar": "N"}),
    ("--data-dir", "sst2/imdb here (default: $POSGEOM_DATA_DIR)", {"metavar": "DIR"}),
    ("--json", "print one JSON object, not the table", {"action": "store_true"}),
    ("--plot", "save D_H beside the model's distances", {"metavar": "FILE.png"}),
)
RUN_OPTIONS = (
    ("--profile", ("smoke (seconds), default (a chapter in minutes on a laptop), "
                   "reference (what the book shows: each chapter's parameters cell, "
                   "memoised) or paper (full scale, a GPU)"),
     {"required": True, "choices": sorted(PROFILES)}),
    ("--chapters", "default: every chapter", {"nargs": "+", "metavar": "CHAPTER"}),
    ("--device", "where models train", {"choices": ("auto", "cpu", "cuda")}),
    ("--model", "the chapters' model_name", {"metavar": "ID_OR_PATH"}),
    ("--out", "output folder (default: runs/<profile>-<date>)", {"metavar": "DIR"}),
    ("--cap", (f"bound every size parameter ({', '.join(SIZE_PARAMETERS)}) "
               "by N; recorded"),
     {"type": int, "metavar": "N"}),
    ("--force", "rerun current chapters, retrain anew", {"action": "store_true"}),
    ("--source-dir", "the MyST chapters (default: notebooks/)", {"metavar": "DIR"}),
    ("--executor", "where independent runs train", {"choices": ("serial", "dask")}),
    ("--workers", "Dask workers with --executor dask", {"type": int, "metavar": "N"}),
    ("--scheduler", "a Dask scheduler, with --executor dask", {"metavar": "ADDRESS"}),
)
# fmt: on


class UsageError(Exception):
    """Bad command-line input: one line on stderr, exit code 2. Chapter: *Reproduction
    ledger*."""


@contextmanager
def usage(
    prefix: str = "", suffix: str = "", errors: tuple = (ValueError,)
) -> Iterator:
    """Re-raise ``errors`` as :class:`UsageError` ``prefix + message + suffix``.
    Chapter: *Reproduction ledger*."""
    try:
        yield
    except errors as exc:
        raise UsageError(f"{prefix}{exc}{suffix}") from exc


def place_problem(path: Path, folder: bool = False) -> str | None:
    """Why nothing can be written at ``path`` (a file, or a ``folder``), or ``None``;
    missing folders are made. Chapter: *Reproduction ledger*."""
    if folder and path.exists() and not path.is_dir():
        return "is a file: pass a folder"
    if not folder and path.is_dir():
        return "is a folder: pass a file in it"
    where = path if folder else path.parent
    try:
        where.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=where).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        return f"cannot write in {str(where)!r} ({reason}); pass a writable place"
    return None


def output_place(option: str, value: Any, folder: bool = False) -> Path:
    """``value`` as a path :func:`place_problem` accepts, else a :class:`UsageError`.
    Chapter: *Reproduction ledger*."""
    path = Path(value).expanduser()
    if problem := place_problem(path, folder):
        raise UsageError(f"{option} {str(path)!r}: {problem}")
    return path


def check_cache() -> None:
    """Make sure the cache folder is writable. Chapter: *Reproduction ledger*."""
    fix = f"); set {CACHE_ENV} to a writable folder"
    with usage(f"{CACHE_ENV}: cannot create the cache folder (", fix, (OSError,)):
        folder = cache_dir()
    output_place(CACHE_ENV, folder, folder=True)


def add_options(p: Any, options: tuple) -> None:
    """Add ``(flag, help, keywords)`` rows. Chapter: *Reproduction ledger*."""
    for flag, text, keywords in options:
        p.add_argument(flag, help=text, **keywords)


def add_command(sub: Any, name: str, about: str, epilog: str, func: Any, options=()):
    """Register sub-command ``name`` to run ``func``. Chapter: *Reproduction ledger*."""
    raw = argparse.RawDescriptionHelpFormatter
    description = textwrap.fill(about, 88)
    p = sub.add_parser(
        name, help=about, description=description, epilog=epilog, formatter_class=raw
    )
    p.set_defaults(func=func)
    add_options(p, options)
    return p


def build_parser() -> argparse.ArgumentParser:
    """The ``posgeom`` argument parser. Chapter: *Reproduction ledger*."""
    from .count_command import add_count_parser

    epilog = "posgeom COMMAND --help: its options"
    parser = argparse.ArgumentParser(prog=PROG, epilog=epilog)
    sub = parser.add_subparsers(dest="command", title="commands", required=True)
    add_command(sub, "stress", STRESS_SUMMARY, STRESS_EPILOG, _stress, STRESS_OPTIONS)
    add_command(sub, "run", RUN_SUMMARY, RUN_EPILOG, _run, RUN_OPTIONS)
    add_count_parser(sub)
    return parser


def _corpus(args: argparse.Namespace) -> Any:
    from ..corpus import LOCAL_FILES, Corpus, load_corpus

    name, fix = args.corpus, ": pass a UTF-8 file, one text per line"
    if name in LOCAL_FILES:
        missing = (FileNotFoundError,)
        data_dir = usage(f"--corpus {name}: ", " (or pass --data-dir DIR)", missing)
        with usage("--split/--corpus: "), data_dir:
            corpus = load_corpus(name, args.split, data_dir=args.data_dir)
        return corpus.sample(args.sample_size)
    path = Path(name).expanduser()
    if not path.is_file():
        problem = "is neither 'sst2', 'imdb' nor an existing file"
        raise UsageError(f"--corpus {name!r} {problem}{fix}")
    from ..scale.counting import Shard, shard_texts

    with usage(f"--corpus {name!r}: "):
        texts = list(shard_texts(Shard(str(path), "text")))
    if not texts:
        problem = "holds no text (empty or blank lines only)"
        raise UsageError(f"--corpus {name!r} {problem}{fix}")
    labels = np.full(len(texts), -1, dtype=np.int64)
    return Corpus(path.name, "file", texts, labels, str(path)).sample(args.sample_size)


def _marginals(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(corpus, model config, positional marginals truncated at ``--min-count``)."""
    from .. import models
    from ..marginals import positional_marginals

    with usage():
        needs = "stress needs 3 positions; pass e.g. --n 128"
        integer(args.n, "--n", minimum=3, fix=needs)
        integer(args.min_count, "--min-count", fix="pass e.g. --min-count 20")
        if args.sample_size is not None:
            integer(args.sample_size, "--sample-size", fix="omit it to use all texts")
    if args.plot is not None:  # savefig writes a name without suffix as .png
        plot = output_place("--plot", args.plot)
        args.plot = str(plot.with_suffix(plot.suffix or ".png"))
    check_cache()
    corpus = _corpus(args)
    with usage(f"--model {args.model!r}: ", "", (ValueError, TypeError)):
        tokenizer = models.load_tokenizer(args.model)
        config = models.load_config(args.model)
        learned = models.positional_mechanism(config).kind == "learned"
    table = models.position_table_size(config)
    absolute = getattr(config, "position_embedding_type", None) in (None, "absolute")
    if learned and absolute and table is not None and args.n > table:
        where = f"the {table} positions of the model's learned position table"
        fix = f"(max_position_embeddings): pass --n {table} or less"
        raise UsageError(f"--n {args.n} exceeds {where} {fix}")
    with usage("--n/--policy: "):  # min_count=1 here, so that an error names the option
        options = {"special_tokens": args.policy, "min_count": 1, "view": args.view}
        marg = positional_marginals(corpus, tokenizer, args.n, **options)
    with usage(f"--min-count {args.min_count}: "):
        marg = marg.truncate(min_count=args.min_count)
    if marg.n < 3:
        k, few = args.min_count, f"only {marg.n} position(s) are reached by at least"
        fix = "(need 3); lower --min-count, or use more / longer texts"
        raise UsageError(f"--min-count {k}: {few} {k} texts {fix}")
    return corpus, config, marg


def _model_encoding(name: str, config: Any, n: int) -> tuple[str, str, Any]:
    """(row name, mechanism, n x d encoding or None) of the model's own positions."""
    from ..encodings import alibi, alibi_slopes, rope
    from ..models import learned_position_embeddings, load_model, positional_mechanism

    mech = positional_mechanism(config)
    if mech.kind == "alibi":
        return mech.label, "ALiBi", alibi(n, alibi_slopes(mech.n_heads))
    if mech.kind == "rope":
        return mech.label, "RoPE", rope(n, mech.head_dim, mech.n_heads, mech.base)
    with usage(f"--model {name!r}: "):
        model = load_model(name, device="cpu")
    try:
        table = learned_position_embeddings(model, n)
    except ValueError as exc:
        if "exceeds" in str(exc):
            raise UsageError(f"--n: {exc}; pass a smaller --n") from exc
    else:
        return mech.label, "learned absolute table", table
    pe = getattr(config, "position_embedding_type", "absolute")
    what = f"no absolute encoding ({pe}, model_type={config.model_type!r})"
    return "none", what, None


def _row(name: str, kind: str, P: np.ndarray, D: np.ndarray) -> dict:
    from ..geometry import monotonicity_violation_rate, stress

    P = np.asarray(P, dtype=np.float64)
    rate = monotonicity_violation_rate(P, "triplets", input_kind="encoding").rate
    scores = (stress(P, D, "raw"), stress(P, D, "fitted"), rate)
    row = {"encoding": name, "kind": kind, "width": int(P.shape[1])}
    return row | dict(zip(SCORES, map(float, scores)))


def _stress(args: argparse.Namespace) -> int:
    from .. import geometry
    from ..encodings import mds_encoding, sinusoidal
    from ..models import config_int, model_label

    corpus, config, marg = _marginals(args)
    D = geometry.hellinger_distances(marg.mu())
    mds = geometry.classical_mds(D)
    name, mechanism, P_model = _model_encoding(args.model, config, marg.n)
    width = config_int(config, "hidden_size", "d_model", "n_embd")
    width = width or (marg.n if P_model is None else P_model.shape[1])
    d_sin = width - width % 2 or 2
    rows = [] if P_model is None else [_row(name, mechanism, P_model, D)]
    rows.append(_row(f"MDS optimum (d={width})", "mds", mds_encoding(D, width), D))
    sin = sinusoidal(marg.n, d_sin)
    rows.append(_row(f"sinusoidal (d={d_sin})", "sinusoidal", sin, D))
    violations = geometry.monotonicity_violation_rate
    rate = float(violations(D, "triplets", input_kind="distances").rate)
    stats = {"name": corpus.name, "split": corpus.split, "source": corpus.source}
    stats |= {"texts": len(corpus), "n_requested": args.n, "n": int(marg.n)}
    stats |= {"policy": args.policy, "view": args.view, "min_count": args.min_count}
    stats |= {"effective_rank": mds.effective_rank}
    stats |= {"negative_mass": float(mds.negative_mass), "violation_rate": rate}
    stats["support"] = [int(s) for s in marg.support]
    info = {"model": str(args.model), "model_label": model_label(args.model)}
    info |= {"mechanism": mechanism, "width": int(width), "corpus": stats, "rows": rows}
    failure = None
    if args.plot is not None:
        try:
            _plot(D, P_model, name, info, Path(args.plot))
            info["plot"] = args.plot
        except UsageError as exc:
            failure = exc
    print(json.dumps(info, indent=2, allow_nan=True) if args.json else _table(info))
    if failure is not None:  # the results above are printed; the figure is not there
        raise failure
    return 0


def _table(info: dict) -> str:
    c, model = info["corpus"], info["model_label"]
    support = f"support {min(c['support'])}..{max(c['support'])} texts per position"
    asked = f"asked {c['n_requested']}, min-count {c['min_count']}"
    mass = f"negative eigenvalue mass {c['negative_mass']:.3g}"
    rate = f"violation rate {c['violation_rate']:.3f}"
    lines = [
        f"model:  {model}  ({info['mechanism']}, width {info['width']})",
        f"corpus: {c['name']}/{c['split']}, {c['texts']} texts, policy={c['policy']}",
        f"positions: n={c['n']} ({asked}; {support})",
        f"D_H: effective rank {c['effective_rank']}, {mass}, {rate}",
        "",
    ]
    header = ("encoding", "width", "raw stress", "fitted stress", "violation rate")
    body = [
        [r["encoding"], str(r["width"])]
        + [f"{r[k]:.4f}" if math.isfinite(r[k]) else "nan" for k in SCORES]
        for r in info["rows"]
    ]
    widths = [max(map(len, column)) for column in zip(header, *body)]
    for row in [header, ["-" * w for w in widths], *body]:
        cells = [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
        lines.append("  ".join([row[0].ljust(widths[0]), *cells]))
    figure = ["", f"figure: {info['plot']}"] if "plot" in info else []
    return "\n".join(lines + figure)


def _plot(D: np.ndarray, P: Any, name: str, info: dict, path: Path) -> None:
    from matplotlib.figure import Figure  # no pyplot: no global backend, no display

    from ..geometry import pairwise_distances

    panels = [(f"D_H (corpus: {info['corpus']['name']})", D)]
    if P is not None:
        panels.append((f"{name}: |p_i - p_j|", pairwise_distances(P)))
    fig = Figure(figsize=(5.0 * len(panels), 4.4), layout="constrained")
    for k, (title, M) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        fig.colorbar(ax.imshow(M, cmap="viridis", origin="upper"), ax=ax, shrink=0.85)
        ax.set_title(title, fontsize=10)
        ax.set(xlabel="position j", ylabel="position i")
    fig.suptitle(f"{info['model_label']}, n={info['corpus']['n']}", fontsize=11)
    with usage(f"--plot {str(path)!r}: cannot save it (", ")", (OSError, ValueError)):
        fig.savefig(path, dpi=100)


def _run(args: argparse.Namespace) -> int:
    from .runner import RunError, run_chapters

    out = Path(args.out).expanduser() if args.out else None
    source = Path(args.source_dir).expanduser() if args.source_dir else None
    given = ("command", "func", "profile", "out", "source_dir")
    options = {k: v for k, v in vars(args).items() if k not in given}
    options["log"] = functools.partial(print, flush=True)
    try:
        summary = run_chapters(args.profile, out=out, source_dir=source, **options)
    except RunError as exc:
        raise UsageError(f"{exc.argument}: {exc}") from exc
    return 0 if summary.ok else 1


@contextmanager
def _quiet() -> Iterator[None]:
    """No transformers warnings; progress bars only on a terminal (restored after)."""
    from transformers.utils import logging as hf

    verbosity, bars = hf.get_verbosity(), hf.is_progress_bar_enabled()
    had = PROGRESS_ENV in os.environ
    hf.set_verbosity_error()
    if not sys.stderr.isatty():
        os.environ.setdefault(PROGRESS_ENV, "0")
        hf.disable_progress_bar()
    try:
        yield
    finally:
        hf.set_verbosity(verbosity)
        if bars:
            hf.enable_progress_bar()
        if not had:
            os.environ.pop(PROGRESS_ENV, None)


def main(argv: list[str] | None = None) -> int:
    """Run ``posgeom``: exit code 0, 1 when a chapter of ``run`` failed, 2 on bad usage.
    Chapter: *Reproduction ledger*."""
    args = build_parser().parse_args(argv)
    with _quiet():
        try:
            return int(args.func(args))
        except UsageError as exc:
            message = " ".join(str(exc).split())
            print(f"{PROG} {args.command}: error: {message}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
            return 130

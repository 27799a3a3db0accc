"""The ``posgeom`` command line: ``stress``, ``run`` and ``count``
(:mod:`.count_command`).

Chapter: *The optimal encoding: classical MDS on Hellinger geometry* and *Are nearby
positions encoded nearby?* (``stress``), *Reproduction ledger* (``run``), *Beyond one
machine* (``count``)."""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import tempfile
import textwrap
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..checks import integer
from ..settings import CACHE_ENV, PROGRESS_ENV, cache_dir

PROG = "posgeom"
RAW = argparse.RawDescriptionHelpFormatter
SCORES = ("raw_stress", "fitted_stress", "violation_rate")

STRESS_EPILOG = """\
examples:
  posgeom stress --model bert-base-uncased --corpus sst2 --n 64
  posgeom stress --model ./my-checkpoint --corpus texts.txt --n 32 --min-count 5 --plot stress.png

Each row scores an encoding P against D_H: raw stress, stress after the best rescaling of P and the
fraction of triplets |i-j| < |i-k| where P puts j farther from i than k (0 monotone, 0.5 random).
"""

RUN_EPILOG = """\
examples:
  posgeom run --profile smoke
  posgeom run --profile default --chapters necessity low_rank --out runs/mine
  posgeom run --profile paper --device cuda
  posgeom run --profile paper --cap 2000 --model sentence-transformers/all-MiniLM-L6-v2
  posgeom run --profile default --executor dask --workers 2

A chapter is skipped when its results.json has the same profile, requested parameters, package
version and code hash (the chapter's code cells, the package code they import, the pinned environment;
docstrings, comments and layout do not count) = the skip key.
The git commit and where training ran (--executor, --workers, --scheduler: same results either way)
are recorded, not part of the skip key. An interrupted training run resumes from its checkpoints/.
Exit status: 0 when every chapter ran or was skipped, 1 when a chapter failed, 2 on bad usage.
"""


class UsageError(Exception):
    """Bad input from the command line: reported as one line on stderr, exit code 2.
    Chapter: *Reproduction ledger*."""


@contextmanager
def usage(
    prefix: str = "", suffix: str = "", errors: tuple = (ValueError,)
) -> Iterator[None]:
    """Re-raise ``errors`` as a :class:`UsageError` ``prefix + message + suffix``.
    Chapter: *Reproduction ledger*."""
    try:
        yield
    except errors as exc:
        raise UsageError(f"{prefix}{exc}{suffix}") from exc


def place_problem(path: Path, folder: bool = False) -> str | None:
    """Why nothing can be written at ``path`` (a file, or a folder with ``folder``), or
    ``None``; missing folders are made. The one rule for ``stress --plot``, ``count
    --out``, ``run --out`` and the cache folder. Chapter: *Reproduction ledger*."""
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
    """``value`` as a path :func:`place_problem` accepts, checked before any long work,
    or a :class:`UsageError` naming ``option``. Chapter: *Reproduction ledger*."""
    path = Path(value).expanduser()
    if problem := place_problem(path, folder):
        raise UsageError(f"{option} {str(path)!r}: {problem}")
    return path


def check_cache() -> None:
    """The cache folder (``$POSGEOM_CACHE_DIR``) exists or can be made, and is writable.
    Chapter: *Reproduction ledger*."""
    try:
        folder = cache_dir()
    except OSError as exc:
        raise UsageError(
            f"{CACHE_ENV}: cannot create the cache folder ({exc}); set {CACHE_ENV} to "
            "a writable folder"
        ) from exc
    output_place(CACHE_ENV, folder, folder=True)


def add_command(sub: Any, name: str, summary: str, epilog: str, func: Any) -> Any:
    """Register the sub-command ``name`` running ``func``. Chapter: *Reproduction
    ledger*."""
    text = textwrap.fill(summary, 100)
    p = sub.add_parser(
        name, help=summary, description=text, epilog=epilog, formatter_class=RAW
    )
    p.set_defaults(func=func)
    return p


def add_token_options(p: argparse.ArgumentParser) -> None:
    """``--policy`` and ``--view``, shared by ``stress`` and ``count``.
    Chapter: *Positions in real text*."""
    special = "special tokens: keep what the model sees ([CLS] ... [SEP]) or drop them"
    p.add_argument("--policy", choices=("keep", "drop"), default="keep", help=special)
    view = "texts longer than n: what the model sees ([SEP] at n - 1) or the text's first n tokens"
    p.add_argument("--view", choices=("model", "corpus"), default="model", help=view)


def build_parser() -> argparse.ArgumentParser:
    """The ``posgeom`` argument parser. Chapter: *Reproduction ledger*."""
    from .count_command import add_count_parser

    parser = argparse.ArgumentParser(
        prog=PROG, epilog="posgeom COMMAND --help: its options"
    )
    sub = parser.add_subparsers(dest="command", title="commands", required=True)
    summary = (
        "stress and monotonicity of a model's positional encoding, the MDS optimum and "
    )
    summary += "sinusoidal against D_H, the Hellinger distances of a corpus's positional tokens"
    p = add_command(sub, "stress", summary, STRESS_EPILOG, _stress)
    model = "a Hugging Face id or local folder (offline: sentence-transformers/all-MiniLM-L6-v2)"
    p.add_argument("--model", required=True, metavar="ID_OR_PATH", help=model)
    corpus = "sst2, imdb, or a UTF-8 text file with one text per line"
    p.add_argument("--corpus", required=True, metavar="sst2|imdb|FILE", help=corpus)
    p.add_argument(
        "--split", default="train", help="split of sst2 or imdb (default: train)"
    )
    p.add_argument("--n", type=int, default=128, help="positions 0..n-1 (default: 128)")
    add_token_options(p)
    count = "keep the positions that K texts reach (default: 20)"
    p.add_argument("--min-count", type=int, default=20, metavar="K", help=count)
    p.add_argument(
        "--sample-size", type=int, metavar="N", help="a seeded sample of N texts"
    )
    p.add_argument(
        "--data-dir", metavar="DIR", help="sst2/imdb here (default: $POSGEOM_DATA_DIR)"
    )
    p.add_argument(
        "--json", action="store_true", help="print one JSON object, not the table"
    )
    p.add_argument(
        "--plot", metavar="FILE.png", help="save D_H beside the model's distances"
    )
    _add_run(sub)
    add_count_parser(sub)
    return parser


def _add_run(sub: Any) -> None:
    from .profiles import PROFILES
    from .runner import SIZE_PARAMETERS

    summary = "re-execute chapters under a profile: OUT/<chapter>/ gets the notebook, results.json "
    summary += "with provenance and checkpoints/, a failing chapter its failed.json"
    p = add_command(sub, "run", summary, RUN_EPILOG, _run)
    profile = "smoke (seconds), default (the book build) or paper (full scale, a GPU)"
    p.add_argument("--profile", required=True, choices=sorted(PROFILES), help=profile)
    p.add_argument(
        "--chapters", nargs="+", metavar="CHAPTER", help="default: every chapter"
    )
    p.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), help="where models train"
    )
    p.add_argument("--model", metavar="ID_OR_PATH", help="the chapters' model_name")
    p.add_argument(
        "--out", metavar="DIR", help="output folder (default: runs/<profile>-<date>)"
    )
    cap = f"bound every size parameter ({', '.join(SIZE_PARAMETERS)}) by N; recorded"
    p.add_argument("--cap", type=int, metavar="N", help=cap)
    p.add_argument(
        "--force", action="store_true", help="rerun current chapters, retrain anew"
    )
    p.add_argument(
        "--source-dir", metavar="DIR", help="the MyST chapters (default: notebooks/)"
    )
    p.add_argument(
        "--executor", choices=("serial", "dask"), help="where independent runs train"
    )
    p.add_argument(
        "--workers", type=int, metavar="N", help="Dask workers with --executor dask"
    )
    p.add_argument(
        "--scheduler", metavar="ADDRESS", help="a Dask scheduler, with --executor dask"
    )


def _corpus(args: argparse.Namespace) -> Any:
    from ..corpus import LOCAL_FILES, Corpus, load_corpus

    name, fix = args.corpus, ": pass a UTF-8 file, one text per line"
    if name in LOCAL_FILES:
        missing = usage(
            f"--corpus {name}: ", " (or pass --data-dir DIR)", (FileNotFoundError,)
        )
        with usage("--split/--corpus: "), missing:
            corpus = load_corpus(name, args.split, data_dir=args.data_dir)
        return corpus.sample(args.sample_size)
    path = Path(name).expanduser()
    if not path.is_file():
        raise UsageError(
            f"--corpus {name!r} is neither 'sst2', 'imdb' nor an existing file" + fix
        )
    from ..scale.counting import Shard, shard_texts

    with usage(f"--corpus {name!r}: ", "", (ValueError,)):
        texts = list(shard_texts(Shard(str(path), "text")))
    if not texts:
        raise UsageError(
            f"--corpus {name!r} holds no text (empty or blank lines only)" + fix
        )
    labels = np.full(len(texts), -1, dtype=np.int64)
    return Corpus(path.name, "file", texts, labels, str(path)).sample(args.sample_size)


def _marginals(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(corpus, the model's config, positional marginals truncated at
    ``--min-count``)."""
    from ..marginals import positional_marginals
    from ..models import (
        load_config,
        load_tokenizer,
        position_table_size,
        positional_mechanism,
    )

    with usage():
        integer(
            args.n, "--n", minimum=3, fix="stress needs 3 positions; pass e.g. --n 128"
        )
        integer(args.min_count, "--min-count", fix="pass e.g. --min-count 20")
        if args.sample_size is not None:
            integer(args.sample_size, "--sample-size", fix="omit it to use all texts")
    if args.plot is not None:  # savefig writes a name without suffix as .png
        plot = output_place("--plot", args.plot)
        args.plot = str(plot.with_suffix(plot.suffix or ".png"))
    check_cache()
    corpus = _corpus(args)
    with usage(f"--model {args.model!r}: ", "", (ValueError, TypeError)):
        tokenizer, config = load_tokenizer(args.model), load_config(args.model)
        learned = positional_mechanism(config).kind == "learned"
    table = position_table_size(config)
    absolute = getattr(config, "position_embedding_type", None) in (None, "absolute")
    if learned and absolute and table is not None and args.n > table:
        raise UsageError(
            f"--n {args.n} exceeds the {table} positions of the model's learned "
            "position table "
            f"(max_position_embeddings): pass --n {table} or less"
        )
    # min_count=1 here, so that an error names the right option
    with usage("--n/--policy: "):
        marg = positional_marginals(
            corpus,
            tokenizer,
            args.n,
            special_tokens=args.policy,
            min_count=1,
            view=args.view,
        )
    with usage(f"--min-count {args.min_count}: "):
        marg = marg.truncate(min_count=args.min_count)
    if marg.n < 3:
        raise UsageError(
            f"--min-count {args.min_count}: only {marg.n} position(s) are reached by "
            "at least "
            f"{args.min_count} texts (need 3); lower --min-count, or use more / "
            "longer texts"
        )
    return corpus, config, marg


def _model_encoding(
    model_name: str, config: Any, n: int
) -> tuple[str, str, np.ndarray | None]:
    """(row name, mechanism, n x d encoding or None) for the model's own positional
    mechanism."""
    from ..encodings import alibi, alibi_slopes, rope
    from ..models import learned_position_embeddings, load_model, positional_mechanism

    mech = positional_mechanism(config)
    if mech.kind == "alibi":
        return mech.label, "ALiBi", alibi(n, alibi_slopes(mech.n_heads))
    if mech.kind == "rope":
        return mech.label, "RoPE", rope(n, mech.head_dim, mech.n_heads, mech.base)
    with usage(f"--model {model_name!r}: "):
        model = load_model(model_name, device="cpu")
    try:
        return (
            mech.label,
            "learned absolute table",
            learned_position_embeddings(model, n),
        )
    except ValueError as exc:
        if "exceeds" in str(exc):
            raise UsageError(f"--n: {exc}; pass a smaller --n") from exc
    pe = getattr(config, "position_embedding_type", "absolute")
    return (
        "none",
        f"no absolute encoding ({pe}, model_type={config.model_type!r})",
        None,
    )


def _row(name: str, kind: str, P: np.ndarray, D: np.ndarray) -> dict:
    from ..geometry import monotonicity_violation_rate, stress

    P = np.asarray(P, dtype=np.float64)
    scores = [stress(P, D, "raw"), stress(P, D, "fitted")]
    scores.append(
        monotonicity_violation_rate(P, "triplets", input_kind="encoding").rate
    )
    row = {"encoding": name, "kind": kind, "width": int(P.shape[1])}
    return row | dict(zip(SCORES, map(float, scores)))


def _stress(args: argparse.Namespace) -> int:
    from ..encodings import mds_encoding, sinusoidal
    from ..geometry import (
        classical_mds,
        hellinger_distances,
        monotonicity_violation_rate,
    )
    from ..models import config_int, model_label

    corpus, config, marg = _marginals(args)
    D = hellinger_distances(marg.mu())
    mds = classical_mds(D)
    name, mechanism, P_model = _model_encoding(args.model, config, marg.n)
    width = config_int(config, "hidden_size", "d_model", "n_embd")
    width = width or (marg.n if P_model is None else P_model.shape[1])
    d_sin = width - width % 2 or 2
    rows = [] if P_model is None else [_row(name, mechanism, P_model, D)]
    rows.append(_row(f"MDS optimum (d={width})", "mds", mds_encoding(D, width), D))
    rows.append(
        _row(f"sinusoidal (d={d_sin})", "sinusoidal", sinusoidal(marg.n, d_sin), D)
    )
    rate = monotonicity_violation_rate(D, "triplets", input_kind="distances").rate
    geometry = {"name": corpus.name, "split": corpus.split, "source": corpus.source}
    geometry |= dict(
        texts=len(corpus), n_requested=args.n, n=int(marg.n), policy=args.policy
    )
    geometry |= dict(
        view=args.view, min_count=args.min_count, effective_rank=mds.effective_rank
    )
    geometry |= dict(negative_mass=float(mds.negative_mass), violation_rate=float(rate))
    geometry["support"] = [int(s) for s in marg.support]
    info = {"model": str(args.model), "model_label": model_label(args.model)}
    info |= dict(mechanism=mechanism, width=int(width), corpus=geometry, rows=rows)
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
    c = info["corpus"]
    lines = [
        f"model:  {info['model_label']}  ({info['mechanism']}, width {info['width']})",
        f"corpus: {c['name']}/{c['split']}, {c['texts']} texts, policy={c['policy']}",
        f"positions: n={c['n']} (asked {c['n_requested']}, min-count "
        f"{c['min_count']}; support "
        + f"{min(c['support'])}..{max(c['support'])} texts per position)",
        f"D_H: effective rank {c['effective_rank']}, negative eigenvalue mass "
        + f"{c['negative_mass']:.3g}, violation rate {c['violation_rate']:.3f}",
        "",
    ]
    header = ("encoding", "width", "raw stress", "fitted stress", "violation rate")
    body = [
        (r["encoding"], str(r["width"]), *(_num(r[k]) for k in SCORES))
        for r in info["rows"]
    ]
    widths = [max(map(len, column)) for column in zip(header, *body)]
    for row in [header, ["-" * w for w in widths], *body]:
        cells = [
            row[0].ljust(widths[0]),
            *(c.rjust(w) for c, w in zip(row[1:], widths[1:])),
        ]
        lines.append("  ".join(cells))
    return "\n".join(
        lines + (["", f"figure: {info['plot']}"] if "plot" in info else [])
    )


def _num(x: float) -> str:
    return f"{x:.4f}" if math.isfinite(x) else "nan"


def _plot(
    D: np.ndarray, P: np.ndarray | None, name: str, info: dict, path: Path
) -> None:
    # no pyplot: no global backend, no display needed
    from matplotlib.figure import Figure

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
    names = (
        "chapters",
        "device",
        "cap",
        "force",
        "model",
        "executor",
        "workers",
        "scheduler",
    )
    options = {name: getattr(args, name) for name in names}
    log = functools.partial(print, flush=True)
    try:
        summary = run_chapters(
            args.profile, out=out, source_dir=source, log=log, **options
        )
    except RunError as exc:
        raise UsageError(f"{exc.argument}: {exc}") from exc
    return 0 if summary.ok else 1


@contextmanager
def _quiet() -> Iterator[None]:
    """No transformers warnings; progress bars only on a terminal (all restored
    afterwards)."""
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
    """Run ``posgeom``: exit code 0, 1 when a chapter of ``run`` failed, 2 on bad usage
    (one line on stderr); ``--help`` exits 0. Chapter: *Reproduction ledger*."""
    args = build_parser().parse_args(argv)
    with _quiet():
        try:
            return int(args.func(args))
        except UsageError as exc:
            print(
                f"{PROG} {args.command}: error: {' '.join(str(exc).split())}",
                file=sys.stderr,
            )
            return 2
        except KeyboardInterrupt:
            print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
            return 130

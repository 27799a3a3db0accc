"""The ``posgeom`` command line: compare a model's positional mechanism with a corpus's Hellinger geometry.

Chapter: *MDS optimality* (the stress comparison) and *Monotonicity* (the violation rate), as a tool.

``posgeom stress --model bert-base-uncased --corpus sst2`` counts the positional token distributions of the
corpus under the model's tokenizer, builds their Hellinger matrix D_H, and scores against it (raw and
scale-fitted stress, exact triplet monotonicity violation rate) the model's own positional mechanism
(learned absolute table, RoPE or ALiBi, read from the checkpoint / config), the MDS optimum at the model's
width and the sinusoidal encoding of the same width.

``posgeom run --profile smoke|default|paper`` re-executes the chapters through papermill and keeps their
results with provenance (:mod:`posgeom_utils.repro.runner`; chapter: *How this book is built* (README),
*Reproduction ledger*).

``posgeom count SHARD ...`` counts the positional distributions of a sharded corpus on Dask or in one process
(:mod:`posgeom_utils.repro.count_command`; chapter: *Beyond one machine*).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import textwrap
from pathlib import Path
from typing import Any, Sequence

import numpy as np

PROG = "posgeom"


class UsageError(Exception):
    """Bad input from the command line: reported as one line on stderr, exit code 2."""


# --------------------------------------------------------------------------- parser

_STRESS_EPILOG = """\
examples:
  posgeom stress --model bert-base-uncased --corpus sst2 --n 64
  posgeom stress --model sentence-transformers/all-MiniLM-L6-v2 --corpus imdb --split test \\
      --n 128 --sample-size 5000 --json
  posgeom stress --model ./my-checkpoint --corpus texts.txt --n 32 --min-count 5 --plot stress.png

The corpus geometry: mu_i = token distribution at position i (under the model's tokenizer), D_H = the
Hellinger distances between the mu_i. Each row scores an n x d encoding P against D_H: raw stress
(distances as they are), fitted stress (after the single best rescaling of P) and the exact fraction of
triplets (i, j, k), |i-j| < |i-k|, in which P puts j farther from i than k (0 = monotone, 0.5 = random).
Offline, --model must be a local folder or the packaged all-MiniLM-L6-v2; sst2 / imdb are read from
--data-dir or $POSGEOM_DATA_DIR (a folder laid out like shared/data).
"""

_RUN_EPILOG = """\
examples:
  posgeom run --profile smoke
  posgeom run --profile default --chapters necessity low_rank --out runs/mine
  posgeom run --profile paper --device cuda
  posgeom run --profile paper --cap 2000 --model sentence-transformers/all-MiniLM-L6-v2
                                              # a capped paper run on a CPU, offline
  posgeom run --profile smoke --force --source-dir notebooks
  posgeom run --profile default --executor dask --workers 2
                                              # independent training runs on 2 local Dask workers

Size parameters bounded by --cap:
{size}
A chapter is skipped when its results.json has the same profile, requested parameters, package version,
git commit and source hash (the chapter and posgeom_utils/*.py); --force reruns it. An interrupted
training run resumes from OUT/<chapter>/checkpoints/ when the same run is started again.
--executor, --workers and --scheduler decide only where a chapter's independent training runs execute:
both executors give the same results, so they are recorded (provenance "execution") but not part of the
skip key, and a sweep interrupted under one executor resumes under the other.
Exit status: 0 when every chapter ran or was skipped, 1 when a chapter failed, 2 on bad usage.
The corpora are read from $POSGEOM_DATA_DIR as in the book build.
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``posgeom`` argument parser (exposed for documentation and tests)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Positional-encoding geometry tools for the book's helper package posgeom_utils.",
        epilog="examples: posgeom stress --model bert-base-uncased --corpus sst2 --n 64\n"
               "          posgeom run --profile smoke\n"
               "Run 'posgeom <command> --help' for the options of a command.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", title="commands")
    sub.required = True
    p = sub.add_parser(
        "stress",
        help="stress and monotonicity of a model's positional encoding against a corpus's Hellinger geometry",
        description="Compare a model's positional mechanism (learned table, RoPE or ALiBi), the MDS optimum "
                    "and the sinusoidal encoding with the Hellinger geometry D_H of a corpus's positional "
                    "token distributions.",
        epilog=_STRESS_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, metavar="ID_OR_PATH",
                   help="Hugging Face model id (e.g. bert-base-uncased; needs the hub unless it is the packaged "
                        "sentence-transformers/all-MiniLM-L6-v2) or a local folder holding config.json and the "
                        "tokenizer")
    p.add_argument("--corpus", required=True, metavar="sst2|imdb|FILE",
                   help="'sst2', 'imdb', or the path of a UTF-8 text file with one text per line "
                        "(blank lines are skipped)")
    p.add_argument("--split", default="train",
                   help="split of sst2 (train, validation, test) or imdb (train, test); ignored for a file "
                        "(default: %(default)s)")
    p.add_argument("--n", type=int, default=128,
                   help="number of positions 0..n-1 to compare (default: %(default)s)")
    p.add_argument("--policy", choices=("keep", "drop"), default="keep",
                   help="special tokens: 'keep' counts what the model sees ([CLS] ... [SEP]), 'drop' only the "
                        "text's own tokens (default: %(default)s)")
    p.add_argument("--view", choices=("model", "corpus"), default="model",
                   help="texts longer than --n: count what the model sees (model: cut, [SEP] moved to "
                        "position n - 1) or the text's own first n positions (corpus)")
    p.add_argument("--min-count", type=int, default=20, metavar="K",
                   help="keep only the leading positions reached by at least K texts, so n may shrink "
                        "(default: %(default)s)")
    p.add_argument("--sample-size", type=int, default=None, metavar="N",
                   help="use a seeded random sample of N texts (default: all texts)")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="folder laid out like shared/data (sst2/*.tsv, imdb/*.jsonl.gz) for sst2 / imdb "
                        "(default: $POSGEOM_DATA_DIR, else the Hugging Face hub when online)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (corpus info and rows) instead of the text table")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="also save a figure of D_H next to the model's positional distance matrix")
    p.set_defaults(func=_run_stress)

    from .profiles import PROFILES
    from .runner import SIZE_PARAMETERS

    r = sub.add_parser(
        "run",
        help="re-execute the chapters under a profile (papermill) and keep their results with provenance",
        description="Re-execute chapter notebooks through papermill with a parameter profile. Each chapter\n"
                    "gets a folder OUT/<chapter>/ with the executed notebook, results.json (its parameters,\n"
                    "every glued number and their provenance: profile, parameters, package version, git\n"
                    "commit, source hash, library versions, device, cap, timings) and checkpoints/\n"
                    "(resumable training). A chapter whose results.json is current is skipped; a failing\n"
                    "chapter is recorded in OUT/<chapter>/failed.json and the others still run.",
        epilog=_RUN_EPILOG.format(size=textwrap.fill(", ".join(SIZE_PARAMETERS), 100,
                                                    initial_indent="  ", subsequent_indent="  ")),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("--profile", required=True, choices=sorted(PROFILES),
                   help="parameter profile: smoke (seconds, as in the tests), default (each chapter's own "
                        "parameters cell, as in the book build), paper (full scale, sized for a GPU)")
    r.add_argument("--chapters", nargs="+", default=None, metavar="CHAPTER",
                   help="chapter names, the .md file names in --source-dir without the suffix "
                        "(default: every chapter)")
    r.add_argument("--device", choices=("auto", "cpu", "cuda"), default=None,
                   help="where models train, injected into the chapters that have a device parameter "
                        "(default: each chapter's own, normally auto: CUDA when available)")
    r.add_argument("--model", default=None, metavar="ID_OR_PATH",
                   help="pre-trained model injected as model_name into the chapters that have one (default: the "
                        "profile's; the paper profile asks for bert-base-uncased, which needs the hub: offline, "
                        "pass --model sentence-transformers/all-MiniLM-L6-v2 for the packaged model)")
    r.add_argument("--out", default=None, metavar="DIR",
                   help="output folder (default: runs/<profile>-<YYYY-MM-DD> under the current folder)")
    r.add_argument("--cap", type=int, default=None, metavar="N",
                   help="bound every size parameter (texts, examples, training steps) by N; 'whole corpus' "
                        "becomes N too. Recorded in the provenance (default: no cap)")
    r.add_argument("--force", action="store_true",
                   help="rerun chapters whose results are current, and start training from scratch")
    r.add_argument("--source-dir", default=None, metavar="DIR",
                   help="folder holding the chapters' MyST notebooks (default: the repository's notebooks/)")
    r.add_argument("--executor", choices=("serial", "dask"), default=None,
                   help="where the independent training runs of a chapter execute, injected into the chapters "
                        "that have an executor parameter: serial (one after the other) or dask (a local "
                        "cluster of single-threaded workers, or --scheduler's); same results either way "
                        "(default: each chapter's own, serial)")
    r.add_argument("--workers", type=int, default=None, metavar="N",
                   help="Dask workers with --executor dask (default: one per GPU, else one per CPU core)")
    r.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="address of a running Dask scheduler (e.g. tcp://host:8786) with --executor dask; its "
                        "workers need this package and must see OUT for the checkpoints (default: start a "
                        "local cluster)")
    r.set_defaults(func=_run_run)

    from .count_command import add_count_parser

    add_count_parser(sub)
    return parser


# --------------------------------------------------------------------------- inputs

def _load_texts(args: argparse.Namespace):
    from ..corpus import LOCAL_FILES, Corpus, load_corpus

    name = args.corpus
    if name in LOCAL_FILES:
        try:
            corpus = load_corpus(name, args.split, data_dir=args.data_dir)
        except ValueError as exc:  # bad split name or empty data
            raise UsageError(f"--split/--corpus: {exc}") from exc
        except FileNotFoundError as exc:
            raise UsageError(f"--corpus {name}: {exc} (or pass --data-dir DIR)") from exc
    else:
        path = Path(name).expanduser()
        if not path.is_file():
            raise UsageError(
                f"--corpus {name!r} is neither 'sst2', 'imdb' nor an existing text file: pass one of the two "
                f"corpus names or the path of a file with one text per line")
        try:
            texts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
        except UnicodeDecodeError as exc:
            raise UsageError(f"--corpus {name!r} is not UTF-8 text ({exc}): pass a UTF-8 file, one text per line") \
                from exc
        texts = [t for t in texts if t]
        if not texts:
            raise UsageError(f"--corpus {name!r} holds no text (empty or blank lines only): "
                             f"pass a file with one text per line")
        corpus = Corpus(path.name, "file", texts, np.full(len(texts), -1, dtype=np.int64), str(path))
    if args.sample_size is not None:
        corpus = corpus.sample(args.sample_size, seed=0)
    return corpus


def _model_encoding(model_name: str, config: Any, n: int) -> tuple[str, str, np.ndarray | None]:
    """(row name, mechanism, n x d encoding or None) for the model's own positional mechanism."""
    from ..encodings import alibi, alibi_slopes, rope
    from ..models import learned_position_embeddings, load_model, positional_mechanism

    try:
        mech = positional_mechanism(config)
    except ValueError as exc:
        raise UsageError(f"--model {model_name!r}: {exc}") from exc
    if mech.kind == "alibi":
        return mech.label, "ALiBi", alibi(n, alibi_slopes(mech.n_heads))
    if mech.kind == "rope":
        return mech.label, "RoPE", rope(n, mech.head_dim, mech.n_heads, mech.base)
    try:
        model = load_model(model_name, device="cpu")
    except ValueError as exc:
        raise UsageError(f"--model {model_name!r}: {exc}") from exc
    try:
        return mech.label, "learned absolute table", learned_position_embeddings(model, n)
    except ValueError as exc:
        if "exceeds" in str(exc):
            raise UsageError(f"--n: {exc}; pass a smaller --n") from exc
        pe_type = getattr(config, "position_embedding_type", "absolute")
        model_type = getattr(config, "model_type", "")
        return "none", f"no absolute encoding ({pe_type}, model_type={model_type!r})", None


# --------------------------------------------------------------------------- the command

def _row(name: str, kind: str, P: np.ndarray, D: np.ndarray) -> dict:
    from ..geometry import monotonicity_violation_rate, stress

    P = np.asarray(P, dtype=np.float64)
    return {
        "encoding": name,
        "kind": kind,
        "width": int(P.shape[1]),
        "raw_stress": float(stress(P, D, "raw")),
        "fitted_stress": float(stress(P, D, "fitted")),
        "violation_rate": float(monotonicity_violation_rate(P, "triplets", input_kind="encoding").rate),
    }


def _run_stress(args: argparse.Namespace) -> int:
    from ..encodings import mds_encoding, sinusoidal
    from ..geometry import classical_mds, hellinger_distances, monotonicity_violation_rate, pairwise_distances
    from ..marginals import positional_marginals
    from ..models import config_int, load_config, load_tokenizer, model_label, position_table_size, positional_mechanism

    if args.n < 3:
        raise UsageError(f"--n must be at least 3 (got {args.n}): distances and monotonicity need 3 positions; "
                         f"pass e.g. --n 128")
    if args.min_count < 1:
        raise UsageError(f"--min-count must be a positive integer (got {args.min_count}); pass e.g. --min-count 20")
    if args.sample_size is not None and args.sample_size < 1:
        raise UsageError(f"--sample-size must be a positive integer (got {args.sample_size}); omit it to use all texts")
    if args.plot is not None and not Path(args.plot).expanduser().resolve().parent.is_dir():
        raise UsageError(f"--plot {args.plot!r}: its folder does not exist; create it or pass another path")

    corpus = _load_texts(args)
    try:
        tokenizer = load_tokenizer(args.model)
        config = load_config(args.model)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--model {args.model!r}: {exc}") from exc
    try:
        learned = positional_mechanism(config).kind == "learned"
    except ValueError as exc:
        raise UsageError(f"--model {args.model!r}: {exc}") from exc
    table = position_table_size(config)
    absolute = getattr(config, "position_embedding_type", "absolute") in (None, "absolute")
    if learned and absolute and table is not None and args.n > table:
        raise UsageError(f"--n {args.n} exceeds the {table} positions of the model's learned position table "
                         f"(max_position_embeddings): pass --n {table} or less")

    try:  # min_count=1 here, the real --min-count below: its errors then name the right option
        marg = positional_marginals(corpus, tokenizer, args.n, special_tokens=args.policy, min_count=1,
                                    view=args.view)
    except ValueError as exc:
        raise UsageError(f"--n/--policy: {exc}") from exc
    try:
        marg = marg.truncate(min_count=args.min_count)
    except ValueError as exc:
        raise UsageError(f"--min-count {args.min_count}: {exc}") from exc
    n = marg.n
    if n < 3:
        raise UsageError(
            f"--min-count {args.min_count}: only {n} position(s) are reached by at least {args.min_count} texts "
            f"(need 3); lower --min-count, or use more / longer texts")
    D = hellinger_distances(marg.mu())
    mds = classical_mds(D)

    name, mechanism, P_model = _model_encoding(args.model, config, n)
    width = config_int(config, "hidden_size", "d_model", "n_embd")
    if width is None:
        width = P_model.shape[1] if P_model is not None else n
    rows = []
    if P_model is not None:
        rows.append(_row(name, mechanism, P_model, D))
    rows.append(_row(f"MDS optimum (d={width})", "mds", mds_encoding(D, width), D))
    d_sin = width - width % 2 or 2
    rows.append(_row(f"sinusoidal (d={d_sin})", "sinusoidal", sinusoidal(n, d_sin), D))

    info = {
        "model": str(args.model),
        "model_label": model_label(args.model),
        "mechanism": mechanism,
        "width": int(width),
        "corpus": {
            "name": corpus.name, "split": corpus.split, "source": corpus.source, "texts": len(corpus),
            "n_requested": int(args.n), "n": int(n), "policy": args.policy, "view": args.view,
            "min_count": int(args.min_count),
            "effective_rank": int(mds.effective_rank), "negative_mass": float(mds.negative_mass),
            "violation_rate": float(monotonicity_violation_rate(D, "triplets", input_kind="distances").rate),
            "support": [int(s) for s in marg.support],
        },
        "rows": rows,
    }
    if args.plot is not None:
        E = pairwise_distances(P_model) if P_model is not None else None
        _plot(D, E, name, info, Path(args.plot).expanduser())
        info["plot"] = str(args.plot)
    if args.json:
        print(json.dumps(info, indent=2, allow_nan=True))
    else:
        print(_format_table(info))
    return 0


def _format_table(info: dict) -> str:
    c = info["corpus"]
    lines = [
        f"model:  {info['model_label']}  ({info['mechanism']}, width {info['width']})",
        f"corpus: {c['name']}/{c['split']}, {c['texts']} texts, policy={c['policy']}",
        f"positions: n={c['n']} (asked {c['n_requested']}, min-count {c['min_count']}; "
        f"support {min(c['support'])}..{max(c['support'])} texts per position)",
        f"D_H: effective rank {c['effective_rank']}, negative eigenvalue mass {c['negative_mass']:.3g}, "
        f"violation rate {c['violation_rate']:.3f}",
        "",
    ]
    header = ("encoding", "width", "raw stress", "fitted stress", "violation rate")
    body = [(r["encoding"], str(r["width"]), _num(r["raw_stress"]), _num(r["fitted_stress"]),
             _num(r["violation_rate"])) for r in info["rows"]]
    widths = [max(len(row[k]) for row in [header, *body]) for k in range(len(header))]

    def fmt(row: Sequence[str]) -> str:
        return "  ".join(cell.ljust(w) if k == 0 else cell.rjust(w) for k, (cell, w) in enumerate(zip(row, widths)))

    lines += [fmt(header), "  ".join("-" * w for w in widths), *(fmt(r) for r in body)]
    if "plot" in info:
        lines += ["", f"figure: {info['plot']}"]
    return "\n".join(lines)


def _num(x: float) -> str:
    return "nan" if not math.isfinite(x) else f"{x:.4f}"


def _plot(D: np.ndarray, E: np.ndarray | None, name: str, info: dict, path: Path) -> None:
    from matplotlib.figure import Figure  # no pyplot: no global backend, no display needed

    panels = [("D_H (corpus: " + info["corpus"]["name"] + ")", D)]
    if E is not None:
        panels.append((f"{name}: |p_i - p_j|", E))
    fig = Figure(figsize=(5.0 * len(panels), 4.4), layout="constrained")
    for k, (title, M) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        im = ax.imshow(M, cmap="viridis", origin="upper")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("position j")
        ax.set_ylabel("position i")
        fig.colorbar(im, ax=ax, shrink=0.85)
    fig.suptitle(f"{info['model_label']}, n={info['corpus']['n']}", fontsize=11)
    try:
        fig.savefig(path, dpi=100)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--plot {str(path)!r}: cannot save the figure ({exc}); pass a writable .png path") from exc


# --------------------------------------------------------------------------- posgeom run

def _run_run(args: argparse.Namespace) -> int:
    from .runner import RunError, run_chapters

    try:
        summary = run_chapters(
            args.profile, chapters=args.chapters, device=args.device,
            out=Path(args.out).expanduser() if args.out else None, cap=args.cap, force=args.force,
            source_dir=Path(args.source_dir).expanduser() if args.source_dir else None,
            log=lambda line: print(line, flush=True), model=args.model,
            executor=args.executor, workers=args.workers, scheduler=args.scheduler,
        )
    except RunError as exc:
        raise UsageError(f"{exc.argument}: {exc}") from exc
    return 0 if summary.ok else 1


# --------------------------------------------------------------------------- entry point

def main(argv: list[str] | None = None) -> int:
    """Run ``posgeom``; returns the exit code (0 success, 1 a chapter of ``run`` failed, 2 bad usage or input).

    ``--help`` raises SystemExit(0).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    restore = {}
    if not sys.stderr.isatty():  # progress bars only on a terminal
        restore["POSGEOM_PROGRESS"] = os.environ.get("POSGEOM_PROGRESS")
        os.environ.setdefault("POSGEOM_PROGRESS", "0")
    try:
        try:
            from transformers.utils import logging as hf_logging

            verbosity = hf_logging.get_verbosity()
            bars = hf_logging.is_progress_bar_enabled()
            hf_logging.set_verbosity_error()
            if not sys.stderr.isatty():
                hf_logging.disable_progress_bar()
        except ImportError:  # pragma: no cover - transformers is a dependency
            hf_logging = None
        try:
            return int(args.func(args))
        except UsageError as exc:
            print(f"{PROG} {args.command}: error: {' '.join(str(exc).split())}", file=sys.stderr)
            return 2
        finally:
            if hf_logging is not None:
                hf_logging.set_verbosity(verbosity)
                if bars:
                    hf_logging.enable_progress_bar()
    finally:
        for key, value in restore.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

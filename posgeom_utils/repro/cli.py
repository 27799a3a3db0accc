"""The ``posgeom`` command line. Chapter: *The optimal encoding: classical MDS on
Hellinger geometry* (``stress``), *Reproduction ledger* (``run``), *Beyond one machine*
(``count``)."""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import re
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import fail, finite_array, integer
from ..settings import CACHE_ENV, DATA_ENV, PROGRESS_ENV, cache_dir
from .paths import place_problem
from .profiles import PROFILES, SIZE_PARAMETERS

PROG = "posgeom"

STRESS_EPILOG = """\
examples:
  posgeom stress --model bert-base-uncased --corpus sst2 --n 64
  posgeom stress --model ./my-checkpoint --corpus texts.txt --n 32 --min-count 5 --json
  posgeom stress --encoding table.npy --model bert-base-uncased --corpus imdb --n 128

The geometry is the corpus's Hellinger distances between positions, corrected for
sampling noise (split-half, the book's default; --geometry plugin for the plug-in
estimate). Columns: geometry.stress_table's with 95% bootstrap intervals over the
texts, and the share of triplets |i-j| < |i-k| in which an encoding puts j farther from
i than k (0 monotone, 0.5 random). A text file gives a text per line; empty lines are
skipped.
"""
RUN_EPILOG = """\
examples:
  posgeom run --profile smoke
  posgeom run --profile class --chapters learned_geometry --out runs/class
  posgeom run --profile default --chapters necessity low_rank --out runs/mine
  posgeom run --profile paper --device cuda
  posgeom run --profile paper --cap 2000 --model sentence-transformers/all-MiniLM-L6-v2
  posgeom run --profile default --executor dask --workers 2

A chapter is skipped when its results.json is current (same profile, parameters and code
hash); an interrupted training run resumes from its checkpoints/.
Exit status: 0 when every chapter ran or was skipped, 1 when one failed, 2 on bad usage.
"""
COUNT_EPILOG = """\
examples:
  posgeom count data/part-*.txt.gz --model bert-base-uncased --n 512 --out c4-counts.npz
  posgeom count --hub json --data-files 'shards/*.jsonl' --model ./minilm --n 64 \\
      --serial --out counts.npz

Shards: *.txt (a text per line; empty lines skipped), *.jsonl or *.tsv, maybe
compressed, local or any fsspec URL, or a Hugging Face dataset (--hub). The sum equals a
single-process count, bit for bit; a failing shard stops the count with its name,
writing nothing.
"""

#: the options of a command, one per row: (flag, help, keywords of ``add_argument``)
# fmt: off
TOKEN_OPTIONS = (
    ("--policy", "special tokens: keep what the model sees, or drop them",
     {"choices": ("keep", "drop"), "default": "keep"}),
    ("--view", "texts longer than n: what the model sees, or the first n tokens",
     {"choices": ("model", "corpus"), "default": "model"}),
)
STRESS_OPTIONS = (
    ("--model", ("a Hugging Face id or local folder: its tokenizer counts the corpus, "
                 "its own positions are scored unless --encoding"),
     {"required": True, "metavar": "ID_OR_PATH"}),
    ("--encoding", ("score your own n x d table instead: .npy, .npz[:KEY], .csv (a row "
                    "per position, no header), .pt[:KEY] (a tensor or state dict)"),
     {"metavar": "FILE[:KEY]"}),
    ("--corpus", "sst2, imdb, or a UTF-8 text file with one text per line",
     {"required": True, "metavar": "sst2|imdb|FILE"}),
    ("--split", "split of sst2 or imdb", {"default": "train"}),
    ("--n", "positions 0..n-1", {"type": int, "default": 128}),
    *TOKEN_OPTIONS,
    ("--min-count", "keep the positions that K texts reach",
     {"type": int, "default": 20, "metavar": "K"}),
    ("--geometry", "corrected: split-half noise correction; plugin: raw counts",
     {"choices": ("corrected", "plugin"), "default": "corrected"}),
    ("--replicates", "bootstrap resamples of the texts for the intervals (0: none)",
     {"type": int, "default": 100, "metavar": "R"}),
    ("--seed", "seeds the sample, the random halves and the resamples",
     {"type": int, "default": 0}),
    ("--sample-size", "a seeded sample of N texts (default: every text)",
     {"type": int, "metavar": "N"}),
    ("--data-dir", "sst2/imdb here (default: $POSGEOM_DATA_DIR, else the hub)",
     {"metavar": "DIR"}),
    ("--json", "print one JSON object, not the table", {"action": "store_true"}),
)
RUN_OPTIONS = (
    ("--profile", ("smoke (seconds, tests), class (each chapter's effects in under "
                   "10 minutes, 2 CPU cores), default (minutes), reference (what the "
                   "book shows, memoised) or paper (full scale, a GPU)"),
     {"required": True, "choices": sorted(PROFILES)}),
    ("--chapters", "default: every chapter", {"nargs": "+", "metavar": "CHAPTER"}),
    ("--device", "where models train", {"choices": ("auto", "cpu", "cuda")}),
    ("--model", "the chapters' model_name", {"metavar": "ID_OR_PATH"}),
    ("--out", "output folder (default: runs/<profile>-<date>)", {"metavar": "DIR"}),
    ("--cap", f"bound every size parameter ({', '.join(SIZE_PARAMETERS)}) by N",
     {"type": int, "metavar": "N"}),
    ("--force", "rerun current chapters, retrain anew", {"action": "store_true"}),
    ("--source-dir", "the MyST chapters (default: notebooks/)", {"metavar": "DIR"}),
    ("--executor", "where independent runs train", {"choices": ("serial", "dask")}),
    ("--workers", "Dask workers with --executor dask", {"type": int, "metavar": "N"}),
    ("--scheduler", "a Dask scheduler, with --executor dask", {"metavar": "ADDRESS"}),
)
COUNT_OPTIONS = (
    ("shards", "files, URLs or quoted patterns", {"nargs": "*", "metavar": "SHARD"}),
    ("--hub", "a Hugging Face dataset or builder (json)", {"metavar": "DATASET"}),
    ("--hub-config", "the dataset's configuration", {"metavar": "NAME"}),
    ("--split", "the dataset split with --hub", {"default": "train"}),
    ("--data-files", "files for a --hub builder", {"nargs": "+", "metavar": "FILE"}),
    ("--text-field", "the field of a .jsonl line or --hub row that holds the text",
     {"default": "text", "metavar": "NAME"}),
    ("--model", "whose tokenizer to use", {"required": True, "metavar": "ID_OR_PATH"}),
    ("--n", "number of positions to count", {"type": int, "required": True}),
    ("--min-count", ("keep the positions that K texts reach (1: every position a text "
                     "reaches, so an n beyond the longest text counts what is there)"),
     {"type": int, "default": 1, "metavar": "K"}),
    *TOKEN_OPTIONS,
    ("--align", "count from", {"choices": ("start", "end"), "default": "start"}),
    ("--batch-size", "texts per tokenizer batch", {"type": int, "default": 2048}),
    ("--split-every", "partial counts per tree node", {"type": int, "default": 8}),
    ("--out", "where to write the counts", {"required": True, "metavar": "FILE.npz"}),
    ("--no-cache", "count again, even if cached", {"action": "store_true"}),
)
COUNT_WHERE = (  # mutually exclusive
    ("--workers", "local Dask workers", {"type": int, "default": 2}),
    ("--scheduler", "a running Dask scheduler's address", {"metavar": "ADDRESS"}),
    ("--serial", "count in this process, no Dask", {"action": "store_true"}),
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


def writable(option: str, value: Any = None, folder: bool = False) -> Path:
    """``value`` (``None``: the cache folder) as a path :func:`place_problem` accepts,
    else a :class:`UsageError` naming ``option``. Chapter: *Reproduction ledger*."""
    if value is None:
        fix = f"); set {CACHE_ENV} to a writable folder"
        with usage(f"{CACHE_ENV}: cannot create the cache folder (", fix, (OSError,)):
            value = cache_dir()
    path = Path(value).expanduser()
    if problem := place_problem(path, folder):
        raise UsageError(f"{option} {str(path)!r}: {problem}")
    return path


def _add_options(p: Any, options: tuple) -> None:
    """The rows of an option table, each with its default (if any) in its help."""
    for flag, text, keywords in options:
        default = keywords.get("default")  # 0 is shown, False (a flag) not
        if default is not None and default is not False and "default" not in text:
            text = f"{text} (default: %(default)s)"
        p.add_argument(flag, help=text, **keywords)


def build_parser() -> argparse.ArgumentParser:
    """The ``posgeom`` argument parser. Chapter: *Reproduction ledger*."""
    from .. import __version__

    parser = argparse.ArgumentParser(prog=PROG, epilog="posgeom COMMAND --help")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", title="commands", required=True)
    commands = {
        "stress": (_stress, STRESS_OPTIONS, STRESS_EPILOG),
        "run": (_run, RUN_OPTIONS, RUN_EPILOG),
        "count": (_count, COUNT_OPTIONS, COUNT_EPILOG),
    }
    for name, (func, options, epilog) in commands.items():
        about = " ".join(func.__doc__.split())  # one line
        kw = {"help": about, "description": about, "epilog": epilog}
        kw["formatter_class"] = (
            argparse.RawDescriptionHelpFormatter
        )  # epilogs as written
        p = sub.add_parser(name, **kw)
        p.set_defaults(func=func)
        _add_options(p, options)
    _add_options(p.add_mutually_exclusive_group(), COUNT_WHERE)  # p: count
    return parser


def _corpus(args: argparse.Namespace) -> Any:
    from ..corpus import LOCAL_FILES, Corpus, load_corpus
    from ..scale.counting import Shard, shard_texts

    name, path = args.corpus, Path(args.corpus).expanduser()
    if name in LOCAL_FILES:
        fix = " (or pass --data-dir DIR)"
        missing = usage(f"--corpus {name}: ", fix, (FileNotFoundError,))
        with usage("--split/--corpus: "), missing:
            corpus = load_corpus(name, args.split, data_dir=args.data_dir)
    elif not path.is_file():
        raise UsageError(f"--corpus {name!r}: pass sst2, imdb or an existing text file")
    else:
        with usage(f"--corpus {name!r}: "):
            texts = list(shard_texts(Shard(str(path), "text")))
        if not texts:
            raise UsageError(f"--corpus {name!r} holds no text: pass one text per line")
        labels = np.full(len(texts), -1, dtype=np.int64)
        corpus = Corpus(path.name, "file", texts, labels, str(path))
    return corpus.sample(args.sample_size, args.seed)


def _table(spec: str) -> tuple[str, np.ndarray]:
    """(name, 2-D float table) of ``--encoding FILE[:KEY]`` (.npy, .npz, .csv, .pt)."""
    path, key = Path(spec).expanduser(), None
    if not path.is_file() and ":" in spec:
        path, key = Path(spec.rsplit(":", 1)[0]).expanduser(), spec.rsplit(":", 1)[1]
    where, kinds = f"--encoding {spec!r}: ", (".npy", ".npz", ".csv", ".pt", ".pth")
    if not path.is_file():
        raise UsageError(
            f"{where}no such file: pass a table saved as {', '.join(kinds)}"
        )
    if path.suffix not in kinds:
        raise UsageError(
            f"{where}unknown kind {path.suffix!r}: pass {', '.join(kinds)}"
        )
    with usage(where, "", (ValueError, OSError, RuntimeError, KeyError)):
        if path.suffix == ".csv":  # n rows, d columns, no header
            return path.name, np.loadtxt(path, delimiter=",", ndmin=2)
        if path.suffix == ".npy":
            return path.name, np.load(path, allow_pickle=False)
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                arrays = {k: archive[k] for k in archive.files}
        else:
            import torch

            arrays = torch.load(path, map_location="cpu", weights_only=True)
            if isinstance(arrays, torch.Tensor):
                return path.name, arrays.float().numpy()
            arrays = {
                k: v.float().numpy()
                for k, v in dict(arrays).items()
                if isinstance(v, torch.Tensor) and v.ndim == 2
            }
    if key is None and len(arrays) != 1:
        raise UsageError(f"{where}holds {sorted(arrays)}: name one as FILE:KEY")
    key = next(iter(arrays)) if key is None else key
    if key not in arrays:
        raise UsageError(
            f"{where}has no 2-D array {key!r}: pass one of {sorted(arrays)}"
        )
    return f"{path.name}:{key}", arrays[key]


def _checked_table(spec: str, n: int) -> tuple[str, np.ndarray]:
    """The ``--encoding`` table, refused before any counting unless it has n rows."""
    name, P = _table(spec)
    with usage(f"--encoding {spec!r}: "):
        P = finite_array(np.asarray(P, dtype=np.float64), "the table")
    if P.shape[0] < n:
        fix = f"pass --n {P.shape[0]} or less, or a table with a row per position"
        raise UsageError(f"--encoding {spec!r} has {P.shape[0]} rows < --n {n}: {fix}")
    return name, P


def _text_counts(args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    """(corpus, model config, per-text counts, marginals) of the positions that at
    least ``--min-count`` texts reach."""
    from .. import models
    from ..marginals import text_counts

    with usage():
        integer(args.n, "--n", minimum=3, fix="stress needs 3 positions; e.g. --n 128")
        integer(args.min_count, "--min-count", fix="pass e.g. --min-count 20")
        integer(
            args.sample_size,
            "--sample-size",
            fix="omit it for every text",
            optional=True,
        )
        integer(args.replicates, "--replicates", minimum=0, fix="e.g. 100; 0: none")
        integer(args.seed, "--seed", minimum=0, fix="e.g. --seed 0")
    if args.replicates == 1:
        raise UsageError("--replicates 1: an interval needs 2 or more (0: none)")
    writable(CACHE_ENV, folder=True)
    corpus = _corpus(args)
    with usage(f"--model {args.model!r}: ", "", (ValueError, TypeError)):
        tokenizer = models.load_tokenizer(args.model)
        config = models.load_config(args.model)
        learned = models.positional_mechanism(config).kind == "learned"
    table = models.position_table_size(config)
    absolute = getattr(config, "position_embedding_type", None) in (None, "absolute")
    if not args.encoding and learned and absolute and table and args.n > table:
        where = f"the {table} positions of the model's learned position table"
        fix = f"(max_position_embeddings): pass --n {table} or less"
        raise UsageError(f"--n {args.n} exceeds {where} {fix}")
    with usage("--n/--policy: "):
        options = {"special_tokens": args.policy, "view": args.view}
        counts = text_counts(corpus, tokenizer, args.n, **options)
    marg = counts.marginals()
    if (kept := int(np.sum(marg.support >= args.min_count))) < 3:
        k, few = args.min_count, f"only {kept} position(s) are reached by at least"
        fix = "(need 3); lower --min-count, or use more / longer texts"
        raise UsageError(f"--min-count {k}: {few} {k} texts {fix}")
    return corpus, config, counts.truncate(kept), marg.truncate(kept)


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


def _geometry(counts: Any, kind: str, seed: int, weights: Any = None) -> np.ndarray:
    """D_H of ``counts`` (a bootstrap resample: ``weights``), corrected or plug-in."""
    from ..geometry import hellinger_distances
    from ..matched_counts import corrected_geometry

    if kind == "plugin":
        return hellinger_distances(counts.marginals(weights).mu())
    return corrected_geometry(counts, seed, weights=weights)


def _encodings(D: np.ndarray, own: dict, sin: dict, width: int) -> dict[str, Any]:
    """The scored table (``own``: none or one), the MDS optimum of ``D`` at ``width``,
    the sinusoids (``sin``)."""
    from ..encodings import mds_encoding

    return {**own, f"MDS optimum (d={width})": mds_encoding(D, width), **sin}


#: stress columns that carry a bootstrap interval
INTERVAL_COLUMNS = ("raw stress", "fitted stress")
GEOMETRY_LABELS = {
    "corrected": "corrected Hellinger (split-half, mean of 3 random splits)",
    "plugin": "plug-in Hellinger (sampling noise included)",
}


def _tables(args: argparse.Namespace, config: Any, n: int, given: Any) -> tuple:
    """(mechanism, the scored table by name: none or one, the sinusoids, width);
    ``given``: the ``--encoding`` (name, table), if any."""
    from ..encodings import sinusoidal
    from ..models import config_int

    if given:
        (name, P), mechanism = given, f"your table ({args.encoding})"
        P, width = P[:n], P.shape[1]
    else:
        name, mechanism, P = _model_encoding(args.model, config, n)
        width = config_int(config, "hidden_size", "d_model", "n_embd")
        width = width or (n if P is None else P.shape[1])
    d_sin = width - width % 2 or 2
    own = {} if P is None else {name: np.asarray(P, np.float64)}
    return mechanism, own, {f"sinusoidal (d={d_sin})": sinusoidal(n, d_sin)}, width


def _scores(args: argparse.Namespace, counts: Any, D: np.ndarray, tables: tuple) -> Any:
    """The stress table of the tables against ``D``, with bootstrap intervals over
    the texts (``--replicates``) and each table's violation rate."""
    from ..geometry import monotonicity_violation_rate, stress_table
    from ..sampling import bootstrap_weights, normal_interval

    _, own, sin, width = tables
    encodings = _encodings(D, own, sin, width)
    table, columns = stress_table(D, encodings), list(INTERVAL_COLUMNS)
    if args.replicates:
        weights = bootstrap_weights(counts.num_texts, args.replicates, args.seed)
        resampled = (_geometry(counts, args.geometry, args.seed, w) for w in weights)
        values = np.stack(
            [
                stress_table(B, _encodings(B, own, sin, width))[columns].to_numpy()
                for B in resampled
            ]
        )
        low, high = normal_interval(values, table[columns].to_numpy())
        for k, column in enumerate(columns):
            at = table.columns.get_loc(column) + 1
            table.insert(at, f"{column} low", low[:, k])
            table.insert(at + 1, f"{column} high", high[:, k])
    rate = monotonicity_violation_rate
    table["violation rate"] = [
        rate(P, input_kind="encoding").rate for P in encodings.values()
    ]
    return table


def _print_stress(facts: dict, table: Any, intervals: bool) -> None:
    """The facts, a line each, then the table with 'estimate [low, high]' cells."""
    for key, value in facts.items():
        print(f"{key}: {value:.4g}" if isinstance(value, float) else f"{key}: {value}")
    shown = table.copy()
    for column in INTERVAL_COLUMNS if intervals else ():
        low, high = shown.pop(f"{column} low"), shown.pop(f"{column} high")
        shown[column] = [
            f"{v:.4g} [{a:.4g}, {b:.4g}]" for v, a, b in zip(shown[column], low, high)
        ]
    print("\n" + shown.to_string(float_format=lambda x: f"{x:.4f}"))


def _stress(args: argparse.Namespace) -> int:
    """Stress and monotonicity of a table (a model's positions or your own), MDS and
    sinusoids against the corpus's corrected D_H."""
    from ..geometry import classical_mds, monotonicity_violation_rate

    # a table that cannot be scored is refused before counting
    given = _checked_table(args.encoding, args.n) if args.encoding else None
    corpus, config, counts, marg = _text_counts(args)
    D, n, support = _geometry(counts, args.geometry, args.seed), marg.n, marg.support
    tables = _tables(args, config, n, given)
    table, mds = _scores(args, counts, D, tables), classical_mds(D)
    facts = {"model": str(args.model), "mechanism": tables[0], "width": int(tables[3])}
    facts |= {"corpus": f"{corpus.name}/{corpus.split}", "texts": len(corpus)}
    facts |= {"geometry": GEOMETRY_LABELS[args.geometry], "n": n, "n_asked": args.n}
    if n < args.n:
        facts["note"] = (
            f"--n {args.n} asked: positions {n}.. are reached by fewer "
            f"than --min-count {args.min_count} texts and are left out"
        )
    facts["support"] = [int(s) for s in support]
    facts |= {"effective_rank": mds.effective_rank, "negative_mass": mds.negative_mass}
    violations = monotonicity_violation_rate(D, input_kind="distances")
    facts["violation_rate"] = violations.rate
    if args.replicates:
        facts["intervals"] = (
            f"95% normal bootstrap over {args.replicates} resamples "
            f"of the texts (seed {args.seed})"
        )
    if args.json:
        print(json.dumps(facts | {"table": table.to_dict("index")}, indent=2))
    else:
        facts["support"] = f"{min(support)}..{max(support)} texts per position"
        _print_stress(facts, table, bool(args.replicates))
    return 0


def _run(args: argparse.Namespace) -> int:
    """Re-execute chapters under a profile: notebook and results.json per chapter."""
    from .runner import RunError, run_chapters

    options = {k: v for k, v in vars(args).items() if k not in ("command", "func")}
    for key in ("out", "source_dir"):
        if options[key]:
            options[key] = Path(options[key]).expanduser()
    try:
        summary = run_chapters(**options, log=functools.partial(print, flush=True))
    except RunError as exc:
        raise UsageError(f"{exc.argument}: {exc}") from exc
    return 0 if summary.ok else 1


def _shards(args: argparse.Namespace) -> list:
    from ..scale.counting import file_shards, hub_shards

    if bool(args.shards) == bool(args.hub):
        raise UsageError(
            "pass shard files (SHARD ...) or --hub DATASET, not both and not neither"
        )
    with usage():
        integer(args.n, "--n", fix="the number of positions, e.g. --n 512")
        integer(args.workers, "--workers", fix="pass e.g. --workers 2")
        if Path(args.out).expanduser().suffix != ".npz":
            what = "a file name ending in .npz"
            raise fail("--out", what, args.out, "a NumPy archive")
    where = "--hub: " if args.hub else "SHARD: "
    with usage(where, "", (ValueError, FileNotFoundError)):
        if args.hub:
            hub = (args.hub, args.hub_config, args.split, args.text_field)
            return hub_shards(*hub, args.data_files)
        return file_shards(args.shards, text_field=args.text_field)


def _provenance(args: argparse.Namespace, result: Any, seconds: float) -> dict:
    from .runner import git_state, library_versions

    params, (commit, dirty) = result.params, git_state()
    stats, cached = params.get("shard_stats", []), bool(params.get("from_cache"))
    tokens = sum(s.get("tokens", 0) for s in stats)
    executor = "serial" if args.serial else "dask"
    out = {"command": "posgeom count", "shards": params.get("shards", [])}
    out |= {"shard_stats": stats, "tokenizer": params.get("tokenizer")}
    out |= {"tokenizer_sha": params.get("tokenizer_sha"), "n": result.n, "V": result.V}
    out |= {"special_tokens": args.policy, "align": args.align, "view": args.view}
    out |= {"texts": result.num_sequences, "tokens": tokens, "executor": executor}
    out |= {"n_asked": args.n, "min_count": args.min_count}
    out["tokens_counted"] = int(result.counts.sum())  # at the n positions kept
    workers = None if args.serial or args.scheduler else args.workers
    out |= {"workers": workers, "scheduler": args.scheduler, "from_cache": cached}
    rate = round(tokens / seconds, 1) if seconds > 0 and not cached else None
    out |= {"seconds": round(seconds, 3), "tokens_per_second": rate}
    versions = library_versions("dask", "distributed", "fsspec")
    out |= {"commit": commit, "dirty": dirty, "versions": versions}
    out |= {"host": socket.gethostname(), "platform": platform.platform()}
    return out | {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _count(args: argparse.Namespace) -> int:
    """Count tokens per position over a sharded corpus (Dask or one process)."""
    from ..cache import write_json
    from ..models import load_tokenizer
    from ..scale.counting import ShardError, sharded_marginals

    shards, out = _shards(args), writable("--out", args.out)
    if not args.no_cache:
        writable(CACHE_ENV, folder=True)
    with usage(f"--model {args.model!r}: ", "", (OSError, ValueError)):
        tokenizer = load_tokenizer(args.model)
    names = ("align", "workers", "scheduler", "view", "batch_size", "split_every")
    options = {name: getattr(args, name) for name in names}
    options["executor"] = "serial" if args.serial else "dask"
    options |= {"special_tokens": args.policy, "cache": not args.no_cache}
    options["min_count"] = args.min_count
    start = time.perf_counter()
    shard_error = usage("SHARD: ", " (nothing was written)", (ShardError,))
    failure = usage(errors=(ValueError, FileNotFoundError, ConnectionError))
    with failure, shard_error:
        result = sharded_marginals(shards, tokenizer, args.n, **options)
    seconds = time.perf_counter() - start
    info = _provenance(args, result, seconds)
    rate, executor = info["tokens_per_second"], info["executor"]
    how = "read from the cache" if rate is None else f"{rate:,.0f} tokens/s, {executor}"
    print(
        f"counted {info['texts']:,} texts in {len(shards)} shard"
        f"{'s' * (len(shards) != 1)}, {seconds:.1f} s "
        f"({how}): {info['tokens']:,} tokens read, {info['tokens_counted']:,} of them "
        f"(special tokens included) at the n={result.n} positions kept, V={result.V}",
        flush=True,
    )
    if result.n < args.n:
        longest = int(np.flatnonzero(result.length_hist).max(initial=0))
        print(
            f"note: --n {args.n} asked, {result.n} counted: only positions "
            f"0..{result.n - 1} are reached by --min-count {args.min_count} or more "
            f"texts (the longest text has {longest} tokens, special tokens included)",
            flush=True,
        )
    with usage(f"--out {str(out)!r}: cannot write the counts (", ")", (OSError,)):
        result.save(out)
        write_json(out.with_suffix(".json"), info)
    print(f"wrote {out} and {out.with_suffix('.json')}", flush=True)
    return 0


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


#: API argument names in a message, as the command's options: ``--`` and the name with
#: dashes, but for the two options named otherwise
_API_NAMES = (
    "text_field min_count sample_size data_dir batch_size split_every n workers"
)
_OPTION_WORDS = {name: "--" + name.replace("_", "-") for name in _API_NAMES.split()}
_OPTION_WORDS |= {"align": "--align", "view": "--view"}
_OPTION_WORDS |= {"model_name": "--model", "special_tokens": "--policy"}
_API_WORD = re.compile(r"(?<![\w-])(" + "|".join(_OPTION_WORDS) + r")(=|\b)")


def cli_words(message: str) -> str:
    """``message`` in the command's words: ``min_count=5`` reads ``--min-count 5``
    (a one-letter name only with its ``=``). Chapter: *Reproduction ledger*."""

    def option(m: re.Match) -> str:
        if len(m[1]) == 1 and not m[2]:
            return m[0]
        return _OPTION_WORDS[m[1]] + (" " if m[2] else "")

    return _API_WORD.sub(option, " ".join(message.split()))


def _absolute_paths() -> None:
    """$POSGEOM_DATA_DIR and $POSGEOM_CACHE_DIR resolved against where the command was
    run, once, before chapters run elsewhere."""
    for name in (DATA_ENV, CACHE_ENV):
        if value := os.environ.get(name):
            os.environ[name] = str(Path(value).expanduser().absolute())


def main(argv: list[str] | None = None) -> int:
    """Run ``posgeom``: exit code 0, 1 when a chapter of ``run`` failed, 2 on bad usage,
    130 on Ctrl-C. Chapter: *Reproduction ledger*."""
    args = build_parser().parse_args(argv)
    _absolute_paths()
    try:
        with _quiet():
            return int(args.func(args))
    except UsageError as exc:
        print(f"{PROG} {args.command}: error: {cli_words(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130

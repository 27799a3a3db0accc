"""The ``posgeom`` command line. Chapter: *The optimal encoding: classical MDS on
Hellinger geometry* (``stress``), *Reproduction ledger* (``run``), *Beyond one machine*
(``count``)."""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import fail, integer
from ..settings import CACHE_ENV, PROGRESS_ENV, cache_dir
from .profiles import PROFILES, SIZE_PARAMETERS

PROG = "posgeom"

STRESS_EPILOG = """\
examples:
  posgeom stress --model bert-base-uncased --corpus sst2 --n 64
  posgeom stress --model ./my-checkpoint --corpus texts.txt --n 32 --min-count 5 --json

Columns: geometry.stress_table's, and the share of triplets |i-j| < |i-k| in which an
encoding puts j farther from i than k (0 monotone, 0.5 random).
"""
RUN_EPILOG = """\
examples:
  posgeom run --profile smoke
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

Shards: *.txt (a text per line), *.jsonl or *.tsv, maybe compressed, local or any fsspec
URL, or a Hugging Face dataset (--hub). The sum equals a single-process count, bit for
bit; a failing shard stops the count with its name, writing nothing.
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
    ("--model", "a Hugging Face id or local folder",
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
)
RUN_OPTIONS = (
    ("--profile", ("smoke (seconds), default (minutes), reference (what the book "
                   "shows, memoised) or paper (full scale, a GPU)"),
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
    ("--split", "the dataset split with --hub (default train)", {"default": "train"}),
    ("--data-files", "files for a --hub builder", {"nargs": "+", "metavar": "FILE"}),
    ("--text-field", "default: text", {"default": "text", "metavar": "NAME"}),
    ("--model", "whose tokenizer to use", {"required": True, "metavar": "ID_OR_PATH"}),
    ("--n", "number of positions to count", {"type": int, "required": True}),
    *TOKEN_OPTIONS,
    ("--align", "count from", {"choices": ("start", "end"), "default": "start"}),
    ("--batch-size", "texts per tokenizer batch", {"type": int, "default": 2048}),
    ("--split-every", "partial counts per tree node", {"type": int, "default": 8}),
    ("--out", "where to write the counts", {"required": True, "metavar": "FILE.npz"}),
    ("--no-cache", "count again, even if cached", {"action": "store_true"}),
)
COUNT_WHERE = (  # mutually exclusive
    ("--workers", "local Dask workers (default 2)", {"type": int, "default": 2}),
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
    for flag, text, keywords in options:
        p.add_argument(flag, help=text, **keywords)


def build_parser() -> argparse.ArgumentParser:
    """The ``posgeom`` argument parser. Chapter: *Reproduction ledger*."""
    parser = argparse.ArgumentParser(prog=PROG, epilog="posgeom COMMAND --help")
    sub = parser.add_subparsers(dest="command", title="commands", required=True)
    commands = {
        "stress": (_stress, STRESS_OPTIONS, STRESS_EPILOG),
        "run": (_run, RUN_OPTIONS, RUN_EPILOG),
        "count": (_count, COUNT_OPTIONS, COUNT_EPILOG),
    }
    raw = argparse.RawDescriptionHelpFormatter
    for name, (func, options, epilog) in commands.items():
        about = func.__doc__  # one line
        kw = {"help": about, "description": about, "epilog": epilog}
        p = sub.add_parser(name, formatter_class=raw, **kw)
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
    return corpus.sample(args.sample_size)


def _marginals(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(corpus, model config, positional marginals truncated at ``--min-count``)."""
    from .. import models
    from ..marginals import positional_marginals

    with usage():
        needs = "stress needs 3 positions; pass e.g. --n 128"
        integer(args.n, "--n", minimum=3, fix=needs)
        integer(args.min_count, "--min-count", fix="pass e.g. --min-count 20")
        fix = "omit it to use all texts"
        integer(args.sample_size, "--sample-size", fix=fix, optional=True)
    writable(CACHE_ENV, folder=True)
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


def _stress(args: argparse.Namespace) -> int:
    """Stress and monotonicity of a model's positions, MDS and sinusoidal vs D_H."""
    from .. import geometry
    from ..encodings import mds_encoding, sinusoidal
    from ..models import config_int

    corpus, config, marg = _marginals(args)
    D = geometry.hellinger_distances(marg.mu())
    mds = geometry.classical_mds(D)
    name, mechanism, P_model = _model_encoding(args.model, config, marg.n)
    width = config_int(config, "hidden_size", "d_model", "n_embd")
    width = width or (marg.n if P_model is None else P_model.shape[1])
    d_sin = width - width % 2 or 2
    encodings = {} if P_model is None else {name: np.asarray(P_model, np.float64)}
    encodings[f"MDS optimum (d={width})"] = mds_encoding(D, width)
    encodings[f"sinusoidal (d={d_sin})"] = sinusoidal(marg.n, d_sin)
    table = geometry.stress_table(D, encodings)
    violations = geometry.monotonicity_violation_rate
    rates = [violations(P, input_kind="encoding").rate for P in encodings.values()]
    table["violation rate"] = rates
    support = [int(s) for s in marg.support]
    facts = {"model": str(args.model), "mechanism": mechanism, "width": int(width)}
    facts |= {"corpus": f"{corpus.name}/{corpus.split}", "texts": len(corpus)}
    facts |= {"n": int(marg.n), "support": support}
    facts |= {"effective_rank": mds.effective_rank, "negative_mass": mds.negative_mass}
    facts["violation_rate"] = violations(D, input_kind="distances").rate
    if args.json:
        print(json.dumps(facts | {"table": table.to_dict("index")}, indent=2))
        return 0
    facts["support"] = f"{min(support)}..{max(support)} texts per position"
    for key, value in facts.items():
        print(f"{key}: {value:.4g}" if isinstance(value, float) else f"{key}: {value}")
    print("\n" + table.to_string(float_format=lambda x: f"{x:.4f}"))
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
        f"counted {info['texts']:,} texts ({info['tokens']:,} tokens) in {len(shards)} "
        f"shards, {seconds:.1f} s ({how}); n={result.n}, V={result.V}",
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

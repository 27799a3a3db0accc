"""``posgeom count``: the positional counts of a sharded corpus, on Dask or in one
process.

Chapter: *Beyond one machine*. The counts go atomically to ``--out`` (an ``.npz`` that
:meth:`posgeom_utils.marginals.PositionalMarginals.load` reads), the provenance beside
it to ``<out>.json`` (shards and their fingerprints, tokenizer, options, executor,
throughput, versions)."""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import socket
import time
from pathlib import Path
from typing import Any

from ..checks import fail, integer
from .cli import (
    UsageError,
    add_command,
    add_token_options,
    check_cache,
    output_place,
    usage,
)

EPILOG = """\
examples:
  posgeom count data/part-*.txt.gz --model bert-base-uncased --n 512 --out c4-counts.npz
  posgeom count 's3://bucket/c4/*.json.gz' --model bert-base-uncased --n 512 \\
      --scheduler tcp://10.0.0.1:8786 --out c4.npz
  posgeom count --hub allenai/c4 --hub-config en --model bert-base-uncased --n 512 --out c4.npz
  posgeom count --hub json --data-files 'shards/*.jsonl' --model ./minilm --n 64 --serial \\
      --out counts.npz

Shards: *.txt (one text per line), *.jsonl (field --text-field) or GLUE-style *.tsv, compressed or
not (.gz/.bz2/.xz/.zst), local or any fsspec URL, or a Hugging Face dataset streamed (--hub), one
task per shard. The counts are summed exactly by a tree reduction: the result equals a
single-process count, bit for bit. A failing shard stops the count with its name, writing nothing.
"""


def add_count_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``posgeom count`` on the ``posgeom`` sub-parsers. Chapter: *Beyond one
    machine*."""
    summary = "count tokens per position over a sharded corpus (Dask or one process)"
    p = add_command(sub, "count", summary, EPILOG, run_count)
    p.add_argument(
        "shards", nargs="*", metavar="SHARD", help="files, URLs or quoted patterns"
    )
    p.add_argument(
        "--hub", metavar="DATASET", help="a Hugging Face dataset or builder (json)"
    )
    p.add_argument("--hub-config", metavar="NAME", help="the dataset's configuration")
    p.add_argument(
        "--split", default="train", help="the dataset split with --hub (default train)"
    )
    p.add_argument(
        "--data-files", nargs="+", metavar="FILE", help="data files for a --hub builder"
    )
    p.add_argument("--text-field", default="text", metavar="NAME", help="default: text")
    p.add_argument(
        "--model", required=True, metavar="ID_OR_PATH", help="whose tokenizer to count"
    )
    p.add_argument("--n", type=int, required=True, help="number of positions to count")
    add_token_options(p)
    p.add_argument(
        "--align", choices=("start", "end"), default="start", help="count from"
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--workers", type=int, default=2, help="local Dask workers (default 2)"
    )
    where.add_argument(
        "--scheduler", metavar="ADDRESS", help="a running Dask scheduler's address"
    )
    where.add_argument(
        "--serial", action="store_true", help="count in this process, no Dask"
    )
    p.add_argument(
        "--batch-size", type=int, default=2048, help="texts per tokenizer batch"
    )
    p.add_argument(
        "--split-every", type=int, default=8, help="partial counts summed per tree node"
    )
    p.add_argument(
        "--out", required=True, metavar="FILE.npz", help="where to write the counts"
    )
    p.add_argument(
        "--no-cache", action="store_true", help="count again, even if cached"
    )
    return p


def _provenance(
    args: argparse.Namespace, result: Any, seconds: float, executor: str
) -> dict:
    from .runner import git_state, library_versions

    params, (commit, dirty), versions = result.params, git_state(), library_versions()
    stats, cached = params.get("shard_stats", []), bool(params.get("from_cache"))
    tokens = sum(s.get("tokens", 0) for s in stats)
    for name in ("dask", "distributed", "fsspec"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    out = {
        "command": "posgeom count",
        "shards": params.get("shards", []),
        "shard_stats": stats,
    }
    out |= {
        "tokenizer": params.get("tokenizer"),
        "tokenizer_sha": params.get("tokenizer_sha"),
    }
    out |= {
        "n": result.n,
        "V": result.V,
        "special_tokens": args.policy,
        "align": args.align,
    }
    out |= {"view": args.view, "texts": result.num_sequences, "tokens": tokens}
    workers = None if executor != "dask" or args.scheduler else args.workers
    out |= {"executor": executor, "workers": workers, "scheduler": args.scheduler}
    rate = round(tokens / seconds, 1) if seconds > 0 and not cached else None
    out |= {
        "seconds": round(seconds, 3),
        "from_cache": cached,
        "tokens_per_second": rate,
    }
    out |= {
        "commit": commit,
        "dirty": dirty,
        "versions": versions,
        "host": socket.gethostname(),
    }
    date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return out | {"platform": platform.platform(), "date": date}


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
            raise fail(
                "--out", "a file name ending in .npz", args.out, "a NumPy archive"
            )
    with usage(
        "--hub: " if args.hub else "SHARD: ", "", (ValueError, FileNotFoundError)
    ):
        if args.hub:
            hub = (
                args.hub,
                args.hub_config,
                args.split,
                args.text_field,
                args.data_files,
            )
            return hub_shards(*hub)
        return file_shards(args.shards, text_field=args.text_field)


def run_count(args: argparse.Namespace) -> int:
    """Run ``posgeom count``; bad usage raises :class:`.cli.UsageError`.
    Chapter: *Beyond one machine*."""
    from ..cache import write_json
    from ..models import load_tokenizer
    from ..scale.counting import ShardError, sharded_marginals

    shards, out = _shards(args), output_place("--out", args.out)
    if not args.no_cache:
        check_cache()
    with usage(f"--model {args.model!r}: ", "", (OSError, ValueError)):
        tokenizer = load_tokenizer(args.model)
    executor = "serial" if args.serial else "dask"
    names = ("align", "workers", "scheduler", "view", "batch_size", "split_every")
    options = {name: getattr(args, name) for name in names}
    options |= {
        "special_tokens": args.policy,
        "executor": executor,
        "cache": not args.no_cache,
    }
    start = time.perf_counter()
    shard_error = usage("SHARD: ", " (nothing was written)", (ShardError,))
    with usage(errors=(ValueError, FileNotFoundError, ConnectionError)), shard_error:
        result = sharded_marginals(shards, tokenizer, args.n, **options)
    seconds = time.perf_counter() - start
    provenance = _provenance(args, result, seconds, executor)
    rate = provenance["tokens_per_second"]
    how = "read from the cache" if rate is None else f"{rate:,.0f} tokens/s, {executor}"
    print(
        f"counted {provenance['texts']:,} texts ({provenance['tokens']:,} tokens) in "
        f"{len(shards)} shards, {seconds:.1f} s ({how}); n={result.n}, V={result.V}",
        flush=True,
    )
    with usage(f"--out {str(out)!r}: cannot write the counts (", ")", (OSError,)):
        result.save(out)
        write_json(out.with_suffix(".json"), provenance)
    print(f"wrote {out} and {out.with_suffix('.json')}", flush=True)
    return 0

"""``posgeom count``: the positional counts of a sharded corpus, on Dask or in one
process, written atomically to ``--out`` (``PositionalMarginals.load`` reads it) with
their provenance in ``<out>.json``. Chapter: *Beyond one machine*."""

from __future__ import annotations

import argparse
import platform
import socket
import time
from pathlib import Path
from typing import Any

from ..checks import fail, integer
from . import cli

EPILOG = """\
examples:
  posgeom count data/part-*.txt.gz --model bert-base-uncased --n 512 --out c4-counts.npz
  posgeom count 's3://bucket/c4/*.json.gz' --model bert-base-uncased --n 512 \\
      --scheduler tcp://10.0.0.1:8786 --out c4.npz
  posgeom count --hub allenai/c4 --hub-config en --model bert-base-uncased --n 512 \\
      --out c4.npz
  posgeom count --hub json --data-files 'shards/*.jsonl' --model ./minilm --n 64 \\
      --serial --out counts.npz

Shards: *.txt (one text per line), *.jsonl (field --text-field) or GLUE-style *.tsv,
compressed or not (.gz/.bz2/.xz/.zst), local or any fsspec URL, or a Hugging Face
dataset streamed (--hub), one task per shard. The counts are summed exactly by a tree
reduction: the result equals a single-process count, bit for bit. A failing shard stops
the count with its name, writing nothing.
"""

#: (flag, help, keywords of ``add_argument``): before, within and after the group that
#: says where the count runs
OPTIONS = (
    ("shards", "files, URLs or quoted patterns", {"nargs": "*", "metavar": "SHARD"}),
    ("--hub", "a Hugging Face dataset or builder (json)", {"metavar": "DATASET"}),
    ("--hub-config", "the dataset's configuration", {"metavar": "NAME"}),
    ("--split", "the dataset split with --hub (default train)", {"default": "train"}),
    ("--data-files", "files for a --hub builder", {"nargs": "+", "metavar": "FILE"}),
    ("--text-field", "default: text", {"default": "text", "metavar": "NAME"}),
    ("--model", "whose tokenizer to use", {"required": True, "metavar": "ID_OR_PATH"}),
    ("--n", "number of positions to count", {"type": int, "required": True}),
    *cli.TOKEN_OPTIONS,
    ("--align", "count from", {"choices": ("start", "end"), "default": "start"}),
)
WHERE = (
    ("--workers", "local Dask workers (default 2)", {"type": int, "default": 2}),
    ("--scheduler", "a running Dask scheduler's address", {"metavar": "ADDRESS"}),
    ("--serial", "count in this process, no Dask", {"action": "store_true"}),
)
AFTER = (
    ("--batch-size", "texts per tokenizer batch", {"type": int, "default": 2048}),
    ("--split-every", "partial counts per tree node", {"type": int, "default": 8}),
    ("--out", "where to write the counts", {"required": True, "metavar": "FILE.npz"}),
    ("--no-cache", "count again, even if cached", {"action": "store_true"}),
)


def add_count_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``posgeom count``. Chapter: *Beyond one machine*."""
    summary = "count tokens per position over a sharded corpus (Dask or one process)"
    p = cli.add_command(sub, "count", summary, EPILOG, run_count, OPTIONS)
    cli.add_options(p.add_mutually_exclusive_group(), WHERE)
    cli.add_options(p, AFTER)
    return p


def _provenance(
    args: argparse.Namespace, result: Any, seconds: float, executor: str
) -> dict:
    from .runner import git_state, library_versions

    params, (commit, dirty) = result.params, git_state()
    stats, cached = params.get("shard_stats", []), bool(params.get("from_cache"))
    tokens = sum(s.get("tokens", 0) for s in stats)
    out = {"command": "posgeom count", "shards": params.get("shards", [])}
    out |= {"shard_stats": stats, "tokenizer": params.get("tokenizer")}
    out |= {"tokenizer_sha": params.get("tokenizer_sha"), "n": result.n, "V": result.V}
    out |= {"special_tokens": args.policy, "align": args.align, "view": args.view}
    out |= {"texts": result.num_sequences, "tokens": tokens, "executor": executor}
    workers = None if executor != "dask" or args.scheduler else args.workers
    out |= {"workers": workers, "scheduler": args.scheduler, "from_cache": cached}
    rate = round(tokens / seconds, 1) if seconds > 0 and not cached else None
    out |= {"seconds": round(seconds, 3), "tokens_per_second": rate}
    versions = library_versions("dask", "distributed", "fsspec")
    out |= {"commit": commit, "dirty": dirty, "versions": versions}
    out |= {"host": socket.gethostname(), "platform": platform.platform()}
    return out | {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def _shards(args: argparse.Namespace) -> list:
    from ..scale.counting import file_shards, hub_shards

    if bool(args.shards) == bool(args.hub):
        raise cli.UsageError(
            "pass shard files (SHARD ...) or --hub DATASET, not both and not neither"
        )
    with cli.usage():
        integer(args.n, "--n", fix="the number of positions, e.g. --n 512")
        integer(args.workers, "--workers", fix="pass e.g. --workers 2")
        if Path(args.out).expanduser().suffix != ".npz":
            what = "a file name ending in .npz"
            raise fail("--out", what, args.out, "a NumPy archive")
    where = "--hub: " if args.hub else "SHARD: "
    with cli.usage(where, "", (ValueError, FileNotFoundError)):
        if args.hub:
            hub = (args.hub, args.hub_config, args.split, args.text_field)
            return hub_shards(*hub, args.data_files)
        return file_shards(args.shards, text_field=args.text_field)


def run_count(args: argparse.Namespace) -> int:
    """Run ``posgeom count``. Chapter: *Beyond one machine*."""
    from ..cache import write_json
    from ..models import load_tokenizer
    from ..scale.counting import ShardError, sharded_marginals

    shards, out = _shards(args), cli.output_place("--out", args.out)
    if not args.no_cache:
        cli.check_cache()
    with cli.usage(f"--model {args.model!r}: ", "", (OSError, ValueError)):
        tokenizer = load_tokenizer(args.model)
    executor = "serial" if args.serial else "dask"
    names = ("align", "workers", "scheduler", "view", "batch_size", "split_every")
    options = {name: getattr(args, name) for name in names}
    options |= {"special_tokens": args.policy, "executor": executor}
    options["cache"] = not args.no_cache
    start = time.perf_counter()
    shard_error = cli.usage("SHARD: ", " (nothing was written)", (ShardError,))
    failure = cli.usage(errors=(ValueError, FileNotFoundError, ConnectionError))
    with failure, shard_error:
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
    with cli.usage(f"--out {str(out)!r}: cannot write the counts (", ")", (OSError,)):
        result.save(out)
        write_json(out.with_suffix(".json"), provenance)
    print(f"wrote {out} and {out.with_suffix('.json')}", flush=True)
    return 0

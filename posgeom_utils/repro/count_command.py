"""``posgeom count``: the positional counts of a sharded corpus, on Dask or in one process.

Chapter: *Beyond one machine*. The counts are written atomically to ``--out`` (an ``.npz`` that
:meth:`posgeom_utils.marginals.PositionalMarginals.load` reads) with a provenance file beside it
(``<out>.json``: shards and their fingerprints, tokenizer, options, executor, throughput, versions, commit).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import socket
import time
from pathlib import Path
from typing import Any

COUNT_EPILOG = """\
examples:
  posgeom count data/part-*.txt.gz --model bert-base-uncased --n 512 --out c4-counts.npz
  posgeom count shards/*.jsonl --model ./minilm --n 128 --workers 8 --out counts.npz
  posgeom count 's3://bucket/c4/en/c4-train.*.json.gz' --model bert-base-uncased --n 512 \\
      --scheduler tcp://10.0.0.1:8786 --out c4.npz     # any running Dask cluster
  posgeom count --hub allenai/c4 --hub-config en --split train --model bert-base-uncased \\
      --n 512 --scheduler tcp://10.0.0.1:8786 --out c4.npz  # streaming, one task per shard
  posgeom count --hub json --data-files 'shards/*.jsonl' --model ./minilm --n 64 --serial \\
      --out counts.npz                                  # a local dataset, offline

Shards are files (one text per line in *.txt; a JSON object per line in *.jsonl, field --text-field;
a GLUE-style *.tsv with a header row; .gz/.bz2/.xz/.zst inferred from the name), local or any fsspec
URL, or the shards of a Hugging Face dataset in streaming mode (--hub). Each shard is counted by the
same streaming counter as the book's chapters and the counts are summed exactly by a tree reduction:
the result equals a single-process count of all the texts, bit for bit. A failing shard stops the
count with its name; nothing is written. OUT.json records the provenance; OUT can be read back with
posgeom_utils.marginals.PositionalMarginals.load.
"""


def add_count_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``posgeom count`` on the ``posgeom`` sub-parsers. Chapter: *Beyond one machine*."""
    p = sub.add_parser(
        "count",
        help="count tokens per position over a sharded corpus (Dask or one process)",
        description="Count the positional token distributions mu_i of a sharded corpus: each shard "
                    "with the streaming counter, the sparse counts summed by a tree reduction on Dask.",
        epilog=COUNT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("shards", nargs="*", metavar="SHARD",
                   help="shard files, URLs or patterns (quote patterns for remote file systems)")
    p.add_argument("--hub", default=None, metavar="DATASET",
                   help="a Hugging Face dataset id (or builder such as json/text with --data-files), "
                        "opened in streaming mode and counted one task per shard")
    p.add_argument("--hub-config", default=None, metavar="NAME", help="the dataset's configuration")
    p.add_argument("--split", default="train", help="the dataset split with --hub (default train)")
    p.add_argument("--data-files", nargs="+", default=None, metavar="FILE",
                   help="data files for a builder given by --hub (json, text, csv, parquet)")
    p.add_argument("--text-field", default="text", metavar="NAME",
                   help="the text column of jsonl/tsv shards or the dataset (default text)")
    p.add_argument("--model", required=True, metavar="ID_OR_PATH",
                   help="whose tokenizer defines the tokens (hub id or local folder; offline: a local folder "
                        "or sentence-transformers/all-MiniLM-L6-v2, which is packaged)")
    p.add_argument("--n", type=int, required=True, help="number of positions to count")
    p.add_argument("--policy", choices=("keep", "drop"), default="keep",
                   help="keep the special tokens the model sees ([CLS] ... [SEP]) or drop them")
    p.add_argument("--align", choices=("start", "end"), default="start",
                   help="count positions from the first token (start) or from the last (end)")
    p.add_argument("--view", choices=("model", "corpus"), default="model",
                   help="texts longer than n: count what the model sees (model: cut, [SEP] moved to "
                        "position n - 1) or the text's own first n positions (corpus)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, default=2,
                       help="Dask worker processes of a local cluster (default 2; one core each)")
    where.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="the address of a running Dask scheduler, e.g. tcp://10.0.0.1:8786")
    where.add_argument("--serial", action="store_true", help="count the shards in this process, no Dask")
    p.add_argument("--batch-size", type=int, default=2048, help="texts tokenized per batch (default 2048)")
    p.add_argument("--split-every", type=int, default=8,
                   help="partial counts summed per node of the reduction tree (default 8)")
    p.add_argument("--out", required=True, metavar="FILE.npz", help="where to write the counts")
    p.add_argument("--no-cache", action="store_true", help="count again even if the cache has this count")
    p.set_defaults(func=run_count)
    return p


def _provenance(args: argparse.Namespace, result: Any, seconds: float, executor: str) -> dict:
    from .runner import git_state, library_versions

    stats = result.params.get("shard_stats", [])
    tokens = sum(s.get("tokens", 0) for s in stats)
    commit, dirty = git_state()
    versions = library_versions()
    for name in ("dask", "distributed", "fsspec"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "command": "posgeom count",
        "shards": result.params.get("shards", []),
        "shard_stats": stats,
        "tokenizer": result.params.get("tokenizer"),
        "tokenizer_sha": result.params.get("tokenizer_sha"),
        "n": result.n, "V": result.V, "special_tokens": args.policy, "align": args.align, "view": args.view,
        "texts": result.num_sequences, "tokens": tokens,
        "executor": executor, "workers": None if executor != "dask" or args.scheduler else args.workers,
        "scheduler": args.scheduler, "seconds": round(seconds, 3),
        "from_cache": bool(result.params.get("from_cache")),
        "tokens_per_second": (round(tokens / seconds, 1)
                              if seconds > 0 and not result.params.get("from_cache") else None),
        "commit": commit, "dirty": dirty, "versions": versions,
        "host": socket.gethostname(), "platform": platform.platform(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def run_count(args: argparse.Namespace) -> int:
    """Run ``posgeom count``; bad usage raises the CLI's ``UsageError``. Chapter: *Beyond one machine*."""
    from ..cache import write_json
    from ..models import load_tokenizer
    from ..scale.counting import ShardError, file_shards, hub_shards, sharded_marginals
    from .cli import UsageError

    if bool(args.shards) == bool(args.hub):
        raise UsageError("pass shard files (SHARD ...) or --hub DATASET, not both and not neither")
    if args.n < 1:
        raise UsageError(f"--n must be a positive integer (the number of positions), got {args.n}")
    if args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    out = Path(args.out).expanduser()
    if out.suffix != ".npz":
        raise UsageError(f"--out {args.out!r} must end in .npz (the counts are a NumPy archive)")
    try:
        if args.hub:
            shards = hub_shards(args.hub, args.hub_config, args.split, args.text_field, args.data_files)
        else:
            shards = file_shards(args.shards, text_field=args.text_field)
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(f"{'--hub' if args.hub else 'SHARD'}: {exc}") from exc
    try:
        tokenizer = load_tokenizer(args.model)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--model {args.model!r}: {exc}") from exc
    executor = "serial" if args.serial else "dask"
    start = time.perf_counter()
    try:
        result = sharded_marginals(
            shards, tokenizer, args.n, special_tokens=args.policy, align=args.align,
            executor=executor, workers=args.workers, scheduler=args.scheduler, view=args.view,
            batch_size=args.batch_size, split_every=args.split_every, cache=not args.no_cache,
        )
    except ShardError as exc:
        raise UsageError(f"SHARD: {exc} (nothing was written)") from exc
    except (ValueError, FileNotFoundError, ConnectionError) as exc:
        raise UsageError(str(exc)) from exc
    seconds = time.perf_counter() - start
    provenance = _provenance(args, result, seconds, executor)
    result.save(out)
    write_json(out.with_suffix(".json"), provenance)
    rate = provenance["tokens_per_second"]
    how = "read from the cache" if rate is None else f"{rate:,.0f} tokens/s, {executor}"
    print(f"counted {provenance['texts']:,} texts ({provenance['tokens']:,} tokens) in {len(shards)} shards, "
          f"{seconds:.1f} s ({how}); n={result.n}, V={result.V}; "
          f"wrote {out} and {out.with_suffix('.json')}", flush=True)
    return 0

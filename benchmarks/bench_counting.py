"""Benchmark the sharded positional counter (``posgeom_utils.scale.counting``) on Dask against the
single-process counter, in one run.

Chapter: *Beyond one machine*. The corpus is IMDB (train + test, 50 000 reviews), written as
``--shards`` text files (one review per line) in a temporary folder; the tokenizer is the packaged
all-MiniLM-L6-v2 WordPiece tokenizer; ``n = 512``. Every configuration counts the same files and gives
the same counts (checked bit for bit against the first):

- **single**: ``sharded_marginals(..., executor="serial")``: the streaming counter over the shards, one
  after the other, in this process (the baseline);
- **dask-1**, **dask-2**: the same shards on a ``LocalCluster`` of 1 and 2 single-threaded worker processes,
  summed by the tree reduction. Cluster start-up and a warm-up count (imports, tokenizer transfer) are
  timed separately and left out of the throughput: they are paid once per cluster, not per token.

The tokenizer's own thread pool is switched off everywhere (``TOKENIZERS_PARALLELISM=false``), so each
configuration uses the cores it says; throughput is corpus tokens per second (tokens the untruncated
tokenizer produces, specials included: what the counter tokenizes). Each timing is the best of
``--repeats`` runs. Targets (issue 14): dask-2 >= 1.6x dask-1, and dask-1 within 10% of single.

Memory: each worker's peak RSS (``ru_maxrss``, its lifetime peak, read on each worker after the count) when a
fresh cluster counts a quarter of the corpus and when it counts all of it: a streaming worker holds one batch of texts and the
sparse counts, so the peak must not grow with the corpus.

Run from the repo root::

    POSGEOM_DATA_DIR=/work/shared/data python benchmarks/bench_counting.py [--repeats 2] [--json out.json]
"""

from __future__ import annotations

import os

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # before any tokenizer is used: one core per process
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ.setdefault("POSGEOM_PROGRESS", "0")

import argparse
import gzip
import json
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from posgeom_utils.models import load_tokenizer  # noqa: E402
from posgeom_utils.scale.counting import file_shards, local_cluster, sharded_marginals  # noqa: E402
from posgeom_utils.settings import DATA_ENV  # noqa: E402


def write_shards(data_dir: Path, folder: Path, shards: int) -> list[str]:
    """IMDB train + test, one review per line, dealt round-robin into ``shards`` files."""
    texts = []
    for split in ("train", "test"):
        with gzip.open(data_dir / "imdb" / f"{split}.jsonl.gz", "rt", encoding="utf-8") as fh:
            texts += [
                " ".join(json.loads(line)["text"].replace("<br />", " ").split()) for line in fh
            ]
    paths = []
    for k in range(shards):
        path = folder / f"imdb-{k:03d}.txt"
        path.write_text("\n".join(texts[k::shards]) + "\n", encoding="utf-8")
        paths.append(str(path))
    return paths


def same(a, b) -> bool:
    return (
        a.counts.shape == b.counts.shape
        and all(
            np.array_equal(getattr(a.counts, f), getattr(b.counts, f))
            for f in ("data", "indices", "indptr")
        )
        and np.array_equal(a.support, b.support)
        and np.array_equal(a.length_hist, b.length_hist)
    )


def tokens_of(result) -> int:
    return int(sum(s["tokens"] for s in result.params["shard_stats"]))


def timed(fn, repeats: int):
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def _peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peaks(client) -> list[float]:
    """Peak RSS (MiB) of each worker process of ``client``'s cluster, sorted."""
    return sorted(client.run(_peak_rss_mib).values())


def tasks_per_worker(stream, shards: int) -> list[int]:
    """Shards counted per worker in the last count of a ``get_task_stream`` record: one
    ``count_for_bag`` task (fused with its partial sum) a shard; a repeated count has the
    same task keys, and its tasks finish after the earlier ones'."""
    counted = [r for r in stream.data if "count_for_bag" in str(r["key"])][-shards:]
    return sorted(Counter(r["worker"] for r in counted).values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=16, help="number of shard files (default 16)")
    parser.add_argument("--n", type=int, default=512, help="positions counted (default 512)")
    parser.add_argument(
        "--repeats", type=int, default=2, help="timings per configuration (best kept)"
    )
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args()
    data_dir = Path(os.environ.get(DATA_ENV, "")).expanduser()
    if not (data_dir / "imdb" / "train.jsonl.gz").is_file():
        parser.error(
            f"set {DATA_ENV} to a folder laid out like shared/data (imdb/train.jsonl.gz missing)"
        )
    from distributed import Client, get_task_stream

    tokenizer = load_tokenizer()
    with tempfile.TemporaryDirectory() as tmp:
        shards = file_shards(write_shards(data_dir, Path(tmp), args.shards))
        options = dict(n=args.n, cache=False)

        t_single, single = timed(
            lambda: sharded_marginals(shards, tokenizer, executor="serial", **options), args.repeats
        )
        tokens = tokens_of(single)
        rows = {"single": {"seconds": t_single, "tokens_per_s": tokens / t_single}}
        memory = {}
        for workers in (1, 2):
            start = time.perf_counter()
            cluster = local_cluster(workers)
            client = Client(cluster)
            startup = time.perf_counter() - start
            start = time.perf_counter()
            sharded_marginals(shards[:1], tokenizer, scheduler=client, **options)  # warm-up
            warmup = time.perf_counter() - start
            with get_task_stream(client) as stream:
                seconds, result = timed(
                    lambda: sharded_marginals(shards, tokenizer, scheduler=client, **options),
                    args.repeats,
                )
            assert same(result, single), "the Dask count differs from the single-process count"
            rows[f"dask-{workers}"] = {
                "seconds": seconds,
                "tokens_per_s": tokens / seconds,
                "startup_s": startup,
                "warmup_s": warmup,
                "tasks_per_worker": tasks_per_worker(stream, len(shards)),
            }
            client.close()
            cluster.close()
        # memory: a fresh 2-worker cluster per corpus size (ru_maxrss is a process-lifetime peak)
        for label, part in (("quarter", shards[: max(1, len(shards) // 4)]), ("all", shards)):
            cluster = local_cluster(2)
            client = Client(cluster)
            result = sharded_marginals(part, tokenizer, scheduler=client, **options)
            memory[label] = {
                "tokens": tokens_of(result),
                "peak_rss_mib_per_worker": peaks(client),
            }
            client.close()
            cluster.close()

    speedup = rows["dask-2"]["tokens_per_s"] / rows["dask-1"]["tokens_per_s"]
    overhead = rows["single"]["tokens_per_s"] / rows["dask-1"]["tokens_per_s"] - 1
    growth = max(memory["all"]["peak_rss_mib_per_worker"]) - max(
        memory["quarter"]["peak_rss_mib_per_worker"]
    )
    print(
        f"corpus: IMDB train+test, {single.num_sequences:,} texts, {tokens:,} tokens, {len(shards)} shards, "
        f"n={args.n}, V={single.V}; best of {args.repeats}"
    )
    print(f"{'configuration':<14}{'seconds':>9}{'tokens/s':>12}{'start-up s':>12}{'warm-up s':>11}")
    for name, row in rows.items():
        print(
            f"{name:<14}{row['seconds']:>9.2f}{row['tokens_per_s']:>12,.0f}"
            f"{row.get('startup_s', float('nan')):>12.2f}{row.get('warmup_s', float('nan')):>11.2f}"
        )
    print(f"dask-2 / dask-1 throughput: {speedup:.2f}x (target >= 1.6)")
    print(f"dask-1 overhead over single: {100 * overhead:+.1f}% (target <= 10%)")
    for label, row in memory.items():
        print(
            f"peak RSS per worker, {label} of the corpus ({row['tokens']:,} tokens): "
            f"{', '.join(f'{m:.0f}' for m in row['peak_rss_mib_per_worker'])} MiB"
        )
    print(
        f"growth of the largest worker peak from a quarter to all of the corpus: {growth:+.1f} MiB"
    )
    if args.json:
        out = {
            "benchmark": "bench_counting.py",
            "date": time.strftime("%Y-%m-%d"),
            "machine": {
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
            },
            "corpus": {
                "name": "imdb train+test",
                "texts": single.num_sequences,
                "tokens": tokens,
                "shards": len(shards),
            },
            "n": args.n,
            "V": single.V,
            "repeats": args.repeats,
            "configurations": rows,
            "speedup_2_over_1": speedup,
            "overhead_1_over_single": overhead,
            "memory": memory,
            "memory_growth_mib": growth,
            "counts_nnz": int(single.counts.nnz),
            "counts_mib": (
                single.counts.data.nbytes
                + single.counts.indices.nbytes
                + single.counts.indptr.nbytes
            )
            / 2**20,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

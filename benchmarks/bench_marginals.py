"""Benchmark ``posgeom_utils.marginals.positional_marginals`` against the bare tokenizer it builds on.

What it measures, in one process on one corpus (the IMDB train split, default tokenizer = the packaged
all-MiniLM-L6-v2 WordPiece tokenizer, ``n = 512``):

- **public**: ``tokenizer(batch, truncation=True, max_length=n)["input_ids"]``, the call a user would
  write, over the same batches of ``batch_size`` texts that ``positional_marginals`` uses;
- **backend**: a copy of ``tokenizer.backend_tokenizer`` (truncation and padding off) running
  ``encode_batch(batch, add_special_tokens=False)`` + ``[e.ids for e in encs]``: the floor the
  marginal code builds on;
- **full**: ``positional_marginals(corpus, tokenizer, n=n, cache=False)``, i.e. tokenizing *and*
  counting tokens per position into the sparse n x V result.

Throughput is reported as *corpus tokens per second*, where corpus tokens = the number of content tokens
the untruncated tokenizer produces for the whole corpus (no special tokens). The same numerator is used
for all three, so a ratio full/bare is simply ``time_bare / time_full``. The number of tokens the
marginals actually count (truncated to n, with [CLS]/[SEP]) is printed too. Each timing is the best of
``--repeats`` runs, interleaved (public, backend, full, public, ...) to reduce drift. The process CPU time
(all threads) is reported next to the wall time: on a shared machine it is the steadier of the two.

Target (the issue): ``full / bare >= 0.9``, i.e. counting costs at most ~10% on top of tokenizing.

Memory: the peak of the marginal computation for 1/4 of the corpus and for all of it, each measured in a
fresh subprocess (``--memory-only``) so peaks do not contaminate each other: the peak-RSS delta over a
baseline taken after imports, tokenizer and corpus loading (the kernel's high-water mark is reset via
``/proc/self/clear_refs`` where possible), and, in a separate subprocess, the ``tracemalloc`` peak (numpy
reports its buffers to tracemalloc). The O(n V) size of dense int64 counts is printed for reference.

Run from the repo root::

    POSGEOM_DATA_DIR=/work/shared/data python benchmarks/bench_marginals.py [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import os

os.environ["POSGEOM_PROGRESS"] = "0"  # before importing posgeom_utils: no progress bars

import argparse
import copy
import json
import platform
import resource
import subprocess
import sys
import time
import tracemalloc
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from posgeom_utils.corpus import Corpus, load_corpus  # noqa: E402
from posgeom_utils.marginals import positional_marginals  # noqa: E402
from posgeom_utils.models import load_tokenizer  # noqa: E402

MiB = 2**20
TARGET_RATIO = 0.9
BATCH_SIZE = 2048  # the default batch_size of positional_marginals


@dataclass
class Timing:
    name: str
    seconds: list[float]  # wall-clock time of each repeat
    cpu_seconds: list[float]  # process CPU time (all threads) of each repeat
    tokens: int  # the numerator of the throughput (corpus tokens)

    @property
    def best(self) -> float:
        return min(self.seconds)

    @property
    def best_cpu(self) -> float:
        return min(self.cpu_seconds)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.best


@dataclass
class MemoryResult:
    fraction: float
    num_texts: int
    rss_peak_delta_mib: float
    tracemalloc_peak_mib: float
    dense_counts_mib: float  # n * V * 8 bytes


# ----------------------------------------------------------------------------- workloads
def batches(texts: Sequence[str], batch_size: int) -> list[list[str]]:
    return [list(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)]


def run_public(tokenizer: Any, chunks: list[list[str]], n: int) -> int:
    """The public call; returns the total number of tokens it produced (specials included, truncated)."""
    total = 0
    for chunk in chunks:
        ids = tokenizer(chunk, truncation=True, max_length=n)["input_ids"]
        total += sum(map(len, ids))
    return total


def make_backend(tokenizer: Any) -> Any:
    """The same backend copy ``positional_marginals`` uses: no truncation, no padding."""
    backend = copy.deepcopy(tokenizer.backend_tokenizer)
    backend.no_truncation()
    backend.no_padding()
    return backend


def run_backend(backend: Any, chunks: list[list[str]]) -> int:
    """Raw ``encode_batch`` + ids extraction; returns the number of (untruncated, content) tokens."""
    total = 0
    for chunk in chunks:
        ids = [e.ids for e in backend.encode_batch(chunk, add_special_tokens=False)]
        total += sum(map(len, ids))
    return total


def run_full(corpus: Corpus, tokenizer: Any, n: int) -> int:
    """The full marginal computation; returns the number of tokens it counted."""
    result = positional_marginals(corpus, tokenizer, n=n, cache=False)
    return int(result.support.sum())


def timed(fn: Callable[[], int]) -> tuple[float, float, int]:
    """Wall time, process CPU time (all threads) and the result of ``fn()``."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


# ----------------------------------------------------------------------------- memory (subprocess side)
def current_rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> bool:
    """Reset the kernel's RSS high-water mark (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def subset(corpus: Corpus, fraction: float) -> Corpus:
    """A seeded random ``fraction`` of the corpus (the corpus itself for fraction >= 1)."""
    if fraction >= 1:
        return corpus
    return corpus.sample(max(1, round(fraction * len(corpus))), seed=0)


def memory_only(fraction: float, mode: str, n: int) -> dict:
    """Run once on ``fraction`` of the corpus and return the peak memory of ``mode`` (rss | tracemalloc)."""
    tokenizer = load_tokenizer()
    corpus = subset(load_corpus("imdb", "train"), fraction)
    if mode == "rss":
        baseline = current_rss_bytes()
        if not reset_peak_rss():
            baseline = peak_rss_bytes()  # fallback: delta over the high-water mark after loading
        run_full(corpus, tokenizer, n)
        peak = peak_rss_bytes() - baseline
    else:
        tracemalloc.start()
        run_full(corpus, tokenizer, n)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return {"fraction": fraction, "num_texts": len(corpus), "mode": mode, "peak_bytes": int(peak)}


# ----------------------------------------------------------------------------- memory (parent side)
def measure_memory_in_subprocess(fraction: float, mode: str, n: int) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--memory-only", "--fraction", str(fraction),
           "--mode", mode, "--n", str(n)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=dict(os.environ))
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure_memory(fractions: Sequence[float], n: int, V: int) -> list[MemoryResult]:
    results = []
    for fraction in fractions:
        rss = measure_memory_in_subprocess(fraction, "rss", n)
        tm = measure_memory_in_subprocess(fraction, "tracemalloc", n)
        results.append(MemoryResult(fraction, rss["num_texts"], rss["peak_bytes"] / MiB,
                                    tm["peak_bytes"] / MiB, n * V * 8 / MiB))
    return results


# ----------------------------------------------------------------------------- timing (parent side)
def measure_throughput(corpus: Corpus, tokenizer: Any, n: int, repeats: int) -> tuple[list[Timing], dict]:
    chunks = batches(corpus.texts, BATCH_SIZE)
    backend = make_backend(tokenizer)
    run_backend(backend, chunks[:1])  # warm-up (thread pool, caches)
    corpus_tokens = run_backend(backend, chunks)
    workloads: dict[str, Callable[[], int]] = {
        "public tokenizer(...)": lambda: run_public(tokenizer, chunks, n),
        "backend encode_batch": lambda: run_backend(backend, chunks),
        "full positional_marginals": lambda: run_full(corpus, tokenizer, n),
    }
    seconds: dict[str, list[float]] = {name: [] for name in workloads}
    cpu: dict[str, list[float]] = {name: [] for name in workloads}
    produced: dict[str, int] = {}
    for r in range(repeats):
        names = list(workloads)
        names = names[r % len(names):] + names[: r % len(names)]  # rotate the order each repeat
        for name in names:
            dt, dc, out = timed(workloads[name])
            seconds[name].append(dt)
            cpu[name].append(dc)
            produced[name] = out
    timings = [Timing(name, seconds[name], cpu[name], corpus_tokens) for name in workloads]
    counts = {"corpus_tokens": corpus_tokens,
              "public_tokens_truncated_with_specials": produced["public tokenizer(...)"],
              "marginal_counted_tokens": produced["full positional_marginals"]}
    return timings, counts


# ----------------------------------------------------------------------------- reporting
def machine_info() -> dict:
    import scipy
    import tokenizers
    import transformers

    return {"python": platform.python_version(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(),
            "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "numpy": np.__version__, "scipy": scipy.__version__, "tokenizers": tokenizers.__version__,
            "transformers": transformers.__version__,
            "TOKENIZERS_PARALLELISM": os.environ.get("TOKENIZERS_PARALLELISM", "(unset)"),
            "RAYON_NUM_THREADS": os.environ.get("RAYON_NUM_THREADS", "(unset)")}


def format_report(info: dict, setup: dict, timings: list[Timing], counts: dict,
                  ratios: dict, cpu_ratios: dict, memory: list[MemoryResult]) -> str:
    lines = [f"machine: {info['cpu_count']} CPUs ({info['cpu_affinity']} usable), python {info['python']}, "
             f"numpy {info['numpy']}, tokenizers {info['tokenizers']}, transformers {info['transformers']}",
             f"corpus: {setup['corpus']} ({setup['num_texts']} texts), tokenizer: {setup['tokenizer']}, "
             f"n={setup['n']}, V={setup['V']}, batch_size={BATCH_SIZE}, best of {setup['repeats']}",
             f"tokens: corpus (untruncated content) = {counts['corpus_tokens']:,}; counted by marginals = "
             f"{counts['marginal_counted_tokens']:,}; produced by public call = "
             f"{counts['public_tokens_truncated_with_specials']:,}",
             "throughput = corpus tokens / best time (same numerator for every row)", "",
             f"{'workload':<28}{'best s':>8}{'Mtok/s':>8}{'best CPU s':>12}   all wall runs (s)"]
    for t in timings:
        runs = " ".join(f"{s:.2f}" for s in t.seconds)
        lines.append(f"{t.name:<28}{t.best:>8.2f}{t.tokens_per_s / 1e6:>8.3f}{t.best_cpu:>12.2f}   {runs}")
    lines.append("")
    for name, ratio in ratios.items():
        verdict = "meets" if ratio >= TARGET_RATIO else "MISSES"
        lines.append(f"ratio full / {name:<22} = {ratio:.3f}  ({verdict} target >= {TARGET_RATIO}; "
                     f"CPU-time ratio {cpu_ratios[name]:.3f})")
    if memory:
        lines += ["", f"{'memory (fresh subprocess)':<28}{'texts':>8}{'peak RSS d MiB':>16}"
                      f"{'tracemalloc MiB':>17}{'dense n*V*8 MiB':>17}"]
        for m in memory:
            lines.append(f"{f'fraction {m.fraction:g}':<28}{m.num_texts:>8}{m.rss_peak_delta_mib:>16.1f}"
                         f"{m.tracemalloc_peak_mib:>17.1f}{m.dense_counts_mib:>17.1f}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Throughput of positional_marginals vs. the bare tokenizer (target ratio >= 0.9) and "
                    "its peak memory, on the IMDB train split (needs POSGEOM_DATA_DIR).")
    p.add_argument("--repeats", type=int, default=3, help="timing repeats; the best is kept (default 3)")
    p.add_argument("--n", type=int, default=512, help="number of positions (default 512)")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the numbers as JSON")
    p.add_argument("--skip-memory", action="store_true", help="skip the memory subprocesses")
    p.add_argument("--memory-fractions", type=float, nargs="+", default=[0.25, 1.0],
                   help="corpus fractions for the memory runs (default 0.25 1.0)")
    p.add_argument("--memory-only", action="store_true",
                   help="internal: measure the peak memory of one run and print it as JSON")
    p.add_argument("--fraction", type=float, default=1.0, help="internal (--memory-only): corpus fraction")
    p.add_argument("--mode", choices=("rss", "tracemalloc"), default="rss",
                   help="internal (--memory-only): what to measure")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.memory_only:
        print(json.dumps(memory_only(args.fraction, args.mode, args.n)))
        return 0
    tokenizer = load_tokenizer()
    corpus = load_corpus("imdb", "train")
    V = len(tokenizer)
    # memory first: the subprocesses start before this process has used the tokenizer's thread pool
    memory = [] if args.skip_memory else measure_memory(args.memory_fractions, args.n, V)
    timings, counts = measure_throughput(corpus, tokenizer, args.n, args.repeats)
    by_name = {t.name: t for t in timings}
    full = by_name["full positional_marginals"]
    baselines = ("public tokenizer(...)", "backend encode_batch")
    ratios = {name: by_name[name].best / full.best for name in baselines}  # = throughput full / bare
    cpu_ratios = {name: by_name[name].best_cpu / full.best_cpu for name in baselines}
    info = machine_info()
    setup = {"corpus": f"imdb/train ({corpus.source})", "num_texts": len(corpus),
             "tokenizer": getattr(tokenizer, "name_or_path", type(tokenizer).__name__), "n": args.n, "V": V,
             "batch_size": BATCH_SIZE, "repeats": args.repeats}
    print(format_report(info, setup, timings, counts, ratios, cpu_ratios, memory))
    if args.json is not None:
        payload = {"machine": info, "setup": setup, "token_counts": counts,
                   "throughput_numerator": "corpus_tokens",
                   "timings": [{**asdict(t), "best": t.best, "best_cpu": t.best_cpu, "tokens_per_s": t.tokens_per_s}
                               for t in timings],
                   "ratios_full_over": ratios, "cpu_time_ratios_full_over": cpu_ratios,
                   "target_ratio": TARGET_RATIO,
                   "meets_target": {k: v >= TARGET_RATIO for k, v in ratios.items()},
                   "memory": [asdict(m) for m in memory]}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

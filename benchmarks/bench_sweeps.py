"""Benchmark ``posgeom_utils.scale.sweeps.run_sweep``: a chapter's sweep serially and on Dask workers.

The sweep is the training sweep of *Why a Transformer needs positions* at the book's default scale
(``notebooks/necessity.md``): the small Transformer (d = 32, 4 heads, 2 layers) with each positional
mechanism (none, learned, sinusoidal, rope, alibi) x 3 seeds, 200 training steps each with
``TrainConfig(threads=1)``, on its two tasks: the planted "a before b" task (L = 16, V = 64, 4000
sequences) and the SST-2 order task (32 tokens, 8000 sentences; read from ``$POSGEOM_DATA_DIR``): 30 runs.
``--synthetic-only`` keeps the 15 runs of the planted task (no data needed). The run function is defined
in this script, i.e. in ``__main__``, as in a notebook: Dask ships it, with the tasks it reads, by value.

What it measures (wall-clock, ``time.perf_counter``):

- **serial**: ``run_sweep(..., executor="serial")`` in this process (one core busy, as in the chapters);
- **cluster start-up**: the cluster ``run_sweep`` starts for itself (``start_local_cluster``: a
  ``distributed.LocalCluster`` of ``--workers`` single-threaded worker processes, one BLAS/OpenMP thread
  each, without distributed's ``MALLOC_TRIM_THRESHOLD_``) and a client, until every worker is connected;
- **dask sweep**: ``run_sweep(..., executor="dask", scheduler=<that cluster>)``: shipping the function and
  its data, the workers' first imports of torch, and the runs;
- the speed-up ``serial / dask sweep`` and ``serial / (start-up + dask sweep)`` (what
  ``executor="dask"`` without a scheduler costs end to end, since it starts its own cluster).

With ``--repeats N`` the serial sweep, the start-up and the Dask sweep run N times in turn (interleaved,
so drift in the machine's load hits both alike); best and median are reported, and the speed-ups from
the best times. The results of both executors are compared (they must be identical, float for float). The
CPU pressure (``/proc/pressure/cpu``) is printed before and after: the development machine (2 cores) is
shared.

Run from the repo root (CPU-heavy: about 1.5 minutes per repeat on 2 cores)::

    python benchmarks/bench_sweeps.py [--workers 2] [--steps 200] [--seeds 3] [--repeats 1]
        [--synthetic-only] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from posgeom_utils.scale.sweeps import run_sweep, start_local_cluster
from posgeom_utils.tasks import planted_task
from posgeom_utils.training import TrainConfig, train_classifier
from posgeom_utils.transformer import PositionalTransformer

POSITIONALS = ("none", "learned", "sinusoidal", "rope", "alibi")
#: the chapter's tasks, built in main() (not at import: Dask's worker processes import this script too)
TASKS: dict = {}


def build_tasks(synthetic_only: bool) -> dict:
    """The necessity chapter's tasks at its default parameters (seed 0)."""
    tasks = {"precedes": planted_task("precedes", L=16, V=64, num_sequences=4000, seed=0)}
    if not synthetic_only:
        from posgeom_utils import load_corpus, load_tokenizer
        from posgeom_utils.tasks import order_task

        tasks["shuffled"] = order_task(
            load_corpus("sst2", "train"), load_tokenizer(), max_len=32, size=8000, seed=0
        )
    return tasks


def train_run(run: dict) -> dict:
    """One run of the necessity chapter's sweep (its ``train_order_run``)."""
    task = TASKS[run["task"]]
    torch.manual_seed(run["seed"])
    net = PositionalTransformer(
        task.vocab_size,
        d=run["d"],
        n_heads=4,
        n_layers=2,
        max_len=task.max_len,
        positional=run["positional"],
    )
    config = TrainConfig(
        steps=run["steps"], eval_every=run["steps"], seed=run["seed"], device="cpu", threads=1
    )
    history = train_classifier(net, task.X_train, task.y_train, task.X_eval, task.y_eval, config)
    weights = torch.cat([p.detach().flatten() for p in net.parameters()]).double().sum()
    return {
        "accuracy": history.final_accuracy(),
        "eval_loss": history.eval_loss[-1],
        "weight_sum": float(weights),
    }


def cpu_pressure() -> str:
    try:
        return Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return "unavailable"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="Dask worker processes (default 2)")
    parser.add_argument(
        "--steps", type=int, default=200, help="training steps per run (default 200)"
    )
    parser.add_argument("--seeds", type=int, default=3, help="seeds per mechanism (default 3)")
    parser.add_argument(
        "--synthetic-only",
        action="store_true",
        help="only the planted task's 15 runs (no corpus needed)",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="rounds of both executors (default 1)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the timings as JSON")
    args = parser.parse_args(argv)

    from distributed import Client

    TASKS.update(build_tasks(args.synthetic_only))
    configs = [
        {
            "name": f"{t}-{p}-seed{s}",
            "task": t,
            "positional": p,
            "seed": s,
            "d": 32,
            "steps": args.steps,
        }
        for t in TASKS
        for p in POSITIONALS
        for s in range(args.seeds)
    ]
    print(
        f"sweep: {len(configs)} runs ({len(TASKS)} task(s) x {len(POSITIONALS)} mechanisms x "
        f"{args.seeds} seeds), {args.steps} steps each; {args.workers} Dask workers"
    )
    print(f"cpu pressure before: {cpu_pressure()}")

    times: dict[str, list[float]] = {"serial": [], "startup": [], "dask": []}
    identical = True
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        serial = run_sweep(train_run, configs, executor="serial", desc="serial")
        times["serial"].append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        cluster = start_local_cluster(args.workers)
        client = Client(cluster)
        client.wait_for_workers(args.workers)
        times["startup"].append(time.perf_counter() - t0)
        try:
            t0 = time.perf_counter()
            distributed = run_sweep(
                train_run,
                configs,
                executor="dask",
                scheduler=cluster.scheduler_address,
                desc="dask",
            )
            times["dask"].append(time.perf_counter() - t0)
        finally:
            client.close()
            cluster.close()
        identical = identical and json.dumps(serial) == json.dumps(distributed)

    best = {k: min(v) for k, v in times.items()}
    median = {k: statistics.median(v) for k, v in times.items()}
    timings = {
        "runs": len(configs),
        "steps": args.steps,
        "workers": args.workers,
        "repeats": args.repeats,
        "best_s": {k: round(v, 2) for k, v in best.items()},
        "median_s": {k: round(v, 2) for k, v in median.items()},
        "speedup_sweep": round(best["serial"] / best["dask"], 2),
        "speedup_with_startup": round(best["serial"] / (best["startup"] + best["dask"]), 2),
        "identical": identical,
        "date": time.strftime("%Y-%m-%d"),
        "cpus": os.cpu_count(),
        "benchmark": "bench_sweeps.py",
    }
    for key, label in (
        ("serial", "serial sweep"),
        ("startup", "cluster start-up"),
        ("dask", "dask sweep"),
    ):
        print(f"{label + ':':18s} best {best[key]:6.2f} s, median {median[key]:6.2f} s")
    print(f"serial per run: {best['serial'] / len(configs):.2f} s")
    print(f"speed-up (sweep only, best):          {timings['speedup_sweep']:.2f}x")
    print(f"speed-up (including start-up, best):  {timings['speedup_with_startup']:.2f}x")
    print(f"results identical: {identical}")
    print(f"cpu pressure after: {cpu_pressure()}")
    if args.json:
        args.json.write_text(json.dumps(timings, indent=1) + "\n")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())

"""Sweeps of independent training runs, serially or on Dask, resumable (one JSON file
per finished run, keyed by a hash of its configuration); the Dask clusters of this
subpackage. Chapter: *Beyond one machine*."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from ..cache import atomic_write, read_json
from ..checks import choice, fail, integer
from ..settings import progress

#: the executors :func:`run_sweep` knows
EXECUTORS = ("serial", "dask")
#: where :func:`run_sweep` reads the executor, workers and scheduler it is not given
ENVIRONMENT = {k: f"POSGEOM_{k.upper()}" for k in ("executor", "workers", "scheduler")}
#: environment of every worker started here: one thread per worker process
THREAD_ENV = {f"{k}_NUM_THREADS": "1" for k in ("OMP", "MKL", "OPENBLAS", "RAYON")}
THREAD_ENV["TOKENIZERS_PARALLELISM"] = "false"
#: how long to wait for a remote scheduler
CONNECT_TIMEOUT = "30s"
#: what a run name may contain (it names the run's result file)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=+-]*")
_FORMAT = 1  # of a finished run's file


class SweepError(RuntimeError):
    """A run (``name``) of a sweep raised. Chapter: *Beyond one machine*."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


def config_hash(config: dict[str, Any]) -> str:
    """A stable hex digest of a run's configuration (keys sorted; NumPy arrays by
    content). Chapter: *Beyond one machine*."""
    blob = json.dumps(config, sort_keys=True, allow_nan=True, default=_hashable)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _hashable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        digest = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
        return {"ndarray": digest, "shape": [*value.shape], "dtype": str(value.dtype)}
    raise TypeError(
        f"a {type(value).__name__} in a configuration cannot be hashed: keep it in a "
        "global the run reads"
    )


def worker_environments(workers: int | None = None) -> list[dict]:
    """Each worker's :data:`THREAD_ENV`; with ``k >= 1`` GPUs worker ``i`` sees GPU
    ``i mod k`` only. By default one worker per GPU, else per core. Chapter: *Beyond
    one machine*."""
    import torch

    fix = "pass e.g. workers=2, or None for one per core"
    workers = integer(workers, "workers", fix=fix, optional=True)
    gpus = torch.cuda.device_count()
    if gpus == 0:
        from dask.system import CPU_COUNT

        return [dict(THREAD_ENV) for _ in range(workers or CPU_COUNT)]
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    ids = ([v for v in visible if v] or [str(i) for i in range(gpus)])[:gpus]
    return [
        {**THREAD_ENV, "CUDA_VISIBLE_DEVICES": ids[i % len(ids)]}
        for i in range(workers or len(ids))
    ]


def start_local_cluster(workers: int | None = None, runs: int | None = None) -> Any:
    """A cluster of single-threaded workers, one per :func:`worker_environments` entry
    (at most ``runs``), without ``MALLOC_TRIM_THRESHOLD_`` (1.4x slower training).
    Chapter: *Beyond one machine*."""
    import dask
    from distributed import Nanny, Scheduler, SpecCluster

    envs = worker_environments(workers)[: None if runs is None else max(1, runs)]
    key = "distributed.nanny.pre-spawn-environ"
    environ = {**(dask.config.get(key, {}) or {}), **THREAD_ENV}
    environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    options = {"nthreads": 1, "silence_logs": logging.WARNING}
    specs = {
        f"worker-{k}": {"cls": Nanny, "options": {**options, "env": env}}
        for k, env in enumerate(envs)
    }
    options = {"host": "127.0.0.1", "dashboard": False, "dashboard_address": ":0"}
    # the nannies write their environment into os.environ (an earlier cluster's too)
    with dask.config.set({key: environ}), mock.patch.dict(os.environ):
        os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)
        scheduler = {"cls": Scheduler, "options": options}
        return SpecCluster(specs, scheduler, silence_logs=logging.WARNING)


@contextlib.contextmanager
def dask_client(
    scheduler: Any = None, workers: int | None = None, runs: int | None = None
) -> Any:
    """A ``distributed.Client`` of ``scheduler`` (a client or an address), else of a new
    :func:`start_local_cluster`, closed on exit. Chapter: *Beyond one machine*."""
    from distributed import Client

    if isinstance(scheduler, Client):
        yield scheduler
    elif scheduler is None:
        with start_local_cluster(workers, runs) as cluster, Client(cluster) as client:
            yield client
    elif not (isinstance(scheduler, str) and scheduler.strip()):
        expected = "None, a Client or an address such as 'tcp://127.0.0.1:8786'"
        raise fail("scheduler", expected, scheduler)
    else:
        try:
            client = Client(scheduler, timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            problem = f"cannot reach the Dask scheduler at scheduler={scheduler!r}"
            fix = "start one, or pass scheduler=None"
            raise ConnectionError(f"{problem} ({exc}): {fix}") from exc
        with client:
            yield client


def sweep_options(
    executor: str | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
) -> tuple[str, int | None, str | None]:
    """The executor, workers and scheduler of a sweep, each given or else read from
    :data:`ENVIRONMENT`, checked. Chapter: *Beyond one machine*."""
    given = {"executor": executor, "workers": workers, "scheduler": scheduler}
    names = {k: k if v is not None else ENVIRONMENT[k] for k, v in given.items()}
    env = {k: os.environ.get(name) or None for k, name in ENVIRONMENT.items()}
    values = {k: env[k] if v is None else v for k, v in given.items()}
    executor = choice(values["executor"] or "serial", names["executor"], EXECUTORS)
    workers, scheduler = values["workers"], values["scheduler"]
    if names["workers"] != "workers" and workers and workers.strip().isdigit():
        workers = int(workers)  # from the environment
    fix = f"pass e.g. {names['workers']}=2"
    workers = integer(workers, names["workers"], fix=fix, optional=True)
    if scheduler is not None and executor != "dask":
        fix = "pass executor='dask' (or set POSGEOM_EXECUTOR=dask), or no scheduler"
        raise fail(names["scheduler"], "used only by executor='dask'", scheduler, fix)
    return executor, workers, scheduler


def _check_names(configs: Sequence[dict[str, Any]]) -> None:
    for k, config in enumerate(configs):
        name = config.get("name") if isinstance(config, dict) else None
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            expected = "a run name (letters, digits and . _ = + -) in a dict per run"
            fix = "the name names a file: e.g. 'precedes-rope-seed0'"
            raise fail(f"configs[{k}]['name']", expected, name, fix)
    names = [c["name"] for c in configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        fix = "give every run its own name"
        raise ValueError(f"configs have duplicate names {duplicates}: {fix}")


def _plain_result(name: str, result: Any) -> dict[str, Any]:
    try:
        plain = json.loads(json.dumps(result, allow_nan=True))
    except (TypeError, ValueError) as exc:
        plain = exc
    if not isinstance(plain, dict):
        raise TypeError(
            f"run {name!r}: the run function must return a JSON-serialisable dict of "
            "plain numbers, strings, lists and dicts (e.g. float(x) for a NumPy or "
            f"torch scalar, x.tolist()), not {result!r:.80}"
        )
    return plain


def _load(path: Path, digest: str) -> dict[str, Any] | None:
    """The result stored in ``path`` if it belongs to the configuration ``digest``."""
    stored = read_json(path) or {}
    ok = stored.get("format") == _FORMAT and stored.get("config_hash") == digest
    return stored["result"] if ok and isinstance(stored.get("result"), dict) else None


def _save(path: Path, digest: str, result: dict[str, Any]) -> None:
    # not key-sorted: the result keeps its key order (a chapter's table columns)
    stored = {"format": _FORMAT, "name": path.stem, "config_hash": digest}
    text = json.dumps({**stored, "result": result}, indent=1, allow_nan=True)
    atomic_write(path, lambda tmp: tmp.write_text(text))


def _call(fn: Callable[[dict], Any], config: dict) -> Any:
    """``fn`` of a copy of ``config``, or the exception it raised, with one torch and
    one BLAS/OpenMP thread: reductions round alike on every executor."""
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            return fn(copy.deepcopy(config))
    except Exception as exc:  # noqa: BLE001 - run_sweep reports it, naming the run
        return exc
    finally:
        torch.set_num_threads(before)


def run_sweep(
    fn: Callable[[dict[str, Any]], dict[str, Any]],
    configs: Sequence[dict[str, Any]],
    *,
    executor: str | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
    directory: str | os.PathLike | None = None,
    desc: str = "sweep",
) -> list[dict[str, Any]]:
    """``[fn(config) for config in configs]`` (each config a dict with a unique
    ``"name"``, each result a JSON-serialisable dict), serially or on Dask
    (:func:`sweep_options`). With ``directory`` finished runs are stored and reused
    while their configuration is unchanged. Chapter: *Beyond one machine*."""
    executor, workers, scheduler = sweep_options(executor, workers, scheduler)
    _check_names(configs)
    digests = [config_hash(config) for config in configs]
    folder = None if directory is None else Path(directory)
    paths = [None if folder is None else folder / f"{c['name']}.json" for c in configs]
    results = [None if p is None else _load(p, d) for p, d in zip(paths, digests)]
    pending = [k for k, result in enumerate(results) if result is None]
    bar = progress(total=len(configs), initial=len(configs) - len(pending), desc=desc)
    with bar, _outcomes(fn, configs, pending, executor, workers, scheduler) as outcomes:
        for k, outcome in outcomes:  # as the runs finish
            name = configs[k]["name"]
            if isinstance(outcome, BaseException):
                why = f"{type(outcome).__name__}: {outcome}"
                kept = f"; finished runs are kept in {folder}: rerun to resume"
                message = f"run {name!r} (configs[{k}]) of sweep {desc!r} failed: {why}"
                raise SweepError(name, message + (kept if folder else "")) from outcome
            results[k] = _plain_result(name, outcome)
            if folder is not None:
                _save(paths[k], digests[k], results[k])
            bar.update()
    return results  # type: ignore[return-value] - every entry is filled now


@contextlib.contextmanager
def _outcomes(fn, configs, pending, executor, workers, scheduler) -> Iterator:
    """``(k, result or exception)`` of the pending runs as they finish."""
    if executor == "serial" or not pending:
        yield ((k, _call(fn, configs[k])) for k in pending)
        return
    from distributed import as_completed

    with dask_client(scheduler, workers, len(pending)) as client:
        fn = client.scatter(fn, broadcast=True, hash=False)  # to each worker once
        futures = {}
        for i, k in enumerate(pending):  # the runs start in their order
            futures[client.submit(_call, fn, configs[k], priority=-i, pure=False)] = k
        try:
            yield (
                (futures[f], f.exception() if f.status == "error" else f.result())
                for f in as_completed(futures)
            )
        finally:
            client.cancel(list(futures))
            futures.clear()  # release the results before the workers go

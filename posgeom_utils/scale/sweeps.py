"""Many independent training runs, serially or on a Dask cluster, resumable; the Dask
clusters of this subpackage.

Chapter: *Beyond one machine*. :func:`run_sweep` calls a run function for every
configuration (a dict with a unique ``"name"``), here or on Dask workers, and returns
the results in the order of the configurations. They are identical whichever executor
ran them: every run seeds itself from its configuration, runs on one thread
(:func:`single_threaded`) and its result goes through the same JSON round trip. With
``directory`` each finished run is stored as ``<directory>/<name>.json`` with a hash
of its configuration, so an interrupted sweep resumes and a changed configuration
reruns."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..cache import atomic_write
from ..checks import choice, fail, integer
from ..settings import progress

#: the executors :func:`run_sweep` knows
EXECUTORS = ("serial", "dask")
#: where :func:`run_sweep` reads the executor, workers and scheduler it is not given
ENVIRONMENT = {
    name: f"POSGEOM_{name.upper()}" for name in ("executor", "workers", "scheduler")
}
#: environment of every worker started here: one thread per worker process
THREAD_ENV = dict.fromkeys(
    ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"], "1"
)
THREAD_ENV.update(RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
#: how long to wait for a remote scheduler
CONNECT_TIMEOUT = "30s"
#: what a run name may contain (it names the run's result file)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=+-]*")
_FORMAT = 1  # of a finished run's file


class SweepError(RuntimeError):
    """A run of a sweep raised; ``name`` is the run. The runs that finished before it
    are kept in the sweep's ``directory``, so a rerun resumes after them.
    Chapter: *Beyond one machine*."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


def config_hash(config: dict[str, Any]) -> str:
    """A stable hex digest of a run's configuration (keys sorted; NumPy arrays by
    content). Chapter: *Beyond one machine*."""
    blob = json.dumps(config, sort_keys=True, allow_nan=True, default=_hashable)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _hashable(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        digest = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
        return {
            "ndarray": digest,
            "shape": list(value.shape),
            "dtype": str(value.dtype),
        }
    kind = type(value).__name__
    raise TypeError(
        f"a {kind} in a configuration cannot be hashed: keep it in a global the run "
        "reads"
    )


# ------------------------------------------------------------------------------ Dask clusters


def worker_environments(
    workers: int | None = None, gpus: int | None = None
) -> list[dict]:
    """The environment of each worker of :func:`start_local_cluster` (one entry per
    worker).

    With ``gpus`` (default: those torch sees) ``k >= 1``, worker ``i`` sees only GPU ``i
    mod k`` (of an inherited ``CUDA_VISIBLE_DEVICES`` list, if any) and ``workers=None``
    means one per GPU; without, one per CPU core. Every worker gets :data:`THREAD_ENV`.
    Chapter: *Beyond one machine*."""
    if workers is not None:
        workers = integer(
            workers, "workers", fix="pass e.g. workers=2, or None for one per core"
        )
    if gpus is None:
        import torch

        gpus = torch.cuda.device_count()
    if gpus == 0:
        return [dict(THREAD_ENV) for _ in range(workers or _cpu_count())]
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    ids = ([v for v in visible if v] or [str(i) for i in range(gpus)])[:gpus]
    return [
        {**THREAD_ENV, "CUDA_VISIBLE_DEVICES": ids[i % len(ids)]}
        for i in range(workers or len(ids))
    ]


def _cpu_count() -> int:
    return (
        len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else os.cpu_count() or 1
    )


def start_local_cluster(workers: int | None = None, runs: int | None = None) -> Any:
    """A cluster of single-threaded worker processes, one per
    :func:`worker_environments` entry (at most ``runs``), no dashboard; close it when
    done. The workers start without ``distributed``'s ``MALLOC_TRIM_THRESHOLD_``, which
    makes small-model training 1.4x slower. Chapter: *Beyond one machine*."""
    import dask
    from distributed import Nanny, Scheduler, SpecCluster

    envs = worker_environments(workers)
    envs = envs if runs is None else envs[: max(1, runs)]
    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
    environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    # an earlier cluster may have left distributed's value in os.environ: hide it while they start
    inherited = os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    worker = {"nthreads": 1, "silence_logs": logging.WARN}
    specs = {
        f"worker-{k}": {"cls": Nanny, "options": {**worker, "env": e}}
        for k, e in enumerate(envs)
    }
    options = {"host": "127.0.0.1", "dashboard": False, "dashboard_address": ":0"}
    scheduler = {"cls": Scheduler, "options": options}
    try:
        with dask.config.set(
            {"distributed.nanny.pre-spawn-environ": {**environ, **THREAD_ENV}}
        ):
            return SpecCluster(
                workers=specs, scheduler=scheduler, silence_logs=logging.WARN
            )
    finally:
        if inherited is not None:
            os.environ["MALLOC_TRIM_THRESHOLD_"] = inherited


@contextlib.contextmanager
def dask_client(
    scheduler: Any = None, workers: int | None = None, runs: int | None = None
) -> Any:
    """A ``distributed.Client`` of ``scheduler`` (a client, or an address such as
    ``tcp://10.0.0.1:8786``), else of a new :func:`start_local_cluster`; what is opened
    here is closed on exit. Chapter: *Beyond one machine*."""
    from distributed import Client

    if isinstance(scheduler, Client):
        yield scheduler
    elif isinstance(scheduler, str):
        try:
            client = Client(scheduler, timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            message = (
                f"cannot reach the Dask scheduler at scheduler={scheduler!r} ({exc})"
            )
            raise ConnectionError(
                message + ": start one, or pass scheduler=None"
            ) from exc
        with client:
            yield client
    elif scheduler is None:
        with start_local_cluster(workers, runs) as cluster, Client(cluster) as client:
            try:
                yield client
            # a heartbeat racing the shutdown logs errors that mean nothing now
            finally:
                with contextlib.suppress(Exception):
                    client.run(_quiet)
                _quiet()
    else:
        kind = type(scheduler).__name__
        raise TypeError(
            f"scheduler must be None, a distributed.Client or an address, got {kind}"
        )


def _quiet() -> None:
    for name in (
        "distributed",
        "distributed.worker",
        "distributed.nanny",
        "distributed.core",
    ):
        logging.getLogger(name).setLevel(logging.CRITICAL)


# ------------------------------------------------------------------------------ sweeps


def sweep_options(
    executor: str | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
) -> tuple[str, int | None, str | None]:
    """The executor, workers and scheduler of a sweep: each one given, else its
    environment variable (:data:`ENVIRONMENT`: ``POSGEOM_EXECUTOR`` serial or dask,
    default serial; ``POSGEOM_WORKERS`` an integer; ``POSGEOM_SCHEDULER`` an address),
    checked. Chapter: *Beyond one machine*."""
    given = {"executor": executor, "workers": workers, "scheduler": scheduler}
    names = {k: k if v is not None else ENVIRONMENT[k] for k, v in given.items()}
    values = {
        k: v if v is not None else os.environ.get(names[k]) or None
        for k, v in given.items()
    }
    executor = choice(values["executor"] or "serial", names["executor"], EXECUTORS)
    workers, scheduler = values["workers"], values["scheduler"]
    if (
        names["workers"] != "workers"
        and workers is not None
        and workers.strip().isdigit()
    ):
        workers = int(workers)  # from the environment
    if workers is not None:
        workers = integer(
            workers, names["workers"], fix=f"pass e.g. {names['workers']}=2"
        )
    address = "a Dask scheduler address such as 'tcp://127.0.0.1:8786'"
    if scheduler is not None and (
        not isinstance(scheduler, str) or not scheduler.strip()
    ):
        raise fail(names["scheduler"], address, scheduler)
    if scheduler is not None and executor != "dask":
        fix = "pass executor='dask' (or set POSGEOM_EXECUTOR=dask), or no scheduler"
        raise fail(names["scheduler"], "used only by executor='dask'", scheduler, fix)
    return executor, workers, scheduler


def _checked_configs(configs: Any) -> list[dict[str, Any]]:
    if isinstance(configs, (str, bytes, dict)) or not isinstance(configs, Sequence):
        raise TypeError(
            f"configs must be a list of dicts, one per run, got {type(configs)}"
        )
    for k, config in enumerate(configs):
        if not isinstance(config, dict):
            raise TypeError(
                f"configs[{k}] must be a dict with a 'name', got {type(config)}"
            )
        if not isinstance(config.get("name"), str) or not _NAME.fullmatch(
            config["name"]
        ):
            name, fix = (
                f"configs[{k}]['name']",
                "it names a file: e.g. 'precedes-rope-seed0'",
            )
            raise fail(
                name,
                "letters, digits and . _ = + - (not first)",
                config.get("name"),
                fix,
            )
    names = [c["name"] for c in configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(
            f"configs have duplicate names {duplicates}: give every run its own name"
        )
    return list(configs)


def _digest(config: dict[str, Any]) -> str:
    try:
        return config_hash(config)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"run {config['name']!r}: {exc}") from exc


def _plain_result(name: str, result: Any) -> dict[str, Any]:
    """``result`` after the JSON round trip every result goes through."""
    if not isinstance(result, dict):
        raise TypeError(
            f"run {name!r}: the run function must return a dict, not {type(result)}"
        )
    try:
        return json.loads(json.dumps(result, allow_nan=True))
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"run {name!r}: its result is not JSON-serialisable ({exc}): return plain "
            "numbers, "
            "strings, lists and dicts (e.g. float(x) for a NumPy or torch scalar, "
            "x.tolist())"
        ) from exc


def _load(path: Path, digest: str) -> dict[str, Any] | None:
    """The result stored in ``path`` if it belongs to the configuration ``digest``."""
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(stored, dict) and isinstance(stored.get("result"), dict)
    ok = ok and stored.get("format") == _FORMAT and stored.get("config_hash") == digest
    return stored["result"] if ok else None


def _save(path: Path, digest: str, result: dict[str, Any]) -> None:
    # not key-sorted: the result keeps its key order (a chapter's table columns)
    stored = {
        "format": _FORMAT,
        "name": path.stem,
        "config_hash": digest,
        "result": result,
    }
    text = json.dumps(stored, indent=1, allow_nan=True)
    atomic_write(path, lambda tmp: tmp.write_text(text))


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """One torch thread and one BLAS/OpenMP thread inside the block (restored after):
    every run of :func:`run_sweep` executes inside it, so that reductions round alike on
    every executor. Chapter: *Beyond one machine*."""
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            yield
    finally:
        torch.set_num_threads(before)


def _call(fn: Callable[[dict], Any], config: dict) -> Any:
    with single_threaded():
        return fn(config)


def _attempt(fn: Callable[[dict], Any], config: dict) -> Any:
    try:
        return _call(fn, copy.deepcopy(config))
    except Exception as exc:  # the sweep names the run and re-raises
        return exc


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
    """``[fn(config) for config in configs]``, serially or on Dask, resumable.

    ``fn`` trains one run from its configuration (a dict with a unique ``"name"``) and
    returns a JSON-serialisable dict; it may live in a notebook. ``executor``
    (``"serial"``: here, in order; ``"dask"``: on a local cluster of ``workers``
    processes, or on the cluster at ``scheduler``), ``workers`` and ``scheduler``
    default to the environment (:func:`sweep_options`). With ``directory`` finished runs
    are stored and reused while their configuration is unchanged; a run that raises
    stops the sweep with a :class:`SweepError`. Chapter: *Beyond one machine*."""
    executor, workers, scheduler = sweep_options(executor, workers, scheduler)
    if not callable(fn):
        raise TypeError(
            f"fn must be a function of one configuration dict, got {type(fn).__name__}"
        )
    configs = _checked_configs(configs)
    digests = [_digest(config) for config in configs]
    folder = None if directory is None else Path(directory)
    paths = [None if folder is None else folder / f"{c['name']}.json" for c in configs]
    results = [None if p is None else _load(p, d) for p, d in zip(paths, digests)]
    pending = [k for k, result in enumerate(results) if result is None]
    bar = progress(total=len(configs), initial=len(configs) - len(pending), desc=desc)
    with bar, _outcomes(fn, configs, pending, executor, workers, scheduler) as outcomes:
        for k, outcome in outcomes:  # as the runs finish
            name = configs[k]["name"]
            if isinstance(outcome, BaseException):
                done = sum(result is not None for result in results)
                kept = f"; the {done} finished run(s) are kept in {folder}: rerun to resume"
                message = f"run {name!r} (configs[{k}]) of sweep {desc!r} failed: "
                message += f"{type(outcome).__name__}: {outcome}" + (
                    kept if folder else ""
                )
                raise SweepError(name, message) from outcome
            results[k] = _plain_result(name, outcome)
            if folder is not None:
                _save(paths[k], digests[k], results[k])
            bar.update()
    return results  # type: ignore[return-value] - every entry is filled now


@contextlib.contextmanager
def _outcomes(
    fn, configs, pending, executor, workers, scheduler
) -> Iterator[Iterator[tuple]]:
    """``(k, result or exception)`` of the pending runs as they finish; on Dask the runs
    start in their order, the function (and the data it closes over) travels to each
    worker once, and the runs not finished are cancelled on exit."""
    if executor == "serial" or not pending:
        yield ((k, _attempt(fn, configs[k])) for k in pending)
        return
    from distributed import as_completed

    with dask_client(scheduler, workers, len(pending)) as client:
        remote, tag = (
            client.scatter(fn, broadcast=True, hash=False),
            uuid.uuid4().hex[:8],
        )
        futures = {}
        for rank, k in enumerate(pending):  # the runs start in their order
            key = f"sweep-{configs[k]['name']}-{tag}"
            futures[
                client.submit(
                    _call, remote, configs[k], key=key, priority=-rank, pure=False
                )
            ] = k
        try:
            done = as_completed(futures)
            yield (
                (futures[f], f.exception() if f.status == "error" else f.result())
                for f in done
            )
        finally:
            client.cancel(list(futures))
            futures.clear()  # release the results before the workers go

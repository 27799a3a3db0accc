"""Many independent training runs, serially or on a Dask cluster, resumable.

Chapter: *Beyond one machine*. A chapter's sweep (seeds x positional variants x widths
or ranks) is a list of configurations, each a dict with a unique ``"name"``, and a
function that trains one run from its configuration and returns a JSON-serialisable
dict. :func:`run_sweep` calls that function for every configuration, in this process
(``executor="serial"``, the default) or on Dask workers (``executor="dask"``), and
returns the results in the order of the configurations whichever executor ran them.

Results are identical by construction, not by tolerance: every run seeds itself from
its configuration, every run executes on one thread wherever it runs
(:func:`single_threaded`: a reduction over two threads rounds differently), and every
result goes through the same JSON round trip (finite and non-finite floats survive it
bit for bit), whether it was computed here, on a worker or read back from a finished
run's file.

Resuming: with ``directory``, each finished run is written atomically to
``<directory>/<name>.json`` with a hash of its configuration; a rerun loads the runs
whose file matches their configuration and recomputes the others (a changed
configuration is recomputed). A run that checkpoints mid-training (``TrainConfig``'s
``checkpoint_dir``) resumes inside the run too.

Workers: a ``distributed.LocalCluster`` of single-threaded worker processes, one per
CPU core by default, or one per GPU on a machine with GPUs, each worker seeing only
its own GPU through ``CUDA_VISIBLE_DEVICES`` (:func:`worker_environments`,
:func:`start_local_cluster`); or the workers of a running cluster when ``scheduler``
gives its address (their setup, and a filesystem shared with them for the
checkpoints, are then the cluster's business).
"""

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
from ..settings import progress

#: the executors :func:`run_sweep` knows
EXECUTORS = ("serial", "dask")
#: environment of every worker started here: one BLAS/OpenMP thread per worker process
THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
}
#: what a run name may contain (it names the run's result file)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=+-]*")
#: format of a finished run's file
_FORMAT = 1


class SweepError(RuntimeError):
    """A run of a sweep raised; ``name`` is the run. The runs that finished before it
    are kept in the sweep's ``directory``, so a rerun resumes after them.

    Chapter: *Beyond one machine*.
    """

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


def config_hash(config: dict[str, Any]) -> str:
    """A stable hex digest of a run's configuration (keys sorted; NumPy arrays by
    content). A finished run is reused only while this digest is unchanged.

    Chapter: *Beyond one machine*.
    """
    blob = json.dumps(config, sort_keys=True, allow_nan=True, default=_hashable)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _hashable(value: Any) -> Any:
    """JSON stand-in of a non-JSON configuration value (NumPy scalars and arrays)."""
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
    raise TypeError(
        f"a configuration value of type {type(value).__name__} cannot be hashed: use "
        "numbers, strings, lists, dicts or NumPy arrays (keep models and data in a "
        "global that the run function reads)"
    )


def _gpu_count() -> int:
    """CUDA devices torch sees (0 without torch or CUDA)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return 0
    try:
        return int(torch.cuda.device_count())
    except Exception:  # noqa: BLE001 - a broken driver means no GPU for the sweep
        return 0


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def worker_environments(
    workers: int | None = None, gpus: int | None = None
) -> list[dict[str, str]]:
    """The environment of each Dask worker :func:`run_sweep` starts; their number is
    the number of workers.

    ``gpus`` defaults to ``torch.cuda.device_count()``. With ``k >= 1`` GPUs there is
    one worker per GPU (``workers=None``), worker ``i`` seeing only GPU ``i mod k``
    through ``CUDA_VISIBLE_DEVICES`` (an inherited ``CUDA_VISIBLE_DEVICES`` list is
    respected); without a GPU, one worker per CPU core. An explicit ``workers`` sets
    the count either way. Every worker gets one BLAS/OpenMP thread
    (:data:`THREAD_ENV`). Chapter: *Beyond one machine*.
    """
    _check_workers(workers)
    if gpus is None:
        gpus = _gpu_count()
    if gpus > 0:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        ids = [v.strip() for v in visible.split(",") if v.strip()] or [
            str(i) for i in range(gpus)
        ]
        ids = ids[:gpus]
        count = len(ids) if workers is None else workers
        return [
            {**THREAD_ENV, "CUDA_VISIBLE_DEVICES": ids[i % len(ids)]}
            for i in range(count)
        ]
    count = _cpu_count() if workers is None else workers
    return [dict(THREAD_ENV) for _ in range(count)]


def _check_workers(workers: Any) -> None:
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or workers < 1
    ):
        raise ValueError(
            f"workers must be None (one per GPU, else one per CPU core) or an integer "
            f">= 1, got workers={workers!r}: pass e.g. workers=2"
        )


def _checked_configs(configs: Any) -> list[dict[str, Any]]:
    if isinstance(configs, (str, bytes, dict)) or not isinstance(configs, Sequence):
        raise TypeError(
            f"configs must be a list of dicts (one per run, each with a 'name'), got "
            f"{type(configs).__name__}"
        )
    names: dict[str, int] = {}
    for k, config in enumerate(configs):
        if not isinstance(config, dict):
            raise TypeError(
                f"configs[{k}] must be a dict with a 'name', got "
                f"{type(config).__name__}"
            )
        name = config.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(
                f"configs[{k}] needs a 'name' that can name a file (letters, digits "
                f"and . _ = + -, not starting with . or -), got name={name!r}: pass "
                "e.g. 'precedes-rope-seed0'"
            )
        names[name] = names.get(name, 0) + 1
    duplicates = sorted(n for n, count in names.items() if count > 1)
    if duplicates:
        raise ValueError(
            f"configs have duplicate names {duplicates}: every run needs its own name "
            "(it names its result file and checkpoints), e.g. add the seed to it"
        )
    return list(configs)


def _plain_result(name: str, result: Any) -> dict[str, Any]:
    """``result`` after the JSON round trip every result goes through (see module)."""
    if not isinstance(result, dict):
        raise TypeError(
            f"run {name!r}: the run function must return a dict, got "
            f"{type(result).__name__}"
        )
    try:
        return json.loads(json.dumps(result, allow_nan=True))
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"run {name!r}: its result is not JSON-serialisable ({exc}): return plain "
            "numbers, strings, lists and dicts (e.g. float(x) for a NumPy float32 or a "
            "torch scalar, x.tolist() for an array)"
        ) from exc


def _load(path: Path, digest: str) -> dict[str, Any] | None:
    """The result stored in ``path`` if it belongs to the configuration ``digest``."""
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if (
        not isinstance(stored, dict)
        or stored.get("format") != _FORMAT
        or stored.get("config_hash") != digest
        or not isinstance(stored.get("result"), dict)
    ):
        return None
    return stored["result"]


def _save(path: Path, name: str, digest: str, result: dict[str, Any]) -> None:
    # not key-sorted: the result keeps its key order (a chapter's table columns)
    text = json.dumps(
        {"format": _FORMAT, "name": name, "config_hash": digest, "result": result},
        indent=1,
        allow_nan=True,
    )
    atomic_write(path, lambda tmp: tmp.write_text(text))


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """One torch thread and one BLAS/OpenMP thread inside the block (restored after).

    Every run of :func:`run_sweep` executes inside it, here or on a worker: a reduction
    split over two threads rounds differently from one over one, so the same thread
    count everywhere is what makes the executors agree bit for bit (the chapters' runs
    train with ``TrainConfig(threads=1)`` anyway; this also covers what a run computes
    around its training). Chapter: *Beyond one machine*.
    """
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            yield
    finally:
        torch.set_num_threads(before)


def _call_single_threaded(fn: Callable[[dict[str, Any]], Any], config: dict) -> Any:
    """``fn(config)`` inside :func:`single_threaded` (here or on a Dask worker)."""
    with single_threaded():
        return fn(config)


def start_local_cluster(workers: int | None = None, runs: int | None = None) -> Any:
    """The ``distributed`` cluster :func:`run_sweep` starts when no ``scheduler`` is
    given: one single-threaded worker process per :func:`worker_environments` entry
    (at most ``runs`` of them: no idle workers), no dashboard. Close it when done.

    A ``LocalCluster`` on a CPU machine; with GPUs, a ``SpecCluster`` whose worker ``i``
    has its own ``CUDA_VISIBLE_DEVICES``. The workers start without ``distributed``'s
    default ``MALLOC_TRIM_THRESHOLD_=65536``, which makes small-model training about
    1.4x slower (``benchmarks/bench_sweeps.py``). Chapter: *Beyond one machine*.
    """
    import dask

    envs = worker_environments(workers)
    if runs is not None:
        envs = envs[: max(1, runs)]
    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
    environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    environ.update(THREAD_ENV)  # set before the interpreter starts, for OpenMP/BLAS
    # no dashboard, and the scheduler's HTTP server (health checks) on a free port
    http = {"dashboard": False, "dashboard_address": ":0"}
    # an earlier cluster in this process may have left distributed's value in
    # os.environ, which spawned workers would inherit: hide it while they start
    inherited = os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    try:
        with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}):
            return _start(envs, http)
    finally:
        if inherited is not None:
            os.environ["MALLOC_TRIM_THRESHOLD_"] = inherited


def _start(envs: list[dict[str, str]], http: dict[str, Any]) -> Any:
    """Start the local or per-GPU cluster (see :func:`start_local_cluster`)."""
    from distributed import LocalCluster, Nanny, Scheduler, SpecCluster

    if all(env == envs[0] for env in envs):
        return LocalCluster(
            n_workers=len(envs),
            threads_per_worker=1,
            processes=True,
            env=envs[0],
            scheduler_kwargs=http,
        )
    return SpecCluster(  # one GPU per worker: a worker spec each
        workers={
            f"gpu-{k}": {"cls": Nanny, "options": {"nthreads": 1, "env": env}}
            for k, env in enumerate(envs)
        },
        scheduler={"cls": Scheduler, "options": {"host": "127.0.0.1", **http}},
    )


def _client(scheduler: str | None, workers: int | None, runs: int) -> tuple[Any, Any]:
    """(client, cluster started here or ``None``) for ``runs`` pending runs."""
    from distributed import Client

    if scheduler is not None:
        return Client(scheduler), None
    cluster = start_local_cluster(workers, runs)
    try:
        return Client(cluster), cluster
    except BaseException:
        cluster.close()
        raise


def run_sweep(
    fn: Callable[[dict[str, Any]], dict[str, Any]],
    configs: Sequence[dict[str, Any]],
    *,
    executor: str = "serial",
    workers: int | None = None,
    scheduler: str | None = None,
    directory: str | os.PathLike | None = None,
    desc: str = "sweep",
) -> list[dict[str, Any]]:
    """``[fn(config) for config in configs]``, serially or on Dask, resumable.

    ``fn`` trains one run from its configuration (a dict with a unique ``"name"``) and
    returns a JSON-serialisable dict; it may be defined in a notebook (Dask ships it
    with cloudpickle) and reads its data from globals. ``executor="serial"`` runs
    here, in order; ``"dask"`` runs on a local cluster of ``workers`` single-threaded
    processes (:func:`worker_environments`: default one per GPU, else one per core),
    or on the cluster at ``scheduler`` (an address such as ``tcp://host:8786``).
    Every run executes on one thread (:func:`single_threaded`) and its result comes
    back in the order of ``configs`` through the same JSON round trip, so both
    executors return identical numbers.

    With ``directory``, each finished run is written to ``<directory>/<name>.json``
    with its configuration's hash (:func:`config_hash`) and later calls reuse it while
    the configuration is unchanged. A run that raises stops the sweep with a
    :class:`SweepError` naming it; the runs that finished are kept, so a rerun
    resumes. Chapter: *Beyond one machine*.
    """
    if not callable(fn):
        raise TypeError(
            f"fn must be a function taking one configuration dict and returning a "
            f"dict, got {type(fn).__name__}"
        )
    if executor not in EXECUTORS:
        raise ValueError(
            f"executor must be 'serial' or 'dask', got executor={executor!r}: pass "
            "executor='serial' (this process) or executor='dask'"
        )
    _check_workers(workers)
    if scheduler is not None:
        if not isinstance(scheduler, str) or not scheduler.strip():
            raise ValueError(
                f"scheduler must be a Dask scheduler address such as "
                f"'tcp://127.0.0.1:8786' or None, got scheduler={scheduler!r}"
            )
        if executor != "dask":
            raise ValueError(
                f"scheduler={scheduler!r} is used only by executor='dask': pass "
                "executor='dask', or leave scheduler=None"
            )
    configs = _checked_configs(configs)
    digests = []
    for config in configs:
        try:
            digests.append(config_hash(config))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"run {config['name']!r}: {exc}") from exc
    folder = Path(directory) if directory is not None else None

    results: list[dict[str, Any] | None] = [None] * len(configs)
    if folder is not None:
        for k, (config, digest) in enumerate(zip(configs, digests)):
            results[k] = _load(folder / f"{config['name']}.json", digest)
    pending = [k for k, result in enumerate(results) if result is None]

    def finish(k: int, result: Any) -> None:
        name = configs[k]["name"]
        results[k] = _plain_result(name, result)
        if folder is not None:
            _save(folder / f"{name}.json", name, digests[k], results[k])

    def failed(k: int, exc: BaseException) -> SweepError:
        name = configs[k]["name"]
        done = sum(result is not None for result in results)
        kept = (
            f"; the {done} finished run(s) are kept in {folder}: rerun to resume"
            if folder is not None
            else ""
        )
        return SweepError(
            name,
            f"run {name!r} (configs[{k}]) of sweep {desc!r} failed: "
            f"{type(exc).__name__}: {exc}{kept}",
        )

    bar = progress(total=len(configs), initial=len(configs) - len(pending), desc=desc)
    try:
        if executor == "serial" or not pending:
            for k in pending:
                try:
                    result = _call_single_threaded(fn, copy.deepcopy(configs[k]))
                except Exception as exc:
                    raise failed(k, exc) from exc
                finish(k, result)
                bar.update()
        else:
            _run_on_dask(fn, configs, pending, scheduler, workers, finish, failed, bar)
    finally:
        bar.close()
    return results  # type: ignore[return-value] - every entry is filled now


def _run_on_dask(
    fn: Callable[[dict[str, Any]], Any],
    configs: list[dict[str, Any]],
    pending: list[int],
    scheduler: str | None,
    workers: int | None,
    finish: Callable[[int, Any], None],
    failed: Callable[[int, BaseException], SweepError],
    bar: Any,
) -> None:
    """Run ``configs[k]`` for ``k`` in ``pending`` on Dask; ``finish`` each as it
    completes; on the first failure cancel the rest and raise ``failed(k, exc)``."""
    from distributed import as_completed

    client, cluster = _client(scheduler, workers, len(pending))
    index: dict[str, int] = {}
    futures: list[Any] = []
    try:
        # the function (and the data it closes over) travels to each worker once
        remote_fn = client.scatter(fn, broadcast=True, hash=False)
        tag = uuid.uuid4().hex[:8]
        for rank, k in enumerate(pending):
            future = client.submit(
                _call_single_threaded,
                remote_fn,
                configs[k],
                key=f"sweep-{configs[k]['name']}-{tag}",
                priority=len(pending) - rank,  # start the runs in their order
                retries=0,
                pure=False,
            )
            index[future.key] = k
            futures.append(future)
        for future in as_completed(futures):
            k = index[future.key]
            if future.status != "finished":
                exc = future.exception()
                client.cancel(futures)
                raise failed(k, exc) from exc
            finish(k, future.result())
            bar.update()
    finally:
        futures.clear()  # release the results before the workers go
        index.clear()
        if cluster is None:  # someone else's cluster: leave it as it is
            client.close()
        else:
            _close_quietly(client, cluster)


def _quiet_distributed_logs() -> dict[str, int]:
    """Set this process's ``distributed`` loggers to CRITICAL; return old levels."""
    names = (
        "distributed",
        "distributed.worker",
        "distributed.nanny",
        "distributed.core",
    )
    levels = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    return levels


def _close_quietly(client: Any, cluster: Any) -> None:
    """Close a cluster started here, after every result is in: a worker's heartbeat
    racing the scheduler's shutdown logs an error that means nothing at this point."""
    with contextlib.suppress(Exception):
        client.run(_quiet_distributed_logs)  # on the workers
    levels = _quiet_distributed_logs()  # the scheduler and the nannies live here
    try:
        client.close()
        cluster.close()
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)

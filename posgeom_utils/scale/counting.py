"""Positional counts of a sharded corpus: each shard counted by the streaming counter,
the sparse counts summed by a tree reduction on Dask.

Chapter: *Beyond one machine*.

A corpus too large for one process is given as shards: files (local paths or any URL
that ``fsspec`` opens, e.g. ``s3://bucket/part-*.jsonl.gz``; one text per line in
``.txt``, a JSON object per line in ``.jsonl``, a GLUE-style ``.tsv``; ``.gz``/``.bz2``
/``.xz``/``.zst`` compression inferred from the name) or the shards of a Hugging Face
dataset opened in streaming mode. Every shard is counted by
:func:`posgeom_utils.marginals.count_batches`, the same loop as the single-process
path, reading its texts in batches so a worker holds one batch and the sparse counts.
Counts are integers and :meth:`~posgeom_utils.marginals.PositionalMarginals.merge`
adds them, so the merged count equals the single-process count of all the texts bit
for bit, whatever the order or grouping of the reduction.

The reduction runs on ``dask.bag`` (``fold`` with ``split_every``, a tree) on a
``distributed`` cluster: a ``LocalCluster`` of single-threaded worker processes by
default, or any running cluster given by its scheduler address. ``executor="serial"``
counts the shards one after the other in this process (same result).
"""

from __future__ import annotations

import csv
import json
import os
import resource
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..cache import cache_key, cache_path
from ..marginals import (
    PositionalMarginals,
    _apply_min_count,
    count_batches,
    counting_params,
)
from ..settings import progress, progress_enabled

EXECUTORS = ("dask", "serial")
FILE_KINDS = ("text", "jsonl", "tsv")
#: file name endings -> shard kind (after removing a compression suffix)
SUFFIX_KINDS = {
    ".txt": "text",
    ".text": "text",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".tsv": "tsv",
}
COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst", ".lz4")
#: the event topic on which Dask workers report a shard's progress
PROGRESS_TOPIC = "posgeom-count-progress"
#: how long to wait for a remote scheduler before giving up
CONNECT_TIMEOUT = "30s"


class ShardError(RuntimeError):
    """Counting one shard failed; the message names the shard and the cause.

    Chapter: *Beyond one machine*.
    """


@dataclass(frozen=True)
class Shard:
    """One part of a corpus.

    ``kind`` is ``"text"``, ``"jsonl"`` or ``"tsv"`` for a file at ``source`` (a path
    or an fsspec URL), or ``"hf"`` for shard ``index`` of ``num_shards`` of the
    Hugging Face dataset ``source`` (a hub id, or a builder such as ``"json"`` with
    ``data_files``) opened with ``streaming=True``. ``text_field`` names the text
    column (jsonl, tsv, hf). Chapter: *Beyond one machine*.
    """

    source: str
    kind: str
    text_field: str = "text"
    index: int = 0
    num_shards: int = 1
    config: str | None = None
    split: str = "train"
    data_files: tuple[str, ...] | None = None

    @property
    def name(self) -> str:
        """A readable name: the file, or ``dataset[split] shard i/k``.

        Chapter: *Beyond one machine*.
        """
        if self.kind == "hf":
            config = f"/{self.config}" if self.config else ""
            return (
                f"{self.source}{config}[{self.split}] shard "
                f"{self.index + 1}/{self.num_shards}"
            )
        return self.source


def _kind_of(path: str) -> str:
    name = path.lower()
    for suffix in COMPRESSIONS:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    for suffix, kind in SUFFIX_KINDS.items():
        if name.endswith(suffix):
            return kind
    raise ValueError(
        f"cannot tell the format of shard {path!r} from its name: name it *.txt (one "
        "text per line), *.jsonl (one JSON object per line) or *.tsv (a header row), "
        "optionally compressed (.gz, .bz2, .xz, .zst), or pass kind=..."
    )


def file_shards(
    paths: str | Sequence[str], kind: str | None = None, text_field: str = "text"
) -> list[Shard]:
    """Shards from file paths or URLs; a pattern with ``*``/``?``/``[`` is expanded
    (locally or remotely, through fsspec), in sorted order.

    ``kind`` (``"text"``, ``"jsonl"``, ``"tsv"``) overrides the format inferred from
    each name. Chapter: *Beyond one machine*.
    """
    import fsspec

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise ValueError("paths is empty: pass at least one shard file or pattern")
    if kind is not None and kind not in FILE_KINDS:
        raise ValueError(f"kind must be one of {FILE_KINDS} or None, got {kind!r}")
    expanded: list[str] = []
    for pattern in paths:
        if any(ch in pattern for ch in "*?["):
            fs, _, found = fsspec.core.get_fs_token_paths(pattern)
            if not found:
                raise FileNotFoundError(
                    f"the pattern {pattern!r} matches no file: check the path"
                )
            protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
            expanded += [
                f if protocol in ("file", "local") else fs.unstrip_protocol(f)
                for f in sorted(found)
            ]
        else:
            expanded.append(pattern)
    if len(set(expanded)) != len(expanded):
        raise ValueError(
            "a shard is listed twice (its texts would be counted twice): pass each "
            "file once"
        )
    return [Shard(p, kind or _kind_of(p), text_field) for p in expanded]


def hub_shards(
    dataset: str,
    config: str | None = None,
    split: str = "train",
    text_field: str = "text",
    data_files: str | Sequence[str] | None = None,
) -> list[Shard]:
    """One :class:`Shard` per shard of ``datasets.load_dataset(dataset, config,
    split=split, streaming=True)`` (a hub id online; offline, a builder such as
    ``"json"`` or ``"text"`` with local ``data_files``).

    Chapter: *Beyond one machine*.
    """
    if isinstance(data_files, str):
        data_files = [data_files]
    files = tuple(os.fspath(f) for f in data_files) if data_files else None
    stream = _open_hub(dataset, config, split, files)
    k = int(getattr(stream, "num_shards", 1) or 1)
    return [
        Shard(dataset, "hf", text_field, i, k, config, split, files) for i in range(k)
    ]


def _open_hub(dataset, config, split, data_files):
    import datasets

    datasets.disable_progress_bars()
    kwargs = {"data_files": list(data_files)} if data_files else {}
    try:
        return datasets.load_dataset(
            dataset, config, split=split, streaming=True, **kwargs
        )
    except Exception as exc:  # hub, network and builder errors come in many types
        raise FileNotFoundError(
            f"cannot open dataset={dataset!r} (config={config!r}, split={split!r}) in "
            f"streaming mode: {type(exc).__name__}: {exc}. Offline, pass a local "
            "builder with data_files, e.g. hub_shards('json', data_files=[...])"
        ) from exc


# --------------------------------------------------------------------------- reading


def _file_texts(shard: Shard) -> Iterator[str]:
    import fsspec

    with fsspec.open(shard.source, "rt", encoding="utf-8", compression="infer") as fh:
        if shard.kind == "text":
            for line in fh:
                text = line.strip()
                if text:
                    yield text
        elif shard.kind == "jsonl":
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                row = json.loads(line)
                if shard.text_field not in row:
                    raise KeyError(
                        f"line {number} has no field {shard.text_field!r} (fields: "
                        f"{sorted(row)}): pass text_field=..."
                    )
                yield row[shard.text_field]
        elif shard.kind == "tsv":
            header = fh.readline().rstrip("\n").split("\t")
            field = shard.text_field if shard.text_field in header else "sentence"
            if field not in header:
                raise KeyError(
                    f"the header {header!r} has no column {shard.text_field!r}: pass "
                    "text_field=..."
                )
            column = header.index(field)
            for row in csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE):
                if row and column < len(row):
                    yield row[column].strip()
        else:
            raise ValueError(f"unknown shard kind {shard.kind!r}")


def _hub_texts(shard: Shard) -> Iterator[str]:
    stream = _open_hub(shard.source, shard.config, shard.split, shard.data_files)
    if shard.num_shards > 1:
        stream = stream.shard(num_shards=shard.num_shards, index=shard.index)
    for row in stream:
        yield row[shard.text_field]


def shard_texts(shard: Shard) -> Iterator[str]:
    """The texts of one shard, streamed (blank lines of text files skipped).

    Chapter: *Beyond one machine*.
    """
    return _hub_texts(shard) if shard.kind == "hf" else _file_texts(shard)


def _batches(texts: Iterator[str], batch_size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"a text is a {type(text).__name__}, not a str")
        batch.append(text)
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def shard_fingerprint(shard: Shard) -> dict:
    """What identifies a shard's content without reading it: its name plus the size
    and modification time, ETag or checksum the file system reports (for a dataset:
    its id, config, split, data files and shard index). Part of the cache key.

    Chapter: *Beyond one machine*.
    """
    key = {k: v for k, v in asdict(shard).items() if v is not None}
    if shard.kind == "hf":
        files = [_file_info(f) for f in shard.data_files or ()]
        return {**key, "data_files": files} if files else key
    return {**key, **_file_info(shard.source)}


def _file_info(path: str) -> dict:
    import fsspec

    fs, _, (resolved,) = fsspec.core.get_fs_token_paths(path)
    try:
        info = fs.info(resolved)
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            f"shard {path!r} does not exist: check the path or URL"
        ) from exc
    out = {"size": info.get("size")}
    for field in (
        "mtime",
        "LastModified",
        "last_modified",
        "ETag",
        "etag",
        "md5",
        "crc32c",
        "checksum",
    ):
        if info.get(field) is not None:
            out[field] = str(info[field])
    return out


# --------------------------------------------------------------------------- counting


def _report(shard: Shard, texts: int, done: bool) -> None:
    """Tell the client how far a shard is (only inside a Dask task; else nothing)."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return
    worker.log_event(
        PROGRESS_TOPIC, {"shard": shard.name, "texts": texts, "done": done}
    )


def count_shard(
    shard: Shard,
    tokenizer: Any,
    n: int,
    special_tokens: str = "keep",
    align: str = "start",
    batch_size: int = 2048,
    buffer_tokens: int = 2**22,
    on_progress: Callable[[Shard, int, bool], None] | None = None,
    view: str = "model",
) -> PositionalMarginals:
    """Count one shard with the streaming counter; raise :class:`ShardError` naming
    the shard if anything fails. ``params["shard_stats"]`` records its texts, tokens,
    seconds and the process's peak memory.

    Chapter: *Beyond one machine*.
    """
    report = on_progress or _report
    start = time.perf_counter()
    stats = {"shard": shard.name, "texts": 0, "tokens": 0}

    def batches() -> Iterator[list[str]]:
        for batch in _batches(shard_texts(shard), batch_size):
            stats["texts"] += len(batch)
            yield batch
            report(shard, stats["texts"], False)

    try:
        result = count_batches(
            batches(), tokenizer, n, special_tokens, align, buffer_tokens, view=view
        )
    except Exception as exc:
        raise ShardError(
            f"counting shard {shard.name!r} failed after {stats['texts']} texts: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    report(shard, stats["texts"], True)
    lengths = np.arange(result.length_hist.size)
    stats["tokens"] = int((lengths * result.length_hist).sum())  # specials included
    stats["seconds"] = time.perf_counter() - start
    stats["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    stats["pid"] = os.getpid()
    result.params["shard_stats"] = [stats]
    return result


def _merge(a: PositionalMarginals, b: PositionalMarginals) -> PositionalMarginals:
    """Merge two partial counts, keeping every shard's statistics."""
    merged = a.merge(b)
    merged.params["shard_stats"] = a.params.get("shard_stats", []) + b.params.get(
        "shard_stats", []
    )
    return merged


def _count_for_bag(shard, tokenizer, options):
    options = dict(options)
    if options.pop("single_thread", False):
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        os.environ.setdefault("RAYON_NUM_THREADS", "1")
    return count_shard(shard, tokenizer, **options)


def local_cluster(workers: int = 2, **kwargs: Any):
    """A ``distributed.LocalCluster`` of ``workers`` single-threaded processes (no
    dashboard); tokenizers and BLAS are kept to one thread per worker.

    Chapter: *Beyond one machine*.
    """
    from distributed import LocalCluster

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    env = {
        "TOKENIZERS_PARALLELISM": "false",
        "RAYON_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
    }
    kwargs.setdefault("dashboard_address", None)
    kwargs.setdefault("silence_logs", 40)
    return LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, env=env, **kwargs
    )


class _Bars:
    """One tqdm bar per shard in flight, fed by the workers' progress events."""

    def __init__(self, enabled: bool):
        self.enabled, self.bars, self.position = enabled, {}, 0

    def __call__(self, event: Any) -> None:
        msg = event[1] if isinstance(event, tuple) else event
        if not self.enabled or not isinstance(msg, dict):
            return
        name = msg["shard"]
        bar = self.bars.get(name)
        if bar is None:
            self.position += 1
            bar = self.bars[name] = progress(
                desc=f"counting {name}", unit=" texts", position=self.position
            )
        bar.update(msg["texts"] - bar.n)
        if msg["done"]:
            bar.close()

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def sharded_marginals(
    shards: Sequence[Shard] | Sequence[str] | str,
    tokenizer: Any,
    n: int,
    special_tokens: str = "keep",
    align: str = "start",
    min_count: int | None = None,
    executor: str = "dask",
    workers: int = 2,
    scheduler: Any = None,
    batch_size: int = 2048,
    buffer_tokens: int = 2**22,
    split_every: int = 8,
    cache: bool = True,
    view: str = "model",
) -> PositionalMarginals:
    """The positional counts of a sharded corpus, equal to those of
    :func:`~posgeom_utils.marginals.positional_marginals` on all its texts.

    ``shards``: :class:`Shard` objects (:func:`file_shards`, :func:`hub_shards`) or
    file paths / URLs / patterns. ``executor="dask"`` counts the shards in parallel
    on ``scheduler`` (a ``distributed.Client``, or the address of a running
    scheduler such as ``"tcp://10.0.0.1:8786"``), or on a new
    :func:`local_cluster` of ``workers`` processes when ``scheduler`` is None, and sums
    them by a tree reduction (``split_every`` counts per node); ``"serial"`` counts
    them one by one here. A failing shard raises :class:`ShardError` and nothing is
    cached. The cache key covers every shard's fingerprint (:func:`shard_fingerprint`)
    and the counting options. Chapter: *Beyond one machine*.
    """
    if executor not in EXECUTORS:
        raise ValueError(
            f"executor must be one of {EXECUTORS}, got {executor!r}: 'dask' for a "
            "cluster, 'serial' for this process"
        )
    if isinstance(shards, (str, os.PathLike)) or (
        len(shards) and not isinstance(shards[0], Shard)
    ):
        shards = file_shards(shards)
    shards = list(shards)
    if not shards:
        raise ValueError("shards is empty: pass at least one shard (file or dataset)")
    if not all(isinstance(s, Shard) for s in shards):
        raise TypeError("shards must all be Shard objects, or all paths")
    if len(set(shards)) != len(shards):
        raise ValueError("a shard is listed twice: pass each shard once")
    for value, name in ((batch_size, "batch_size"), (split_every, "split_every")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if split_every < 2:
        raise ValueError(f"split_every must be >= 2 (a tree), got {split_every}")
    params = counting_params(tokenizer, n, special_tokens, align, view)
    params["shards"] = sorted(
        (shard_fingerprint(s) for s in shards),
        key=lambda f: json.dumps(f, sort_keys=True),
    )
    path = cache_path("marginals", cache_key(**params), ".npz")
    if cache and path.is_file():
        cached = PositionalMarginals.load(path)
        cached.params["from_cache"] = True
        return _apply_min_count(cached, min_count)
    options = dict(
        n=n,
        special_tokens=special_tokens,
        align=align,
        batch_size=batch_size,
        buffer_tokens=buffer_tokens,
        view=view,
    )
    if executor == "serial":
        result = _count_serial(shards, tokenizer, options)
    else:
        result = _count_dask(
            shards, tokenizer, options, workers, scheduler, split_every
        )
    stats = sorted(result.params.pop("shard_stats", []), key=lambda s: s["shard"])
    if result.num_sequences == 0:
        raise ValueError(
            f"the {len(shards)} shards hold no text: check the files (or text_field)"
        )
    result.params = {**params, "shard_stats": stats}
    if cache:
        result.save(path)
    return _apply_min_count(result, min_count)


def _count_serial(shards, tokenizer, options) -> PositionalMarginals:
    bars = _Bars(progress_enabled())
    result = None
    for shard in shards:
        part = count_shard(
            shard,
            tokenizer,
            **options,
            on_progress=lambda s, k, done: bars(
                {"shard": s.name, "texts": k, "done": done}
            ),
        )
        result = part if result is None else _merge(result, part)
    bars.close()
    return result


def _count_dask(shards, tokenizer, options, workers, scheduler, split_every):
    import dask
    import dask.bag as db
    from distributed import Client

    own_cluster = None
    if scheduler is None:
        own_cluster = local_cluster(workers)
        client = Client(own_cluster)
    elif isinstance(scheduler, Client):
        client = scheduler
    elif isinstance(scheduler, str):
        try:
            client = Client(scheduler, timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            raise ConnectionError(
                f"cannot reach the Dask scheduler at scheduler={scheduler!r} ({exc}): "
                "start one (`dask scheduler`) or pass scheduler=None for a local "
                "cluster"
            ) from exc
    else:
        raise TypeError(
            "scheduler must be None, a distributed.Client or an address string, got "
            f"{type(scheduler).__name__}"
        )
    bars = _Bars(progress_enabled())
    try:
        client.subscribe_topic(PROGRESS_TOPIC, bars)
        bag = db.from_sequence(shards, npartitions=len(shards))
        token = dask.delayed(tokenizer, pure=True, traverse=False)
        counted = bag.map(_count_for_bag, token, {**options, "single_thread": True})
        total = counted.fold(_merge, split_every=split_every)
        return client.compute(total).result()
    finally:
        try:
            client.unsubscribe_topic(PROGRESS_TOPIC)
        except Exception:  # the client may already be closing
            pass
        bars.close()
        if own_cluster is not None:
            client.close()
            own_cluster.close()
        elif isinstance(scheduler, str):
            client.close()

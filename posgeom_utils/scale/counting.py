"""Positional counts of a sharded corpus (text, jsonl or tsv files, or a streamed
Hugging Face dataset), summed exactly by a tree reduction on Dask. Chapter: *Beyond one
machine*."""

from __future__ import annotations

import csv
import functools
import itertools
import json
import os
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..cache import cache_key, cache_path, read_or_discard
from ..checks import choice, integer
from ..marginals import (
    PositionalMarginals,
    _apply_min_count,
    _check_options,
    count_batches,
    counting_params,
)
from ..settings import progress
from .sweeps import EXECUTORS, dask_client, start_local_cluster

local_cluster = start_local_cluster  # the chapter's name
#: shard kind -> file name endings (after removing a compression suffix)
KINDS = {"text": (".txt", ".text"), "jsonl": (".jsonl", ".json"), "tsv": (".tsv",)}
COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst", ".lz4")
#: the event topic on which Dask workers report the texts they counted
PROGRESS_TOPIC = "posgeom-count-progress"


class ShardError(RuntimeError):
    """Counting one shard failed; the message names the shard and the cause.
    Chapter: *Beyond one machine*."""


@dataclass(frozen=True)
class Shard:
    """A ``"text"``, ``"jsonl"`` or ``"tsv"`` file at ``source``, or (``"hf"``) shard
    ``index`` of ``num_shards`` of a streamed Hugging Face dataset. Chapter: *Beyond one
    machine*."""

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
        """The file, or ``dataset[split] shard i/k``. Chapter: *Beyond one machine*."""
        if self.kind != "hf":
            return self.source
        config = f"/{self.config}" if self.config else ""
        where = f"{self.source}{config}[{self.split}]"
        return f"{where} shard {self.index + 1}/{self.num_shards}"


def _kind_of(path: str) -> str:
    name = path.lower()
    for suffix in COMPRESSIONS:
        name = name.removesuffix(suffix)
    for kind, endings in KINDS.items():
        if name.endswith(endings):
            return kind
    fix = "name it *.txt, *.jsonl or *.tsv (maybe compressed, e.g. .gz) or pass a Shard"
    raise ValueError(f"cannot tell the format of shard {path!r} from its name: {fix}")


def file_shards(paths: str | Sequence[str], text_field: str = "text") -> list[Shard]:
    """Shards from file paths or URLs, patterns (``*``, ``?``, ``[``) expanded in sorted
    order, each shard's format read from its name. Chapter: *Beyond one machine*."""
    import fsspec
    from fsspec.implementations.local import LocalFileSystem

    paths = [paths] if isinstance(paths, (str, os.PathLike)) else paths
    expanded: list[str] = []
    for pattern in map(os.fspath, paths):
        if not any(ch in pattern for ch in "*?["):
            expanded.append(pattern)
            continue
        fs, _, found = fsspec.core.get_fs_token_paths(pattern)
        if not found:
            raise FileNotFoundError(f"the pattern {pattern!r} matches no file")
        local = isinstance(fs, LocalFileSystem)
        expanded += [f if local else fs.unstrip_protocol(f) for f in sorted(found)]
    return [Shard(p, _kind_of(p), text_field) for p in expanded]


def hub_shards(
    dataset: str,
    config: str | None = None,
    split: str = "train",
    text_field: str = "text",
    data_files: str | Sequence[str] | None = None,
) -> list[Shard]:
    """One :class:`Shard` per shard of ``datasets.load_dataset(dataset, config,
    split=split, streaming=True)``. Chapter: *Beyond one machine*."""
    files = [data_files] if isinstance(data_files, str) else data_files
    files = tuple(os.fspath(f) for f in files) if files else None
    k = int(getattr(_open_hub(dataset, config, split, files), "num_shards", 1) or 1)
    return [
        Shard(dataset, "hf", text_field, i, k, config, split, files) for i in range(k)
    ]


def _open_hub(dataset: str, config: str | None, split: str, data_files: Any) -> Any:
    import datasets

    datasets.disable_progress_bars()
    kw = {"data_files": list(data_files)} if data_files else {}
    try:
        return datasets.load_dataset(dataset, config, split=split, streaming=True, **kw)
    except Exception as exc:  # hub, network and builder errors come in many types
        what = f"dataset={dataset!r} (config={config!r}, split={split!r})"
        fix = "offline: hub_shards('json', data_files=[...]) on local files"
        raise FileNotFoundError(f"cannot stream {what}: {exc}; {fix}") from exc


def shard_texts(shard: Shard) -> Iterator[str]:
    """The texts of one shard, streamed; lines end at ``\n`` only, blank ones skipped; a
    damaged file raises a ``ValueError`` naming it and the line. Chapter: *Beyond one
    machine*."""
    if shard.kind == "hf":
        stream = _open_hub(shard.source, shard.config, shard.split, shard.data_files)
        if shard.num_shards > 1:
            stream = stream.shard(num_shards=shard.num_shards, index=shard.index)
        yield from (row[shard.text_field] for row in stream)
        return
    line = 0
    try:
        for line, text in _file_rows(shard):
            yield text
    except (OSError, EOFError, UnicodeDecodeError, zlib.error, csv.Error) as exc:
        what = f"{type(exc).__name__}: {exc}"
        fix = "check the file (truncated? compressed as its name says? UTF-8?)"
        raise ValueError(f"{shard.source}, after line {line}: {what}; {fix}") from exc


def _file_rows(shard: Shard) -> Iterator[tuple[int, str]]:
    import fsspec

    options = {"encoding": "utf-8", "compression": "infer", "newline": "\n"}
    with fsspec.open(shard.source, "rt", **options) as fh:
        if shard.kind == "tsv":  # with a header row
            rows = csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
            header = rows.fieldnames or []
            field = shard.text_field if shard.text_field in header else "sentence"
            if field not in header:
                missing = f"the header {header!r} has no column {shard.text_field!r}"
                raise KeyError(f"{missing}: pass text_field=...")
            yield from (
                (rows.line_num, r[field].strip()) for r in rows if r[field] is not None
            )
            return
        for k, line in enumerate(fh, 1):
            if text := line.strip():
                yield k, _json_text(text, k, shard) if shard.kind == "jsonl" else text


def _json_text(line: str, k: int, shard: Shard) -> str:
    where = f"{shard.source}, line {k}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not JSON ({exc.msg}); expected one object per line")
    if not isinstance(row, dict) or shard.text_field not in row:
        fields = sorted(row) if isinstance(row, dict) else type(row).__name__
        missing = f"{where} has no field {shard.text_field!r} (fields: {fields})"
        raise KeyError(f"{missing}: pass text_field=...")
    return row[shard.text_field]


def shard_fingerprint(shard: Shard) -> dict:
    """A shard's fields, and its file's size and version (a hash of what its file
    system reports): part of the cache key. Chapter: *Beyond one machine*."""
    import fsspec

    def info(path: str) -> dict:
        fs, _, (resolved,) = fsspec.core.get_fs_token_paths(path)
        return {"size": fs.size(resolved), "version": fs.ukey(resolved)}

    key = {k: v for k, v in asdict(shard).items() if v is not None}
    if shard.kind != "hf":
        return {**key, **info(shard.source)}
    files = [info(f) for f in shard.data_files or ()]
    return {**key, "data_files": files} if files else key


def _report(texts: int) -> None:
    try:  # in a Dask task; elsewhere nothing
        from distributed import get_worker

        get_worker().log_event(PROGRESS_TOPIC, texts)
    except (ImportError, ValueError):
        pass


def _count_shard(
    shard: Shard, tokenizer: Any, options: dict, on_progress: Callable = _report
) -> PositionalMarginals:
    """Count one shard, or raise :class:`ShardError` naming it; its texts, tokens and
    seconds go to ``params["shard_stats"]``."""
    options = dict(options)
    batch_size = options.pop("batch_size")
    start, stats = time.perf_counter(), {"shard": shard.name, "texts": 0}

    def batches() -> Iterator[list[str]]:
        texts = shard_texts(shard)
        while batch := list(itertools.islice(texts, batch_size)):
            stats["texts"] += len(batch)
            yield batch
            on_progress(len(batch))

    try:
        result = count_batches(batches(), tokenizer, **options)
    except Exception as exc:
        where = f"counting shard {shard.name!r} failed after {stats['texts']} texts"
        raise ShardError(f"{where}: {type(exc).__name__}: {exc}") from exc
    lengths = np.arange(result.length_hist.size)
    stats["tokens"] = int(lengths @ result.length_hist)  # specials included
    stats["seconds"] = time.perf_counter() - start
    result.params["shard_stats"] = [stats]
    return result


def _merge(a: PositionalMarginals, b: PositionalMarginals) -> PositionalMarginals:
    merged = a.merge(b)
    stats = a.params.get("shard_stats", []) + b.params.get("shard_stats", [])
    merged.params["shard_stats"] = stats
    return merged


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
    """:func:`~posgeom_utils.marginals.positional_marginals` of all the texts of
    ``shards`` (:class:`Shard` objects, or file paths / URLs / patterns), counted on
    Dask (``scheduler``, else a local cluster of ``workers``) or here (``"serial"``); a
    failing shard raises :class:`ShardError`. Chapter: *Beyond one machine*."""
    fix = "'dask' for a cluster, 'serial' for this process"
    choice(executor, "executor", EXECUTORS, fix=fix)
    # the single-process counter's checks (n, policies, view, buffer_tokens)
    _check_options(tokenizer, n, special_tokens, align, buffer_tokens, view)
    integer(batch_size, "batch_size")
    integer(min_count, "min_count", optional=True)
    integer(split_every, "split_every", 2, fix="a tree node has at least 2 children")
    shards = _as_shards(shards)
    params = counting_params(tokenizer, n, special_tokens, align, view)
    fingerprints = [shard_fingerprint(s) for s in shards]
    params["shards"] = sorted(fingerprints, key=lambda f: json.dumps(f, sort_keys=True))
    path = cache_path("marginals", cache_key(**params), ".npz")
    result = read_or_discard(path, PositionalMarginals.load) if cache else None
    if result is not None:
        result.params["from_cache"] = True
        return _apply_min_count(result, min_count)
    options = {"n": n, "special_tokens": special_tokens, "align": align, "view": view}
    options |= {"batch_size": batch_size, "buffer_tokens": buffer_tokens}
    with progress(desc="counting", unit=" texts") as bar:
        if executor == "dask":
            result = _count_dask(
                shards, tokenizer, options, workers, scheduler, split_every, bar
            )
        else:
            parts = [_count_shard(s, tokenizer, options, bar.update) for s in shards]
            result = functools.reduce(_merge, parts)
    if result.num_sequences == 0:
        raise ValueError(f"the {len(shards)} shards hold no text: check the files")
    stats = sorted(result.params.pop("shard_stats", []), key=lambda s: s["shard"])
    result.params = {**params, "shard_stats": stats}
    if cache:
        result.save(path)
    return _apply_min_count(result, min_count)


def _as_shards(shards: Any) -> list[Shard]:
    plain = isinstance(shards, (str, os.PathLike))
    if plain or not all(isinstance(s, Shard) for s in shards):
        shards = file_shards(shards)
    if not shards:
        raise ValueError("shards is empty: pass at least one shard (file or dataset)")
    if len(set(shards)) != len(shards):
        raise ValueError("a shard is listed twice (its texts would count twice)")
    return list(shards)


def _count_for_bag(shard: Shard, tokenizer: Any, options: dict) -> PositionalMarginals:
    # one thread, on any cluster
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    return _count_shard(shard, tokenizer, options)


def _count_dask(shards, tokenizer, options, workers, scheduler, split_every, bar):
    import dask
    import dask.bag as db

    with dask_client(scheduler, workers) as client:
        client.subscribe_topic(
            PROGRESS_TOPIC, lambda e: bar.update(e[1] if isinstance(e, tuple) else e)
        )
        try:
            bag = db.from_sequence(shards, npartitions=len(shards))
            token = dask.delayed(tokenizer, pure=True, traverse=False)
            counted = bag.map(_count_for_bag, token, options)
            total = counted.fold(_merge, split_every=split_every)
            return client.compute(total).result()
        finally:
            client.unsubscribe_topic(PROGRESS_TOPIC)

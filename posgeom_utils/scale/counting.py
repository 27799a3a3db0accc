"""Positional counts of a sharded corpus: each shard counted by the streaming counter,
the sparse counts summed by a tree reduction on Dask.

Chapter: *Beyond one machine*. Shards are files (local paths or fsspec URLs; ``.txt``
one text a line, ``.jsonl`` one JSON object a line, GLUE-style ``.tsv``; compression
inferred from the name) or the shards of a Hugging Face dataset in streaming mode. Each
is counted by :func:`posgeom_utils.marginals.count_batches`, reading its texts in
batches; counts are integers and
:meth:`~posgeom_utils.marginals.PositionalMarginals.merge` adds them, so the merged
count equals the single-process count bit for bit, whatever the order or grouping of the
reduction."""

from __future__ import annotations

import csv
import functools
import json
import os
import resource
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
from .sweeps import dask_client

# noqa: F401 - the chapter's name
from .sweeps import start_local_cluster as local_cluster

EXECUTORS = ("dask", "serial")
#: file name endings -> shard kind (after removing a compression suffix)
SUFFIX_KINDS = {
    ".txt": "text",
    ".text": "text",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".tsv": "tsv",
}
COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst", ".lz4")
#: what a file system may report about a file's version (part of the cache key)
VERSION_FIELDS = (
    "mtime",
    "LastModified",
    "last_modified",
    "ETag",
    "etag",
    "md5",
    "crc32c",
)
#: the event topic on which Dask workers report the texts they counted
PROGRESS_TOPIC = "posgeom-count-progress"


class ShardError(RuntimeError):
    """Counting one shard failed; the message names the shard and the cause.
    Chapter: *Beyond one machine*."""


@dataclass(frozen=True)
class Shard:
    """One part of a corpus: a ``"text"``, ``"jsonl"`` or ``"tsv"`` file at ``source``,
    or (``"hf"``) shard ``index`` of ``num_shards`` of the Hugging Face dataset
    ``source``, streamed. ``text_field`` names the text column. Chapter: *Beyond one
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
        return f"{self.source}{config}[{self.split}] shard {self.index + 1}/{self.num_shards}"


def _kind_of(path: str) -> str:
    name = path.lower()
    for suffix in COMPRESSIONS:
        name = name.removesuffix(suffix)
    kind = next((k for s, k in SUFFIX_KINDS.items() if name.endswith(s)), None)
    if kind is None:
        fix = "name it *.txt, *.jsonl or *.tsv (optionally compressed, e.g. .gz), or pass kind=..."
        raise ValueError(
            f"cannot tell the format of shard {path!r} from its name: {fix}"
        )
    return kind


def file_shards(
    paths: str | Sequence[str], kind: str | None = None, text_field: str = "text"
) -> list[Shard]:
    """Shards from file paths or URLs; a pattern with ``*``/``?``/``[`` is expanded
    (through fsspec, remotely too) in sorted order. ``kind`` overrides the format
    inferred from each name. Chapter: *Beyond one machine*."""
    import fsspec

    paths = [
        os.fspath(p)
        for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)
    ]
    if not paths:
        raise ValueError("paths is empty: pass at least one shard file or pattern")
    if kind is not None:
        choice(kind, "kind", tuple(dict.fromkeys(SUFFIX_KINDS.values())))
    expanded: list[str] = []
    for pattern in paths:
        if not any(ch in pattern for ch in "*?["):
            expanded.append(pattern)
            continue
        fs, _, found = fsspec.core.get_fs_token_paths(pattern)
        if not found:
            raise FileNotFoundError(
                f"the pattern {pattern!r} matches no file: check the path"
            )
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        remote = protocol not in ("file", "local")
        expanded += [fs.unstrip_protocol(f) if remote else f for f in sorted(found)]
    if len(set(expanded)) != len(expanded):
        raise ValueError(
            "a shard is listed twice (its texts would count twice): pass each once"
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
    split=split, streaming=True)`` (offline: a builder such as ``"json"`` with local
    ``data_files``). Chapter: *Beyond one machine*."""
    files = [data_files] if isinstance(data_files, str) else data_files
    files = tuple(os.fspath(f) for f in files) if files else None
    k = int(getattr(_open_hub(dataset, config, split, files), "num_shards", 1) or 1)
    return [
        Shard(dataset, "hf", text_field, i, k, config, split, files) for i in range(k)
    ]


def _open_hub(dataset: str, config: str | None, split: str, data_files: Any) -> Any:
    import datasets

    datasets.disable_progress_bars()
    kwargs = {"data_files": list(data_files)} if data_files else {}
    try:
        return datasets.load_dataset(
            dataset, config, split=split, streaming=True, **kwargs
        )
    except Exception as exc:  # hub, network and builder errors come in many types
        what = f"dataset={dataset!r} (config={config!r}, split={split!r})"
        fix = "offline, pass a builder with local files, e.g. hub_shards('json', data_files=...)"
        raise FileNotFoundError(f"cannot stream {what}: {exc}; {fix}") from exc


def shard_texts(shard: Shard) -> Iterator[str]:
    """The texts of one shard, streamed (blank lines of text files skipped). Lines end
    at ``\n`` (or ``\r\n``) only, never at U+0085 or U+2028 inside a text; a damaged
    file raises a ``ValueError`` naming it and the line. Chapter: *Beyond one machine*."""
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
    """(line number, text) of a text, jsonl or tsv file."""
    import fsspec

    with fsspec.open(
        shard.source, "rt", encoding="utf-8", compression="infer", newline="\n"
    ) as fh:
        if shard.kind == "text":
            lines = ((k, line.strip()) for k, line in enumerate(fh, 1))
            yield from ((k, text) for k, text in lines if text)
        elif shard.kind == "jsonl":
            for k, line in enumerate(fh, 1):
                if line.strip():
                    yield k, _json_text(line, k, shard)
        else:  # tsv with a header row
            header = fh.readline().rstrip("\r\n").split("\t")
            field = shard.text_field if shard.text_field in header else "sentence"
            if field not in header:
                raise KeyError(
                    f"the header {header!r} has no column {shard.text_field!r}: pass "
                    "text_field=..."
                )
            column = header.index(field)
            rows = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
            for k, row in enumerate(rows, 2):
                if row and column < len(row):
                    yield k, row[column].strip()


def _json_text(line: str, k: int, shard: Shard) -> str:
    """The text field of one jsonl line, or a ``ValueError`` naming the file and line."""
    where = f"{shard.source}, line {k}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not JSON ({exc.msg}); expected one object per line")
    if not isinstance(row, dict) or shard.text_field not in row:
        fields = sorted(row) if isinstance(row, dict) else type(row).__name__
        raise KeyError(
            f"{where} has no field {shard.text_field!r} (fields: {fields}): "
            "pass text_field=..."
        )
    return row[shard.text_field]


def shard_fingerprint(shard: Shard) -> dict:
    """What identifies a shard's content without reading it (part of the cache key): its
    name and the size and version (mtime, ETag or checksum) its file system reports.
    Chapter: *Beyond one machine*."""
    key = {k: v for k, v in asdict(shard).items() if v is not None}
    if shard.kind != "hf":
        return {**key, **_file_info(shard.source)}
    files = [_file_info(f) for f in shard.data_files or ()]
    return {**key, "data_files": files} if files else key


def _file_info(path: str) -> dict:
    import fsspec

    fs, _, (resolved,) = fsspec.core.get_fs_token_paths(path)
    try:
        info = fs.info(resolved)
    except FileNotFoundError as exc:
        raise FileNotFoundError(
            f"shard {path!r} does not exist: check the path or URL"
        ) from exc
    versions = {f: str(info[f]) for f in VERSION_FIELDS if info.get(f) is not None}
    return {"size": info.get("size"), **versions}


def _report(texts: int) -> None:
    """Tell the client that ``texts`` more texts are counted (in a Dask task; else
    nothing)."""
    try:
        from distributed import get_worker

        get_worker().log_event(PROGRESS_TOPIC, texts)
    except (ImportError, ValueError):
        pass


def count_shard(
    shard: Shard,
    tokenizer: Any,
    n: int,
    special_tokens: str = "keep",
    align: str = "start",
    batch_size: int = 2048,
    buffer_tokens: int = 2**22,
    on_progress: Callable[[int], None] | None = None,
    view: str = "model",
) -> PositionalMarginals:
    """Count one shard with the streaming counter, or raise :class:`ShardError` naming
    it; ``params["shard_stats"]`` records its texts, tokens, seconds and the process's
    peak memory. Chapter: *Beyond one machine*."""
    start, stats = time.perf_counter(), {"shard": shard.name, "texts": 0}

    def batches() -> Iterator[list[str]]:
        texts = shard_texts(shard)
        while batch := [t for _, t in zip(range(batch_size), texts)]:
            bad = next((t for t in batch if not isinstance(t, str)), None)
            if bad is not None:
                raise TypeError(f"a text is a {type(bad).__name__}, not a str")
            stats["texts"] += len(batch)
            yield batch
            (on_progress or _report)(len(batch))

    try:
        result = count_batches(
            batches(), tokenizer, n, special_tokens, align, buffer_tokens, view=view
        )
    except Exception as exc:
        where = f"counting shard {shard.name!r} failed after {stats['texts']} texts"
        raise ShardError(f"{where}: {type(exc).__name__}: {exc}") from exc
    lengths = np.arange(result.length_hist.size)
    # special tokens included
    stats["tokens"] = int((lengths * result.length_hist).sum())
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


def _count_all(
    shards: list[Shard],
    tokenizer: Any,
    options: dict,
    executor: str,
    workers: int,
    scheduler: Any,
    split_every: int,
) -> PositionalMarginals:
    """The summed counts of ``shards``, here or on Dask. Chapter: *Beyond one
    machine*."""
    with progress(desc="counting", unit=" texts") as bar:
        if executor == "dask":
            return _count_dask(
                shards, tokenizer, options, workers, scheduler, split_every, bar
            )
        parts = [
            count_shard(s, tokenizer, **options, on_progress=bar.update) for s in shards
        ]
    return functools.reduce(_merge, parts)


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

    ``shards``: :class:`Shard` objects or file paths / URLs / patterns.
    ``executor="dask"`` counts them in parallel on ``scheduler`` (a
    ``distributed.Client`` or an address), or on a new local cluster of ``workers``
    processes, and sums them up a tree of ``split_every`` children per node;
    ``"serial"`` counts them here. A failing shard raises :class:`ShardError` and
    nothing is cached; the cache key covers every shard's :func:`shard_fingerprint`.
    Chapter: *Beyond one machine*."""
    fix = "'dask' for a cluster, 'serial' for this process"
    choice(executor, "executor", EXECUTORS, fix=fix)
    # the single-process counter's checks (n, policies, view, buffer_tokens)
    _check_options(tokenizer, n, special_tokens, align, buffer_tokens, view)
    integer(batch_size, "batch_size")
    if min_count is not None:
        integer(min_count, "min_count")
    integer(
        split_every, "split_every", 2, fix="a tree needs at least 2 children per node"
    )
    shards = _checked_shards(shards)
    params = counting_params(tokenizer, n, special_tokens, align, view)
    fingerprints = [shard_fingerprint(s) for s in shards]
    params["shards"] = sorted(fingerprints, key=lambda f: json.dumps(f, sort_keys=True))
    path = cache_path("marginals", cache_key(**params), ".npz")
    result = read_or_discard(path, PositionalMarginals.load) if cache else None
    if result is not None:
        result.params["from_cache"] = True
        return _apply_min_count(result, min_count)
    options = dict(n=n, special_tokens=special_tokens, align=align, view=view)
    options.update(batch_size=batch_size, buffer_tokens=buffer_tokens)
    result = _count_all(
        shards, tokenizer, options, executor, workers, scheduler, split_every
    )
    if result.num_sequences == 0:
        raise ValueError(
            f"the {len(shards)} shards hold no text: check the files (or text_field)"
        )
    stats = sorted(result.params.pop("shard_stats", []), key=lambda s: s["shard"])
    result.params = {**params, "shard_stats": stats}
    if cache:
        result.save(path)
    return _apply_min_count(result, min_count)


def _checked_shards(shards: Any) -> list[Shard]:
    plain = isinstance(shards, (str, os.PathLike)) or not all(
        isinstance(s, Shard) for s in shards
    )
    shards = file_shards(shards) if plain and len(shards) else list(shards)
    if not shards:
        raise ValueError("shards is empty: pass at least one shard (file or dataset)")
    if len(set(shards)) != len(shards):
        raise ValueError("a shard is listed twice: pass each shard once")
    return shards


def _count_for_bag(shard: Shard, tokenizer: Any, options: dict) -> PositionalMarginals:
    # one thread, on any cluster
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    return count_shard(shard, tokenizer, **options)


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
            return client.compute(
                counted.fold(_merge, split_every=split_every)
            ).result()
        finally:
            client.unsubscribe_topic(PROGRESS_TOPIC)

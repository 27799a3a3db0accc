"""Sharded counts (posgeom_utils.scale.counting): the merge is exact, on Dask as in one
process.

Chapter: *Beyond one machine*. The reference is always the single-process count
(:func:`posgeom_utils.marginals.positional_marginals`) of all the shards' texts; every
comparison is bit for bit (the CSR arrays, their dtypes, the supports and the length
histograms).
"""

from __future__ import annotations

import bz2
import gzip
import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posgeom_utils.marginals import (
    PositionalMarginals,
    count_batches,
    positional_marginals,
)
from posgeom_utils.scale import counting, sweeps
from posgeom_utils.scale.counting import (
    Shard,
    ShardError,
    file_shards,
    hub_shards,
    shard_texts,
    sharded_marginals,
)

WORDS = [
    "the",
    "a",
    "film",
    "movie",
    "is",
    "not",
    "good",
    "bad",
    "unbelievably",
    "cinematography",
    "café",
    "naïve",
    "123",
    ",",
    ".",
    "!",
    "it's",
    "zzyzx",
]


def _texts(seed: int, num: int, max_words: int = 40) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, max_words)))
        for _ in range(num)
    ]


def assert_same_count(a: PositionalMarginals, b: PositionalMarginals) -> None:
    """Bit-for-bit equality of two counts."""
    assert a.counts.shape == b.counts.shape
    for name in ("data", "indices", "indptr"):
        x, y = getattr(a.counts, name), getattr(b.counts, name)
        assert x.dtype == y.dtype, name
        np.testing.assert_array_equal(x, y, err_msg=name)
    np.testing.assert_array_equal(a.support, b.support)
    np.testing.assert_array_equal(a.length_hist, b.length_hist)


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory) -> Path:
    """Unequal shards in every format we read, one of them empty."""
    root = tmp_path_factory.mktemp("shards")
    # a trailing blank line
    (root / "a.txt").write_text("\n".join(_texts(1, 120)) + "\n\n")
    (root / "b.txt.gz").write_bytes(gzip.compress("\n".join(_texts(2, 7)).encode()))
    (root / "c.jsonl").write_text(
        "".join(json.dumps({"text": t, "label": 0}) + "\n" for t in _texts(3, 60, 80))
    )
    (root / "d.tsv").write_text(
        "sentence\tlabel\n" + "".join(f"{t}\t1\n" for t in _texts(4, 33))
    )
    (root / "e.txt.bz2").write_bytes(bz2.compress(b""))  # empty
    return root


@pytest.fixture(scope="module")
def client():
    """One local cluster of 2 single-threaded worker processes for the whole module."""
    from distributed import Client

    cluster = counting.local_cluster(2)
    with Client(cluster) as c:
        yield c
    cluster.close()


def _all_texts(shards):
    return [t for s in shards for t in shard_texts(s)]


def test_file_formats_are_read_as_the_single_process_reader_would(shard_dir):
    shards = file_shards(sorted(str(p) for p in shard_dir.iterdir()))
    assert [s.kind for s in shards] == ["text", "text", "jsonl", "tsv", "text"]
    assert [len(list(shard_texts(s))) for s in shards] == [120, 7, 60, 33, 0]
    assert list(shard_texts(shards[2]))[:3] == _texts(3, 60, 80)[:3]
    assert list(shard_texts(shards[3])) == _texts(4, 33)


@pytest.mark.parametrize("executor", ["serial", "dask"])
def test_sharded_count_equals_the_single_process_count_bit_for_bit(
    shard_dir, tokenizer, client, executor
):
    shards = file_shards(str(shard_dir / "*"))
    assert len(shards) == 5
    reference = positional_marginals(_all_texts(shards), tokenizer, n=48, cache=False)
    result = sharded_marginals(
        shards,
        tokenizer,
        n=48,
        executor=executor,
        scheduler=client,
        cache=False,
        batch_size=16,
        split_every=2,
    )
    assert_same_count(result, reference)
    stats = result.params["shard_stats"]
    assert sorted(s["texts"] for s in stats) == [0, 7, 33, 60, 120]
    assert sum(s["tokens"] for s in stats) == int(
        (np.arange(reference.length_hist.size) * reference.length_hist).sum()
    )


@pytest.mark.parametrize("view", ["model", "corpus"])
def test_dask_count_with_end_alignment_and_dropped_specials(
    shard_dir, tokenizer, client, view
):
    shards = file_shards([str(shard_dir / "a.txt"), str(shard_dir / "c.jsonl")])
    options = {"n": 20, "special_tokens": "drop", "align": "end", "min_count": 3}
    options |= {"view": view, "cache": False}
    reference = positional_marginals(_all_texts(shards), tokenizer, **options)
    result = sharded_marginals(shards, tokenizer, scheduler=client, **options)
    assert_same_count(result, reference)
    assert result.params["view"] == view


def test_the_comparison_can_fail(shard_dir, tokenizer, client):
    """Negative control: leaving one shard out changes the count, and the equality check
    sees it."""
    shards = file_shards(str(shard_dir / "*"))
    reference = positional_marginals(_all_texts(shards), tokenizer, n=48, cache=False)
    partial = sharded_marginals(
        shards[1:], tokenizer, n=48, scheduler=client, cache=False
    )
    with pytest.raises(AssertionError):
        assert_same_count(partial, reference)


@settings(max_examples=25, deadline=None)
@given(
    cuts=st.lists(st.integers(0, 80), max_size=6),
    order=st.randoms(use_true_random=False),
)
def test_merge_is_exact_for_any_split_and_any_order(tokenizer, cuts, order):
    """Property: counting parts separately and merging them, in any order, equals
    counting the whole."""
    texts = _texts(11, 80, 30)
    bounds = [0, *sorted(cuts), len(texts)]
    parts = [
        count_batches([texts[a:b]], tokenizer, n=24)
        for a, b in itertools.pairwise(bounds)
    ]
    order.shuffle(parts)
    merged = parts[0]
    for part in parts[1:]:
        merged = merged.merge(part)
    whole = count_batches([texts], tokenizer, n=24)
    assert_same_count(merged, whole)
    assert merged.counts.has_canonical_format


def test_merge_refuses_counts_made_differently(tokenizer):
    texts = _texts(5, 10)
    a = count_batches([texts], tokenizer, n=16)
    with pytest.raises(ValueError, match="shapes"):
        a.merge(count_batches([texts], tokenizer, n=17))
    with pytest.raises(ValueError, match="align"):
        a.merge(count_batches([texts], tokenizer, n=16, align="end"))
    with pytest.raises(TypeError, match="PositionalMarginals"):
        a.merge("counts")


@pytest.mark.parametrize("executor", ["serial", "dask"])
def test_a_failing_shard_is_named_and_nothing_is_kept(
    tmp_path, tokenizer, client, executor, fresh_cache
):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"text": "a good film"}) + "\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "fine"}) + "\n{not json\n")
    with pytest.raises(ShardError, match="bad.jsonl"):
        sharded_marginals(
            [str(good), str(bad)], tokenizer, n=8, executor=executor, scheduler=client
        )
    assert not list(fresh_cache.rglob("*.npz")), (
        "a failed count must not leave a (partial) result"
    )
    missing_field = tmp_path / "other.jsonl"
    missing_field.write_text(json.dumps({"review": "x"}) + "\n")
    with pytest.raises(ShardError, match="other.jsonl.*text_field"):
        sharded_marginals(
            [str(missing_field)], tokenizer, n=8, executor=executor, scheduler=client
        )


def test_cache_key_covers_the_shard_list_and_contents(
    tmp_path, tokenizer, fresh_cache, monkeypatch
):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("\n".join(_texts(1, 20)))
    b.write_text("\n".join(_texts(2, 20)))
    calls = []
    real = counting._count_shard
    monkeypatch.setattr(
        counting,
        "_count_shard",
        lambda shard, *args: calls.append(shard.name) or real(shard, *args),
    )
    first = sharded_marginals([str(a)], tokenizer, n=16, executor="serial")
    again = sharded_marginals([str(a)], tokenizer, n=16, executor="serial")
    assert calls == [str(a)]  # the second call was a cache hit
    assert_same_count(first, again)
    assert_same_count(first, sharded_marginals(a, tokenizer, n=16, executor="serial"))
    both = sharded_marginals([str(a), str(b)], tokenizer, n=16, executor="serial")
    assert calls == [str(a), str(a), str(b)]  # another shard list: counted again
    assert both.num_sequences == 40
    a.write_text("\n".join(_texts(9, 25)))  # new content, new size
    changed = sharded_marginals([str(a)], tokenizer, n=16, executor="serial")
    assert changed.num_sequences == 25
    assert len(list((fresh_cache / "marginals").glob("*.npz"))) == 3


def test_hugging_face_streaming_shards(tmp_path, tokenizer, client):
    """A dataset in streaming mode, split by its shards (offline: the json builder on
    local files)."""
    files = []
    for k in range(3):
        path = tmp_path / f"part-{k}.jsonl"
        path.write_text(
            "".join(json.dumps({"text": t}) + "\n" for t in _texts(20 + k, 15 + 10 * k))
        )
        files.append(str(path))
    shards = hub_shards("json", data_files=files)
    assert len(shards) == 3 and {s.num_shards for s in shards} == {3}
    assert "shard 2/3" in shards[1].name
    texts = [t for f in files for t in shard_texts(Shard(f, "jsonl"))]
    assert sorted(_all_texts(shards)) == sorted(texts)
    reference = positional_marginals(texts, tokenizer, n=32, cache=False)
    assert_same_count(
        sharded_marginals(shards, tokenizer, n=32, scheduler=client, cache=False),
        reference,
    )


def test_bad_input_gets_a_clear_error(tmp_path, tokenizer):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(ValueError, match="hold no text"):
        sharded_marginals([str(empty)], tokenizer, n=8, executor="serial", cache=False)
    serial = {"executor": "serial", "cache": False}
    with pytest.raises(ValueError, match="shards is empty"):
        sharded_marginals([], tokenizer, n=8, executor="serial")
    with pytest.raises(ValueError, match="executor"):
        sharded_marginals([str(empty)], tokenizer, n=8, executor="spark")
    with pytest.raises(ValueError, match="listed twice"):
        sharded_marginals([Shard(str(empty), "text")] * 2, tokenizer, n=8, **serial)
    # the single-process counter's checks, before any shard is read (not a ShardError)
    with pytest.raises(ValueError, match="align must be"):
        sharded_marginals([str(empty)], tokenizer, n=8, align="middle", **serial)
    with pytest.raises(ValueError, match="n=2 leaves no room"):
        sharded_marginals([str(empty)], tokenizer, n=2, **serial)
    short = tmp_path / "short.txt"
    short.write_text("a film\n")
    with pytest.raises(ValueError, match="longer than any sequence"):
        sharded_marginals([str(short)], tokenizer, n=64, **serial)
    with pytest.raises(ValueError, match="format"):
        file_shards([str(tmp_path / "corpus.parquet")])
    with pytest.raises(FileNotFoundError, match="matches no file"):
        file_shards([str(tmp_path / "nothing-*.txt")])
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        sharded_marginals([str(tmp_path / "missing.txt")], tokenizer, n=8, **serial)
    with pytest.raises(ValueError, match="scheduler"):
        sharded_marginals([str(empty)], tokenizer, n=8, scheduler=3, cache=False)
    with pytest.raises(FileNotFoundError, match="data_files"):
        hub_shards("json", data_files=[str(tmp_path / "absent-*.jsonl")])


def test_unreachable_scheduler_is_a_clear_error(tmp_path, tokenizer, monkeypatch):
    path = tmp_path / "a.txt"
    path.write_text("a film\n")
    monkeypatch.setattr(sweeps, "CONNECT_TIMEOUT", "1s")
    with pytest.raises(ConnectionError, match="scheduler='tcp://127.0.0.1:9'"):
        sharded_marginals(
            [str(path)], tokenizer, n=8, scheduler="tcp://127.0.0.1:9", cache=False
        )

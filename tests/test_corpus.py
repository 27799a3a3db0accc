"""posgeom_utils.corpus: the real corpora (SST-2, IMDB), input checks, and the synthetic corpora."""

from __future__ import annotations

import numpy as np
import pytest

from posgeom_utils.corpus import (
    SYNTHETIC_KINDS,
    Corpus,
    check_texts,
    load_corpus,
    synthetic_corpus,
    synthetic_mu,
)
from posgeom_utils.geometry import hellinger_distances

# ----------------------------------------------------------------------------- real corpora

#: (dataset, split) -> (rows, {label: count}), from shared/data/README.md
EXPECTED = {
    ("sst2", "train"): (67_349, {0: 29_780, 1: 37_569}),
    ("sst2", "validation"): (872, {0: 428, 1: 444}),
    ("sst2", "test"): (1_821, {-1: 1_821}),
    ("imdb", "train"): (25_000, {0: 12_500, 1: 12_500}),
    ("imdb", "test"): (25_000, {0: 12_500, 1: 12_500}),
}


@pytest.fixture(scope="module")
def real(data_dir):
    """Load each (dataset, split, strip_html) once per module."""
    loaded: dict = {}

    def get(dataset: str, split: str, strip_html: bool = True) -> Corpus:
        key = (dataset, split, strip_html)
        if key not in loaded:
            loaded[key] = load_corpus(dataset, split, data_dir=data_dir, strip_html=strip_html)
        return loaded[key]

    return get


@pytest.mark.data
@pytest.mark.parametrize(("dataset", "split"), list(EXPECTED))
def test_real_split_counts(real, dataset, split):
    corpus = real(dataset, split)
    rows, label_counts = EXPECTED[(dataset, split)]
    assert isinstance(corpus, Corpus)
    assert (corpus.name, corpus.split) == (dataset, split)
    assert len(corpus) == len(corpus.texts) == len(corpus.labels) == rows
    assert corpus.labels.dtype == np.int64
    values, counts = np.unique(corpus.labels, return_counts=True)
    assert dict(zip(values.tolist(), counts.tolist())) == label_counts
    assert all(isinstance(t, str) and t for t in corpus.texts)


@pytest.mark.data
def test_sst2_texts_are_stripped_and_first_rows(real):
    train = real("sst2", "train")
    # GLUE train/dev lines end with a trailing space; the loader strips it
    assert all(t == t.strip() for t in train.texts)
    assert all("\t" not in t for t in train.texts[:1000])
    test = real("sst2", "test")
    assert np.all(test.labels == -1)
    assert not any(t.isdigit() for t in test.texts[:100])  # the index column is not taken as text


@pytest.mark.data
def test_imdb_strip_html(real):
    stripped = real("imdb", "train", strip_html=True)
    raw = real("imdb", "train", strip_html=False)
    assert not any("<br />" in t for t in stripped.texts)
    with_tags = sum("<br />" in t for t in raw.texts)
    assert with_tags > 1000  # most IMDB reviews have <br /><br /> paragraph breaks
    assert len(raw) == len(stripped)
    np.testing.assert_array_equal(raw.labels, stripped.labels)
    i = next(k for k, t in enumerate(raw.texts) if "<br />" in t)
    assert stripped.texts[i] == raw.texts[i].replace("<br />", " ")
    assert stripped.meta["strip_html"] is True and raw.meta["strip_html"] is False
    assert stripped.key != raw.key  # so cached marginals of the two never collide


@pytest.mark.data
def test_explicit_data_dir_overrides_env(data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("POSGEOM_DATA_DIR", str(data_dir))
    assert load_corpus("sst2", "validation").source.endswith("dev.tsv")
    with pytest.raises(FileNotFoundError, match="data_dir"):
        load_corpus("sst2", "validation", data_dir=tmp_path)  # the explicit (empty) folder wins
    monkeypatch.setenv("POSGEOM_DATA_DIR", str(tmp_path))  # an empty folder
    assert len(load_corpus("sst2", "validation", data_dir=data_dir)) == 872
    with pytest.raises(FileNotFoundError, match="POSGEOM_DATA_DIR"):
        load_corpus("sst2", "validation")


@pytest.mark.data
def test_sample_is_seeded_ordered_and_sized(real):
    corpus = real("sst2", "validation")
    a = corpus.sample(100, seed=3)
    b = corpus.sample(100, seed=3)
    c = corpus.sample(100, seed=4)
    assert len(a) == 100 and len(a.labels) == 100
    assert a.texts == b.texts
    np.testing.assert_array_equal(a.labels, b.labels)
    assert a.texts != c.texts
    # the subset keeps corpus order and pairs each text with its own label
    index = {t: i for i, t in enumerate(corpus.texts)}
    positions = [index[t] for t in a.texts]
    assert positions == sorted(positions)
    assert len(set(positions)) == 100
    np.testing.assert_array_equal(a.labels, corpus.labels[positions])
    assert a.meta["sample_size"] == 100 and a.meta["sample_seed"] == 3
    assert a.key != corpus.key and a.key != c.key


def _toy_corpus(k: int = 10) -> Corpus:
    return Corpus("toy", "train", [f"text {i}" for i in range(k)], np.arange(k) % 2)


def test_sample_of_none_or_too_many_is_everything():
    corpus = _toy_corpus()
    for size in (None, 10, 1000):
        assert corpus.sample(size).texts == corpus.texts
    assert len(corpus.sample(np.int64(4), seed=1)) == 4
    for size in (0, -1, 2.5):
        with pytest.raises(ValueError, match="sample size"):
            corpus.sample(size)


def test_unknown_dataset_split_or_missing_files(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="dataset must be one of"):
        load_corpus("sst5", "train")
    for dataset, split in (("imdb", "validation"), ("sst2", "dev"), ("sst2", "unsupervised")):
        with pytest.raises(ValueError, match=f"split must be one of .*{split!r}"):
            load_corpus(dataset, split)
    with pytest.raises(FileNotFoundError) as info:
        load_corpus("sst2", "train", data_dir=tmp_path)
    message = str(info.value)
    assert "data_dir" in message and str(tmp_path) in message
    assert "sst2/train.tsv" in message and "imdb/train.jsonl.gz" in message  # the expected layout
    monkeypatch.delenv("POSGEOM_DATA_DIR", raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="POSGEOM_DATA_DIR.*offline.*data_dir"):
        load_corpus("sst2", "validation")
    (tmp_path / "sst2").mkdir()
    (tmp_path / "sst2" / "train.tsv").write_text("sentence\tlabel\n", encoding="utf-8")
    with pytest.raises(ValueError, match="empty"):
        load_corpus("sst2", "train", data_dir=tmp_path)


def test_small_local_files(tmp_path):
    """A hand-written folder in the shared/data layout loads with the right texts and labels."""
    import gzip
    import json

    (tmp_path / "sst2").mkdir()
    (tmp_path / "sst2" / "dev.tsv").write_text("sentence\tlabel\nit 's good \t1\n\nbad film \t0\n", encoding="utf-8")
    (tmp_path / "sst2" / "test.tsv").write_text("index\tsentence\n0\tsome text \n1\tmore\n", encoding="utf-8")
    (tmp_path / "imdb").mkdir()
    rows = [{"id": 1, "rating": 2, "label": 0, "text": "Bad.<br /><br />Very bad."},
            {"id": 7, "rating": 9, "label": 1, "text": "Great"}]
    with gzip.open(tmp_path / "imdb" / "train.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in rows))
    dev = load_corpus("sst2", "validation", data_dir=tmp_path)
    assert dev.texts == ["it 's good", "bad film"] and dev.labels.tolist() == [1, 0]
    test = load_corpus("sst2", "test", data_dir=str(tmp_path))
    assert test.texts == ["some text", "more"] and test.labels.tolist() == [-1, -1]
    imdb = load_corpus("imdb", "train", data_dir=tmp_path)
    assert imdb.texts == ["Bad.  Very bad.", "Great"] and imdb.labels.tolist() == [0, 1]
    assert load_corpus("imdb", "train", data_dir=tmp_path, strip_html=False).texts[0] == rows[0]["text"]


def test_check_texts():
    assert check_texts(("a", "", "b")) == ["a", "", "b"]
    assert check_texts(_toy_corpus(3)) == ["text 0", "text 1", "text 2"]
    for bad in (42, None, 3.5, {"a", "b"}, (t for t in ["a"]), "a single text", b"bytes"):
        with pytest.raises(TypeError, match="texts must be a sequence"):
            check_texts(bad)
    with pytest.raises(ValueError, match="docs is empty"):
        check_texts((), name="docs")
    with pytest.raises(TypeError, match=r"texts\[1\] is a int"):
        check_texts(["a", 3, "b"])


# ----------------------------------------------------------------------------- synthetic corpus

@pytest.mark.parametrize("kind", SYNTHETIC_KINDS)
def test_synthetic_corpus_is_seeded_and_drawn_from_its_mu(kind):
    a = synthetic_corpus(kind, n=6, V=8, num_sequences=20_000, seed=7)
    b = synthetic_corpus(kind, n=6, V=8, num_sequences=20_000, seed=7)
    c = synthetic_corpus(kind, n=6, V=8, num_sequences=20_000, seed=8)
    assert a.ids.shape == (20_000, 6) and a.ids.dtype == np.int64 and (a.n, a.V) == (6, 8)
    assert np.all(a.mu >= 0) and np.allclose(a.mu.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.mu, synthetic_mu(kind, n=6, V=8, seed=7))
    assert not np.array_equal(a.ids, c.ids) and a.params["kind"] == kind and a.params["seed"] == 7
    freq = np.stack([np.bincount(a.ids[:, i], minlength=8) for i in range(6)]) / 20_000
    assert np.max(np.abs(freq - a.mu)) < 0.02


def test_stationary_rows_identical():
    mu = synthetic_mu("stationary", n=9, V=25, seed=3)
    assert np.all(mu == mu[0])
    assert np.all(hellinger_distances(mu) < 1e-7)


@pytest.mark.parametrize(("n", "V"), [(8, 32), (6, 6), (5, 40)])
def test_shift_is_circulant(n, V):
    assert V % n == 0
    D = hellinger_distances(synthetic_mu("shift", n=n, V=V, seed=0, strength=3.0))
    i, j = np.indices((n, n))
    circulant = D[(i - j) % n, 0]
    np.testing.assert_allclose(D, circulant, rtol=0, atol=1e-10)
    assert D[1, 0] > 0.01  # not trivially constant


def test_synthetic_bad_input():
    with pytest.raises(ValueError, match="kind must be one of"):
        synthetic_mu("zigzag", 4, 8)
    with pytest.raises(ValueError, match="kind must be one of"):
        synthetic_corpus("zigzag", n=4, V=8)
    for rank in (0, 9):
        with pytest.raises(ValueError, match=r"rank must be an integer in \[1, 8\]"):
            synthetic_mu("lowrank", 4, 8, rank=rank)
    with pytest.raises(ValueError, match="n must be an integer >= 1, got n=0"):
        synthetic_mu("drift", 0, 8)
    with pytest.raises(ValueError, match="V must be an integer >= 2, got V=1"):
        synthetic_mu("drift", 4, 1)
    for num in (0, -5):
        with pytest.raises(ValueError, match="num_sequences"):
            synthetic_corpus("drift", n=4, V=8, num_sequences=num)

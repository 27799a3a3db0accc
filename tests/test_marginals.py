"""posgeom_utils.marginals against a brute-force reference (one tokenizer call per text, HF truncation)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import posgeom_utils.marginals as marginals_module
from posgeom_utils.corpus import Corpus
from posgeom_utils.marginals import PositionalMarginals, marginals_from_ids, positional_marginals

#: words chosen to give single and multi-piece WordPiece tokens, punctuation, case and accents
WORDS = [
    "the", "a", "film", "movie", "is", "was", "not", "good", "bad", "great", "plot", "actors",
    "unbelievably", "cinematography", "overwrought", "Hello", "WORLD", ",", ".", "!", "?", "it's",
    "don't", "café", "naïve", "123", "4.5", "(really)", "--", "zzyzx", "antidisestablishment",
]


def random_texts(seed: int, num: int, max_words: int) -> list[str]:
    """Seeded texts of random words, with empty strings and some texts longer than any n used."""
    rng = random.Random(seed)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, max_words))) for _ in range(num)]
    texts[0] = ""
    texts[num // 2] = "   "  # whitespace only: no content tokens either
    texts[-1] = " ".join(rng.choice(WORDS) for _ in range(60))  # longer than every n below
    return texts


def reference(texts, tokenizer, n, special_tokens, align):
    """Brute force: counts (n x V), support, length histogram, from HF tokenizer calls one text at a time."""
    add = special_tokens == "keep"
    V = len(tokenizer)
    counts = np.zeros((n, V), dtype=np.int64)
    support = np.zeros(n, dtype=np.int64)
    lengths = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=add, truncation=True, max_length=n)["input_ids"]
        assert len(ids) <= n
        if align == "end":
            ids = ids[::-1]  # position 0 = the last token the model sees
        for i, tok in enumerate(ids):
            counts[i, tok] += 1
            support[i] += 1
        lengths.append(len(tokenizer(text, add_special_tokens=add)["input_ids"]))
    length_hist = np.bincount(lengths)
    return counts, support, length_hist


def assert_matches_reference(result: PositionalMarginals, texts, tokenizer, n, special_tokens, align):
    counts, support, length_hist = reference(texts, tokenizer, n, special_tokens, align)
    assert result.counts.shape == (n, len(tokenizer))
    np.testing.assert_array_equal(result.counts.toarray(), counts)
    np.testing.assert_array_equal(result.support, support)
    np.testing.assert_array_equal(np.trim_zeros(result.length_hist, "b"), length_hist)
    assert result.num_sequences == len(texts)
    assert (result.n, result.V) == (n, len(tokenizer))


@pytest.fixture(scope="module")
def texts():
    return random_texts(seed=0, num=40, max_words=25)


@pytest.mark.parametrize("special_tokens", ["keep", "drop"])
@pytest.mark.parametrize("align", ["start", "end"])
@pytest.mark.parametrize("n", [3, 7, 16, 48])
def test_counts_match_brute_force(texts, tokenizer, special_tokens, align, n):
    result = positional_marginals(texts, tokenizer, n=n, special_tokens=special_tokens, align=align,
                                  cache=False, batch_size=7, buffer_tokens=50)
    assert_matches_reference(result, texts, tokenizer, n, special_tokens, align)
    assert result.params["special_tokens"] == special_tokens and result.params["align"] == align


def test_corpus_input(tokenizer):
    texts = random_texts(seed=3, num=12, max_words=10)
    corpus = Corpus("toy", "train", texts, np.zeros(len(texts), dtype=np.int64))
    result = positional_marginals(corpus, tokenizer, n=8, cache=False)
    assert_matches_reference(result, texts, tokenizer, 8, "keep", "start")
    assert result.params["corpus"]["name"] == "toy"


# ----------------------------------------------------------------------------- cache

def test_cache_hit_returns_identical_arrays(texts, tokenizer, fresh_cache, monkeypatch):
    first = positional_marginals(texts, tokenizer, n=12, align="end", cache=True)
    files = list((fresh_cache / "marginals").glob("*.npz"))
    assert len(files) == 1
    assert not list((fresh_cache / "marginals").glob(".*"))  # no temporary file left behind

    def boom(*args, **kwargs):
        raise AssertionError("a cache hit must not count again")

    monkeypatch.setattr(marginals_module, "count_batches", boom)
    second = positional_marginals(texts, tokenizer, n=12, align="end", cache=True)
    assert (first.counts != second.counts).nnz == 0
    assert second.counts.dtype == first.counts.dtype
    np.testing.assert_array_equal(first.support, second.support)
    np.testing.assert_array_equal(first.length_hist, second.length_hist)
    assert second.params == first.params
    # other parameters are other entries
    with pytest.raises(AssertionError, match="cache hit"):
        positional_marginals(texts, tokenizer, n=12, align="start", cache=True)
    with pytest.raises(AssertionError, match="cache hit"):
        positional_marginals(texts[:-1], tokenizer, n=12, align="end", cache=True)


def test_cache_false_writes_nothing(texts, tokenizer, fresh_cache):
    positional_marginals(texts, tokenizer, n=6, cache=False)
    assert not list(fresh_cache.rglob("*.npz"))


def test_cache_key_ignores_tokenizer_call_state(texts, fresh_cache, monkeypatch):
    """Calling the tokenizer (which sets its backend's truncation/padding state) must not change the cache
    key: the same texts, tokenizer and parameters must hit the cache whatever was tokenized before."""
    from posgeom_utils.models import load_tokenizer

    tok = load_tokenizer()  # a private instance, in the state from_pretrained leaves it in
    first = positional_marginals(texts, tok, n=6, cache=True)
    tok("an unrelated call", truncation=True, max_length=4)
    tok(["another", "call with padding"], padding="max_length", max_length=9)

    def boom(*args, **kwargs):
        raise AssertionError("cache miss: the key changed although nothing that matters changed")

    monkeypatch.setattr(marginals_module, "count_batches", boom)
    second = positional_marginals(texts, tok, n=6, cache=True)
    assert (first.counts != second.counts).nnz == 0
    assert len(list((fresh_cache / "marginals").glob("*.npz"))) == 1


def test_cache_key_separates_different_texts(tokenizer, fresh_cache):
    """Texts that join alike, and two corpora with the same name, split and size, get their own entries."""
    joined = positional_marginals(["good film\x1ebad film"], tokenizer, n=4, special_tokens="drop", min_count=1)
    split = positional_marginals(["good film", "bad film"], tokenizer, n=4, special_tokens="drop", min_count=1)
    assert joined.num_sequences == 1 and split.num_sequences == 2
    labels = np.zeros(2, dtype=np.int64)
    pos = Corpus("imdb", "train", ["great film", "loved it"], labels, meta={"strip_html": True})
    neg = Corpus("imdb", "train", ["awful", "bad bad bad"], labels, meta={"strip_html": True})
    great = tokenizer.convert_tokens_to_ids("great")
    assert positional_marginals(pos, tokenizer, n=1, special_tokens="drop").counts[0, great] == 1
    assert positional_marginals(neg, tokenizer, n=1, special_tokens="drop").counts[0, great] == 0


# ----------------------------------------------------------------------------- min_count and n

def test_min_count_keeps_prefix(texts, tokenizer):
    full = positional_marginals(texts, tokenizer, n=48, cache=False)
    for k in (1, 3, 10, len(texts) - 2):
        cut = positional_marginals(texts, tokenizer, n=48, min_count=k, cache=False)
        keep = int(np.sum(full.support >= k))
        assert cut.n == keep
        assert np.all(cut.support >= k)
        assert keep == 48 or full.support[keep] < k
        np.testing.assert_array_equal(cut.counts.toarray(), full.counts.toarray()[:keep])
        np.testing.assert_array_equal(cut.support, full.support[:keep])
        assert cut.params["min_count"] == k


def test_n_longer_than_every_sequence(tokenizer):
    texts = ["a short one", "two words", ""]
    longest = max(len(tokenizer(t)["input_ids"]) for t in texts)
    with pytest.raises(ValueError, match=r"n=50 is longer than any sequence") as info:
        positional_marginals(texts, tokenizer, n=50, cache=False)
    assert f"n <= {longest}" in str(info.value)
    ok = positional_marginals(texts, tokenizer, n=50, min_count=1, cache=False)
    assert ok.n == longest
    assert positional_marginals(texts, tokenizer, n=longest, cache=False).n == longest


def test_bad_counting_options(texts, tokenizer):
    def count(texts=("a text",), **kwargs):
        return positional_marginals(list(texts) if isinstance(texts, tuple) else texts, tokenizer,
                                    **{"n": 4, "cache": False, **kwargs})

    for n in (0, -3, 2.0, "8", None, True):
        with pytest.raises(ValueError, match="n must be an integer >= 1"):
            count(n=n)
    for kwargs, match in (({"n": 8, "min_count": len(texts) + 1, "texts": texts}, "min_count"),
                          ({"n": 8, "min_count": 0, "texts": texts}, "min_count"),
                          ({"n": 2}, "no room for text"), ({"special_tokens": "bogus"}, "special_tokens must be"),
                          ({"align": "bogus"}, "align must be one of"), ({"batch_size": 0}, "batch_size"),
                          ({"texts": []}, "texts is empty")):
        with pytest.raises(ValueError, match=match):
            count(**kwargs)
    with pytest.raises(TypeError, match="texts"):
        count(texts="a text")
    assert count(n=2, special_tokens="drop").n == 2


# ----------------------------------------------------------------------------- derived quantities

@pytest.fixture(scope="module")
def result(texts, tokenizer):
    return positional_marginals(texts, tokenizer, n=20, cache=False, batch_size=9)


#: three sequences (0, 1), (0, 2), (1, 2) over V = 4 tokens, counted by hand: position 0 holds tokens
#: 0, 0, 1 and position 1 tokens 1, 2, 2; token 3 never occurs. (c_v + a) / (3 + 4 a) written out:
HAND_SMOOTHED = {
    0.0: [[2 / 3, 1 / 3, 0, 0], [0, 1 / 3, 2 / 3, 0]],
    0.5: [[2.5 / 5, 1.5 / 5, 0.5 / 5, 0.5 / 5], [0.5 / 5, 1.5 / 5, 2.5 / 5, 0.5 / 5]],
    1.0: [[3 / 7, 2 / 7, 1 / 7, 1 / 7], [1 / 7, 2 / 7, 3 / 7, 1 / 7]],
}


@pytest.mark.parametrize("a", sorted(HAND_SMOOTHED))
def test_smoothing(a):
    tiny = marginals_from_ids(np.array([[0, 1], [0, 2], [1, 2]]), V=4)
    np.testing.assert_allclose(tiny.mu(smoothing=a), HAND_SMOOTHED[a], rtol=1e-12, atol=1e-15)
    for bad in (-0.5, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match=r"smoothing must be a finite number >= 0.*smoothing="):
            tiny.mu(smoothing=bad)


def test_smoothing_fills_unreached_positions(tokenizer):
    raw = positional_marginals(["one", "one two three four"], tokenizer, n=8, cache=False, min_count=1)
    # a position with zero support: only reachable through truncate(n) of a bigger n, so build one
    zero = PositionalMarginals(raw.counts, np.r_[raw.support[:-1], 0], raw.length_hist)
    with pytest.raises(ValueError, match="no tokens"):
        zero.mu()
    smoothed = zero.mu(smoothing=1.0)
    np.testing.assert_allclose(smoothed.sum(axis=1)[:-1], 1.0, atol=1e-12)


@pytest.mark.parametrize("base", [2.0, np.e])
def test_entropy_brute_force(result, base):
    from scipy.stats import entropy

    expected = [entropy(row, base=base) for row in result.counts.toarray()]  # scipy normalises the counts
    np.testing.assert_allclose(result.entropy(base=base), expected, rtol=1e-12, atol=1e-12)
    assert result.entropy()[0] == 0.0  # [CLS]: a point mass
    assert result.entropy()[5] > 1.0
    for bad in (1, 1.0, 0, -2.0, float("nan")):
        with pytest.raises(ValueError, match=r"base must be a finite number > 0.*base="):
            result.entropy(base=bad)


def test_top_tokens(result):
    dense = result.counts.toarray()
    for i in (0, 3, result.n - 1):
        ids, probs = result.top_tokens(i, k=5)
        assert len(ids) == len(probs) == min(5, np.count_nonzero(dense[i]))
        assert np.all(np.diff(probs) <= 0)
        np.testing.assert_allclose(probs, dense[i, ids] / result.support[i])
        rest = np.delete(dense[i], ids)
        assert rest.max() <= dense[i, ids].min()
    ids, probs = result.top_tokens(0, k=3)
    assert len(ids) == 1 and probs[0] == 1.0  # [CLS] only
    for bad in (-1, result.n):
        with pytest.raises(ValueError, match=r"i must be an integer in \[0, 19\]"):
            result.top_tokens(bad)
    for k in (-1, 0, 2.5):
        with pytest.raises(ValueError, match=r"k must be an integer >= 1.*k="):
            result.top_tokens(0, k=k)


def test_truncate(result):
    cut = result.truncate(n=7)
    assert cut.n == 7 and cut.params["n"] == 7
    np.testing.assert_array_equal(cut.counts.toarray(), result.counts.toarray()[:7])
    np.testing.assert_array_equal(cut.length_hist, result.length_hist)
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        result.truncate(n=0)
    beyond = result.truncate(n=result.n + 5)
    assert beyond.n == result.n and beyond.params["n"] == beyond.n  # params describe their arrays


def test_save_load_round_trip(result, tmp_path):
    path = result.save(tmp_path / "sub" / "marginals.npz")
    assert path.is_file()
    loaded = PositionalMarginals.load(path)
    assert loaded.counts.shape == result.counts.shape
    assert (loaded.counts != result.counts).nnz == 0
    np.testing.assert_array_equal(loaded.support, result.support)
    np.testing.assert_array_equal(loaded.length_hist, result.length_hist)
    assert loaded.params == result.params
    np.testing.assert_array_equal(loaded.mu(), result.mu())


# ----------------------------------------------------------------------------- property test: texts

@settings(max_examples=25, deadline=None)
@given(
    words=st.lists(st.lists(st.sampled_from(WORDS), max_size=14), min_size=1, max_size=8),
    n=st.integers(min_value=3, max_value=12),
    special_tokens=st.sampled_from(["keep", "drop"]),
    align=st.sampled_from(["start", "end"]),
    batch_size=st.integers(min_value=1, max_value=4),
)
def test_property_random_word_corpora(tokenizer, words, n, special_tokens, align, batch_size):
    texts = [" ".join(w) for w in words]
    _, support, _ = reference(texts, tokenizer, n, special_tokens, align)
    if support[-1] == 0:
        with pytest.raises(ValueError, match=f"n={n}"):
            positional_marginals(texts, tokenizer, n=n, special_tokens=special_tokens, align=align,
                                 cache=False, batch_size=batch_size)
        return
    result = positional_marginals(texts, tokenizer, n=n, special_tokens=special_tokens, align=align,
                                  cache=False, batch_size=batch_size, buffer_tokens=7)
    assert_matches_reference(result, texts, tokenizer, n, special_tokens, align)


# ----------------------------------------------------------------------------- marginals_from_ids

def brute_force_ids(ids: np.ndarray, V: int, n: int):
    counts = np.zeros((n, V), dtype=np.int64)
    for row in ids:
        for i in range(n):
            counts[i, row[i]] += 1
    return counts


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_property_marginals_from_ids(data):
    V = data.draw(st.integers(min_value=1, max_value=12), label="V")
    shape = data.draw(st.tuples(st.integers(1, 15), st.integers(1, 8)), label="shape")
    dtype = data.draw(st.sampled_from([np.int8, np.int32, np.int64, np.uint16]), label="dtype")
    ids = data.draw(hnp.arrays(dtype, shape, elements=st.integers(0, V - 1)), label="ids")
    result = marginals_from_ids(ids, V=V)
    np.testing.assert_array_equal(result.counts.toarray(), brute_force_ids(ids, V, shape[1]))
    np.testing.assert_array_equal(result.support, np.full(shape[1], shape[0]))
    np.testing.assert_allclose(result.mu().sum(axis=1), 1.0, atol=1e-12)


@pytest.mark.parametrize(
    ("ids", "V"),
    [
        (np.arange(5), 10),  # 1-D
        (np.zeros((3, 0), dtype=np.int64), 10),  # empty
        (np.array([[0, 1], [-1, 2]]), 10),  # negative
        (np.array([[0, 1], [10, 2]]), 10),  # id >= V
        (np.array([[0.0, 1.0]]), 10),  # not integers
    ],
)
def test_marginals_from_ids_bad_input(ids, V):
    with pytest.raises(ValueError, match="ids must be"):
        marginals_from_ids(ids, V=V)


def test_marginals_from_ids_truncates_to_n():
    ids = np.random.default_rng(0).integers(0, 9, size=(50, 6))
    for n in (1, 4, 100):
        m = marginals_from_ids(ids, V=11, n=n)
        np.testing.assert_array_equal(m.counts.toarray(), brute_force_ids(ids, 11, min(n, 6)))
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        marginals_from_ids(ids, V=11, n=0)


# ----------------------------------------------------------------------------- truncation views

def corpus_view_reference(texts, tokenizer, n, special_tokens, align):
    """Brute force for view="corpus": the first (end: last) n tokens of the untruncated sequence."""
    add = special_tokens == "keep"
    counts = np.zeros((n, len(tokenizer)), dtype=np.int64)
    support = np.zeros(n, dtype=np.int64)
    for text in texts:
        ids = tokenizer(text, add_special_tokens=add)["input_ids"]  # no truncation
        if align == "end":
            ids = ids[::-1]
        for i, tok in enumerate(ids[:n]):
            counts[i, tok] += 1
            support[i] += 1
    return counts, support


@pytest.mark.parametrize("special_tokens", ["keep", "drop"])
@pytest.mark.parametrize("align", ["start", "end"])
@pytest.mark.parametrize("n", [3, 7, 16, 48])
def test_corpus_view_matches_brute_force(texts, tokenizer, special_tokens, align, n):
    result = positional_marginals(texts, tokenizer, n=n, special_tokens=special_tokens, align=align,
                                  view="corpus", cache=False, batch_size=7, buffer_tokens=50)
    counts, support = corpus_view_reference(texts, tokenizer, n, special_tokens, align)
    np.testing.assert_array_equal(result.counts.toarray(), counts)
    np.testing.assert_array_equal(result.support, support)
    assert result.params["view"] == "corpus"


def test_the_views_differ_only_on_truncated_texts(tokenizer):
    """On texts shorter than n the two views agree; on a long text the model view puts [SEP] at n - 1,
    the corpus view a word (negative control for the test above: the views are not the same count)."""
    short = ["a good film", "not bad at all"]
    model = positional_marginals(short, tokenizer, n=12, min_count=1, cache=False)
    corpus = positional_marginals(short, tokenizer, n=12, min_count=1, view="corpus", cache=False)
    assert (model.counts != corpus.counts).nnz == 0
    long = [" ".join(["film"] * 40)]
    model = positional_marginals(long, tokenizer, n=8, cache=False)
    corpus = positional_marginals(long, tokenizer, n=8, view="corpus", cache=False)
    assert model.top_tokens(7, 1)[0][0] == tokenizer.sep_token_id
    assert corpus.top_tokens(7, 1)[0][0] == tokenizer.convert_tokens_to_ids("film")
    with pytest.raises(ValueError, match="view must be one of"):
        positional_marginals(short, tokenizer, n=8, view="truncated", cache=False)

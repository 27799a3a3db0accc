"""posgeom_utils.tasks: the order-detection task (original vs shuffled word order), the masked task.

On a small seeded corpus of single-token words (so every text is identified by its bag of tokens) the
task is checked row by row against padded_ids of the same texts: label 0 rows are the original order,
label 1 rows are a different permutation of the same tokens, padding is 0 and at the end, the vocabulary
is compact. Also shuffle_within, the argument checks, and class balance on the real SST-2 train split.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from posgeom_utils.corpus import Corpus, load_corpus  # noqa: E402
from posgeom_utils.tasks import TokenTask, order_task, padded_ids, shuffle_within  # noqa: E402

WORDS = "the cat dog runs fast slow red blue house tree river sun".split()  # one WordPiece token each


def word_corpus(n_texts: int = 200, min_words: int = 3, max_words: int = 14, seed: int = 0) -> Corpus:
    """Seeded random texts over WORDS, with distinct bags of words (so a row identifies its text)."""
    rng = np.random.default_rng(seed)
    texts, bags = [], set()
    while len(texts) < n_texts:
        words = list(rng.choice(WORDS, size=rng.integers(min_words, max_words + 1)))
        bag = tuple(sorted(words))
        if bag not in bags:
            bags.add(bag)
            texts.append(" ".join(words))
    return Corpus("words", "train", texts, np.zeros(n_texts, dtype=np.int64), source="synthetic")


def all_rows(task: TokenTask) -> tuple[np.ndarray, np.ndarray]:
    return (np.concatenate([task.X_train.numpy(), task.X_eval.numpy()]),
            np.concatenate([task.y_train.numpy(), task.y_eval.numpy()]))


def padding_at_end(X: np.ndarray, pad: int) -> bool:
    """Each row is real tokens followed only by padding."""
    real = X != pad
    return bool(np.all(real[:, :-1] >= real[:, 1:]))


# --------------------------------------------------------------------------- shuffle_within


def test_shuffle_within_permutes_real_tokens_and_keeps_padding():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 12, size=50)
    ids = np.full((50, 12), -1, dtype=np.int64)
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(0, 30, size=n)  # 0 is a real token here: padding is -1
    out = shuffle_within(ids, np.random.default_rng(1))
    assert out.shape == ids.shape and out.dtype == ids.dtype
    np.testing.assert_array_equal((out >= 0).sum(1), lengths)
    assert padding_at_end(out, -1)
    for row in range(50):
        np.testing.assert_array_equal(np.sort(out[row]), np.sort(ids[row]))
    assert np.any(out != ids)  # something moved
    assert np.array_equal(ids[lengths == 1], out[lengths == 1])  # one token: nothing to permute
    np.testing.assert_array_equal(out, shuffle_within(ids, np.random.default_rng(1)))  # seeded
    assert not np.array_equal(out, shuffle_within(ids, np.random.default_rng(2)))


def test_shuffle_within_is_uniform_over_orders():
    """All 3! orders of three distinct tokens are about equally likely."""
    ids = np.tile([4, 5, 6, -1], (6000, 1))
    out = shuffle_within(ids, np.random.default_rng(0))
    _, counts = np.unique(out[:, :3], axis=0, return_counts=True)
    assert len(counts) == 6
    assert counts.min() > 0.8 * 1000 and counts.max() < 1.2 * 1000


# --------------------------------------------------------------------------- order_task on a word corpus


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return word_corpus()


@pytest.fixture(scope="module")
def originals(corpus, tokenizer) -> np.ndarray:
    """padded_ids of the corpus (max_len 12, -1 padding): texts longer than 12 words are truncated."""
    return padded_ids(corpus, tokenizer, 12)


def test_padded_ids_of_single_token_words(corpus, tokenizer, originals):
    lengths = np.array([len(t.split()) for t in corpus.texts])
    assert originals.shape == (len(corpus), 12)
    np.testing.assert_array_equal((originals >= 0).sum(1), np.minimum(lengths, 12))
    assert padding_at_end(originals, -1)
    first = tokenizer(corpus.texts[0], add_special_tokens=False)["input_ids"][:12]
    np.testing.assert_array_equal(originals[0, : len(first)], first)


def test_order_task_rows_against_the_original_texts(corpus, tokenizer, originals):
    min_len = 5
    task = order_task(corpus, tokenizer, max_len=12, min_len=min_len, size=None, seed=0)
    X, y = all_rows(task)
    kept = originals[(originals >= 0).sum(1) >= min_len]
    vocab = np.unique(kept)
    assert vocab[0] == -1 and len(np.unique(X)) == len(vocab)  # same vocabulary: the map is invertible
    decoded = vocab[X]  # compact ids back to tokenizer ids (0 -> -1 padding)
    by_bag = {tuple(np.sort(row)): row for row in kept}
    assert len(by_bag) == len(kept)

    bags = [tuple(np.sort(row)) for row in decoded]
    assert len(set(bags)) == len(bags)  # every text appears at most once
    for row, label, bag in zip(decoded, y, bags):
        original = by_bag[bag]  # a permutation of an original text
        if label == 0:
            np.testing.assert_array_equal(row, original)
        else:
            assert not np.array_equal(row, original)
    assert len(X) >= len(kept) - 3  # only shuffles that restored the order are dropped (rare)
    assert set(np.unique(y)) == {0, 1}


def test_order_task_padding_vocabulary_and_split(corpus, tokenizer):
    task = order_task(corpus, tokenizer, max_len=12, min_len=4, size=None, eval_fraction=0.25, seed=1)
    X, y = all_rows(task)
    assert isinstance(task, TokenTask) and task.max_len == 12 and X.shape[1] == 12
    assert X.dtype == np.int64 and y.dtype == np.int64 and set(np.unique(y)) <= {0, 1}
    assert padding_at_end(X, 0) and np.any(X == 0)
    assert X.min() == 0 and task.vocab_size == X.max() + 1
    assert set(np.unique(X)) == set(range(task.vocab_size))  # compact: every id is used
    assert task.vocab_size == len(WORDS) + 1
    assert len(task.X_train) == len(task.y_train) and len(task.X_eval) == len(task.y_eval)
    assert len(task.X_train) == int(len(X) * 0.75) and len(task.X_eval) == len(X) - len(task.X_train)
    assert "words/train" in task.description


def test_order_task_min_len_filter(corpus, tokenizer, originals):
    for min_len in (2, 7, 12):
        task = order_task(corpus, tokenizer, max_len=12, min_len=min_len, size=None, seed=0)
        X, _ = all_rows(task)
        assert np.all((X > 0).sum(1) >= min_len)
        eligible = int(((originals >= 0).sum(1) >= min_len).sum())
        assert eligible - 3 <= len(X) <= eligible


def test_order_task_drops_shuffles_that_restore_the_order(tokenizer):
    """A text of one repeated word cannot be shuffled into a new order: it only ever appears with label 0."""
    repeated = [" ".join([w] * n) for w in WORDS for n in range(5, 11)]  # 72 texts, distinct bags
    corpus = word_corpus(n_texts=100, min_words=5, max_words=10, seed=4)
    corpus = Corpus("words", "train", corpus.texts + repeated, np.zeros(172, dtype=np.int64))
    task = order_task(corpus, tokenizer, max_len=12, min_len=5, size=None, seed=0)
    X, y = all_rows(task)
    real = [row[row > 0] for row in X]
    constant = np.array([np.all(r == r[0]) for r in real])
    assert constant.sum() > 15 and np.all(y[constant] == 0)
    assert constant.sum() < len(repeated)  # the rows drawn for shuffling were dropped, not relabelled
    assert len(X) == 172 - (len(repeated) - constant.sum())


def test_order_task_without_padding_keeps_zero_free(tokenizer):
    """Every text fills max_len: no padding, and token ids still start at 1 (0 stays reserved)."""
    corpus = word_corpus(n_texts=60, min_words=10, max_words=14, seed=3)
    task = order_task(corpus, tokenizer, max_len=8, min_len=5, size=None, seed=0)
    X, _ = all_rows(task)
    assert X.min() == 1 and task.vocab_size == X.max() + 1 == len(np.unique(X)) + 1


def test_order_task_size_and_seed(corpus, tokenizer):
    small = order_task(corpus, tokenizer, max_len=12, min_len=3, size=50, seed=0)
    X, _ = all_rows(small)
    assert 45 <= len(X) <= 50
    again = order_task(corpus, tokenizer, max_len=12, min_len=3, size=50, seed=0)
    other = order_task(corpus, tokenizer, max_len=12, min_len=3, size=50, seed=1)
    assert torch.equal(small.X_train, again.X_train) and torch.equal(small.y_eval, again.y_eval)
    assert not torch.equal(small.X_train, other.X_train)


def test_order_task_bad_arguments(corpus, tokenizer):
    for min_len, max_len in ((1, 12), (0, 12), (13, 12), (5, 4)):
        with pytest.raises(ValueError, match="min_len"):
            order_task(corpus, tokenizer, max_len=max_len, min_len=min_len)
    with pytest.raises(ValueError, match="eval_fraction must be a finite number > 0 and < 1"):
        order_task(corpus, tokenizer, eval_fraction=1.0)
    with pytest.raises(ValueError, match="lower min_len"):
        order_task(word_corpus(n_texts=8, min_words=6, max_words=8), tokenizer, max_len=12, min_len=5)
    with pytest.raises(ValueError, match="min_len=5"):
        order_task(word_corpus(n_texts=40, min_words=2, max_words=4), tokenizer, max_len=12, min_len=5)
    with pytest.raises(ValueError, match="empty"):
        order_task(Corpus("words", "train", [], np.zeros(0, dtype=np.int64)), tokenizer)


@pytest.mark.parametrize("fraction, side", [(1.0, "eval_fraction"), (0.0, "eval_fraction"),
                                            (float("nan"), "eval_fraction"), (1.5, "eval_fraction"),
                                            (0.999, "empty train"), (1e-17, "empty eval")])
def test_planted_task_eval_fraction(fraction, side):
    from posgeom_utils.tasks import planted_task

    with pytest.raises(ValueError, match=rf"eval_fraction.*{side}"):
        planted_task(num_sequences=100, eval_fraction=fraction)
    task = planted_task(num_sequences=100, eval_fraction=0.25)
    assert len(task.X_train) == 75 and len(task.X_eval) == 25


# --------------------------------------------------------------------------- the real SST-2


@pytest.mark.data
def test_order_task_on_sst2_is_balanced(data_dir, tokenizer):
    corpus = load_corpus("sst2", data_dir=data_dir).sample(2000)
    task = order_task(corpus, tokenizer, max_len=32)
    X, y = all_rows(task)
    assert 0.4 < y.mean() < 0.6
    assert 0.35 < task.y_eval.float().mean().item() < 0.65
    assert 1000 < len(X) <= 2000 and X.shape[1] == 32
    assert np.all((X > 0).sum(1) >= 5) and padding_at_end(X, 0)
    assert task.vocab_size == X.max() + 1
    assert task.description == "sst2/train: original vs shuffled word order"


def test_masked_task_targets_only_masked_tokens():
    from posgeom_utils.tasks import masked_task

    ids = np.random.default_rng(0).integers(0, 10, size=(200, 12))
    task = masked_task(ids, 10, mask_rate=0.2, seed=1)
    X = np.concatenate([task.X_train.numpy(), task.X_eval.numpy()])
    y = np.concatenate([task.y_train.numpy(), task.y_eval.numpy()])
    masked = X == 1
    assert masked.any(axis=1).all()  # at least one masked token per sequence
    assert np.array_equal(y[masked], ids[masked] + 2) and (y[~masked] == -100).all()
    assert np.array_equal(X[~masked], ids[~masked] + 2)
    assert task.vocab_size == 12 and 0.15 < masked.mean() < 0.3
    with pytest.raises(ValueError, match="ids must lie"):
        masked_task(ids, 5)
    with pytest.raises(ValueError, match="mask_rate"):
        masked_task(ids, 10, mask_rate=0.0)


def test_masked_task_is_positionally_sufficient():
    """Lemma 'positional sufficiency': on a corpus whose positions are drawn independently, the target at a
    masked position i is distributed as mu_i whatever the visible context (seeded, statistical)."""
    from posgeom_utils.corpus import synthetic_corpus
    from posgeom_utils.tasks import masked_task

    corpus = synthetic_corpus("drift", n=6, V=8, num_sequences=40000, seed=0)
    task = masked_task(corpus.ids, 8, mask_rate=0.3, eval_fraction=0.5, seed=1)
    X, y = task.X_train.numpy(), task.y_train.numpy()
    for i in range(6):
        masked = X[:, i] == 1
        freq = np.bincount(y[masked, i] - 2, minlength=8) / masked.sum()
        assert 0.5 * np.abs(freq - corpus.mu[i]).sum() < 0.03  # total variation to mu_i
        j = (i + 1) % 6
        values, counts = np.unique(X[masked, j][X[masked, j] > 1], return_counts=True)
        for visible in values[counts >= 500]:  # condition on a visible neighbour (frequent values only)
            rows = masked & (X[:, j] == visible)
            cond = np.bincount(y[rows, i] - 2, minlength=8) / rows.sum()
            assert 0.5 * np.abs(cond - corpus.mu[i]).sum() < 0.08

"""Tests for posgeom_utils.order_probe (*Why a Transformer needs positions*, *How many numbers does a positional encoding need?*) and
encodings.rank_r_table, on a tiny random BERT and the packaged tokenizer."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from posgeom_utils.encodings import rank_r_table
from posgeom_utils.models import learned_position_embeddings
from posgeom_utils.order_probe import (
    ShufflePairs,
    pooled_features,
    shuffle_pairs,
    shuffle_probe,
    shuffle_units,
    with_position_table,
    word_units,
)
from posgeom_utils.tasks import shuffle_within

WORDS = ("the a cat dog sat on mat quickly running blue house river mountain under over because although "
         "green small old new red").split()


@pytest.fixture(scope="module")
def texts():
    rng = random.Random(0)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 16))) for _ in range(300)]


# --------------------------------------------------------------------------- rank_r_table

@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 12), d=st.integers(1, 10), r=st.integers(0, 12), seed=st.integers(0, 2**16))
@example(n=6, d=4, r=0, seed=1)  # rank 0: the mean row everywhere
@example(n=6, d=4, r=4, seed=1)  # full rank: P itself
def test_rank_r_table_is_the_best_centred_rank_r_approximation(n, d, r, seed):
    rng = np.random.default_rng(seed)
    P = rng.normal(size=(n, d))
    Q = rank_r_table(P, r)
    centred = Q - Q.mean(0)
    assert Q.shape == P.shape
    np.testing.assert_allclose(Q.mean(0), P.mean(0), atol=1e-10)  # the mean row is kept
    assert np.linalg.matrix_rank(centred, tol=1e-8) <= r
    s = np.linalg.svd(P - P.mean(0), compute_uv=False)
    # Eckart-Young: the error is the energy of the dropped singular values
    np.testing.assert_allclose(np.linalg.norm(P - Q) ** 2, (s[r:] ** 2).sum(), rtol=1e-8, atol=1e-10)
    # and no other centred rank-r table with the same mean does better (a random competitor)
    other = P.mean(0) + rng.normal(size=(n, max(r, 1)))[:, :r] @ rng.normal(size=(max(r, 1), d))[:r]
    assert np.linalg.norm(P - Q) <= np.linalg.norm(P - other) + 1e-9


def test_rank_r_table_bad_input():
    P = np.random.default_rng(1).normal(size=(6, 4))
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="r must be"):
            rank_r_table(P, bad)
    with pytest.raises(ValueError, match="P must be"):
        rank_r_table(np.ones(3), 1)


# --------------------------------------------------------------------------- shuffle_pairs

def test_pairs_wrap_words_in_special_tokens(texts, tokenizer):
    pairs = shuffle_pairs(texts, tokenizer, max_len=12, min_len=3, size=50)
    assert isinstance(pairs, ShufflePairs) and len(pairs) == 50 and pairs.max_len == 12
    ids, mask = pairs.inputs(pairs.words)
    expected = tokenizer([tokenizer.decode([t for t in row if t >= 0]) for row in pairs.words[:5]],
                         truncation=True, max_length=12, padding="max_length", return_tensors="np")
    np.testing.assert_array_equal(ids[:5], expected["input_ids"])  # what the model would get from the text
    np.testing.assert_array_equal(mask[:5], expected["attention_mask"])
    assert len(np.unique(pairs.words, axis=0)) == len(pairs)  # each sentence once
    assert ((pairs.words >= 0).sum(1) >= 3).all()


def test_pairs_bad_input(texts, tokenizer):
    with pytest.raises(ValueError, match=r"min_len must be an integer in \[2, 4\], got min_len=5: max_len=6"):
        shuffle_pairs(texts, tokenizer, max_len=6, min_len=5)
    with pytest.raises(ValueError, match="lower min_len"):
        shuffle_pairs(texts, tokenizer, max_len=32, min_len=25)
    with pytest.raises(ValueError, match="size"):
        shuffle_pairs(texts, tokenizer, size=0)


# --------------------------------------------------------------------------- with_position_table

def test_with_position_table_replaces_rows_and_leaves_the_original(tiny_bert):
    before = learned_position_embeddings(tiny_bert)
    P = np.random.default_rng(0).normal(size=(10, 32))
    clone = with_position_table(tiny_bert, P)
    after = learned_position_embeddings(clone)
    np.testing.assert_allclose(after[:10], P, atol=1e-6)
    np.testing.assert_array_equal(after[10:], before[10:])
    np.testing.assert_array_equal(learned_position_embeddings(tiny_bert), before)  # a copy was changed
    with pytest.raises(ValueError, match="P must be"):
        with_position_table(tiny_bert, np.zeros((10, 31)))


def test_zero_table_makes_pooled_features_order_blind(tiny_bert, texts, tokenizer):
    """Theorem thm-necessity on the probe's input: with a constant table the pooled feature of a sentence
    and of its shuffle agree to float precision; with the table intact they do not (the control)."""
    pairs = shuffle_pairs(texts, tokenizer, max_len=16, min_len=4, size=40)
    from posgeom_utils.tasks import shuffle_within

    shuffled = shuffle_within(pairs.words, np.random.default_rng(0))
    moved = np.any(shuffled != pairs.words, axis=1)
    blind = with_position_table(tiny_bert, np.zeros((16, 32)))
    for model, blind_expected in ((blind, True), (tiny_bert, False)):
        a = pooled_features(model, *pairs.inputs(pairs.words), batch_size=7, device="cpu")
        b = pooled_features(model, *pairs.inputs(shuffled), batch_size=7, device="cpu")
        gap = np.abs(a - b)[moved].max()
        assert (gap < 1e-5) if blind_expected else (gap > 1e-3)


def test_pooled_features_do_not_depend_on_batching(tiny_bert, texts, tokenizer):
    pairs = shuffle_pairs(texts, tokenizer, max_len=16, min_len=4, size=30)
    ids, mask = pairs.inputs(pairs.words)
    one = pooled_features(tiny_bert, ids, mask, batch_size=1, device="cpu")
    many = pooled_features(tiny_bert, ids, mask, batch_size=64, device="cpu")
    np.testing.assert_allclose(one, many, atol=1e-5)
    with pytest.raises(ValueError, match="ids and mask"):
        pooled_features(tiny_bert, ids, mask[:, :3])


# --------------------------------------------------------------------------- shuffle_probe

@pytest.fixture(scope="module")
def minilm():
    """The packaged pre-trained all-MiniLM-L6-v2 (a random tiny BERT gives a linear probe nothing to read)."""
    from posgeom_utils.models import load_model

    return load_model(None, device="cpu")


@pytest.fixture(scope="module")
def ordered_texts():
    """Texts with a word order to learn: the first words from one half of the vocabulary, the rest from the
    other (a shuffle mixes them)."""
    rng = random.Random(2)
    early, late = WORDS[:10], WORDS[10:]
    return [" ".join([rng.choice(early) for _ in range(k)] + [rng.choice(late) for _ in range(k)])
            for k in (rng.randint(3, 7) for _ in range(400))]


def test_probe_reads_order_with_positions_and_is_at_chance_without(minilm, ordered_texts, tokenizer):
    pairs = shuffle_pairs(ordered_texts, tokenizer, max_len=16, min_len=4, size=300)
    seeds = range(5)
    intact = shuffle_probe(minilm, pairs, seeds=seeds, device="cpu")
    blind = shuffle_probe(with_position_table(minilm, np.zeros((16, 384))), pairs, seeds=seeds,
                          device="cpu")
    assert intact.accuracy.shape == (5,) and intact.num_train + intact.num_eval <= len(pairs)
    mean, half = intact.interval()
    assert mean - half > 0.55  # separates from chance (measured: 0.70 +- 0.06)
    mean0, half0 = blind.interval()
    assert abs(mean0 - 0.5) < max(1.5 * half0, 0.1)  # the negative control stays at chance


def test_probe_is_deterministic_and_paired(tiny_bert, texts, tokenizer):
    pairs = shuffle_pairs(texts, tokenizer, max_len=16, min_len=4, size=120)
    a = shuffle_probe(tiny_bert, pairs, seeds=[3, 4], device="cpu")
    b = shuffle_probe(tiny_bert, pairs, seeds=[3, 4], device="cpu")
    np.testing.assert_array_equal(a.accuracy, b.accuracy)
    with pytest.raises(ValueError, match="seeds"):
        shuffle_probe(tiny_bert, pairs, seeds=[])
    with pytest.raises(ValueError, match="eval_fraction"):
        shuffle_probe(tiny_bert, pairs, eval_fraction=1.0)
    with pytest.raises(ValueError, match="shuffle_pairs"):
        shuffle_probe(tiny_bert, pairs.words)


# --------------------------------------------------------------------------- whole-word shuffles

@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=6), min_size=1, max_size=5),
       seed=st.integers(0, 2**16))
def test_shuffle_units_moves_whole_words_and_keeps_each_word_intact(rows, seed):
    """Row k holds words of the given piece counts, piece ids 100 * word + piece; padding -1 at the end."""
    width = max(sum(r) for r in rows) + 1
    words = np.full((len(rows), width), -1)
    units = np.full((len(rows), width), -1)
    for k, sizes in enumerate(rows):
        pieces = [(u, 100 * u + j) for u, size in enumerate(sizes) for j in range(size)]
        units[k, :len(pieces)] = [u for u, _ in pieces]
        words[k, :len(pieces)] = [p for _, p in pieces]
    out = shuffle_units(words, units, np.random.default_rng(seed))
    for k, sizes in enumerate(rows):
        real = out[k][out[k] >= 0]
        assert len(real) == sum(sizes) and (out[k][len(real):] == -1).all()  # padding stays last
        assert sorted(real) == sorted(words[k][words[k] >= 0])  # the same pieces
        # every word's pieces are adjacent and in their order: piece j of word u follows piece j - 1
        for i, piece in enumerate(real):
            if piece % 100:
                assert i > 0 and real[i - 1] == piece - 1


def test_one_piece_words_shuffle_exactly_as_pieces_do():
    """With every piece its own word, the whole-word shuffle is the word-piece shuffle, draw for draw."""
    words = np.array([[5, 6, 7, 8, -1], [9, 10, -1, -1, -1]])
    units = np.where(words >= 0, np.arange(5), -1)
    for seed in range(5):
        np.testing.assert_array_equal(shuffle_units(words, units, np.random.default_rng(seed)),
                                      shuffle_within(words, np.random.default_rng(seed)))


def test_word_units_join_continuation_pieces(tokenizer):
    texts = [f"the unbelievably quick tokenization of words {w}" for w in WORDS[:12]]  # 7 words each
    pairs = shuffle_pairs(texts, tokenizer, max_len=24, min_len=2, size=None)
    exercised = False
    for row, units in zip(pairs.words, word_units(pairs, tokenizer)):
        pieces = tokenizer.convert_ids_to_tokens([int(t) for t in row if t >= 0])
        assert (units[len(pieces):] == -1).all() and units[0] == 0
        assert units[len(pieces) - 1] == 6  # seven words, as whitespace counts them
        for i, piece in enumerate(pieces[1:], start=1):  # a ## piece stays in the word before it
            assert units[i] == units[i - 1] + (not piece.startswith("##"))
        exercised |= any(p.startswith("##") for p in pieces)
    assert exercised


def test_whole_word_probe_checks_its_units(tiny_bert, texts, tokenizer):
    pairs = shuffle_pairs(texts, tokenizer, max_len=16, min_len=4, size=120)
    with pytest.raises(ValueError, match="units"):
        shuffle_probe(tiny_bert, pairs, seeds=[0], units=word_units(pairs, tokenizer)[:, :3])
    probe = shuffle_probe(tiny_bert, pairs, seeds=[0], units=word_units(pairs, tokenizer), device="cpu")
    assert probe.params["shuffled"] == "whole words" and probe.accuracy.shape == (1,)

"""Can a frozen pre-trained encoder tell a sentence from a shuffle of its own words?
Chapter: *Why a Transformer needs positions*."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import checks
from .corpus import Corpus, check_texts
from .marginals import special_template
from .models import (
    learned_position_embeddings,
    position_embedding_weight,
    select_device,
)
from .sampling import t_interval
from .settings import progress
from .tasks import shuffle_within


@dataclass
class ShufflePairs:
    """Sentence token ids and specials. Chapter: *Why a Transformer needs positions*."""

    words: np.ndarray
    prefix: list[int]
    suffix: list[int]
    pad_token_id: int
    params: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.words)

    @property
    def max_len(self) -> int:
        """Tokens per input. Chapter: *Why a Transformer needs positions*."""
        return self.words.shape[1] + len(self.prefix) + len(self.suffix)

    def inputs(self, words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Model inputs (ids, attention mask) for word rows shaped like ``self.words``.
        Chapter: *Why a Transformer needs positions*."""
        N, w = words.shape
        lengths = (words >= 0).sum(1)
        ids = np.full((N, self.max_len), self.pad_token_id, dtype=np.int64)
        p = len(self.prefix)
        ids[:, :p] = self.prefix
        ids[:, p : p + w] = np.where(words >= 0, words, self.pad_token_id)
        cols = np.arange(self.max_len)[None, :]
        for k, token in enumerate(self.suffix):  # after each sentence's last word
            ids[np.arange(N), p + lengths + k] = token
        mask = (cols < (p + lengths + len(self.suffix))[:, None]).astype(np.int64)
        return ids, mask


def shuffle_pairs(
    texts: Corpus | Sequence[str],
    tokenizer: Any,
    max_len: int = 32,
    min_len: int = 5,
    size: int | None = 2000,
    seed: int = 0,
) -> ShufflePairs:
    """At most ``size`` distinct sentences of ``texts`` (>= ``min_len`` pieces, fitted
    to ``max_len``), seeded order. Chapter: *Why a Transformer needs positions*."""
    texts = check_texts(texts)
    max_len = checks.integer(max_len, "max_len", 4)
    min_len = checks.integer(min_len, "min_len", 2)
    size = checks.integer(size, "size", 10, optional=True)
    if getattr(tokenizer, "pad_token_id", None) is None:
        raise ValueError(
            "tokenizer must have a pad token (an encoder tokenizer such as BERT's)"
        )
    prefix, suffix = special_template(tokenizer)
    w = max_len - len(prefix) - len(suffix)
    checks.integer(min_len, "min_len", 2, w, fix=f"max_len={max_len} leaves {w} pieces")
    options = {"add_special_tokens": False, "truncation": True, "max_length": w}
    enc = tokenizer(texts, padding="max_length", return_tensors="np", **options)
    words = np.where(enc["attention_mask"] == 1, enc["input_ids"].astype(np.int64), -1)
    words = np.unique(words[(words >= 0).sum(1) >= min_len], axis=0)
    if len(words) < 10:
        raise ValueError(
            f"only {len(words)} texts have min_len={min_len} pieces: lower min_len"
        )
    words = words[np.random.default_rng(seed).permutation(len(words))][:size]
    params = {"max_len": max_len, "min_len": min_len, "size": size, "seed": seed}
    return ShufflePairs(words, prefix, suffix, int(tokenizer.pad_token_id), params)


def with_position_table(model: Any, P: np.ndarray) -> Any:
    """A deep copy of ``model`` whose learned position embeddings for positions
    ``0..len(P)-1`` are the rows of ``P`` (the model's width). Chapter: *Why a
    Transformer needs positions* (P = 0)."""
    import torch

    current = learned_position_embeddings(model)  # ValueError without a table
    P = checks.finite_array(P, "P")
    ok = P.shape[1] == current.shape[1] and 1 <= P.shape[0] <= len(current)
    checks.require(ok, "P", f"(n, {current.shape[1]}), n <= {len(current)}", P.shape)
    clone = copy.deepcopy(model)
    weight = position_embedding_weight(clone)
    offset = weight.shape[0] - len(current)  # RoBERTa-style offset rows stay untouched
    with torch.no_grad():
        weight[offset : offset + len(P)] = torch.as_tensor(P, dtype=weight.dtype)
    return clone


def pooled_features(
    model: Any,
    ids: np.ndarray,
    mask: np.ndarray,
    batch_size: int = 128,
    device: str = "auto",
) -> np.ndarray:
    """Mean last hidden state over each row's real tokens (N x d, float64), batched by
    length, no gradients. Chapter: *Why a Transformer needs positions*."""
    import torch

    batch_size = checks.integer(batch_size, "batch_size")
    ids, mask = np.asarray(ids), np.asarray(mask)
    ok = ids.ndim == 2 and ids.shape == mask.shape and len(ids) > 0
    checks.require(ok, "ids and mask", "equal (N, L) arrays", (ids.shape, mask.shape))
    dev = select_device(device)
    model = model.to(dev).eval()
    lengths = mask.sum(1)
    order = np.argsort(lengths, kind="stable")
    out = np.empty((len(ids), int(model.config.hidden_size)), dtype=np.float64)
    batches = range(0, len(ids), batch_size)
    with torch.inference_mode():
        for start in progress(batches, desc="pooled features", total=len(batches)):
            rows = order[start : start + batch_size]
            T = int(lengths[rows].max())  # each batch trimmed to its longest row
            x = torch.as_tensor(ids[rows, :T], device=dev)
            m = torch.as_tensor(mask[rows, :T], device=dev)
            hidden = model(input_ids=x, attention_mask=m).last_hidden_state.float()
            w = m.unsqueeze(-1).to(hidden.dtype)
            out[rows] = ((hidden * w).sum(1) / w.sum(1)).double().cpu().numpy()
    return out


@dataclass
class ShuffleProbe:
    """Held-out accuracy per seed. Chapter: *Why a Transformer needs positions*."""

    accuracy: np.ndarray
    seeds: list[int]
    num_train: int
    num_eval: int
    params: dict = field(default_factory=dict)

    def interval(self, level: float = 0.95) -> tuple[float, float]:
        """Mean accuracy, t half-width. Chapter: *Why a Transformer needs positions*."""
        return t_interval(self.accuracy, level)


def word_units(pairs: ShufflePairs, tokenizer: Any) -> np.ndarray:
    """The word of each piece of ``pairs.words`` (0, 1, ... per row; -1 for padding): a
    WordPiece ``##`` piece, or a piece without a SentencePiece / BPE word marker, joins
    the word before it. Chapter: *Why a Transformer needs positions*."""
    vocab = [
        str(t) for t in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    ]
    if any(t.startswith("##") for t in vocab):
        starts = np.array([not t.startswith("##") for t in vocab])
    else:
        starts = np.array([t.startswith(("\u2581", "\u0120")) for t in vocab])
    words = pairs.words
    begins = (words >= 0) & starts[np.maximum(words, 0)]
    begins[:, 0] = words[:, 0] >= 0
    return np.where(words >= 0, np.cumsum(begins, axis=1) - 1, -1)


def shuffle_units(
    words: np.ndarray, units: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Permute the units (words) of every row at random, each unit's pieces kept
    together and in order, padding (-1) at the end. Chapter: *Why a Transformer needs
    positions*."""
    keys = np.take_along_axis(rng.random(words.shape), np.maximum(units, 0), axis=1)
    keys[words < 0] = np.inf
    place = np.broadcast_to(np.arange(words.shape[1]), words.shape)
    return np.take_along_axis(words, np.lexsort((place, keys), axis=1), axis=1)


def _seed_split(
    pairs: ShufflePairs,
    seed: int,
    eval_fraction: float,
    units: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Labels, shuffled words and train/eval split of one seed (model-independent)."""
    rng = np.random.default_rng([int(seed), 7919])
    labels = rng.random(len(pairs)) < 0.5
    if units is None:
        shuffled = shuffle_within(pairs.words, rng)
    else:
        shuffled = shuffle_units(pairs.words, units, rng)
    changed = np.any(shuffled != pairs.words, axis=1)
    keep = np.flatnonzero(changed | ~labels)  # drop "shuffles" that kept the order
    order = keep[rng.permutation(len(keep))]
    n_eval = max(1, round(eval_fraction * len(order)))
    return labels, shuffled, order[n_eval:], order[:n_eval]


def shuffle_probe(
    model: Any,
    pairs: ShufflePairs,
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    eval_fraction: float = 0.3,
    batch_size: int = 128,
    device: str = "auto",
    C: float = 1.0,
    units: np.ndarray | None = None,
) -> ShuffleProbe:
    """Per seed, held-out accuracy of a logistic regression on pooled features telling
    shuffled from original; ``units`` (:func:`word_units`): shuffle whole words, not
    pieces. Chapter: *Why a Transformer needs positions*."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    ok, kind = isinstance(pairs, ShufflePairs), type(pairs).__name__
    checks.require(ok, "pairs", "a ShufflePairs", kind, "use shuffle_pairs(texts, ...)")
    seeds = [int(s) for s in seeds]
    checks.require(seeds, "seeds", "non-empty", seeds, "pass e.g. seeds=range(5)")
    eval_fraction = checks.fraction(eval_fraction, "eval_fraction")
    if units is not None:
        shape = np.shape(units)
        fix = "pass units=word_units(pairs, tokenizer)"
        ok, expected = shape == pairs.words.shape, f"shape {pairs.words.shape}"
        checks.require(ok, "units", expected, shape, fix)
    original = pooled_features(model, *pairs.inputs(pairs.words), batch_size, device)
    accuracy = []
    for s in seeds:
        labels, shuffled, train, held_out = _seed_split(pairs, s, eval_fraction, units)
        features = original.copy()
        rows = np.flatnonzero(labels)
        features[rows] = pooled_features(
            model, *pairs.inputs(shuffled[rows]), batch_size, device
        )
        y = labels.astype(np.int64)
        clf = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=2000))
        clf.fit(features[train], y[train])
        accuracy.append(float((clf.predict(features[held_out]) == y[held_out]).mean()))
    params = dict(pairs.params, eval_fraction=eval_fraction, C=float(C))
    params |= {} if units is None else {"shuffled": "whole words"}
    return ShuffleProbe(np.asarray(accuracy), seeds, len(train), len(held_out), params)

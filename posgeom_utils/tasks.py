"""Token tasks: order detection, planted markers, masked-language modelling, and an
order-insensitive presence control. Chapter: *Why a Transformer needs positions*."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from . import checks
from .corpus import Corpus, check_texts, synthetic_corpus

PLANTED_TASKS = ("precedes", "contains")
# 'mask': keeps masked_task's random stream apart from the corpus generators
_MASK_STREAM = 0x6D61736B


@dataclass
class TokenTask:
    """Padded token ids (pad = 0) over a compact vocabulary, with labels and a
    train/eval split. Chapter: *Why a Transformer needs positions*."""

    X_train: torch.Tensor
    y_train: torch.Tensor
    X_eval: torch.Tensor
    y_eval: torch.Tensor
    vocab_size: int
    max_len: int
    description: str


def _task(
    X: np.ndarray,
    y: np.ndarray,
    split: int,
    vocab_size: int,
    max_len: int,
    description: str,
) -> TokenTask:
    """A :class:`TokenTask`, train part: the first ``split`` rows."""
    parts = (X[:split], y[:split], X[split:], y[split:])
    return TokenTask(*map(torch.as_tensor, parts), vocab_size, max_len, description)


def _split_point(count: int, eval_fraction: object, what: str) -> int:
    """Where the train part of ``count`` examples ends; neither part may be empty."""
    split = int(count * (1 - checks.fraction(eval_fraction, "eval_fraction")))
    if split < 1 or split >= count:
        side = "train" if split < 1 else "eval"
        raise ValueError(
            f"eval_fraction={eval_fraction!r} leaves an empty {side} split of {what}"
        )
    return split


def padded_ids(texts: Corpus | list[str], tokenizer: Any, max_len: int) -> np.ndarray:
    """Each text's ids without specials, truncated to ``max_len``, right-padded with -1.
    Chapter: *How many numbers does a positional encoding need?*."""
    enc = tokenizer(
        check_texts(texts),
        add_special_tokens=False,
        truncation=True,
        max_length=max_len,
        padding="max_length",
        return_tensors="np",
    )
    ids = enc["input_ids"].astype(np.int64)
    # -1: padding, until compacted
    return np.where(ids == (tokenizer.pad_token_id or 0), -1, ids)


def shuffle_within(ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Permute the real tokens of every row at random, leaving padding (-1) at the end.
    Chapter: *Why a Transformer needs positions*."""
    keys = rng.random(ids.shape)
    keys[ids < 0] = np.inf
    return np.take_along_axis(ids, np.argsort(keys, axis=1), axis=1)


def order_task(
    corpus: Corpus,
    tokenizer: Any,
    max_len: int = 32,
    min_len: int = 5,
    size: int | None = 8000,
    eval_fraction: float = 0.2,
    seed: int = 0,
) -> TokenTask:
    """Original (label 0) or shuffled (label 1)? Only word order can tell.
    Chapter: *Do distinct positions get distinct vectors?*."""
    checks.integer(min_len, "min_len", 2, max_len, fix="pass 2 <= min_len <= max_len")
    checks.fraction(eval_fraction, "eval_fraction")  # before tokenizing
    rng = np.random.default_rng(seed)
    ids = padded_ids(corpus, tokenizer, max_len)
    ids = ids[(ids >= 0).sum(1) >= min_len]
    ids = np.unique(ids, axis=0)  # repeated texts must not be in both train and eval
    ids = ids[rng.permutation(len(ids))]
    if size is not None and len(ids) > size:
        ids = ids[:size]
    if len(ids) < 10:
        raise ValueError(
            f"only {len(ids)} texts have min_len={min_len} tokens: lower min_len"
        )
    labels = rng.random(len(ids)) < 0.5
    shuffled = shuffle_within(ids, rng)
    changed = np.any(shuffled != ids, axis=1)
    X = np.where(labels[:, None], shuffled, ids)[changed | ~labels]
    y = labels[changed | ~labels].astype(np.int64)
    # compact vocabulary; -1 (padding) becomes 0
    vocab, X = np.unique(X, return_inverse=True)
    X = X.reshape(-1, max_len)
    if vocab[0] != -1:  # no padding at all: shift so that 0 stays reserved for padding
        X = X + 1
    order = rng.permutation(len(X))
    split = _split_point(len(X), eval_fraction, "texts")
    description = f"{corpus.name}/{corpus.split}: original vs shuffled word order"
    return _task(X[order], y[order], split, int(X.max()) + 1, max_len, description)


def planted_task(
    task: str = "precedes",
    L: int = 16,
    V: int = 32,
    num_sequences: int = 4000,
    background: str = "stationary",
    eval_fraction: float = 0.25,
    seed: int = 0,
) -> TokenTask:
    """Planted markers a and b on a synthetic background: ``precedes`` or ``contains``
    a. Chapter: *Why a Transformer needs positions*."""
    checks.choice(task, "task", PLANTED_TASKS)
    L = checks.integer(L, "L", 2, fix="two markers need two positions")
    split = _split_point(num_sequences, eval_fraction, "num_sequences")
    rng = np.random.default_rng(seed)
    X = synthetic_corpus(background, L, V, num_sequences, seed).ids + 1
    a, b = V + 1, V + 2
    rows = np.arange(num_sequences)
    first = rng.integers(0, L, num_sequences)
    if task == "precedes":
        second = (first + rng.integers(1, L, num_sequences)) % L
        X[rows, first], X[rows, second] = a, b
        y = (first < second).astype(np.int64)
    else:
        y = (rng.random(num_sequences) < 0.5).astype(np.int64)
        X[rows, first] = np.where(y == 1, a, b)
    description = f"planted '{task}' task on a {background} background (L={L}, V={V})"
    return _task(X, y, split, V + 3, L, description)


def masked_task(
    ids: np.ndarray,
    V: int,
    mask_rate: float = 0.15,
    eval_fraction: float = 0.25,
    seed: int = 0,
) -> TokenTask:
    """MLM on ids in ``[0, V)`` shifted by two (0 pads, 1 masks); targets ``-100`` where
    not masked. Chapter: *Are nearby positions encoded nearby?*."""
    ids = np.asarray(ids)
    if ids.ndim != 2 or ids.shape[0] < 2 or ids.shape[1] < 1:
        raise ValueError(f"ids must be (num_sequences >= 2, L >= 1), got {ids.shape}")
    if ids.min() < 0 or ids.max() >= V:
        raise ValueError(f"ids must lie in [0, V={V}), got [{ids.min()}, {ids.max()}]")
    checks.number(mask_rate, "mask_rate", 0, 1, low_open=True)
    L = ids.shape[1]
    # a stream of its own: synthetic_corpus(seed=s) draws from default_rng(s + 1), and a
    # mask drawn from that stream would pick tokens by their value
    rng = np.random.default_rng([seed, _MASK_STREAM])
    shifted = ids.astype(np.int64) + 2
    masked = rng.random(ids.shape) < mask_rate
    masked[np.arange(len(ids)), rng.integers(0, L, len(ids))] = True
    X = np.where(masked, 1, shifted)
    y = np.where(masked, shifted, -100)
    split = _split_point(len(ids), eval_fraction, "sequences")
    description = f"masked-language modelling (mask rate {mask_rate}, L={L}, V={V})"
    return _task(X, y, split, V + 2, L, description)


def presence_task(task: TokenTask, seed: int = 0) -> TokenTask:
    """An order-insensitive control on the inputs of ``task``: does the input contain a
    token? Chapter: *Do distinct positions get distinct vectors?*."""
    X_train, X_eval = np.asarray(task.X_train), np.asarray(task.X_eval)
    if X_train.ndim != 2 or len(X_train) < 2 or len(X_eval) < 2:
        raise ValueError(
            f"task needs 2 train and eval inputs, got {X_train.shape}, {X_eval.shape}"
        )
    present = np.zeros((len(X_train), task.vocab_size), dtype=bool)
    present[np.arange(len(X_train))[:, None], X_train] = True
    share = present[:, 1:].mean(0)  # id 0 is padding
    word = int(np.argmin(np.abs(share - 0.5))) + 1
    rng = np.random.default_rng([seed, word])

    def balanced(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        y = (X == word).any(1)
        n = min(int(y.sum()), int((~y).sum()))
        if n < 1:
            raise ValueError(
                f"token {word} is in all or none of a split's inputs: pass more"
            )
        chosen = [rng.choice(np.flatnonzero(s), n, replace=False) for s in (y, ~y)]
        keep = np.sort(np.concatenate(chosen))
        return X[keep], y[keep].astype(np.int64)

    (Xt, yt), (Xe, ye) = balanced(X_train), balanced(X_eval)
    description = (
        f"{task.description}, relabelled: does token {word} occur? (order-insensitive)"
    )
    tensors = map(torch.as_tensor, (Xt, yt, Xe, ye))
    return TokenTask(*tensors, task.vocab_size, task.max_len, description)

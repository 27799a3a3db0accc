"""Supervised tasks built from real corpora, for the training chapters.

Chapter: *Low rank* (order detection on SST-2); the necessity chapter reuses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .corpus import Corpus, check_texts, synthetic_corpus


@dataclass
class TokenTask:
    """Padded token ids (pad = 0) over a compact vocabulary, with labels and a
    train/eval split.

    Chapter: *Low rank* (also *Why a Transformer needs positions*, *Monotonicity*).
    """

    X_train: torch.Tensor
    y_train: torch.Tensor
    X_eval: torch.Tensor
    y_eval: torch.Tensor
    vocab_size: int
    max_len: int
    description: str


def _check_fraction(eval_fraction: object) -> float:
    if (
        isinstance(eval_fraction, (bool, np.bool_))
        or not isinstance(eval_fraction, (int, float, np.integer, np.floating))
        or not np.isfinite(eval_fraction)
        or not 0 < eval_fraction < 1
    ):
        raise ValueError(
            "eval_fraction must be a number strictly between 0 and 1 (the share of "
            f"examples held out for evaluation), got eval_fraction={eval_fraction!r}: "
            "pass e.g. 0.25"
        )
    return float(eval_fraction)


def _split_point(count: int, eval_fraction: object, what: str) -> int:
    """Index where the train part of ``count`` examples ends (as
    ``int(count * (1 - eval_fraction))``); ``ValueError`` when the train or the eval
    part would be empty."""
    split = int(count * (1 - _check_fraction(eval_fraction)))
    if split < 1 or split >= count:
        raise ValueError(
            f"eval_fraction={eval_fraction!r} leaves an empty "
            f"{'train' if split < 1 else 'eval'} split for {count} {what}: pass an "
            "eval_fraction that keeps at least one example on each side, or more "
            "examples"
        )
    return split


def padded_ids(texts: Corpus | list[str], tokenizer: Any, max_len: int) -> np.ndarray:
    """Token ids of each text without special tokens, truncated to ``max_len`` and
    right-padded with 0.

    Chapter: *Low rank*.
    """
    texts = check_texts(texts)
    ids = tokenizer(
        texts,
        add_special_tokens=False,
        truncation=True,
        max_length=max_len,
        padding="max_length",
        return_tensors="np",
    )["input_ids"].astype(np.int64)
    pad = tokenizer.pad_token_id or 0
    return np.where(
        ids == pad, -1, ids
    )  # -1 marks padding until the vocabulary is compacted


def shuffle_within(ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Permute the real tokens of every row at random (vectorised), leaving padding (-1)
    at the end.

    Chapter: *Low rank* (also *Positions layer by layer*).
    """
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
    """Original (label 0) or shuffled (label 1)? Each distinct text of at least
    ``min_len`` tokens appears once, shuffled with probability 1/2 (shuffles that happen
    to restore the order are redrawn away: such rows are dropped). The bag of tokens is
    the same in both classes, so only word order can solve it. Chapter: *Low rank*.
    """
    if not 2 <= min_len <= max_len:
        raise ValueError(
            f"need 2 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}"
        )
    _check_fraction(eval_fraction)
    rng = np.random.default_rng(seed)
    ids = padded_ids(corpus, tokenizer, max_len)
    ids = ids[(ids >= 0).sum(1) >= min_len]
    ids = np.unique(
        ids, axis=0
    )  # SST-2 repeats some texts: a sentence must not be in both train and eval
    ids = ids[rng.permutation(len(ids))]
    if size is not None and len(ids) > size:
        ids = ids[:size]
    if len(ids) < 10:
        raise ValueError(
            f"only {len(ids)} texts have at least min_len={min_len} tokens: lower "
            "min_len"
        )
    labels = rng.random(len(ids)) < 0.5
    shuffled = shuffle_within(ids, rng)
    changed = np.any(shuffled != ids, axis=1)
    X = np.where(labels[:, None], shuffled, ids)[changed | ~labels]
    y = labels[changed | ~labels].astype(np.int64)
    vocab, X = np.unique(
        X, return_inverse=True
    )  # compact vocabulary; -1 (padding) becomes 0
    X = X.reshape(-1, max_len)
    if vocab[0] != -1:  # no padding at all: shift so that 0 stays reserved for padding
        X = X + 1
    order = rng.permutation(len(X))
    split = _split_point(len(X), eval_fraction, "texts")
    tr, ev = order[:split], order[split:]
    t = lambda a: torch.as_tensor(a)  # noqa: E731
    return TokenTask(
        t(X[tr]),
        t(y[tr]),
        t(X[ev]),
        t(y[ev]),
        int(X.max()) + 1,
        max_len,
        f"{corpus.name}/{corpus.split}: original vs shuffled word order",
    )


PLANTED_TASKS = ("precedes", "contains")


def planted_task(
    task: str = "precedes",
    L: int = 16,
    V: int = 32,
    num_sequences: int = 4000,
    background: str = "stationary",
    eval_fraction: float = 0.25,
    seed: int = 0,
) -> TokenTask:
    """Synthetic sequences with two planted marker tokens ``a`` and ``b``.

    ``precedes`` (order-sensitive): ``a`` and ``b`` stand at two random distinct
    positions; label 1 when ``a`` comes first. ``contains`` (order-insensitive): one
    marker at a random position; label 1 when it is ``a``. The other tokens come from
    :func:`~posgeom_utils.corpus.synthetic_corpus` with kind ``background``
    (``stationary``: the same distribution at every position; ``drift``:
    non-stationary). Ids are shifted by one so that 0 stays the padding id (there is no
    padding here). Chapter: *Why a Transformer needs positions*,
    *Do distinct positions get distinct vectors?*.
    """
    if task not in PLANTED_TASKS:
        raise ValueError(f"task must be one of {PLANTED_TASKS}, got {task!r}")
    if L < 2:
        raise ValueError(f"L must be >= 2 (two markers), got {L}")
    split = _split_point(num_sequences, eval_fraction, "num_sequences")
    rng = np.random.default_rng(seed)
    X = (
        synthetic_corpus(
            background, n=L, V=V, num_sequences=num_sequences, seed=seed
        ).ids
        + 1
    )
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
    t = lambda arr: torch.as_tensor(arr)  # noqa: E731
    return TokenTask(
        t(X[:split]),
        t(y[:split]),
        t(X[split:]),
        t(y[split:]),
        V + 3,
        L,
        f"planted '{task}' task on a {background} background (L={L}, V={V})",
    )


# 'mask': keeps masked_task's random stream apart from the corpus generators
_MASK_STREAM = 0x6D61736B


def masked_task(
    ids: np.ndarray,
    V: int,
    mask_rate: float = 0.15,
    eval_fraction: float = 0.25,
    seed: int = 0,
) -> TokenTask:
    """Masked-language modelling on complete sequences of token ids in ``[0, V)``
    (no padding).

    Ids are shifted by two: 0 is the padding id and 1 the ``[MASK]`` id. Each token is
    masked with probability ``mask_rate`` (at least one per sequence); the targets are
    the original (shifted) ids at masked positions and ``-100`` (not scored) elsewhere.
    On a corpus whose positions are drawn independently, the best prediction at position
    i is mu_i itself: the loss is *positionally sufficient*. Chapter: *Monotonicity*.
    """
    ids = np.asarray(ids)
    if ids.ndim != 2 or ids.shape[0] < 2 or ids.shape[1] < 1:
        raise ValueError(
            f"ids must be a (num_sequences >= 2, L >= 1) array, got shape {ids.shape}"
        )
    if ids.min() < 0 or ids.max() >= V:
        raise ValueError(
            f"ids must lie in [0, V={V}), got range [{ids.min()}, {ids.max()}]"
        )
    if not 0.0 < mask_rate <= 1.0:
        raise ValueError(f"mask_rate must be in (0, 1], got {mask_rate}")
    # a stream of its own: synthetic_corpus(seed=s) draws its tokens from
    # default_rng(s + 1), and a mask drawn from the same stream would pick tokens by
    # their value (mask rate p: the p-quantile of every position)
    rng = np.random.default_rng([seed, _MASK_STREAM])
    shifted = ids.astype(np.int64) + 2
    masked = rng.random(ids.shape) < mask_rate
    masked[np.arange(len(ids)), rng.integers(0, ids.shape[1], len(ids))] = True
    X = np.where(masked, 1, shifted)
    y = np.where(masked, shifted, -100)
    split = _split_point(len(ids), eval_fraction, "sequences")
    t = lambda arr: torch.as_tensor(arr)  # noqa: E731
    return TokenTask(
        t(X[:split]),
        t(y[:split]),
        t(X[split:]),
        t(y[split:]),
        V + 2,
        ids.shape[1],
        f"masked-language modelling (mask rate {mask_rate}, L={ids.shape[1]}, V={V})",
    )


def presence_task(task: TokenTask, seed: int = 0) -> TokenTask:
    """An order-insensitive control on the inputs of ``task``: label 1 when the input
    contains the token ``w``, 0 otherwise.

    ``w`` is the token (padding excluded) whose share of training inputs containing it is
    closest to 1/2; each split is then balanced by dropping examples of its larger class
    at random (seeded), so both classes have the same size. The label depends only on the
    set of tokens, so any permutation of an input's tokens keeps its label: with the same
    inputs as an order task, only condition (b) of the separation theorem changes.
    Chapter: *Do distinct positions get distinct vectors?*.
    """
    X_train, X_eval = np.asarray(task.X_train), np.asarray(task.X_eval)
    if X_train.ndim != 2 or len(X_train) < 2 or len(X_eval) < 2:
        raise ValueError(
            "task must have at least two train and two eval inputs of shape (N, L), "
            f"got {X_train.shape} and {X_eval.shape}"
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
                f"token {word} is in all or none of a split's inputs: no balanced "
                "control can be drawn; pass a task with more inputs"
            )
        keep = np.sort(np.concatenate([
            rng.choice(np.flatnonzero(y), n, replace=False),
            rng.choice(np.flatnonzero(~y), n, replace=False),
        ]))
        return X[keep], y[keep].astype(np.int64)

    (Xt, yt), (Xe, ye) = balanced(X_train), balanced(X_eval)
    t = lambda arr: torch.as_tensor(arr)  # noqa: E731
    return TokenTask(
        t(Xt),
        t(yt),
        t(Xe),
        t(ye),
        task.vocab_size,
        task.max_len,
        f"{task.description}, relabelled: does token {word} occur? (order-insensitive)",
    )

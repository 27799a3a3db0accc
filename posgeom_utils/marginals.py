"""The positional token distributions mu_i of a corpus (n x V), counted in one stream of
flat keys ``i * V + v`` into a sparse matrix; padding is never counted.
Chapter: *Positions in real text*."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from . import checks
from .cache import atomic_write, cache_key, cache_path, read_or_discard
from .corpus import Corpus, check_texts
from .settings import progress

CACHE_VERSION = 1
SPECIAL_POLICIES = ("keep", "drop")
ALIGNMENTS = ("start", "end")
VIEWS = ("model", "corpus")
#: count options that two counts must share to be merged
MERGE_KEYS = ("n", "V", "special_tokens", "align", "view", "tokenizer_sha", "version")


def _csr(keys: np.ndarray, values: np.ndarray, n: int, V: int) -> sp.csr_array:
    """n x V CSR matrix of ``values`` at sorted, distinct flat keys ``i * V + v``."""
    rows = keys // V
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    columns = (keys - rows * V).astype(np.int32)
    return sp.csr_array((values.astype(np.int64), columns, indptr), shape=(n, V))


@dataclass
class PositionalMarginals:
    """Token counts per position and their ``mu``. Chapter: *Positions in real text*."""

    counts: sp.csr_array  # (n, V) int64: how often token v stands at position i
    support: np.ndarray  # (n,) int64: how many sequences reach position i
    # length_hist[L] = number of sequences of (untruncated) length L
    length_hist: np.ndarray
    params: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Number of positions. Chapter: *Positions in real text*."""
        return self.counts.shape[0]

    @property
    def V(self) -> int:
        """Vocabulary size. Chapter: *Positions in real text*."""
        return self.counts.shape[1]

    @property
    def num_sequences(self) -> int:
        """How many sequences were counted. Chapter: *Positions in real text*."""
        return int(self.length_hist.sum())

    def mu(self, smoothing: float = 0.0) -> np.ndarray:
        """mu, with ``smoothing`` added to counts. Chapter: *Positions in real text*."""
        fix = "pass 0 (plain frequencies) or a small pseudo-count such as 0.5"
        smoothing = checks.number(smoothing, "smoothing", 0, fix=fix)
        empty = np.flatnonzero(self.support == 0)
        if empty.size and smoothing == 0:
            raise ValueError(
                f"positions {empty[0]}..{self.n - 1} have no tokens: use a smaller n, "
                "truncate(min_count=...) or smoothing > 0"
            )
        # the computation
        dense = self.counts.toarray().astype(np.float64) + smoothing
        return dense / (self.support[:, None] + smoothing * self.V)

    def truncate(
        self, n: int | None = None, min_count: int | None = None
    ) -> PositionalMarginals:
        """Keep the first ``n`` positions, and/or those reached by at least
        ``min_count`` sequences. Chapter: *Positions in real text*."""
        keep = self.n if n is None else min(checks.integer(n, "n"), self.n)
        if min_count is not None:
            reached = self.support >= checks.integer(min_count, "min_count")
            keep = min(keep, int(np.sum(reached)))
        if keep < 1:
            most = int(self.support.max(initial=0))
            raise ValueError(
                f"no position is reached by min_count={min_count} (most: {most}): "
                "lower min_count"
            )
        params = {**self.params, "n": keep, "min_count": min_count}
        return PositionalMarginals(
            self.counts[:keep], self.support[:keep].copy(), self.length_hist, params
        )

    def entropy(self, base: float = 2.0) -> np.ndarray:
        """Entropy of each mu_i (default: bits). Chapter: *Positions in real text*."""
        fix = "pass 2 (bits) or math.e (nats)"
        base = checks.number(base, "base", 0, low_open=True, fix=fix)
        checks.require(base != 1, "base", "a finite number > 0 and != 1", base, fix)
        # the computation
        c = self.counts
        rows = np.repeat(np.arange(self.n), np.diff(c.indptr))
        p = c.data / np.maximum(self.support[rows], 1)
        # O(nnz), not per token
        h = np.bincount(rows, weights=-p * np.log(p), minlength=self.n)
        return h / np.log(base)

    def top_tokens(self, i: int, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` tokens at ``i``, with shares. Chapter: *Positions in real text*."""
        i = checks.integer(i, "i", 0, self.n - 1)
        k = checks.integer(k, "k", fix="how many tokens to list, e.g. k=5")
        row = self.counts[[i]]
        order = np.argsort(-row.data, kind="stable")[:k]
        return row.indices[order], row.data[order] / max(int(self.support[i]), 1)

    def merge(self, other: PositionalMarginals) -> PositionalMarginals:
        """Both corpora's counts, summed. Chapter: *Beyond one machine*."""
        if not isinstance(other, PositionalMarginals):
            raise TypeError(
                f"other must be a PositionalMarginals, got {type(other).__name__}"
            )
        if self.counts.shape != other.counts.shape:
            shapes = f"{self.counts.shape} and {other.counts.shape}"
            raise ValueError(
                f"cannot merge counts of shapes {shapes}: use one n and tokenizer"
            )
        for key in MERGE_KEYS:
            a, b = self.params.get(key), other.params.get(key)
            if a is not None and b is not None and a != b:
                raise ValueError(
                    f"cannot merge counts made with {key}={a!r} and {key}={b!r}"
                )
        counts = (self.counts + other.counts).tocsr()
        counts.sum_duplicates()  # canonical: sorted indices, no duplicates
        size = max(self.length_hist.size, other.length_hist.size)
        length_hist = np.zeros(size, dtype=np.int64)
        length_hist[: self.length_hist.size] += self.length_hist
        length_hist[: other.length_hist.size] += other.length_hist
        params = {k: v for k, v in self.params.items() if other.params.get(k) == v}
        support = (self.support + other.support).astype(np.int64)
        return PositionalMarginals(
            counts.astype(np.int64), support, length_hist, params
        )

    def save(self, path: Path) -> Path:
        """Write ``path`` (``.npz``) atomically. Chapter: *Positions in real text*."""
        c = self.counts
        arrays = {
            "data": c.data,
            "indices": c.indices,
            "indptr": c.indptr,
            "shape": np.array(c.shape),
            "support": self.support,
            "length_hist": self.length_hist,
            "params": np.array(json.dumps(self.params, default=str)),
        }

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:
                np.savez(fh, **arrays)

        return atomic_write(Path(path), write)

    @classmethod
    def load(cls, path: Path) -> PositionalMarginals:
        """Read what :meth:`save` wrote. Chapter: *Positions in real text*."""
        with np.load(path, allow_pickle=False) as z:
            counts = sp.csr_array(
                (z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"])
            )
            return cls(
                counts, z["support"], z["length_hist"], json.loads(str(z["params"]))
            )


def special_template(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a text (``[CLS]`` and
    ``[SEP]`` for BERT). Chapter: *Positions in real text*."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for k in range(len(full) - len(plain) + 1):
        if full[k : k + len(plain)] == plain:
            return list(full[:k]), list(full[k + len(plain) :])
    raise ValueError("cannot locate a text inside the tokenizer's special tokens")


class _Encoder:
    """Tokenize texts (no special tokens, no truncation) into flat ids and lengths."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.backend = copy.deepcopy(getattr(tokenizer, "backend_tokenizer", None))
        if self.backend is not None:
            self.backend.no_truncation()
            self.backend.no_padding()

    def __call__(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        texts = list(texts)
        if self.backend is not None:
            encoded = self.backend.encode_batch(texts, add_special_tokens=False)
            ids = [e.ids for e in encoded]
        else:  # slow tokenizers: same result, Python speed
            encoded = self.tokenizer(texts, add_special_tokens=False, truncation=False)
            ids = encoded["input_ids"]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = itertools.chain.from_iterable(ids)
        return np.fromiter(flat, dtype=np.int64, count=int(lengths.sum())), lengths


class _Counter:
    """Folds flat keys ``i * V + v`` into sparse counts, one sort per buffer (memory:
    the buffer and the non-zero counts, never a dense n x V array)."""

    def __init__(self, n: int, V: int, buffer_tokens: int):
        self.n, self.V, self.buffer_tokens = n, V, buffer_tokens
        self.dtype = np.int32 if n * V < 2**31 else np.int64
        self.counts = sp.csr_array((n, V), dtype=np.int64)
        self.pending: list[np.ndarray] = []
        self.pending_size = 0
        self.support_hist = np.zeros(n + 1, dtype=np.int64)
        self.length_hist = np.zeros(1, dtype=np.int64)

    def add(self, positions, ids, model_lengths, full_lengths) -> None:
        dtype = self.dtype
        keys = positions.astype(dtype, copy=False) * self.V + ids.astype(
            dtype, copy=False
        )
        self.pending.append(keys)
        self.pending_size += keys.size
        self.support_hist += np.bincount(model_lengths, minlength=self.n + 1)
        hist = np.bincount(full_lengths)
        if hist.size > self.length_hist.size:
            hist[: self.length_hist.size] += self.length_hist
            self.length_hist = hist
        else:
            self.length_hist[: hist.size] += hist
        if self.pending_size >= self.buffer_tokens:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        keys = np.concatenate(self.pending)
        self.pending, self.pending_size = [], 0
        unique, counts = np.unique(keys, return_counts=True)
        batch = _csr(unique, counts, self.n, self.V)
        self.counts = batch if self.counts.nnz == 0 else (self.counts + batch).tocsr()

    def result(self, params: dict) -> PositionalMarginals:
        self.flush()
        # sequences with length > i
        support = self.support_hist[::-1].cumsum()[::-1][1:]
        return PositionalMarginals(
            self.counts, support.astype(np.int64), self.length_hist, params
        )


def _positions(lengths, n, prefix, suffix, align, view="model"):
    """Per batch: each content token's position and whether it counts, the counted
    special tokens (positions, ids, texts) and each text's reach, as the model sees it
    or in the corpus (``view``)."""
    p, s = len(prefix), len(suffix)
    # model: the content tokens that survive truncation; corpus: nothing moves, and
    # positions >= n are dropped below
    kept = np.minimum(lengths, n - p - s) if view == "model" else lengths
    seq_len = kept + p + s
    starts = np.cumsum(lengths) - lengths
    within = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(starts, lengths)
    pos = within + p
    text = np.arange(lengths.size, dtype=np.int64)
    special_pos = [np.full(lengths.size, k, dtype=np.int64) for k in range(p)]
    special_pos += [p + kept + k for k in range(s)]
    special_ids = [
        np.full(lengths.size, tok, dtype=np.int64) for tok in prefix + suffix
    ]
    special_pos = np.concatenate(special_pos) if special_pos else text[:0]
    special_ids = np.concatenate(special_ids) if special_ids else text[:0]
    special_text = np.tile(text, p + s)
    if align == "end":
        pos = np.repeat(seq_len, lengths) - 1 - pos
        special_pos = seq_len[special_text] - 1 - special_pos
    mask = (within < np.repeat(kept, lengths)) & (pos < n)
    counted = special_pos < n
    special = [x[counted] for x in (special_pos, special_ids, special_text)]
    return pos, mask, *special, np.minimum(seq_len, n)


def _tokenizer_fingerprint(tokenizer: Any) -> str:
    """A hash of what the tokenizer does, not of its last call's state."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        blob = json.dumps(sorted(tokenizer.get_vocab().items()))
    else:
        state = json.loads(backend.to_str())
        for key in ("truncation", "padding"):  # set by the last call; irrelevant here
            state.pop(key, None)
        blob = json.dumps(state, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def texts_fingerprint(texts: Sequence[str]) -> str:
    """A length-prefixed content hash of texts. Chapter: *Positions in real text*."""
    h = hashlib.sha256()
    for text in texts:
        b = text.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()[:24]


def _check_options(tokenizer, n, special_tokens, align, buffer_tokens, view="model"):
    """Validate the counting options; return ``n`` and the special-token template."""
    n = checks.integer(n, "n")
    fix = (
        "'model' for the input the model sees (truncated), "
        "'corpus' for the text's own positions"
    )
    checks.choice(view, "view", VIEWS, fix)
    checks.choice(special_tokens, "special_tokens", SPECIAL_POLICIES)
    checks.choice(align, "align", ALIGNMENTS)
    checks.integer(buffer_tokens, "buffer_tokens")
    keep = special_tokens == "keep"
    prefix, suffix = special_template(tokenizer) if keep else ([], [])
    specials = len(prefix) + len(suffix)
    if n < specials + 1:
        raise ValueError(
            f"n={n} leaves no room for text: pass n > {specials} or "
            "special_tokens='drop'"
        )
    return n, prefix, suffix


def counting_params(
    tokenizer: Any,
    n: int,
    special_tokens: str = "keep",
    align: str = "start",
    view: str = "model",
) -> dict:
    """What a count depends on besides the texts (cache key, merge check): ``n``, ``V``,
    the policies, the tokenizer's content hash. Chapter: *Positions in real text*."""
    n, V = checks.integer(n, "n"), len(tokenizer)
    name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
    return {
        "n": n,
        "V": V,
        "special_tokens": special_tokens,
        "align": align,
        "view": view,
        "tokenizer": name,
        "tokenizer_sha": _tokenizer_fingerprint(tokenizer),
        "version": CACHE_VERSION,
    }


def count_batches(
    batches: Iterable[Sequence[str]],
    tokenizer: Any,
    n: int,
    special_tokens: str = "keep",
    align: str = "start",
    buffer_tokens: int = 2**24,
    params: dict | None = None,
    view: str = "model",
) -> PositionalMarginals:
    """The streaming counter: count batches of texts as they come, holding one batch and
    the sparse counts (no cache). Chapter: *Positions in real text*."""
    n, prefix, suffix = _check_options(
        tokenizer, n, special_tokens, align, buffer_tokens, view
    )
    # the computation
    if params is None:
        params = counting_params(tokenizer, n, special_tokens, align, view)
    encode = _Encoder(tokenizer)
    counter = _Counter(n, len(tokenizer), buffer_tokens)
    extra = len(prefix) + len(suffix)
    for batch in batches:
        if len(batch) == 0:
            continue
        ids, lengths = encode(batch)
        pos, mask, special_pos, special_ids, _, reach = _positions(
            lengths, n, prefix, suffix, align, view
        )
        positions = np.concatenate([pos[mask], special_pos])
        counter.add(
            positions, np.concatenate([ids[mask], special_ids]), reach, lengths + extra
        )
    return counter.result(params)


def positional_marginals(
    texts: Corpus | Sequence[str],
    tokenizer: Any,
    n: int,
    special_tokens: str = "keep",
    align: str = "start",
    min_count: int | None = None,
    batch_size: int = 2048,
    buffer_tokens: int = 2**24,
    cache: bool = True,
    view: str = "model",
) -> PositionalMarginals:
    """Count the positional token distributions of ``texts`` for positions 0..n-1
    (cached on disk). Chapter: *Positions in real text*."""
    n, _, _ = _check_options(tokenizer, n, special_tokens, align, buffer_tokens, view)
    checks.integer(batch_size, "batch_size")
    checks.integer(min_count, "min_count", optional=True)
    corpus_key = dict(texts.key) if isinstance(texts, Corpus) else {}
    texts = check_texts(texts)
    # the content, whatever the name
    corpus_key["texts_sha256"] = texts_fingerprint(texts)
    params = counting_params(tokenizer, n, special_tokens, align, view)
    params["corpus"] = corpus_key
    path = cache_path("marginals", cache_key(**params), ".npz")
    cached = read_or_discard(path, PositionalMarginals.load) if cache else None
    if cached is not None:
        return _apply_min_count(cached, min_count)
    starts = range(0, len(texts), batch_size)
    batches = (
        texts[i : i + batch_size]
        for i in progress(starts, desc="counting tokens per position")
    )
    result = count_batches(
        batches, tokenizer, n, special_tokens, align, buffer_tokens, params, view
    )
    if cache:
        result.save(path)
    return _apply_min_count(result, min_count)


def _support(model_lengths: np.ndarray, weights: np.ndarray, n: int) -> np.ndarray:
    """Per position j < n, the weight of the texts reaching it (model length > j)."""
    reached = np.bincount(model_lengths, weights=weights, minlength=n + 1)
    return reached[::-1].cumsum()[::-1][1:].astype(np.int64)


def _check_weights(weights: Any, N: int) -> np.ndarray:
    """``weights`` as N int64 counts >= 0: how often each of N texts is drawn."""
    weights = np.asarray(weights)
    ok = weights.shape == (N,) and np.issubdtype(weights.dtype, np.integer)
    checks.require(ok, "weights", f"{N} integers", (weights.shape, weights.dtype))
    low = weights.min(initial=0)
    checks.require(low >= 0, "weights", ">= 0 (how often each text is drawn)", low)
    return weights.astype(np.int64)


@dataclass
class TextCounts:
    """The (position, token) pairs of each text. Chapter: *Positions in real text*."""

    incidence: sp.csr_array  # (N, K) int8 0/1: text t has pair keys[k]
    keys: np.ndarray  # (K,) int64 flat keys i * V + v, sorted
    model_lengths: np.ndarray  # (N,) positions each text reaches (<= n)
    full_lengths: np.ndarray  # (N,) untruncated lengths, specials included
    n: int
    V: int
    params: dict = field(default_factory=dict)

    @property
    def num_texts(self) -> int:
        """How many texts were counted. Chapter: *Positions in real text*."""
        return self.incidence.shape[0]

    def truncate(self, n: int) -> TextCounts:
        """Keep the first ``n`` positions. Chapter: *Positions in real text*."""
        n = min(checks.integer(n, "n"), self.n)
        keep = self.keys < n * self.V
        incidence = sp.csr_array(self.incidence[:, np.flatnonzero(keep)])
        keys, lengths = self.keys[keep], np.minimum(self.model_lengths, n)
        params = {**self.params, "n": n}
        return TextCounts(
            incidence, keys, lengths, self.full_lengths, n, self.V, params
        )

    def marginals(self, weights: np.ndarray | None = None) -> PositionalMarginals:
        """Counts of the corpus with text ``t`` drawn ``weights[t]`` times (ints >= 0;
        default all ones: the corpus itself). Chapter: *Positions in real text*."""
        N = self.num_texts
        weights = _check_weights(
            np.ones(N, dtype=np.int64) if weights is None else weights, N
        )
        totals = self.incidence.T @ weights  # (K,) count of each pair
        keep = totals > 0
        counts = _csr(self.keys[keep], totals[keep], self.n, self.V)
        support = _support(self.model_lengths, weights, self.n)
        length_hist = np.bincount(self.full_lengths, weights=weights).astype(np.int64)
        return PositionalMarginals(counts, support, length_hist, dict(self.params))


def text_counts(
    texts: Corpus | Sequence[str],
    tokenizer: Any,
    n: int,
    special_tokens: str = "keep",
    align: str = "start",
    batch_size: int = 2048,
    view: str = "model",
) -> TextCounts:
    """Count ``texts`` like :func:`positional_marginals`, keeping which text contributed
    each pair. Chapter: *Positions in real text*."""
    n, prefix, suffix = _check_options(tokenizer, n, special_tokens, align, 1, view)
    texts = check_texts(texts)
    V = len(tokenizer)
    encode = _Encoder(tokenizer)
    extra = len(prefix) + len(suffix)
    text_ids, key_parts, model_lengths, full_lengths = [], [], [], []
    for start in range(0, len(texts), batch_size):
        ids, lengths = encode(texts[start : start + batch_size])
        pos, mask, sp_pos, sp_ids, sp_text, reach = _positions(
            lengths, n, prefix, suffix, align, view
        )
        index = np.arange(start, start + lengths.size, dtype=np.int64)
        text_ids += [np.repeat(index, lengths)[mask], index[sp_text]]
        key_parts += [pos[mask] * V + ids[mask], sp_pos * V + sp_ids]
        model_lengths.append(reach)
        full_lengths.append(lengths + extra)
    lengths = (
        np.concatenate(x).astype(np.int64) for x in (model_lengths, full_lengths)
    )
    params = counting_params(tokenizer, n, special_tokens, align, view)
    return _incidence(
        np.concatenate(key_parts), np.concatenate(text_ids), *lengths, n, V, params
    )


def _incidence(flat, text_ids, model_lengths, full_lengths, n, V, params) -> TextCounts:
    """The :class:`TextCounts` of flat keys ``flat`` from texts ``text_ids``."""
    keys, column = np.unique(flat, return_inverse=True)
    incidence = sp.csr_array(
        (np.ones(flat.size, dtype=np.int8), (text_ids, column)),
        shape=(len(model_lengths), keys.size),
    )
    return TextCounts(
        incidence, keys.astype(np.int64), model_lengths, full_lengths, n, V, params
    )


def _check_ids(ids: Any, V: int) -> np.ndarray:
    """``ids`` as a non-empty 2-D array of integers in [0, V)."""
    ids = np.asarray(ids)
    ok = ids.ndim == 2 and ids.size > 0
    checks.require(ok, "ids", "a non-empty 2-D array (texts x positions)", ids.shape)
    if not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0 or ids.max() >= V:
        raise ValueError(f"ids must be integers in [0, V={V})")
    return ids


def marginals_from_ids(
    ids: np.ndarray, V: int, n: int | None = None
) -> PositionalMarginals:
    """Positional counts of an N x L array of token ids (e.g. a synthetic corpus).
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    ids = _check_ids(ids, V)
    n = ids.shape[1] if n is None else min(checks.integer(n, "n"), ids.shape[1])
    counter = _Counter(n, V, buffer_tokens=2**62)
    N = ids.shape[0]
    pos = np.broadcast_to(np.arange(n), (N, n)).ravel()
    counter.add(pos, ids[:, :n].ravel(), np.full(N, n), np.full(N, ids.shape[1]))
    return counter.result({"n": n, "V": V, "source": "ids"})


def _apply_min_count(
    result: PositionalMarginals, min_count: int | None
) -> PositionalMarginals:
    if min_count is not None:
        return result.truncate(min_count=min_count)
    empty = np.flatnonzero(result.support == 0)
    if empty.size:
        longest = int(np.flatnonzero(result.length_hist).max(initial=0))
        raise ValueError(
            f"n={result.n} is longer than any sequence (the longest has {longest} "
            "tokens): pass "
            f"n <= {empty[0]}, or min_count=k to keep the positions reached by k texts"
        )
    return result

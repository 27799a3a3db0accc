"""The positional token distributions mu_i of a corpus (rows of an n x V matrix),
counted in one stream.

Chapter: *Positions in real text*.

``mu_i(v)`` is the fraction of the sequences reaching position ``i`` whose token there
is ``v``. The counting is vectorised (one ``np.unique`` over flat keys ``i * V + v`` per
buffer of tokens, summed into a sparse matrix), so its cost is a small fraction of
tokenizing, and memory stays O(nnz + buffer) <= O(n V + buffer) whatever the corpus
size.

Choices, all explicit parameters:

- ``special_tokens``: ``"keep"`` counts the tokens the model really sees, e.g.
  ``[CLS] ... [SEP]`` for BERT (then position 0 is a point mass on ``[CLS]``);
  ``"drop"`` counts only the text's own tokens.
- truncation to ``n`` (``view``): ``"model"`` (default) counts what the model sees of a
  longer text, truncated as the tokenizer truncates it (``keep``: the text is cut to
  ``n - #specials`` tokens and the closing ``[SEP]`` moves to position ``n - 1``, so on
  long texts the last position is mostly ``[SEP]``); ``"corpus"`` counts the first
  ``n`` positions of the untruncated sequence, where no token moves (the text's own
  positional statistics).
- padding is never counted: sequences are not padded, each contributes only its real
  positions.
- ``align``: ``"start"`` counts position i from the first token; ``"end"`` counts it
  from the last token backwards (position 0 = last token), which is how "the end of a
  sentence" is compared.
- positions reached by few sequences: :attr:`PositionalMarginals.support` holds the
  per-position sample count; ``min_count`` keeps the leading positions reached by at
  least that many sequences (support never increases with i, so they form a prefix).
  Without it, a position that no sequence reaches is an error, never a silent division
  by zero.
- ``smoothing``: optional additive (Laplace) smoothing in
  :meth:`PositionalMarginals.mu`.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import scipy.sparse as sp

from .cache import atomic_write, cache_key, cache_path
from .corpus import Corpus, check_texts
from .settings import progress

CACHE_VERSION = 1
SPECIAL_POLICIES = ("keep", "drop")
ALIGNMENTS = ("start", "end")
VIEWS = ("model", "corpus")
#: count options that two counts must share to be merged
MERGE_KEYS = ("n", "V", "special_tokens", "align", "view", "tokenizer_sha", "version")


@dataclass
class PositionalMarginals:
    """Token counts per position and what is needed to turn them into distributions
    ``mu``.

    Chapter: *Positions in real text*.
    """

    counts: sp.csr_array  # (n, V) int64: how often token v stands at position i
    support: np.ndarray  # (n,) int64: how many sequences reach position i
    length_hist: (
        np.ndarray
    )  # length_hist[L] = number of sequences of (untruncated) length L
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
        """The dense n x V matrix of distributions; ``smoothing`` adds that pseudo-count
        to every cell.

        Chapter: *Positions in real text*.
        """
        if (
            isinstance(smoothing, (bool, np.bool_))
            or not isinstance(smoothing, (int, float, np.integer, np.floating))
            or not np.isfinite(smoothing)
            or smoothing < 0
        ):
            raise ValueError(
                f"smoothing must be a finite number >= 0, got smoothing={smoothing!r}: "
                "pass 0 (plain frequencies) or a small pseudo-count such as 0.5"
            )
        empty = np.flatnonzero(self.support == 0)
        if empty.size and smoothing == 0:
            raise ValueError(
                f"positions {empty[0]}..{self.n - 1} have no tokens (no sequence is "
                "that long): use a smaller n, truncate(min_count=...) or smoothing > 0"
            )
        dense = self.counts.toarray().astype(np.float64)
        if smoothing:
            dense += smoothing
        return dense / (self.support[:, None] + smoothing * self.V)

    def truncate(
        self, n: int | None = None, min_count: int | None = None
    ) -> "PositionalMarginals":
        """Keep the first ``n`` positions, and/or those reached by at least
        ``min_count`` sequences.

        Chapter: *Positions in real text*.
        """
        keep = self.n if n is None else min(_check_n(n), self.n)
        if min_count is not None:
            if min_count < 1:
                raise ValueError(f"min_count must be >= 1, got {min_count}")
            keep = min(keep, int(np.sum(self.support >= min_count)))
        if keep < 1:
            raise ValueError(
                f"no position is reached by min_count={min_count} sequences "
                f"(most: {int(self.support.max(initial=0))}): lower min_count"
            )
        params = {**self.params, "n": keep, "min_count": min_count}
        return PositionalMarginals(
            self.counts[:keep], self.support[:keep].copy(), self.length_hist, params
        )

    def entropy(self, base: float = 2.0) -> np.ndarray:
        """Shannon entropy of each mu_i (bits by default), from the sparse counts.

        Chapter: *Positions in real text*.
        """
        if (
            isinstance(base, (bool, np.bool_))
            or not isinstance(base, (int, float, np.integer, np.floating))
            or not np.isfinite(base)
            or base <= 0
            or base == 1
        ):
            raise ValueError(
                "base must be a finite number > 0 and != 1 (the logarithm's base), got "
                f"base={base!r}: pass 2 (bits) or math.e (nats)"
            )
        c = self.counts
        rows = np.repeat(np.arange(self.n), np.diff(c.indptr))
        p = c.data / np.maximum(self.support[rows], 1)
        h = np.bincount(
            rows, weights=-p * np.log(p), minlength=self.n
        )  # O(nnz), not per token
        return h / np.log(base)

    def top_tokens(self, i: int, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
        """Token ids and probabilities of the ``k`` most frequent tokens at position
        ``i``.

        Chapter: *Positions in real text*.
        """
        if not 0 <= i < self.n:
            raise ValueError(f"position i must be in [0, {self.n - 1}], got {i}")
        if (
            isinstance(k, (bool, np.bool_))
            or not isinstance(k, (int, np.integer))
            or k < 1
        ):
            raise ValueError(
                f"k must be a positive integer (how many tokens to list), got k={k!r}: "
                "pass e.g. k=5"
            )
        row = self.counts[[i]]
        order = np.argsort(-row.data, kind="stable")[:k]
        return row.indices[order], row.data[order] / max(int(self.support[i]), 1)

    def merge(self, other: "PositionalMarginals") -> "PositionalMarginals":
        """The counts of both corpora together: counts, supports and length histograms
        add, so merging the counts of disjoint shards gives the count of their union,
        exactly (integers; the result is in canonical CSR form).

        Both must be counted with the same ``n``, tokenizer and policies (checked on
        ``params`` where both record them). Chapter: *Beyond one machine*.
        """
        if not isinstance(other, PositionalMarginals):
            raise TypeError(
                f"other must be a PositionalMarginals, got {type(other).__name__}"
            )
        if self.counts.shape != other.counts.shape:
            raise ValueError(
                f"cannot merge counts of shapes {self.counts.shape} and "
                f"{other.counts.shape}: count every shard with the same n and tokenizer"
            )
        for key in MERGE_KEYS:
            a, b = self.params.get(key), other.params.get(key)
            if a is not None and b is not None and a != b:
                raise ValueError(
                    f"cannot merge counts made with {key}={a!r} and {key}={b!r}: count "
                    "every shard with the same options"
                )
        counts = (self.counts + other.counts).tocsr()
        counts.sum_duplicates()  # canonical: sorted indices, no duplicates
        size = max(self.length_hist.size, other.length_hist.size)
        length_hist = np.zeros(size, dtype=np.int64)
        length_hist[: self.length_hist.size] += self.length_hist
        length_hist[: other.length_hist.size] += other.length_hist
        params = {k: v for k, v in self.params.items() if other.params.get(k) == v}
        return PositionalMarginals(
            counts.astype(np.int64),
            (self.support + other.support).astype(np.int64),
            length_hist,
            params,
        )

    # ----------------------------------------------------------------- persistence
    def save(self, path: Path) -> Path:
        """Write atomically to ``path`` (an ``.npz``). Chapter: *How this book is built*
        (README: caches)."""
        c = self.counts

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:
                np.savez(
                    fh,
                    data=c.data,
                    indices=c.indices,
                    indptr=c.indptr,
                    shape=np.array(c.shape),
                    support=self.support,
                    length_hist=self.length_hist,
                    params=np.array(json.dumps(self.params, default=str)),
                )

        return atomic_write(Path(path), write)

    @classmethod
    def load(cls, path: Path) -> "PositionalMarginals":
        """Read what :meth:`save` wrote. Chapter: *How this book is built*
        (README: caches)."""
        with np.load(path, allow_pickle=False) as z:
            counts = sp.csr_array(
                (z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"])
            )
            return cls(
                counts, z["support"], z["length_hist"], json.loads(str(z["params"]))
            )


def _check_n(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(
            f"n must be a positive integer (the number of positions), got {n!r}"
        )
    return int(n)


def special_template(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a text, e.g.
    ``([CLS]], [SEP]])`` for BERT.

    Chapter: *Positions in real text*.
    """
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for k in range(len(full) - len(plain) + 1):
        if full[k : k + len(plain)] == plain:
            return list(full[:k]), list(full[k + len(plain) :])
    raise ValueError(
        "cannot locate the text inside the tokenizer's special-token template"
    )


class _Encoder:
    """Tokenize a batch of texts (no special tokens, no truncation) into flat ids and
    lengths."""

    def __init__(self, tokenizer: Any):
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self.tokenizer = tokenizer
        self.backend = None
        if backend is not None:
            self.backend = copy.deepcopy(backend)
            self.backend.no_truncation()
            self.backend.no_padding()

    def __call__(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        if self.backend is not None:
            ids = [
                e.ids
                for e in self.backend.encode_batch(
                    list(texts), add_special_tokens=False
                )
            ]
        else:  # slow tokenizers: same result, Python speed
            ids = self.tokenizer(
                list(texts), add_special_tokens=False, truncation=False
            )["input_ids"]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(
            itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum())
        )
        return flat, lengths


class _Counter:
    """Accumulates flat keys ``i * V + v`` and folds them into sparse counts, one sort
    per buffer.

    Counting is sparse (``np.unique`` on the buffered keys, then a CSR matrix), so
    memory is the buffer plus the non-zero counts, never a dense n x V array.
    """

    def __init__(self, n: int, V: int, buffer_tokens: int):
        self.n, self.V, self.buffer_tokens = n, V, buffer_tokens
        self.dtype = np.int32 if n * V < 2**31 else np.int64
        self.counts = sp.csr_array((n, V), dtype=np.int64)
        self.pending: list[np.ndarray] = []
        self.pending_size = 0
        self.support_hist = np.zeros(n + 1, dtype=np.int64)
        self.length_hist = np.zeros(1, dtype=np.int64)

    def add(
        self,
        positions: np.ndarray,
        ids: np.ndarray,
        model_lengths: np.ndarray,
        full_lengths: np.ndarray,
    ) -> None:
        keys = positions.astype(self.dtype, copy=False) * self.V + ids.astype(
            self.dtype, copy=False
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
        rows = unique // self.V
        indptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=self.n), out=indptr[1:])
        batch = sp.csr_array(
            (
                counts.astype(np.int64),
                (unique - rows * self.V).astype(np.int32),
                indptr,
            ),
            shape=(self.n, self.V),
        )
        self.counts = batch if self.counts.nnz == 0 else (self.counts + batch).tocsr()

    def result(self, params: dict) -> PositionalMarginals:
        self.flush()
        support = self.support_hist[::-1].cumsum()[::-1][
            1:
        ]  # sequences with length > i
        return PositionalMarginals(
            self.counts, support.astype(np.int64), self.length_hist, params
        )


def _positions(
    lengths: np.ndarray,
    n: int,
    prefix: list[int],
    suffix: list[int],
    align: str,
    view: str = "model",
):
    """For one batch of texts with ``lengths`` content tokens: the position of every
    content token and whether it is counted, the counted special tokens (positions,
    ids, which text), and the number of positions each text reaches.

    ``view="model"``: the input the model sees, truncated as the tokenizer truncates
    (``kept`` words, then the suffix). ``view="corpus"``: the first (``align="end"``:
    last) ``n`` tokens of the untruncated sequence, specials only where they stand.
    """
    p, s = len(prefix), len(suffix)
    if view == "model":
        kept = np.minimum(lengths, n - p - s)  # content tokens that survive truncation
    else:
        kept = lengths  # nothing moves; positions >= n are dropped below
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
    model_len = np.minimum(seq_len, n)
    return (
        pos,
        mask,
        special_pos[counted],
        special_ids[counted],
        special_text[counted],
        model_len,
    )


def _tokenizer_fingerprint(tokenizer: Any) -> str:
    """A hash of what the tokenizer does (vocabulary, model, normaliser), not of its
    last call's state."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        blob = json.dumps(sorted(tokenizer.get_vocab().items()))
    else:
        state = json.loads(backend.to_str())
        state.pop(
            "truncation", None
        )  # set by whatever call came last; irrelevant to our counts
        state.pop("padding", None)
        blob = json.dumps(state, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def texts_fingerprint(texts: Sequence[str]) -> str:
    """A content hash of a list of texts (length-prefixed, so no two different lists
    collide by joining).

    Chapter: *How this book is built* (README: caches).
    """
    h = hashlib.sha256()
    for text in texts:
        b = text.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()[:24]


def _check_options(
    tokenizer: Any,
    n: object,
    special_tokens: str,
    align: str,
    buffer_tokens: int,
    view: str = "model",
) -> tuple[int, list[int], list[int]]:
    """Validate the counting options; return ``n`` and the special-token template."""
    n = _check_n(n)
    if view not in VIEWS:
        raise ValueError(
            f"view must be one of {VIEWS}, got {view!r}: 'model' for the input the "
            "model sees (truncated, [SEP] moved to position n - 1), 'corpus' for the "
            "text's own positions"
        )
    if special_tokens not in SPECIAL_POLICIES:
        raise ValueError(
            f"special_tokens must be one of {SPECIAL_POLICIES}, got {special_tokens!r}"
        )
    if align not in ALIGNMENTS:
        raise ValueError(f"align must be one of {ALIGNMENTS}, got {align!r}")
    if (
        isinstance(buffer_tokens, bool)
        or not isinstance(buffer_tokens, (int, np.integer))
        or buffer_tokens < 1
    ):
        raise ValueError(
            f"buffer_tokens must be an integer >= 1, got {buffer_tokens!r}"
        )
    prefix, suffix = (
        special_template(tokenizer) if special_tokens == "keep" else ([], [])
    )
    if n < len(prefix) + len(suffix) + 1:
        raise ValueError(
            f"n={n} leaves no room for text between the {len(prefix) + len(suffix)} "
            f"special tokens: use n > {len(prefix) + len(suffix)} or "
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
    """What a count depends on besides the texts: ``n``, ``V``, the policies and the
    tokenizer's content hash (the cache key and the merge check use it).

    Chapter: *Positions in real text*.
    """
    return dict(
        n=_check_n(n),
        V=len(tokenizer),
        special_tokens=special_tokens,
        align=align,
        view=view,
        tokenizer=getattr(tokenizer, "name_or_path", type(tokenizer).__name__),
        tokenizer_sha=_tokenizer_fingerprint(tokenizer),
        version=CACHE_VERSION,
    )


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
    """The streaming counter: count batches of texts as they come, never holding more
    than one batch and the sparse counts (no cache; an empty stream gives zero counts).

    :func:`positional_marginals` runs it on one list of texts; a sharded corpus runs it
    once per shard and sums the results with :meth:`PositionalMarginals.merge`, which
    is exact (chapter *Beyond one machine*). Chapter: *Positions in real text*.
    """
    n, prefix, suffix = _check_options(
        tokenizer, n, special_tokens, align, buffer_tokens, view
    )
    if params is None:
        params = counting_params(tokenizer, n, special_tokens, align, view)
    encode = _Encoder(tokenizer)
    counter = _Counter(n, len(tokenizer), buffer_tokens)
    extra = len(prefix) + len(suffix)
    for batch in batches:
        if len(batch) == 0:
            continue
        ids, lengths = encode(batch)
        pos, mask, special_pos, special_ids, _, model_len = _positions(
            lengths, n, prefix, suffix, align, view
        )
        counter.add(
            np.concatenate([pos[mask], special_pos]),
            np.concatenate([ids[mask], special_ids]),
            model_len,
            lengths + extra,
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
    """Count the positional token distributions of ``texts`` under ``tokenizer`` for
    positions 0..n-1.

    ``texts`` is a :class:`~posgeom_utils.corpus.Corpus` or a sequence of strings. The
    result is cached on disk (keyed by the corpus, the tokenizer's content and every
    parameter) and written atomically; a cache hit returns identical arrays.
    ``min_count`` truncates to the leading positions reached by at least that many
    sequences; without it, an ``n`` longer than every sequence is an error.
    ``view="model"`` counts what the model sees of a text longer than ``n`` (cut, with
    the closing special token moved to position ``n - 1``); ``view="corpus"`` counts
    the text's own first ``n`` positions (no token moves).
    Chapter: *Positions in real text*.
    """
    n, _, _ = _check_options(tokenizer, n, special_tokens, align, buffer_tokens, view)
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, (int, np.integer))
        or batch_size < 1
    ):
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    corpus_key = dict(texts.key) if isinstance(texts, Corpus) else {}
    texts = check_texts(texts)
    corpus_key["texts_sha256"] = texts_fingerprint(
        texts
    )  # the content, whatever the corpus is called
    params = counting_params(tokenizer, n, special_tokens, align, view)
    params["corpus"] = corpus_key
    path = cache_path("marginals", cache_key(**params), ".npz")
    if cache and path.is_file():
        result = PositionalMarginals.load(path)
    else:
        batches = (
            texts[start : start + batch_size]
            for start in progress(
                range(0, len(texts), batch_size),
                desc="counting tokens per position",
                total=-(-len(texts) // batch_size),
            )
        )
        result = count_batches(
            batches, tokenizer, n, special_tokens, align, buffer_tokens, params, view
        )
        if cache:
            result.save(path)
    return _apply_min_count(result, min_count)


@dataclass
class TextCounts:
    """The positional counts of a corpus before they are summed over texts: which
    (position, token) pairs each text contributes.

    ``incidence[t, k]`` is 1 when text ``t`` has token ``keys[k] % V`` at position
    ``keys[k] // V``; the columns are only the pairs that occur. Weighting the texts
    (:meth:`marginals`) gives the counts of a resampled or split corpus without
    tokenizing again, which is what the bootstrap over texts and the split-half
    noise correction need (:mod:`posgeom_utils.sampling`).
    Chapter: *Positions in real text*.
    """

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

    def truncate(self, n: int) -> "TextCounts":
        """Keep the first ``n`` positions (as :meth:`PositionalMarginals.truncate`).

        Chapter: *Positions in real text*.
        """
        n = min(_check_n(n), self.n)
        keep = self.keys < n * self.V
        return TextCounts(
            sp.csr_array(self.incidence[:, np.flatnonzero(keep)]),
            self.keys[keep],
            np.minimum(self.model_lengths, n),
            self.full_lengths,
            n,
            self.V,
            {**self.params, "n": n},
        )

    def marginals(self, weights: np.ndarray | None = None) -> PositionalMarginals:
        """The counts of the corpus in which text ``t`` appears ``weights[t]`` times
        (integers >= 0; all ones by default: the corpus itself).

        Chapter: *Positions in real text*.
        """
        N = self.num_texts
        if weights is None:
            weights = np.ones(N, dtype=np.int64)
        weights = np.asarray(weights)
        if weights.shape != (N,) or not np.issubdtype(weights.dtype, np.integer):
            raise ValueError(
                f"weights must be {N} integers (one per text), got shape "
                f"{weights.shape} and dtype {weights.dtype}"
            )
        if weights.min(initial=0) < 0:
            raise ValueError("weights must be >= 0 (how often each text is drawn)")
        weights = weights.astype(np.int64)
        totals = self.incidence.T @ weights  # (K,) count of each pair
        keep = totals > 0
        keys, totals = self.keys[keep], totals[keep]
        rows = keys // self.V
        indptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=self.n), out=indptr[1:])
        counts = sp.csr_array(
            (totals.astype(np.int64), (keys - rows * self.V).astype(np.int32), indptr),
            shape=(self.n, self.V),
        )
        reached = np.bincount(self.model_lengths, weights=weights, minlength=self.n + 1)
        support = reached[::-1].cumsum()[::-1][1:].astype(np.int64)
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
    """Count ``texts`` like :func:`positional_marginals`, keeping which text
    contributed each (position, token) pair (memory: one entry per counted token).

    ``text_counts(...).marginals()`` equals ``positional_marginals(...)`` exactly.
    Chapter: *Positions in real text*.
    """
    n, prefix, suffix = _check_options(tokenizer, n, special_tokens, align, 1, view)
    texts = check_texts(texts)
    V = len(tokenizer)
    encode = _Encoder(tokenizer)
    extra = len(prefix) + len(suffix)
    text_ids, key_parts, model_lengths, full_lengths = [], [], [], []
    for start in range(0, len(texts), batch_size):
        ids, lengths = encode(texts[start : start + batch_size])
        pos, mask, special_pos, special_ids, special_text, model_len = _positions(
            lengths, n, prefix, suffix, align, view
        )
        index = np.arange(start, start + lengths.size, dtype=np.int64)
        text_ids += [np.repeat(index, lengths)[mask], index[special_text]]
        key_parts += [pos[mask] * V + ids[mask], special_pos * V + special_ids]
        model_lengths.append(model_len)
        full_lengths.append(lengths + extra)
    flat = np.concatenate(key_parts)
    keys, column = np.unique(flat, return_inverse=True)
    incidence = sp.csr_array(
        (np.ones(flat.size, dtype=np.int8), (np.concatenate(text_ids), column)),
        shape=(len(texts), keys.size),
    )
    params = counting_params(tokenizer, n, special_tokens, align, view)
    return TextCounts(
        incidence,
        keys.astype(np.int64),
        np.concatenate(model_lengths).astype(np.int64),
        np.concatenate(full_lengths).astype(np.int64),
        n,
        V,
        params,
    )


def marginals_from_ids(
    ids: np.ndarray, V: int, n: int | None = None
) -> PositionalMarginals:
    """Positional counts of equal-length token-id sequences (an N x L array), e.g. a
    synthetic corpus.

    Chapter: *MDS optimality*.
    """
    ids = np.asarray(ids)
    if ids.ndim != 2 or ids.size == 0:
        raise ValueError(
            "ids must be a non-empty 2-D array (sequences x positions), got shape "
            f"{ids.shape}"
        )
    if not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0 or ids.max() >= V:
        raise ValueError(f"ids must be integers in [0, V={V})")
    n = ids.shape[1] if n is None else min(_check_n(n), ids.shape[1])
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
            f"n={result.n} is longer than any sequence (positions "
            f"{empty[0]}..{result.n - 1} are never reached; the longest sequence has "
            f"{longest} tokens): pass n <= {empty[0]}, or min_count=k to keep the "
            "positions reached by at least k sequences"
        )
    return result

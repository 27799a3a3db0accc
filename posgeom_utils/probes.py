"""Per-layer, per-position means of an encoder's hidden states over a corpus (layer 0:
the embeddings output; padding never counted), from float64 sums over length-sorted
batches: memory does not grow with the corpus. Chapter: *Positions layer by layer*."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .checks import choice, integer, require
from .corpus import Corpus, check_texts
from .models import config_int, select_device
from .settings import progress

CENTRES = ("none", "global")


@dataclass
class LayerMeans:
    """Mean hidden state per layer and position. Chapter: *Positions layer by layer*."""

    means: np.ndarray  # (layers + 1, n', d): layer 0 = embeddings output
    counts: np.ndarray  # (n',) int64: how many sequences reach each kept position
    centre: str = "none"
    params: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Number of positions kept. Chapter: *Positions layer by layer*."""
        return self.means.shape[1]

    def centred(self) -> LayerMeans:
        """A copy with each layer's count-weighted mean over positions subtracted
        (``centre="global"``). Chapter: *Positions layer by layer*."""
        if self.centre == "global":
            return self
        weights = self.counts / self.counts.sum()
        means = self.means - np.einsum("i,lid->ld", weights, self.means)[:, None, :]
        params = dict(self.params, centre="global")
        return LayerMeans(means, self.counts.copy(), "global", params)


def check_probe(model: Any, n: Any, batch_size: Any, centre: Any) -> tuple[int, int]:
    """``(n, batch_size)`` as ints (``n`` <= the model's ``max_position_embeddings``),
    ``centre`` in :data:`CENTRES`. Chapter: *Positions layer by layer*."""
    limit = config_int(getattr(model, "config", None), "max_position_embeddings")
    fix = f"the model has max_position_embeddings={limit}" if limit else ""
    n = integer(n, "n", 1, limit, fix=fix or "pass the number of positions, e.g. n=64")
    choice(centre, "centre", CENTRES)
    return n, integer(batch_size, "batch_size")


def token_lengths(
    tokenizer: Any, texts: Sequence[str], n: int, special_tokens: bool
) -> np.ndarray:
    """Tokenized length of every text, truncated to ``n`` (what the probe sorts by).
    Chapter: *Positions layer by layer*."""
    special = bool(special_tokens)
    kw = {"add_special_tokens": special, "truncation": True, "max_length": n}
    chunks = (
        tokenizer(texts[s : s + 1024], **kw)["input_ids"]
        for s in range(0, len(texts), 1024)
    )
    return np.fromiter(
        (len(ids) for c in chunks for ids in c), dtype=np.int64, count=len(texts)
    )


def layer_sums(
    model: Any,
    tokenizer: Any,
    batches: Sequence[list[str]],
    n: int,
    special_tokens: bool,
    device: Any,
) -> tuple[Any, Any]:
    """Float64 sums ``(layers + 1, n, d)`` of the hidden states at each position (None
    without batches) and the counts ``(n,)`` of sequences reaching it, over ``batches``
    of texts. Chapter: *Positions layer by layer*."""
    import torch

    special = bool(special_tokens)
    kw = {"add_special_tokens": special, "truncation": True, "max_length": n}
    sums, counts = None, torch.zeros(n, dtype=torch.float64, device=device)
    with torch.inference_mode():
        for batch in progress(
            batches, desc="hidden states per position", total=len(batches)
        ):
            enc = tokenizer(batch, padding="longest", return_tensors="pt", **kw)
            enc = {k: v.to(device) for k, v in enc.items()}
            out = model(**enc, output_hidden_states=True)
            hidden = getattr(out, "hidden_states", None)
            kind, ok = type(model).__name__, hidden is not None
            require(ok, "model", "an AutoModel encoder (returning hidden_states)", kind)
            mask = enc["attention_mask"]  # (B, T): padding weighs 0
            T, weights = mask.shape[1], mask.to(hidden[0].dtype)
            if sums is None:
                shape = (len(hidden), n, hidden[0].shape[-1])
                sums = torch.zeros(shape, dtype=torch.float64, device=device)
            # one masked sum over the batch per layer
            for layer, h in enumerate(hidden):
                sums[layer, :T] += torch.einsum("bt,btd->td", weights, h).double()
            counts[:T] += mask.sum(0).to(torch.float64)
    return sums, counts


def positional_hidden_means(
    model: Any,
    tokenizer: Any,
    texts: Corpus | Sequence[str],
    n: int,
    batch_size: int = 64,
    special_tokens: bool = True,
    device: str = "auto",
    centre: str = "none",
) -> LayerMeans:
    """Every layer's mean hidden state at positions 0..n-1 over ``texts`` (truncated to
    ``n`` tokens; unreached positions dropped; ``centre``: :meth:`LayerMeans.centred`).
    Chapter: *Positions layer by layer*."""
    n, batch_size = check_probe(model, n, batch_size, centre)
    texts = check_texts(texts)
    # the computation
    dev = select_device(device)
    model = model.to(dev)
    lengths = token_lengths(tokenizer, texts, n, special_tokens)
    order = np.argsort(lengths, kind="stable")
    starts = range(0, len(texts), batch_size)
    batches = [[texts[i] for i in order[s : s + batch_size]] for s in starts]
    sums, counts = layer_sums(model, tokenizer, batches, n, special_tokens, dev)
    params = probe_params(model, texts, n, batch_size, special_tokens)
    result = layer_means(sums, counts, params)
    return result.centred() if centre == "global" else result


def layer_means(sums: Any, counts: Any, params: dict) -> LayerMeans:
    """Uncentred means on reached positions from float64 ``sums`` ``(layers + 1, n, d)``
    and ``counts`` ``(n,)``, arrays or tensors. Chapter: *Positions layer by layer*."""
    sums, counts = (x.cpu().numpy() if hasattr(x, "cpu") else x for x in (sums, counts))
    counts = counts.round().astype(np.int64)
    keep = np.flatnonzero(counts > 0)
    means = sums[:, keep] / counts[keep][None, :, None]
    return LayerMeans(means=means, counts=counts[keep], centre="none", params=params)


def probe_params(
    model: Any, texts: Sequence, n: int, batch_size: int, special_tokens: bool
) -> dict:
    """The ``params`` of an uncentred probe. Chapter: *Positions layer by layer*."""
    params = {"n": n, "batch_size": batch_size, "special_tokens": bool(special_tokens)}
    name = getattr(getattr(model, "config", None), "_name_or_path", None)
    return {**params, "centre": "none", "num_texts": len(texts), "model": name}


def probe_groups(
    model: Any,
    tokenizer: Any,
    texts: Corpus | Sequence[str],
    n: int,
    groups: int,
    seed: int = 0,
    batch_size: int = 64,
    device: str = "auto",
) -> list[LayerMeans]:
    """Probe ``groups`` disjoint seeded random groups of ``texts`` (sizes within one),
    uncentred, for a bootstrap over groups. Chapter: *Positions layer by layer*."""
    texts = check_texts(texts)
    groups = integer(
        groups, "groups", 2, len(texts), fix="at least 2, at most one per text"
    )
    # the computation
    perm = np.random.default_rng(seed).permutation(len(texts))
    subsets = ([texts[i] for i in np.sort(idx)] for idx in np.array_split(perm, groups))
    kw = {"n": n, "batch_size": batch_size, "device": device}
    return [positional_hidden_means(model, tokenizer, s, **kw) for s in subsets]


def _stacked_sums(parts: Sequence[LayerMeans]) -> tuple[np.ndarray, np.ndarray]:
    """Sums ``(parts, layers + 1, n, d)``, counts ``(parts, n)``, zero-padded."""
    if len(parts) < 1:
        raise ValueError("need at least one LayerMeans")
    if any(p.centre != "none" for p in parts):
        raise ValueError("merging needs uncentred means: probe with centre='none'")
    shapes = {(p.means.shape[0], p.means.shape[2]) for p in parts}
    if len(shapes) != 1:
        raise ValueError(f"cannot merge means of different models: {sorted(shapes)}")
    width = max(p.n for p in parts)
    layers, d = shapes.pop()
    sums = np.zeros((len(parts), layers, width, d))
    counts = np.zeros((len(parts), width), dtype=np.int64)
    for g, p in enumerate(parts):
        sums[g, :, : p.n] = p.means * p.counts[None, :, None]
        counts[g, : p.n] = p.counts
    return sums, counts


def merge_layer_means(
    parts: Sequence[LayerMeans], weights: Sequence[int] | None = None
) -> LayerMeans:
    """Count-weighted uncentred means of ``parts``, part g counted ``weights[g]`` times
    (default 1), on the positions reached. Chapter: *Positions layer by layer*."""
    sums, counts = _stacked_sums(parts)
    w = np.ones(len(parts), dtype=np.int64) if weights is None else np.asarray(weights)
    if w.shape != (len(parts),) or np.any(w < 0) or not np.any(w > 0):
        raise ValueError("weights must be one non-negative integer per part, not all 0")
    num_texts = sum(int(k) * p.params.get("num_texts", 0) for k, p in zip(w, parts))
    params = dict(parts[0].params, num_texts=num_texts)
    return layer_means(np.tensordot(w, sums, 1), w @ counts, params)


def bootstrap_groups(
    parts: Sequence[LayerMeans], replicates: int = 200, seed: int = 0
) -> Iterator[LayerMeans]:
    """Yield ``replicates`` bootstrap resamples of whole groups: ``len(parts)`` groups
    drawn with replacement (seeded), merged. Chapter: *Positions layer by layer*."""
    replicates = integer(replicates, "replicates", 2)
    sums, counts = _stacked_sums(parts)
    rng = np.random.default_rng(seed)
    for _ in range(replicates):
        w = np.bincount(rng.integers(0, len(parts), len(parts)), minlength=len(parts))
        num_texts = sum(int(k) * p.params.get("num_texts", 0) for k, p in zip(w, parts))
        params = dict(parts[0].params, num_texts=num_texts)
        yield layer_means(np.tensordot(w, sums, 1), w @ counts, params)

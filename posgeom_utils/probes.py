"""Per-layer, per-position means of an encoder's hidden states over a corpus.

Chapter: *Positions layer by layer*.

For every layer ``l`` (``0`` = the embeddings output, then one per transformer block)
and position ``i``, ``means[l, i]`` is the average hidden state at position ``i`` over
the sequences that reach it (padding is never counted). Texts are run in batches with
length bucketing (sorted by tokenized length, each batch padded only to its own longest
sequence), under ``torch.inference_mode``. Memory does not grow with the corpus: only
running sums of shape ``(layers + 1, n, d)`` and counts ``(n,)`` are kept (plus one
integer length per text for the sort).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np

from .corpus import Corpus, check_texts
from .models import select_device
from .settings import progress

CENTRES = ("none", "global")


@dataclass
class LayerMeans:
    """Mean hidden state per layer and position: ``means`` is ``(layers + 1, n', d)``
    float64.

    Chapter: *Positions layer by layer*.
    """

    means: np.ndarray  # (layers + 1, n', d): layer 0 = embeddings output
    counts: np.ndarray  # (n',) int64: how many sequences reach each kept position
    centre: str = "none"
    params: dict = field(default_factory=dict)

    @property
    def num_layers(self) -> int:
        """Number of hidden-state layers, embeddings output included.
        Chapter: *Positions layer by layer*."""
        return self.means.shape[0]

    @property
    def n(self) -> int:
        """Number of positions kept (those reached by at least one sequence).

        Chapter: *Positions layer by layer*.
        """
        return self.means.shape[1]

    def merge(self, other: "LayerMeans") -> "LayerMeans":
        """The means over both runs' texts (count-weighted), on the positions both
        reach.

        Both must be uncentred (``centre="none"``): probe disjoint parts of a corpus
        separately (for a stability check, or on several machines) and merge them.
        Chapter: *Positions layer by layer*.
        """
        if self.centre != "none" or other.centre != "none":
            raise ValueError(
                "merge needs uncentred means: probe with centre='none', then call "
                "centred()"
            )
        if (
            self.means.shape[0] != other.means.shape[0]
            or self.means.shape[2] != other.means.shape[2]
        ):
            raise ValueError(
                f"cannot merge means of shapes {self.means.shape} and "
                f"{other.means.shape}: probe the same model"
            )
        k = min(self.n, other.n)
        a, b = self.counts[:k], other.counts[:k]
        total = a + b
        means = (
            self.means[:, :k] * a[None, :, None] + other.means[:, :k] * b[None, :, None]
        ) / total[None, :, None]
        params = dict(
            self.params,
            num_texts=self.params.get("num_texts", 0)
            + other.params.get("num_texts", 0),
        )
        return LayerMeans(means=means, counts=total, centre="none", params=params)

    def centred(self) -> "LayerMeans":
        """A copy with each layer's count-weighted mean over positions subtracted
        (``centre="global"``).

        Chapter: *Positions layer by layer*.
        """
        if self.centre == "global":
            return self
        weights = self.counts / self.counts.sum()
        means = self.means - np.einsum("i,lid->ld", weights, self.means)[:, None, :]
        return LayerMeans(
            means=means,
            counts=self.counts.copy(),
            centre="global",
            params=dict(self.params, centre="global"),
        )


def _max_positions(model: Any) -> int | None:
    config = getattr(model, "config", None)
    value = getattr(config, "max_position_embeddings", None)
    return (
        int(value)
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool)
        else None
    )


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
    """Average the hidden states of ``model`` at positions ``0..n-1`` over ``texts``,
    for every layer.

    Texts are tokenized (with the model's special tokens when ``special_tokens``) and
    truncated to ``n`` tokens; the model must return ``hidden_states`` when called with
    ``output_hidden_states=True``. Positions that no sequence reaches are dropped
    (``counts`` says how many sequences reach each kept one). ``centre="global"``
    subtracts, per layer, the mean over positions weighted by ``counts`` (the mean
    hidden state over all tokens), so each layer's count-weighted position mean is zero;
    ``"none"`` leaves the means as they are. Chapter: *Positions layer by layer*.
    """
    import torch

    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(
            f"n must be a positive integer (the number of positions), got {n!r}"
        )
    n = int(n)
    limit = _max_positions(model)
    if limit is not None and n > limit:
        raise ValueError(
            f"n={n} exceeds the model's max_position_embeddings={limit}: use n <= "
            f"{limit}"
        )
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, (int, np.integer))
        or batch_size < 1
    ):
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if centre not in CENTRES:
        raise ValueError(f"centre must be one of {CENTRES}, got {centre!r}")
    texts = check_texts(texts)
    dev = select_device(device)
    model = model.to(dev)

    enc_kwargs = dict(
        add_special_tokens=bool(special_tokens), truncation=True, max_length=n
    )
    lengths = np.fromiter(
        (
            len(ids)
            for start in range(0, len(texts), 1024)
            for ids in tokenizer(texts[start : start + 1024], **enc_kwargs)["input_ids"]
        ),
        dtype=np.int64,
        count=len(texts),
    )
    order = np.argsort(lengths, kind="stable")

    sums = None  # (layers + 1, n, d) float64 on dev
    counts = torch.zeros(n, dtype=torch.float64, device=dev)
    batches = range(0, len(texts), batch_size)
    with torch.inference_mode():
        for start in progress(
            batches, desc="hidden states per position", total=len(batches)
        ):
            batch = [texts[i] for i in order[start : start + batch_size]]
            enc = tokenizer(batch, padding="longest", return_tensors="pt", **enc_kwargs)
            enc = {k: v.to(dev) for k, v in enc.items()}
            outputs = model(**enc, output_hidden_states=True)
            hidden = getattr(outputs, "hidden_states", None)
            if hidden is None:
                raise ValueError(
                    f"model {type(model).__name__} returned no hidden_states with "
                    "output_hidden_states=True: pass a Hugging Face encoder (e.g. "
                    "AutoModel) that supports output_hidden_states"
                )
            mask = enc["attention_mask"]  # (B, T)
            T = mask.shape[1]
            if sums is None:
                sums = torch.zeros(
                    len(hidden), n, hidden[0].shape[-1], dtype=torch.float64, device=dev
                )
            weights = mask.to(hidden[0].dtype)
            for layer, h in enumerate(
                hidden
            ):  # one masked sum over the batch per layer, then float64
                sums[layer, :T] += torch.einsum("bt,btd->td", weights, h).to(
                    torch.float64
                )
            counts[:T] += mask.sum(0).to(torch.float64)

    counts_np = counts.cpu().numpy().round().astype(np.int64)
    keep = np.flatnonzero(counts_np > 0)
    means = sums.cpu().numpy()[:, keep] / counts_np[keep][None, :, None]
    params = dict(
        n=n,
        batch_size=int(batch_size),
        special_tokens=bool(special_tokens),
        centre="none",
        num_texts=len(texts),
        model=getattr(getattr(model, "config", None), "_name_or_path", None),
    )
    result = LayerMeans(
        means=means, counts=counts_np[keep], centre="none", params=params
    )
    return result.centred() if centre == "global" else result


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
    """Split ``texts`` into ``groups`` disjoint random groups (seeded, sizes
    differing by at most one) and probe each separately (uncentred), for a
    bootstrap over groups.

    ``merge_layer_means`` of the result equals ``positional_hidden_means`` of all the
    texts (up to float rounding). Chapter: *Positions layer by layer*.
    """
    texts = check_texts(texts)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)):
        raise ValueError(f"groups must be an integer >= 2, got {groups!r}")
    if not 2 <= groups <= len(texts):
        raise ValueError(
            f"groups must be between 2 and the number of texts ({len(texts)}), got "
            f"{groups}"
        )
    perm = np.random.default_rng(seed).permutation(len(texts))
    return [
        positional_hidden_means(
            model,
            tokenizer,
            [texts[i] for i in np.sort(idx)],
            n=n,
            batch_size=batch_size,
            device=device,
        )
        for idx in np.array_split(perm, int(groups))
    ]


def _stacked_sums(parts: Sequence[LayerMeans]) -> tuple[np.ndarray, np.ndarray]:
    """Per-part sums ``(parts, layers + 1, n, d)`` and counts ``(parts, n)``, padded
    with zero counts to the longest part."""
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


def _from_sums(sums: np.ndarray, counts: np.ndarray, params: dict) -> LayerMeans:
    keep = np.flatnonzero(counts > 0)
    means = sums[:, keep] / counts[keep][None, :, None]
    return LayerMeans(means=means, counts=counts[keep], centre="none", params=params)


def merge_layer_means(
    parts: Sequence[LayerMeans], weights: Sequence[int] | None = None
) -> LayerMeans:
    """The count-weighted means over all ``parts`` (uncentred), each counted
    ``weights[g]`` times (default once), on every position some counted part reaches.

    Unlike ``LayerMeans.merge`` it keeps positions that only some parts reach.
    Chapter: *Positions layer by layer*.
    """
    sums, counts = _stacked_sums(parts)
    w = np.ones(len(parts), dtype=np.int64) if weights is None else np.asarray(weights)
    if w.shape != (len(parts),) or np.any(w < 0) or not np.any(w > 0):
        raise ValueError("weights must be one non-negative integer per part, not all 0")
    num_texts = sum(int(k) * p.params.get("num_texts", 0) for k, p in zip(w, parts))
    params = dict(parts[0].params, num_texts=num_texts)
    return _from_sums(np.tensordot(w, sums, 1), w @ counts, params)


def bootstrap_groups(
    parts: Sequence[LayerMeans], replicates: int = 200, seed: int = 0
) -> Iterator[LayerMeans]:
    """Yield ``replicates`` bootstrap resamples of the texts, drawn as whole groups:
    each draws ``len(parts)`` groups with replacement (seeded) and merges them.

    The groups come from ``probe_groups`` (disjoint random groups of texts), so a
    resample of groups is a resample of texts in blocks.
    Chapter: *Positions layer by layer*.
    """
    if (
        isinstance(replicates, bool)
        or not isinstance(replicates, int)
        or replicates < 2
    ):
        raise ValueError(f"replicates must be an integer >= 2, got {replicates!r}")
    sums, counts = _stacked_sums(parts)
    rng = np.random.default_rng(seed)
    for _ in range(replicates):
        w = np.bincount(rng.integers(0, len(parts), len(parts)), minlength=len(parts))
        num_texts = sum(int(k) * p.params.get("num_texts", 0) for k, p in zip(w, parts))
        params = dict(parts[0].params, num_texts=num_texts)
        yield _from_sums(np.tensordot(w, sums, 1), w @ counts, params)

"""Masked-language modelling from scratch; a trained table's geometry vs its corpus's.
Chapter: *Does a trained Transformer learn its corpus's geometry?*."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from scipy import stats

from . import checks
from .geometry import (
    monotonicity_violation_rate,
    pairwise_distances,
    stress_of_distances,
)
from .models import select_device
from .ntk import l2_distances, log_ratio_distances
from .sampling import split_half_hellinger, split_texts
from .seeding import seed_everything
from .transformer import PositionalTransformer

#: model ids: 0 pads, 1 masks, token k of the cut vocabulary (k = K: the rest) is k + 2
PAD, MASK, SHIFT = 0, 1, 2


def cut_vocabulary(
    ids: np.ndarray, K: int, keep: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (-1: padding) mapped to ranks 0..K-1 of the ``K`` commonest tokens
    (``keep``, else counted here), others to ``K``; returns (ids, keep). Chapter: *Does
    a trained Transformer learn its corpus's geometry?*."""
    ids = np.asarray(ids, dtype=np.int64)
    K = checks.integer(K, "K")
    if keep is None:
        values, counts = np.unique(ids[ids >= 0], return_counts=True)
        keep = values[np.argsort(-counts, kind="stable")[:K]]
    rank = dict(zip(keep.tolist(), range(len(keep))))
    lookup = np.vectorize(lambda t: rank.get(t, K), otypes=[np.int64])
    out = np.full_like(ids, -1)
    real = ids >= 0
    out[real] = lookup(ids[real])
    return out, keep


def column_shuffle(ids: np.ndarray, seed: int = 0) -> np.ndarray:
    """Per position, tokens permuted across texts: ``mu_i`` kept, within-text structure
    gone. Chapter: *Does a trained Transformer learn its corpus's geometry?*."""
    ids = np.asarray(ids)
    if np.any(ids < 0):
        raise ValueError("column_shuffle needs texts without padding (all of length n)")
    rng = np.random.default_rng(seed)
    return np.stack([ids[rng.permutation(len(ids)), i] for i in range(ids.shape[1])], 1)


def position_counts(ids: np.ndarray, V: int) -> np.ndarray:
    """n x V counts of token ``v`` at position ``i`` (padding, -1, not counted).
    Chapter: *Does a trained Transformer learn its corpus's geometry?*."""
    ids = np.asarray(ids, dtype=np.int64)
    n = ids.shape[1]
    keys = (np.arange(n)[None, :] * V + ids)[ids >= 0]
    return np.bincount(keys, minlength=n * V).reshape(n, V).astype(np.float64)


def _rows(counts: np.ndarray) -> np.ndarray:
    return counts / counts.sum(1, keepdims=True)


def reference_geometries(
    ids: np.ndarray, V: int, splits: int = 3, seed: int = 0
) -> dict[str, np.ndarray]:
    """Corpus geometries for a trained table: split-half corrected Hellinger (mean over
    ``splits`` halvings), L2 and log-ratio (add-one-half counts) of the ``mu_i``, and
    ``|i - j|``. Chapter: *Does a trained Transformer learn its corpus's geometry?*."""
    counts = position_counts(ids, V)
    if np.any(counts.sum(1) == 0):
        raise ValueError("a position is reached by no text: pass fewer positions n")
    n = len(counts)
    H2 = np.zeros((n, n))
    for s in range(splits):
        a, b = split_texts(len(ids), seed + s)
        ca, cb = position_counts(ids[a == 1], V), position_counts(ids[b == 1], V)
        weight = float(ca.sum() / counts.sum())
        H2 += split_half_hellinger(_rows(ca), _rows(cb), weight).H2 / splits
    hellinger = np.sqrt(np.clip(H2, 0.0, None))
    np.fill_diagonal(hellinger, 0.0)
    return {
        "hellinger": hellinger,
        "l2": l2_distances(_rows(counts)),
        "logratio": log_ratio_distances(_rows(counts + 0.5)),
        "lag": np.abs(np.subtract.outer(np.arange(n), np.arange(n))).astype(np.float64),
    }


def verdict(low: float, high: float, threshold: float = 0.0) -> str:
    """``"above"``/``"below"`` when ``[low, high]`` lies on one side of ``threshold``,
    else ``"not distinguishable"``: one rule for every prediction. Chapter: *Does a
    trained Transformer learn its corpus's geometry?*."""
    if not low <= high:
        raise ValueError(f"need low <= high, got [{low}, {high}]")
    if low > threshold:
        return "above"
    return "below" if high < threshold else "not distinguishable"


def _pairs(E: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    i, j = np.triu_indices(E.shape[0], 1)
    return E[i, j], j - i


def lag_residuals(E: np.ndarray) -> np.ndarray:
    """``E``'s upper triangle less its mean per lag ``j - i``: what ``|i - j|`` cannot
    explain. Chapter: *Does a trained Transformer learn its corpus's geometry?*."""
    values, lag = _pairs(checks.distance_matrix(E, "E"))
    means = np.bincount(lag, values) / np.maximum(np.bincount(lag), 1)
    return values - means[lag]


def within_lag_correlation(E: np.ndarray, R: np.ndarray) -> float:
    """Pearson correlation of the lag residuals of ``E`` and ``R`` (0 if either has
    none). Chapter: *Does a trained Transformer learn its corpus's geometry?*."""
    e, r = lag_residuals(E), lag_residuals(R)
    scale = np.linalg.norm(e) * np.linalg.norm(r)
    return float(e @ r / scale) if scale > 1e-12 * max(len(e), 1) else 0.0


def scores(P: np.ndarray, references: dict[str, np.ndarray]) -> dict[str, float]:
    """Spearman and within-lag correlation and scale-fitted stress of table ``P``'s
    distances against each reference, and ``P``'s violation rate. Chapter: *Does a
    trained Transformer learn its corpus's geometry?*."""
    E = pairwise_distances(np.asarray(P, dtype=np.float64), "P")
    out = {"violation": monotonicity_violation_rate(E, input_kind="distances").rate}
    for name, R in references.items():
        rho = stats.spearmanr(_pairs(E)[0], _pairs(R)[0]).statistic
        out[f"spearman_{name}"] = float(rho)
        out[f"within_{name}"] = within_lag_correlation(E, R)
        out[f"stress_{name}"] = stress_of_distances(E, R, scale="fitted")
    return out


def mask_batch(
    x: torch.Tensor, rate: float, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask each real token with probability ``rate`` (at least one per text): the
    inputs with ``MASK`` there, and the mask. Chapter: *Does a trained Transformer learn
    its corpus's geometry?*."""
    real = x != PAD
    masked = (torch.rand(x.shape, generator=generator) < rate) & real
    first = torch.multinomial(real.float(), 1, generator=generator)
    masked[torch.arange(len(x)), first[:, 0]] = True
    return x.masked_fill(masked, MASK), masked


def mlm_loss(
    model: PositionalTransformer,
    x: torch.Tensor,
    masked: torch.Tensor,
    targets: torch.Tensor,
) -> torch.Tensor:
    """Mean cross-entropy at the masked positions only (the head sees no other).
    Chapter: *Does a trained Transformer learn its corpus's geometry?*."""
    h = model.hidden_states(x)
    return F.cross_entropy(model.head(h[masked]).float(), targets[masked])


def model_ids(ids: np.ndarray) -> torch.Tensor:
    """Cut-vocabulary ids (-1: padding) as model ids. Chapter: *Does a trained
    Transformer learn its corpus's geometry?*."""
    return torch.as_tensor(np.where(ids < 0, PAD, ids + SHIFT), dtype=torch.long)


def build_model(
    config: dict[str, Any], n: int, table: np.ndarray | None = None
) -> PositionalTransformer:
    """A run's encoder on ``n`` positions, on its device; ``table``: the fixed ``mds``
    table, or a ``learned`` one's start. Chapter: *Does a trained Transformer learn its
    corpus's geometry?*."""
    c, positional = config, config["positional"]
    seed_everything(c["seed"])
    model = PositionalTransformer(
        int(c["K"]) + 1 + SHIFT,
        d=c["d"],
        n_heads=c["n_heads"],
        n_layers=c["n_layers"],
        max_len=n,
        positional=positional,
        task="mlm",
        rank=c.get("rank"),
        table=table if positional == "mds" else None,
    )
    if table is not None and positional == "learned":
        with torch.no_grad():
            model.pos_table.copy_(torch.as_tensor(table, dtype=torch.float32))
    return model.to(select_device(c.get("device", "cpu")))


def _record(out, model, held, references, step, seconds, P0=None) -> None:
    """Append the held-out loss (and a trained table's scores; with its initial table
    ``P0``, its loss when zeroed and its movement) at ``step`` to ``out``."""
    model.eval()
    with torch.no_grad():
        loss = mlm_loss(model, *held).item()
        if P0 is not None:  # a learned table: the loss without it, and how far it moved
            P = model.pos_table
            saved = P.detach().clone()
            P.zero_()
            out["eval_loss_zeroed"].append(mlm_loss(model, *held).item())
            P.copy_(saved)
            out["table_move"].append(float((saved - P0).norm() / P0.norm()))
    model.train()
    out["step"].append(step), out["seconds"].append(seconds)
    out["eval_loss"].append(loss)
    if model.positional in ("learned", "lowrank") and references:
        P = model.positional_table().detach().double().cpu().numpy()
        out["scores"].append(scores(P, references))


def train_mlm(
    config: dict[str, Any],
    train: np.ndarray,
    held_out: np.ndarray,
    references: dict[str, np.ndarray] | None = None,
    table: np.ndarray | None = None,
) -> dict[str, Any]:
    """Train :func:`build_model` (MLM) on ``train`` (cut-vocabulary ids); every
    ``eval_every`` steps: held-out loss (fixed masks), seconds so far, a trained table's
    :func:`scores`, a learned table's zeroed loss and movement. Chapter: *Does a trained
    Transformer learn its corpus's geometry?*."""
    c = config
    model = build_model(c, train.shape[1], table)
    device = next(model.parameters()).device
    x_train, x_eval = model_ids(train), model_ids(held_out)
    optimizer = torch.optim.AdamW(model.parameters(), lr=c["lr"])
    generator = torch.Generator().manual_seed(c["seed"])
    held = mask_batch(x_eval, c["mask_rate"], torch.Generator().manual_seed(0))
    held = tuple(t.to(device) for t in (*held, x_eval))
    out: dict[str, Any] = {"step": [], "seconds": [], "eval_loss": [], "scores": []}
    out |= {"eval_loss_zeroed": [], "table_move": []}  # learned tables only
    P0 = model.pos_table.detach().clone() if model.positional == "learned" else None
    seconds = 0.0
    for step in range(c["steps"] + 1):
        if step % c["eval_every"] == 0 or step == c["steps"]:
            _record(out, model, held, references, step, seconds, P0)
        if step == c["steps"]:
            break
        start = time.perf_counter()
        rows = torch.randint(len(x_train), (c["batch_size"],), generator=generator)
        x = x_train[rows]
        inputs, masked = mask_batch(x, c["mask_rate"], generator)
        loss = mlm_loss(model, inputs.to(device), masked.to(device), x.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds += time.perf_counter() - start
    out["positional_parameters"] = model.positional_parameters()
    if model.positional in ("learned", "lowrank"):
        table = model.positional_table().detach().cpu().numpy()
        out["table"] = np.round(table, 5).tolist()
    return out

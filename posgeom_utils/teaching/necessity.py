"""Checks for the exercises of *Why a Transformer needs positions*.

Chapter: *Why a Transformer needs positions*. Each check rebuilds small untrained
``PositionalTransformer`` models (seeded, without touching the chapter's random state) on the
chapter's token ids and compares the student's answer with what those models do.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from posgeom_utils.teaching import Verdict, verdict

__all__ = ["check_reversal_invariant", "check_causal_rows"]

#: the two positions exchanged in the causal exercise (0-based)
SWAP = (2, 5)

#: below this, a difference between two float32 outputs of O(1) is rounding noise
_EQUAL = 1e-4


def _as_ids(ids: Any) -> Any:
    """The chapter's token ids as a (batch, L) long tensor on the CPU."""
    import torch

    ids = torch.as_tensor(ids).detach().cpu().long()
    if ids.dim() != 2 or ids.shape[1] < 1:
        raise ValueError(f"ids must be a (batch, L) array of token ids, got shape {tuple(ids.shape)}")
    return ids


def _model(ids: Any, positional: str, task: str, causal: bool = False, n_layers: int = 2) -> Any:
    """A small untrained model of the chapter's size (width 32, 4 heads), seeded."""
    from posgeom_utils.transformer import PositionalTransformer

    return PositionalTransformer(int(ids.max()) + 1, d=32, n_heads=4, n_layers=n_layers,
                                 max_len=ids.shape[1], positional=positional, task=task,
                                 causal=causal).eval()


def _reversal_invariant(ids: Any, positionals: Iterable[str]) -> set[str]:
    """The mechanisms in ``positionals`` whose pooled classifier (bidirectional, mean over the
    positions) gives every sequence in ``ids`` and its reversal the same logits.
    Chapter: *Why a Transformer needs positions*."""
    import torch

    ids = _as_ids(ids)
    found = set()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        for positional in positionals:
            net = _model(ids, str(positional), "classify")
            with torch.no_grad():
                gap = (net(ids.flip(1)) - net(ids)).abs().max().item()
            if gap < _EQUAL:
                found.add(str(positional))
    return found


def _causal_matching_rows(ids: Any, swap: tuple[int, int] = SWAP, n_layers: int = 2) -> set[int]:
    """The positions i where row i of f(pi x) equals row i of pi f(x) for a causal, position-free
    model with ``n_layers`` layers and pi the transposition ``swap`` (rows compared over the whole
    batch). Chapter: *Why a Transformer needs positions*."""
    import torch

    ids = _as_ids(ids)
    L = ids.shape[1]
    perm = torch.arange(L)
    perm[list(swap)] = perm[list(swap[::-1])]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = _model(ids, "none", "mlm", causal=True, n_layers=n_layers)
        with torch.no_grad():
            rows = (net.hidden_states(ids[:, perm]) - net.hidden_states(ids)[:, perm]).abs()
    gap = rows.amax(dim=(0, 2))
    return {i for i in range(L) if gap[i].item() < _EQUAL}


def _as_names(answer: Any) -> set[str] | None:
    """A collection of mechanism names as a set; None when it is not one."""
    if isinstance(answer, str) or not isinstance(answer, (list, tuple, set, frozenset)):
        return None
    if not all(isinstance(a, str) for a in answer):
        return None
    return set(answer)


def _as_positions(answer: Any) -> set[int] | None:
    """A collection of integer positions as a set; None when it is not one."""
    if isinstance(answer, (str, bytes, dict)) or np.ndim(answer) != 1:
        return None
    try:
        values = np.asarray(answer)
    except (TypeError, ValueError):
        return None
    if values.size and values.dtype.kind not in "iu":
        return None
    return {int(v) for v in values}


def check_reversal_invariant(answer: Any, ids: Any, positionals: Iterable[str]) -> Verdict:
    """Exercise *Which mechanisms cannot see a reversal?*: ``answer`` lists the mechanisms of
    ``positionals`` whose mean-pooled classifier gives each sequence of ``ids`` and its reversal
    the same output. Chapter: *Why a Transformer needs positions*."""
    label = "ex-necessity-reversal-invariant"
    if answer is None:
        return verdict(label, None)
    names = _as_names(answer)
    if names is None:
        return verdict(label, False, "Give a list of mechanism names (strings) "
                                     "taken from `positionals`.")
    try:
        expected = _reversal_invariant(ids, positionals)
    except (TypeError, ValueError, RuntimeError) as err:
        return verdict(label, False, f"The check could not run on these arguments: {err}")
    unknown = names - {str(p) for p in positionals}
    if unknown:
        return verdict(label, False, "Use only names from `positionals`.")
    return verdict(label, names == expected,
                   "Build one classifier per mechanism (bidirectional, mean-pooled), compare "
                   "its logits on `ids` and on `ids.flip(1)`, and keep the mechanisms whose "
                   "largest difference is rounding noise.")


def check_causal_rows(answer: Any, ids: Any) -> Verdict:
    """Exercise *Causal rows*: ``answer`` lists the positions i where row i of f(pi x) equals
    row i of pi f(x), for the chapter's two-layer causal model without positions and pi the
    exchange of positions 2 and 5. Chapter: *Why a Transformer needs positions*."""
    label = "ex-necessity-causal"
    if answer is None:
        return verdict(label, None)
    positions = _as_positions(answer)
    if positions is None:
        return verdict(label, False, "Give a list of integer positions (0-based), e.g. [i, j, k].")
    try:
        expected = _causal_matching_rows(ids)
    except (TypeError, ValueError, RuntimeError) as err:
        return verdict(label, False, f"The check could not run on these arguments: {err}")
    return verdict(label, positions == expected,
                   "Positions are 0-based; compare row i of f(swap x) with row swap[i] of f(x), "
                   "for a model with two layers. What does the first layer's state at a "
                   "position between the two swapped ones depend on, and who reads it in the "
                   "second layer?")

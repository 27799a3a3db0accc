"""The mechanism behind the separation theorem: two positions that share a vector cannot be told apart.

Linked from the theorem box of *Do distinct positions get distinct vectors?*.
"""

from __future__ import annotations

import pytest
import torch

from posgeom_utils.transformer import PositionalTransformer


@pytest.mark.parametrize("seed", range(5))
def test_equal_position_vectors_make_swaps_invisible(seed: int) -> None:
    """If p_i = p_j, swapping the tokens at i and j permutes the hidden states and leaves a pooled output
    unchanged; with p_i != p_j it does not (so the loss can only improve by separating them)."""
    torch.manual_seed(seed)
    L = 10
    net = PositionalTransformer(50, d=16, n_heads=2, n_layers=2, max_len=L, positional="learned").eval()
    ids = torch.randint(1, 50, (3, L))
    i, j = sorted(torch.randperm(L)[:2].tolist())
    swap = torch.arange(L)
    swap[i], swap[j] = j, i
    with torch.no_grad():
        distinct = (net(ids[:, swap]) - net(ids)).abs().max().item()
        net.pos_table[j] = net.pos_table[i]  # collapse positions i and j
        states, swapped_states = net.hidden_states(ids), net.hidden_states(ids[:, swap])
        collapsed = (net(ids[:, swap]) - net(ids)).abs().max().item()
    assert torch.allclose(swapped_states, states[:, swap], atol=1e-5)
    assert collapsed < 1e-5
    assert distinct > 1e-4


def swap_invariance_cost(mu: "np.ndarray", both_masked: float = 0.0) -> float:
    """Masked-language modelling on two independent positions (mu is 2 x V), one position masked at a time
    (each with probability (1 - both_masked) / 2) or both (probability both_masked): the cross-entropy that
    the best predictor invariant under swapping the two positions pays above the best predictor. An
    invariant predictor answers the same at a masked position 0 beside token t as at a masked position 1
    beside t, and the same at both positions when both are masked."""
    import numpy as np

    def excess(weights, targets):  # cost of one shared prediction q for several (weight, target) pairs
        w = np.asarray(weights, dtype=float)
        if w.sum() == 0:
            return 0.0
        q = sum(wk * t for wk, t in zip(w, targets)) / w.sum()
        kl = lambda p: float(np.sum(p[p > 0] * np.log(p[p > 0] / q[p > 0])))  # noqa: E731
        return sum(wk * kl(t) for wk, t in zip(w, targets) if wk > 0)

    one = (1 - both_masked) / 2
    cost = sum(excess([one * mu[1, t], one * mu[0, t]], [mu[0], mu[1]]) for t in range(mu.shape[1]))
    return cost + excess([both_masked, both_masked], [mu[0], mu[1]])


def test_non_stationarity_gives_order_sensitivity_only_when_contexts_can_be_confused() -> None:
    """The condition (a) => (b) needs for masked-language modelling (issue 22): with disjoint supports and
    one masked position at a time, the visible token says which position is masked, so a swap-invariant
    predictor loses nothing although mu_0 != mu_1 (the counterexample); overlapping supports, or both
    positions masked together with positive probability, make the loss strictly positive."""
    import numpy as np

    disjoint = np.array([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5]])
    overlapping = np.array([[0.4, 0.4, 0.2, 0.0], [0.0, 0.2, 0.4, 0.4]])
    assert swap_invariance_cost(disjoint) == 0.0  # (a) holds, (b) fails: the counterexample
    assert swap_invariance_cost(overlapping) > 1e-3  # sum_t mu_0(t) mu_1(t) > 0: (b) holds
    assert swap_invariance_cost(disjoint, both_masked=0.1) > 1e-3  # or both masked at once
    same = np.array([[0.25] * 4, [0.25] * 4])
    assert swap_invariance_cost(same) == 0.0 and swap_invariance_cost(same, both_masked=0.1) == 0.0

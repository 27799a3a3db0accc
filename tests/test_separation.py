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

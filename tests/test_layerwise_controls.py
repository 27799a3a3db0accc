"""The group bootstrap of the layer-wise chapter: groups partition the texts, merging them
is the single probe, the bootstrap is seeded, and it sees noise only where there is some.

Chapter: *Positions layer by layer*.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from posgeom_utils.probes import (
    LayerMeans,
    bootstrap_groups,
    merge_layer_means,
    positional_hidden_means,
    probe_groups,
)

N = 12


@pytest.fixture(scope="module")
def texts():
    rng = random.Random(1)
    words = ("the a cat dog sat on mat quickly running blue house river mountain under "
             "over because although extraordinary tokenization of and").split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 14)))
            for _ in range(24)]


@pytest.fixture(scope="module")
def groups(tiny_bert, tokenizer, texts):
    return probe_groups(tiny_bert, tokenizer, texts, N, groups=6, seed=3, batch_size=4,
                        device="cpu")


def test_merging_all_groups_is_the_single_probe(tiny_bert, tokenizer, texts, groups):
    whole = positional_hidden_means(tiny_bert, tokenizer, texts, N, batch_size=4,
                                    device="cpu")
    merged = merge_layer_means(groups)
    assert len(groups) == 6
    assert sum(g.params["num_texts"] for g in groups) == len(texts)
    assert merged.params["num_texts"] == len(texts)
    np.testing.assert_array_equal(merged.counts, whole.counts)
    np.testing.assert_allclose(merged.means, whole.means, atol=1e-5, rtol=0)


def test_merge_keeps_positions_only_some_groups_reach(groups):
    """``LayerMeans.merge`` stops at the shortest part; the group merge does not."""
    assert len({g.n for g in groups}) > 1  # the groups reach different positions
    merged = merge_layer_means(groups)
    assert merged.n == max(g.n for g in groups)
    short = min(groups, key=lambda g: g.n)
    assert merged.n > short.n


def test_weights_count_a_group_several_times(groups):
    twice = merge_layer_means(groups, weights=[2] + [1] * (len(groups) - 1))
    again = merge_layer_means([groups[0], *groups])
    np.testing.assert_array_equal(twice.counts, again.counts)
    np.testing.assert_allclose(twice.means, again.means, atol=1e-12)
    only_first = merge_layer_means(groups, weights=[1] + [0] * (len(groups) - 1))
    np.testing.assert_allclose(only_first.means, groups[0].means, atol=1e-12)


def test_the_bootstrap_is_seeded_and_draws_whole_groups(groups):
    a = list(bootstrap_groups(groups, replicates=5, seed=7))
    b = list(bootstrap_groups(groups, replicates=5, seed=7))
    c = list(bootstrap_groups(groups, replicates=5, seed=8))
    assert all(isinstance(r, LayerMeans) for r in a)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.means, y.means)
    assert any(x.means.shape != z.means.shape or not np.allclose(x.means, z.means)
               for x, z in zip(a, c))
    sizes = {g.params["num_texts"] for g in groups}
    for r in a:  # as many texts as there are, counted in whole groups
        assert r.params["num_texts"] in range(len(groups) * min(sizes),
                                              len(groups) * max(sizes) + 1)


def test_negative_control_identical_groups_have_no_spread(groups):
    """Groups with the same means: every resample is that mean (no noise, no interval)."""
    same = [LayerMeans(groups[0].means.copy(), groups[0].counts.copy(),
                       params=dict(groups[0].params)) for _ in range(5)]
    for r in bootstrap_groups(same, replicates=10, seed=0):
        np.testing.assert_allclose(r.means, groups[0].means, atol=1e-12)


def test_positive_control_different_groups_spread(groups):
    spread = np.std([r.means[:, :3].sum()
                     for r in bootstrap_groups(groups, replicates=30, seed=0)])
    assert spread > 0


def test_bad_arguments_are_rejected(tiny_bert, tokenizer, texts, groups):
    with pytest.raises(ValueError, match="groups"):
        probe_groups(tiny_bert, tokenizer, texts, N, groups=1, device="cpu")
    with pytest.raises(ValueError, match="groups"):
        probe_groups(tiny_bert, tokenizer, texts, N, groups=len(texts) + 1,
                     device="cpu")
    with pytest.raises(ValueError, match="replicates"):
        next(bootstrap_groups(groups, replicates=1))
    with pytest.raises(ValueError, match="uncentred"):
        merge_layer_means([groups[0].centred(), groups[1]])
    with pytest.raises(ValueError, match="weights"):
        merge_layer_means(groups, weights=[0] * len(groups))

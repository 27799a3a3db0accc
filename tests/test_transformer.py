"""posgeom_utils.transformer: the compact Transformer of *Why a Transformer needs positions*.

The necessity argument of the book rests on two facts checked here: without a positional mechanism (and
without a causal mask) self-attention is permutation-equivariant, so the mean-pooled classifier is
permutation-invariant; every positional mechanism (learned, sinusoidal, RoPE, low-rank, MDS table, ALiBi)
breaks that symmetry. Also: RoPE scores depend only on the offset i - j, the ALiBi bias is -m_h |i - j|,
output shapes and positional parameter counts, and the error messages for bad arguments.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from posgeom_utils.encodings import mds_encoding  # noqa: E402
from posgeom_utils.transformer import (  # noqa: E402
    POSITIONAL,
    TASKS,
    PositionalTransformer,
    SelfAttention,
    _rotate,
    count_parameters,
    describe,
)

VOCAB = 20


def tiny(positional: str = "none", task: str = "mlm", seed: int = 0, **kwargs) -> PositionalTransformer:
    """A seeded tiny model in eval mode (d=16, 2 heads, 2 layers, max_len=12)."""
    torch.manual_seed(seed)
    options = dict(d=16, n_heads=2, n_layers=2, max_len=12, positional=positional, task=task)
    options.update(kwargs)
    return PositionalTransformer(VOCAB, **options).eval()


def random_ids(rng: np.random.Generator, batch: int, L: int) -> torch.Tensor:
    """Token ids in 1..VOCAB-1 (0 is padding), so no position is padding."""
    return torch.as_tensor(rng.integers(1, VOCAB, size=(batch, L)))


def non_trivial_permutation(L: int, rng: np.random.Generator) -> np.ndarray:
    """A permutation of range(L) that is neither the identity nor the reversal (L >= 3)."""
    while True:
        pi = rng.permutation(L)
        if not (np.array_equal(pi, np.arange(L)) or np.array_equal(pi, np.arange(L)[::-1])):
            return pi


def mds_table(n: int, d: int) -> np.ndarray:
    """The MDS encoding of the |i - j| distance on n positions, width d."""
    pos = np.arange(n, dtype=float)
    return mds_encoding(np.abs(pos[:, None] - pos[None, :]), d)


# --------------------------------------------------------------------------- equivariance


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), L=st.integers(2, 12), heads=st.sampled_from([1, 2, 4]),
       layers=st.integers(1, 2))
def test_equivariance_without_positions(seed, L, heads, layers):
    rng = np.random.default_rng(seed)
    ids = random_ids(rng, 3, L)
    pi = torch.as_tensor(rng.permutation(L))
    mlm = tiny("none", "mlm", seed=seed % 1000, n_heads=heads, n_layers=layers)
    with torch.no_grad():
        h, h_perm = mlm.hidden_states(ids), mlm.hidden_states(ids[:, pi])
    torch.testing.assert_close(h_perm, h[:, pi], atol=1e-5, rtol=0)

    clf = tiny("none", "classify", seed=seed % 1000, n_heads=heads, n_layers=layers)
    with torch.no_grad():
        logits, logits_perm = clf(ids), clf(ids[:, pi])
    assert logits.shape == (3, 2)
    torch.testing.assert_close(logits_perm, logits, atol=1e-5, rtol=0)


def test_padding_is_ignored_by_the_classifier():
    """Appending padding changes nothing for the real tokens (keys are masked, pooling skips pads)."""
    rng = np.random.default_rng(1)
    ids = random_ids(rng, 2, 6)
    padded = torch.cat([ids, torch.zeros(2, 4, dtype=torch.long)], dim=1)
    for positional in ("none", "learned", "rope", "alibi"):
        clf = tiny(positional, "classify", seed=3)
        with torch.no_grad():
            torch.testing.assert_close(clf(padded), clf(ids), atol=1e-5, rtol=0)
            torch.testing.assert_close(clf.hidden_states(padded)[:, :6], clf.hidden_states(ids), atol=1e-5, rtol=0)


def test_causal_mask_breaks_equivariance():
    rng = np.random.default_rng(0)
    ids = random_ids(rng, 2, 8)
    pi = torch.as_tensor(non_trivial_permutation(8, rng))
    model = tiny("none", "mlm", seed=0, causal=True)
    with torch.no_grad():
        deviation = (model.hidden_states(ids[:, pi]) - model.hidden_states(ids)[:, pi]).abs().max().item()
    assert deviation > 1e-4


def test_causal_mask_blocks_the_future():
    """With causal=True the state at position i does not depend on tokens after i."""
    rng = np.random.default_rng(2)
    ids = random_ids(rng, 1, 8)
    changed = ids.clone()
    changed[0, 5:] = (changed[0, 5:] % (VOCAB - 1)) + 1  # different real tokens after position 4
    assert not torch.equal(changed, ids)
    model = tiny("learned", "mlm", seed=0, causal=True)
    with torch.no_grad():
        h, h2 = model.hidden_states(ids), model.hidden_states(changed)
    torch.testing.assert_close(h2[:, :5], h[:, :5], atol=1e-6, rtol=0)
    assert (h2[:, 5:] - h[:, 5:]).abs().max() > 1e-4


POSITION_BREAKERS = {
    "learned": {},
    "sinusoidal": {},
    "rope": {},
    "lowrank": {"rank": 4},
    "mds": {"table": mds_table(12, 16)},
    "alibi": {},
}


@pytest.mark.parametrize("positional", sorted(POSITION_BREAKERS))
def test_positions_break_equivariance(positional):
    """The permuted input gives non-permuted states (a non-reversal permutation: ALiBi is reversal-symmetric)."""
    rng = np.random.default_rng(0)
    ids = random_ids(rng, 2, 10)
    pi = torch.as_tensor(non_trivial_permutation(10, rng))
    model = tiny(positional, "mlm", seed=0, **POSITION_BREAKERS[positional])
    with torch.no_grad():
        deviation = (model.hidden_states(ids[:, pi]) - model.hidden_states(ids)[:, pi]).abs().max().item()
    assert deviation > 1e-4, positional
    clf = tiny(positional, "classify", seed=0, **POSITION_BREAKERS[positional])
    with torch.no_grad():
        assert (clf(ids[:, pi]) - clf(ids)).abs().max().item() > 1e-6, positional


def test_alibi_is_equivariant_under_reversal():
    """ALiBi's bias depends on |i - j| only, so reversing the sequence reverses the states exactly."""
    rng = np.random.default_rng(0)
    ids = random_ids(rng, 2, 9)
    rev = torch.arange(8, -1, -1)
    model = tiny("alibi", "mlm", seed=0)
    with torch.no_grad():
        torch.testing.assert_close(model.hidden_states(ids[:, rev]), model.hidden_states(ids)[:, rev],
                                   atol=1e-5, rtol=0)


# --------------------------------------------------------------------------- RoPE and ALiBi internals


def hand_rotation(i: int, d_head: int) -> np.ndarray:
    """RoPE's R_i written out: plane k (coordinates 2k, 2k + 1) rotated by the angle i * 10000^(-2k/d_head)."""
    R = np.zeros((d_head, d_head))
    for k in range(d_head // 2):
        theta = i * 10000.0 ** (-2.0 * k / d_head)
        R[2 * k : 2 * k + 2, 2 * k : 2 * k + 2] = [[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]]
    return R


@pytest.mark.parametrize("d, heads", [(16, 2), (24, 2), (32, 4)])
def test_rope_scores_depend_on_offset_only(d, heads):
    max_len = 12
    attn = SelfAttention(d, heads, max_len, rope=True)
    d_head = d // heads
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(d_head, generator=gen), torch.randn(d_head, generator=gen)
    Q = _rotate(q.expand(max_len, d_head), attn.cos, attn.sin)  # the same q at every position
    K = _rotate(k.expand(max_len, d_head), attn.cos, attn.sin)
    # position i is q rotated by explicit 2 x 2 rotations, plane k by the angle i w_k
    expected = np.stack([hand_rotation(i, d_head) @ q.double().numpy() for i in range(max_len)])
    np.testing.assert_allclose(Q.double().numpy(), expected, rtol=0, atol=1e-5)
    S = (Q @ K.T).double().numpy()
    for offset in range(-(max_len - 1), max_len):
        diagonal = np.diagonal(S, offset=offset)
        np.testing.assert_allclose(diagonal, diagonal[0], atol=1e-5)
    # the score is not a function of |i - j| alone
    assert abs(S[3, 1] - S[1, 3]) > 1e-4


#: Press et al.'s slopes written out: 2^(-8h/H) for H a power of 2; H = 3 takes the 2-head schedule plus
#: slope 1 of the 4-head one, H = 6 the 4-head schedule plus slopes 1 and 3 of the 8-head one
ALIBI_SLOPES = {1: [2**-8], 2: [2**-4, 2**-8], 3: [2**-4, 2**-8, 2**-2], 4: [2**-2, 2**-4, 2**-6, 2**-8],
                6: [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]}


@pytest.mark.parametrize("heads", sorted(ALIBI_SLOPES))
def test_alibi_bias_relative(heads):
    max_len = 9
    attn = SelfAttention(heads * 4, heads, max_len, alibi=True)
    bias = attn.bias.double().numpy()
    assert bias.shape == (heads, max_len, max_len)
    for h, slope in enumerate(ALIBI_SLOPES[heads]):
        for i in range(max_len):
            for j in range(max_len):
                assert bias[h, i, j] == pytest.approx(-slope * abs(i - j), rel=1e-6, abs=1e-7)


# --------------------------------------------------------------------------- shapes and parameter counts


@pytest.mark.parametrize("positional", POSITIONAL)
def test_output_shapes_and_parameter_counts(positional):
    d, n, r = 16, 12, 3
    extra = {"lowrank": {"rank": r}, "mds": {"table": mds_table(n, d)}}.get(positional, {})
    ids = random_ids(np.random.default_rng(0), 3, 7)
    clf = tiny(positional, "classify", num_classes=5, **extra)
    mlm = tiny(positional, "mlm", **extra)
    with torch.no_grad():
        assert clf(ids).shape == (3, 5)
        assert mlm(ids).shape == (3, 7, VOCAB)
        assert mlm.hidden_states(ids).shape == (3, 7, d)
    expected = {"learned": n * d, "lowrank": r * (n + d)}.get(positional, 0)
    assert clf.positional_parameters() == expected
    table = clf.positional_table()
    if positional in ("none", "rope", "alibi"):
        assert table is None
    else:
        assert tuple(table.shape) == (n, d)
    # every weight counted by hand (V = 20, d = 16, d_ff = 64, 2 layers, 5 classes): embeddings V d, per block
    # two LayerNorms 2 (2d), qkv d 3d + 3d, out d^2 + d, feed-forward d d_ff + d_ff + d_ff d + d; final
    # LayerNorm 2d; head 5 d + 5
    d_ff = 4 * d
    block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * d_ff + d_ff) + (d_ff * d + d)
    total = VOCAB * d + 2 * block + 2 * d + (5 * d + 5) + expected
    info = describe(clf)
    assert set(info) == {"positional", "positional parameters", "parameters", "d", "layers", "max_len"}
    assert info["positional"] == positional and info["positional parameters"] == expected
    assert info["parameters"] == count_parameters(clf) == total
    assert (info["d"], info["layers"], info["max_len"]) == (d, 2, n)


def test_fixed_tables_are_not_trained():
    """sinusoidal and mds tables are buffers (no gradient), learned and low-rank are parameters."""
    d, n = 16, 12
    mds = tiny("mds", table=mds_table(n, d))
    np.testing.assert_allclose(mds.positional_table().numpy(), mds_table(n, d), atol=1e-6)
    assert not mds.positional_table().requires_grad
    assert not tiny("sinusoidal").positional_table().requires_grad


def test_lowrank_table_initialises_from_coordinates():
    n, d, r = 12, 16, 2
    coords = np.random.default_rng(0).normal(size=(n, r)).astype(np.float32)
    model = tiny("lowrank", rank=r, table=coords)
    np.testing.assert_allclose(model.position.A.detach().numpy(), coords)
    P = model.positional_table().detach()
    assert tuple(P.shape) == (n, d) and torch.linalg.matrix_rank(P).item() == r
    # the n x d table has the geometry of the n x r coordinates (B has orthonormal columns)
    from scipy.spatial.distance import cdist

    np.testing.assert_allclose(cdist(P.double().numpy(), P.double().numpy()), cdist(coords, coords), atol=1e-5)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("kwargs, message", [
    (dict(d=18, n_heads=4), "n_heads"),
    (dict(positional="rope", d=12, n_heads=4), "even head width"),
    (dict(positional="mds"), "table"),
    (dict(positional="mds", table=np.zeros((12, 8))), r"table.shape must be \(max_len, d\) = \(12, 16\)"),
    (dict(positional="mds", table=np.zeros((10, 16))), r"table.shape must be \(max_len, d\) = \(12, 16\)"),
    (dict(positional="lowrank"), "rank"),
    (dict(positional="lowrank", rank=3, table=np.zeros((12, 2))), r"table.shape must be \(max_len, rank\) = \(12, 3\)"),
    (dict(positional="lowrank", rank=3, table=np.zeros((16, 3))), r"table.shape must be \(max_len, rank\) = \(12, 3\)"),
    (dict(positional="lowrank", rank=0), r"r must be an integer in \[1, 12\], got r=0"),
    (dict(positional="lowrank", rank=13), "r=13"),
])
def test_bad_construction_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny(**kwargs)


@pytest.mark.parametrize("argument, bad, names", [("positional", "absolute", POSITIONAL),
                                                   ("task", "regress", TASKS)])
def test_unknown_names_are_listed_in_the_message(argument, bad, names):
    with pytest.raises(ValueError, match=f"^{argument} must be one of .*got {argument}='{bad}'") as info:
        tiny(**{argument: bad})
    assert all(repr(name) in str(info.value) for name in names)


def test_bad_ids():
    model = tiny("learned", "classify")
    rng = np.random.default_rng(0)
    for bad in (torch.ones(5, dtype=torch.long), torch.ones((2, 3, 4), dtype=torch.long)):
        with pytest.raises(ValueError, match=r"ids must be \(batch, length\)"):
            model(bad)
    for positional in ("none", "learned"):  # the length check holds even without a table
        with pytest.raises(ValueError, match="sequence length 13 exceeds max_len=12"):
            tiny(positional)(random_ids(rng, 1, 13))
    ids = random_ids(rng, 3, 6)
    for bad_id in (VOCAB, 99, -1):
        ids[1, 4] = bad_id
        with pytest.raises(ValueError, match=rf"ids must be token ids in \[0, vocab_size={VOCAB}\)"):
            model(ids)
    ids[1, 4] = VOCAB - 1  # the largest valid id
    assert model(ids).shape == (3, 2)

"""``posgeom_utils.models.positional_mechanism``: how a model encodes positions, read from its config alone
(tiny ``transformers`` configs: nothing is downloaded)."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("transformers")

from posgeom_utils.models import (PositionalMechanism, position_table_size, positional_mechanism,  # noqa: E402
                                  rope_base)

TINY = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=4, intermediate_size=64)
MPT = dict(d_model=32, n_heads=4, n_layers=1, vocab_size=100)


@pytest.mark.parametrize("config, expected, label", [
    (tf.BertConfig(max_position_embeddings=64, **TINY), PositionalMechanism("learned"), "learned (model)"),
    (tf.GPT2Config(n_embd=32, n_layer=1, n_head=4, n_positions=64), PositionalMechanism("learned"), None),
    (tf.LlamaConfig(rope_theta=500.0, **TINY), PositionalMechanism("rope", 4, 8, 500.0),
     "RoPE (d_head=8, base=500, 4 heads)"),
    (tf.LlamaConfig(**TINY), PositionalMechanism("rope", 4, 8, 10000.0), None),
    (tf.LlamaConfig(head_dim=16, **TINY), PositionalMechanism("rope", 4, 16, 10000.0), None),
    (tf.BloomConfig(vocab_size=100, hidden_size=32, n_layer=1, n_head=4), PositionalMechanism("alibi", 4),
     "ALiBi (4 heads, pooled)"),
    (tf.MptConfig(**MPT), PositionalMechanism("alibi", 4), None),
    (tf.MptConfig(**MPT, attn_config={"alibi": False}), PositionalMechanism("learned"), None),
])
def test_mechanism_from_config(config, expected, label):
    mech = positional_mechanism(config)
    assert mech == expected
    if label:
        assert mech.label == label
    if mech.kind == "rope":
        assert rope_base(config) in (None, mech.base)


def test_position_table_size():
    assert position_table_size(tf.GPT2Config(n_embd=32, n_layer=1, n_head=4, n_positions=64)) == 64
    # RoBERTa: rows 0 and 1 (pad_token_id + 1) are never real positions
    assert position_table_size(tf.RobertaConfig(max_position_embeddings=66, pad_token_id=1, **TINY)) == 64


def test_configs_that_cannot_be_built_are_errors():
    config = tf.LlamaConfig(**TINY)
    config.head_dim = 7  # transformers refuses an odd head at construction; an edited config.json is not checked
    with pytest.raises(ValueError, match=r"head size 7 is not an even number.*head_dim must be even"):
        positional_mechanism(config)
    with pytest.raises(ValueError, match=r"names no number of attention heads.*num_attention_heads"):
        positional_mechanism(tf.PretrainedConfig(rope_theta=10000.0, hidden_size=32))
    with pytest.raises(ValueError, match=r"names no number of attention heads.*ALiBi"):
        positional_mechanism(tf.PretrainedConfig(position_embedding_type="alibi"))

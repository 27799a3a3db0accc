"""``posgeom_utils.models.positional_mechanism``: how a model encodes positions, read from its config alone.

Configs are built with the ``transformers`` classes at tiny sizes: nothing is downloaded, no weights exist.
"""

from __future__ import annotations

import pytest

tf = pytest.importorskip("transformers")

from posgeom_utils.models import (PositionalMechanism, position_table_size, positional_mechanism,  # noqa: E402
                                  rope_base)

TINY = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=4, intermediate_size=64)


def test_bert_is_learned():
    mech = positional_mechanism(tf.BertConfig(max_position_embeddings=64, **TINY))
    assert mech == PositionalMechanism("learned")
    assert mech.n_heads is mech.head_dim is mech.base is None
    assert mech.label == "learned (model)"


def test_gpt2_is_learned():
    config = tf.GPT2Config(n_embd=32, n_layer=1, n_head=4, n_positions=64)
    assert positional_mechanism(config).kind == "learned"
    assert position_table_size(config) == 64


def test_position_table_size_roberta_offset():
    config = tf.RobertaConfig(max_position_embeddings=66, pad_token_id=1, **TINY)
    assert position_table_size(config) == 64  # rows 0 and 1 (pad_token_id + 1) are never real positions


def test_llama_is_rope_with_head_dim_and_base_from_rope_theta():
    config = tf.LlamaConfig(max_position_embeddings=64, rope_theta=500.0, **TINY)
    mech = positional_mechanism(config)
    assert mech.kind == "rope"
    assert mech.n_heads == 4 and mech.head_dim == 32 // 4 == 8
    assert mech.base == 500.0 == rope_base(config)
    assert mech.label == "RoPE (d_head=8, base=500, 4 heads)"


def test_llama_default_base():
    mech = positional_mechanism(tf.LlamaConfig(**TINY))
    assert mech.kind == "rope" and mech.base == 10000.0


def test_explicit_head_dim_wins():
    config = tf.LlamaConfig(head_dim=16, **TINY)  # head_dim need not be hidden_size / heads
    assert positional_mechanism(config).head_dim == 16


def test_bloom_is_alibi():
    mech = positional_mechanism(tf.BloomConfig(vocab_size=100, hidden_size=32, n_layer=1, n_head=4))
    assert mech == PositionalMechanism("alibi", n_heads=4)
    assert mech.label == "ALiBi (4 heads, pooled)"


def test_mpt_alibi_on_and_off():
    on = tf.MptConfig(d_model=32, n_heads=4, n_layers=1, vocab_size=100)
    assert positional_mechanism(on) == PositionalMechanism("alibi", n_heads=4)
    off = tf.MptConfig(d_model=32, n_heads=4, n_layers=1, vocab_size=100, attn_config={"alibi": False})
    assert positional_mechanism(off).kind == "learned"


def test_rope_with_odd_head_size_is_an_error():
    config = tf.LlamaConfig(**TINY)
    config.head_dim = 7  # transformers refuses an odd head at construction; an edited config.json is not checked
    with pytest.raises(ValueError, match=r"head size 7 is not an even number.*head_dim must be even"):
        positional_mechanism(config)


def test_rope_without_head_count_is_an_error():
    config = tf.PretrainedConfig(rope_theta=10000.0, hidden_size=32)  # a RoPE base, but no number of heads
    with pytest.raises(ValueError, match=r"names no number of attention heads.*num_attention_heads"):
        positional_mechanism(config)


def test_alibi_without_head_count_is_an_error():
    config = tf.PretrainedConfig(position_embedding_type="alibi")
    with pytest.raises(ValueError, match=r"names no number of attention heads.*ALiBi"):
        positional_mechanism(config)

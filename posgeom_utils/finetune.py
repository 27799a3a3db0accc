"""Fine-tuning a pre-trained encoder as a classifier, recording its learned position
table at step 0 and every evaluation; resumable, dropout included (the n-th training
pass's masks are seeded by ``(seed, n)``). Chapter: *Do distinct positions get distinct
vectors?*."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .cache import atomic_write, read_or_discard
from .checks import integer, require
from .corpus import check_texts
from .models import (
    learned_position_embeddings,
    load_model,
    load_tokenizer,
    select_device,
)
from .seeding import seed_everything
from .training import History, TrainConfig, train_classifier

#: beside ``checkpoint.pt``: the recorded position tables of a run (for resume)
RECORDS_FILE = "position_records.npz"


class PretrainedClassifier(nn.Module):
    """A Hugging Face encoder with a linear classification head on the masked mean of
    its last hidden state; ``forward(input_ids)`` alone works (the mask is ``input_ids
    != pad_token_id``). Chapter: *Do distinct positions get distinct vectors?*."""

    def __init__(
        self,
        encoder: nn.Module,
        num_classes: int = 2,
        pad_token_id: Any = None,
        seed: int = 0,
    ):
        super().__init__()
        hidden = getattr(getattr(encoder, "config", None), "hidden_size", None)
        name, ok = type(encoder).__name__, hidden is not None
        require(ok, "encoder", "a transformers model (config.hidden_size)", name)
        self.num_classes, self.seed = integer(num_classes, "num_classes", 2), int(seed)
        self.encoder, self.head = encoder, nn.Linear(int(hidden), self.num_classes)
        self.pad_token_id = (
            pad_token_id if pad_token_id is not None else encoder.config.pad_token_id
        )
        # training passes so far: seeds the dropout masks, saved with the weights
        self.register_buffer("train_forwards", torch.zeros((), dtype=torch.long))
        self.train(encoder.training)

    def position_table(self, n: int | None = None) -> np.ndarray:
        """The current learned absolute position table (positions 0..n-1, all if None)
        as a CPU float64 copy; ``ValueError`` if the encoder has none (RoPE, ALiBi,
        relative positions). Chapter: *Do distinct positions get distinct vectors?*."""
        return learned_position_embeddings(self.encoder, n)

    def attention_mask_for(self, input_ids: torch.Tensor) -> torch.Tensor:
        """1 for real tokens, 0 for padding (all ones without a pad token).
        Chapter: *Do distinct positions get distinct vectors?*."""
        if self.pad_token_id is None:
            return torch.ones_like(input_ids)
        return (input_ids != self.pad_token_id).long()

    @contextlib.contextmanager
    def _dropout_masks(self, device: torch.device) -> Iterator[None]:
        """In training, seed this pass's dropout masks by ``(seed, pass)``."""
        if not self.training:
            yield
            return
        self.train_forwards += 1
        devices = [device.index or 0] if device.type == "cuda" else []
        seed = (self.seed * 1_000_003 + int(self.train_forwards)) % 2**63
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            yield

    def forward(
        self, input_ids: torch.Tensor, attention_mask: Any = None
    ) -> torch.Tensor:
        """Logits (batch x num_classes) for token ids (batch x length).
        Chapter: *Do distinct positions get distinct vectors?*."""
        shape = tuple(input_ids.shape)
        require(input_ids.dim() == 2, "input_ids", "(batch, length)", shape)
        if attention_mask is None:
            attention_mask = self.attention_mask_for(input_ids)
        with self._dropout_masks(input_ids.device):
            out = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        hidden = out.last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return self.head((hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0))


def encode_texts(
    texts: Sequence[str], tokenizer: Any, max_len: int
) -> tuple[torch.Tensor, ...]:
    """Token ids and attention mask (int64, n x max_len): special tokens kept,
    truncated, right-padded. Chapter: *Do distinct positions get distinct vectors?*."""
    texts, max_len = check_texts(texts), integer(max_len, "max_len", 2)
    pad, fix = getattr(tokenizer, "pad_token_id", None), "set tokenizer.pad_token first"
    require(pad is not None, "tokenizer.pad_token_id", "a token id", pad, fix)
    options = {"truncation": True, "max_length": max_len, "padding": "max_length"}
    enc = tokenizer(texts, add_special_tokens=True, return_tensors="pt", **options)
    return enc["input_ids"].long(), enc["attention_mask"].long()


def _labels(y: Any, n: int, num_classes: int, name: str) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(y))
    shape = tuple(t.shape)
    require(t.dim() == 1 and len(t) == n, name, f"one label per text ({n})", shape)
    integral = not t.is_floating_point() or torch.equal(t, t.round())
    require(integral, name, "integer class labels", t.dtype)
    span, labels = f"{int(t.min())}..{int(t.max())}", f"0..{num_classes - 1} labels"
    require(t.min() >= 0 and t.max() < num_classes, name, labels, span)
    return t.long()


@dataclass
class FinetuneSetup:
    """A fine-tuning run before training: the classifier (head seeded by
    ``config.seed``), the encoded texts and labels, the run's ``config`` and how many
    table rows it records. Chapter: *Do distinct positions get distinct vectors?*."""

    model: PretrainedClassifier
    X_train: torch.Tensor
    y_train: torch.Tensor
    X_eval: torch.Tensor
    y_eval: torch.Tensor
    config: TrainConfig
    n_record: int


def prepare_finetune(
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
) -> FinetuneSetup:
    """Check the inputs before loading ``model_name`` (None: the packaged MiniLM) with a
    seeded head, encode the texts; ``record_every``, ``device`` override ``config``.
    Chapter: *Do distinct positions get distinct vectors?*."""
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    if record_every is not None:
        config = replace(config, eval_every=integer(record_every, "record_every"))
    config = config if device is None else replace(config, device=device)
    select_device(config.device)
    texts_train = check_texts(texts_train, "texts_train")
    texts_eval = check_texts(texts_eval, "texts_eval")
    max_len = integer(max_len, "max_len", 2)
    num_classes = integer(num_classes, "num_classes", 2)
    y_train = _labels(y_train, len(texts_train), num_classes, "y_train")
    y_eval = _labels(y_eval, len(texts_eval), num_classes, "y_eval")
    tokenizer = load_tokenizer(model_name)
    encoder = load_model(model_name, device="cpu")
    seed_everything(config.seed)  # the head's initial weights
    model = PretrainedClassifier(
        encoder, num_classes, tokenizer.pad_token_id, config.seed
    )
    # ValueError now without learned absolute positions
    rows = model.position_table().shape[0]
    within = f"at most the model's {rows} learned positions"
    require(max_len <= rows, "max_len", within, max_len)
    n_record = max_len if n_record is None else integer(n_record, "n_record", 1, rows)
    X_train = encode_texts(texts_train, tokenizer, max_len)[0]
    X_eval = encode_texts(texts_eval, tokenizer, max_len)[0]
    return FinetuneSetup(model, X_train, y_train, X_eval, y_eval, config, n_record)


def save_records(path: Path, records: dict[int, np.ndarray]) -> None:
    """Write ``{step: table}`` atomically as an ``.npz`` of ``steps`` and stacked
    ``tables``. Chapter: *Do distinct positions get distinct vectors?*."""
    steps = sorted(records)
    tables = np.stack([records[s] for s in steps])
    steps = np.asarray(steps, dtype=np.int64)
    atomic_write(path, lambda tmp: np.savez(tmp, steps=steps, tables=tables))


def _load_records(path: Path | None, shape: tuple[int, int]) -> dict[int, np.ndarray]:
    def read(p: Path) -> tuple[np.ndarray, np.ndarray]:
        with np.load(p) as saved:
            return saved["steps"], saved["tables"]

    loaded = None if path is None else read_or_discard(path, read)
    if loaded is None:
        return {}
    steps, tables = loaded
    if tables.shape[1:] != shape:
        raise ValueError(
            f"{path} holds position tables of shape {tables.shape[1:]}, this run "
            f"records {shape} (n_record or the model differ): use another "
            "checkpoint_dir or the same settings"
        )
    return {int(s): t for s, t in zip(steps, tables)}


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
    wrap: Callable[[FinetuneSetup], Any] | None = None,
) -> tuple[PretrainedClassifier, History, list[tuple[int, np.ndarray]]]:
    """Fine-tune ``model_name`` with a seeded linear head (:func:`prepare_finetune`,
    then :func:`~posgeom_utils.training.train_classifier`). Returns ``(model, history,
    records)``, ``records`` the ``(step, table)`` of the first ``n_record`` rows at
    step 0 and after each evaluation. With ``config.checkpoint_dir`` an interrupted run
    resumes; ``wrap(run)``, a context manager yielding the module and settings to train,
    is the data-parallel path of *Beyond one machine*. Chapter: *Do distinct positions
    get distinct vectors?*."""
    run = prepare_finetune(
        model_name,
        texts_train,
        y_train,
        texts_eval,
        y_eval,
        config,
        max_len=max_len,
        record_every=record_every,
        n_record=n_record,
        num_classes=num_classes,
        device=device,
    )
    folder = run.config.checkpoint_dir
    path = Path(folder) / RECORDS_FILE if folder else None
    recorded = _load_records(path, (run.n_record, run.model.position_table(1).shape[1]))

    def record(step: int, _: nn.Module) -> None:
        recorded[step] = run.model.position_table(run.n_record)
        if path is not None:
            save_records(path, recorded)

    data = (run.X_train, run.y_train, run.X_eval, run.y_eval)
    single = contextlib.nullcontext((run.model, run.config))
    with wrap(run) if wrap else single as (net, settings):
        history = train_classifier(net, *data, settings, callback=record)
    # on resume, tables recorded after the last checkpoint were recomputed
    records = [(s, recorded[s]) for s in [0, *history.step] if s in recorded]
    return run.model, history, records

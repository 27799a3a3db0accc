"""Training with seeds, a device choice, periodic evaluation, atomic checkpoints and
automatic resume.

Chapter: *Low rank* (training demonstration); reused by the separation and monotonicity
chapters.

A run is identified by its ``checkpoint_dir``: if a checkpoint is there, training
resumes from it (model, optimiser, step, batch-sampling state and history), so an
interrupted run finishes with the same weights as an uninterrupted one.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .cache import atomic_write
from .models import select_device
from .seeding import seed_everything
from .settings import progress


@dataclass
class TrainConfig:
    """What a training run needs besides the model and the data. Chapter: *Low rank*."""

    steps: int = 300
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.0
    # "adamw" or "sgd" (plain gradient descent: the lazy / NTK regime of
    # *Monotonicity*)
    optimizer: str = "adamw"
    seed: int = 0
    device: str = "auto"
    eval_every: int = 50
    checkpoint_dir: str | None = None
    checkpoint_every: int = 100
    # bfloat16 autocast: "auto" on CUDA only (the default), True on any device (the CPU
    # too, which is how the GPU code path is tested without a GPU), False never; see
    # amp_enabled
    amp: bool | str = "auto"
    threads: int | None = (
        None  # CPU threads for this run (None: torch's default); restored afterwards.
    )
    # Small models train far faster on 1 thread than on 2 on the 2-core machines this
    # book is built on.

    def __post_init__(self) -> None:
        _check_amp(self.amp)
        if self.threads is not None and (
            isinstance(self.threads, bool)
            or not isinstance(self.threads, int)
            or self.threads < 1
        ):
            raise ValueError(
                f"threads must be None or an integer >= 1, got {self.threads!r}"
            )
        for name in ("steps", "batch_size", "eval_every", "checkpoint_every"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, np.integer))
                or value < 1
            ):
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.optimizer not in ("adamw", "sgd"):
            raise ValueError(
                f"optimizer must be 'adamw' or 'sgd', got {self.optimizer!r}"
            )
        if not _is_number(self.lr) or not math.isfinite(self.lr) or self.lr <= 0:
            raise ValueError(
                f"lr must be a finite number > 0, got lr={self.lr!r}: pass e.g. lr=1e-3"
            )
        if (
            not _is_number(self.weight_decay)
            or not math.isfinite(self.weight_decay)
            or self.weight_decay < 0
        ):
            raise ValueError(
                "weight_decay must be a finite number >= 0, got "
                f"weight_decay={self.weight_decay!r}: pass e.g. weight_decay=0.0 "
                "(none) or 0.01"
            )


#: the accepted values of ``TrainConfig.amp``
AMP_CHOICES = ("auto", True, False)


def _check_amp(amp: object) -> None:
    """``amp`` must be ``"auto"``, ``True`` or ``False`` (a bool, not 0/1 or "true")."""
    if not (isinstance(amp, str) and amp == "auto") and not isinstance(amp, bool):
        raise ValueError(
            "amp must be 'auto' (bfloat16 autocast on CUDA only), True (on any "
            f"device, the CPU included) or False (never), got amp={amp!r}"
        )


def amp_enabled(amp: bool | str, device: torch.device | str) -> bool:
    """Whether a run with ``TrainConfig.amp=amp`` on ``device`` trains under bfloat16
    autocast: ``"auto"`` on CUDA only, ``True`` on any device (CPU included), ``False``
    never. Chapter: *Low rank*.
    """
    _check_amp(amp)
    if isinstance(amp, str):  # "auto"
        return torch.device(device).type == "cuda"
    return bool(amp)


#: marks a checkpoint's config as written since ``amp`` took ``"auto"`` (its ``True``
#: means bfloat16 on any device)
_AMP_MARKER = "amp_true_means_any_device"


def _saved_amp(saved_config: dict) -> bool | str:
    """The ``amp`` setting of a checkpoint's config. Checkpoints written before ``amp``
    took ``"auto"`` (no :data:`_AMP_MARKER`) hold the old boolean, whose ``True`` (the
    old default) meant what ``"auto"`` means now: bfloat16 on CUDA only."""
    amp = saved_config.get("amp", True)
    if saved_config.get(_AMP_MARKER):
        return amp
    return "auto" if amp else False


def _is_number(value: object) -> bool:
    """A real number (int, float or NumPy scalar), not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


@dataclass
class History:
    """Metrics recorded during training (one entry per evaluation).
    Chapter: *Low rank*."""

    step: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    eval_loss: list[float] = field(default_factory=list)
    eval_accuracy: list[float] = field(default_factory=list)

    def final_accuracy(self) -> float:
        """The last evaluation accuracy (NaN before any evaluation).
        Chapter: *Low rank*."""
        return self.eval_accuracy[-1] if self.eval_accuracy else float("nan")


@torch.no_grad()
def evaluate(
    model: nn.Module, X: torch.Tensor, y: torch.Tensor, batch_size: int = 512
) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of a classifier on (X, y); the model's train/eval
    mode is kept.

    Token-level targets (``y`` of shape (batch, L), ``-100`` = not scored, as for
    masked-language modelling) are averaged over the scored tokens. Chapter: *Low rank*.
    """
    if len(X) == 0 or len(X) != len(y):
        raise ValueError(
            f"X and y must be non-empty and of equal length, got {len(X)} and {len(y)}"
        )
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    losses, correct, scored = [], 0, 0
    for start in range(0, len(X), batch_size):
        xb, yb = (
            X[start : start + batch_size].to(device),
            y[start : start + batch_size].to(device),
        )
        logits = model(xb).float()
        losses.append(_loss(logits, yb, reduction="sum").item())
        keep = yb != IGNORE
        correct += ((logits.argmax(-1) == yb) & keep).sum().item()
        scored += keep.sum().item()
    model.train(was_training)
    return sum(losses) / max(scored, 1), correct / max(scored, 1)


#: token targets with this value are not scored (the masked-language-modelling
#: convention)
IGNORE = -100


def _loss(
    logits: torch.Tensor, y: torch.Tensor, reduction: str = "mean"
) -> torch.Tensor:
    """Cross-entropy for sequence labels (batch, C) or token labels (batch, L, C) with
    ``IGNORE``."""
    if logits.dim() == 3:
        return F.cross_entropy(
            logits.transpose(1, 2), y, ignore_index=IGNORE, reduction=reduction
        )
    return F.cross_entropy(logits, y, reduction=reduction)


def _checkpoint_path(config: TrainConfig) -> Path | None:
    return (
        Path(config.checkpoint_dir) / "checkpoint.pt" if config.checkpoint_dir else None
    )


#: settings that must match when a run resumes from a checkpoint (``steps`` may grow;
#: ``device`` may change, and with ``amp="auto"`` the precision follows it)
_RESUME_KEYS = ("batch_size", "lr", "weight_decay", "seed", "optimizer", "amp")


def _save(
    path: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    step: int,
    generator: torch.Generator,
    history: History,
    config: TrainConfig,
    running: list[float],
    track: list | None = None,
) -> None:
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "step": step,
        "generator": generator.get_state(),
        "history": asdict(history),
        "config": {**asdict(config), _AMP_MARKER: True},
        "running": list(running),
        "track": None if track is None else list(track),
    }
    atomic_write(path, lambda tmp: torch.save(state, tmp))


def train_classifier(
    model: nn.Module,
    X_train: torch.Tensor,
    y_train: torch.Tensor,
    X_eval: torch.Tensor,
    y_eval: torch.Tensor,
    config: TrainConfig,
    callback: Callable[[int, nn.Module], None] | None = None,
    track: list | None = None,
) -> History:
    """Train ``model`` with AdamW (or SGD) on seeded random batches; evaluate every
    ``eval_every`` steps.

    ``callback(step, model)`` runs at step 0 and after every evaluation (e.g. to record
    position vectors). With ``checkpoint_dir`` set, a checkpoint is written atomically
    every ``checkpoint_every`` steps and at the end, and a later call with the same
    directory resumes from it. ``track`` is the list a callback appends its records to:
    it is saved with every checkpoint and restored in place on resume, so a resumed run
    ends with the same records as an uninterrupted one. The forward pass and loss run
    under bfloat16 autocast where :func:`amp_enabled` says so (``config.amp``); the
    evaluation runs in float32. Chapter: *Low rank*.
    """
    previous = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    try:
        return _train(model, X_train, y_train, X_eval, y_eval, config, callback, track)
    finally:
        torch.set_num_threads(previous)


def _train(
    model: nn.Module,
    X_train: torch.Tensor,
    y_train: torch.Tensor,
    X_eval: torch.Tensor,
    y_eval: torch.Tensor,
    config: TrainConfig,
    callback: Callable[[int, nn.Module], None] | None,
    track: list | None = None,
) -> History:
    if len(X_train) == 0 or len(X_train) != len(y_train):
        raise ValueError(
            "X_train and y_train must be non-empty and of equal length, got "
            f"{len(X_train)}, {len(y_train)}"
        )
    if len(X_eval) == 0 or len(X_eval) != len(y_eval):
        raise ValueError(
            "X_eval and y_eval must be non-empty and of equal length, got "
            f"{len(X_eval)}, {len(y_eval)}"
        )
    seed_everything(config.seed)
    device = select_device(config.device)
    model.to(device).train()
    if config.optimizer == "sgd":
        optimizer = torch.optim.SGD(
            model.parameters(), lr=config.lr, weight_decay=config.weight_decay
        )
    else:
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=config.lr, weight_decay=config.weight_decay
        )
    generator = torch.Generator().manual_seed(config.seed)
    history, start, running = History(), 0, []
    path = _checkpoint_path(config)
    if path is not None and path.is_file():
        state = torch.load(path, map_location=device, weights_only=False)
        saved = {
            **{k: state["config"].get(k) for k in _RESUME_KEYS},
            "optimizer": state["config"].get("optimizer", "adamw"),
            "amp": _saved_amp(state["config"]),
        }
        changed = [k for k in _RESUME_KEYS if saved[k] != getattr(config, k)]
        if changed:
            raise ValueError(
                f"checkpoint_dir={config.checkpoint_dir!r} holds a run with different "
                f"{changed}: use another checkpoint_dir or the same settings to resume"
            )
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        history, start, running = (
            History(**state["history"]),
            int(state["step"]),
            list(state.get("running", [])),
        )
        if track is not None:
            track[:] = list(state.get("track") or [])
    use_amp = amp_enabled(config.amp, device)
    if start == 0 and callback is not None:
        callback(0, model)
    for step in progress(
        range(start + 1, config.steps + 1), desc="training", total=config.steps - start
    ):
        idx = torch.randint(len(X_train), (config.batch_size,), generator=generator)
        xb, yb = X_train[idx].to(device), y_train[idx].to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
            loss = _loss(model(xb).float(), yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        running.append(loss.item())
        if step % config.eval_every == 0 or step == config.steps:
            eval_loss, accuracy = evaluate(model, X_eval, y_eval)
            history.step.append(step)
            history.train_loss.append(float(np.mean(running)))
            history.eval_loss.append(eval_loss)
            history.eval_accuracy.append(accuracy)
            running = []
            if callback is not None:
                callback(step, model)
        if path is not None and (
            step % config.checkpoint_every == 0 or step == config.steps
        ):
            _save(
                path, model, optimizer, step, generator, history, config, running, track
            )
    return history

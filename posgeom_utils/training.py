"""Seeded training with periodic evaluation and checkpoints; a resumed run ends with the
uninterrupted run's weights. Chapter: *Do distinct positions get distinct vectors?*."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import checks
from .cache import atomic_write, read_or_discard
from .models import select_device
from .sampling import t_interval
from .seeding import seed_everything
from .settings import progress

#: the accepted values of ``TrainConfig.amp``
AMP_CHOICES = ("auto", True, False)
_AMP_FIX = (
    "'auto' (bfloat16 autocast on CUDA only), "
    "True (on any device, the CPU included) or False"
)
#: token targets with this value are not scored (the masked-language convention)
IGNORE = -100
#: settings a resumed run must match (``steps`` may grow, ``device`` may change)
_RESUME_KEYS = ("batch_size", "lr", "weight_decay", "seed", "optimizer", "amp")


@dataclass
class TrainConfig:
    """What a training run needs besides the model and the data (``amp``: see
    :func:`amp_enabled`). Chapter: *Do distinct positions get distinct vectors?*."""

    steps: int = 300
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.0
    optimizer: str = "adamw"
    seed: int = 0
    device: str = "auto"
    eval_every: int = 50
    checkpoint_dir: str | None = None
    checkpoint_every: int = 100
    amp: bool | str = "auto"
    threads: int | None = None

    def __post_init__(self) -> None:
        checks.choice(self.amp, "amp", AMP_CHOICES, _AMP_FIX)
        checks.integer(self.threads, "threads", optional=True)
        for name in ("steps", "batch_size", "eval_every", "checkpoint_every"):
            checks.integer(getattr(self, name), name)
        checks.choice(self.optimizer, "optimizer", ("adamw", "sgd"))
        checks.number(self.lr, "lr", 0, low_open=True, fix="pass e.g. lr=1e-3")
        fix = "pass e.g. weight_decay=0.0 (none) or 0.01"
        checks.number(self.weight_decay, "weight_decay", 0, fix=fix)


def amp_enabled(amp: bool | str, device: torch.device | str) -> bool:
    """Whether ``amp`` on ``device`` means bfloat16 autocast (``"auto"``: on CUDA only).
    Chapter: *Do distinct positions get distinct vectors?*."""
    checks.choice(amp, "amp", AMP_CHOICES, _AMP_FIX)
    if isinstance(amp, str):  # "auto"
        return torch.device(device).type == "cuda"
    return amp


@dataclass
class History:
    """Metrics per eval step. Chapter: *Do distinct positions get distinct vectors?*."""

    step: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    eval_loss: list[float] = field(default_factory=list)
    eval_accuracy: list[float] = field(default_factory=list)

    def final_accuracy(self) -> float:
        """Final accuracy. Chapter: *Do distinct positions get distinct vectors?*."""
        return self.eval_accuracy[-1] if self.eval_accuracy else float("nan")


def _check_pair(X: torch.Tensor, y: torch.Tensor, names: str) -> None:
    ok = len(X) > 0 and len(X) == len(y)
    checks.require(ok, names, "non-empty and of equal length", (len(X), len(y)))


@torch.no_grad()
def evaluate(
    model: nn.Module, X: torch.Tensor, y: torch.Tensor, batch_size: int = 512
) -> tuple[float, float]:
    """Mean cross-entropy and accuracy on (X, y) over the scored targets (``-100``: not
    scored). Chapter: *Do distinct positions get distinct vectors?*."""
    _check_pair(X, y, "X and y")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    losses, correct, scored = [], 0, 0
    for start in range(0, len(X), batch_size):
        xb = X[start : start + batch_size].to(device)
        yb = y[start : start + batch_size].to(device)
        logits = model(xb).float()
        losses.append(_loss(logits, yb, reduction="sum").item())
        keep = yb != IGNORE
        correct += ((logits.argmax(-1) == yb) & keep).sum().item()
        scored += keep.sum().item()
    model.train(was_training)
    return sum(losses) / max(scored, 1), correct / max(scored, 1)


def _loss(
    logits: torch.Tensor, y: torch.Tensor, reduction: str = "mean"
) -> torch.Tensor:
    """Cross-entropy of sequence or token labels (``IGNORE``: not scored)."""
    if logits.dim() == 3:
        logits = logits.transpose(1, 2)
    return F.cross_entropy(logits, y, ignore_index=IGNORE, reduction=reduction)


def _save(
    path, model, optimizer, step, generator, history, config, running, track
) -> None:
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "step": step,
        "generator": generator.get_state(),
        "history": asdict(history),
        "config": asdict(config),
        "running": list(running),
        "track": None if track is None else list(track),
    }
    atomic_write(path, lambda tmp: torch.save(state, tmp))


def _resume(
    path, model, optimizer, generator, config, device, track
) -> tuple[History, int, list]:
    """Restore the checkpoint at ``path`` in place (none: a fresh start)."""
    load = partial(torch.load, map_location=device, weights_only=False)
    state = None if path is None else read_or_discard(path, load)
    if state is None:
        return History(), 0, []
    changed = [k for k in _RESUME_KEYS if state["config"].get(k) != getattr(config, k)]
    if changed:
        why = f"holds a run with different {changed}: use another folder"
        raise ValueError(f"{config.checkpoint_dir!r} {why}")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    generator.set_state(state["generator"])
    if track is not None:
        track[:] = list(state["track"] or [])
    return History(**state["history"]), int(state["step"]), list(state["running"])


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
    """Train on seeded batches; ``callback(step, model)`` at step 0 and each evaluation,
    its ``track`` checkpointed and resumed with the run. Chapter: *Do distinct positions
    get distinct vectors?*."""
    previous = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    try:
        return _train(model, X_train, y_train, X_eval, y_eval, config, callback, track)
    finally:
        torch.set_num_threads(previous)


def _train(model, X_train, y_train, X_eval, y_eval, config, callback, track) -> History:
    _check_pair(X_train, y_train, "X_train and y_train")
    _check_pair(X_eval, y_eval, "X_eval and y_eval")
    seed_everything(config.seed)
    device = select_device(config.device)
    model.to(device).train()
    Optimizer = torch.optim.SGD if config.optimizer == "sgd" else torch.optim.AdamW
    optimizer = Optimizer(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay
    )
    generator = torch.Generator().manual_seed(config.seed)
    folder = config.checkpoint_dir
    path = Path(folder) / "checkpoint.pt" if folder else None
    history, start, running = _resume(
        path, model, optimizer, generator, config, device, track
    )
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


def accuracy_interval(accuracy: np.ndarray, n_eval: int) -> tuple[float, float]:
    """Mean held-out accuracy over seeds and its 95% half-width from the seed spread and
    the binomial error of the ``n_eval`` shared evaluation examples.
    Chapter: *Why a Transformer needs positions*."""
    mean, seeds = t_interval(accuracy)
    shared = 1.959964 * np.sqrt(mean * (1 - mean) / n_eval)
    return mean, float(np.hypot(seeds if len(accuracy) > 1 else 0.0, shared))

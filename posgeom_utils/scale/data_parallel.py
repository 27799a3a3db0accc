"""Per-layer probes and fine-tuning, data-parallel under ``accelerate launch`` or
``torchrun``: thin wrappers that run the single-process functions on each process's
share and merge the results. Chapter: *Beyond one machine*."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest import mock

import numpy as np

from .. import probes
from ..checks import integer
from ..corpus import Corpus, check_texts

if TYPE_CHECKING:  # torch is imported when needed
    from ..finetune import PretrainedClassifier
    from ..training import History, TrainConfig


def _get_accelerator(accelerator: Any, cpu: bool = False) -> Any:
    """``accelerator``, or a new one, on CPU if asked or if no GPU is visible."""
    if accelerator is None:
        import torch
        from accelerate import Accelerator

        accelerator = Accelerator(cpu=cpu or not torch.cuda.is_available())
    if not hasattr(accelerator, "num_processes") or not hasattr(accelerator, "reduce"):
        name = type(accelerator).__name__
        raise TypeError(
            f"accelerator must be an accelerate.Accelerator or None, got {name}"
        )
    world = os.environ.get("WORLD_SIZE", "1")
    if world.isdigit() and int(world) > 1 and accelerator.num_processes == 1:
        raise ValueError(
            f"launched with WORLD_SIZE={world}, but the accelerator runs one process "
            "(each would do all the work alone): without GPUs create it with "
            "Accelerator(cpu=True)"
        )
    return accelerator


def _device(accelerator: Any) -> str:
    """``cpu`` (Accelerate says ``cpu:0`` on several CPU processes) or ``cuda:k``."""
    return "cpu" if accelerator.device.type == "cpu" else str(accelerator.device)


def _quiet_unless_main(accelerator: Any) -> contextlib.AbstractContextManager:
    """Progress bars on the main process only."""
    if accelerator.is_main_process:
        return contextlib.nullcontext()
    return mock.patch.dict(os.environ, {"TQDM_DISABLE": "1"})


def batch_share(
    lengths: Sequence[int] | np.ndarray, batch_size: int, rank: int, processes: int
) -> np.ndarray:
    """Indices of the texts that process ``rank`` of ``processes`` probes, in probing
    order: the texts sorted (stably) by tokenized ``lengths``, cut into batches of
    ``batch_size`` as ``positional_hidden_means`` cuts them, batches ``rank, rank +
    processes, ...``. Only the last batch can be short and it ends its share, so
    re-cutting a share gives the same batches. Chapter: *Beyond one machine*."""
    batch_size = integer(batch_size, "batch_size")
    processes = integer(processes, "processes")
    rank = integer(rank, "rank", 0, processes - 1)
    order = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable")
    starts = range(rank * batch_size, len(order), processes * batch_size)
    parts = [order[s : s + batch_size] for s in starts]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def data_parallel_hidden_means(
    model: Any,
    tokenizer: Any,
    texts: Corpus | Sequence[str],
    n: int,
    batch_size: int = 64,
    special_tokens: bool = True,
    centre: str = "none",
    accelerator: Any = None,
) -> probes.LayerMeans:
    """:func:`~posgeom_utils.probes.positional_hidden_means`, each process of
    ``accelerator`` (created if None) probing its :func:`batch_share` (``batch_size``
    per process); every process returns the merged, single-process result to rounding,
    with ``params["processes"]``. Chapter: *Beyond one machine*."""
    texts = check_texts(texts)
    accelerator = _get_accelerator(accelerator)
    # the single-process checks, on every process before any collective
    n, batch_size = probes.check_probe(model, n, batch_size, centre)
    processes, rank = accelerator.num_processes, accelerator.process_index
    share = texts
    if processes > 1:
        lengths = probes.token_lengths(tokenizer, texts, n, special_tokens)
        share = [texts[i] for i in batch_share(lengths, batch_size, rank, processes)]
    options = (n, batch_size, special_tokens, _device(accelerator))
    result = None
    if share:  # a process may get no batch
        with _quiet_unless_main(accelerator):
            result = probes.positional_hidden_means(model, tokenizer, share, *options)
    if processes > 1:  # merge the uncentred means of the processes that had batches
        import torch.distributed as dist

        parts: list[probes.LayerMeans | None] = [None] * processes
        dist.all_gather_object(parts, result)
        result = probes.merge_layer_means([part for part in parts if part is not None])
    result = result.centred() if centre == "global" else result
    return replace(result, params=dict(result.params, processes=processes))


def _sharded(model: PretrainedClassifier, rank: int, processes: int) -> tuple:
    """``model`` computing this process's rows of each batch and gathering the others'
    logits, and a hook (a context manager) summing the gradients before each step."""
    import torch
    import torch.distributed as dist
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    class _Sharded(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.module = model

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            parts = input_ids.tensor_split(processes)  # sizes differ by at most one
            rows, sizes = parts[rank], [len(p) for p in parts]
            if len(rows):
                mine = self.module(rows).float()
            else:  # fewer rows than processes
                mine = torch.zeros((0, self.module.num_classes), device=rows.device)
            padded = mine.new_zeros((max(sizes), *mine.shape[1:]))
            padded[: len(mine)] = mine.detach()
            everyone = [torch.empty_like(padded) for _ in sizes]
            dist.all_gather(everyone, padded)
            everyone[rank] = mine  # this process's own rows keep their gradient
            return torch.cat([x[:size] for x, size in zip(everyone, sizes)])

    own = {id(p) for p in model.parameters()}

    def add_up(optimizer: Any, args: Any, kwargs: Any) -> None:
        params = (p for group in optimizer.param_groups for p in group["params"])
        grads = [p.grad for p in params if id(p) in own and p.grad is not None]
        if grads:
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat)
            for grad, summed in zip(grads, flat.split([g.numel() for g in grads])):
                grad.copy_(summed.view_as(grad))

    # each process backpropagates the batch's mean loss through its own rows only
    return _Sharded(), register_optimizer_step_pre_hook(add_up)


def data_parallel_finetune(
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
    accelerator: Any = None,
) -> tuple[PretrainedClassifier, History, list[tuple[int, np.ndarray]]]:
    """:func:`~posgeom_utils.finetune.finetune` data-parallel (no ``checkpoint_dir``;
    ``accelerator`` created if None), the same result on every process: ``P`` processes
    with ``config.batch_size`` ``B / P`` follow the single-process run with batch ``B``
    to rounding. Chapter: *Beyond one machine*."""
    from ..finetune import finetune
    from ..models import select_device

    if getattr(config, "checkpoint_dir", None) is not None:
        raise ValueError(
            "data_parallel_finetune does not checkpoint: pass checkpoint_dir=None"
        )

    @contextlib.contextmanager
    def wrap(run: Any) -> Iterator[tuple[Any, TrainConfig]]:
        cpu = select_device(run.config.device).type == "cpu"
        acc = _get_accelerator(accelerator, cpu)
        processes, rank = acc.num_processes, acc.process_index
        model = run.model.to(acc.device)
        # rank 0 draws the single-process dropout masks; the others draw their own
        model.seed = (run.config.seed + rank * 1_000_000_007) % 2**63
        batch = run.config.batch_size * processes
        settings = replace(run.config, batch_size=batch, device=_device(acc))
        net, summed = model, contextlib.nullcontext()
        if processes > 1:
            net, summed = _sharded(model, rank, processes)
        with _quiet_unless_main(acc), summed:
            yield net, settings
        acc.wait_for_everyone()

    data = (model_name, texts_train, y_train, texts_eval, y_eval, config)
    options = {"max_len": max_len, "record_every": record_every, "n_record": n_record}
    return finetune(*data, num_classes=num_classes, wrap=wrap, **options)

"""Per-layer probes and fine-tuning, data-parallel under ``accelerate launch`` or
``torchrun``.

Chapter: *Beyond one machine*. Thin wrappers: every process calls the single-process
function (:func:`~posgeom_utils.probes.positional_hidden_means`,
:func:`~posgeom_utils.training.train_classifier`) on its share of the work, and
collective operations combine the shares. One process returns what the single-process
function returns, several the same quantity to float tolerance. ``python -m
posgeom_utils.scale.data_parallel probe|finetune ...`` is the launchable entry point;
rank 0 writes the outputs atomically with their provenance."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest import mock

import numpy as np

from ..cache import atomic_write, write_json
from ..checks import integer
from ..corpus import Corpus, check_texts, load_corpus
from ..probes import (
    CENTRES,
    LayerMeans,
    check_probe,
    merge_layer_means,
    positional_hidden_means,
    token_lengths,
)

if TYPE_CHECKING:  # torch is imported when needed: `--help` stays quick
    from ..finetune import PretrainedClassifier
    from ..training import History, TrainConfig

__all__ = [
    "batch_share",
    "data_parallel_finetune",
    "data_parallel_hidden_means",
    "main",
]


def _get_accelerator(accelerator: Any, cpu: bool = False) -> Any:
    """``accelerator``, or a new ``Accelerator``: on CPU when asked or when no GPU is
    visible (else Accelerate runs each process of a CPU-only ``torchrun`` alone)."""
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
            "(each would "
            "do all the work alone): without GPUs create it with Accelerator(cpu=True)"
        )
    return accelerator


def _device(accelerator: Any) -> str:
    """The accelerator's device as :func:`~posgeom_utils.models.select_device` names it
    (``cpu``, ``cuda:k``)."""
    device = accelerator.device
    return "cpu" if device.type == "cpu" else str(device)


def _quiet_unless_main(accelerator: Any) -> contextlib.AbstractContextManager:
    """Progress bars on the main process only (``TQDM_DISABLE`` on the others)."""
    if accelerator.is_main_process:
        return contextlib.nullcontext()
    return mock.patch.dict(os.environ, {"TQDM_DISABLE": "1"})


def batch_share(
    lengths: Sequence[int] | np.ndarray, batch_size: int, rank: int, processes: int
) -> np.ndarray:
    """Indices of the texts that process ``rank`` of ``processes`` probes, in probing
    order.

    The texts are sorted (stably) by their tokenized ``lengths`` and cut into batches of
    ``batch_size`` as :func:`~posgeom_utils.probes.positional_hidden_means` cuts them;
    the process takes batches ``rank, rank + processes, ...``. Only the last batch can
    be short, and it is the last of its process, so cutting the share into batches again
    gives the same batches. Chapter: *Beyond one machine*."""
    batch_size, processes = (
        integer(batch_size, "batch_size"),
        integer(processes, "processes"),
    )
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
) -> LayerMeans:
    """:func:`~posgeom_utils.probes.positional_hidden_means` with the batches shared
    between the processes of ``accelerator`` (created if None); every process returns
    the same result.

    ``model`` is an encoder (then pass its ``tokenizer``) or a model name or folder
    (None: the packaged all-MiniLM-L6-v2). ``batch_size`` is per process. Each process
    probes its :func:`batch_share` with ``positional_hidden_means``, and the shares are
    all-gathered and merged with :func:`~posgeom_utils.probes.merge_layer_means`. One
    process gives exactly the single-process result, several agree to float64 rounding
    (the same float32 forward passes, float64 sums added in another order).
    ``params["processes"]`` says how many took part. Chapter: *Beyond one machine*."""
    from ..models import load_model, load_tokenizer

    texts = check_texts(texts)
    accelerator = _get_accelerator(accelerator)
    if model is None or isinstance(model, (str, Path)):
        tokenizer = load_tokenizer(model) if tokenizer is None else tokenizer
        model = load_model(model, device="cpu")
    elif tokenizer is None:
        raise ValueError(
            "tokenizer is None but model is a model object: pass its tokenizer"
        )
    # the single-process checks, on every process before any collective
    n, batch_size = check_probe(model, n, batch_size, centre)
    processes, rank = accelerator.num_processes, accelerator.process_index
    if processes == 1:
        share = texts
    else:
        lengths = token_lengths(tokenizer, texts, n, special_tokens)
        share = [texts[i] for i in batch_share(lengths, batch_size, rank, processes)]
    options = (n, batch_size, special_tokens, _device(accelerator))
    mine = None
    if share:  # a process may get no batch
        with _quiet_unless_main(accelerator):
            mine = positional_hidden_means(model, tokenizer, share, *options)
    result = mine if processes == 1 else _merged(mine, processes)
    result = result.centred() if centre == "global" else result
    return replace(result, params=dict(result.params, processes=processes))


def _merged(mine: LayerMeans | None, processes: int) -> LayerMeans:
    """The merge of every process's uncentred means (None: a process without batches),
    the same on every process."""
    import torch.distributed as dist

    parts: list[LayerMeans | None] = [None] * processes
    dist.all_gather_object(parts, mine)
    return merge_layer_means([part for part in parts if part is not None])


def _gathered(mine: Any, sizes: list[int], rank: int) -> Any:
    """Every process's rows in rank order (``sizes[r]`` rows on process ``r``); this
    process's own rows, ``mine``, keep their gradient."""
    import torch
    import torch.distributed as dist

    padded = mine.new_zeros((max(sizes), *mine.shape[1:]))
    padded[: len(mine)] = mine.detach()
    everyone = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(everyone, padded)
    everyone[rank] = mine
    return torch.cat([rows[:size] for rows, size in zip(everyone, sizes)])


def _sharded(model: PretrainedClassifier, rank: int, processes: int) -> Any:
    """``model`` behind a forward pass that computes this process's share of the rows
    (``tensor_split``: sizes differ by at most one) and returns the logits of all of
    them, so that the single-process trainer and its ``evaluate`` see whole batches."""
    import torch

    class _Sharded(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.module = model

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            parts = input_ids.tensor_split(processes)
            rows, classes = parts[rank], self.module.num_classes
            if len(rows):
                mine = self.module(rows).float()
            else:  # fewer rows than processes
                mine = torch.zeros((0, classes), device=input_ids.device)
            return _gathered(mine, [len(p) for p in parts], rank)

    return _Sharded()


@contextlib.contextmanager
def _summed_gradients(model: Any, processes: int) -> Iterator[None]:
    """While open, every optimiser step over ``model``'s parameters first adds their
    gradients up over the processes (one all-reduce of the flattened gradients). Each
    process backpropagates the whole batch's mean loss through its own rows only, so
    the sum is the gradient of the single-process loss."""
    import torch
    import torch.distributed as dist
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    if processes == 1:
        yield
        return
    own = {id(p) for p in model.parameters()}

    def add_up(optimizer: Any, args: Any, kwargs: Any) -> None:
        params = (p for group in optimizer.param_groups for p in group["params"])
        grads = [p.grad for p in params if id(p) in own and p.grad is not None]
        if grads:
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat)
            for grad, summed in zip(grads, flat.split([g.numel() for g in grads])):
                grad.copy_(summed.view_as(grad))

    handle = register_optimizer_step_pre_hook(add_up)
    try:
        yield
    finally:
        handle.remove()


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
    """:func:`~posgeom_utils.finetune.finetune` data-parallel; returns ``(model,
    history, records)`` as it does, the same on every process.

    Every process builds the run with :func:`~posgeom_utils.finetune.prepare_finetune`
    and trains it with :func:`~posgeom_utils.training.train_classifier`: all draw the
    same global batches, each computes the logits of its share of every batch (training
    and evaluation) and gathers the others', and the gradients are summed over the
    processes before each step. ``accelerator`` is created if None (on the CPU when
    ``config.device`` is); ``config.amp`` decides autocast, as in ``finetune``.
    ``config.batch_size`` is per process: ``P`` processes with batch ``B / P`` follow
    the single-process run with batch ``B`` to rounding (with dropout, in distribution:
    each process draws its own masks); one process gives exactly ``finetune``.
    ``config.checkpoint_dir`` is not supported. Chapter: *Beyond one machine*."""
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
        net = model if processes == 1 else _sharded(model, rank, processes)
        with _quiet_unless_main(acc), _summed_gradients(model, processes):
            yield net, settings
        acc.wait_for_everyone()

    options = dict(max_len=max_len, record_every=record_every, n_record=n_record)
    data = (texts_train, y_train, texts_eval, y_eval)
    return finetune(
        model_name, *data, config, num_classes=num_classes, wrap=wrap, **options
    )


# ------------------------------------------------------------------------- command line


def _file_corpus(path: str, flag: str, labelled: bool, split: str) -> Corpus:
    """The texts of ``path``: one a line, or ``text<TAB>label`` lines (a header is
    skipped)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(f"{flag} {path!r} is not a file")
    texts, labels = [], []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line == "sentence\tlabel":
            continue
        text, tab, label = line.rpartition("\t") if labelled else (line, "\t", "-1")
        if not tab or not label.strip().lstrip("-").isdigit():
            raise ValueError(
                f"{flag} {path!r} line {number} is not 'text<TAB>integer label'"
            )
        texts.append(text.strip())
        labels.append(int(label))
    if not texts:
        raise ValueError(f"{flag} {path!r} holds no texts")
    return Corpus("file", split, texts, np.asarray(labels, dtype=np.int64), str(path))


def _corpus(args: argparse.Namespace, labelled: bool) -> tuple[Corpus, dict]:
    if (args.dataset is None) == (args.texts is None):
        raise ValueError(
            "pass exactly one of --dataset (sst2 or imdb) and --texts FILE"
        )
    split = args.split or "train"
    if args.dataset is not None:
        corpus = load_corpus(args.dataset, split, data_dir=args.data_dir)
    else:
        corpus = _file_corpus(args.texts, "--texts", labelled, split)
    corpus = corpus.sample(args.sample, seed=args.seed)
    info = {"dataset": corpus.name, "split": corpus.split, "source": corpus.source}
    info.update(num_texts=len(corpus), sample=args.sample, sample_seed=args.seed)
    return corpus, info


def _provenance(accelerator: Any, args: argparse.Namespace, **extra: Any) -> dict:
    import accelerate
    import torch
    import transformers

    from ..models import model_label

    device, versions = accelerator.device, (torch, transformers, accelerate)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    run = {
        "command": args.command,
        "processes": accelerator.num_processes,
        "device": str(device),
    }
    run.update(distributed_type=str(accelerator.distributed_type), device_name=name)
    versions = {module.__name__: module.__version__ for module in versions}
    return {**run, "model": model_label(args.model), "versions": versions, **extra}


def _probe(args: argparse.Namespace, accelerator: Any) -> None:
    corpus, info = _corpus(args, labelled=False)
    special = not args.no_special_tokens
    try:
        options = (args.batch_size, special, args.centre, accelerator)
        result = data_parallel_hidden_means(
            args.model, None, corpus.texts, args.positions, *options
        )
    except ValueError as exc:  # name the flag the user typed
        flag = {"n": "--positions", "batch_size": "--batch-size"}.get(
            str(exc).split(" ")[0]
        )
        raise ValueError(f"{flag}: {exc}" if flag else str(exc)) from exc
    settings = dict(n=args.positions, batch_size=args.batch_size, centre=args.centre)
    provenance = _provenance(
        accelerator, args, texts=info, special_tokens=special, **settings
    )
    if accelerator.is_main_process:
        out, blob = Path(args.out), np.array(json.dumps(provenance, sort_keys=True))
        arrays = dict(means=result.means, counts=result.counts, provenance=blob)
        atomic_write(out, lambda tmp: np.savez(tmp, **arrays))
        write_json(out.with_suffix(".json"), provenance)
        print(f"wrote {out} and {out.with_suffix('.json')}: means {result.means.shape}")


def _bf16(accelerator: Any) -> bool:
    """Whether ``accelerate launch --mixed_precision`` asked for bf16 autocast (the
    command line's switch; from Python, ``config.amp`` decides)."""
    precision = str(getattr(accelerator, "mixed_precision", "no"))
    if precision not in ("no", "bf16"):
        raise ValueError(
            f"--mixed_precision {precision}: fine-tuning autocasts to bf16 or not at "
            "all (pass bf16 or no)"
        )
    return precision == "bf16"


def _finetune(args: argparse.Namespace, accelerator: Any) -> None:
    import torch

    from ..finetune import save_records
    from ..training import TrainConfig

    if (args.texts is None) != (args.eval_texts is None):
        raise ValueError(
            "--texts needs --eval-texts FILE (same format), and the other way round"
        )
    train, info = _corpus(args, labelled=True)
    if args.eval_texts is not None:
        evaluation = _file_corpus(args.eval_texts, "--eval-texts", True, "eval")
    else:
        split = "validation" if args.dataset == "sst2" else "test"
        evaluation = load_corpus(args.dataset, split, data_dir=args.data_dir)
        evaluation = evaluation.sample(args.eval_sample, seed=args.seed)
    settings = dict(
        steps=args.steps, lr=args.lr, weight_decay=args.weight_decay, seed=args.seed
    )
    settings.update(optimizer=args.optimizer, amp=_bf16(accelerator))
    config = TrainConfig(
        batch_size=args.batch_size, eval_every=args.eval_every, **settings
    )
    texts = (train.texts, train.labels, evaluation.texts, evaluation.labels)
    model, history, records = data_parallel_finetune(
        args.model, *texts, config, max_len=args.max_len, accelerator=accelerator
    )
    settings.update(max_len=args.max_len, per_process_batch=args.batch_size)
    settings["global_batch"] = args.batch_size * accelerator.num_processes
    evaluated = {"source": evaluation.source, "num_texts": len(evaluation)}
    provenance = _provenance(
        accelerator, args, texts=info, eval_texts=evaluated, **settings
    )
    if accelerator.is_main_process:
        out = Path(args.out)
        write_json(out, {"provenance": provenance, "history": asdict(history)})
        save_records(out.with_suffix(".npz"), dict(records))
        if args.save_weights is not None:
            state = {k: v.cpu() for k, v in model.state_dict().items()}
            atomic_write(Path(args.save_weights), lambda tmp: torch.save(state, tmp))
        accuracy = history.final_accuracy()
        print(
            f"wrote {out} (history) and {out.with_suffix('.npz')} (position tables); "
            f"final eval accuracy {accuracy:.3f}"
        )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m posgeom_utils.scale.data_parallel",
        description="Data-parallel per-layer probes and fine-tuning ('Beyond one "
        "machine'). "
        "Run under `accelerate launch` or `torchrun` for several processes; `python "
        "-m` runs one.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    probe, finetune = commands.add_parser("probe"), commands.add_parser("finetune")
    for p in (probe, finetune):
        p.add_argument(
            "--model", help="hub id or local folder (default: all-MiniLM-L6-v2)"
        )
        p.add_argument("--dataset", choices=["sst2", "imdb"])
        p.add_argument("--split", help="corpus split (default: train)")
        p.add_argument("--data-dir", help="default: $POSGEOM_DATA_DIR")
        form = "one text a line" if p is probe else "'text<TAB>label' lines"
        p.add_argument("--texts", help=f"a text file instead of --dataset: {form}")
        p.add_argument(
            "--sample", type=int, help="a seeded random subset of this many texts"
        )
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--batch-size", type=int, default=64, help="per process")
        p.add_argument("--out", required=True, help="output file (written atomically)")
    # not --n: torchrun and accelerate launch would read it as one of their own flags
    probe.add_argument(
        "--positions", type=int, required=True, help="number of positions (n)"
    )
    probe.add_argument("--centre", choices=list(CENTRES), default="none")
    probe.add_argument("--no-special-tokens", action="store_true")
    finetune.add_argument("--eval-texts", help="with --texts: the eval file")
    finetune.add_argument("--eval-sample", type=int)
    finetune.add_argument("--steps", type=int, default=300)
    finetune.add_argument("--lr", type=float, default=2e-5)
    finetune.add_argument("--weight-decay", type=float, default=0.0)
    finetune.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    finetune.add_argument("--eval-every", type=int, default=50)
    finetune.add_argument("--max-len", type=int, default=64)
    finetune.add_argument("--save-weights", help="also save the state dict")
    return parser


def main(argv: Sequence[str] | None = None, accelerator: Any = None) -> int:
    """The command line: ``probe`` writes ``--out`` (``.npz``: means, counts,
    provenance) and a ``.json`` of provenance beside it; ``finetune`` writes ``--out``
    (JSON: provenance and history) and a ``.npz`` of position tables beside it. Run it
    with ``accelerate launch [--num_processes P] -m posgeom_utils.scale.data_parallel
    ...`` or ``torchrun --nproc_per_node P -m ...``; bad input exits with status 2 and a
    message naming the parameter. Chapter: *Beyond one machine*."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        accelerator = _get_accelerator(accelerator)
        (_probe if args.command == "probe" else _finetune)(args, accelerator)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        parser.error(str(exc))
    accelerator.wait_for_everyone()
    return 0


if __name__ == "__main__":
    sys.exit(main())

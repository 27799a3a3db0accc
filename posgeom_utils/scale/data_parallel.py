"""Per-layer probes and fine-tuning, data-parallel under ``accelerate launch`` or
``torchrun``: thin wrappers over the single-process functions, and a command line
(``python -m posgeom_utils.scale.data_parallel probe|finetune``). Chapter: *Beyond one
machine*."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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
    """``cpu`` or ``cuda:k``, as :func:`~posgeom_utils.models.select_device` names
    it."""
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
) -> LayerMeans:
    """:func:`~posgeom_utils.probes.positional_hidden_means` (``model``: an encoder with
    its ``tokenizer``, a model name or folder, or None for all-MiniLM-L6-v2), each
    process of ``accelerator`` (created if None) probing its :func:`batch_share` with
    ``batch_size`` per process. Every process returns the merged result, the
    single-process one to float64 rounding with ``params["processes"]`` added.
    Chapter: *Beyond one machine*."""
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
    share = texts
    if processes > 1:
        lengths = token_lengths(tokenizer, texts, n, special_tokens)
        share = [texts[i] for i in batch_share(lengths, batch_size, rank, processes)]
    options = (n, batch_size, special_tokens, _device(accelerator))
    result = None
    if share:  # a process may get no batch
        with _quiet_unless_main(accelerator):
            result = positional_hidden_means(model, tokenizer, share, *options)
    if processes > 1:  # merge the uncentred means of the processes that had batches
        import torch.distributed as dist

        parts: list[LayerMeans | None] = [None] * processes
        dist.all_gather_object(parts, result)
        result = merge_layer_means([part for part in parts if part is not None])
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
    """:func:`~posgeom_utils.finetune.finetune` data-parallel (no ``checkpoint_dir``),
    the same ``(model, history, records)`` on every process; ``accelerator`` is created
    if None. ``config.batch_size`` is per process: ``P`` processes with batch ``B / P``
    follow the single-process run with batch ``B`` to rounding. Chapter: *Beyond one
    machine*."""
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

    # finetune's own arguments, handed on unchanged
    data = (model_name, texts_train, y_train, texts_eval, y_eval, config)
    options = {"max_len": max_len, "record_every": record_every, "n_record": n_record}
    return finetune(*data, num_classes=num_classes, wrap=wrap, **options)


# ------------------------------------------------------------------------- command line


def _file_corpus(path: str, flag: str, labelled: bool, split: str) -> Corpus:
    """One text a line, or ``text<TAB>label`` lines (a header is skipped)."""
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


def _corpus(args: argparse.Namespace, labelled: bool) -> Corpus:
    if (args.dataset is None) == (args.texts is None):
        raise ValueError(
            "pass exactly one of --dataset (sst2 or imdb) and --texts FILE"
        )
    split = args.split or "train"
    if args.dataset is not None:
        corpus = load_corpus(args.dataset, split, data_dir=args.data_dir)
    else:
        corpus = _file_corpus(args.texts, "--texts", labelled, split)
    return corpus.sample(args.sample, seed=args.seed)


def _provenance(acc: Any, args: argparse.Namespace, corpus: Corpus, **extra) -> dict:
    import accelerate
    import torch
    import transformers

    from ..models import model_label

    device, modules = acc.device, (torch, transformers, accelerate)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    texts = {"dataset": corpus.name, "split": corpus.split, "source": corpus.source}
    texts.update(num_texts=len(corpus), sample=args.sample, sample_seed=args.seed)
    run = {"command": args.command, "processes": acc.num_processes, "texts": texts}
    run.update(device=str(device), distributed_type=str(acc.distributed_type))
    run.update(device_name=name, model=model_label(args.model))
    versions = {module.__name__: module.__version__ for module in modules}
    return {**run, "versions": versions, **extra}


def _probe(args: argparse.Namespace, acc: Any) -> None:
    corpus = _corpus(args, labelled=False)
    special = not args.no_special_tokens
    options = (args.batch_size, special, args.centre, acc)
    try:
        result = data_parallel_hidden_means(
            args.model, None, corpus.texts, args.positions, *options
        )
    except ValueError as exc:  # name the flag the user typed
        flags = {"n": "--positions", "batch_size": "--batch-size"}
        flag = flags.get(str(exc).split(" ")[0])
        raise ValueError(f"{flag}: {exc}" if flag else str(exc)) from exc
    settings = {
        "n": args.positions,
        "batch_size": args.batch_size,
        "centre": args.centre,
    }
    provenance = _provenance(acc, args, corpus, special_tokens=special, **settings)
    if acc.is_main_process:
        out, blob = Path(args.out), np.array(json.dumps(provenance, sort_keys=True))
        arrays = {"means": result.means, "counts": result.counts, "provenance": blob}
        atomic_write(out, lambda tmp: np.savez(tmp, **arrays))
        write_json(out.with_suffix(".json"), provenance)
        print(f"wrote {out} and {out.with_suffix('.json')}: means {result.means.shape}")


def _finetune(args: argparse.Namespace, acc: Any) -> None:
    import torch

    from ..finetune import save_records
    from ..training import TrainConfig

    if (args.texts is None) != (args.eval_texts is None):
        raise ValueError(
            "--texts needs --eval-texts FILE (same format), and the other way round"
        )
    train = _corpus(args, labelled=True)
    if args.eval_texts is not None:
        evaluation = _file_corpus(args.eval_texts, "--eval-texts", True, "eval")
    else:
        split = "validation" if args.dataset == "sst2" else "test"
        evaluation = load_corpus(args.dataset, split, data_dir=args.data_dir)
        evaluation = evaluation.sample(args.eval_sample, seed=args.seed)
    # `accelerate launch --mixed_precision` is the command line's autocast switch
    precision = str(getattr(acc, "mixed_precision", "no"))
    if precision not in ("no", "bf16"):
        raise ValueError(
            f"--mixed_precision {precision}: fine-tuning autocasts to bf16 or not at "
            "all (pass bf16 or no)"
        )
    keys = ("steps", "lr", "weight_decay", "seed", "optimizer")
    settings = dict({k: getattr(args, k) for k in keys}, amp=precision == "bf16")
    config = TrainConfig(
        batch_size=args.batch_size, eval_every=args.eval_every, **settings
    )
    texts = (train.texts, train.labels, evaluation.texts, evaluation.labels)
    model, history, records = data_parallel_finetune(
        args.model, *texts, config, max_len=args.max_len, accelerator=acc
    )
    settings.update(max_len=args.max_len, per_process_batch=args.batch_size)
    settings["global_batch"] = args.batch_size * acc.num_processes
    evaluated = {"source": evaluation.source, "num_texts": len(evaluation)}
    provenance = _provenance(acc, args, train, eval_texts=evaluated, **settings)
    if acc.is_main_process:
        out = Path(args.out)
        write_json(out, {"provenance": provenance, "history": asdict(history)})
        save_records(out.with_suffix(".npz"), dict(records))
        if args.save_weights is not None:
            state = {k: v.cpu() for k, v in model.state_dict().items()}
            atomic_write(Path(args.save_weights), lambda tmp: torch.save(state, tmp))
        print(
            f"wrote {out} (history) and {out.with_suffix('.npz')} (position tables); "
            f"final eval accuracy {history.final_accuracy():.3f}"
        )


# (flag, add_argument options) in --help order: common, then per command
_COMMON = [
    ("--model", {"help": "hub id or local folder (default: all-MiniLM-L6-v2)"}),
    ("--dataset", {"choices": ["sst2", "imdb"]}),
    ("--split", {"help": "corpus split (default: train)"}),
    ("--data-dir", {"help": "default: $POSGEOM_DATA_DIR"}),
    ("--texts", {"help": "a text file instead of --dataset: {form}"}),
    ("--sample", {"type": int, "help": "a seeded random subset of this many texts"}),
    ("--seed", {"type": int, "default": 0}),
    ("--batch-size", {"type": int, "default": 64, "help": "per process"}),
    ("--out", {"required": True, "help": "output file (written atomically)"}),
]
# not --n: torchrun and accelerate launch would read it as one of their own flags
_PROBE = [
    ("--positions", {"type": int, "required": True, "help": "number of positions (n)"}),
    ("--centre", {"choices": list(CENTRES), "default": "none"}),
    ("--no-special-tokens", {"action": "store_true"}),
]
_FINETUNE = [
    ("--eval-texts", {"help": "with --texts: the eval file"}),
    ("--eval-sample", {"type": int}),
    ("--steps", {"type": int, "default": 300}),
    ("--lr", {"type": float, "default": 2e-5}),
    ("--weight-decay", {"type": float, "default": 0.0}),
    ("--optimizer", {"choices": ["adamw", "sgd"], "default": "adamw"}),
    ("--eval-every", {"type": int, "default": 50}),
    ("--max-len", {"type": int, "default": 64}),
    ("--save-weights", {"help": "also save the state dict"}),
]


def main(argv: Sequence[str] | None = None, accelerator: Any = None) -> int:
    """The command line: ``probe`` writes ``--out`` (``.npz``) and its provenance
    (``.json``), ``finetune`` ``--out`` (JSON) and position tables (``.npz``); bad input
    exits with status 2. Chapter: *Beyond one machine*."""
    parser = argparse.ArgumentParser(
        prog="python -m posgeom_utils.scale.data_parallel",
        description="Data-parallel per-layer probes and fine-tuning ('Beyond one "
        "machine'). Run under `accelerate launch` or `torchrun` for several "
        "processes; `python -m` runs one.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for command, options in {"probe": _PROBE, "finetune": _FINETUNE}.items():
        sub = commands.add_parser(command)
        form = "one text a line" if command == "probe" else "'text<TAB>label' lines"
        for flag, kwargs in _COMMON + options:
            if flag == "--texts":
                kwargs = {"help": kwargs["help"].format(form=form)}
            sub.add_argument(flag, **kwargs)
    args = parser.parse_args(argv)
    try:
        accelerator = _get_accelerator(accelerator)
        (_probe if args.command == "probe" else _finetune)(args, accelerator)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        parser.error(str(exc))
    accelerator.wait_for_everyone()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

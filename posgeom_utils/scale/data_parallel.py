"""Per-layer probes and fine-tuning, data-parallel under ``accelerate launch`` or
``torchrun``.

Chapter: *Beyond one machine*. Each function shares the work between the processes, runs
the single-process pieces of :mod:`posgeom_utils.probes` and
:mod:`posgeom_utils.finetune` on its share and all-reduces: one process returns what the
single-process function returns, several the same quantity to float tolerance. ``python
-m posgeom_utils.scale.data_parallel probe|finetune ...`` is the launchable entry point;
rank 0 writes the outputs atomically with their provenance."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cache import atomic_write, write_json
from ..checks import integer
from ..corpus import Corpus, check_texts, load_corpus
from ..probes import (
    CENTRES,
    LayerMeans,
    check_probe,
    layer_means,
    layer_sums,
    probe_params,
)
from ..probes import token_lengths

if TYPE_CHECKING:  # torch is imported when needed: `--help` stays quick
    from ..finetune import FinetuneSetup, PretrainedClassifier
    from ..training import History, TrainConfig

__all__ = [
    "batch_share",
    "data_parallel_finetune",
    "data_parallel_hidden_means",
    "main",
]


def _get_accelerator(accelerator: Any, cpu: bool = False, bf16: bool = False) -> Any:
    """``accelerator``, or a new ``Accelerator``: on CPU when asked or when no GPU is
    visible (else Accelerate runs each process of a CPU-only ``torchrun`` alone), bf16
    when asked (else what ``accelerate launch --mixed_precision`` says)."""
    if accelerator is None:
        import torch
        from accelerate import Accelerator

        cpu = cpu or not torch.cuda.is_available()
        accelerator = Accelerator(cpu=cpu, mixed_precision="bf16" if bf16 else None)
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


def _all_sum(accelerator: Any, sums: Any, counts: Any, n: int) -> tuple[Any, Any]:
    """The sums and counts of all processes added; a process without batches learns the
    shape."""
    import torch

    shape = [0, 0] if sums is None else [sums.shape[0], sums.shape[2]]
    shapes = accelerator.gather(torch.tensor(shape, device=counts.device))
    layers, width = shapes.reshape(-1, 2).max(0).values.tolist()
    if sums is None:
        sums = torch.zeros(
            (layers, n, width), dtype=torch.float64, device=counts.device
        )
    return accelerator.reduce(sums, "sum"), accelerator.reduce(counts, "sum")


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
    (None: the packaged all-MiniLM-L6-v2). ``batch_size`` is per process. One process
    gives exactly the single-process result, several agree to float64 rounding (the same
    float32 forward passes, float64 sums added in another order).
    ``params["processes"]`` says how many took part. Chapter: *Beyond one machine*."""
    from ..models import load_model, load_tokenizer

    texts = check_texts(texts)
    accelerator = _get_accelerator(accelerator)
    device, processes = accelerator.device, accelerator.num_processes
    if model is None or isinstance(model, (str, Path)):
        tokenizer = load_tokenizer(model) if tokenizer is None else tokenizer
        model = load_model(model, device="cpu")
    elif tokenizer is None:
        raise ValueError(
            "tokenizer is None but model is a model object: pass its tokenizer"
        )
    n, batch_size = check_probe(model, n, batch_size, centre)
    lengths = token_lengths(tokenizer, texts, n, special_tokens)
    share = batch_share(lengths, batch_size, accelerator.process_index, processes)
    starts = range(0, len(share), batch_size)
    batches = [[texts[i] for i in share[s : s + batch_size]] for s in starts]
    sums, counts = layer_sums(
        model.to(device), tokenizer, batches, n, special_tokens, device
    )
    if processes > 1:
        sums, counts = _all_sum(accelerator, sums, counts, n)
    params = dict(
        probe_params(model, texts, n, batch_size, special_tokens), processes=processes
    )
    result = layer_means(sums, counts, params)
    return result.centred() if centre == "global" else result


def _unused_parameters(model: Any, X: Any) -> set[str]:
    """Names of the trainable parameters that get no gradient (e.g. BERT's pooler),
    which DDP needs frozen: one eval-mode forward pass on one row, gradients cleared."""
    import torch

    model.eval()
    with torch.enable_grad():
        model(X[:1]).float().sum().backward()
    unused = {
        name
        for name, p in model.named_parameters()
        if p.requires_grad and p.grad is None
    }
    model.zero_grad(set_to_none=True)
    return unused


def _metrics(
    model: Any, setup: FinetuneSetup, accelerator: Any, running: list
) -> list[float]:
    """``[train loss, eval loss, eval accuracy]``: each process evaluates its share of
    the eval texts with :func:`~posgeom_utils.training.evaluate`, and the sums are
    all-reduced."""
    import torch

    from ..training import evaluate

    processes, rank = accelerator.num_processes, accelerator.process_index
    X, y = setup.X_eval[rank::processes], setup.y_eval[rank::processes]
    loss, accuracy = evaluate(model, X, y) if len(X) else (0.0, 0.0)
    if processes == 1:
        return [float(np.mean(running)), loss, accuracy]
    sums = [float(np.mean(running)), loss * len(X), round(accuracy * len(X)), len(X)]
    sums = torch.tensor(sums, dtype=torch.float64, device=accelerator.device)
    train, loss, correct, scored = accelerator.reduce(sums, "sum").tolist()
    return [train / processes, loss / scored, correct / scored]


def _train(
    setup: FinetuneSetup, config: TrainConfig, accelerator: Any
) -> tuple[History, list]:
    """The loop of :func:`~posgeom_utils.training.train_classifier` on prepared model,
    optimiser and loader: seed, optimiser, one draw of the global batch per step,
    evaluation and a record of the position table every ``eval_every`` steps."""
    import torch
    from torch.utils.data import DataLoader, Subset, TensorDataset

    from ..seeding import seed_everything
    from ..settings import progress, progress_enabled
    from ..training import History

    model, processes = setup.model, accelerator.num_processes
    unused = _unused_parameters(model, setup.X_train)
    for name, p in model.named_parameters():
        p.requires_grad_(p.requires_grad and name not in unused)
    seed_everything(config.seed)
    model.train()
    optimiser = torch.optim.SGD if config.optimizer == "sgd" else torch.optim.AdamW
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = optimiser(params, lr=config.lr, weight_decay=config.weight_decay)
    generator, batch = (
        torch.Generator().manual_seed(config.seed),
        config.batch_size * processes,
    )
    size = len(setup.X_train)
    draws = [
        torch.randint(size, (batch,), generator=generator) for _ in range(config.steps)
    ]
    data = Subset(
        TensorDataset(setup.X_train, setup.y_train), torch.cat(draws).tolist()
    )
    loader = DataLoader(
        data, batch_size=batch if accelerator.split_batches else config.batch_size
    )
    wrapped, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    history, running, records = History(), [], {0: model.position_table(setup.n_record)}
    quiet = not (progress_enabled() and accelerator.is_main_process)
    steps = progress(
        range(1, config.steps + 1), desc="training (data-parallel)", disable=quiet
    )
    for step, (xb, yb) in zip(steps, loader):
        loss = torch.nn.functional.cross_entropy(wrapped(xb).float(), yb)
        optimizer.zero_grad(set_to_none=True)
        accelerator.backward(loss)
        optimizer.step()
        running.append(loss.item())
        if step % config.eval_every == 0 or step == config.steps:
            train_loss, eval_loss, accuracy = _metrics(
                model, setup, accelerator, running
            )
            history.step.append(step)
            history.train_loss.append(train_loss)
            history.eval_loss.append(eval_loss)
            history.eval_accuracy.append(accuracy)
            running, records[step] = [], model.position_table(setup.n_record)
    return history, sorted(records.items())


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

    ``accelerator`` is created if None (CPU when ``config.device`` is, bf16 autocast
    where :func:`~posgeom_utils.training.amp_enabled` says so). ``config.batch_size`` is
    per process: ``P`` processes with batch ``B / P`` follow the single-process run with
    batch ``B`` to rounding (with dropout, in distribution: each process draws its own
    masks); one process gives exactly ``finetune``. ``config.checkpoint_dir`` is not
    supported. Chapter: *Beyond one machine*."""
    import torch

    from ..finetune import prepare_finetune
    from ..models import select_device
    from ..training import amp_enabled

    if getattr(config, "checkpoint_dir", None) is not None:
        raise ValueError(
            "data_parallel_finetune does not checkpoint: pass checkpoint_dir=None"
        )
    options = dict(max_len=max_len, record_every=record_every, n_record=n_record)
    data = (texts_train, y_train, texts_eval, y_eval)
    setup = prepare_finetune(
        model_name, *data, config, num_classes=num_classes, **options
    )
    device = select_device(setup.config.device)
    cpu, bf16 = device.type == "cpu", amp_enabled(setup.config.amp, device)
    accelerator = _get_accelerator(accelerator, cpu, bf16)
    # rank 0 draws the single-process dropout masks; the others draw their own
    setup.model.seed = (
        setup.config.seed + accelerator.process_index * 1_000_000_007
    ) % 2**63
    threads = torch.get_num_threads()
    torch.set_num_threads(setup.config.threads or threads)
    try:
        history, records = _train(setup, setup.config, accelerator)
    finally:
        torch.set_num_threads(threads)
    accelerator.wait_for_everyone()
    return setup.model, history, records


# ------------------------------------------------------------------------------ command line


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
    settings["optimizer"] = args.optimizer
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

"""Per-layer probes and fine-tuning, data-parallel under ``accelerate launch`` or ``torchrun``.

Chapter: *Beyond one machine*. Each function shards the work, runs the single-process pieces of
:mod:`posgeom_utils.probes` and :mod:`posgeom_utils.finetune` on its share, and all-reduces: with one
process it returns what the single-process function returns, with several the same quantity to float
tolerance.

- :func:`data_parallel_hidden_means`: process ``r`` of ``P`` probes the length-sorted batches
  ``r, r + P, ...`` (:func:`batch_share`) with :func:`~posgeom_utils.probes.layer_sums`; the float64
  per-layer sums and counts are all-reduced.
- :func:`data_parallel_finetune`: the classifier of :func:`~posgeom_utils.finetune.prepare_finetune`,
  trained with model, optimiser and data loader wrapped by ``Accelerator.prepare``;
  ``config.batch_size`` is the batch of one process, and each step's global batch is the one the
  single-process trainer draws for ``batch_size = global batch``, split evenly between the processes.
- ``python -m posgeom_utils.scale.data_parallel probe|finetune ...``: the launchable entry point;
  rank 0 writes the outputs atomically with their provenance.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cache import atomic_write, write_json
from ..checks import integer
from ..corpus import Corpus, check_texts, load_corpus
from ..probes import CENTRES, LayerMeans, check_probe, layer_means, layer_sums, probe_params
from ..probes import token_lengths

if TYPE_CHECKING:  # torch is imported when needed: `--help` stays quick
    from ..finetune import FinetuneSetup, PretrainedClassifier
    from ..training import History, TrainConfig

__all__ = ["batch_share", "data_parallel_finetune", "data_parallel_hidden_means", "main"]


def _get_accelerator(accelerator: Any, cpu: bool = False, bf16: bool = False) -> Any:
    """``accelerator``, or a new ``Accelerator`` (on CPU when asked or when no GPU is visible:
    without ``cpu=True`` Accelerate would run each process of a CPU-only ``torchrun`` alone)."""
    if accelerator is None:
        import torch
        from accelerate import Accelerator

        # mixed_precision None: what `accelerate launch --mixed_precision` (or its config) says
        bf16 = "bf16" if bf16 else None
        accelerator = Accelerator(cpu=cpu or not torch.cuda.is_available(), mixed_precision=bf16)
    elif not hasattr(accelerator, "num_processes") or not hasattr(accelerator, "reduce"):
        raise TypeError(
            f"accelerator must be an accelerate.Accelerator, got {type(accelerator).__name__}: "
            "pass accelerator=None to create one"
        )
    world = os.environ.get("WORLD_SIZE", "1")
    if world.isdigit() and int(world) > 1 and accelerator.num_processes == 1:
        raise ValueError(
            f"launched with WORLD_SIZE={world}, but the accelerator runs one process (each process "
            "would do all the work alone): on a machine without GPUs create it with "
            "Accelerator(cpu=True), or pass accelerator=None"
        )
    return accelerator


def _device(accelerator: Any) -> str:
    device = accelerator.device
    if device.type not in ("cpu", "cuda"):
        raise ValueError(
            f"the accelerator runs on {device}, but the probes run on 'cpu' or 'cuda' only: "
            "launch on CPUs or NVIDIA GPUs"
        )
    if device.type == "cpu":
        return "cpu"  # multi-CPU runs report cpu:<rank>, which means the same
    return "cuda" if device.index is None else f"cuda:{device.index}"


def batch_share(
    lengths: Sequence[int] | np.ndarray, batch_size: int, rank: int, processes: int
) -> np.ndarray:
    """Indices of the texts that process ``rank`` of ``processes`` probes, in probing order.

    The texts are sorted (stably) by their tokenized ``lengths`` and cut into batches of
    ``batch_size`` as :func:`~posgeom_utils.probes.positional_hidden_means` cuts them; the process
    takes batches ``rank, rank + processes, ...``. Only the last batch can be short, and it is the
    last of its process, so cutting the share into batches again gives the same batches.
    Chapter: *Beyond one machine*.
    """
    batch_size, processes = integer(batch_size, "batch_size"), integer(processes, "processes")
    rank = integer(rank, "rank", 0, processes - 1)
    order = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable")
    starts = range(rank * batch_size, len(order), processes * batch_size)
    parts = [order[s : s + batch_size] for s in starts]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _model_and_tokenizer(model: Any, tokenizer: Any, device: str) -> tuple[Any, Any]:
    from ..models import load_model, load_tokenizer

    if model is None or isinstance(model, (str, Path)):
        tokenizer = load_tokenizer(model) if tokenizer is None else tokenizer
        return load_model(model, device=device), tokenizer
    if tokenizer is None:
        raise ValueError(
            "tokenizer is None but model is a model object: pass its tokenizer, or pass the "
            "model's name or folder as model to load both"
        )
    return model.to(device), tokenizer


def _all_sum(accelerator: Any, sums: Any, counts: Any, n: int) -> tuple[Any, Any]:
    """The sums and counts of all processes added; a process without batches learns the shape."""
    import torch

    shape = [0, 0] if sums is None else [sums.shape[0], sums.shape[2]]
    shapes = accelerator.gather(torch.tensor(shape, device=counts.device))
    layers, width = shapes.reshape(-1, 2).max(0).values.tolist()
    if sums is None:
        sums = torch.zeros((layers, n, width), dtype=torch.float64, device=counts.device)
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
    """:func:`~posgeom_utils.probes.positional_hidden_means` with the batches shared between the
    processes of ``accelerator`` (created if None); every process returns the same result.

    ``model`` is an encoder (then pass its ``tokenizer``) or a model name or folder (None: the
    packaged all-MiniLM-L6-v2). ``batch_size`` is per process and forward pass. One process gives
    exactly the single-process result; several agree to float64 rounding (the same float32 forward
    passes, float64 sums added in another order). ``params["processes"]`` says how many took part.
    Chapter: *Beyond one machine*.
    """
    texts = check_texts(texts)
    accelerator = _get_accelerator(accelerator)
    device = _device(accelerator)
    model, tokenizer = _model_and_tokenizer(model, tokenizer, device)
    n, batch_size = check_probe(model, n, batch_size, centre)
    processes = accelerator.num_processes
    lengths = token_lengths(tokenizer, texts, n, special_tokens)
    share = batch_share(lengths, batch_size, accelerator.process_index, processes)
    batches = [
        [texts[i] for i in share[s : s + batch_size]] for s in range(0, len(share), batch_size)
    ]
    sums, counts = layer_sums(model, tokenizer, batches, n, special_tokens, device)
    if processes > 1:
        sums, counts = _all_sum(accelerator, sums, counts, n)
    params = dict(probe_params(model, texts, n, batch_size, special_tokens), processes=processes)
    result = layer_means(sums, counts, params)
    return result.centred() if centre == "global" else result


def _unused_parameters(model: Any, X: Any) -> set[str]:
    """Names of the trainable parameters that get no gradient (e.g. BERT's pooler), which DDP needs
    frozen: one eval-mode forward pass on one row, gradients cleared."""
    import torch

    model.eval()
    with torch.enable_grad():
        model(X[:1]).float().sum().backward()
    unused = {name for name, p in model.named_parameters() if p.requires_grad and p.grad is None}
    model.zero_grad(set_to_none=True)
    return unused


def _metrics(
    model: Any, setup: FinetuneSetup, accelerator: Any, running: list[float]
) -> list[float]:
    """``[train loss, eval loss, eval accuracy]``: each process evaluates its share of the eval
    texts with :func:`~posgeom_utils.training.evaluate` and the sums are all-reduced."""
    import torch

    from ..training import evaluate

    processes, rank = accelerator.num_processes, accelerator.process_index
    X, y = setup.X_eval[rank::processes], setup.y_eval[rank::processes]
    loss, accuracy = evaluate(model, X, y) if len(X) else (0.0, 0.0)
    train = float(np.mean(running))
    if processes == 1:
        return [train, loss, accuracy]
    sums = [train, loss * len(X), round(accuracy * len(X)), len(X)]
    sums = torch.tensor(sums, dtype=torch.float64, device=accelerator.device)
    train, loss, correct, scored = accelerator.reduce(sums, "sum").tolist()
    return [train / processes, loss / scored, correct / scored]


def _train(
    setup: FinetuneSetup, config: TrainConfig, accelerator: Any
) -> tuple[History, list[tuple[int, np.ndarray]]]:
    """The data-parallel training loop (as :func:`~posgeom_utils.training.train_classifier`: seed,
    optimiser, one draw of the global batch per step, evaluation every ``eval_every`` steps)."""
    import torch
    import torch.nn.functional as F
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
    generator, batch = torch.Generator().manual_seed(config.seed), config.batch_size * processes
    draws = [
        torch.randint(len(setup.X_train), (batch,), generator=generator)
        for _ in range(config.steps)
    ]
    data = Subset(TensorDataset(setup.X_train, setup.y_train), torch.cat(draws).tolist())
    loader = DataLoader(data, batch_size=batch if accelerator.split_batches else config.batch_size)
    wrapped, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    records, history, running = {0: model.position_table(setup.n_record)}, History(), []
    quiet = not (progress_enabled() and accelerator.is_main_process)
    steps = progress(range(1, config.steps + 1), desc="training (data-parallel)", disable=quiet)
    for step, (xb, yb) in zip(steps, loader):
        loss = F.cross_entropy(wrapped(xb).float(), yb)
        optimizer.zero_grad(set_to_none=True)
        accelerator.backward(loss)
        optimizer.step()
        running.append(loss.item())
        if step % config.eval_every == 0 or step == config.steps:
            train_loss, eval_loss, accuracy = _metrics(model, setup, accelerator, running)
            history.step.append(step)
            history.train_loss.append(train_loss)
            history.eval_loss.append(eval_loss)
            history.eval_accuracy.append(accuracy)
            running, records[step] = [], model.position_table(setup.n_record)
    return history, [(s, records[s]) for s in sorted(records)]


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
    """:func:`~posgeom_utils.finetune.finetune` data-parallel; returns ``(model, history, records)``
    as it does, the same on every process.

    ``accelerator`` is created if None (CPU when ``config.device`` is, bf16 autocast where
    :func:`~posgeom_utils.training.amp_enabled` says so). ``config.batch_size`` is per process: ``P``
    processes with batch ``B / P`` follow the single-process run with batch ``B`` to float rounding
    (with dropout, in distribution: each process draws its own masks); one process gives exactly
    ``finetune``. ``config.checkpoint_dir`` is not supported. Chapter: *Beyond one machine*.
    """
    import torch

    from ..finetune import finetune_config, prepare_finetune
    from ..models import select_device
    from ..training import amp_enabled

    config = finetune_config(config, record_every)
    if config.checkpoint_dir is not None:
        raise ValueError(
            "config.checkpoint_dir is not supported by data_parallel_finetune: pass "
            "checkpoint_dir=None (or use finetune for a resumable single-process run)"
        )
    device = select_device(config.device)
    accelerator = _get_accelerator(
        accelerator, cpu=device.type == "cpu", bf16=amp_enabled(config.amp, device)
    )
    setup = prepare_finetune(
        model_name,
        texts_train,
        y_train,
        texts_eval,
        y_eval,
        config,
        max_len=max_len,
        n_record=n_record,
        num_classes=num_classes,
    )
    # rank 0 draws the single-process dropout masks; the others draw their own
    setup.model.seed = (config.seed + accelerator.process_index * 1_000_000_007) % 2**63
    previous_threads = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    try:
        history, records = _train(setup, config, accelerator)
    finally:
        torch.set_num_threads(previous_threads)
    accelerator.wait_for_everyone()
    return setup.model, history, records


# ------------------------------------------------------------------------------ command line


def _file_corpus(path: str, flag: str, labelled: bool, split: str) -> Corpus:
    """The texts of ``path``: one a line, or ``text<TAB>label`` lines (a header is skipped)."""
    file = Path(path).expanduser()
    form = "'text<TAB>label' lines" if labelled else "one text a line"
    if not file.is_file():
        raise ValueError(f"{flag} {path!r} is not a file: pass a text file of {form}")
    texts, labels = [], []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or (labelled and number == 1 and line.strip() == "sentence\tlabel"):
            continue
        text, sep, label = line.rpartition("\t") if labelled else (line, "\t", "-1")
        if not sep or not label.strip().lstrip("-").isdigit():
            raise ValueError(f"{flag} {path!r} line {number} is not 'text<TAB>integer label'")
        texts.append(text.strip())
        labels.append(int(label))
    if not texts:
        raise ValueError(f"{flag} {path!r} holds no texts")
    return Corpus("file", split, texts, np.asarray(labels, dtype=np.int64), str(path))


def _texts_from_args(args: argparse.Namespace) -> tuple[Corpus, dict]:
    if (args.dataset is None) == (args.texts is None):
        raise ValueError(
            "pass exactly one of --dataset (sst2 or imdb, from $POSGEOM_DATA_DIR or --data-dir) "
            "and --texts FILE"
        )
    split = args.split or "train"
    if args.dataset is not None:
        corpus = load_corpus(args.dataset, split, data_dir=args.data_dir)
    else:
        corpus = _file_corpus(args.texts, "--texts", args.command == "finetune", split)
    if args.sample is not None:
        corpus = corpus.sample(args.sample, seed=args.seed)
    info = dict(
        dataset=corpus.name,
        split=corpus.split,
        source=corpus.source,
        num_texts=len(corpus),
        sample=args.sample,
        sample_seed=args.seed,
    )
    return corpus, info


def _provenance(accelerator: Any, model: Any, command: str, **extra: Any) -> dict:
    import accelerate
    import torch
    import transformers

    from ..models import model_label

    device = accelerator.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    versions = dict(
        torch=torch.__version__,
        transformers=transformers.__version__,
        accelerate=accelerate.__version__,
    )
    return dict(
        command=command,
        processes=accelerator.num_processes,
        distributed_type=str(accelerator.distributed_type),
        device=str(device),
        device_name=name,
        model=model_label(model),
        versions=versions,
        **extra,
    )


def _on_main(accelerator: Any, write: Callable[[], None]) -> None:
    """Rank 0 writes; every process waits for it."""
    if accelerator.is_main_process:
        write()
    accelerator.wait_for_everyone()


def _probe_command(args: argparse.Namespace, accelerator: Any) -> None:
    corpus, info = _texts_from_args(args)
    special = not args.no_special_tokens
    try:
        result = data_parallel_hidden_means(
            args.model,
            None,
            corpus.texts,
            args.positions,
            args.batch_size,
            special,
            args.centre,
            accelerator,
        )
    except ValueError as exc:  # name the flag the user typed
        flag = {"n": "--positions", "batch_size": "--batch-size"}.get(str(exc).split(" ")[0])
        raise ValueError(f"{flag}: {exc}" if flag else str(exc)) from exc
    out = Path(args.out)
    provenance = _provenance(
        accelerator,
        args.model,
        "probe",
        n=args.positions,
        texts=info,
        batch_size=args.batch_size,
        centre=args.centre,
        special_tokens=special,
    )
    blob = np.array(json.dumps(provenance, sort_keys=True))

    def write() -> None:
        save = lambda tmp: np.savez(tmp, means=result.means, counts=result.counts, provenance=blob)  # noqa: E731
        atomic_write(out, save)
        write_json(out.with_suffix(".json"), provenance)
        print(f"wrote {out} and {out.with_suffix('.json')}: means {result.means.shape}")

    _on_main(accelerator, write)


def _finetune_command(args: argparse.Namespace, accelerator: Any) -> None:
    import torch

    from ..finetune import save_records
    from ..training import TrainConfig

    if (args.texts is None) != (args.eval_texts is None):
        raise ValueError(
            "--texts needs --eval-texts FILE (same format), and --eval-texts needs --texts"
        )
    train, info = _texts_from_args(args)
    if args.eval_texts is not None:
        evaluation = _file_corpus(args.eval_texts, "--eval-texts", True, "eval")
    else:
        split = "validation" if args.dataset == "sst2" else "test"
        evaluation = load_corpus(args.dataset, split, data_dir=args.data_dir)
        if args.eval_sample is not None:
            evaluation = evaluation.sample(args.eval_sample, seed=args.seed)
    settings = dict(
        steps=args.steps,
        lr=args.lr,
        weight_decay=args.weight_decay,
        optimizer=args.optimizer,
        seed=args.seed,
    )
    config = TrainConfig(batch_size=args.batch_size, eval_every=args.eval_every, **settings)
    model, history, records = data_parallel_finetune(
        args.model,
        train.texts,
        train.labels,
        evaluation.texts,
        evaluation.labels,
        config,
        max_len=args.max_len,
        accelerator=accelerator,
    )
    out = Path(args.out)
    provenance = _provenance(
        accelerator,
        args.model,
        "finetune",
        texts=info,
        max_len=args.max_len,
        eval_texts=dict(source=evaluation.source, num_texts=len(evaluation)),
        per_process_batch=args.batch_size,
        global_batch=args.batch_size * accelerator.num_processes,
        **settings,
    )

    def write() -> None:
        write_json(out, dict(provenance=provenance, history=asdict(history)))
        save_records(out.with_suffix(".npz"), dict(records))
        if args.save_weights is not None:
            state = {k: v.cpu() for k, v in model.state_dict().items()}
            atomic_write(Path(args.save_weights), lambda tmp: torch.save(state, tmp))
        print(
            f"wrote {out} (history) and {out.with_suffix('.npz')} (position tables); "
            f"final eval accuracy {history.final_accuracy():.3f}"
        )

    _on_main(accelerator, write)


#: the options of each command: (flags, argparse keywords)
_OPTIONS = {
    "probe": [
        (
            "--positions",
            dict(
                type=int,
                required=True,
                help="number of positions n (not --n: "
                "torchrun and accelerate launch would take that flag as their own)",
            ),
        ),
        ("--centre", dict(choices=list(CENTRES), default="none")),
        ("--no-special-tokens", dict(action="store_true")),
    ],
    "finetune": [
        ("--eval-texts", dict(default=None, help="with --texts: the eval file")),
        ("--eval-sample", dict(type=int, default=None)),
        ("--steps", dict(type=int, default=300)),
        ("--lr", dict(type=float, default=2e-5)),
        ("--weight-decay", dict(type=float, default=0.0)),
        ("--optimizer", dict(choices=["adamw", "sgd"], default="adamw")),
        ("--eval-every", dict(type=int, default=50)),
        ("--max-len", dict(type=int, default=64)),
        ("--save-weights", dict(default=None, help="also save the state dict")),
    ],
}
_COMMON = [
    ("--model", dict(default=None, help="hub id or local folder (default: all-MiniLM-L6-v2)")),
    ("--dataset", dict(choices=["sst2", "imdb"], default=None)),
    ("--split", dict(default=None, help="corpus split (default: train)")),
    ("--data-dir", dict(default=None, help="default: $POSGEOM_DATA_DIR")),
    (
        "--texts",
        dict(
            default=None,
            help="a text file instead of --dataset (probe: one text a "
            "line; finetune: 'text<TAB>label' lines)",
        ),
    ),
    ("--sample", dict(type=int, default=None, help="a seeded random subset of this many texts")),
    ("--seed", dict(type=int, default=0)),
    ("--batch-size", dict(type=int, default=64, help="per process")),
    ("--out", dict(required=True, help="output file (written atomically)")),
]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m posgeom_utils.scale.data_parallel",
        description="Data-parallel per-layer probes and fine-tuning (chapter 'Beyond one machine'). "
        "Run under `accelerate launch` or `torchrun` for several processes; plain `python -m` "
        "runs one.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for command, options in _OPTIONS.items():
        p = sub.add_parser(command)
        for flag, kwargs in _COMMON + options:
            p.add_argument(flag, **kwargs)
    return parser


def main(argv: Sequence[str] | None = None, accelerator: Any = None) -> int:
    """The command line: ``probe`` writes ``--out`` (``.npz``: means, counts, provenance) and a
    ``.json`` of provenance beside it; ``finetune`` writes ``--out`` (JSON: provenance and history)
    and a ``.npz`` of position tables beside it. Run it with ``accelerate launch [--num_processes P]
    -m posgeom_utils.scale.data_parallel ...`` or ``torchrun --nproc_per_node P -m ...``; bad input
    exits with status 2 and a message naming the parameter. Chapter: *Beyond one machine*.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        accelerator = _get_accelerator(accelerator)
        (_probe_command if args.command == "probe" else _finetune_command)(args, accelerator)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

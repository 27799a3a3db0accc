"""Per-layer probes and fine-tuning, data-parallel under ``accelerate launch`` or
``torchrun``.

Chapter: *Beyond one machine*. Nothing new is computed: with one process both functions
return what the single-process path returns
(:func:`~posgeom_utils.probes.positional_hidden_means`,
:func:`~posgeom_utils.finetune.finetune`), and with several they return the same
quantity to float tolerance.

- :func:`data_parallel_hidden_means`: the texts are sorted by tokenized length and cut
  into batches exactly as the single-process probe cuts them; process ``r`` of ``P``
  probes batches ``r, r + P, r + 2P, ...`` (every process gets short and long batches,
  so the work is balanced) with the single-process code, and the per-layer float64
  sums and counts are all-reduced. Every process returns the same
  :class:`~posgeom_utils.probes.LayerMeans`.
- :func:`data_parallel_finetune`: the classifier of :mod:`posgeom_utils.finetune`,
  trained with model, optimiser and data loader wrapped by ``Accelerator.prepare``.
  ``config.batch_size`` is the batch of one process; the global batch is that times
  the number of processes. Each step's global batch is the one the single-process
  trainer draws for ``batch_size = global batch`` (same seed), split evenly between
  the processes, so the averaged gradient is the gradient of the global mean loss.
- ``python -m posgeom_utils.scale.data_parallel probe|finetune ...``: the launchable
  entry point (``--help``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..cache import atomic_write, write_json
from ..corpus import Corpus, check_texts, load_corpus
from ..probes import CENTRES, LayerMeans, _max_positions, positional_hidden_means

if TYPE_CHECKING:  # torch is imported when needed: `--help` stays quick
    from ..finetune import PretrainedClassifier
    from ..training import History, TrainConfig

__all__ = [
    "batch_share",
    "data_parallel_finetune",
    "data_parallel_hidden_means",
    "main",
]


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _get_accelerator(accelerator: Any, cpu: bool = False, bf16: bool = False) -> Any:
    """``accelerator``, or a new ``Accelerator`` (on CPU when asked or when no GPU is
    visible: without ``cpu=True`` Accelerate would run each process of a CPU-only
    ``torchrun`` alone)."""
    if accelerator is None:
        import torch
        from accelerate import Accelerator

        accelerator = Accelerator(
            cpu=cpu or not torch.cuda.is_available(),
            # None: what `accelerate launch --mixed_precision` (or its config) says
            mixed_precision="bf16" if bf16 else None,
        )
    elif not hasattr(accelerator, "num_processes") or not hasattr(
        accelerator, "reduce"
    ):
        raise TypeError(
            "accelerator must be an accelerate.Accelerator, got "
            f"{type(accelerator).__name__}: pass accelerator=None to create one"
        )
    world = os.environ.get("WORLD_SIZE", "1")
    if world.isdigit() and int(world) > 1 and accelerator.num_processes == 1:
        raise ValueError(
            f"launched with WORLD_SIZE={world}, but the accelerator runs one process "
            "(each process would do all the work alone): on a machine without GPUs "
            "create it with Accelerator(cpu=True), or pass accelerator=None"
        )
    return accelerator


def _device_string(accelerator: Any) -> str:
    device = accelerator.device
    if device.type not in ("cpu", "cuda"):
        raise ValueError(
            f"the accelerator runs on {device}, but the probes run on 'cpu' or 'cuda' "
            "only: launch on CPUs or NVIDIA GPUs"
        )
    if device.type == "cpu":
        return "cpu"  # multi-CPU runs report cpu:<rank>, which means the same
    return "cuda" if device.index is None else f"cuda:{device.index}"


# ------------------------------------------------------------------------ the probe


def batch_share(
    lengths: Sequence[int] | np.ndarray, batch_size: int, rank: int, processes: int
) -> np.ndarray:
    """Indices of the texts that process ``rank`` of ``processes`` probes, in probing
    order.

    ``lengths`` are the tokenized lengths; the texts are sorted by them (stably) and
    cut into batches of ``batch_size`` as
    :func:`~posgeom_utils.probes.positional_hidden_means` cuts them, and the process
    takes batches ``rank, rank + processes, ...``. Only the last batch can be short,
    and it is the last of its process, so probing the share alone reproduces those
    batches exactly.
    Chapter: *Beyond one machine*.
    """
    if not _is_int(batch_size) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if not _is_int(processes) or processes < 1:
        raise ValueError(f"processes must be an integer >= 1, got {processes!r}")
    if not _is_int(rank) or not 0 <= rank < processes:
        raise ValueError(f"rank must be an integer in [0, {processes}), got {rank!r}")
    order = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable")
    starts = range(int(rank) * batch_size, len(order), int(processes) * batch_size)
    parts = [order[s : s + batch_size] for s in starts]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _lengths(
    tokenizer: Any, texts: list[str], n: int, special_tokens: bool
) -> np.ndarray:
    """Tokenized lengths (truncated to ``n``), as the single-process probe computes
    them."""
    kwargs = dict(
        add_special_tokens=bool(special_tokens), truncation=True, max_length=n
    )
    return np.fromiter(
        (
            len(ids)
            for start in range(0, len(texts), 1024)
            for ids in tokenizer(texts[start : start + 1024], **kwargs)["input_ids"]
        ),
        dtype=np.int64,
        count=len(texts),
    )


def _model_and_tokenizer(model: Any, tokenizer: Any, device: str) -> tuple[Any, Any]:
    from ..models import load_model, load_tokenizer

    if model is None or isinstance(model, (str, Path)):
        if tokenizer is None:
            tokenizer = load_tokenizer(model)
        return load_model(model, device=device), tokenizer
    if tokenizer is None:
        raise ValueError(
            "tokenizer is None but model is a model object: pass its tokenizer, or "
            "pass the model's name or folder as model to load both"
        )
    return model, tokenizer


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
    between the processes of ``accelerator`` (an ``accelerate.Accelerator``, created if
    None); every process returns the same result.

    ``model`` is a Hugging Face encoder (then pass its ``tokenizer``) or a model name or
    folder (``None``: the packaged all-MiniLM-L6-v2; ``tokenizer=None`` loads its own).
    ``batch_size`` is per process and per forward pass. Each process probes its
    :func:`batch_share` with the single-process code, turns its means back into float64
    sums (``means * counts``) and the sums and counts are all-reduced. One process
    returns exactly the single-process result; several agree with it to float64
    rounding (the per-batch float32 forward passes are the same, only the order of the
    float64 additions differs). ``params["processes"]`` says how many took part.
    Chapter: *Beyond one machine*.
    """
    import torch

    if not _is_int(n) or n < 1:
        raise ValueError(
            f"n must be a positive integer (the number of positions), got {n!r}"
        )
    if not _is_int(batch_size) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if centre not in CENTRES:
        raise ValueError(f"centre must be one of {CENTRES}, got {centre!r}")
    texts = check_texts(texts)
    accelerator = _get_accelerator(accelerator)
    device = _device_string(accelerator)
    model, tokenizer = _model_and_tokenizer(model, tokenizer, device)
    n, batch_size = int(n), int(batch_size)
    limit = _max_positions(model)
    if limit is not None and n > limit:
        raise ValueError(
            f"n={n} exceeds the model's max_position_embeddings={limit}: use n <= "
            f"{limit}"
        )
    processes, rank = accelerator.num_processes, accelerator.process_index
    if processes == 1:
        result = positional_hidden_means(
            model, tokenizer, texts, n, batch_size, special_tokens, device, centre
        )
        result.params["processes"] = 1
        return result

    share = batch_share(
        _lengths(tokenizer, texts, n, special_tokens), batch_size, rank, processes
    )
    sums, counts = None, np.zeros(n)
    params: dict = {}
    if len(share):
        part = positional_hidden_means(
            model,
            tokenizer,
            [texts[i] for i in share],
            n,
            batch_size,
            special_tokens,
            device,
            "none",
        )
        k = part.n  # the positions reached form a prefix 0..k-1
        sums = np.zeros((part.means.shape[0], n, part.means.shape[2]))
        sums[:, :k] = part.means * part.counts[None, :, None]
        counts[:k] = part.counts
        params = part.params
    # a process without texts (fewer batches than processes) learns the shape
    shape = torch.tensor(
        [0, 0] if sums is None else [sums.shape[0], sums.shape[2]], device=device
    )
    layers, width = accelerator.gather(shape).reshape(-1, 2).max(0).values.tolist()
    if sums is None:
        sums = np.zeros((layers, n, width))
    total = accelerator.reduce(torch.as_tensor(sums, device=device), "sum")
    reached = accelerator.reduce(torch.as_tensor(counts, device=device), "sum")
    counts_np = reached.cpu().numpy().round().astype(np.int64)
    keep = np.flatnonzero(counts_np > 0)
    means = total.cpu().numpy()[:, keep] / counts_np[keep][None, :, None]
    params = dict(
        n=n,
        batch_size=batch_size,
        special_tokens=bool(special_tokens),
        centre="none",
        num_texts=len(texts),
        model=params.get(
            "model", getattr(getattr(model, "config", None), "_name_or_path", None)
        ),
        processes=processes,
    )
    result = LayerMeans(
        means=means, counts=counts_np[keep], centre="none", params=params
    )
    return result.centred() if centre == "global" else result


# --------------------------------------------------------------------- fine-tuning


def _draws_dataset(X: Any, y: Any, index: Any) -> Any:
    """A map-style dataset whose item ``i`` is ``(X[index[i]], y[index[i]])``."""
    from torch.utils.data import Dataset

    class Draws(Dataset):
        def __len__(self) -> int:
            return len(index)

        def __getitem__(self, i: int) -> tuple[Any, Any]:
            j = int(index[i])
            return X[j], y[j]

    return Draws()


def _unused_parameters(model: Any, X: Any) -> list[str]:
    """Names of the trainable parameters that get no gradient (e.g. BERT's pooler):
    DDP needs them frozen. One eval-mode forward pass on one row, gradients cleared."""
    import torch

    was_training = model.training
    model.eval()
    with torch.enable_grad():
        model(X[:1]).float().sum().backward()
    unused = [
        name
        for name, p in model.named_parameters()
        if p.requires_grad and p.grad is None
    ]
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    return unused


def _eval_sums(model: Any, X: Any, y: Any, batch_size: int = 512) -> list[float]:
    """``[summed cross-entropy, correct, scored]`` of ``(X, y)``, accumulated as
    :func:`~posgeom_utils.training.evaluate` accumulates them."""
    import torch
    import torch.nn.functional as F

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    losses, correct, scored = [], 0, 0
    with torch.no_grad():
        for start in range(0, len(X), batch_size):
            xb = X[start : start + batch_size].to(device)
            yb = y[start : start + batch_size].to(device)
            logits = model(xb).float()
            losses.append(F.cross_entropy(logits, yb, reduction="sum").item())
            correct += (logits.argmax(-1) == yb).sum().item()
            scored += len(yb)
    model.train(was_training)
    return [sum(losses), float(correct), float(scored)]


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
    """:func:`~posgeom_utils.finetune.finetune` data-parallel: model, optimiser and data
    loader go through ``accelerator.prepare`` (an ``accelerate.Accelerator``, created
    if None: CPU when ``config.device == "cpu"``, bf16 autocast where
    :func:`~posgeom_utils.training.amp_enabled` says so: on CUDA for ``amp="auto"``, on
    any device for ``amp=True``), the loss through ``accelerator.backward``.

    ``config.batch_size`` is the batch of one process; the global batch is
    ``config.batch_size * num_processes``. Step ``t`` trains on the global batch the
    single-process trainer draws at step ``t`` for that batch size and
    ``config.seed``, split evenly between the processes, so ``P`` processes with batch
    ``B / P`` follow the single-process run with batch ``B`` to float rounding (with
    dropout: in distribution, since each process draws its own masks). One process
    gives exactly :func:`~posgeom_utils.finetune.finetune`. Parameters that get no
    gradient (e.g. BERT's pooler) are frozen, as DDP requires; evaluation is sharded
    between the processes and its sums all-reduced. ``config.checkpoint_dir`` is not
    supported. Returns ``(model, history, records)`` as ``finetune`` does, the same on
    every process. Chapter: *Beyond one machine*.
    """
    import torch
    import torch.nn.functional as F

    from ..finetune import PretrainedClassifier, _labels, _positive_int, encode_texts
    from ..models import load_model, load_tokenizer, select_device
    from ..seeding import seed_everything
    from ..settings import progress, progress_enabled
    from ..training import amp_enabled
    from ..training import History, TrainConfig

    for values, name in ((texts_train, "texts_train"), (texts_eval, "texts_eval")):
        if (
            not isinstance(values, (str, bytes))
            and hasattr(values, "__len__")
            and len(values) == 0
        ):
            raise ValueError(f"{name} is empty: pass at least one text")
    texts_train = check_texts(texts_train, "texts_train")
    texts_eval = check_texts(texts_eval, "texts_eval")
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    if config.checkpoint_dir is not None:
        raise ValueError(
            "config.checkpoint_dir is not supported by data_parallel_finetune: pass "
            "checkpoint_dir=None (or use finetune for a resumable single-process run)"
        )
    max_len = _positive_int(max_len, "max_len", minimum=2)
    num_classes = _positive_int(num_classes, "num_classes", minimum=2)
    y_train = _labels(y_train, len(texts_train), num_classes, "y_train")
    y_eval = _labels(y_eval, len(texts_eval), num_classes, "y_eval")
    if record_every is not None:
        config = replace(config, eval_every=_positive_int(record_every, "record_every"))
    device = select_device(config.device)  # a bad device fails before any loading
    accelerator = _get_accelerator(
        accelerator,
        cpu=device.type == "cpu",
        bf16=amp_enabled(config.amp, device),  # the single-process trainer's rule
    )
    processes, rank = accelerator.num_processes, accelerator.process_index

    tokenizer = load_tokenizer(model_name)
    encoder = load_model(model_name, device="cpu")
    seed_everything(config.seed)  # the head's initial weights: the same everywhere
    # rank 0 draws the single-process dropout masks; the others draw their own
    dropout_seed = (config.seed + rank * 1_000_000_007) % 2**63
    model = PretrainedClassifier(
        encoder,
        num_classes=num_classes,
        pad_token_id=tokenizer.pad_token_id,
        seed=dropout_seed,
    )
    table = model.position_table()  # ValueError now without learned positions
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

    previous_threads = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    try:
        unused = set(_unused_parameters(model, X_train))
        for name, p in model.named_parameters():
            if name in unused:
                p.requires_grad_(False)
        # as train_classifier: seed, optimiser, then one draw per step
        seed_everything(config.seed)
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        if config.optimizer == "sgd":
            optimizer = torch.optim.SGD(
                params, lr=config.lr, weight_decay=config.weight_decay
            )
        else:
            optimizer = torch.optim.AdamW(
                params, lr=config.lr, weight_decay=config.weight_decay
            )
        generator = torch.Generator().manual_seed(config.seed)
        per_process = config.batch_size
        global_batch = per_process * processes
        index = torch.cat(
            [
                torch.randint(len(X_train), (global_batch,), generator=generator)
                for _ in range(config.steps)
            ]
        )
        loader = torch.utils.data.DataLoader(
            _draws_dataset(X_train, y_train, index),
            batch_size=global_batch if accelerator.split_batches else per_process,
            shuffle=False,
        )
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        inner = accelerator.unwrap_model(model)
        eval_share = slice(rank, None, processes)
        X_eval_mine, y_eval_mine = X_eval[eval_share], y_eval[eval_share]

        records: dict[int, np.ndarray] = {0: inner.position_table(n_record)}
        history, running = History(), []
        batches = iter(loader)
        for step in progress(
            range(1, config.steps + 1),
            desc="training (data-parallel)",
            total=config.steps,
            disable=not (progress_enabled() and accelerator.is_main_process),
        ):
            xb, yb = next(batches)
            loss = F.cross_entropy(model(xb).float(), yb)
            optimizer.zero_grad(set_to_none=True)
            accelerator.backward(loss)
            optimizer.step()
            running.append(loss.item())
            if step % config.eval_every == 0 or step == config.steps:
                sums = torch.tensor(
                    _eval_sums(inner, X_eval_mine, y_eval_mine)
                    if len(X_eval_mine)
                    else [0.0, 0.0, 0.0],
                    dtype=torch.float64,
                    device=accelerator.device,
                )
                train_loss = torch.tensor(
                    float(np.mean(running)),
                    dtype=torch.float64,
                    device=accelerator.device,
                )
                if processes > 1:
                    sums = accelerator.reduce(sums, "sum")
                    train_loss = accelerator.reduce(train_loss, "mean")
                loss_sum, correct, scored = sums.tolist()
                history.step.append(step)
                history.train_loss.append(float(train_loss))
                history.eval_loss.append(loss_sum / max(scored, 1))
                history.eval_accuracy.append(correct / max(scored, 1))
                running = []
                records[step] = inner.position_table(n_record)
    finally:
        torch.set_num_threads(previous_threads)
    accelerator.wait_for_everyone()
    return inner, history, [(s, records[s]) for s in sorted(records)]


# ------------------------------------------------------------------ command line


def _read_lines(path: str) -> list[str]:
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(
            f"--texts {path!r} is not a file: pass a text file, one text a line"
        )
    return [
        line.strip()
        for line in file.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def _read_labelled(path: str, flag: str) -> tuple[list[str], np.ndarray]:
    file = Path(path).expanduser()
    if not file.is_file():
        raise ValueError(
            f"{flag} {path!r} is not a file: pass a tab-separated file of "
            "'text<TAB>label' lines (a 'sentence<TAB>label' header is skipped)"
        )
    texts, labels = [], []
    lines = file.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip() or (number == 1 and line.strip() == "sentence\tlabel"):
            continue
        text, sep, label = line.rstrip("\n").rpartition("\t")
        if not sep or not label.strip().lstrip("-").isdigit():
            raise ValueError(
                f"{flag} {path!r} line {number} is not 'text<TAB>integer label'"
            )
        texts.append(text.strip())
        labels.append(int(label))
    return texts, np.asarray(labels, dtype=np.int64)


def _texts_from_args(args: argparse.Namespace, split: str) -> tuple[Corpus, dict]:
    if (args.dataset is None) == (args.texts is None):
        raise ValueError(
            "pass exactly one of --dataset (sst2 or imdb, from $POSGEOM_DATA_DIR or "
            "--data-dir) and --texts FILE"
        )
    if args.dataset is not None:
        corpus = load_corpus(args.dataset, split, data_dir=args.data_dir)
    else:
        if args.command == "probe":
            texts = _read_lines(args.texts)
            labels = np.full(len(texts), -1, dtype=np.int64)
        else:
            texts, labels = _read_labelled(args.texts, "--texts")
        if not texts:
            raise ValueError(f"--texts {args.texts!r} holds no texts")
        corpus = Corpus("file", split, texts, np.asarray(labels), str(args.texts))
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
    return dict(
        command=command,
        processes=accelerator.num_processes,
        distributed_type=str(accelerator.distributed_type),
        device=str(device),
        device_name=(
            torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        ),
        model=model_label(model),
        versions=dict(
            torch=torch.__version__,
            transformers=transformers.__version__,
            accelerate=accelerate.__version__,
        ),
        **extra,
    )


def _probe_command(args: argparse.Namespace, accelerator: Any) -> None:
    for flag, value in (
        ("--positions", args.positions),
        ("--batch-size", args.batch_size),
    ):
        if value < 1:
            raise ValueError(f"{flag} must be an integer >= 1, got {value}")
    corpus, info = _texts_from_args(args, args.split or "train")
    try:
        result = data_parallel_hidden_means(
            args.model,
            None,
            corpus.texts,
            args.positions,
            batch_size=args.batch_size,
            special_tokens=not args.no_special_tokens,
            centre=args.centre,
            accelerator=accelerator,
        )
    except ValueError as exc:
        if str(exc).startswith("n="):
            raise ValueError(f"--positions {args.positions}: {exc}") from exc
        raise
    if accelerator.is_main_process:
        out = Path(args.out)
        provenance = _provenance(
            accelerator,
            args.model,
            "probe",
            n=args.positions,
            texts=info,
            batch_size=args.batch_size,
            centre=args.centre,
            special_tokens=not args.no_special_tokens,
        )
        atomic_write(
            out,
            lambda tmp: np.savez(
                tmp,
                means=result.means,
                counts=result.counts,
                provenance=np.array(json.dumps(provenance, sort_keys=True)),
            ),
        )
        write_json(out.with_suffix(".json"), provenance)
        print(f"wrote {out} and {out.with_suffix('.json')}: means {result.means.shape}")
    accelerator.wait_for_everyone()


def _finetune_command(args: argparse.Namespace, accelerator: Any) -> None:
    from ..training import TrainConfig

    if args.texts is not None and args.eval_texts is None:
        raise ValueError("--texts needs --eval-texts FILE (same format) for evaluation")
    if args.eval_texts is not None and args.texts is None:
        raise ValueError("--eval-texts needs --texts FILE for training")
    train, info = _texts_from_args(args, args.split or "train")
    if args.eval_texts is not None:
        eval_texts, eval_labels = _read_labelled(args.eval_texts, "--eval-texts")
        if not eval_texts:
            raise ValueError(f"--eval-texts {args.eval_texts!r} holds no texts")
        eval_corpus = Corpus("file", "eval", eval_texts, eval_labels, args.eval_texts)
    else:
        eval_split = "validation" if args.dataset == "sst2" else "test"
        eval_corpus = load_corpus(args.dataset, eval_split, data_dir=args.data_dir)
        if args.eval_sample is not None:
            eval_corpus = eval_corpus.sample(args.eval_sample, seed=args.seed)
    config = TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        optimizer=args.optimizer,
        seed=args.seed,
        eval_every=args.eval_every,
    )
    model, history, records = data_parallel_finetune(
        args.model,
        train.texts,
        train.labels,
        eval_corpus.texts,
        eval_corpus.labels,
        config,
        max_len=args.max_len,
        accelerator=accelerator,
    )
    if accelerator.is_main_process:
        import torch

        out = Path(args.out)
        provenance = _provenance(
            accelerator,
            args.model,
            "finetune",
            texts=info,
            eval_texts=dict(source=eval_corpus.source, num_texts=len(eval_corpus)),
            per_process_batch=args.batch_size,
            global_batch=args.batch_size * accelerator.num_processes,
            steps=args.steps,
            lr=args.lr,
            weight_decay=args.weight_decay,
            optimizer=args.optimizer,
            seed=args.seed,
            max_len=args.max_len,
        )
        history_dict = dict(
            step=history.step,
            train_loss=history.train_loss,
            eval_loss=history.eval_loss,
            eval_accuracy=history.eval_accuracy,
        )
        write_json(out, dict(provenance=provenance, history=history_dict))
        atomic_write(
            out.with_suffix(".npz"),
            lambda tmp: np.savez(
                tmp,
                steps=np.asarray([s for s, _ in records], dtype=np.int64),
                tables=np.stack([t for _, t in records]),
            ),
        )
        if args.save_weights is not None:
            state = {k: v.cpu() for k, v in model.state_dict().items()}
            atomic_write(Path(args.save_weights), lambda tmp: torch.save(state, tmp))
        print(
            f"wrote {out} (history) and {out.with_suffix('.npz')} (position tables); "
            f"final eval accuracy {history.final_accuracy():.3f}"
        )
    accelerator.wait_for_everyone()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m posgeom_utils.scale.data_parallel",
        description="Data-parallel per-layer probes and fine-tuning (chapter "
        "'Beyond one machine'). Run under `accelerate launch` or `torchrun` for "
        "several processes; plain `python -m` runs one.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("probe", "finetune"):
        p = sub.add_parser(name)
        p.add_argument(
            "--model",
            default=None,
            help="hub id or local folder (default: the packaged all-MiniLM-L6-v2)",
        )
        p.add_argument("--dataset", choices=["sst2", "imdb"], default=None)
        p.add_argument("--split", default=None, help="corpus split (default: train)")
        p.add_argument("--data-dir", default=None, help="default: $POSGEOM_DATA_DIR")
        p.add_argument(
            "--texts",
            default=None,
            help="a text file instead of --dataset"
            + (": one text a line" if name == "probe" else ": 'text<TAB>label' lines"),
        )
        p.add_argument(
            "--sample",
            type=int,
            default=None,
            help="a seeded random subset of this many texts (default: all)",
        )
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--batch-size", type=int, default=64, help="per process")
        p.add_argument("--out", required=True, help="output file (written atomically)")
    probe = sub.choices["probe"]
    probe.add_argument(
        "--positions",
        type=int,
        required=True,
        help="number of positions n (not --n: torchrun and accelerate launch would "
        "take that flag as their own)",
    )
    probe.add_argument("--centre", choices=list(CENTRES), default="none")
    probe.add_argument("--no-special-tokens", action="store_true")
    ft = sub.choices["finetune"]
    ft.add_argument("--eval-texts", default=None, help="with --texts: the eval file")
    ft.add_argument("--eval-sample", type=int, default=None)
    ft.add_argument("--steps", type=int, default=300)
    ft.add_argument("--lr", type=float, default=2e-5)
    ft.add_argument("--weight-decay", type=float, default=0.0)
    ft.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    ft.add_argument("--eval-every", type=int, default=50)
    ft.add_argument("--max-len", type=int, default=64)
    ft.add_argument("--save-weights", default=None, help="also save the state dict")
    return parser


def main(argv: Sequence[str] | None = None, accelerator: Any = None) -> int:
    """The command line: ``probe`` writes ``--out`` (``.npz``: means, counts,
    provenance) and a ``.json`` of provenance beside it; ``finetune`` writes ``--out``
    (JSON: provenance and history) and a ``.npz`` of position tables beside it.

    Run it with ``accelerate launch [--num_processes P] -m
    posgeom_utils.scale.data_parallel ...`` or ``torchrun --nproc_per_node P -m ...``.
    Bad input exits with status 2 and a message naming the parameter.
    Chapter: *Beyond one machine*.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        accelerator = _get_accelerator(accelerator)
        if args.command == "probe":
            _probe_command(args, accelerator)
        else:
            _finetune_command(args, accelerator)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark ``posgeom_utils.probes.positional_hidden_means`` against a bare batched forward pass.

What it measures (one process, wall-clock, ``time.perf_counter``), on a seeded sample of ``--texts`` texts of
the SST-2 train split (``--dataset imdb``: IMDB train, default ``n = 256``) with the packaged
all-MiniLM-L6-v2 (``load_model(None)`` / ``load_tokenizer(None)``), ``n = 64`` positions by default:

- **bare**: the forward pass alone over the *same* batches the probe uses: the texts in the probe's
  length-bucketed order (tokenized lengths, stable ``argsort``; that order is computed once, outside the
  timing), each batch of ``--batch-size`` tokenized exactly as the probe does
  (``tokenizer(batch, padding="longest", truncation=True, max_length=n, return_tensors="pt")``), moved to
  the device and run as ``model(**enc)`` under ``torch.inference_mode()``, *without*
  ``output_hidden_states``;
- **probe**: ``positional_hidden_means(model, tokenizer, texts, n, batch_size)``, i.e. the length pass, the
  same batches, the forward pass with ``output_hidden_states=True`` and the per-layer, per-position sums.
- **length pass** (attribution only): the probe's up-front tokenization of every text for its length plus
  the sort, timed alone; ``bare + length pass`` is reported as a second, looser baseline.

Throughput is in *tokens per second*, tokens = the non-padding tokens of all batches (truncated to ``n``,
[CLS]/[SEP] included); both variants process the same tokens (checked against the probe's ``counts``), so
the throughput ratio is ``time_bare / time_probe``. After one untimed warm-up of each variant, ``--repeats``
rounds run bare and probe once each, interleaved (bare, probe, probe, bare, ...: the one that goes first
alternates) so drift and noise from the shared machine hit both alike; best and median per variant are
reported, and the median of the per-round ratios. The CPU pressure (``/proc/pressure/cpu``) is printed at
the start and the end.

Target (the issue): ``time_bare / time_probe >= 0.8``, i.e. collecting the hidden-state means costs at
most ~25% on top of the forward pass itself; checked on the best and on the median.

Run from the repo root::

    POSGEOM_DATA_DIR=/work/shared/data python benchmarks/bench_probes.py [--texts 2000] [--repeats 5]
        [--threads 1] [--dataset sst2|imdb] [--n N] [--json out.json]
"""

from __future__ import annotations

import os

os.environ["POSGEOM_PROGRESS"] = "0"  # before importing posgeom_utils: no progress bars

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from posgeom_utils.corpus import load_corpus  # noqa: E402
from posgeom_utils.models import load_model, load_tokenizer, model_label  # noqa: E402
from posgeom_utils.probes import positional_hidden_means  # noqa: E402

TARGET_RATIO = 0.8
NOISY_SPREAD = 1.3
DEFAULT_N = {"sst2": 64, "imdb": 256}


# --------------------------------------------------------------------------- workloads


def enc_kwargs(n: int) -> dict[str, Any]:
    """The tokenizer options ``positional_hidden_means`` uses (special tokens on, truncation to n)."""
    return dict(add_special_tokens=True, truncation=True, max_length=n)


def length_order(tokenizer: Any, texts: Sequence[str], n: int) -> np.ndarray:
    """The probe's bucketing: tokenized (truncated) length of every text, stable argsort."""
    kw = enc_kwargs(n)
    lengths = np.fromiter(
        (
            len(ids)
            for start in range(0, len(texts), 1024)
            for ids in tokenizer(list(texts[start : start + 1024]), **kw)["input_ids"]
        ),
        dtype=np.int64,
        count=len(texts),
    )
    return np.argsort(lengths, kind="stable")


def run_bare(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str],
    order: np.ndarray,
    n: int,
    batch_size: int,
    dev: torch.device,
) -> tuple[int, int]:
    """The forward pass alone over the probe's batches; returns (real tokens, padded tokens)."""
    kw = enc_kwargs(n)
    real = padded = 0
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            batch = [texts[i] for i in order[start : start + batch_size]]
            enc = tokenizer(batch, padding="longest", return_tensors="pt", **kw)
            enc = {k: v.to(dev) for k, v in enc.items()}
            model(**enc)
            mask = enc["attention_mask"]
            real += int(mask.sum())
            padded += mask.numel()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return real, padded


def run_probe(
    model: Any, tokenizer: Any, texts: Sequence[str], n: int, batch_size: int, device: str
) -> int:
    """``positional_hidden_means``; returns the number of tokens it counted."""
    result = positional_hidden_means(
        model, tokenizer, texts, n, batch_size=batch_size, device=device
    )
    return int(result.counts.sum())


# --------------------------------------------------------------------------- timing and report


@dataclass
class Timing:
    label: str
    seconds: list[float] = field(default_factory=list)  # wall-clock seconds, one per repeat

    @property
    def best(self) -> float:
        return min(self.seconds)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def noisy(self) -> bool:
        return self.median > NOISY_SPREAD * self.best

    def as_dict(self, tokens: int) -> dict[str, Any]:
        return {
            "label": self.label,
            "seconds": self.seconds,
            "best_s": self.best,
            "median_s": self.median,
            "tokens_per_s_best": tokens / self.best,
            "tokens_per_s_median": tokens / self.median,
            "noisy": self.noisy,
        }


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def cpu_pressure() -> str:
    try:
        return Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return "n/a"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument(
        "--dataset", choices=sorted(DEFAULT_N), default="sst2", help="train split of this corpus"
    )
    p.add_argument(
        "--texts", type=int, default=2000, help="seeded sample size of the corpus (0 = all of it)"
    )
    p.add_argument(
        "--n", type=int, default=None, help="positions (default: 64 for sst2, 256 for imdb)"
    )
    p.add_argument("--batch-size", type=int, default=64, help="batch size of both variants")
    p.add_argument(
        "--repeats", type=int, default=5, help="interleaved timed rounds (best and median reported)"
    )
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    p.add_argument("--seed", type=int, default=0, help="seed of the corpus sample")
    p.add_argument(
        "--json", type=Path, default=None, metavar="PATH", help="also write the results as JSON"
    )
    args = p.parse_args(argv)
    n = args.n if args.n is not None else DEFAULT_N[args.dataset]
    if args.repeats < 1 or args.batch_size < 1 or n < 1 or args.texts < 0 or args.threads < 1:
        p.error("--repeats, --batch-size, --n, --threads must be >= 1 and --texts >= 0")

    torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer(None)
    model = load_model(None, device=args.device)
    dev = next(model.parameters()).device
    corpus = load_corpus(args.dataset, split="train")
    if args.texts:
        corpus = corpus.sample(args.texts, seed=args.seed)
    texts = corpus.texts
    n_params = sum(q.numel() for q in model.parameters())

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads (os.cpu_count={os.cpu_count()}), "
        f"device {dev}, {platform.python_implementation()} {platform.python_version()}"
    )
    print(
        f"model: {model_label(None)}, {model.config.num_hidden_layers} layers, d {model.config.hidden_size}, "
        f"{n_params:,} parameters"
    )
    print(
        f"corpus: {args.dataset}/train, {len(texts)} texts (seed {args.seed}); n {n}, batch {args.batch_size}, "
        f"{args.repeats} repeats"
    )
    print(f"cpu pressure at start: {cpu_pressure()}")

    device = str(dev)
    order = length_order(tokenizer, texts, n)  # computed once: bare runs on the probe's batches
    bare = lambda: run_bare(model, tokenizer, texts, order, n, args.batch_size, dev)  # noqa: E731
    probe = lambda: run_probe(model, tokenizer, texts, n, args.batch_size, device)  # noqa: E731
    lengths = lambda: length_order(tokenizer, texts, n)  # noqa: E731

    # warm-up (untimed) and identical-work check
    (real, padded), probe_tokens = bare(), probe()
    lengths()
    if real != probe_tokens:
        print(
            f"ERROR: bare processed {real} tokens, probe counted {probe_tokens}: not the same work"
        )
        return 1

    t_bare, t_probe, t_len = (
        Timing("bare forward"),
        Timing("positional_hidden_means"),
        Timing("length pass"),
    )
    for r in range(args.repeats):
        pair = [(t_bare, bare), (t_probe, probe)]
        for timing, fn in pair if r % 2 == 0 else pair[::-1]:
            timing.seconds.append(timed(fn)[0])
        t_len.seconds.append(timed(lengths)[0])
    t_bare_len = Timing(
        "bare + length pass", [b + l for b, l in zip(t_bare.seconds, t_len.seconds)]
    )

    print(
        f"\ntokens: {real:,} real (truncated to n, specials included), {padded:,} with padding "
        f"({real / padded:.1%} real)"
    )
    print(f"  {'':26s} {'best s':>8s} {'median s':>9s} {'tok/s':>9s} {'tok/s':>9s}")
    print(f"  {'':26s} {'':>8s} {'':>9s} {'(best)':>9s} {'(median)':>9s}")
    for t in (t_bare, t_probe, t_len, t_bare_len):
        flag = " (noisy)" if t.noisy else ""
        print(
            f"  {t.label:26s} {t.best:8.3f} {t.median:9.3f} {real / t.best:9,.0f} {real / t.median:9,.0f}{flag}"
        )

    ratio_best = t_bare.best / t_probe.best
    ratio_med = t_bare.median / t_probe.median
    paired = statistics.median(b / q for b, q in zip(t_bare.seconds, t_probe.seconds))
    loose_best = t_bare_len.best / t_probe.best
    loose_med = t_bare_len.median / t_probe.median
    met = ratio_best >= TARGET_RATIO and ratio_med >= TARGET_RATIO
    print(
        f"\nthroughput ratio probe / bare (= time_bare / time_probe): best {ratio_best:.3f}, median "
        f"{ratio_med:.3f}, median of per-round ratios {paired:.3f}"
    )
    print(f"  against bare + length pass: best {loose_best:.3f}, median {loose_med:.3f}")
    print(f"target: ratio >= {TARGET_RATIO} (best and median) -> {'MET' if met else 'NOT MET'}")
    print(f"cpu pressure at end:   {cpu_pressure()}")

    if args.json is not None:
        out = {
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "n": n,
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "cpu_count": os.cpu_count(),
            "device": str(dev),
            "python": platform.python_version(),
            "parameters": n_params,
            "num_texts": len(texts),
            "tokens": real,
            "padded_tokens": padded,
            "timings": {
                k: t.as_dict(real)
                for k, t in (
                    ("bare", t_bare),
                    ("probe", t_probe),
                    ("lengths", t_len),
                    ("bare_lengths", t_bare_len),
                )
            },
            "target_ratio": TARGET_RATIO,
            "ratio_best": ratio_best,
            "ratio_median": ratio_med,
            "ratio_paired_median": paired,
            "ratio_with_lengths_best": loose_best,
            "ratio_with_lengths_median": loose_med,
            "target_met": met,
            "cpu_pressure": cpu_pressure(),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))
        print(f"wrote {args.json}")
    return 0 if met else 2


if __name__ == "__main__":
    sys.exit(main())

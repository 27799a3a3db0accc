"""Benchmark ``posgeom_utils.training.train_classifier`` against a bare PyTorch training loop.

What it measures (one process, CPU, wall-clock, ``time.perf_counter``):

- **bare**: the minimal loop over the same ``PositionalTransformer`` (default vocab 5000, d = 64, 4 heads,
  2 layers, max_len = 32, ``positional="learned"``, 2 classes), the same seeded data (random token ids with
  trailing padding, random labels) and the same batches: ``AdamW(lr, weight_decay)`` as in ``TrainConfig``,
  and per step ``torch.randint(..., generator=g)`` -> index -> forward -> ``F.cross_entropy`` ->
  ``zero_grad`` -> ``backward`` -> ``step`` -> ``loss.item()``.
- **trainer**: ``train_classifier`` with ``TrainConfig(steps, eval_every=steps, checkpoint_dir=None,
  device="cpu")``, i.e. one evaluation at the very end. Its time is reported both including and excluding
  that evaluation: ``posgeom_utils.training.evaluate`` is wrapped (in this process only) with a timer, and
  the in-run evaluation time is subtracted. ``evaluate`` alone on the eval set is timed too, for reference.
- **trainer + ckpt**: the same with ``checkpoint_dir`` (a fresh temporary folder per run, so nothing is
  resumed) and ``checkpoint_every=--checkpoint-every``; ``training._save`` is wrapped with a timer, so the
  cost per checkpoint is reported on its own.
- **attribution** runs (evidence only, the package is not modified):

  - *bare + deterministic*: the bare loop under ``torch.use_deterministic_algorithms(True, warn_only=True)``,
    which ``seed_everything`` (called by ``train_classifier``) switches on process-wide; with it PyTorch
    also fills every new uninitialised tensor with NaN (``torch.utils.deterministic.fill_uninitialized_memory``);
  - *bare + deterministic, no NaN fill*: the same with ``fill_uninitialized_memory = False``;
  - *trainer, seed_everything(deterministic_torch=False)*: ``training.seed_everything`` patched in this
    process so the trainer leaves the deterministic mode off;
  - *trainer, progress bar on*: ``POSGEOM_PROGRESS=1`` with tqdm writing into a buffer.

Every run builds a fresh model after the same ``torch.manual_seed``, so all runs do identical work; the
final weights of bare and trainer are compared to prove it. The deterministic-algorithms state is saved
before and restored after every trainer run, so it never leaks into the bare runs. After one warm-up run of
every variant (``--warmup-steps``), ``--repeats`` rounds run every variant once, in an order rotated each
round (interleaved, so drift hits all alike); best and median over the rounds are reported. A timing whose
median exceeds 1.3x its best is flagged "(noisy)"; the CPU pressure (``/proc/pressure/cpu``) is printed at
the start and the end, since the development machine (2 cores) is shared.

Target (the issue): ``train_classifier``'s step time (no checkpoint, final evaluation excluded) is within
**1.2x** of the bare loop measured in the same run, checked on the best and on the median of the repeats.

Run from the repo root::

    python benchmarks/bench_trainer.py [--steps 200] [--repeats 3] [--threads N] [--json out.json]
"""

from __future__ import annotations

import os

os.environ["POSGEOM_PROGRESS"] = "0"  # before importing posgeom_utils: tqdm disabled in train_classifier

import argparse
import contextlib
import gc
import io
import json
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from posgeom_utils import training  # noqa: E402
from posgeom_utils.training import TrainConfig, evaluate, train_classifier  # noqa: E402
from posgeom_utils.transformer import PositionalTransformer  # noqa: E402

TARGET_RATIO = 1.2
NOISY_SPREAD = 1.3


# --------------------------------------------------------------------------- set-up

def make_data(n: int, vocab: int, max_len: int, num_classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded random ids in [1, vocab) with trailing padding (id 0; lengths 4..max_len) and random labels."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (n, max_len), generator=g)
    lengths = torch.randint(4, max_len + 1, (n,), generator=g)
    ids[torch.arange(max_len)[None, :] >= lengths[:, None]] = 0
    labels = torch.randint(0, num_classes, (n,), generator=g)
    return ids, labels


@dataclass
class Setup:
    args: argparse.Namespace
    X_train: torch.Tensor
    y_train: torch.Tensor
    X_eval: torch.Tensor
    y_eval: torch.Tensor

    def model(self) -> PositionalTransformer:
        a = self.args
        torch.manual_seed(a.seed)
        return PositionalTransformer(a.vocab, d=a.d, n_heads=a.heads, n_layers=a.layers, max_len=a.max_len,
                                     positional="learned", task="classify", num_classes=2)

    def config(self, steps: int, checkpoint_dir: str | None = None) -> TrainConfig:
        a = self.args
        return TrainConfig(steps=steps, batch_size=a.batch_size, lr=a.lr, seed=a.seed, device="cpu",
                           eval_every=steps, checkpoint_dir=checkpoint_dir,
                           checkpoint_every=a.checkpoint_every)


# --------------------------------------------------------------------------- runs

@dataclass
class Run:
    total_s: float
    eval_s: float = 0.0
    save_s: float = 0.0
    saves: int = 0
    state: dict[str, torch.Tensor] = field(default_factory=dict)


def bare_loop(s: Setup, steps: int) -> Run:
    """The minimal loop: same model, same batches, same optimiser; no evaluation."""
    cfg = s.config(steps)
    model = s.model()
    gc.collect()
    t0 = time.perf_counter()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    g = torch.Generator().manual_seed(cfg.seed)
    X, y = s.X_train, s.y_train
    for _ in range(steps):
        idx = torch.randint(len(X), (cfg.batch_size,), generator=g)
        loss = F.cross_entropy(model(X[idx]), y[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss.item()
    return Run(time.perf_counter() - t0, state=model.state_dict())


@contextlib.contextmanager
def deterministic(on: bool, fill: bool = True):
    """Temporarily set torch's deterministic mode (and NaN fill of new tensors); restore afterwards."""
    import torch.utils.deterministic as tud

    old = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
           tud.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(on, warn_only=True)
    tud.fill_uninitialized_memory = fill
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old[0], warn_only=old[1])
        tud.fill_uninitialized_memory = old[2]


@contextlib.contextmanager
def patched(name: str, value: Any):
    old = getattr(training, name)
    setattr(training, name, value)
    try:
        yield
    finally:
        setattr(training, name, old)


def trainer_run(s: Setup, steps: int, ckpt: bool = False, det: bool = True, progress: bool = False) -> Run:
    """``train_classifier`` with the in-run ``evaluate`` and ``_save`` timed by wrappers."""
    timers = {"eval": 0.0, "save": 0.0, "saves": 0}
    real_eval, real_save, real_seed = training.evaluate, training._save, training.seed_everything

    def timed_eval(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return real_eval(*a, **k)
        finally:
            timers["eval"] += time.perf_counter() - t

    def timed_save(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return real_save(*a, **k)
        finally:
            timers["save"] += time.perf_counter() - t
            timers["saves"] += 1

    def seed_no_det(seed: int = 0, deterministic_torch: bool = True) -> Any:
        return real_seed(seed, deterministic_torch=False)

    model = s.model()
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_trainer_")) if ckpt else None
        cfg = s.config(steps, checkpoint_dir=tmp)
        stack.enter_context(deterministic(torch.are_deterministic_algorithms_enabled()))  # restore afterwards
        stack.enter_context(patched("evaluate", timed_eval))
        stack.enter_context(patched("_save", timed_save))
        if not det:
            stack.enter_context(patched("seed_everything", seed_no_det))
        if progress:
            os.environ["POSGEOM_PROGRESS"] = "1"
            stack.callback(os.environ.__setitem__, "POSGEOM_PROGRESS", "0")
            stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
        gc.collect()
        t0 = time.perf_counter()
        train_classifier(model, s.X_train, s.y_train, s.X_eval, s.y_eval, cfg)
        total = time.perf_counter() - t0
    return Run(total, timers["eval"], timers["save"], timers["saves"], model.state_dict())


# --------------------------------------------------------------------------- timing and report

@dataclass
class Timing:
    label: str
    per_step: list[float] = field(default_factory=list)  # seconds per step, one per repeat

    @property
    def best(self) -> float:
        return min(self.per_step)

    @property
    def median(self) -> float:
        return statistics.median(self.per_step)

    @property
    def noisy(self) -> bool:
        return self.median > NOISY_SPREAD * self.best

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "per_step_s": self.per_step, "best_ms": 1e3 * self.best,
                "median_ms": 1e3 * self.median, "noisy": self.noisy}


def cpu_pressure() -> str:
    try:
        return Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return "n/a"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--steps", type=int, default=200, help="training steps per run")
    p.add_argument("--repeats", type=int, default=3, help="interleaved timed rounds (best and median reported)")
    p.add_argument("--warmup-steps", type=int, default=20, help="steps of the untimed warm-up run of each variant")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's default)")
    p.add_argument("--vocab", type=int, default=5000, help="vocabulary size")
    p.add_argument("--d", type=int, default=64, help="model width")
    p.add_argument("--heads", type=int, default=4, help="attention heads")
    p.add_argument("--layers", type=int, default=2, help="Transformer blocks")
    p.add_argument("--max-len", type=int, default=32, help="sequence length (= max_len)")
    p.add_argument("--batch-size", type=int, default=64, help="batch size")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate")
    p.add_argument("--n-train", type=int, default=8192, help="training sequences")
    p.add_argument("--n-eval", type=int, default=1024, help="evaluation sequences")
    p.add_argument("--checkpoint-every", type=int, default=50, help="checkpoint interval of the ckpt run")
    p.add_argument("--seed", type=int, default=0, help="seed for data, model and batches")
    p.add_argument("--no-attribution", action="store_true", help="skip the attribution variants")
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)
    if args.steps < 1 or args.repeats < 1 or args.warmup_steps < 1:
        p.error("--steps, --repeats and --warmup-steps must be >= 1")

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(False)
    X_train, y_train = make_data(args.n_train, args.vocab, args.max_len, 2, args.seed)
    X_eval, y_eval = make_data(args.n_eval, args.vocab, args.max_len, 2, args.seed + 1)
    s = Setup(args, X_train, y_train, X_eval, y_eval)
    n_params = sum(q.numel() for q in s.model().parameters())

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads (os.cpu_count={os.cpu_count()}), "
          f"{platform.python_implementation()} {platform.python_version()}")
    print(f"model: vocab {args.vocab}, d {args.d}, {args.heads} heads, {args.layers} layers, max_len "
          f"{args.max_len}, learned positions, {n_params:,} parameters; batch {args.batch_size}, "
          f"{args.steps} steps, {args.repeats} repeats")
    print(f"cpu pressure at start: {cpu_pressure()}")

    variants: dict[str, tuple[str, Callable[[int], Run]]] = {
        "bare": ("bare PyTorch loop", lambda n: bare_loop(s, n)),
        "trainer": ("trainer (no ckpt)", lambda n: trainer_run(s, n)),
        "ckpt": (f"trainer (ckpt every {args.checkpoint_every})", lambda n: trainer_run(s, n, ckpt=True)),
    }
    if not args.no_attribution:
        variants.update({
            "bare_det": ("bare + deterministic", lambda n: _with(deterministic(True), bare_loop, s, n)),
            "bare_det_nofill": ("bare + deterministic, no NaN fill",
                                lambda n: _with(deterministic(True, fill=False), bare_loop, s, n)),
            "trainer_nodet": ("trainer, deterministic off", lambda n: trainer_run(s, n, det=False)),
            "trainer_progress": ("trainer, progress bar on", lambda n: trainer_run(s, n, progress=True)),
        })

    for _, fn in variants.values():  # warm-up
        fn(args.warmup_steps)

    names = list(variants)
    runs: dict[str, list[Run]] = {k: [] for k in names}
    for r in range(args.repeats):
        order = names[r % len(names):] + names[: r % len(names)]
        for k in order:
            runs[k].append(variants[k][1](args.steps))

    # per-step times: trainer variants with the final evaluation excluded (and, for ckpt, saves included)
    timings: dict[str, Timing] = {}
    for k in names:
        timings[k] = Timing(variants[k][0], [(run.total_s - run.eval_s) / args.steps for run in runs[k]])
    incl = Timing("trainer (no ckpt), eval included", [run.total_s / args.steps for run in runs["trainer"]])
    ckpt_excl = Timing("trainer (ckpt), saves excluded",
                       [(run.total_s - run.eval_s - run.save_s) / args.steps for run in runs["ckpt"]])

    # evaluate() alone on the eval set, on the trained model, deterministic mode off
    model = s.model()
    model.load_state_dict(runs["trainer"][0].state)
    eval_alone = []
    for _ in range(max(3, args.repeats)):
        t0 = time.perf_counter()
        evaluate(model, X_eval, y_eval)
        eval_alone.append(time.perf_counter() - t0)
    eval_inrun = [run.eval_s for run in runs["trainer"]]
    save_each = [run.save_s / run.saves for run in runs["ckpt"] if run.saves]
    saves = runs["ckpt"][0].saves

    # identical work: final weights of bare vs trainer
    bare_state, tr_state = runs["bare"][0].state, runs["trainer"][0].state
    max_diff = max((bare_state[k] - tr_state[k]).abs().max().item() for k in bare_state)

    bare = timings["bare"]
    rows: list[tuple[str, Timing]] = [("bare", bare), ("trainer", timings["trainer"]), ("incl", incl),
                                      ("ckpt", timings["ckpt"]), ("ckpt_excl", ckpt_excl)]
    rows += [(k, timings[k]) for k in names if k not in ("bare", "trainer", "ckpt")]
    print(f"\nper-step time, {args.steps} steps (trainer: final evaluation excluded unless stated)")
    print(f"  {'':40s} {'best ms':>8s} {'median ms':>9s} {'x bare':>7s} {'x bare':>7s}")
    print(f"  {'':40s} {'':>8s} {'':>9s} {'(best)':>7s} {'(med)':>7s}")
    for _, t in rows:
        flag = " (noisy)" if t.noisy else ""
        print(f"  {t.label:40s} {1e3 * t.best:8.3f} {1e3 * t.median:9.3f} {t.best / bare.best:7.3f} "
              f"{t.median / bare.median:7.3f}{flag}")
    print(f"\nfinal evaluation ({len(X_eval)} sequences): in-run best {1e3 * min(eval_inrun):.1f} ms, "
          f"evaluate() alone best {1e3 * min(eval_alone):.1f} ms")
    print(f"checkpoint: {saves} saves per run, best {1e3 * min(save_each):.1f} ms / median "
          f"{1e3 * statistics.median(save_each):.1f} ms per save"
          if save_each else "checkpoint: no saves recorded")
    print(f"identical work: max |bare - trainer| over final weights = {max_diff:.3g}")

    ratio_best = timings["trainer"].best / bare.best
    ratio_med = timings["trainer"].median / bare.median
    met = ratio_best <= TARGET_RATIO and ratio_med <= TARGET_RATIO
    print(f"\ntarget: trainer step time <= {TARGET_RATIO}x bare: best {ratio_best:.3f}x, median {ratio_med:.3f}x "
          f"-> {'MET' if met else 'NOT MET'}")
    print(f"cpu pressure at end:   {cpu_pressure()}")

    if args.json is not None:
        out = {
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "torch": torch.__version__, "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
            "python": platform.python_version(), "parameters": n_params,
            "timings": {k: t.as_dict() for k, t in rows},
            "eval_in_run_s": eval_inrun, "eval_alone_s": eval_alone,
            "checkpoint_saves_per_run": saves, "checkpoint_save_s": save_each,
            "max_abs_weight_diff_bare_vs_trainer": max_diff,
            "target_ratio": TARGET_RATIO, "ratio_best": ratio_best, "ratio_median": ratio_med, "target_met": met,
            "cpu_pressure": cpu_pressure(),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))
        print(f"wrote {args.json}")
    return 0


def _with(ctx: Any, fn: Callable[..., Run], *a: Any) -> Run:
    with ctx:
        return fn(*a)


if __name__ == "__main__":
    sys.exit(main())

"""One helper that sets every seed (chapter: *Positions in real text*, set-up cell)."""

from __future__ import annotations

import os
import random

import numpy as np


def seed_everything(
    seed: int = 0, deterministic_torch: bool = True
) -> np.random.Generator:
    """Seed Python, NumPy and (if installed) PyTorch, and return a fresh NumPy
    ``Generator``.

    ``deterministic_torch`` asks PyTorch for deterministic kernels where they exist
    (``warn_only``, so an operation without one still runs).
    Chapter: every chapter (its set-up cell; first in *Positions in real text*).
    """
    if (
        isinstance(seed, bool)
        or not isinstance(seed, (int, np.integer))
        or not 0 <= seed < 2**63
    ):
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    seed = int(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is in requirements.txt
        pass
    else:
        torch.manual_seed(seed)
        if torch.cuda.is_available():  # pragma: no cover - no GPU in CI
            torch.cuda.manual_seed_all(seed)
        if deterministic_torch:
            torch.use_deterministic_algorithms(True, warn_only=True)
    return np.random.default_rng(seed)

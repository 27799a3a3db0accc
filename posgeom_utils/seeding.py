"""Set every seed (each chapter's set-up cell). Chapter: *Positions in real text*."""

from __future__ import annotations

import os
import random

import numpy as np

from . import checks


def seed_everything(
    seed: int = 0, deterministic_torch: bool = True
) -> np.random.Generator:
    """Seed Python, NumPy and PyTorch, ask for deterministic torch kernels (warn only);
    return a fresh NumPy ``Generator``. Chapter: *Positions in real text*."""
    seed = checks.integer(seed, "seed", 0, 2**63 - 1)
    os.environ["PYTHONHASHSEED"] = str(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    import torch

    torch.manual_seed(seed)
    if torch.cuda.is_available():  # pragma: no cover - no GPU in CI
        torch.cuda.manual_seed_all(seed)
    if deterministic_torch:
        torch.use_deterministic_algorithms(True, warn_only=True)
    return np.random.default_rng(seed)

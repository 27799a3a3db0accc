"""posgeom_utils.seeding.seed_everything."""

from __future__ import annotations

import random

import numpy as np
import pytest

from posgeom_utils.seeding import seed_everything

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _restore_global_state(monkeypatch):
    """seed_everything sets PYTHONHASHSEED and torch's deterministic mode: undo both after each test."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)  # recorded, restored at teardown
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


def draws(rng: np.random.Generator):
    return (random.random(), np.random.rand(3).tolist(), torch.rand(3).tolist(), rng.random(3).tolist())


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**32 + 7, np.int64(3)])
def test_reproducible(seed):
    rng = seed_everything(seed)
    assert isinstance(rng, np.random.Generator)
    first = draws(rng)
    second = draws(seed_everything(seed))
    assert first == second
    if seed < 2**32:  # NumPy's legacy seed is 32-bit: below that every generator is seeded with `seed` itself
        reference = (random.Random(int(seed)).random(), np.random.RandomState(int(seed)).rand(3).tolist(),
                     torch.rand(3, generator=torch.Generator().manual_seed(int(seed))).tolist(),
                     np.random.default_rng(int(seed)).random(3).tolist())
        assert first == reference


def test_sets_hash_seed_and_deterministic_mode():
    import os

    seed_everything(11)
    assert os.environ["PYTHONHASHSEED"] == "11"
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(False)
    seed_everything(11, deterministic_torch=False)
    assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.parametrize("bad", [-1, -(2**40), 1.5, "3", None, True, 2**64])
def test_bad_seed(bad):
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 9223372036854775807\]"):
        seed_everything(bad)

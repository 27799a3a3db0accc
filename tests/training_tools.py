"""Shared by the resume tests (test_training, test_finetune, test_gpu_path): a training run killed mid-way."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from posgeom_utils import training


class TrainingKilled(Exception):
    """Stands for a kill in the middle of training (:func:`killed_at`)."""


@contextmanager
def killed_at(step: int) -> Iterator[None]:
    """``with killed_at(step): train(...)``: the training loop of posgeom_utils.training (``train_classifier``
    and ``finetune``) dies when about to start ``step``, after the checkpoints before it; the block must die
    there (``pytest.raises``), and the loop is restored afterwards."""
    original = training.progress

    def dying(iterable, **kwargs):
        for current in original(iterable, **kwargs):
            if current == step:
                raise TrainingKilled(step)
            yield current

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(training, "progress", dying)
        with pytest.raises(TrainingKilled):
            yield

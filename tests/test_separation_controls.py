"""Controls of the separation chapter (*Do distinct positions get distinct vectors?*): the order-insensitive
SST-2 control task, and two properties of the theorem's setting that its optimiser experiments rely on."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from posgeom_utils.tasks import TokenTask, planted_task, presence_task, shuffle_within
from posgeom_utils.training import TrainConfig, train_classifier
from posgeom_utils.transformer import PositionalTransformer


def _random_task(seed: int, n: int = 200, L: int = 8, V: int = 12) -> TokenTask:
    """Inputs with padding (0) at the end, ids 1..V-1 elsewhere, arbitrary labels."""
    rng = np.random.default_rng(seed)
    X = rng.integers(1, V, (n, L))
    lengths = rng.integers(3, L + 1, n)
    X[np.arange(L)[None, :] >= lengths[:, None]] = 0
    y = rng.integers(0, 2, n)
    t = torch.as_tensor
    return TokenTask(t(X[:150]), t(y[:150]), t(X[150:]), t(y[150:]), V, L, "random")


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_presence_task_is_balanced_and_order_insensitive(seed: int) -> None:
    task = _random_task(seed)
    control = presence_task(task, seed=seed)
    for X, y in ((control.X_train, control.y_train), (control.X_eval, control.y_eval)):
        assert len(y) > 0 and int(y.sum()) * 2 == len(y)  # balanced
        # the label is the presence of one token: some token explains every label
        word = [w for w in range(1, task.vocab_size)
                if np.array_equal((X.numpy() == w).any(1), y.numpy().astype(bool))]
        assert word
    # shuffling every input's real tokens (padding stays at the end) keeps every label
    rng = np.random.default_rng(seed)
    shuffle = lambda X: torch.as_tensor(  # noqa: E731
        np.where((s := shuffle_within(np.where(X.numpy() == 0, -1, X.numpy()), rng)) < 0, 0, s))
    shuffled = TokenTask(shuffle(task.X_train), task.y_train, shuffle(task.X_eval), task.y_eval,
                         task.vocab_size, task.max_len, "shuffled")
    again = presence_task(shuffled, seed=seed)
    assert torch.equal(again.y_train, control.y_train) and torch.equal(again.y_eval, control.y_eval)
    assert not torch.equal(again.X_train, control.X_train)  # the inputs did change


def test_presence_task_refuses_a_constant_label() -> None:
    X = torch.ones(20, 4, dtype=torch.long)  # token 1 everywhere: present in every input
    task = TokenTask(X[:10], torch.zeros(10, dtype=torch.long), X[10:], torch.zeros(10, dtype=torch.long),
                     2, 4, "constant")
    with pytest.raises(ValueError, match="all or none"):
        presence_task(task)


def _spread(table: torch.Tensor) -> float:
    """RMS distance of the rows from their mean."""
    table = table.detach().double()
    return float((table - table.mean(0)).pow(2).sum(1).mean().sqrt())


@pytest.mark.parametrize("seed", range(2))
def test_weight_decay_collapses_a_table_without_positional_signal(seed: int) -> None:
    """'contains a' on a stationary background: the positions carry no signal, and AdamW's weight decay pulls a
    random table's rows together; without weight decay the rows stay spread."""
    task = planted_task("contains", L=8, V=16, num_sequences=400, seed=seed)
    ratios = {}
    for wd in (0.0, 20.0):
        torch.manual_seed(seed)
        net = PositionalTransformer(task.vocab_size, d=8, n_heads=2, n_layers=1, max_len=8)
        start = _spread(net.pos_table)
        train_classifier(net, task.X_train, task.y_train, task.X_eval, task.y_eval,
                         TrainConfig(steps=60, batch_size=32, weight_decay=wd, seed=seed, device="cpu",
                                     eval_every=60, threads=1))
        ratios[wd] = _spread(net.pos_table) / start
    assert ratios[20.0] < 0.5
    assert ratios[0.0] > 2 * ratios[20.0]


def _cyclic_closure(X: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every input under every cyclic shift of its positions, with its label."""
    L = X.shape[1]
    return torch.cat([X.roll(s, dims=1) for s in range(L)]), y.repeat(L)


@pytest.mark.parametrize("seed", range(3))
def test_full_batch_descent_keeps_a_collapsed_table_collapsed_without_order_signal(seed: int) -> None:
    """The theorem's setting without (a) and (b): an exactly collapsed table, a label that ignores order, and a
    training set closed under cyclic shifts. The model is then permutation-equivariant and the data shift-invariant,
    so every row gets the same gradient and full-batch gradient descent (no noise, no weight decay) keeps the rows
    equal. On the order-sensitive task the same start separates."""
    spreads = {}
    for name in ("contains", "precedes"):
        task = planted_task(name, L=6, V=8, num_sequences=64, seed=seed)
        X, y = task.X_train, task.y_train
        if name == "contains":
            X, y = _cyclic_closure(X, y)
        torch.manual_seed(seed)
        net = PositionalTransformer(task.vocab_size, d=8, n_heads=2, n_layers=1, max_len=6).double()
        with torch.no_grad():
            net.pos_table.copy_(net.pos_table[:1].expand_as(net.pos_table))  # exactly collapsed
        optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
        for _ in range(10):
            optimizer.zero_grad()
            F.cross_entropy(net(X), y).backward()
            optimizer.step()
        spreads[name] = _spread(net.pos_table) / float(net.pos_table.detach().norm(dim=1).mean())
    assert spreads["contains"] < 1e-9
    assert spreads["precedes"] > 1e-4

"""posgeom_utils.training: seeded training with periodic evaluation, atomic checkpoints and resume.

The chapters train the compact Transformer on order tasks; these tests use a synthetic one
(does token 1 precede token 2?) that a tiny model with learned positions solves in ~100 steps (without
positions it cannot: the classifier is permutation-invariant, tests/test_transformer.py). They also check
that an interrupted run resumes to the same weights and history, that checkpoints are written atomically,
seeding, the callback, and bad input.
"""

from __future__ import annotations

import os
from dataclasses import asdict

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import posgeom_utils.training as training  # noqa: E402
from posgeom_utils.training import History, TrainConfig, evaluate, train_classifier  # noqa: E402
from posgeom_utils.transformer import PositionalTransformer  # noqa: E402
from training_tools import killed_at  # noqa: E402  (tests/ is on sys.path under pytest)

V, L = 10, 8


def precede_task(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of L tokens from 3..V-1 with one 1 and one 2 at random places; label = (1 comes before 2).

    Both classes have the same bag of tokens, so only positions can separate them.
    """
    g = torch.Generator().manual_seed(seed)
    X = torch.randint(3, V, (n, L), generator=g)
    places = torch.rand(n, L, generator=g).argsort(1)[:, :2]
    rows = torch.arange(n)
    X[rows, places[:, 0]], X[rows, places[:, 1]] = 1, 2
    return X, (places[:, 0] < places[:, 1]).long()


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, ...]:
    X_train, y_train = precede_task(512, seed=0)
    X_eval, y_eval = precede_task(256, seed=1)
    return X_train, y_train, X_eval, y_eval


def model(positional: str = "learned", seed: int = 0) -> PositionalTransformer:
    torch.manual_seed(seed)
    return PositionalTransformer(V, d=32, n_heads=2, n_layers=1, max_len=L, positional=positional)


def config(**kwargs) -> TrainConfig:
    options = dict(steps=40, batch_size=16, lr=3e-3, eval_every=10, checkpoint_every=10, device="cpu")
    options.update(kwargs)
    return TrainConfig(**options)


def same_state(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# --------------------------------------------------------------------------- learning


def test_training_lowers_the_loss(data):
    X_train, y_train, X_eval, y_eval = data
    net = model("learned")
    loss_before, _ = evaluate(net, X_eval, y_eval)
    history = train_classifier(net, X_train, y_train, X_eval, y_eval, config(steps=100, batch_size=32, eval_every=50))
    loss_after, accuracy = evaluate(net, X_eval, y_eval)
    assert loss_after < 0.5 * loss_before
    assert accuracy > 0.7
    assert history.step == [50, 100]
    assert history.eval_loss[-1] == pytest.approx(loss_after)
    assert history.final_accuracy() == pytest.approx(accuracy)
    assert all(np.isfinite(history.train_loss))


def hand_cross_entropy(logits: np.ndarray, targets: np.ndarray) -> tuple[float, float]:
    """Mean -log softmax(logits)[target] and accuracy, by a loop over the scored rows (target != -100)."""
    losses, hits = [], []
    for row, target in zip(logits.reshape(-1, logits.shape[-1]), targets.ravel()):
        if target == -100:
            continue
        top = row.max()
        losses.append(top + np.log(np.sum(np.exp(row - top))) - row[target])
        hits.append(float(np.argmax(row) == target))
    return float(np.mean(losses)), float(np.mean(hits))


def test_evaluate_returns_mean_cross_entropy_and_accuracy(data):
    """Sequence labels, and token labels with -100 (not scored), against a hand log-softmax over every
    scored target; batches that do not divide the data must not change the mean."""
    _, _, X_eval, y_eval = data
    net = model("learned")
    loss, accuracy = evaluate(net, X_eval, y_eval, batch_size=50)
    assert net.training  # evaluate puts the model back in training mode
    with torch.no_grad():
        logits = net.eval()(X_eval).double().numpy()
    expected_loss, expected_accuracy = hand_cross_entropy(logits, y_eval.numpy())
    assert loss == pytest.approx(expected_loss, rel=1e-5)
    assert accuracy == pytest.approx(expected_accuracy)

    torch.manual_seed(1)
    mlm = PositionalTransformer(V, d=16, n_heads=2, n_layers=1, max_len=L, task="mlm").eval()
    X = X_eval[:37]
    rng = np.random.default_rng(0)
    y = torch.as_tensor(np.where(rng.random(X.shape) < 0.3, X.numpy(), -100))
    y[0] = -100  # a sequence with nothing scored; the others have a few scored tokens each
    y[1, 0] = X[1, 0]
    loss, accuracy = evaluate(mlm, X, y, batch_size=8)
    with torch.no_grad():
        logits = mlm(X).double().numpy()
    expected_loss, expected_accuracy = hand_cross_entropy(logits, y.numpy())
    assert loss == pytest.approx(expected_loss, rel=1e-5)
    assert accuracy == pytest.approx(expected_accuracy)


# --------------------------------------------------------------------------- checkpoints and resume


def test_resume_after_interrupt_gives_same_weights(data, tmp_path):
    X_train, y_train, X_eval, y_eval = data
    net_a = model(seed=0)
    history_a = train_classifier(net_a, X_train, y_train, X_eval, y_eval,
                                 config(steps=40, checkpoint_dir=str(tmp_path / "a")))

    dir_b = str(tmp_path / "b")
    first = model(seed=0)
    train_classifier(first, X_train, y_train, X_eval, y_eval, config(steps=20, checkpoint_dir=dir_b))
    assert not same_state(first, net_a)
    net_b = model(seed=0)  # a new process would rebuild the model; resume overwrites its weights
    history_b = train_classifier(net_b, X_train, y_train, X_eval, y_eval, config(steps=40, checkpoint_dir=dir_b))

    assert same_state(net_b, net_a)
    assert asdict(history_b) == asdict(history_a)
    assert history_b.step == [10, 20, 30, 40]
    saved = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=False)
    assert saved["step"] == 40 and saved["config"]["steps"] == 40


def test_resume_after_a_kill_between_evaluations(data, tmp_path):
    """Killed when about to start step 36 (last checkpoint: step 30, last evaluation: step 20), a run resumed
    by a new model instance ends with the uninterrupted run's weights, history (the mean training loss over
    steps 21..40 included) and callback records (``track``, restored from the checkpoint)."""
    X_train, y_train, X_eval, y_eval = data

    def run(folder, track):
        record = lambda step, m: track.append((step, float(sum(p.detach().norm() for p in m.parameters()))))  # noqa: E731
        cfg = config(steps=40, eval_every=20, checkpoint_dir=str(tmp_path / folder))
        net = model(seed=0)
        return net, train_classifier(net, X_train, y_train, X_eval, y_eval, cfg, callback=record, track=track)

    full: list = []
    net_a, history_a = run("a", full)
    with killed_at(36):
        run("b", [])
    assert torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=False)["step"] == 30
    resumed: list = ["stale"]  # a new process: a fresh list, refilled from the checkpoint
    net_b, history_b = run("b", resumed)
    assert same_state(net_b, net_a)
    assert history_b.step == history_a.step == [20, 40]
    assert history_b.eval_loss == history_a.eval_loss
    assert history_b.eval_accuracy == history_a.eval_accuracy
    assert history_b.train_loss == pytest.approx(history_a.train_loss, rel=1e-6)
    assert [s for s, _ in full] == [s for s, _ in resumed] == [0, 20, 40]
    assert np.allclose([v for _, v in resumed], [v for _, v in full])


def test_finished_run_is_not_trained_again(data, tmp_path):
    X_train, y_train, X_eval, y_eval = data
    first = model(seed=0)
    cfg = config(steps=20, checkpoint_dir=str(tmp_path))
    history = train_classifier(first, X_train, y_train, X_eval, y_eval, cfg)
    again = model(seed=5)
    calls = []
    history_again = train_classifier(again, X_train, y_train, X_eval, y_eval, cfg,
                                     callback=lambda step, m: calls.append(step))
    assert same_state(again, first)
    assert asdict(history_again) == asdict(history)
    assert calls == []  # nothing left to do: no step-0 call on a resumed run


def test_checkpoint_is_written_atomically(data, tmp_path, monkeypatch):
    X_train, y_train, X_eval, y_eval = data
    net = model()
    train_classifier(net, X_train, y_train, X_eval, y_eval, config(steps=20, checkpoint_dir=str(tmp_path)))
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.pt"]
    saved = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    assert set(saved) == {"model", "optimizer", "step", "generator", "history", "config", "running", "track"}
    assert saved["step"] == 20
    assert all(torch.equal(saved["model"][k], v) for k, v in net.state_dict().items())
    before = (tmp_path / "checkpoint.pt").read_bytes()

    def broken_save(obj, path, *args, **kwargs):  # dies half-way through writing
        with open(path, "wb") as fh:
            fh.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(training.torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        train_classifier(model(), X_train, y_train, X_eval, y_eval, config(steps=30, checkpoint_dir=str(tmp_path)))
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.pt"]  # no temporary file left behind
    assert (tmp_path / "checkpoint.pt").read_bytes() == before  # the old checkpoint is intact


def test_no_checkpoint_dir_writes_nothing(data, tmp_path, monkeypatch):
    X_train, y_train, X_eval, y_eval = data
    monkeypatch.chdir(tmp_path)
    train_classifier(model(), X_train, y_train, X_eval, y_eval, config(steps=10))
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------- seeding and callback


def test_same_seed_same_result(data):
    X_train, y_train, X_eval, y_eval = data
    runs = []
    for train_seed in (3, 3, 4):
        net = model(seed=0)
        history = train_classifier(net, X_train, y_train, X_eval, y_eval, config(steps=15, seed=train_seed))
        runs.append((net, history))
    (a, ha), (b, hb), (c, hc) = runs
    assert same_state(a, b) and asdict(ha) == asdict(hb)
    assert not same_state(a, c)  # another seed draws other batches
    diff = max((a.state_dict()[k] - c.state_dict()[k]).abs().max().item() for k in a.state_dict())
    assert diff > 1e-4


def test_callback_is_called(data):
    X_train, y_train, X_eval, y_eval = data
    net = model()
    calls: list[tuple[int, int, bool]] = []
    tables: list[torch.Tensor] = []

    def record(step, m):
        calls.append((step, id(m), m.training))
        tables.append(m.positional_table().detach().clone())

    history = train_classifier(net, X_train, y_train, X_eval, y_eval, config(steps=12, eval_every=5),
                               callback=record)
    assert [c[0] for c in calls] == [0, 5, 10, 12] == [0] + history.step
    assert all(c[1] == id(net) for c in calls)
    assert not torch.equal(tables[0], tables[-1])  # the learned table moved during training


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("field, value, match", [
    ("steps", 0, "steps must be an integer >= 1"), ("steps", -3, "steps"), ("batch_size", 0, "batch_size"),
    ("eval_every", 0, "eval_every"), ("checkpoint_every", 0, "checkpoint_every"), ("threads", 0, "threads"),
    ("lr", 0.0, r"lr must be a finite number > 0.*lr="), ("lr", float("nan"), "lr"), ("lr", -1e-3, "lr"),
    ("weight_decay", -0.1, r"weight_decay must be a finite number >= 0.*weight_decay="),
    ("weight_decay", float("inf"), "weight_decay"), ("optimizer", "lion", "optimizer must be one of"),
])
def test_bad_config(field, value, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**{field: value})
    config = TrainConfig(lr=np.float64(5e-5), weight_decay=0)  # NumPy numbers and integers are fine
    assert config.lr == 5e-5 and config.weight_decay == 0


def test_bad_data_or_device_fails_before_training(data):
    X_train, y_train, X_eval, y_eval = data
    empty, no_labels = torch.zeros(0, L, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    calls = []
    for args, match in (((empty, no_labels, X_eval, y_eval), "X_train"),
                        ((X_train, y_train[:-1], X_eval, y_eval), "equal length"),
                        ((X_train, y_train, empty, no_labels), "X_eval")):
        with pytest.raises(ValueError, match=match):
            train_classifier(model(), *args, config(), callback=lambda step, m: calls.append(step))
    with pytest.raises(ValueError, match="device must be"):
        train_classifier(model(), X_train, y_train, X_eval, y_eval, config(device="tpu"))
    assert calls == []


def test_history_final_accuracy_of_empty_history_is_nan():
    assert np.isnan(History().final_accuracy())
    assert History(step=[1], eval_accuracy=[0.75]).final_accuracy() == 0.75


def test_masked_lm_training_with_sgd_lowers_token_loss():
    """Token-level targets (-100 = not scored) and the plain-SGD optimiser of *Are nearby positions encoded nearby?*."""
    import torch

    from posgeom_utils.tasks import masked_task

    rng = np.random.default_rng(0)
    mu = rng.dirichlet(np.full(6, 0.5), size=8)  # position i draws from mu_i
    ids = np.stack([rng.choice(6, size=400, p=m) for m in mu], axis=1)
    task = masked_task(ids, 6, seed=0)
    torch.manual_seed(0)
    net = PositionalTransformer(task.vocab_size, d=16, n_heads=2, n_layers=1, max_len=8, task="mlm")
    before, _ = evaluate(net, task.X_eval, task.y_eval)
    history = train_classifier(net, task.X_train, task.y_train, task.X_eval, task.y_eval,
                               TrainConfig(steps=60, lr=0.5, optimizer="sgd", eval_every=30, threads=1))
    assert history.eval_loss[-1] < before - 0.1


def test_accuracy_interval_adds_the_seed_and_the_evaluation_noise():
    """The held-out accuracy interval of *Why a Transformer needs positions*: Student t over the seeds
    and the binomial error of the shared evaluation set, added in quadrature; one seed: binomial only."""
    from scipy import stats

    from posgeom_utils.training import accuracy_interval

    mean, half = accuracy_interval(np.array([0.8, 0.9, 1.0]), 100)
    seeds = stats.t.ppf(0.975, 2) * 0.1 / np.sqrt(3)
    assert mean == pytest.approx(0.9)
    assert half == pytest.approx(np.hypot(seeds, 1.959964 * np.sqrt(0.09 / 100)))
    assert accuracy_interval([0.75], 400) == pytest.approx((0.75, 1.959964 * np.sqrt(0.75 * 0.25 / 400)))

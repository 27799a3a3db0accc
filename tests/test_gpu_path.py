"""The GPU code path, tested without a GPU (CI has none).

On a GPU the book trains under bfloat16 autocast (``TrainConfig.amp="auto"``) and picks the device with
``select_device("auto")``; the paper profile of ``posgeom run`` is sized for a GPU. These tests exercise that
path on the CPU: ``amp=True`` runs the same autocast code on the CPU (a forward hook checks that the logits
really are bfloat16, so the test fails if autocast silently did nothing), resume under autocast, the
resolution of ``amp`` and ``device``, and the runner's paper profile with ``torch.cuda`` mocked (no chapter is
executed: ``runner._run_one`` is replaced by a recorder). Each test takes about a second.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from posgeom_utils.models import device_name, select_device  # noqa: E402
from posgeom_utils.repro import runner  # noqa: E402
from posgeom_utils.repro.cli import main  # noqa: E402
from posgeom_utils.repro.runner import RunError, run_chapters  # noqa: E402
from posgeom_utils.tasks import planted_task  # noqa: E402
from posgeom_utils.training import AMP_CHOICES, TrainConfig, amp_enabled, evaluate, train_classifier  # noqa: E402
from posgeom_utils.transformer import PositionalTransformer  # noqa: E402
from test_runner import HEADER, cell  # noqa: E402  (tests/ is on sys.path under pytest: the runner tests' fake chapters)
from training_tools import killed_at  # noqa: E402  (tests/ is on sys.path under pytest)

GPU_NAME = "Fake H200 (mocked)"


@pytest.fixture(scope="module")
def task():
    """The order-sensitive planted task (does marker a precede marker b?), short sequences."""
    return planted_task("precedes", L=8, V=8, num_sequences=800, seed=0)


def model(task, positional: str = "learned", seed: int = 0) -> PositionalTransformer:
    torch.manual_seed(seed)
    return PositionalTransformer(task.vocab_size, d=32, n_heads=2, n_layers=1, max_len=task.max_len,
                                 positional=positional)


def config(**kwargs) -> TrainConfig:
    options = dict(steps=120, batch_size=32, lr=3e-3, eval_every=20, checkpoint_every=10, device="cpu",
                   threads=1, amp=True)
    options.update(kwargs)
    return TrainConfig(**options)


def train(task, net, cfg, **kwargs):
    return train_classifier(net, task.X_train, task.y_train, task.X_eval, task.y_eval, cfg, **kwargs)


def same_state(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def record_output_dtypes(net: torch.nn.Module) -> list[tuple[bool, torch.dtype]]:
    """(training mode, logits dtype) of every forward pass of ``net`` from now on."""
    seen: list[tuple[bool, torch.dtype]] = []
    net.register_forward_hook(lambda module, args, out: seen.append((module.training, out.dtype)))
    return seen


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend a CUDA GPU is visible (nothing may actually run on it)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: GPU_NAME)


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """No visible GPU, whatever this machine has."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


# --------------------------------------------------------------------------- amp: the setting and its resolution

def test_amp_default_is_auto_and_accepts_only_its_three_values():
    assert TrainConfig().amp == "auto" and AMP_CHOICES == ("auto", True, False)
    assert [TrainConfig(amp=good).amp for good in AMP_CHOICES] == list(AMP_CHOICES)


@pytest.mark.parametrize("bad", ["yes", "Auto", "bf16", "", 1, 0, None, 1.0])
def test_bad_amp_is_a_clear_error(bad):
    with pytest.raises(ValueError, match=r"amp must be one of 'auto', True, False, got amp="):
        TrainConfig(amp=bad)
    with pytest.raises(ValueError, match="amp must be"):
        amp_enabled(bad, "cpu")


def test_auto_amp_resolves_to_cuda_only(gpu):
    """With a (mocked) GPU, "auto" autocasts on the device select_device("auto") picks, not on the CPU."""
    auto = select_device("auto")
    assert auto == torch.device("cuda")
    assert amp_enabled("auto", auto) is True
    assert amp_enabled("auto", torch.device("cuda", 1)) is True
    assert amp_enabled("auto", "cpu") is False
    assert amp_enabled(True, "cpu") is True and amp_enabled(True, auto) is True
    assert amp_enabled(False, auto) is False and amp_enabled(False, "cpu") is False


# --------------------------------------------------------------------------- bfloat16 autocast on the CPU

def test_bf16_autocast_training_on_cpu_learns_and_really_autocasts(task):
    """amp=True on the CPU: the training forward passes give bfloat16 logits (the evaluation float32), the
    weights stay float32, and the loss is finite and falls. Measured with seeds 0-4 (120 steps): the last
    mean training loss is 0.3 % to 31 % of the first (0.02 for seed 0 used here), eval accuracy 0.92-1.0."""
    net = model(task)
    seen = record_output_dtypes(net)
    history = train(task, net, config())
    training_dtypes = {dtype for mode, dtype in seen if mode}
    eval_dtypes = {dtype for mode, dtype in seen if not mode}
    assert training_dtypes == {torch.bfloat16}, training_dtypes
    assert eval_dtypes == {torch.float32}, eval_dtypes
    assert all(p.dtype == torch.float32 for p in net.parameters())
    assert history.step == [20, 40, 60, 80, 100, 120]
    assert all(math.isfinite(v) for v in history.train_loss + history.eval_loss)
    assert history.train_loss[-1] < 0.5 * history.train_loss[0]
    assert history.final_accuracy() > 0.8
    loss, accuracy = evaluate(net, task.X_eval, task.y_eval)
    assert loss == pytest.approx(history.eval_loss[-1]) and accuracy == history.final_accuracy()


def test_default_amp_on_cpu_stays_float32_and_differs_from_bf16(task):
    """The control: "auto" (the default) on the CPU never autocasts, and its weights differ from a bf16 run's
    (so autocast changes the numbers, and the hook of the test above can tell the two apart)."""
    fp32, bf16 = model(task), model(task)
    seen = record_output_dtypes(fp32)
    train(task, fp32, config(steps=20, amp="auto"))
    train(task, bf16, config(steps=20, amp=True))
    assert {dtype for _, dtype in seen} == {torch.float32}
    assert not same_state(fp32, bf16)


@pytest.mark.parametrize("positional", ["sinusoidal", "rope", "alibi", "none"])
def test_every_positional_mechanism_runs_under_cpu_autocast(task, positional):
    """The attention variants (RoPE rotation, ALiBi bias + padding mask in one attn_mask) under autocast."""
    net = model(task, positional)
    seen = record_output_dtypes(net)
    X = task.X_train[:64].clone()
    X[:8, -2:] = 0  # a few padded rows: the padding mask meets the bfloat16 queries
    history = train_classifier(net, X, task.y_train[:64], task.X_eval[:32], task.y_eval[:32],
                               config(steps=4, eval_every=4, batch_size=16))
    assert {dtype for mode, dtype in seen if mode} == {torch.bfloat16}
    assert all(math.isfinite(v) for v in history.train_loss + history.eval_loss)


# --------------------------------------------------------------------------- resume under autocast

def test_bf16_resume_after_a_kill_gives_the_uninterrupted_run(task, tmp_path):
    """Killed when about to start step 36 (last checkpoint: step 30, last evaluation: step 20), resumed by a
    new model instance: same weights (bit for bit) and history as an uninterrupted bf16 run."""
    cfg = dict(steps=40, eval_every=20, checkpoint_every=10)
    net_a = model(task)
    history_a = train(task, net_a, config(**cfg, checkpoint_dir=str(tmp_path / "a")))

    with killed_at(36):
        train(task, model(task), config(**cfg, checkpoint_dir=str(tmp_path / "b")))
    saved = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=False)
    assert saved["step"] == 30 and saved["config"]["amp"] is True

    net_b = model(task, seed=1)  # a new process; the resume overwrites these weights
    seen = record_output_dtypes(net_b)
    history_b = train(task, net_b, config(**cfg, checkpoint_dir=str(tmp_path / "b")))
    assert {dtype for mode, dtype in seen if mode} == {torch.bfloat16}  # the resumed steps autocast too
    assert same_state(net_b, net_a)
    assert asdict(history_b) == asdict(history_a) and history_b.step == [20, 40]


def test_resume_with_another_amp_setting_is_refused(task, tmp_path):
    """A bf16 checkpoint cannot be finished in float32 (or back): the weights would not be either run's."""
    folder = str(tmp_path / "run")
    train(task, model(task), config(steps=10, checkpoint_dir=folder))
    with pytest.raises(ValueError, match=r"different \['amp'\]"):
        train(task, model(task), config(steps=20, amp="auto", checkpoint_dir=folder))
    with pytest.raises(ValueError, match=r"different \['amp'\]"):
        train(task, model(task), config(steps=20, amp=False, checkpoint_dir=folder))


# --------------------------------------------------------------------------- the device

def test_device_name_describes_the_device(gpu, monkeypatch):
    assert device_name("auto") == device_name("cuda") == f"cuda: {GPU_NAME}"
    assert device_name("cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_name("auto") == "cpu"
    described = device_name("cuda")
    assert described.startswith("unavailable (") and "no CUDA GPU" in described and "device='auto'" in described


@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_without_a_gpu_is_a_clear_error_before_training(task, no_gpu, device):
    """select_device and train_classifier name the device asked for and the fix; nothing trains."""
    with pytest.raises(ValueError, match=rf"device='{device}' was requested but no CUDA GPU is visible: "
                                         r"use device='auto' or 'cpu'"):
        select_device(device)
    net, untouched = model(task), model(task)
    calls = []
    with pytest.raises(ValueError, match=rf"device='{device}'.*device='auto' or 'cpu'"):
        train(task, net, config(device=device), callback=lambda step, m: calls.append(step))
    assert calls == [] and same_state(net, untouched)


# --------------------------------------------------------------------------- the runner's paper profile



@pytest.fixture
def chapters(tmp_path: Path) -> Path:
    """Two fake chapters: ``low_rank`` (a name in the paper profile) declares a device; ``plain`` does not."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "low_rank.md").write_text(HEADER.format(name="low_rank") + cell("""
        profile = "default"
        sample_size = None
        train_steps = 300
        device = "auto"
        """, tags="parameters"))
    (source / "plain.md").write_text(HEADER.format(name="plain") + cell('profile = "default"\nk = 7', tags="parameters"))
    return source


@pytest.fixture
def executed(monkeypatch: pytest.MonkeyPatch) -> list:
    """Record what the runner would execute (plan, common provenance) instead of executing it."""
    calls: list = []

    def record(plan, force, common):
        calls.append((plan, common))
        return True, 0.0, ""

    monkeypatch.setattr(runner, "_run_one", record)
    return calls


@pytest.mark.parametrize("device", ["auto", "cuda", None])
def test_paper_profile_on_a_mocked_gpu_injects_and_records_the_device(chapters, tmp_path, gpu, executed,
                                                                     device):
    """On a GPU the paper profile needs no --cap: its sizes go in uncapped, ``device`` reaches the chapter that
    declares it (not the other), and the GPU's name is the provenance's device_name."""
    lines: list[str] = []
    summary = run_chapters("paper", device=device, out=tmp_path / "out", source_dir=chapters, log=lines.append)
    assert summary.ran == ["low_rank", "plain"] and summary.ok
    plans = {plan.chapter: plan for plan, _ in executed}
    low_rank = plans["low_rank"].parameters
    assert low_rank["profile"] == "paper" and low_rank["train_steps"] == 3000 and low_rank["sample_size"] is None
    assert low_rank.get("device") == device  # None: not injected, the chapter's own "auto" applies
    assert plans["plain"].parameters == {"profile": "paper"}
    assert all(common["device_name"] == f"cuda: {GPU_NAME}" and common["cap"] is None for _, common in executed)
    assert f"device cuda: {GPU_NAME}" in lines[0]


def test_cli_paper_profile_with_device_cuda_on_a_mocked_gpu(chapters, tmp_path, gpu, executed, capsys):
    code = main(["run", "--profile", "paper", "--device", "cuda", "--source-dir", str(chapters),
                 "--out", str(tmp_path / "out")])
    stdout = capsys.readouterr().out
    assert code == 0 and f"device cuda: {GPU_NAME}" in stdout and "2 ran, 0 skipped, 0 failed" in stdout
    assert [plan.parameters.get("device") for plan, _ in executed] == ["cuda", None]


@pytest.mark.parametrize("profile, cap, fix", [
    ("paper", None, "pass --device cpu --cap N"),
    ("paper", 100, "pass --device auto or --device cpu"),
    ("smoke", None, "pass --device auto or --device cpu"),
])
def test_device_cuda_without_a_gpu_fails_before_anything_runs(chapters, tmp_path, no_gpu, executed, profile,
                                                             cap, fix):
    out = tmp_path / "out"
    with pytest.raises(RunError, match="no CUDA GPU is visible") as info:
        run_chapters(profile, device="cuda", cap=cap, out=out, source_dir=chapters, log=lambda line: None)
    assert info.value.argument == "--device" and fix in str(info.value)
    assert executed == [] and not out.exists()


def test_cli_device_cuda_without_a_gpu_exits_2(chapters, tmp_path, no_gpu, executed, capsys):
    try:
        code = main(["run", "--profile", "paper", "--device", "cuda", "--source-dir", str(chapters),
                     "--out", str(tmp_path / "out")])
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    last = captured.err.strip().splitlines()[-1]
    assert code == 2 and not captured.out and executed == [] and not (tmp_path / "out").exists()
    assert last.startswith("posgeom run: error: --device:") and "no CUDA GPU" in last and "--cap" in last

"""posgeom_utils.scale.data_parallel: per-layer probes and fine-tuning, data-parallel
under Accelerate.

Chapter *Beyond one machine*. Two CPU processes are forked (gloo backend, a FileStore
rendezvous: no network port, so concurrent test runs cannot collide) and run everything
once; the tests compare what they returned with the single-process functions run here,
and count the work each process did. The model is a tiny random BERT (hidden 32, 2
layers, dropout 0 so that a fine-tuning step is a deterministic function of its batch)
saved with the packaged tokenizer.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import random
import tempfile
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
accelerate = pytest.importorskip("accelerate")

from posgeom_utils.finetune import finetune  # noqa: E402
from posgeom_utils.probes import positional_hidden_means, token_lengths  # noqa: E402
from posgeom_utils.scale.data_parallel import (  # noqa: E402
    batch_share,
    data_parallel_finetune,
    data_parallel_hidden_means,
    main,
)
from posgeom_utils.training import TrainConfig  # noqa: E402

TINY = dict(
    vocab_size=30522,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
# positions probed, fine-tuning length, the single-process batch
N, MAX_LEN, B = 12, 8, 16
#: 2 processes with batch B/2 vs 1 with batch B: float32 gradients summed in another
#: order, amplified a little by Adam over 10 steps (observed max |dW| ~3e-6, |d loss|
#: ~5e-8); the negative control moves weights ~1e-2
#: and losses ~1e-2
WEIGHT_TOL, LOSS_TOL = 3e-5, 1e-5


def _reset_accelerate() -> None:
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def launch(fn, args: tuple, nprocs: int = 2, timeout: float = 180.0) -> None:
    """``accelerate.debug_launcher`` with a deadline: fork ``nprocs`` CPU processes
    joined by gloo through a FileStore, run ``fn(*args)`` in each; a failure re-raises
    here, a hang fails the test after ``timeout``."""
    from accelerate.utils import patch_environment
    from accelerate.utils.launch import PrepareForLaunch
    from torch.multiprocessing import start_processes

    with (
        tempfile.NamedTemporaryFile() as rdv,
        patch_environment(
            world_size=nprocs,
            master_addr="127.0.0.1",
            accelerate_mixed_precision="no",
            accelerate_debug_rdv_file=rdv.name,
            accelerate_use_cpu="yes",
            gloo_socket_ifname="lo",
            omp_num_threads=1,
            tokenizers_parallelism="false",
        ),
    ):  # one thread per process: 2 processes on 2 cores, no oversubscription
        context = start_processes(
            PrepareForLaunch(fn, debug=True),
            args=args,
            nprocs=nprocs,
            start_method="fork",
            join=False,
        )
        deadline = time.monotonic() + timeout
        while not context.join(timeout=1.0):
            if time.monotonic() > deadline:
                for process in context.processes:
                    process.kill()
                pytest.fail(
                    f"the {nprocs}-process run did not finish within {timeout:.0f} s"
                )


# --------------------------------------------------------------------------------- data


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, tokenizer):
    path = tmp_path_factory.mktemp("tiny-bert-dp")
    torch.manual_seed(0)
    transformers.BertModel(transformers.BertConfig(**TINY)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_bert(tiny_dir):
    return transformers.BertModel.from_pretrained(tiny_dir).eval()


@pytest.fixture(scope="module")
def texts():
    """21 texts: with batch 4 the last of 6 batches is short (it goes to process 1)."""
    rng = random.Random(0)
    words = (
        "the a cat dog sat on mat quickly running blue house river mountain under over "
        "because although extraordinary tokenization of and"
    ).split()
    return [
        " ".join(rng.choice(words) for _ in range(rng.randint(1, 14)))
        for _ in range(21)
    ]


def good_bad(n: int, seed: int) -> tuple[list[str], list[int]]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    return [
        " ".join(["good" if y else "bad"] * int(rng.integers(1, 5))) for y in labels
    ], labels.tolist()


@pytest.fixture(scope="module")
def data():
    """48 training texts; 15 eval texts (shared 8 / 7 between two processes)."""
    return good_bad(48, seed=0), good_bad(15, seed=1)


def config(batch_size: int, **kwargs) -> TrainConfig:
    options = dict(
        steps=10, batch_size=batch_size, lr=1e-3, eval_every=5, device="cpu", threads=1
    )
    options.update(kwargs)
    return TrainConfig(**options)


@pytest.fixture
def accelerator():
    """A one-process CPU Accelerator; the shared Accelerate state and the thread count
    are restored after."""
    from accelerate import Accelerator

    threads = torch.get_num_threads()
    _reset_accelerate()
    yield Accelerator(cpu=True)
    _reset_accelerate()
    torch.set_num_threads(threads)


# ------------------------------------------------------------------ the two-process run


@contextlib.contextmanager
def counted(owner, name: str, size):
    """While open, ``owner.name`` also appends ``size(*args)`` of each call to the
    yielded list (the work a process did: used in forked processes, the parent is
    untouched)."""
    real, calls = getattr(owner, name), []

    def wrapper(*args, **kwargs):
        calls.append(size(*args))
        return real(*args, **kwargs)

    setattr(owner, name, wrapper)
    try:
        yield calls
    finally:
        setattr(owner, name, real)


def _batch_sizes(model, tokenizer, batches, *rest) -> list[int]:
    return [len(batch) for batch in batches]


def _rows(module, input_ids, *rest) -> tuple[str, int]:
    return ("train" if module.training else "eval"), len(input_ids)


def _worker(tiny_dir, texts, data, out_dir):
    """Runs in each forked process: probes and fine-tunes, result pickled per rank, with
    the work this process did (texts per probed batch; rows per training and per
    evaluation forward pass)."""
    from accelerate import Accelerator

    import posgeom_utils.probes as probes
    from posgeom_utils.finetune import PretrainedClassifier

    _reset_accelerate()  # the fork copied this process's Accelerate singletons
    torch.set_num_threads(1)
    acc = Accelerator(cpu=True)
    model = transformers.BertModel.from_pretrained(tiny_dir).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_dir)
    (texts_train, y_train), (texts_eval, y_eval) = data
    result = dict(rank=acc.process_index, processes=acc.num_processes, work={})
    for b in (4, 64):  # 64: one batch in all, process 1 gets no text
        with counted(probes, "layer_sums", _batch_sizes) as calls:
            result[f"probe{b}"] = data_parallel_hidden_means(
                model, tokenizer, texts, N, batch_size=b, accelerator=acc
            )
        result["work"][f"probe{b}"] = [n for call in calls for n in call]
    result["probe4_global"] = data_parallel_hidden_means(
        model, tokenizer, texts, N, batch_size=4, centre="global", accelerator=acc
    )
    # global batch B; global batch 2B (the negative control); one eval text, so that
    # process 1 has no row to evaluate
    runs = {
        f"ft{B // 2}": (config(B // 2), texts_eval, y_eval),
        f"ft{B}": (config(B), texts_eval, y_eval),
        "ft_one_eval": (
            config(B // 2, steps=2, eval_every=1),
            texts_eval[:1],
            y_eval[:1],
        ),
    }
    for key, (settings, t_eval, y) in runs.items():
        with counted(PretrainedClassifier, "forward", _rows) as calls:
            m, history, records = data_parallel_finetune(
                tiny_dir,
                texts_train,
                y_train,
                t_eval,
                y,
                settings,
                max_len=MAX_LEN,
                accelerator=acc,
            )
        result[key] = dict(
            state={k: v.clone() for k, v in m.state_dict().items()},
            history=history,
            records=records,
            dropout_seed=m.seed,
        )
        result["work"][key] = {
            kind: [n for k, n in calls if k == kind] for kind in ("train", "eval")
        }
    with open(os.path.join(out_dir, f"rank{acc.process_index}.pkl"), "wb") as fh:
        pickle.dump(result, fh)


@pytest.fixture(scope="module")
def two(tiny_dir, texts, data, tmp_path_factory):
    """What the two processes returned, by rank."""
    out = tmp_path_factory.mktemp("dp-out")
    launch(_worker, (tiny_dir, texts, data, str(out)))
    results = []
    for rank in (0, 1):
        with open(out / f"rank{rank}.pkl", "rb") as fh:
            results.append(pickle.load(fh))
    return results


@pytest.fixture(scope="module")
def single_finetune(tiny_dir, data):
    (texts_train, y_train), (texts_eval, y_eval) = data
    return finetune(
        tiny_dir, texts_train, y_train, texts_eval, y_eval, config(B), max_len=MAX_LEN
    )


def max_weight_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


# --------------------------------------------------------------------------- (a) probes


@pytest.mark.parametrize("b, centre", [(4, "none"), (64, "none"), (4, "global")])
def test_two_process_probe_equals_single_process(
    two, tiny_bert, tokenizer, texts, b, centre
):
    """Same batches, same float32 forward passes: only the order of the float64
    additions (and the means * counts round trip) differs, so the means agree to float64
    rounding (observed: 0 to 3e-17)."""
    key = f"probe{b}" + ("_global" if centre == "global" else "")
    single = positional_hidden_means(
        tiny_bert, tokenizer, texts, N, batch_size=b, device="cpu", centre=centre
    )
    for result in two:
        merged = result[key]
        assert result["processes"] == 2 and merged.params["processes"] == 2
        assert merged.centre == centre and merged.params["num_texts"] == len(texts)
        np.testing.assert_array_equal(merged.counts, single.counts)
        np.testing.assert_allclose(merged.means, single.means, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(
        two[0][key].means, two[1][key].means
    )  # every process returns the same


def test_one_share_alone_is_not_the_result(two, tiny_bert, tokenizer, texts):
    """Negative control: what process 0 probes on its own differs from the merged
    result."""
    share = batch_share(token_lengths(tokenizer, texts, N, True), 4, 0, 2)
    alone = positional_hidden_means(
        tiny_bert, tokenizer, [texts[i] for i in share], N, batch_size=4, device="cpu"
    )
    merged = two[0]["probe4"]
    assert alone.counts.sum() < merged.counts.sum()
    k = min(alone.n, merged.n)
    assert np.abs(alone.means[:, :k] - merged.means[:, :k]).max() > 1e-3


def test_batch_share_is_a_balanced_partition(tokenizer, texts):
    lengths = token_lengths(tokenizer, texts, N, True)
    order = np.argsort(lengths, kind="stable")
    batches = [order[s : s + 4] for s in range(0, len(texts), 4)]
    shares = [batch_share(lengths, 4, r, 2) for r in range(2)]
    # disjoint, complete
    assert sorted(np.concatenate(shares).tolist()) == list(range(len(texts)))
    np.testing.assert_array_equal(shares[0], np.concatenate(batches[0::2]))
    np.testing.assert_array_equal(
        shares[1], np.concatenate(batches[1::2])
    )  # ends with the short batch
    assert all(
        np.all(np.diff(lengths[s]) >= 0) for s in shares
    )  # probing a share alone keeps its batches
    work = [lengths[s].sum() for s in shares]
    assert max(work) <= 1.5 * min(work)
    # more processes than batches: nothing to do
    assert len(batch_share(lengths, 64, 1, 2)) == 0


# ---------------------------------------------------------------------- (b) fine-tuning


def test_two_processes_with_half_batch_follow_the_single_process_run(
    two, single_finetune
):
    model, history, records = single_finetune
    reference = model.state_dict()
    for result in two:
        run = result[f"ft{B // 2}"]
        assert run["history"].step == history.step == [5, 10]
        np.testing.assert_allclose(
            run["history"].train_loss, history.train_loss, rtol=0, atol=LOSS_TOL
        )
        np.testing.assert_allclose(
            run["history"].eval_loss, history.eval_loss, rtol=0, atol=LOSS_TOL
        )
        assert run["history"].eval_accuracy == history.eval_accuracy
        assert max_weight_diff(run["state"], reference) < WEIGHT_TOL
        assert [s for s, _ in run["records"]] == [s for s, _ in records] == [0, 5, 10]
        for (_, table), (_, expected) in zip(run["records"], records):
            np.testing.assert_allclose(table, expected, rtol=0, atol=WEIGHT_TOL)
    runs = [result[f"ft{B // 2}"]["state"] for result in two]
    assert max_weight_diff(*runs) == 0  # in sync
    # training moved the weights
    assert np.abs(records[-1][1] - records[0][1]).max() > 30 * WEIGHT_TOL


def test_negative_control_global_batch_2B_does_not_match(two, single_finetune):
    """Per-process batch B on 2 processes trains on 2B texts a step: clearly another
    run."""
    model, history, _ = single_finetune
    run = two[0][f"ft{B}"]
    assert max_weight_diff(run["state"], model.state_dict()) > 30 * WEIGHT_TOL
    assert (
        np.abs(np.subtract(run["history"].train_loss, history.train_loss)).max()
        > 100 * LOSS_TOL
    )


def test_each_process_draws_its_own_dropout_masks(two):
    seeds = [result[f"ft{B // 2}"]["dropout_seed"] for result in two]
    # process 0 draws the single-process masks
    assert seeds[0] == 0 and seeds[1] != seeds[0]


def test_each_process_does_its_share_of_the_work(two, texts):
    """The wrappers share the work rather than each process doing all of it (which the
    equality tests alone would not notice): probe batches 0, 2, 4 and 1, 3, 5 (the short
    one last); per training step 8 rows of the global batch of 16 each; per evaluation 8
    and 7 of the 15 eval texts."""
    work = [result["work"] for result in two]
    assert [w["probe4"] for w in work] == [[4, 4, 4], [4, 4, 1]]
    # one batch: process 1 idles
    assert [w["probe64"] for w in work] == [[len(texts)], []]
    assert [w[f"ft{B // 2}"]["train"] for w in work] == [[B // 2] * 10] * 2
    assert [w[f"ft{B // 2}"]["eval"] for w in work] == [[8, 8], [7, 7]]
    assert [w["ft_one_eval"]["eval"] for w in work] == [[1, 1], []]


def test_fewer_eval_texts_than_processes(two, tiny_dir, data):
    """One eval text on two processes: process 1 evaluates nothing and still gets the
    metrics."""
    (texts_train, y_train), (texts_eval, y_eval) = data
    settings = config(B, steps=2, eval_every=1)
    model, history, _ = finetune(
        tiny_dir,
        texts_train,
        y_train,
        texts_eval[:1],
        y_eval[:1],
        settings,
        max_len=MAX_LEN,
    )
    for result in two:
        run = result["ft_one_eval"]
        assert run["history"].step == history.step == [1, 2]
        assert run["history"].eval_accuracy == history.eval_accuracy
        np.testing.assert_allclose(
            run["history"].eval_loss, history.eval_loss, rtol=0, atol=LOSS_TOL
        )
        assert max_weight_diff(run["state"], model.state_dict()) < WEIGHT_TOL


# ---------------------------------------------------------------------- (c) one process


@pytest.mark.parametrize("centre", ["none", "global"])
def test_one_process_probe_is_the_single_process_probe(
    accelerator, tiny_bert, tokenizer, texts, centre
):
    expected = positional_hidden_means(
        tiny_bert, tokenizer, texts, N, batch_size=4, device="cpu", centre=centre
    )
    result = data_parallel_hidden_means(
        tiny_bert,
        tokenizer,
        texts,
        N,
        batch_size=4,
        centre=centre,
        accelerator=accelerator,
    )
    np.testing.assert_array_equal(result.means, expected.means)
    np.testing.assert_array_equal(result.counts, expected.counts)
    assert result.params == dict(expected.params, processes=1)


def test_one_process_finetune_is_finetune(accelerator, single_finetune, tiny_dir, data):
    (texts_train, y_train), (texts_eval, y_eval) = data
    model, history, records = data_parallel_finetune(
        tiny_dir,
        texts_train,
        y_train,
        texts_eval,
        y_eval,
        config(B),
        max_len=MAX_LEN,
        accelerator=accelerator,
    )
    ref_model, ref_history, ref_records = single_finetune
    reference = ref_model.state_dict()
    state = model.state_dict()
    assert state.keys() == reference.keys() and all(
        torch.equal(state[k], reference[k]) for k in state
    )
    assert history == ref_history
    assert [s for s, _ in records] == [s for s, _ in ref_records]
    for (_, a), (_, b) in zip(records, ref_records):
        np.testing.assert_array_equal(a, b)


def test_command_line_probe(
    accelerator, tiny_dir, tiny_bert, tokenizer, texts, tmp_path
):
    file, out = tmp_path / "texts.txt", tmp_path / "out" / "means.npz"
    file.write_text("\n".join(texts) + "\n")
    argv = f"probe --model {tiny_dir} --texts {file} --positions {N} --batch-size 4 "
    argv += f"--out {out}"
    assert main(argv.split(), accelerator=accelerator) == 0
    expected = positional_hidden_means(
        tiny_bert, tokenizer, texts, N, batch_size=4, device="cpu"
    )
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["means"], expected.means)
        np.testing.assert_array_equal(saved["counts"], expected.counts)
        provenance = json.loads(str(saved["provenance"]))
    assert json.loads(out.with_suffix(".json").read_text()) == provenance
    assert (
        provenance["processes"] == 1
        and provenance["n"] == N
        and provenance["device"] == "cpu"
    )
    assert (
        provenance["texts"]["num_texts"] == len(texts)
        and provenance["model"] == tiny_dir.name
    )


def test_command_line_finetune(accelerator, tiny_dir, data, tmp_path, capsys):
    for name, (t, y) in zip(("train.tsv", "eval.tsv"), data):
        rows = "".join(f"{a}\t{b}\n" for a, b in zip(t, y))
        (tmp_path / name).write_text("sentence\tlabel\n" + rows)
    result = tmp_path / "ft.json"
    argv = f"finetune --model {tiny_dir} --texts {tmp_path / 'train.tsv'} --eval-texts "
    argv += f"{tmp_path / 'eval.tsv'} --steps 4 --eval-every 2 --batch-size 8 "
    argv += f"--max-len {MAX_LEN} "
    assert (
        main((argv + f"--lr 1e-3 --out {result}").split(), accelerator=accelerator) == 0
    )
    saved = json.loads(result.read_text())
    assert (
        saved["history"]["step"] == [2, 4] and saved["provenance"]["global_batch"] == 8
    )
    with np.load(result.with_suffix(".npz")) as tables:
        assert tables["steps"].tolist() == [0, 2, 4]
        assert tables["tables"].shape == (3, MAX_LEN, 32)
    assert "wrote" in capsys.readouterr().out


COMMON_FLAGS = (
    "--model --dataset --split --data-dir --texts --sample --seed --batch-size"
)
COMMAND_FLAGS = {
    "probe": "--positions --centre --no-special-tokens",
    "finetune": "--eval-texts --eval-sample --steps --lr --weight-decay --optimizer "
    "--eval-every --max-len --save-weights",
}


@pytest.mark.parametrize("command", COMMAND_FLAGS)
def test_command_line_flags(command, capsys):
    """Each command takes the flags README.md and the chapter document, and only its
    own (the parser is built from a table)."""
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    text = capsys.readouterr().out
    assert exit_info.value.code == 0
    for flag in f"{COMMON_FLAGS} --out {COMMAND_FLAGS[command]}".split():
        assert f"{flag} " in text or f"{flag}\n" in text, flag
    other = "finetune" if command == "probe" else "probe"
    assert not any(flag in text for flag in COMMAND_FLAGS[other].split())
    form = "one text a line" if command == "probe" else "'text<TAB>label' lines"
    assert form in " ".join(text.split())


# ------------------------------------------------------------------------ (d) bad input


def test_bad_input(
    accelerator, tiny_dir, tiny_bert, tokenizer, texts, data, tmp_path, monkeypatch
):
    """What the data-parallel paths check themselves, and some of the single-process
    functions' checks reached through them."""
    with pytest.raises(ValueError, match="pass its tokenizer"):
        data_parallel_hidden_means(tiny_bert, None, texts, N, accelerator=accelerator)
    with pytest.raises(TypeError, match="accelerate.Accelerator"):
        data_parallel_hidden_means(tiny_bert, tokenizer, texts, N, accelerator="cuda")
    with pytest.raises(ValueError, match="checkpoint_dir"):
        data_parallel_finetune(
            tiny_dir,
            *data[0],
            *data[1],
            config(4, checkpoint_dir=str(tmp_path)),
            accelerator=accelerator,
        )
    with pytest.raises(ValueError, match="rank"):
        batch_share([3, 4], 1, rank=2, processes=2)
    # the single-process functions' own checks, reached through the wrappers
    with pytest.raises(ValueError, match=r"n must be an integer in \[1, 64\]"):
        data_parallel_hidden_means(
            tiny_bert, tokenizer, texts, 65, accelerator=accelerator
        )
    with pytest.raises(ValueError, match="centre"):
        data_parallel_hidden_means(
            tiny_bert, tokenizer, texts, N, centre="local", accelerator=accelerator
        )
    with pytest.raises(ValueError, match="y_train"):
        data_parallel_finetune(
            tiny_dir,
            data[0][0],
            [5] * len(data[0][0]),
            *data[1],
            config(4),
            accelerator=accelerator,
        )
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"WORLD_SIZE=2.*Accelerator\(cpu=True\)"):
        data_parallel_hidden_means(
            tiny_bert, tokenizer, texts, N, accelerator=accelerator
        )


def test_command_line_refuses_fp16(accelerator, tiny_dir, data, tmp_path, capsys):
    """``accelerate launch --mixed_precision fp16``: fine-tuning autocasts to bf16 or
    not at all."""

    class FP16:
        mixed_precision = "fp16"

        def __getattr__(self, name):
            return getattr(accelerator, name)

    file = tmp_path / "train.tsv"
    file.write_text("".join(f"{t}\t{y}\n" for t, y in zip(*data[0])))
    argv = f"finetune --model {tiny_dir} --texts {file} --eval-texts {file} "
    argv += f"--out {tmp_path / 'o.json'}"
    with pytest.raises(SystemExit) as exit_info:
        main(argv.split(), accelerator=FP16())
    assert (
        exit_info.value.code == 2
        and "--mixed_precision fp16" in capsys.readouterr().err
    )
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["probe", "--texts", "{file}", "--positions", "65", "--out", "{out}"],
            "--positions: n must be an integer in [1, 64]",
        ),
        (["probe", "--positions", "4", "--out", "{out}"], "exactly one of --dataset"),
        (
            ["probe", "--texts", "{missing}", "--positions", "4", "--out", "{out}"],
            "is not a file",
        ),
        (
            ["finetune", "--texts", "{file}", "--out", "{out}"],
            "--texts needs --eval-texts",
        ),
    ],
)
def test_command_line_bad_input(accelerator, tiny_dir, tmp_path, capsys, argv, message):
    file = tmp_path / "texts.txt"
    file.write_text("a text\n")
    values = dict(
        file=str(file), out=str(tmp_path / "o.npz"), missing=str(tmp_path / "none.txt")
    )
    with pytest.raises(SystemExit) as exit_info:
        main(
            [a.format(**values) for a in argv] + ["--model", str(tiny_dir)],
            accelerator=accelerator,
        )
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o.npz").exists()

"""posgeom_utils.scale.data_parallel: per-layer probes and fine-tuning, data-parallel
under Accelerate (chapter *Beyond one machine*).

This file, run by torchrun on 2 CPU processes (gloo), probes and fine-tunes once; the
tests compare what the processes returned with the single-process functions run here,
and count the work each process did. The model is a tiny random BERT (hidden 32, 2
layers, dropout 0 so that a fine-tuning step is a deterministic function of its batch)
saved with the packaged tokenizer. The chapter's example script runs the same way.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import random
import re
import subprocess
import sys
from pathlib import Path

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
#: ~5e-8); the negative control moves weights ~1e-2 and losses ~1e-2
WEIGHT_TOL, LOSS_TOL = 3e-5, 1e-5
ROOT = Path(__file__).resolve().parents[1]


def torchrun(cwd: Path, *args: str) -> str:
    """Run the script ``args[0]`` (with its arguments) on 2 CPU processes under
    torchrun, one thread each; its standard output."""
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env["GLOO_SOCKET_IFNAME"] = "lo"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node", "2", *args]
    done = subprocess.run(
        command,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _reset_accelerate() -> None:
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()


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


def make_texts() -> list[str]:
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


def make_data() -> tuple:
    """48 training texts; 15 eval texts (shared 8 / 7 between two processes)."""
    return good_bad(48, seed=0), good_bad(15, seed=1)


@pytest.fixture(scope="module")
def texts():
    return make_texts()


@pytest.fixture(scope="module")
def data():
    return make_data()


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
    yielded list (the work a process did)."""
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


def _worker(tiny_dir: str, out_dir: str) -> None:
    """Runs in each torchrun process: probes and fine-tunes, result pickled per rank,
    with the work this process did (texts per probed batch; rows per training and per
    evaluation forward pass)."""
    from accelerate import Accelerator

    import posgeom_utils.probes as probes
    from posgeom_utils.finetune import PretrainedClassifier

    acc = Accelerator(cpu=True)
    model = transformers.BertModel.from_pretrained(tiny_dir).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_dir)
    texts, ((texts_train, y_train), (texts_eval, y_eval)) = make_texts(), make_data()
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
            # accelerator=None: the wrapper creates one (the same shared state)
            m, history, records = data_parallel_finetune(
                tiny_dir, texts_train, y_train, t_eval, y, settings, max_len=MAX_LEN
            )
        state = {k: v.clone() for k, v in m.state_dict().items()}
        result[key] = dict(state=state, history=history, records=records, seed=m.seed)
        result["work"][key] = {
            kind: [n for k, n in calls if k == kind] for kind in ("train", "eval")
        }
    with open(os.path.join(out_dir, f"rank{acc.process_index}.pkl"), "wb") as fh:
        pickle.dump(result, fh)


@pytest.fixture(scope="module")
def two(tiny_dir, tmp_path_factory):
    """What the two processes returned, by rank."""
    out = tmp_path_factory.mktemp("dp-out")
    torchrun(out, __file__, str(tiny_dir), str(out))
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
    runs = [result[f"ft{B // 2}"] for result in two]
    assert max_weight_diff(runs[0]["state"], runs[1]["state"]) == 0  # in sync
    # process 0 draws the single-process dropout masks, process 1 its own
    assert runs[0]["seed"] == 0 and runs[1]["seed"] != 0
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
    train, one = (texts_train, y_train), (texts_eval[:1], y_eval[:1])
    model, history, _ = finetune(tiny_dir, *train, *one, settings, max_len=MAX_LEN)
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
    options = dict(batch_size=4, centre=centre, accelerator=accelerator)
    result = data_parallel_hidden_means(tiny_bert, tokenizer, texts, N, **options)
    np.testing.assert_array_equal(result.means, expected.means)
    np.testing.assert_array_equal(result.counts, expected.counts)
    assert result.params == dict(expected.params, processes=1)


def test_one_process_finetune_is_finetune(accelerator, single_finetune, tiny_dir, data):
    model, history, records = data_parallel_finetune(
        tiny_dir,
        *data[0],
        *data[1],
        config(B),
        max_len=MAX_LEN,
        accelerator=accelerator,
    )
    ref_model, ref_history, ref_records = single_finetune
    assert max_weight_diff(model.state_dict(), ref_model.state_dict()) == 0
    assert history == ref_history
    assert [s for s, _ in records] == [s for s, _ in ref_records]
    for (_, a), (_, b) in zip(records, ref_records):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------------ (d) bad input


def test_bad_input(
    accelerator, tiny_dir, tiny_bert, tokenizer, texts, data, tmp_path, monkeypatch
):
    """What the data-parallel paths check themselves, and some of the single-process
    functions' checks reached through them."""
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
    labels = [5] * len(data[0][0])
    with pytest.raises(ValueError, match="y_train"):
        data_parallel_finetune(
            tiny_dir, data[0][0], labels, *data[1], config(4), accelerator=accelerator
        )
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"WORLD_SIZE=2.*Accelerator\(cpu=True\)"):
        data_parallel_hidden_means(
            tiny_bert, tokenizer, texts, N, accelerator=accelerator
        )


# ------------------------------------------------------------------ (e) the book's script


def test_the_books_script_on_two_processes(
    tiny_dir, tiny_bert, tokenizer, data, tmp_path, monkeypatch
):
    """The example script of *Beyond one machine*, taken from the chapter's source and
    launched with torchrun on 2 CPU processes (a tiny model, 2 steps, SST-2 files of the
    good/bad texts): it writes the single-process means."""
    text = (ROOT / "book" / "scale_out.md").read_text()
    section = text.split("## Data-parallel probes and fine-tuning")[1]
    section = section.split("\n## ")[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, "the section shows one python script"
    (tmp_path / "dp_sst2.py").write_text(blocks[0])
    (tmp_path / "sst2").mkdir()
    for name, (t, y) in zip(("train.tsv", "dev.tsv"), data):
        rows = "".join(f"{a}\t{b}\n" for a, b in zip(t, y))
        (tmp_path / "sst2" / name).write_text("sentence\tlabel\n" + rows)
    monkeypatch.setenv("POSGEOM_DATA_DIR", str(tmp_path))
    out = torchrun(tmp_path, "dp_sst2.py", str(tiny_dir), "48", "2")
    assert "2 processes: accuracy" in out
    single = positional_hidden_means(tiny_bert, tokenizer, data[0][0], 64, device="cpu")
    with np.load(tmp_path / "dp_sst2.npz") as saved:
        np.testing.assert_array_equal(saved["counts"], single.counts)
        np.testing.assert_allclose(saved["means"], single.means, rtol=1e-10, atol=1e-12)


if __name__ == "__main__":  # under torchrun, from the fixture `two`
    _worker(*sys.argv[1:])

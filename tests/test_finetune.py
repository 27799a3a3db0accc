"""posgeom_utils.finetune: a pre-trained encoder + linear head, fine-tuned while its position table is recorded.

Chapter *Do distinct positions get distinct vectors?* fine-tunes all-MiniLM-L6-v2 and tracks its learned
position embeddings. These tests use a tiny random BERT (hidden size 32, one layer, 64 positions) saved to a
temporary folder with the packaged tokenizer, so that loading by path works offline and training is quick.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from posgeom_utils.finetune import PretrainedClassifier, encode_texts, finetune  # noqa: E402
from posgeom_utils.models import load_model  # noqa: E402
from posgeom_utils.seeding import seed_everything  # noqa: E402
from posgeom_utils.training import TrainConfig, evaluate  # noqa: E402
from training_tools import killed_at  # noqa: E402  (tests/ is on sys.path under pytest)

TINY = dict(
    vocab_size=30522,
    hidden_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
)
MAX_LEN = 8


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, tokenizer):
    """A tiny random BERT (learned absolute positions, dropout 0.1) with the packaged tokenizer."""
    path = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    transformers.BertModel(transformers.BertConfig(**TINY)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def rope_dir(tmp_path_factory, tokenizer):
    """A tiny random RoFormer: BERT-like, but positions are rotary (no learned table)."""
    path = tmp_path_factory.mktemp("tiny-roformer")
    torch.manual_seed(0)
    transformers.RoFormerModel(transformers.RoFormerConfig(**TINY)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def good_bad(n: int, seed: int) -> tuple[list[str], list[int]]:
    """Separable texts: label 1 is made of 'good', label 0 of 'bad' (1-4 words)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    texts = [" ".join(["good" if y else "bad"] * int(rng.integers(1, 5))) for y in labels]
    return texts, labels.tolist()


def config(**kwargs) -> TrainConfig:
    options = dict(
        steps=40, batch_size=16, lr=1e-3, eval_every=10, checkpoint_every=10, device="cpu"
    )
    options.update(kwargs)
    return TrainConfig(**options)


def classifier(path, seed: int = 0) -> PretrainedClassifier:
    """The classifier finetune builds before training (same head initialisation)."""
    encoder = load_model(path, device="cpu")
    seed_everything(seed)
    return PretrainedClassifier(encoder, num_classes=2, seed=seed)


# --------------------------------------------------------------------------- model and encoding


def test_forward_shapes_and_position_table(tiny_dir, tokenizer):
    model = classifier(tiny_dir).eval()
    ids, mask = encode_texts(["good movie", "a bad , bad film", "ok"], tokenizer, MAX_LEN)
    assert ids.shape == mask.shape == (3, MAX_LEN) and ids.dtype == mask.dtype == torch.long
    logits = model(ids, mask)
    assert logits.shape == (3, 2) and torch.isfinite(logits).all()
    table = model.position_table()
    assert table.shape == (64, 32) and table.dtype == np.float64
    weight = model.encoder.embeddings.position_embeddings.weight
    np.testing.assert_array_equal(table, weight.detach().double().numpy())
    np.testing.assert_array_equal(model.position_table(5), table[:5])
    table[0, 0] += 1.0  # a copy: writing to it leaves the model alone
    assert model.position_table()[0, 0] != table[0, 0]


def test_encode_texts_keeps_special_tokens_and_pads(tokenizer):
    ids, mask = encode_texts(
        ["good", "one two three four five six seven eight nine"], tokenizer, MAX_LEN
    )
    cls, sep, pad = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id
    assert (ids[:, 0] == cls).all()
    assert ids[0, :3].tolist() == [cls, tokenizer.convert_tokens_to_ids("good"), sep]
    assert (ids[0, 3:] == pad).all() and mask[0].tolist() == [1, 1, 1] + [0] * (MAX_LEN - 3)
    assert ids[1, -1] == sep and mask[1].all()  # truncated to max_len, [SEP] kept


def test_derived_mask_equals_explicit_mask(tiny_dir, tokenizer):
    model = classifier(tiny_dir).eval()
    texts = ["good", "bad bad", "a longer text with more words"]
    ids, mask = encode_texts(texts, tokenizer, MAX_LEN)
    assert torch.equal(model.attention_mask_for(ids), mask)
    with torch.no_grad():
        torch.testing.assert_close(model(ids), model(ids, mask), rtol=0, atol=0)
        # brute force: each text alone, unpadded, mean of its last hidden states, then W h + b
        W, b = model.head.weight, model.head.bias
        for row, text in enumerate(texts):
            alone = tokenizer(text, truncation=True, max_length=MAX_LEN, return_tensors="pt")
            h = model.encoder(**alone).last_hidden_state[0].mean(0)
            torch.testing.assert_close(model(ids)[row], W @ h + b, rtol=1e-5, atol=1e-5)
        # padding is invisible: more padding, same logits
        longer, _ = encode_texts(texts, tokenizer, 2 * MAX_LEN)
        torch.testing.assert_close(model(longer), model(ids), rtol=1e-5, atol=1e-6)


def test_dropout_is_active_and_reproducible(tiny_dir, tokenizer):
    """Training passes differ (dropout on), but the n-th pass is the same for the same seed and counter:
    that is what makes a resumed fine-tuning run end with the same weights."""
    model = classifier(tiny_dir).train()
    ids, _ = encode_texts(["good good", "bad"], tokenizer, MAX_LEN)
    with torch.no_grad():
        first, second = model(ids), model(ids)
        assert not torch.equal(first, second)
        assert int(model.train_forwards) == 2
        model.train_forwards.zero_()
        torch.manual_seed(123)  # the global generator does not matter
        torch.testing.assert_close(model(ids), first, rtol=0, atol=0)
        model.eval()
        model(ids)
    assert int(model.train_forwards) == 1  # evaluation does not count
    assert "train_forwards" in model.state_dict()


# --------------------------------------------------------------------------- fine-tuning


@pytest.fixture(scope="module")
def good_bad_data():
    return good_bad(48, seed=0), good_bad(32, seed=1)


@pytest.fixture(scope="module")
def finetuned(tiny_dir, good_bad_data):
    (texts_train, y_train), (texts_eval, y_eval) = good_bad_data
    return finetune(tiny_dir, texts_train, y_train, texts_eval, y_eval, config(), max_len=MAX_LEN)


def test_finetune_lowers_the_eval_loss(finetuned, tiny_dir, tokenizer, good_bad_data):
    model, history, _ = finetuned
    _, (texts_eval, y_eval) = good_bad_data
    X_eval, _ = encode_texts(texts_eval, tokenizer, MAX_LEN)
    loss_before, _ = evaluate(classifier(tiny_dir), X_eval, torch.tensor(y_eval))
    assert history.step == [10, 20, 30, 40]
    assert history.eval_loss[-1] < 0.5 * loss_before
    assert history.final_accuracy() == 1.0
    assert isinstance(model, PretrainedClassifier)


def test_finetune_records_position_tables(finetuned, tiny_dir):
    model, history, records = finetuned
    assert [step for step, _ in records] == [0, *history.step]
    assert all(t.shape == (MAX_LEN, 32) and t.dtype == np.float64 for _, t in records)
    initial = (
        load_model(tiny_dir, device="cpu")
        .embeddings.position_embeddings.weight.detach()
        .double()
        .numpy()
    )
    np.testing.assert_array_equal(records[0][1], initial[:MAX_LEN])  # step 0: the pre-trained table
    np.testing.assert_array_equal(
        records[-1][1], model.position_table(MAX_LEN)
    )  # last: the final table
    moved = [np.abs(t - records[0][1]).max() for _, t in records]
    assert moved[0] == 0 and moved[-1] > 1e-3  # position embeddings get gradients and move
    # positions never used (>= max_len) get no gradient: with no weight decay AdamW leaves them exactly as is
    np.testing.assert_array_equal(model.position_table()[MAX_LEN:], initial[MAX_LEN:])


def test_record_every_and_n_record(tiny_dir, good_bad_data):
    (texts_train, y_train), (texts_eval, y_eval) = good_bad_data
    _, history, records = finetune(
        tiny_dir,
        texts_train,
        y_train,
        texts_eval,
        y_eval,
        config(steps=6),
        max_len=MAX_LEN,
        record_every=3,
        n_record=20,
    )
    assert history.step == [3, 6]
    assert [s for s, _ in records] == [0, 3, 6] and records[0][1].shape == (20, 32)


def test_resume_after_a_kill_gives_the_same_run(tiny_dir, good_bad_data, tmp_path):
    """Uninterrupted vs killed when about to start step 36 (last checkpoint 30, last evaluation 20) and
    resumed by a new call: same weights, history and records (dropout included)."""
    (texts_train, y_train), (texts_eval, y_eval) = good_bad_data
    args = (texts_train, y_train, texts_eval, y_eval)
    model_a, history_a, records_a = finetune(
        tiny_dir, *args, config(eval_every=20, checkpoint_dir=str(tmp_path / "a")), max_len=MAX_LEN
    )
    cfg_b = config(eval_every=20, checkpoint_dir=str(tmp_path / "b"))
    with killed_at(36):
        finetune(tiny_dir, *args, cfg_b, max_len=MAX_LEN)
    assert torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=False)["step"] == 30
    model_b, history_b, records_b = finetune(tiny_dir, *args, cfg_b, max_len=MAX_LEN)

    np.testing.assert_array_equal(model_b.position_table(), model_a.position_table())
    sa, sb = model_a.state_dict(), model_b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert history_b.step == history_a.step == [20, 40]
    assert history_b.eval_loss == history_a.eval_loss
    assert [s for s, _ in records_b] == [s for s, _ in records_a] == [0, 20, 40]
    for (_, ta), (_, tb) in zip(records_a, records_b):
        np.testing.assert_array_equal(ta, tb)


def test_resume_with_other_n_record_is_rejected(tiny_dir, good_bad_data, tmp_path):
    (texts_train, y_train), (texts_eval, y_eval) = good_bad_data
    cfg = config(steps=4, eval_every=2, checkpoint_dir=str(tmp_path))
    finetune(tiny_dir, texts_train, y_train, texts_eval, y_eval, cfg, max_len=MAX_LEN)
    with pytest.raises(ValueError, match="n_record"):
        finetune(
            tiny_dir, texts_train, y_train, texts_eval, y_eval, cfg, max_len=MAX_LEN, n_record=4
        )


# --------------------------------------------------------------------------- bad input


def test_bad_input_is_refused(tiny_dir, rope_dir, tokenizer, good_bad_data):
    """Each check of prepare_finetune (which data_parallel_finetune shares), named by its parameter."""
    (texts_train, y_train), (texts_eval, y_eval) = good_bad_data
    data = dict(texts_train=texts_train, y_train=y_train, texts_eval=texts_eval, y_eval=y_eval)
    cases = [
        (dict(texts_train=[], y_train=[]), "texts_train"),
        (dict(texts_eval=[], y_eval=[]), "texts_eval"),
        (dict(y_train=[1, 0]), "one label per text"),
        (dict(y_train=[2] * 48), r"0\.\.1"),
        (dict(max_len=65), "max_len=65"),
        (dict(model_name=rope_dir), "no learned absolute position"),
    ]
    for change, match in cases:
        args = dict(model_name=tiny_dir, **data, config=config(steps=2), max_len=MAX_LEN)
        with pytest.raises(ValueError, match=match):
            finetune(**{**args, **change})
    with pytest.raises(TypeError, match="TrainConfig"):
        finetune(tiny_dir, **data, config={"steps": 2})
    with pytest.raises(ValueError, match="max_len"):
        encode_texts(["good"], tokenizer, 0)

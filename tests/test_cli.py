"""``posgeom stress`` and the ``posgeom`` parser (posgeom_utils.repro.cli): JSON, the table,
tiny random checkpoints, errors, help."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from posgeom_utils.models import DEFAULT_MODEL
from posgeom_utils.repro.cli import main

WORDS = ["the", "a", "this", "that", "good", "bad", "film", "movie", "story", "actor", "plot", "was", "is", "very", "quite", "not", "really", "funny", "dull", "long", "short", "great", "awful", "and", "but", "with", "without"]


@pytest.fixture(scope="module")
def text_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """~200 seeded sentences of 3 to 14 simple words, one per line, and blank lines (skipped)."""
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 15)))) + "." for _ in range(200)]
    path = tmp_path_factory.mktemp("cli") / "texts.txt"
    path.write_text("\n".join(lines[:100] + ["", "  "] + lines[100:]) + "\n", encoding="utf-8")
    return path


def run_cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors and --help
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def stress_json(model: str, corpus: Path, capsys, *extra: str) -> dict:
    argv = ["stress", "--model", model, "--corpus", str(corpus), "--n", "16", "--min-count", "5", "--json"]
    code, out, err = run_cli([*argv, *extra], capsys)
    assert code == 0, err
    return json.loads(out)


def check_table(info: dict) -> dict[str, dict]:
    table = info["table"]
    for name, row in table.items():
        assert math.isfinite(row["raw stress"]) and 0.0 <= row["violation rate"] <= 1.0, name
        assert row["fitted stress"] <= row["raw stress"] + 1e-9, name
    assert [name.split(" (")[0] for name in list(table)[-2:]] == ["MDS optimum", "sinusoidal"]
    return table


def test_packaged_model_json(text_file: Path, capsys):
    info = stress_json(DEFAULT_MODEL, text_file, capsys)
    assert info["texts"] == 200 and 3 <= info["n"] <= 16 and len(info["support"]) == info["n"]
    assert min(info["support"]) >= 5 and 1 <= info["effective_rank"] <= info["n"]
    table = check_table(info)
    assert info["mechanism"] == "learned absolute table" and info["width"] == 384
    # d = 384 >= n - 1: the MDS optimum reproduces D_H exactly, and so its violation rate
    mds = table["MDS optimum (d=384)"]
    assert mds["raw stress"] < 1e-8 and mds["fitted stress"] < 1e-8
    assert mds["violation rate"] == pytest.approx(info["violation_rate"], abs=1e-12)
    assert table["learned (model)"]["rank"] <= info["n"] - 1


def test_text_table(text_file: Path, capsys):
    argv = ["--model", DEFAULT_MODEL, "--corpus", str(text_file), "--n", "12", "--min-count", "5", "--policy", "drop"]
    code, out, _ = run_cli(["stress", *argv], capsys)
    assert code == 0
    assert all(words in out for words in ("raw stress", "learned (model)", "MDS optimum", "sinusoidal", "support"))


def _save_tiny(kind: str, path: Path) -> Path:
    import transformers as tf

    from posgeom_utils.models import load_tokenizer

    common = {"vocab_size": 30522, "num_hidden_layers": 1, "num_attention_heads": 2, "hidden_size": 32,
              "intermediate_size": 64}
    if kind == "gpt2":
        model = tf.GPT2Model(tf.GPT2Config(vocab_size=30522, n_embd=32, n_layer=1, n_head=2, n_positions=64))
    elif kind == "bert":
        model = tf.BertModel(tf.BertConfig(max_position_embeddings=64, **common))
    elif kind == "llama":  # RoPE: built from the config alone, no weights needed
        model = tf.LlamaConfig(max_position_embeddings=64, rope_theta=500.0, **common)
    else:  # bloom: ALiBi
        model = tf.BloomConfig(vocab_size=30522, hidden_size=32, n_layer=1, n_head=2)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    load_tokenizer().save_pretrained(path)
    return path


@pytest.mark.parametrize("kind, mechanism", [("gpt2", "learned absolute table"), ("bert", "learned absolute table"),
                                             ("llama", "RoPE"), ("bloom", "ALiBi")])
def test_tiny_checkpoints(kind: str, mechanism: str, text_file: Path, tmp_path: Path, capsys):
    import torch

    torch.manual_seed(0)
    info = stress_json(str(_save_tiny(kind, tmp_path / kind)), text_file, capsys)
    table = check_table(info)
    assert info["mechanism"] == mechanism and info["width"] == 32 and len(table) == 3
    if mechanism == "ALiBi":  # linear in i: perfectly monotone
        assert next(iter(table.values()))["violation rate"] == 0.0


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--corpus", "no-such-corpus"], "--corpus"),
        (["--n", "0"], "--n"),
        (["--min-count", "0"], "--min-count"),
        (["--model", "/no/such/model-folder"], "--model"),
        (["--model", "nobody/no-such-model"], "--model"),
    ],
)
def test_errors_exit_2(argv: list[str], needle: str, text_file: Path, capsys):
    base = {"--model": DEFAULT_MODEL, "--corpus": str(text_file), "--n": "16", "--min-count": "5"}
    base.update(dict(zip(argv[::2], argv[1::2])))
    code, out, err = run_cli(["stress", *[x for kv in base.items() for x in kv]], capsys)
    assert code == 2 and out == ""
    assert needle in err and len(err.strip().splitlines()) == 1


def test_empty_text_file(tmp_path: Path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n", encoding="utf-8")
    code, _, err = run_cli(["stress", "--model", DEFAULT_MODEL, "--corpus", str(empty)], capsys)
    assert code == 2 and "--corpus" in err and "no text" in err


def test_help(capsys):
    code, out, _ = run_cli(["--help"], capsys)
    assert code == 0 and all(command in out for command in ("stress", "run", "count"))
    for command in ("stress", "count", "run"):
        code, out, _ = run_cli([command, "--help"], capsys)
        assert code == 0 and "examples:" in out and "--model" in out


def test_stress_view_corpus_removes_the_moved_sep(tmp_path, capsys):
    """``--view corpus`` on texts longer than n: the last position is no longer [SEP]."""
    path = tmp_path / "long.txt"
    rng = np.random.default_rng(2)
    path.write_text("".join(" ".join(rng.choice(WORDS, size=30)) + "\n" for _ in range(60)))
    info = {view: stress_json(DEFAULT_MODEL, path, capsys, "--n", "12", "--view", view) for view in ("model", "corpus")}
    assert info["model"]["violation_rate"] != info["corpus"]["violation_rate"]

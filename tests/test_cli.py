"""``posgeom stress`` and the ``posgeom`` parser (posgeom_utils.repro.cli): JSON rows, the table,
tiny random checkpoints, the plot, errors, help."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from posgeom_utils.models import DEFAULT_MODEL
from posgeom_utils.repro.cli import main

WORDS = (
    "the a this that good bad film movie story actor plot was is very quite not really funny dull "
    "long short great awful and but with without".split()
)


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


def check_rows(info: dict) -> dict[str, dict]:
    rows = {r["kind"]: r for r in info["rows"]}
    for row in info["rows"]:
        for key in ("raw_stress", "fitted_stress", "violation_rate"):
            assert math.isfinite(row[key]), (row["encoding"], key)
        assert row["fitted_stress"] <= row["raw_stress"] + 1e-9
        assert 0.0 <= row["violation_rate"] <= 1.0
    assert "mds" in rows and "sinusoidal" in rows
    return rows


def test_packaged_model_json(text_file: Path, capsys):
    info = stress_json(DEFAULT_MODEL, text_file, capsys)
    c = info["corpus"]
    assert c["texts"] == 200 and 3 <= c["n"] <= 16 and len(c["support"]) == c["n"]
    assert min(c["support"]) >= 5 and 1 <= c["effective_rank"] <= c["n"]
    rows = check_rows(info)
    learned = rows["learned absolute table"]
    assert learned["width"] == 384 == info["width"]
    # d = 384 >= n - 1: the MDS optimum reproduces D_H exactly
    assert rows["mds"]["raw_stress"] < 1e-8 and rows["mds"]["fitted_stress"] < 1e-8


def test_text_table(text_file: Path, capsys):
    argv = ["--model", DEFAULT_MODEL, "--corpus", str(text_file), "--n", "12", "--min-count", "5", "--policy", "drop"]
    code, out, _ = run_cli(["stress", *argv], capsys)
    assert code == 0
    assert all(words in out for words in ("raw stress", "learned (model)", "MDS optimum", "sinusoidal"))


def _save_tiny(kind: str, path: Path) -> Path:
    import transformers as tf

    from posgeom_utils.models import load_tokenizer

    common = dict(vocab_size=30522, num_hidden_layers=1, num_attention_heads=2, hidden_size=32,
                  intermediate_size=64)
    if kind == "gpt2":
        config = tf.GPT2Config(vocab_size=30522, n_embd=32, n_layer=1, n_head=2, n_positions=64)
        model = tf.GPT2Model(config)
    elif kind == "roberta":
        config = tf.RobertaConfig(max_position_embeddings=64, pad_token_id=1, **common)
        model = tf.RobertaModel(config)
    elif kind == "bert":
        config = tf.BertConfig(max_position_embeddings=64, **common)
        model = tf.BertModel(config)
    elif kind == "llama":  # RoPE: built from the config alone, no weights needed
        config = tf.LlamaConfig(max_position_embeddings=64, rope_theta=500.0, **common)
        model = None
    else:  # bloom: ALiBi
        config = tf.BloomConfig(vocab_size=30522, hidden_size=32, n_layer=1, n_head=2)
        model = None
    path.mkdir(parents=True, exist_ok=True)
    (model or config).save_pretrained(path)
    load_tokenizer().save_pretrained(path)
    return path


@pytest.mark.parametrize("kind", ["gpt2", "roberta", "bert"])
def test_tiny_learned_checkpoints(kind: str, text_file: Path, tmp_path: Path, capsys):
    import torch

    torch.manual_seed(0)
    info = stress_json(str(_save_tiny(kind, tmp_path / kind)), text_file, capsys)
    rows = check_rows(info)
    assert rows["learned absolute table"]["width"] == 32 == info["width"]


@pytest.mark.parametrize("kind, mechanism, width", [("llama", "RoPE", 32), ("bloom", "ALiBi", 2)])
def test_rope_and_alibi_from_config(
    kind: str, mechanism: str, width: int, text_file: Path, tmp_path: Path, capsys
):
    info = stress_json(str(_save_tiny(kind, tmp_path / kind)), text_file, capsys)
    rows = check_rows(info)
    assert info["mechanism"] == mechanism and rows[mechanism]["width"] == width
    if mechanism == "ALiBi":  # linear in i: perfectly monotone
        assert rows["ALiBi"]["violation_rate"] == 0.0


def test_plot_writes_png(text_file: Path, tmp_path: Path, capsys):
    png = tmp_path / "fig.png"
    info = stress_json(DEFAULT_MODEL, text_file, capsys, "--plot", str(png))
    assert info["plot"] == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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


def test_usage_errors(capsys):
    code, _, err = run_cli([], capsys)
    assert code == 2 and "stress" in err
    code, _, err = run_cli(["stress", "--corpus", "sst2"], capsys)
    assert code == 2 and "--model" in err


def test_help(capsys):
    code, out, _ = run_cli(["--help"], capsys)
    assert code == 0 and all(command in out for command in ("stress", "run", "count"))
    for command in ("stress", "count"):  # run --help: tests/test_runner.py
        code, out, _ = run_cli([command, "--help"], capsys)
        assert code == 0 and "examples:" in out and "--model" in out


def test_stress_view_corpus_removes_the_moved_sep(tmp_path, capsys):
    """``--view corpus`` on texts longer than n: the last position is no longer [SEP]."""
    path = tmp_path / "long.txt"
    rng = np.random.default_rng(2)
    path.write_text("".join(" ".join(rng.choice(WORDS, size=30)) + "\n" for _ in range(60)))
    info = {view: stress_json(DEFAULT_MODEL, path, capsys, "--n", "12", "--view", view) for view in ("model", "corpus")}
    assert info["corpus"]["corpus"]["view"] == "corpus"
    assert info["model"]["corpus"]["violation_rate"] != info["corpus"]["corpus"]["violation_rate"]

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
    argv = ["stress", "--model", model, "--corpus", str(corpus), "--n", "16", "--min-count", "5", "--json",
            "--replicates", "0"]
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
    info = stress_json(DEFAULT_MODEL, text_file, capsys, "--geometry", "plugin")
    assert info["geometry"].startswith("plug-in")
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
    argv = ["--model", DEFAULT_MODEL, "--corpus", str(text_file), "--n", "12", "--min-count", "5", "--policy", "drop",
            "--replicates", "5"]
    code, out, _ = run_cli(["stress", *argv], capsys)
    assert code == 0
    assert all(words in out for words in ("raw stress", "learned (model)", "MDS optimum", "sinusoidal", "support"))
    assert "geometry: corrected Hellinger" in out and "bootstrap over 5 resamples" in out
    assert out.count("[") >= 6  # an interval beside each raw and fitted stress


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


def test_corrected_geometry_is_the_default_with_intervals(text_file: Path, capsys):
    """The corrected geometry (the book's) unless --geometry plugin; every interval holds its estimate."""
    corrected = stress_json(DEFAULT_MODEL, text_file, capsys, "--replicates", "20")
    plugin = stress_json(DEFAULT_MODEL, text_file, capsys, "--replicates", "20", "--geometry", "plugin")
    assert corrected["geometry"].startswith("corrected") and "20 resamples" in corrected["intervals"]
    assert corrected["violation_rate"] != plugin["violation_rate"]  # another geometry, not a relabelling
    for info in (corrected, plugin):
        for name, row in info["table"].items():
            for column in ("raw stress", "fitted stress"):
                low, high = row[f"{column} low"], row[f"{column} high"]
                assert low <= row[column] <= high and low < high, (name, column)
    # the noise correction leaves negative eigenvalues: full-width MDS cannot reproduce it exactly
    assert corrected["negative_mass"] > 0 and corrected["table"]["MDS optimum (d=384)"]["raw stress"] > 1e-6


def _save_table(P: np.ndarray, path: Path) -> str:
    """``P`` saved as ``path`` in its suffix's format; the ``--encoding`` argument that reads it."""
    import torch

    if path.suffix == ".npy":
        np.save(path, P)
    elif path.suffix == ".csv":
        np.savetxt(path, P, delimiter=",")
    elif path.suffix == ".npz":
        np.savez(path, table=P, other=P[:2])
        return f"{path}:table"
    else:
        torch.save({"pos.weight": torch.tensor(P), "bias": torch.zeros(3)}, path)
        return f"{path}:pos.weight"
    return str(path)


def test_own_table_in_every_format(text_file: Path, tmp_path: Path, capsys):
    """``--encoding`` scores the same table the same way from .npy, .csv, .npz and .pt (rows beyond n unused)."""
    P = np.random.default_rng(3).normal(size=(20, 6))
    rows = {}
    for suffix in (".npy", ".csv", ".npz", ".pt"):
        info = stress_json(DEFAULT_MODEL, text_file, capsys, "--encoding", _save_table(P, tmp_path / f"t{suffix}"))
        name, row = next(iter(info["table"].items()))
        assert name.startswith(f"t{suffix}") and info["mechanism"].startswith("your table")
        assert info["width"] == 6 and list(info["table"])[1:] == ["MDS optimum (d=6)", "sinusoidal (d=6)"]
        rows[suffix] = row
    for suffix in (".csv", ".npz", ".pt"):
        assert rows[suffix] == pytest.approx(rows[".npy"], rel=1e-6), suffix
    # the scores are the table's own: its first n rows, not a re-ranked copy
    info = stress_json(DEFAULT_MODEL, text_file, capsys, "--encoding", _save_table(P[::-1].copy(), tmp_path / "r.npy"))
    assert next(iter(info["table"].values()))["raw stress"] != rows[".npy"]["raw stress"]


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda d: np.save(d / "a.npy", np.ones((5, 4))) or d / "a.npy", "5 rows < --n 16"),
        (lambda d: d / "missing.npy", "no such file"),
        (lambda d: (d / "a.txt").write_text("1,2\n") and d / "a.txt", "unknown kind"),
        (lambda d: np.savez(d / "b.npz", x=np.ones((20, 2)), y=np.ones((20, 2))) or d / "b.npz", "FILE:KEY"),
        (lambda d: (d / "h.csv").write_text("a,b\n1,2\n") and d / "h.csv", "--encoding"),
        (lambda d: np.save(d / "nan.npy", np.full((20, 3), np.nan)) or d / "nan.npy", "NaN or inf"),
        (lambda d: np.save(d / "v.npy", np.ones(20)) or d / "v.npy", "2-D"),
    ],
)
def test_bad_tables_exit_2_before_counting(make, needle: str, tmp_path: Path, capsys, monkeypatch):
    """A table that cannot be scored is one line naming --encoding, before the corpus is read."""
    import posgeom_utils.repro.cli as cli

    monkeypatch.setattr(cli, "_corpus", lambda args: pytest.fail("the corpus was read"))
    argv = ["stress", "--model", DEFAULT_MODEL, "--corpus", "sst2", "--n", "16", "--encoding", str(make(tmp_path))]
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "--encoding" in err and needle in err, err


def test_positions_left_out_are_said(text_file: Path, capsys):
    """--n beyond what --min-count texts reach: a note says how many positions were scored and why."""
    info = stress_json(DEFAULT_MODEL, text_file, capsys, "--n", "64")
    assert info["n"] < 64 == info["n_asked"]
    assert f"positions {info['n']}.." in info["note"] and "--min-count 5" in info["note"]
    assert "note" not in stress_json(DEFAULT_MODEL, text_file, capsys, "--n", "8")


def test_version_and_defaults_in_help(capsys):
    """``posgeom --version``; every option with a default shows it in --help."""
    from posgeom_utils import __version__
    from posgeom_utils.repro.cli import build_parser

    code, out, _ = run_cli(["--version"], capsys)
    assert code == 0 and out.strip() == f"posgeom {__version__}"
    commands = build_parser()._subparsers._group_actions[0].choices
    for name, parser in commands.items():
        text = " ".join(parser.format_help().split())
        for action in parser._actions:
            if action.default not in (None, False, "==SUPPRESS==") and action.option_strings != ["-h", "--help"]:
                assert f"(default: {action.default})" in text, (name, action.dest)


def test_messages_use_the_command_words():
    """API argument names in a message read as the options of the command."""
    from posgeom_utils.repro.cli import cli_words

    said = cli_words("a line without text_field='text': pass model_name=None, or min_count=k (n=128, n x V)")
    assert said == "a line without --text-field 'text': pass --model None, or --min-count k (--n 128, n x V)"
    assert cli_words("--min-count 3 and min_count") == "--min-count 3 and --min-count"


def test_ctrl_c_is_one_line(capsys, monkeypatch):
    """KeyboardInterrupt anywhere in a command: one line on stderr, exit code 130, no traceback."""
    import posgeom_utils.repro.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_corpus", interrupted)
    code, out, err = run_cli(["stress", "--model", DEFAULT_MODEL, "--corpus", "sst2"], capsys)
    assert code == 130 and err == "posgeom stress: interrupted\n" and out == ""


def test_relative_paths_are_resolved_where_the_command_runs(tmp_path: Path, monkeypatch, capsys):
    """$POSGEOM_DATA_DIR / $POSGEOM_CACHE_DIR relative: absolute before the command (and its chapters) run."""
    import os

    import posgeom_utils.repro.cli as cli

    seen = {}
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("POSGEOM_DATA_DIR", "../data")
    monkeypatch.setenv("POSGEOM_CACHE_DIR", "cache")
    def corpus(args):
        seen.update(os.environ)
        raise cli.UsageError("stop here")

    monkeypatch.setattr(cli, "_corpus", corpus)
    assert run_cli(["stress", "--model", DEFAULT_MODEL, "--corpus", "sst2"], capsys)[0] == 2
    assert seen["POSGEOM_DATA_DIR"] == str(tmp_path / "../data")
    assert seen["POSGEOM_CACHE_DIR"] == str(tmp_path / "cache")

"""Nothing silent, nothing lost (the bad-input table of docs/command-line.md): texts counted once per line,
damaged shard and corpus files named with their line, damaged cache entries and checkpoints named and
recomputed, no guessed distance matrices or NaN tables, profiles that bring their sizes, outputs with the
user's umask, output places checked before any work, results printed when a late write fails, Ctrl-C during ``posgeom run`` recorded. Chapter: *Reproduction ledger*."""

from __future__ import annotations

import argparse
import gzip
import json
import stat
from pathlib import Path

import numpy as np
import pytest

from posgeom_utils import cache
from posgeom_utils.cache import read_or_discard, write_json
from posgeom_utils.corpus import LOCAL_FILES, load_corpus
from posgeom_utils.encodings import alibi, lowrank_parameter_count, random_encoding, sinusoidal
from posgeom_utils.geometry import best_scale, hellinger_distances, monotonicity_violation_rate
from posgeom_utils.marginals import PositionalMarginals, positional_marginals
from posgeom_utils.models import DEFAULT_MODEL
from posgeom_utils.repro import cli, runner
from posgeom_utils.repro.profiles import chapter_parameters
from posgeom_utils.repro.results import show_parameters
from posgeom_utils.scale.counting import Shard, shard_texts
from test_cli import run_cli, text_file  # noqa: F401 - the fixture is used by name
from test_gpu_path import config as gpu_config, model as gpu_model, task, train  # noqa: F401
from test_runner import ALPHA, write

# ------------------------------------------------------------------ one text per line, and only per line

ODD = "a review\u0085with a next-line\n\na second\u2028with a line separator\r\nthird\u2029text\n"


def test_a_text_file_splits_at_newlines_only_in_every_command(tmp_path: Path):
    path = tmp_path / "odd.txt"
    path.write_bytes(ODD.encode("utf-8"))
    assert len(ODD.splitlines()) > 3  # what str.splitlines would have made of it
    texts = list(shard_texts(Shard(str(path), "text")))  # posgeom count's reader
    assert texts == ["a review\u0085with a next-line", "a second\u2028with a line separator",
                     "third\u2029text"]
    args = argparse.Namespace(corpus=str(path), split="train", data_dir=None, sample_size=None, seed=0)
    assert cli._corpus(args).texts == texts  # posgeom stress reads it the same way


@pytest.mark.parametrize("name, content, words", [
    ("bad.jsonl", b'{"text": "fine"}\n{"text": oops}\n', ["bad.jsonl, line 2", "not JSON"]),
    ("field.jsonl", b'{"text": "fine"}\n{"body": "x"}\n', ["field.jsonl, line 2", "no field 'text'"]),
    ("plain.txt.gz", b"plain text, not gzip\n", ["plain.txt.gz", "BadGzipFile", "compressed"]),
    ("cut.jsonl.gz", gzip.compress(b"".join(b'{"text": "text %d"}\n' % k for k in range(5000)), mtime=0)[:5000],
     ["cut.jsonl.gz", "after line", "truncated"]),
    ("latin.txt", "caf\u00e9\n".encode("latin-1"), ["latin.txt", "UnicodeDecodeError", "UTF-8"]),
])
def test_a_damaged_shard_names_its_file_and_line(tmp_path: Path, name: str, content: bytes,
                                                 words: list[str]):
    path = tmp_path / name
    path.write_bytes(content)
    kind = "jsonl" if ".jsonl" in name else "text"
    with pytest.raises((ValueError, KeyError)) as info:
        list(shard_texts(Shard(str(path), kind)))
    assert all(w in str(info.value) for w in words), info.value


def test_count_reports_a_damaged_shard_in_one_line(tmp_path: Path, capsys):
    shard = tmp_path / "bad.jsonl"
    shard.write_text('{"text": "fine"}\n{oops\n')
    code, out, err = run_cli(["count", str(shard), "--model", DEFAULT_MODEL, "--n", "8", "--serial",
                              "--no-cache", "--out", str(tmp_path / "c.npz")], capsys)
    assert code == 2 and "bad.jsonl, line 2" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "c.npz").exists()


# ------------------------------------------------------------------ output places, before any work

@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counting or loading a corpus fails the test: the error must come first."""
    def forbidden(*args, **kwargs):
        raise AssertionError("work started before the output place was checked")

    monkeypatch.setattr(cli, "_corpus", forbidden)
    monkeypatch.setattr("posgeom_utils.scale.counting.sharded_marginals", forbidden)


def test_an_unwritable_output_fails_before_any_work(text_file, tmp_path: Path, capsys, no_work):  # noqa: F811
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    argv = ["count", str(text_file), "--model", DEFAULT_MODEL, "--n", "8", "--out", str(blocker / "c.npz")]
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and not out and "--out" in err and "cannot write" in err, err


@pytest.mark.parametrize("command", ["stress", "count"])
def test_a_cache_folder_that_is_a_file_fails_before_any_work(command: str, text_file, tmp_path: Path,  # noqa: F811
                                                              capsys, monkeypatch, no_work):
    blocker = tmp_path / "cache-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("POSGEOM_CACHE_DIR", str(blocker))
    argv = (["stress", "--model", DEFAULT_MODEL, "--corpus", str(text_file)] if command == "stress"
            else ["count", str(text_file), "--model", DEFAULT_MODEL, "--n", "8",
                  "--out", str(tmp_path / "c.npz")])
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and not out and "POSGEOM_CACHE_DIR" in err, err


# ------------------------------------------------------------------ posgeom run

def test_run_out_that_is_a_file_or_under_one_is_refused(tmp_path: Path, capsys):
    source = write(tmp_path / "src", alpha=ALPHA)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for out in (blocker, blocker / "sub"):
        code, stdout, err = run_cli(["run", "--profile", "smoke", "--source-dir", str(source),
                                     "--out", str(out)], capsys)
        assert code == 2 and not stdout and "--out" in err and len(err.strip().splitlines()) == 1


def test_ctrl_c_during_run_is_recorded_and_reported_in_one_line(tmp_path: Path, capsys, monkeypatch):
    source, out = write(tmp_path / "src", alpha=ALPHA), tmp_path / "out"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "_execute", interrupted)
    code, stdout, err = run_cli(["run", "--profile", "smoke", "--source-dir", str(source),
                                 "--out", str(out)], capsys)
    record = json.loads((out / "alpha" / "interrupted.json").read_text())
    assert code == 130 and err.strip() == "posgeom run: interrupted"
    assert "alpha: interrupted" in stdout and "Traceback" not in stdout + err
    assert record["chapter"] == "alpha" and "resume" in record["resume"]


# ------------------------------------------------------------------ damaged state: named, removed, recomputed

def test_a_damaged_cache_entry_is_named_removed_and_recomputed(tokenizer, fresh_cache: Path):
    texts = ["the cat sat on the mat", "a dog ran", "the end of the line"] * 4
    first = positional_marginals(texts, tokenizer, n=6)
    (entry,) = (fresh_cache / "marginals").glob("*.npz")
    entry.write_bytes(entry.read_bytes()[:50])  # truncated: np.load raises BadZipFile
    with pytest.warns(UserWarning, match=f"{entry.name} is damaged") as seen:
        again = positional_marginals(texts, tokenizer, n=6)
    assert str(entry) in str(seen[0].message)
    assert (again.counts != first.counts).nnz == 0  # the same counts, computed afresh
    assert PositionalMarginals.load(entry).num_sequences == first.num_sequences  # and rewritten


@pytest.mark.parametrize("damage", [b"", b"not a zip or a pickle", None])
def test_read_or_discard_names_any_damaged_file(tmp_path: Path, damage: bytes | None):
    path = tmp_path / "entry.npz"
    np.savez(path, steps=np.arange(3))
    if damage is None:
        assert read_or_discard(path, lambda p: np.load(p)["steps"].sum()) == 3
        return  # a sound file is read, and kept
    path.write_bytes(damage)
    with pytest.warns(UserWarning, match="entry.npz is damaged"):
        assert read_or_discard(path, lambda p: np.load(p)["steps"]) is None
    assert not path.exists()


def test_a_corrupt_checkpoint_restarts_its_run_and_keeps_the_others(task, tmp_path: Path):  # noqa: F811
    cfg = dict(steps=10, checkpoint_every=5)
    good, bad = tmp_path / "good", tmp_path / "bad"
    reference = train(task, gpu_model(task), gpu_config(**cfg))
    for folder in (good, bad):
        train(task, gpu_model(task), gpu_config(**cfg, checkpoint_dir=str(folder)))
    kept = (good / "checkpoint.pt").read_bytes()
    (bad / "checkpoint.pt").write_bytes(b"\x80\x04 cut short")  # an UnpicklingError before
    with pytest.warns(UserWarning, match="checkpoint.pt is damaged"):
        history = train(task, gpu_model(task), gpu_config(**cfg, checkpoint_dir=str(bad)))
    assert history.train_loss == reference.train_loss  # run afresh, from step 0
    assert (good / "checkpoint.pt").read_bytes() == kept


# ------------------------------------------------------------------ corpus files: file, line, what was expected

def _data_dir(tmp_path: Path, name: str, content: bytes) -> Path:
    dataset, split = ("imdb", "test") if name.startswith("imdb") else ("sst2", "train")
    path = tmp_path / LOCAL_FILES[dataset][split]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return tmp_path


IMDB_ROWS = b"".join(b'{"text": "review %d", "label": %d}\n' % (k, k % 2) for k in range(5000))


@pytest.mark.parametrize("name, content, words", [
    ("imdb cut", gzip.compress(IMDB_ROWS, mtime=0)[:3000], ["test.jsonl.gz, after line", "truncated"]),
    ("imdb bad json", gzip.compress(b'{"text": "a", "label": 0}\n{"text": oops}\n', mtime=0),
     ["test.jsonl.gz, line 2", "not JSON", "'text' and 'label'"]),
    ("imdb no label", gzip.compress(b'{"text": "a", "label": 0}\n{"text": "b"}\n', mtime=0),
     ["test.jsonl.gz, line 2", "label None is not 0 or 1"]),
    ("imdb plain", b'{"text": "a", "label": 0}\n', ["test.jsonl.gz, after line 0", "BadGzipFile"]),
    ("sst2 label", b"sentence\tlabel\ngood film\t1\nbad film\tpositive\n",
     ["train.tsv, line 3", "label 'positive' is not 0 or 1"]),
    ("sst2 fields", b"sentence\tlabel\ngood film\t1\nno tab here\n",
     ["train.tsv, line 3", "1 tab-separated fields, expected 2"]),
    ("sst2 header", b"text,label\ngood,1\n", ["train.tsv, line 1", "expected 'sentence<TAB>label'"]),
])
def test_a_damaged_corpus_file_names_its_file_and_line(tmp_path: Path, name: str, content: bytes,
                                                       words: list[str]):
    dataset = name.split()[0]
    root = _data_dir(tmp_path, name, content)
    with pytest.raises(ValueError) as info:
        load_corpus(dataset, "test" if dataset == "imdb" else "train", data_dir=root)
    assert all(w in str(info.value) for w in words), info.value


def test_sound_corpus_files_still_load(tmp_path: Path):
    root = _data_dir(tmp_path, "imdb", gzip.compress(b"".join(IMDB_ROWS.splitlines(keepends=True)[:5])))
    corpus = load_corpus("imdb", "test", data_dir=root)
    assert corpus.texts[:2] == ["review 0", "review 1"] and corpus.labels[:2].tolist() == [0, 1]


# ------------------------------------------------------------------ no silent guesses, no NaN tables

def test_a_near_distance_matrix_is_not_guessed_to_be_an_encoding():
    D = hellinger_distances(np.random.default_rng(0).dirichlet(np.ones(20), 30))
    exact = monotonicity_violation_rate(D).rate
    assert exact == monotonicity_violation_rate(D, input_kind="distances").rate
    off, negative = D.copy(), D.copy()
    off[3, 7] += 2e-4  # read as an encoding before: 0.530 instead of 0.514 in the case
    negative[3, 7] = negative[7, 3] = -1e-12
    for X in (off, negative):
        with pytest.raises(ValueError, match="input_kind='distances'"):
            monotonicity_violation_rate(X)
    fixed = np.clip((off + off.T) / 2, 0, None)
    assert monotonicity_violation_rate(fixed, input_kind="distances").rate == pytest.approx(exact, abs=0.01)
    square = np.random.default_rng(1).normal(size=(30, 30))  # a square encoding is far from any D
    assert (monotonicity_violation_rate(square).rate
            == monotonicity_violation_rate(square, input_kind="encoding").rate)


@pytest.mark.parametrize("call, name", [
    (lambda: sinusoidal(8, 8, base=0), "base"),
    (lambda: sinusoidal(8, 8, base=-2.0), "base"),
    (lambda: sinusoidal(8, 8, base=float("nan")), "base"),
    (lambda: random_encoding(4, 4, scale=float("nan")), "scale"),
    (lambda: random_encoding(4, 4, scale=0.0), "scale"),
    (lambda: alibi(8, slope=[]), "slope"),
    (lambda: alibi(8, slope=[[1.0]]), "slope"),
    (lambda: lowrank_parameter_count(8, 4, 5), "r"),
    (lambda: lowrank_parameter_count(8, 4, -1), "r"),
    (lambda: best_scale(np.full((3, 3), np.nan), np.ones((3, 3)) - np.eye(3)), "E"),
    (lambda: best_scale(np.zeros((3, 3)), np.ones((3, 3)) - np.eye(3)), "E"),
])
def test_arguments_that_made_nan_or_empty_tables_are_refused(call, name: str):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        call()


def test_lowrank_parameter_count_takes_every_rank_from_0_to_min_n_d():
    assert [lowrank_parameter_count(8, 4, r) for r in range(5)] == [0, 12, 24, 36, 48]


def test_min_count_is_checked_before_counting(tokenizer, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("posgeom_utils.marginals.count_batches", lambda *a, **k: pytest.fail("counted"))
    with pytest.raises(ValueError, match="min_count"):
        positional_marginals(["a text"], tokenizer, n=4, min_count=1.5, cache=False)


# ------------------------------------------------------------------ a profile label brings its sizes

def test_a_profile_passed_alone_brings_its_sizes():
    """papermill -p profile smoke: the injected cell assigns only ``profile`` (and here n_seeds); the
    names it did not pass get the profile's values, the ones it passed keep theirs."""
    parameters = 'profile = "default"  # which\nn_seeds = 5  # seeds\ntrain_steps = 200  # steps\n'
    smoke = chapter_parameters("necessity", "smoke")
    namespace = {"In": ["", parameters, 'profile = "smoke"\nn_seeds = 3\n', "show_parameters(...)"],
                 "profile": "smoke", "n_seeds": 3, "train_steps": 200}
    table = show_parameters("necessity", namespace)
    assert namespace["train_steps"] == smoke["train_steps"] != 200
    assert namespace["n_seeds"] == 3  # passed, so kept
    assert table.frame.loc["train_steps", "value"] == str(smoke["train_steps"])
    book = {"In": ["", parameters, "show_parameters(...)"], "profile": "default", "n_seeds": 5,
            "train_steps": 200}
    show_parameters("necessity", book)  # the book build: the parameters cell as written
    assert (book["n_seeds"], book["train_steps"]) == (5, 200)


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_outputs_are_written_with_the_users_umask(tmp_path: Path, monkeypatch, umask: int):
    monkeypatch.setattr(cache, "_UMASK", umask)  # what the module read from the process at import
    path = write_json(tmp_path / "r.json", {"a": 1})
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # mkstemp alone gives 0600

"""Nothing silent, nothing lost (the README's reliability table): texts counted once per line,
damaged shard files named with their line, output places checked before any work, results printed
when a late write fails, Ctrl-C during ``posgeom run`` recorded. Chapter: *Reproduction ledger*."""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import pytest

from posgeom_utils.models import DEFAULT_MODEL
from posgeom_utils.repro import cli, runner
from posgeom_utils.scale.counting import Shard, shard_texts
from test_cli import run_cli, text_file  # noqa: F401 - the fixture is used by name
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
    args = argparse.Namespace(corpus=str(path), split="train", data_dir=None, sample_size=None)
    assert cli._corpus(args).texts == texts  # posgeom stress reads it the same way


@pytest.mark.parametrize("name, content, words", [
    ("bad.jsonl", b'{"text": "fine"}\n{"text": oops}\n', ["bad.jsonl, line 2", "not JSON"]),
    ("field.jsonl", b'{"text": "fine"}\n{"body": "x"}\n', ["field.jsonl, line 2", "no field 'text'"]),
    ("plain.txt.gz", b"plain text, not gzip\n", ["plain.txt.gz", "BadGzipFile", "compressed"]),
    ("cut.jsonl.gz", gzip.compress(b"".join(b'{"text": "text %d"}\n' % k for k in range(5000)))[:5000],
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


def test_plot_into_an_existing_folder_is_refused(text_file, tmp_path: Path, capsys, no_work):  # noqa: F811
    code, out, err = run_cli(["stress", "--model", DEFAULT_MODEL, "--corpus", str(text_file),
                              "--plot", str(tmp_path)], capsys)
    assert code == 2 and not out and "--plot" in err and "is a folder" in err


def test_plot_without_a_suffix_reports_the_file_it_writes(text_file, tmp_path: Path, capsys):  # noqa: F811
    code, out, err = run_cli(["stress", "--model", DEFAULT_MODEL, "--corpus", str(text_file), "--n", "16",
                              "--min-count", "5", "--json", "--plot", str(tmp_path / "new" / "fig")],
                             capsys)
    assert code == 0, err
    info = json.loads(out)
    assert info["plot"] == str(tmp_path / "new" / "fig.png") and Path(info["plot"]).is_file()


@pytest.mark.parametrize("command", ["stress", "count"])
def test_an_unwritable_output_fails_before_any_work(command: str, text_file, tmp_path: Path,  # noqa: F811
                                                     capsys, no_work):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    if command == "stress":
        argv = ["stress", "--model", DEFAULT_MODEL, "--corpus", str(text_file),
                "--plot", str(blocker / "fig.png")]
    else:
        argv = ["count", str(text_file), "--model", DEFAULT_MODEL, "--n", "8",
                "--out", str(blocker / "c.npz")]
    code, out, err = run_cli(argv, capsys)
    option = "--plot" if command == "stress" else "--out"
    assert code == 2 and not out and option in err and "cannot write" in err, err


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


def test_a_late_plot_failure_still_prints_the_results(text_file, tmp_path: Path, capsys,  # noqa: F811
                                                      monkeypatch):
    def full_disk(*args, **kwargs):
        raise cli.UsageError("--plot 'fig.png': cannot save it (No space left on device)")

    monkeypatch.setattr(cli, "_plot", full_disk)
    code, out, err = run_cli(["stress", "--model", DEFAULT_MODEL, "--corpus", str(text_file), "--n", "16",
                              "--min-count", "5", "--plot", str(tmp_path / "fig.png")], capsys)
    assert code == 2 and "fitted stress" in out and "figure:" not in out
    assert "No space left" in err and len(err.strip().splitlines()) == 1


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

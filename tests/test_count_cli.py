"""``posgeom count`` (posgeom_utils.repro.cli): sharded counts from the shell, written atomically
with provenance, equal to the single-process count; clear errors.
Chapter: *Beyond one machine*."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_cli import run_cli  # tests/ is on sys.path under pytest (no __init__.py)

from posgeom_utils.marginals import PositionalMarginals, positional_marginals
from posgeom_utils.models import DEFAULT_MODEL

WORDS = ["the", "a", "good", "bad", "film", "movie", "story", "was", "is", "very", "not", "funny", "dull", "long", "and", "but"]


@pytest.fixture(scope="module")
def shard_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(1)
    root = tmp_path_factory.mktemp("count-cli")
    for k, size in enumerate((40, 13, 0)):
        lines = [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 20)))) for _ in range(size)]
        (root / f"part-{k}.txt").write_text("".join(line + "\n" for line in lines))
    return root


def _texts(shard_dir: Path) -> list[str]:
    lines = [line.strip() for p in sorted(shard_dir.glob("part-*.txt")) for line in p.read_text().splitlines()]
    return [line for line in lines if line]


@pytest.mark.parametrize("where", [["--serial"], ["--workers", "2"]])
def test_count_writes_counts_and_provenance(shard_dir, tmp_path, tokenizer, capsys, where, fresh_cache):
    out = tmp_path / "counts.npz"
    argv = ["count", str(shard_dir / "part-*.txt"), "--model", DEFAULT_MODEL, "--n", "16", "--out", str(out)]
    code, stdout, err = run_cli([*argv, *where], capsys)
    assert code == 0, err
    assert "counted 53 texts" in stdout and "3 shards" in stdout
    result = PositionalMarginals.load(out)
    reference = positional_marginals(_texts(shard_dir), tokenizer, n=16, cache=False)
    assert (result.counts != reference.counts).nnz == 0
    np.testing.assert_array_equal(result.support, reference.support)
    provenance = json.loads(out.with_suffix(".json").read_text())
    assert provenance["executor"] == ("serial" if where == ["--serial"] else "dask")
    assert provenance["texts"] == 53 and provenance["n"] == 16
    assert len(provenance["shards"]) == 3 and all("size" in s for s in provenance["shards"])
    assert provenance["tokens_per_second"] > 0 and provenance["from_cache"] is False
    assert sorted(s["texts"] for s in provenance["shard_stats"]) == [0, 13, 40]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_failing_shard_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{broken\n')
    out = tmp_path / "counts.npz"
    code, _, err = run_cli(
        ["count", str(bad), "--model", DEFAULT_MODEL, "--n", "8", "--serial", "--out", str(out)],
        capsys,
    )
    assert code == 2 and "bad.jsonl" in err and "nothing was written" in err
    assert not out.exists() and not out.with_suffix(".json").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--n", "8", "--out", "c.npz"], "pass shard files"),
        (["SHARD", "--n", "0", "--out", "c.npz"], "--n must be an integer >= 1"),
        (["SHARD", "--n", "8", "--out", "c.txt"], "ending in .npz"),
        (["SHARD", "--n", "8", "--out", "c.npz", "--workers", "0"], "--workers must be an integer >= 1"),
        (["missing-*.txt", "--n", "8", "--out", "c.npz"], "matches no file"),
        (["SHARD", "--n", "50", "--out", "c.npz", "--serial", "--min-count", "0"], "--min-count must be"),
        (["SHARD", "--n", "50", "--out", "c.npz", "--serial", "--min-count", "99"], "lower --min-count"),
    ],
)
def test_bad_usage_is_one_clear_line(shard_dir, tmp_path, capsys, argv, message, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [str(shard_dir / "part-0.txt") if a == "SHARD" else a for a in argv]
    code, _, err = run_cli(["count", *argv, "--model", DEFAULT_MODEL], capsys)
    assert code == 2
    assert message in err and err.count("\n") == 1, err


def test_n_beyond_the_longest_text_counts_what_is_there(shard_dir, tmp_path, tokenizer, capsys, fresh_cache):
    """--n 500 on texts of at most 21 tokens: the positions they reach are counted, and the output says so."""
    out = tmp_path / "counts.npz"
    argv = ["count", str(shard_dir / "part-0.txt"), "--model", DEFAULT_MODEL, "--n", "500", "--serial", "--out", str(out)]
    code, stdout, err = run_cli(argv, capsys)
    assert code == 0, err
    result = PositionalMarginals.load(out)
    longest = int(np.flatnonzero(result.length_hist).max())
    assert result.n == longest < 500 and result.support[-1] >= 1
    assert f"--n 500 asked, {longest} counted" in stdout and f"0..{longest - 1}" in stdout
    provenance = json.loads(out.with_suffix(".json").read_text())
    assert provenance["n_asked"] == 500 and provenance["n"] == longest
    # what is read and what the matrix holds, each labelled: here every token read is at a kept position
    assert provenance["tokens_counted"] == int(result.counts.sum()) == provenance["tokens"]
    assert f"{provenance['tokens']:,} tokens read, {provenance['tokens_counted']:,} of them" in stdout
    short = run_cli([*argv[:5], "4", *argv[6:], "--no-cache"], capsys)[1]
    assert "tokens read" in short and "note" not in short  # n = 4 cuts: fewer tokens in the matrix than read


def test_missing_text_field_is_named_as_the_option(tmp_path, capsys):
    """A .jsonl line without the field: the message names --text-field, not the API's text_field=."""
    shard = tmp_path / "rows.jsonl"
    shard.write_text('{"body": "a film"}\n')
    argv = ["count", str(shard), "--model", DEFAULT_MODEL, "--n", "8", "--serial", "--out", str(tmp_path / "c.npz")]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and "pass --text-field" in err and "text_field=" not in err, err

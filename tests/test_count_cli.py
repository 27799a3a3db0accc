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
        (["SHARD", "--n", "500", "--out", "c.npz", "--serial"], "longer than any sequence"),
    ],
)
def test_bad_usage_is_one_clear_line(shard_dir, tmp_path, capsys, argv, message, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [str(shard_dir / "part-0.txt") if a == "SHARD" else a for a in argv]
    code, _, err = run_cli(["count", *argv, "--model", DEFAULT_MODEL], capsys)
    assert code == 2
    assert message in err and err.count("\n") == 1, err

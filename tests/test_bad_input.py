"""Bad input on the command line gets exit code 2 and one line naming the option, never a traceback, and a
bad ``POSGEOM_BLAS_THREADS`` a clear error (the functions' own checks are tested beside each module)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from posgeom_utils.corpus import synthetic_mu
from posgeom_utils.geometry import classical_mds, hellinger_distances


# --------------------------------------------------------------------------- command line

WORDS = "the a good bad film movie story was is very not funny dull long short great and but".split()


@pytest.fixture(scope="module")
def text_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 12)))) + "." for _ in range(60)]
    path = tmp_path_factory.mktemp("bad-input") / "texts.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def cli_error(capsys, text_file: Path, **options: str) -> str:
    """Run ``posgeom stress`` on the packaged model with ``options`` overriding the defaults; assert it exits
    with code 2, prints nothing on stdout and one line on stderr; return that line."""
    from posgeom_utils.models import DEFAULT_MODEL
    from posgeom_utils.repro.cli import main

    args = {"--model": DEFAULT_MODEL, "--corpus": str(text_file), "--n": "12", "--min-count": "5", **options}
    code = main(["stress", *[x for kv in args.items() for x in kv]])
    out, err = capsys.readouterr()
    assert code == 2 and out == "", (code, out, err)
    assert len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("option, value, words", [
    ("--sample-size", "0", ["--sample-size", "0"]),
    ("--sample-size", "-3", ["--sample-size", "-3"]),
    # the packaged all-MiniLM-L6-v2 has 512 learned positions; the corpus alone would never reach them
    ("--n", "600", ["--n 600", "512", "learned position table"]),
    ("--min-count", "1000", ["--min-count 1000", "lower --min-count"]),  # more than the 60 texts: in option words
])
def test_cli_bad_option(capsys, text_file, option, value, words):
    err = cli_error(capsys, text_file, **{option: value})
    assert all(word in err for word in words), err


def test_cli_min_count_leaves_fewer_than_3_positions(capsys, tmp_path):
    one_word = tmp_path / "one-word.txt"  # without special tokens, every text reaches position 0 only
    one_word.write_text("\n".join(["good", "bad", "film", "story"] * 5) + "\n", encoding="utf-8")
    err = cli_error(capsys, one_word, **{"--policy": "drop", "--min-count": "5"})
    assert "--min-count 5" in err and "only 1 position(s)" in err and "lower --min-count" in err


# --------------------------------------------------------------------------- configuration

def test_blas_threads_setting(monkeypatch):
    from posgeom_utils.settings import BLAS_THREADS_ENV, blas_thread_limit

    monkeypatch.delenv(BLAS_THREADS_ENV, raising=False)
    assert blas_thread_limit() == 1  # the documented default (2-core machines)
    D = hellinger_distances(synthetic_mu("drift", 8, 20))
    reference = classical_mds(D)
    for value, limit in (("2", 2), ("0", None), ("default", None)):
        monkeypatch.setenv(BLAS_THREADS_ENV, value)
        assert blas_thread_limit() == limit
        np.testing.assert_allclose(classical_mds(D).eigenvalues, reference.eigenvalues, atol=1e-12)
    for bad in ("many", "-1", "1.5"):
        monkeypatch.setenv(BLAS_THREADS_ENV, bad)
        with pytest.raises(ValueError, match=rf"{BLAS_THREADS_ENV}='{re.escape(bad)}' is not a thread count"):
            classical_mds(D)

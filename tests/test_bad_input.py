"""Bad input gets a clear ``ValueError`` (or, on the command line, exit code 2 and one line) naming the
parameter, never a NaN result, a bare ``IndexError`` or a ``ZeroDivisionError`` (issue 10, "Bad input")."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from posgeom_utils.geometry import (classical_mds, effective_rank, hellinger_distances, linear_cka,
                                    stress_of_distances)
from posgeom_utils.marginals import marginals_from_ids

NAN = float("nan")


@pytest.fixture(scope="module")
def marginals():
    ids = np.random.default_rng(0).integers(0, 6, size=(50, 5))
    return marginals_from_ids(ids, V=6)


@pytest.fixture(scope="module")
def D():
    from posgeom_utils.corpus import synthetic_mu

    return hellinger_distances(synthetic_mu("drift", 8, 20))


# --------------------------------------------------------------------------- training

@pytest.mark.parametrize("value", [NAN, math.inf, -1e-3, 0.0])
def test_train_config_lr(value):
    from posgeom_utils.training import TrainConfig

    with pytest.raises(ValueError, match=r"lr must be a finite number > 0.*lr="):
        TrainConfig(lr=value)


@pytest.mark.parametrize("value", [NAN, math.inf, -0.1])
def test_train_config_weight_decay(value):
    from posgeom_utils.training import TrainConfig

    with pytest.raises(ValueError, match=r"weight_decay must be a finite number >= 0.*weight_decay="):
        TrainConfig(weight_decay=value)


def test_train_config_valid_values_still_accepted():
    from posgeom_utils.training import TrainConfig

    config = TrainConfig(lr=np.float64(5e-5), weight_decay=0)
    assert config.lr == 5e-5 and config.weight_decay == 0


# --------------------------------------------------------------------------- marginals

@pytest.mark.parametrize("value", [NAN, math.inf, -0.5])
def test_mu_smoothing(marginals, value):
    with pytest.raises(ValueError, match=r"smoothing must be a finite number >= 0.*smoothing="):
        marginals.mu(smoothing=value)


@pytest.mark.parametrize("k", [-1, 0, 2.5])
def test_top_tokens_k(marginals, k):
    with pytest.raises(ValueError, match=r"k must be a positive integer.*k="):
        marginals.top_tokens(0, k=k)


@pytest.mark.parametrize("base", [1, 1.0, 0, -2.0, NAN])
def test_entropy_base(marginals, base):
    with pytest.raises(ValueError, match=r"base must be a finite number > 0 and != 1.*base="):
        marginals.entropy(base=base)


def test_marginals_valid_values_unchanged(marginals):
    np.testing.assert_allclose(marginals.entropy(2) * np.log(2), marginals.entropy(math.e))
    ids, probs = marginals.top_tokens(0, k=3)
    assert len(ids) == len(probs) == 3


# --------------------------------------------------------------------------- geometry

def test_stress_of_distances_nan(D):
    bad = D.copy()
    bad[0, 1] = bad[1, 0] = NAN
    with pytest.raises(ValueError, match=r"E contains NaN or inf"):
        stress_of_distances(bad, D)
    with pytest.raises(ValueError, match=r"D contains NaN or inf"):
        stress_of_distances(D, bad)


def test_stress_of_distances_mismatched_shapes(D):
    with pytest.raises(ValueError, match=r"E and D must have the same shape"):
        stress_of_distances(D[:5, :5], D)
    with pytest.raises(ValueError, match=r"E must be a square"):
        stress_of_distances(D[:, :5], D)
    with pytest.raises(ValueError, match=r"D must be a square"):
        stress_of_distances(D, D[0])


def test_effective_rank_nan():
    with pytest.raises(ValueError, match=r"eigenvalues contain NaN or inf"):
        effective_rank(np.array([NAN, 1.0]))


@pytest.mark.parametrize("tol", [-1, NAN, 1.0])
def test_effective_rank_tol(tol):
    with pytest.raises(ValueError, match=r"tol must be a finite number in \[0, 1\).*tol="):
        effective_rank(np.array([2.0, 1.0]), tol=tol)


@pytest.mark.parametrize("tol", [-1, NAN, math.inf])
def test_classical_mds_tol(D, tol):
    with pytest.raises(ValueError, match=r"tol must be a finite number in \[0, 1\).*tol="):
        classical_mds(D, tol=tol)


def test_linear_cka_nan_input():
    X = np.random.default_rng(0).normal(size=(6, 3))
    bad = X.copy()
    bad[2, 1] = NAN
    with pytest.raises(ValueError, match=r"X contains NaN or inf"):
        linear_cka(bad, X)
    with pytest.raises(ValueError, match=r"Y contains NaN or inf"):
        linear_cka(X, np.where(bad > 0, np.inf, bad))


@pytest.mark.parametrize("constant", [np.zeros((5, 3)), np.full((5, 3), 0.1), np.tile([[1e8, -3.7, 0.3]], (5, 1))])
def test_linear_cka_zero_variance_raises_instead_of_nan(constant):
    X = np.random.default_rng(1).normal(size=(5, 4))
    with pytest.raises(ValueError, match=r"zero variance"):
        linear_cka(X, constant)
    with pytest.raises(ValueError, match=r"zero variance"):
        linear_cka(constant, X)


def test_linear_cka_underflow_raises_instead_of_nan():
    X = np.random.default_rng(2).normal(size=(5, 4))
    with pytest.raises(ValueError, match=r"CKA is not finite.*rescale"):
        linear_cka(X, 1e-200 * X)


# --------------------------------------------------------------------------- encodings

@pytest.mark.parametrize("n_heads", [0, -2])
def test_standard_encodings_n_heads(D, n_heads):
    from posgeom_utils.encodings import standard_encodings

    with pytest.raises(ValueError, match=r"n_heads must be a positive integer"):
        standard_encodings(D, d=8, n_heads=n_heads)


def test_standard_encodings_d(D):
    from posgeom_utils.encodings import standard_encodings

    with pytest.raises(ValueError, match=r"d must be a positive integer"):
        standard_encodings(D, d=0, n_heads=2)


# --------------------------------------------------------------------------- tasks

@pytest.mark.parametrize("fraction, side", [(1.0, "eval_fraction"), (0.0, "eval_fraction"), (NAN, "eval_fraction"),
                                            (1.5, "eval_fraction"), (0.999, "empty train"), (1e-17, "empty eval")])
def test_planted_task_eval_fraction(fraction, side):
    from posgeom_utils.tasks import planted_task

    with pytest.raises(ValueError, match=rf"eval_fraction.*{side}|{side}.*eval_fraction|eval_fraction=.*{side}"):
        planted_task(num_sequences=100, eval_fraction=fraction)


def test_planted_task_valid_split_unchanged():
    from posgeom_utils.tasks import planted_task

    task = planted_task(num_sequences=100, eval_fraction=0.25)
    assert len(task.X_train) == 75 and len(task.X_eval) == 25


# --------------------------------------------------------------------------- transformer

@pytest.mark.parametrize("bad_id", [16, 99, -1])
def test_transformer_ids_outside_vocabulary(bad_id):
    import torch

    from posgeom_utils.transformer import PositionalTransformer

    model = PositionalTransformer(vocab_size=16, d=8, n_heads=2, n_layers=1, max_len=6)
    ids = torch.randint(1, 16, (3, 6))
    ids[1, 4] = bad_id
    with pytest.raises(ValueError, match=r"ids must be token ids in \[0, vocab_size=16\).*-?\d+"):
        model(ids)
    ids[1, 4] = 15  # the largest valid id
    assert model(ids).shape == (3, 2)


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


@pytest.mark.parametrize("size", ["0", "-3"])
def test_cli_sample_size(capsys, text_file, size):
    err = cli_error(capsys, text_file, **{"--sample-size": size})
    assert "--sample-size" in err and size in err


def test_cli_plot_into_missing_folder(capsys, text_file, tmp_path):
    target = tmp_path / "no" / "such" / "folder" / "fig.png"
    err = cli_error(capsys, text_file, **{"--plot": str(target)})
    assert "--plot" in err and "folder does not exist" in err
    assert not target.parent.exists()


def test_cli_n_beyond_position_table(capsys, text_file):
    # the packaged all-MiniLM-L6-v2 has 512 learned positions; the corpus alone would never reach them
    err = cli_error(capsys, text_file, **{"--n": "600"})
    assert "--n 600" in err and "512" in err and "learned position table" in err


def test_cli_min_count_leaves_no_position(capsys, text_file):
    err = cli_error(capsys, text_file, **{"--min-count": "1000"})  # more than the 60 texts
    assert "--min-count 1000" in err and "lower min_count" in err


def test_cli_min_count_leaves_fewer_than_3_positions(capsys, tmp_path):
    one_word = tmp_path / "one-word.txt"  # without special tokens, every text reaches position 0 only
    one_word.write_text("\n".join(["good", "bad", "film", "story"] * 5) + "\n", encoding="utf-8")
    err = cli_error(capsys, one_word, **{"--policy": "drop", "--min-count": "5"})
    assert "--min-count 5" in err and "only 1 position(s)" in err and "lower --min-count" in err


# --------------------------------------------------------------------------- configuration

def test_blas_threads_setting(monkeypatch, D):
    from posgeom_utils.settings import BLAS_THREADS_ENV, blas_thread_limit

    monkeypatch.delenv(BLAS_THREADS_ENV, raising=False)
    assert blas_thread_limit() == 1  # the documented default (2-core machines)
    reference = classical_mds(D)
    for value, limit in (("2", 2), ("0", None), ("default", None)):
        monkeypatch.setenv(BLAS_THREADS_ENV, value)
        assert blas_thread_limit() == limit
        np.testing.assert_allclose(classical_mds(D).eigenvalues, reference.eigenvalues, atol=1e-12)
    for bad in ("many", "-1", "1.5"):
        monkeypatch.setenv(BLAS_THREADS_ENV, bad)
        with pytest.raises(ValueError, match=rf"{BLAS_THREADS_ENV}='{re.escape(bad)}' is not a thread count"):
            classical_mds(D)

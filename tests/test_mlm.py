"""*Does a trained Transformer learn its corpus's geometry?*: the shuffles, the scores, the verdict rule,
the memoised store and a tiny masked-language-modelling run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posgeom_utils.corpus import synthetic_corpus, synthetic_mu
from posgeom_utils.encodings import mds_encoding, random_encoding, sinusoidal
from posgeom_utils.geometry import hellinger_distances, pairwise_distances
from posgeom_utils.mlm import (column_shuffle, cut_vocabulary, lag_residuals,
                               position_counts, reference_geometries, scores, train_mlm,
                               verdict, within_lag_correlation)
from posgeom_utils.repro import sources
from posgeom_utils.tasks import shuffle_within

ROOT = Path(__file__).resolve().parents[1]


def test_shuffles_keep_what_the_proposition_says() -> None:
    """Column shuffle: every position's counts exactly; row shuffle: every text, and in expectation
    the pooled distribution at every position (prop-shuffles)."""
    ids = synthetic_corpus("drift", n=8, V=12, num_sequences=3000, seed=0).ids
    col = column_shuffle(ids, seed=1)
    assert np.array_equal(position_counts(col, 12), position_counts(ids, 12))
    assert not np.array_equal(col, ids)
    rng = np.random.default_rng(2)
    rows = [shuffle_within(ids, rng) for _ in range(20)]
    assert all(np.array_equal(np.sort(r, 1), np.sort(ids, 1)) for r in rows)
    mean = np.mean([position_counts(r, 12) for r in rows], 0)
    pooled = position_counts(ids, 12).sum(0) / 8
    assert np.abs(mean - pooled).max() < 0.05 * pooled.max()  # every row the pooled distribution
    assert np.abs(position_counts(ids, 12) - pooled).max() > 0.2 * pooled.max()  # the real ones differ
    with pytest.raises(ValueError, match="padding"):
        column_shuffle(np.array([[1, -1], [2, 3]]))


@settings(max_examples=25, deadline=None)
@given(st.integers(4, 20), st.integers(2, 16), st.integers(0, 10**6))
def test_within_lag_correlation(n: int, d: int, seed: int) -> None:
    """0 for any geometry of |i - j| alone (sinusoids), 1 for a geometry with itself, and blind to
    anything added per lag."""
    R = pairwise_distances(np.random.default_rng(seed).normal(size=(n, d)))
    assert within_lag_correlation(pairwise_distances(sinusoidal(n, 2 * d)), R) == 0.0
    lag = np.abs(np.subtract.outer(np.arange(n), np.arange(n))).astype(float)
    assert within_lag_correlation(lag, R) == 0.0
    assert np.allclose(lag_residuals(lag), 0.0)
    if np.linalg.norm(lag_residuals(R)) > 1e-9:
        assert within_lag_correlation(R, R) == pytest.approx(1.0)
        assert within_lag_correlation(R + 3 * lag ** 2, R) == pytest.approx(1.0)


def test_scores_follow_a_table_built_from_the_geometry_and_not_a_random_one() -> None:
    mu = synthetic_mu("drift", 16, 40, seed=0)
    D = hellinger_distances(mu)
    refs = {"hellinger": D}
    good = scores(mds_encoding(D, 16), refs)
    assert good["within_hellinger"] == pytest.approx(1.0)
    assert good["spearman_hellinger"] == pytest.approx(1.0)
    assert good["stress_hellinger"] == pytest.approx(0.0, abs=1e-12)
    chance = [scores(random_encoding(16, 16, seed=s, scale=1.0), refs)["within_hellinger"]
              for s in range(30)]
    assert abs(np.mean(chance)) < 0.1


def test_verdict_is_one_rule_that_can_go_either_way() -> None:
    """The predictions of the chapter are judged by this rule: each outcome is reachable."""
    assert verdict(0.1, 0.3) == "above"
    assert verdict(-0.3, -0.1) == "below"
    assert verdict(-0.1, 0.2) == "not distinguishable"
    assert verdict(0.5, 0.6, threshold=0.55) == "not distinguishable"
    assert verdict(0.5, 0.6, threshold=0.7) == "below"
    with pytest.raises(ValueError, match="low <= high"):
        verdict(0.3, 0.1)
    with pytest.raises(ValueError, match="low <= high"):
        verdict(float("nan"), 0.1)


def test_reference_geometries_are_centred_where_the_corpus_is_stationary() -> None:
    """The split-half correction: near 0 on a stationary corpus, where the plug-in distance is not."""
    ids = synthetic_corpus("stationary", n=6, V=50, num_sequences=2000, seed=0).ids
    geometries = reference_geometries(ids, 50)
    plug_in = hellinger_distances(position_counts(ids, 50) / 2000)
    assert geometries["hellinger"].mean() < 0.3 * plug_in.mean()
    assert set(geometries) == {"hellinger", "l2", "logratio", "lag"}
    drift = synthetic_corpus("drift", n=6, V=50, num_sequences=2000, seed=0).ids
    assert reference_geometries(drift, 50)["hellinger"].mean() > 2 * geometries["hellinger"].mean()
    with pytest.raises(ValueError, match="no text"):
        reference_geometries(np.array([[1, -1], [2, -1]]), 5)


def test_cut_vocabulary_keeps_the_most_frequent_and_padding() -> None:
    ids = np.array([[5, 5, 7, -1], [5, 9, 7, 8]])
    cut, keep = cut_vocabulary(ids, 2)
    assert keep.tolist() == [5, 7]
    assert cut.tolist() == [[0, 0, 1, -1], [0, 2, 1, 2]]
    again, _ = cut_vocabulary(np.array([[9, 7]]), 2, keep)
    assert again.tolist() == [[2, 1]]


def tiny(**change) -> dict:
    config = dict(name="tiny", seed=0, positional="learned", K=10, d=8, n_heads=2, n_layers=1,
                  steps=4, lr=1e-2, batch_size=8, mask_rate=0.3, eval_every=2)
    return config | change


@pytest.fixture(scope="module")
def tiny_data() -> tuple[np.ndarray, np.ndarray, dict]:
    ids = synthetic_corpus("drift", n=6, V=11, num_sequences=200, seed=0).ids
    return ids[:150], ids[150:], reference_geometries(ids[:150], 11)


def test_train_mlm_is_seeded_and_records_what_the_chapter_reads(tiny_data) -> None:
    train, held, refs = tiny_data
    first, again = train_mlm(tiny(), train, held, refs), train_mlm(tiny(), train, held, refs)
    assert first["eval_loss"] == again["eval_loss"] and first["table"] == again["table"]
    assert first["step"] == [0, 2, 4] and len(first["scores"]) == 3
    assert first["positional_parameters"] == 6 * 8 and np.array(first["table"]).shape == (6, 8)
    assert train_mlm(tiny(seed=1), train, held, refs)["eval_loss"] != first["eval_loss"]
    low = train_mlm(tiny(positional="lowrank", rank=2), train, held, refs)
    assert low["positional_parameters"] == 2 * (6 + 8)
    start = mds_encoding(refs["hellinger"], 8)
    fixed = train_mlm(tiny(positional="mds"), train, held, refs, start)
    assert "table" not in fixed and fixed["scores"] == [] and fixed["positional_parameters"] == 0
    init = train_mlm(tiny(steps=0), train, held, refs, start)
    assert np.allclose(init["table"], np.round(start, 5), atol=1e-5)  # a learned table starts there
    assert train_mlm(tiny(positional="none"), train, held, refs)["eval_loss"][0] > 0


def test_modules_hash_follows_behaviour_not_formatting(tmp_path: Path) -> None:
    """The code key of the store: a docstring or formatting edit keeps it, a constant changes it."""
    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "posgeom_utils", root / "posgeom_utils",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "requirements.txt", root / "requirements.txt")
    before = sources.modules_hash(["posgeom_utils.mlm"], root)
    assert before == sources.modules_hash(["posgeom_utils.mlm"], ROOT)
    path = root / "posgeom_utils" / "mlm.py"
    text = path.read_text()
    path.write_text(text.replace('"""Masked-language', '"""Masked language', 1) + "\n\n# a comment\n")
    assert sources.modules_hash(["posgeom_utils.mlm"], root) == before
    path.write_text(text.replace("PAD, MASK, SHIFT = 0, 1, 2", "PAD, MASK, SHIFT = 0, 1, 3"))
    assert sources.modules_hash(["posgeom_utils.mlm"], root) != before
    path.write_text(text)
    transformer = root / "posgeom_utils" / "transformer.py"  # imported by mlm: counts too
    transformer.write_text(transformer.read_text().replace("std=0.02", "std=0.03", 1))
    assert sources.modules_hash(["posgeom_utils.mlm"], root) != before


def test_the_committed_store_is_current() -> None:
    """Every run the committed reference results name is in the store, for the code of this commit:
    the book shows them, and a change of the code they ran makes this fail."""
    results = json.loads((ROOT / "book/results/reference/learned_geometry/results.json").read_text())
    store = ROOT / "book/results/store/learned_geometry/masked-lm"
    assert results["results"]["code"] == sources.modules_hash(["posgeom_utils.mlm"]), (
        "the memoised runs are stale for this code: rerun `posgeom run --profile reference "
        "--chapters learned_geometry --out book/results/reference` and commit book/results")
    runs = results["results"]["num_runs"] + results["results"]["num_lr_runs"]
    names = {path.stem for path in store.glob("*.json")}
    peaks = {name for name in names if name.endswith("-to-peak")}  # a run retrained to its peak step
    assert len(names - peaks) == runs
    assert peaks and {name.removesuffix("-to-peak") for name in peaks} <= names - peaks


def test_the_paper_sized_model_trains_on_the_cpu(tiny_data) -> None:
    """The paper profile's model (BERT-small sized: its width and depth) runs the same code on the CPU."""
    from posgeom_utils.repro.profiles import chapter_parameters

    paper = chapter_parameters("learned_geometry", "paper")
    assert paper["d"] == 256 and paper["n_layers"] == 4 and paper["vocab_size"] is None
    train, held, refs = tiny_data
    out = train_mlm(tiny(d=paper["d"], n_layers=paper["n_layers"], n_heads=4, steps=2,
                         lr=paper["lr"], batch_size=4, device="cpu"), train, held, refs)
    assert np.array(out["table"]).shape == (6, 256) and np.isfinite(out["eval_loss"]).all()


def test_the_ledger_rows_of_the_chapter_can_go_either_way() -> None:
    """The thesis rows were written before the runs: flipping the committed numbers flips their verdicts."""
    from posgeom_utils.repro.ledger import DIFFERENT_DEFINITION, DIFFERS, REPRODUCED, judge, load_claims

    payload = json.loads((ROOT / "book/results/reference/learned_geometry/results.json").read_text())
    claims = {c.id: c for c in load_claims() if c.chapter == "learned_geometry"}
    assert set(claims) == {"thesis-learned-table", "thesis-positional-sufficiency", "mds-inside-model"}

    def verdict_with(claim: str, **values) -> str:
        return judge(claims[claim], {**payload, "results": {**payload["results"], **values}},
                     "reference")["verdict"]

    thesis = "thesis-learned-table"
    assert verdict_with(thesis, final_real_low=0.05) == REPRODUCED
    # the early peak was not among the predictions written before the runs: it cannot rescue the row
    assert verdict_with(thesis, final_real_low=-0.05, peak_real_low=0.5, peak_row_high=0.2) == DIFFERS
    sufficiency = "thesis-positional-sufficiency"  # against both null bands and the row control, not 0
    assert verdict_with(sufficiency, final_column_low=0.5, band=0.16, band_trained=0.18,
                        final_row_high=0.06) == REPRODUCED
    assert verdict_with(sufficiency, final_column_low=0.1, band=0.16, band_trained=0.18,
                        final_row_high=0.06) == DIFFERS  # above 0, inside the band
    assert verdict_with(sufficiency, final_column_low=0.5, band=0.16, band_trained=0.18,
                        final_row_high=0.6) == DIFFERS  # not above the row control
    assert verdict_with("mds-inside-model", loss_mds=3.0, loss_learned_high=3.5) == DIFFERENT_DEFINITION
    assert verdict_with("mds-inside-model", loss_mds=4.0, loss_learned_high=3.5) == DIFFERS

"""Stress-definition forensics: the definitions on hand-computed cases, the grid on a tiny
synthetic geometry, a negative control, and the committed forensics.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from posgeom_utils.encodings import rope, sinusoidal

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from forensics import (  # noqa: E402  scripts/forensics.py: the appendix's own code
    DEFINITIONS,
    QUANTITIES,
    alibi_profiles,
    best_joint,
    forensic_grid,
    free_choices,
    kruskal_stress1,
    normalised_stress,
    padded_mu,
    score_grid,
    sinusoid_profile,
    sse,
)
from posgeom_utils.geometry import hellinger_distances, pairwise_distances, toeplitz_distances
from posgeom_utils.repro.paper import reported

ROOT = Path(__file__).resolve().parents[1]
FORENSICS = ROOT / "book" / "results" / "forensics" / "forensics.json"

# three points: D has upper pairs (1, 2, 3), E has (2, 2, 3): one residual of 1
D3 = np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 3.0], [2.0, 3.0, 0.0]])
E3 = np.array([[0.0, 2.0, 2.0], [2.0, 0.0, 3.0], [2.0, 3.0, 0.0]])


def test_definitions_by_hand() -> None:
    assert normalised_stress(E3, D3) == pytest.approx(1 / 14)
    assert DEFINITIONS["root normalised"](E3, D3) == pytest.approx(np.sqrt(1 / 14))
    assert kruskal_stress1(E3, D3) == pytest.approx(np.sqrt(1 / 17))  # 4 + 4 + 9
    assert sse(E3, D3) == pytest.approx(1.0)
    assert sse(E3, D3, "full") == pytest.approx(2.0)
    assert DEFINITIONS["root sse"](E3, D3, "full") == pytest.approx(np.sqrt(2.0))


def test_scale_behaviour() -> None:
    for c in (0.5, 3.0):  # common scaling of both matrices
        assert kruskal_stress1(c * E3, c * D3) == pytest.approx(kruskal_stress1(E3, D3))
        assert normalised_stress(c * E3, c * D3) == pytest.approx(1 / 14)
        assert sse(c * E3, c * D3) == pytest.approx(c**2)  # not invariant
    for name, f in DEFINITIONS.items():  # the ratios ignore the triangle
        same = f(E3, D3, "upper") == pytest.approx(f(E3, D3, "full"))
        assert same == (name not in ("sse", "root sse")), name
        assert f(D3, D3) == 0.0  # an isometry has stress 0 under every definition


def test_bad_triangle_is_rejected() -> None:
    with pytest.raises(ValueError, match="triangle"):
        sse(E3, D3, "lower")


def test_lag_profiles_match_the_encodings() -> None:
    n = 12
    E = toeplitz_distances(sinusoid_profile(n, 16))
    assert np.allclose(E, pairwise_distances(sinusoidal(n, 16)))
    E = toeplitz_distances(sinusoid_profile(n, 8, 3))
    assert np.allclose(E, pairwise_distances(rope(n, 8, 3)))
    lin, ker = (
        alibi_profiles(n, np.array([0.5]), "linear"),
        alibi_profiles(n, np.array([0.5]), "kernel"),
    )
    assert np.allclose(lin[0], 0.5 * np.arange(n))
    assert np.allclose(ker[0], np.sqrt(2 - 2 * np.exp(-0.5 * np.arange(n))))


def test_padded_mu_adds_a_pad_column() -> None:
    counts = np.array([[2.0, 1.0], [1.0, 0.0]])  # 3 texts; one reaches position 1
    mu = padded_mu(counts, 3)
    assert np.allclose(mu, [[2 / 3, 1 / 3, 0], [1 / 3, 0, 2 / 3]])


def _tiny_geometries() -> dict:
    rng = np.random.default_rng(0)
    out = {}
    for n in (6, 8):
        mu = rng.dirichlet(np.ones(20), size=n)
        out[n, "keep", "min_count 1"] = hellinger_distances(mu)
    return out


OPTIONS = {
    "definition": list(DEFINITIONS),
    "triangle": ["upper", "full"],
    "width": [16, 32],
    "rope": ["one head of width d", "heads of 64 pooled"],
    "slope": ["slope 1", "first head (12 heads)"],
    "form": ["linear", "kernel"],
    "n": [6, 8],
    "special": ["keep"],
    "short": ["min_count 1"],
}


def _grid():
    return forensic_grid(
        _tiny_geometries(),
        widths=(16, 32),
        rope_layouts=OPTIONS["rope"],
        slopes=OPTIONS["slope"],
    )


def test_grid_has_one_row_per_setting() -> None:
    grid = _grid()
    assert len(grid) == 2 * len(DEFINITIONS) * 2 * 2 * 2 * 2 * 2
    for col in (
        "definition",
        "triangle",
        "width",
        "rope",
        "slope",
        "form",
        "n",
        "special",
        "short",
        "sinusoidal",
        "rope_stress",
        "alibi",
        "violation",
    ):
        assert col in grid.columns
    assert grid[["sinusoidal", "alibi", "violation"]].notna().all().all()
    assert grid.loc[grid["rope"] == "heads of 64 pooled", "rope_stress"].isna().all()
    # heads of 64 pooled at width 16 has no head: NaN, never a match
    row = grid.iloc[0]
    D = _tiny_geometries()[row["n"], "keep", "min_count 1"]
    E = pairwise_distances(sinusoidal(row["n"], row["width"]))
    assert row["sinusoidal"] == pytest.approx(
        DEFINITIONS[row["definition"]](E, D, row["triangle"])
    )


def test_a_planted_number_is_matched_and_a_perturbed_one_is_not() -> None:
    grid = _grid()
    target = grid.iloc[7]
    paper = {
        "sinusoidal": float(target["sinusoidal"]),
        "violation": float(target["violation"]),
    }
    scored = score_grid(grid, paper, OPTIONS)
    best = best_joint(scored, 1).iloc[0]
    assert best["matches"] == 2
    assert best["free_choices"] == free_choices(
        ["sinusoidal", "violation"], best["definition"], OPTIONS
    )
    # negative control: a value far outside every setting's range is never matched
    far = {"sinusoidal": 1e3 * float(grid["sinusoidal"].max()) + 1.0, "violation": 0.99}
    assert score_grid(grid, far, OPTIONS)["matches"].max() == 0


def test_free_choices_count_shared_dimensions_once() -> None:
    both = free_choices(["sinusoidal", "violation"], "normalised", OPTIONS)
    # sinusoidal: definition, width, n (special and short have one option, the
    # triangle does not change a normalised stress); violation adds nothing new
    assert both == 3
    assert free_choices(["sinusoidal"], "sse", OPTIONS) == 4


@pytest.fixture(scope="module")
def committed() -> dict:
    assert FORENSICS.is_file(), "run python scripts/stress_forensics.py"
    return json.loads(FORENSICS.read_text())


def test_committed_forensics_is_consistent(committed: dict) -> None:
    payload = committed
    for key in ("date", "commit", "versions", "wall_s"):
        assert key in payload["provenance"]
    assert payload["paper"] == {q: reported(k) for q, k in QUANTITIES.items()}
    counts = {int(k): v for k, v in payload["match_counts"].items()}
    assert payload["max_joint_matches"] == max(counts)
    assert payload["settings_at_max"] == counts[max(counts)]
    assert sum(counts.values()) == payload["settings"]
    best = payload["best_joint"]
    assert best["matches"] == payload["max_joint_matches"]
    assert all(r["matches"] <= best["matches"] for r in payload["top_joint"])
    assert payload["top_joint"][0] == best
    for q in best["matched"].split(","):
        value = best["rope_stress" if q == "rope" else q]
        kind, tol = payload["tolerances"][q]
        p = payload["paper"][q]
        err = abs(value - p) / p if kind == "rel" else abs(value - p)
        assert err <= tol, q
    assert payload["per_quantity_matches"] == sum(
        v["matches"] for v in payload["per_quantity"].values()
    )
    assert len(payload["by_geometry"]) == payload["geometries"]

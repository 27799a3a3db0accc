"""The helpers behind the resampled rank ranges of *How many numbers does a positional encoding need?*.

They are defined in ``notebooks/low_rank.md`` (visible code, not the science package); these tests
read their source from the chapter and check them against a brute-force search.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jupytext
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
HELPERS = ("smallest_passing", "rank_range", "span")


@pytest.fixture(scope="module")
def helpers() -> dict:
    nb = jupytext.read(ROOT / "notebooks" / "low_rank.md")
    namespace: dict = {"np": np}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tree = ast.parse("\n".join(line for line in cell.source.splitlines()
                                   if not line.lstrip().startswith(("%", "!"))))
        defs = [node for node in tree.body
                if isinstance(node, ast.FunctionDef) and node.name in HELPERS]
        if defs:
            exec(compile(ast.Module(body=defs, type_ignores=[]), "low_rank.md", "exec"), namespace)
    missing = [name for name in HELPERS if name not in namespace]
    assert not missing, f"notebooks/low_rank.md no longer defines {missing}"
    return namespace


GRID = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48]


@pytest.mark.parametrize("threshold", [None, *GRID])  # None: no rank passes
@pytest.mark.parametrize("start", [None, 1, 8, 48, 5])  # 5 is not in the grid
def test_the_walk_finds_what_the_full_search_finds(helpers, threshold, start) -> None:
    calls = []

    def passes(r):
        calls.append(r)
        return threshold is not None and r >= threshold

    found = helpers["smallest_passing"](passes, GRID, start)
    full = next((r for r in GRID if threshold is not None and r >= threshold), None)
    assert found == full
    assert len(calls) <= len(GRID)


def test_the_walk_from_the_answer_costs_two_evaluations(helpers) -> None:
    calls = []
    assert helpers["smallest_passing"](lambda r: calls.append(r) or r >= 16, GRID, 16) == 16
    assert calls == [16, 12]


def test_rank_range_is_the_central_95_percent_of_the_draws(helpers) -> None:
    rank_range = helpers["rank_range"]
    assert rank_range([16.0] * 5) == (16.0, 16.0)
    low, high = rank_range([8.0, 16.0, 16.0, 16.0, np.nan])  # NaN: not reached
    assert low == 8.0 and high == np.inf
    draws = np.array([8.0] * 2 + [16.0] * 196 + [32.0] * 2)
    assert rank_range(draws) == (16.0, 16.0)  # 1% in each tail is outside the central 95%
    draws = np.array([8.0] * 10 + [16.0] * 190)
    assert rank_range(draws) == (8.0, 16.0)  # 5% in one tail is not


def test_span(helpers) -> None:
    assert helpers["span"]("16", "16") == "16"
    assert helpers["span"]("16", "32") == "16 to 32"

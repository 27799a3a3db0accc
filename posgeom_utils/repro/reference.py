"""The committed reference results that the book shows, their provenance and the one
verdict rule of an interval.

Chapter: *Reproduction ledger*. Every chapter runs at the ``reference`` profile when the
book is built, its expensive steps read from the store of memoised runs
(:mod:`posgeom_utils.repro.store`); ``posgeom run --profile reference`` writes the same
numbers, with their provenance, to ``book/results/reference/<chapter>/results.json``.
:func:`provenance_line` is the one line per chapter that says where they come from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .sources import REPO_ROOT

#: where ``posgeom run`` results are committed, one folder per profile
RESULTS_ROOT = REPO_ROOT / "book" / "results"

ABOVE, BELOW, NOT_DISTINGUISHABLE = "above", "below", "not distinguishable from"
NO_INTERVAL = "no interval"


def committed(
    chapter: str, profile: str = "reference", root: Path = RESULTS_ROOT
) -> dict[str, Any] | None:
    """The committed ``results.json`` of ``chapter`` at ``profile`` (``{"results",
    "provenance", ...}``), or None when there is none. Chapter: *Reproduction
    ledger*."""
    path = Path(root) / profile / chapter / "results.json"
    return json.loads(path.read_text()) if path.is_file() else None


def interval_verdict(low: float | None, high: float | None, null: float) -> str:
    """``"above 0.5"``, ``"below 0.5"`` or ``"not distinguishable from 0.5"``: where the
    interval ``[low, high]`` lies relative to ``null``, by the one rule of
    :func:`posgeom_utils.mlm.verdict`; ``"no interval"`` when there is none (nothing can
    be concluded, and nothing is). Chapter: *Reproduction ledger*."""
    from ..mlm import verdict

    if low is None or high is None:
        return NO_INTERVAL
    side = verdict(low, high, null)
    return f"{NOT_DISTINGUISHABLE if side == 'not distinguishable' else side} {null:g}"


def provenance_line(chapter: str, root: Path = RESULTS_ROOT) -> str:
    """One sentence on the committed reference results of ``chapter``: the commit (and
    whether the tree was clean), date, device, wall time, and whether they are fresh
    (computed by the chapter's current code). Chapter: *Reproduction ledger*."""
    from .runner import stale_results

    payload = committed(chapter, "reference", root)
    if payload is None:
        return (
            "no committed reference results: run `posgeom run --profile reference "
            f"--chapters {chapter} --out book/results/reference`"
        )
    prov = payload.get("provenance", {})
    commit = str(prov.get("commit") or "unknown commit")[:7]
    clean = "dirty tree" if prov.get("dirty") else "clean tree"
    stale = stale_results(Path(root) / "reference", chapter=chapter).get(chapter)
    return (
        f"reference profile, commit {commit} ({clean}), "
        f"{str(prov.get('finished', ''))[:10]}, {prov.get('device_name', 'cpu')}, "
        f"{float(prov.get('wall_seconds', 0)) / 60:.1f} min; "
        + (f"stale: {stale}" if stale else "fresh (this chapter's code)")
    )


def glue_provenance(chapter: str) -> None:
    """Glue :func:`provenance_line` of ``chapter`` as ``provenance`` for the page only
    (not into the chapter's results, which it describes; returns nothing, so a cell
    that ends with it shows nothing). Chapter: *Reproduction ledger*."""
    from myst_nb import glue

    glue("provenance", provenance_line(chapter), display=False)

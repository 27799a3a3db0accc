"""The committed reference results that the book shows: their reader, their provenance
and the verdict rule of an interval.

Chapter: *Reproduction ledger*. The book runs every chapter at the ``reference``
profile, its expensive steps read from the store of memoised runs
(:mod:`posgeom_utils.repro.store`); ``posgeom run --profile reference`` writes the same
numbers to ``book/results/reference/<chapter>/results.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..cache import read_json
from .sources import REPO_ROOT

#: where ``posgeom run`` results are committed, one folder per profile
RESULTS_ROOT = REPO_ROOT / "book" / "results"


def read_run(folder: str | Path | None, chapter: str) -> dict[str, Any] | None:
    """The ``results.json`` of ``chapter`` under ``folder`` (None if absent, unreadable
    or without ``results``). Chapter: *Reproduction ledger*."""
    payload = read_json(Path(folder) / chapter / "results.json") if folder else None
    return payload if isinstance((payload or {}).get("results"), dict) else None


def committed(
    chapter: str, profile: str = "reference", root: Path = RESULTS_ROOT
) -> dict[str, Any] | None:
    """The committed ``results.json`` of ``chapter`` at ``profile``, or None.
    Chapter: *Reproduction ledger*."""
    return read_run(Path(root) / profile, chapter)


def interval_verdict(low: float | None, high: float | None, null: float) -> str:
    """``"above 0.5"``, ``"below 0.5"``, ``"not distinguishable from 0.5"`` (by
    :func:`posgeom_utils.mlm.verdict`) or ``"no interval"``: where ``[low, high]`` lies
    relative to ``null``. Chapter: *Reproduction ledger*."""
    from ..mlm import verdict

    if low is None or high is None:
        return "no interval"
    side = verdict(low, high, null)
    joiner = " from" if side == "not distinguishable" else ""
    return f"{side}{joiner} {null:g}"


def provenance_line(chapter: str, root: Path = RESULTS_ROOT) -> str:
    """One sentence on the committed reference results of ``chapter``: commit, date,
    device, wall time, whether the current code computed them. Chapter: *Reproduction
    ledger*."""
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
    run = (
        f"commit {commit}, {clean}, {str(prov.get('finished', ''))[:10]}, "
        f"{prov.get('device_name', 'cpu')}, "
        f"{float(prov.get('wall_seconds', 0)) / 60:.1f} min"
    )
    if stale:
        return f"computed by older code than this chapter's ({run}); stale: {stale}"
    return (
        f"computed by this chapter's code at the sizes of its parameters cell ({run})"
    )


def glue_provenance(chapter: str) -> None:
    """Glue :func:`provenance_line` of ``chapter`` as ``provenance``, for the page only.
    Chapter: *Reproduction ledger*."""
    from myst_nb import glue

    glue("provenance", provenance_line(chapter), display=False)

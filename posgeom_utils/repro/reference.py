"""The committed reference results (``book/results/reference/<chapter>/results.json``),
their provenance, their freshness and the verdict rule of an interval.
Chapter: *Reproduction ledger*."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..cache import read_json
from .sources import REPO_ROOT, code_hash

#: where ``posgeom run`` results are committed, one folder per profile
RESULTS_ROOT = REPO_ROOT / "book" / "results"


def read_run(folder: str | Path | None, chapter: str) -> dict[str, Any] | None:
    """``folder/chapter/results.json`` (None if absent, unreadable or without
    ``results``). Chapter: *Reproduction ledger*."""
    payload = read_json(Path(folder) / chapter / "results.json") if folder else None
    return payload if isinstance((payload or {}).get("results"), dict) else None


def stale_results(
    results_dir: Path, source_dir: Path | None = None, chapter: str = "*"
) -> dict[str, str]:
    """``{chapter: why}``: results in ``results_dir`` (of ``chapter``, ``"*"``: all) not
    computed by the current code. Chapter: *Reproduction ledger*."""
    source_dir = Path(source_dir or REPO_ROOT / "notebooks")
    stale: dict[str, str] = {}
    for path in sorted(Path(results_dir).glob(f"{chapter}/results.json")):
        name, source = path.parent.name, source_dir / f"{path.parent.name}.md"
        prov = (read_run(results_dir, name) or {}).get("provenance", {})
        if not source.is_file():
            stale[name] = f"no chapter {source} any more"
        elif (recorded := prov.get("code_hash")) != (current := code_hash(source)):
            stale[name] = (
                f"code hash {str(recorded)[:12]} != current {current[:12]}: rerun "
                f"`posgeom run --chapters {name} --out {Path(results_dir)}`"
            )
    return stale


def interval_verdict(low: float | None, high: float | None, null: float) -> str:
    """``[low, high]`` against ``null``: ``"above 0.5"``, ``"below 0.5"``, ``"not
    distinguishable from 0.5"`` or ``"no interval"``. Chapter: *Reproduction ledger*."""
    from ..mlm import verdict

    if low is None or high is None:
        return "no interval"
    side = verdict(low, high, null)
    joiner = " from" if side == "not distinguishable" else ""
    return f"{side}{joiner} {null:g}"


def provenance_line(chapter: str, root: Path = RESULTS_ROOT) -> str:
    """A sentence on ``chapter``'s reference results: commit, date, device, wall time,
    whether the current code computed them. Chapter: *Reproduction ledger*."""
    folder = Path(root) / "reference"
    if (payload := read_run(folder, chapter)) is None:
        fix = f"posgeom run --profile reference --chapters {chapter} --out "
        return f"no committed reference results: run `{fix}book/results/reference`"
    prov = payload.get("provenance", {})
    commit = str(prov.get("commit") or "unknown")[:7]
    clean = "dirty tree" if prov.get("dirty") else "clean tree"
    run = (
        f"commit {commit}, {clean}, {str(prov.get('finished', ''))[:10]}, "
        f"{prov.get('device_name', 'cpu')}, "
        f"{float(prov.get('wall_seconds', 0)) / 60:.1f} min"
    )
    if stale := stale_results(folder, chapter=chapter).get(chapter):
        return f"computed by older code than this chapter's ({run}); stale: {stale}"
    sizes = "at the sizes of its parameters cell"
    return f"computed by this chapter's code {sizes} ({run})"


def glue_provenance(chapter: str) -> None:
    """Glue ``provenance``: :func:`provenance_line`. Chapter: *Reproduction ledger*."""
    from myst_nb import glue

    glue("provenance", provenance_line(chapter), display=False)

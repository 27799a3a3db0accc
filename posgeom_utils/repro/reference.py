"""Committed results of a larger profile, shown beside the numbers a chapter computes at
build time.

Chapter: *Reproduction ledger* (each chapter's last section, At reference scale, shows
these tables).

The book build executes each chapter at the ``default`` profile, within a CPU budget, to
demonstrate the code. The conclusions rest on the ``reference`` profile (``posgeom run
--profile reference``, 23 minutes on a 2-core CPU with 2 Dask workers), whose
``results.json`` files are committed under ``book/results/reference`` and tested to be
fresh (same chapter and science code, see
:func:`posgeom_utils.repro.runner.stale_results`). :func:`scale_table` reads them and
shows, for a list of glued keys, the build-time value beside the reference value, with
intervals and, where a null value is given (chance, zero), whether the interval excludes
it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from .results import results as build_results
from .sources import REPO_ROOT

__all__ = ["Row", "RESULTS_ROOT", "committed", "interval_verdict", "scale_table"]

#: where ``posgeom run`` results are committed, one folder per profile
RESULTS_ROOT = REPO_ROOT / "book" / "results"

ABOVE, BELOW, NOT_DISTINGUISHABLE = "above", "below", "not distinguishable from"
NO_INTERVAL = "no interval"


@dataclass(frozen=True)
class Row:
    """One quantity of a :func:`scale_table`: the glued ``key``, optionally the key of
    its 95% half-width ``ci`` or of its interval's bounds ``low`` and ``high``, how to
    print it (``fmt``), and a ``null`` value (0.5 for chance, 0 for no difference) that
    the interval is compared with. Chapter: *Reproduction ledger*."""

    key: str
    label: str
    ci: str | None = None
    fmt: str = ".3f"
    null: float | None = None
    low: str | None = None
    high: str | None = None


def committed(
    chapter: str, profile: str = "reference", root: Path = RESULTS_ROOT
) -> dict[str, Any] | None:
    """The committed ``results.json`` of ``chapter`` at ``profile`` (``{"results",
    "provenance", ...}``), or None when there is none. Chapter: *Reproduction
    ledger*."""
    import json

    path = Path(root) / profile / chapter / "results.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(float(value)) else None


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


def _format(value: float, fmt: str) -> str:
    return format(int(round(value)) if fmt.endswith("d") else value, fmt)


def _shown(values: Mapping[str, Any], row: Row) -> tuple[str, str]:
    """(value text, verdict text) of ``row`` in ``values``."""
    if row.key not in values:
        return "not computed", ""
    raw = values[row.key]
    value = _number(raw)
    if value is None:
        return str(raw), ""
    low = high = None
    text = _format(value, row.fmt)
    if row.ci:
        half = _number(values.get(row.ci))
        if half is not None:
            low, high = value - half, value + half
            text += f" ± {_format(half, row.fmt)}"
    elif row.low and row.high:
        low, high = _number(values.get(row.low)), _number(values.get(row.high))
        if low is not None and high is not None:
            text += f" [{_format(low, row.fmt)}, {_format(high, row.fmt)}]"
    verdict = interval_verdict(low, high, row.null) if row.null is not None else ""
    return text, verdict


def _provenance_text(payload: Mapping[str, Any]) -> str:
    prov = payload.get("provenance", {})
    parts = [f"commit {str(prov.get('commit') or '?')[:10]}"]
    if prov.get("finished") or prov.get("date"):
        parts.append(str(prov.get("finished") or prov.get("date"))[:10])
    if _number(prov.get("wall_seconds")) is not None:
        parts.append(f"{prov['wall_seconds'] / 60:.1f} min")
    if prov.get("device_name"):
        parts.append(str(prov["device_name"]))
    if prov.get("hostname"):
        parts.append(f"host {prov['hostname']}")
    return ", ".join(parts)


def scale_table(
    chapter: str,
    rows: Sequence[Row],
    profile: str = "reference",
    root: Path = RESULTS_ROOT,
    glue_prefix: str = "ref_",
) -> "pd.DataFrame":
    """A table of ``rows``: the value glued in this build beside the committed
    ``profile`` value, each with its interval and, for rows with a ``null``, whether the
    interval excludes it. The reference values and verdicts are also glued as text
    (``ref_<key>``, ``ref_<key>_verdict``; display only, not recorded in this build's
    results), with ``ref_provenance`` (commit, date, wall time, device) and
    ``ref_status`` ("fresh" or why not). Chapter: *Reproduction ledger*."""
    import pandas as pd

    from .runner import stale_results

    payload = committed(chapter, profile, root)
    here = build_results()
    reference = (payload or {}).get("results", {})
    status = "missing: run `posgeom run --profile {0} --chapters {1} --out book/results/{0}`".format(
        profile, chapter
    )
    if payload is not None:
        stale = stale_results(Path(root) / profile)
        status = f"stale ({stale[chapter]})" if chapter in stale else "fresh"
    table = []
    for row in rows:
        build_text, build_verdict = _shown(here, row)
        ref_text, ref_verdict = (
            _shown(reference, row) if payload is not None else ("no committed run", "")
        )
        table.append(
            {
                "quantity": row.label,
                "this build": build_text,
                "this build: verdict": build_verdict,
                f"{profile}": ref_text,
                f"{profile}: verdict": ref_verdict,
            }
        )
        _glue_text(f"{glue_prefix}{row.key}", ref_text)
        _glue_text(f"{glue_prefix}{row.key}_verdict", ref_verdict or "no verdict")
    _glue_text(
        f"{glue_prefix}provenance",
        _provenance_text(payload) if payload is not None else "none",
    )
    _glue_text(f"{glue_prefix}status", status)
    frame = pd.DataFrame(table).set_index("quantity")
    if not any(row.null is not None for row in rows):
        frame = frame.drop(
            columns=["this build: verdict", f"{profile}: verdict"]
        )
    return frame


def _glue_text(key: str, text: str) -> None:
    """Glue ``text`` for the page only (not into this build's results)."""
    try:
        from myst_nb import glue
    except ImportError:  # pragma: no cover - myst-nb is in requirements.txt
        return
    glue(key, text, display=False)
